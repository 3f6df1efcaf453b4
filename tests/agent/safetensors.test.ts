// safetensors reader and writer: the writer against byte vectors from the Rust crate's own tests,
// its tensor ordering and alignment, round trips, and one clear SafetensorsError per kind of
// malformed file.

import { describe, expect, it } from 'vitest';
import { SafetensorsError } from '../../src/agent/model/errors.ts';
import {
  DTYPE_BYTES,
  parseSafetensors,
  parseShardIndex,
  type SafetensorsDtype,
  serializeSafetensors,
  serializeShardIndex,
  type TensorToWrite,
  tensorBytes,
  tensorToFloat32,
} from '../../src/agent/model/safetensors.ts';

const f32Bytes = (values: number[]) => new Uint8Array(new Float32Array(values).buffer);

/** A file with a hand-written header and data section. */
function rawFile(
  header: string | object,
  data: Uint8Array = new Uint8Array(0),
  declaredLength?: number,
): Uint8Array {
  const json = new TextEncoder().encode(typeof header === 'string' ? header : JSON.stringify(header));
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setUint32(0, declaredLength ?? json.length, true);
  out.set(json, 8);
  out.set(data, 8 + json.length);
  return out;
}

function expectError(bytes: Uint8Array, problem: RegExp): void {
  let error: unknown;
  try {
    parseSafetensors(bytes, 'shard-7.safetensors');
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(SafetensorsError);
  const e = error as SafetensorsError;
  expect(e.file).toBe('shard-7.safetensors');
  expect(e.message.startsWith('shard-7.safetensors: ')).toBe(true);
  expect(e.problem).toMatch(problem);
}

describe('writer matches the Rust safetensors crate byte for byte', () => {
  // Expected bytes are from the crate's tests (safetensors/src/tensor.rs: test_serialization,
  // test_serialization_forced_alignement, test_empty).
  const zeroToFive = f32Bytes([0, 1, 2, 3, 4, 5]);

  it('one F32 tensor, header already a multiple of 8', () => {
    const out = serializeSafetensors(
      { 'attn.0': { dtype: 'F32', shape: [1, 2, 3], data: zeroToFive } },
      null,
    );
    expect([...out]).toEqual([
      64, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 46, 48, 34, 58, 123, 34, 100, 116, 121, 112, 101,
      34, 58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34, 58, 91, 49, 44, 50, 44, 51, 93, 44, 34,
      100, 97, 116, 97, 95, 111, 102, 102, 115, 101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 0, 0,
      0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0, 160, 64,
    ]);
  });

  it('header padded with spaces to a multiple of 8', () => {
    const out = serializeSafetensors(
      { attn0: { dtype: 'F32', shape: [1, 1, 2, 3], data: zeroToFive } },
      null,
    );
    expect([...out]).toEqual([
      72, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 48, 34, 58, 123, 34, 100, 116, 121, 112, 101, 34,
      58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34, 58, 91, 49, 44, 49, 44, 50, 44, 51, 93, 44,
      34, 100, 97, 116, 97, 95, 111, 102, 102, 115, 101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125,
      32, 32, 32, 32, 32, 32, 32, 0, 0, 0, 0, 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64, 0, 0,
      160, 64,
    ]);
  });

  it('empty file, with and without __metadata__', () => {
    expect([...serializeSafetensors({}, null)]).toEqual([
      8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32,
    ]);
    expect([...serializeSafetensors({}, { framework: 'pt' })]).toEqual([
      40, 0, 0, 0, 0, 0, 0, 0, 123, 34, 95, 95, 109, 101, 116, 97, 100, 97, 116, 97, 95, 95, 34, 58, 123, 34,
      102, 114, 97, 109, 101, 119, 111, 114, 107, 34, 58, 34, 112, 116, 34, 125, 125, 32, 32, 32, 32, 32,
    ]);
  });

  it('writes {"format":"pt"} metadata by default, as save_pretrained does', () => {
    const out = serializeSafetensors({ w: { dtype: 'F32', shape: [1], data: f32Bytes([1]) } });
    const header = new TextDecoder().decode(out.subarray(8, 8 + out[0]));
    expect(header.trimEnd()).toBe(
      '{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    );
  });

  it('orders tensors by dtype alignment (largest first), then by name, each aligned to its size', () => {
    const t = (dtype: SafetensorsDtype, n: number): TensorToWrite => ({
      dtype,
      shape: [n],
      data: new Uint8Array(n * DTYPE_BYTES[dtype]).fill(7),
    });
    const out = serializeSafetensors({
      'b.f16': t('F16', 3),
      'a.f16': t('F16', 1),
      'z.f32': t('F32', 1),
      'a.u8': t('U8', 5),
      'm.bf16': t('BF16', 1),
      'a.i64': t('I64', 1),
      'b.f32': t('F32', 2),
    });
    const file = parseSafetensors(out);
    expect([...file.tensors.keys()]).toEqual(['a.i64', 'b.f32', 'z.f32', 'm.bf16', 'a.f16', 'b.f16', 'a.u8']);
    // The header lists them in the same order (serde writes the crate's ordered list).
    const header = new TextDecoder().decode(out.subarray(8, 8 + file.headerLength));
    const order = [...header.matchAll(/"([a-z0-9.]+)":\{"dtype"/g)].map((m) => m[1]);
    expect(order).toEqual([...file.tensors.keys()]);
    expect(file.headerLength % 8).toBe(0);
    for (const entry of file.tensors.values())
      expect((8 + file.headerLength + entry.begin) % DTYPE_BYTES[entry.dtype]).toBe(0);
  });

  it('rejects data whose length does not match dtype x shape', () => {
    expect(() => serializeSafetensors({ w: { dtype: 'F16', shape: [3], data: new Uint8Array(4) } })).toThrow(
      /tensor 'w' has 4 bytes but F16 x \[3\] needs 6/,
    );
  });
});

describe('reader', () => {
  it('round-trips dtypes, shapes, metadata and bytes; re-saving is byte-identical', () => {
    const tensors: Record<string, TensorToWrite> = {
      'model.embed_tokens.weight': {
        dtype: 'BF16',
        shape: [4, 3],
        data: Uint8Array.from({ length: 24 }, (_, i) => i),
      },
      'model.norm.weight': { dtype: 'F32', shape: [3], data: f32Bytes([1, -0, Number.NaN]) },
      scalar: { dtype: 'F16', shape: [], data: new Uint8Array([0x00, 0x3c]) },
      empty: { dtype: 'F32', shape: [0, 5], data: new Uint8Array(0) },
    };
    const bytes = serializeSafetensors(tensors, { format: 'pt', note: 'x' });
    const file = parseSafetensors(bytes);
    expect(file.metadata).toEqual({ format: 'pt', note: 'x' });
    for (const [name, t] of Object.entries(tensors)) {
      const entry = file.tensors.get(name)!;
      expect(entry.dtype).toBe(t.dtype);
      expect(entry.shape).toEqual(t.shape);
      expect([...tensorBytes(file, name)]).toEqual([...t.data]);
    }
    expect(tensorToFloat32(file, 'scalar')[0]).toBe(1);
    const again = new Map(
      [...file.tensors].map(([n, e]) => [n, { dtype: e.dtype, shape: e.shape, data: tensorBytes(file, n) }]),
    );
    expect(serializeSafetensors(again, file.metadata)).toEqual(bytes);
  });

  it('reads files whose header has no metadata, any key order and trailing spaces', () => {
    const header =
      '{"b":{"shape":[1],"data_offsets":[4,8],"dtype":"F32"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}   ';
    const file = parseSafetensors(rawFile(header, f32Bytes([1, 2])));
    expect(file.metadata).toBeNull();
    expect([...file.tensors.keys()]).toEqual(['a', 'b']); // data-section order
    expect(tensorToFloat32(file, 'b')[0]).toBe(2);
  });

  it('refuses to convert non-float tensors, naming the file', () => {
    const file = parseSafetensors(
      serializeSafetensors({ ids: { dtype: 'I32', shape: [1], data: new Uint8Array(4) } }),
      'x.safetensors',
    );
    expect(() => tensorToFloat32(file, 'ids')).toThrow(
      /^x\.safetensors: tensor 'ids' has dtype I32; only F32, F16 and BF16/,
    );
    expect(() => tensorToFloat32(file, 'nope')).toThrow(SafetensorsError);
  });
});

describe('malformed files give a SafetensorsError with the file name and the problem', () => {
  const ok = (begin: number, end: number, dtype = 'F32', shape = [(end - begin) / 4]) => ({
    dtype,
    shape,
    data_offsets: [begin, end],
  });

  it('file shorter than the length prefix', () => expectError(new Uint8Array(5), /5 bytes, too short/));

  it('header length beyond the end of the file', () => {
    expectError(rawFile('{}', new Uint8Array(0), 1000), /header length 1000 goes beyond the end of the file/);
  });

  it('header length above the 100 MB limit (u64 high half set)', () => {
    const bytes = rawFile('{}');
    new DataView(bytes.buffer).setUint32(4, 1, true);
    expectError(bytes, /above the 100000000-byte limit/);
  });

  it('header not UTF-8', () => {
    const bytes = rawFile('{"a":1}');
    bytes[9] = 0xff;
    expectError(bytes, /not valid UTF-8/);
  });

  it('header not JSON', () => expectError(rawFile('{"a": {'), /header is not JSON/));
  it('header JSON but not an object', () => expectError(rawFile('[1,2]'), /not a JSON object/));
  it('tensor entry not an object', () =>
    expectError(rawFile({ w: 5 }), /tensor 'w' header entry is not an object/));
  it('unknown dtype', () =>
    expectError(rawFile({ w: ok(0, 4, 'F128') }, new Uint8Array(4)), /tensor 'w' has unknown dtype "F128"/));
  it('bad shape', () =>
    expectError(
      rawFile({ w: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }),
      /shape \[-1\] is not a list/,
    ));
  it('bad data_offsets', () =>
    expectError(
      rawFile({ w: { dtype: 'F32', shape: [1], data_offsets: [0] } }),
      /data_offsets \[0\] is not \[begin, end\]/,
    ));
  it('offsets ending before they begin', () =>
    expectError(rawFile({ w: ok(8, 4, 'F32', [1]) }, new Uint8Array(8)), /\[8, 4\] end before they begin/));

  it('offsets out of range (truncated data)', () => {
    expectError(
      rawFile({ w: ok(0, 16) }, new Uint8Array(8)),
      /tensor 'w' data_offsets \[0, 16\] are out of range: the data section is 8 bytes/,
    );
  });

  it('offsets not matching dtype x shape', () => {
    expectError(
      rawFile({ w: { dtype: 'BF16', shape: [3], data_offsets: [0, 8] } }, new Uint8Array(8)),
      /hold 8 bytes but BF16 x \[3\] needs 6/,
    );
  });

  it('overlapping tensors', () => {
    expectError(
      rawFile({ a: ok(0, 8), b: ok(4, 12) }, new Uint8Array(12)),
      /tensor 'b' data_offsets \[4, 12\] overlap tensor 'a' \[0, 8\]/,
    );
  });

  it('gap between tensors', () => {
    expectError(
      rawFile({ a: ok(0, 4), b: ok(8, 12) }, new Uint8Array(12)),
      /gap of 4 unused bytes before tensor 'b'/,
    );
  });

  it('trailing bytes after the last tensor', () => {
    expectError(
      rawFile({ a: ok(0, 4) }, new Uint8Array(10)),
      /data section is 10 bytes but the tensors cover 4 \(6 trailing bytes\)/,
    );
  });

  it('__metadata__ with a non-string value', () => {
    expectError(rawFile({ __metadata__: { format: 1 } }), /__metadata__\['format'\] is not a string/);
  });

  it('a shape whose byte size overflows', () => {
    expectError(
      rawFile(
        { w: { dtype: 'F64', shape: [2 ** 30, 2 ** 30, 2 ** 30], data_offsets: [0, 8] } },
        new Uint8Array(8),
      ),
      /too large/,
    );
  });
});

describe('shard index', () => {
  it('parses weight_map and writes it as transformers does', () => {
    const text = serializeShardIndex(
      new Map([
        ['model.norm.weight', 'model-00002-of-00002.safetensors'],
        ['model.embed_tokens.weight', 'model-00001-of-00002.safetensors'],
      ]),
      1234,
    );
    expect(text).toBe(
      '{\n  "metadata": {\n    "total_size": 1234\n  },\n  "weight_map": {\n' +
        '    "model.embed_tokens.weight": "model-00001-of-00002.safetensors",\n' +
        '    "model.norm.weight": "model-00002-of-00002.safetensors"\n  }\n}\n',
    );
    const index = parseShardIndex(text);
    expect(index.metadata).toEqual({ total_size: 1234 });
    expect(index.weightMap.get('model.norm.weight')).toBe('model-00002-of-00002.safetensors');
  });

  it.each([
    ['not json', /not JSON/],
    ['{"metadata": {}}', /no "weight_map" object/],
    [
      '{"weight_map": {"w": "../secret.safetensors"}}',
      /weight_map\['w'\] = "..\/secret.safetensors" is not a file name/,
    ],
    ['{"weight_map": {"w": "/etc/passwd"}}', /is not a file name/],
    ['{"weight_map": {"w": 3}}', /is not a file name/],
  ])('rejects %s', (text, problem) => {
    expect(() => parseShardIndex(text)).toThrow(SafetensorsError);
    expect(() => parseShardIndex(text)).toThrow(problem);
  });
});
