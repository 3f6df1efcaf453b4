// Fuzzing the safetensors reader: random bytes, random headers and mutated valid files must give
// either a parsed file whose tensors all lie inside it, or a SafetensorsError, never any other
// exception and never a hang (each property runs under a time limit).

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SafetensorsError } from '../../src/agent/model/errors.ts';
import {
  isFloatDtype,
  parseSafetensors,
  serializeSafetensors,
  tensorBytes,
  tensorToFloat32,
} from '../../src/agent/model/safetensors.ts';

/** Parse; on success check every tensor is readable and inside the file. Returns 'ok' or 'error'. */
function parseOrTypedError(bytes: Uint8Array): 'ok' | 'error' {
  try {
    const file = parseSafetensors(bytes, 'fuzz.safetensors');
    const dataStart = 8 + file.headerLength;
    for (const [name, entry] of file.tensors) {
      if (dataStart + entry.end > bytes.length) throw new Error(`tensor ${name} reaches past the file`);
      expect(tensorBytes(file, name).length).toBe(entry.end - entry.begin);
      if (isFloatDtype(entry.dtype)) tensorToFloat32(file, name);
    }
    return 'ok';
  } catch (e) {
    if (e instanceof SafetensorsError && e.file === 'fuzz.safetensors') return 'error';
    throw e; // any other exception fails the property
  }
}

/** A header with the right 8-byte length prefix around arbitrary text. */
function withHeader(text: string, data: Uint8Array): Uint8Array {
  const json = new TextEncoder().encode(text);
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setUint32(0, json.length, true);
  out.set(json, 8);
  out.set(data, 8 + json.length);
  return out;
}

const VALID = serializeSafetensors({
  'model.embed_tokens.weight': {
    dtype: 'BF16',
    shape: [4, 2],
    data: Uint8Array.from({ length: 16 }, (_, i) => i * 7),
  },
  'model.norm.weight': { dtype: 'F32', shape: [2], data: new Uint8Array(new Float32Array([1, 2]).buffer) },
  'lm_head.weight': { dtype: 'F16', shape: [4, 2], data: Uint8Array.from({ length: 16 }, (_, i) => 255 - i) },
  ids: { dtype: 'I64', shape: [1], data: new Uint8Array(8) },
});

const LIMIT = { interruptAfterTimeLimit: 4000, markInterruptAsFailure: false } as const;

describe('safetensors reader under fuzzing', () => {
  it('the seed file parses', () => {
    expect(parseOrTypedError(VALID)).toBe('ok');
  });

  it('random bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        parseOrTypedError(bytes);
      }),
      { numRuns: 1000, ...LIMIT },
    );
  });

  it('random bytes behind a plausible header length', () => {
    fc.assert(
      fc.property(fc.nat({ max: 400 }), fc.uint8Array({ maxLength: 300 }), (n, rest) => {
        const bytes = new Uint8Array(8 + rest.length);
        new DataView(bytes.buffer).setUint32(0, n, true);
        bytes.set(rest, 8);
        parseOrTypedError(bytes);
      }),
      { numRuns: 1000, ...LIMIT },
    );
  });

  it('arbitrary JSON values as header and tensor entries', () => {
    const entry = fc.oneof(
      fc.anything(),
      fc.record({
        dtype: fc.oneof(
          fc.constantFrom('F32', 'F16', 'BF16', 'I64', 'U8', 'BOOL', 'F8_E4M3', 'Q4'),
          fc.anything(),
        ),
        shape: fc.oneof(fc.array(fc.integer({ min: -2, max: 6 }), { maxLength: 4 }), fc.anything()),
        data_offsets: fc.oneof(
          fc.tuple(fc.integer({ min: -4, max: 64 }), fc.integer({ min: -4, max: 64 })),
          fc.anything(),
        ),
      }),
    );
    fc.assert(
      fc.property(
        fc.oneof(fc.dictionary(fc.string(), entry, { maxKeys: 5 }), fc.anything()),
        fc.uint8Array({ maxLength: 64 }),
        (header, data) => {
          const text = JSON.stringify(header) ?? 'undefined';
          parseOrTypedError(withHeader(text, data));
        },
      ),
      { numRuns: 1000, ...LIMIT },
    );
  });

  it('mutated valid files: byte flips, truncation, insertion', () => {
    const mutation = fc.oneof(
      fc.record({
        kind: fc.constant('flip' as const),
        at: fc.nat(),
        value: fc.integer({ min: 0, max: 255 }),
      }),
      fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
      fc.record({
        kind: fc.constant('insert' as const),
        at: fc.nat(),
        bytes: fc.uint8Array({ minLength: 1, maxLength: 8 }),
      }),
    );
    const outcomes = { ok: 0, error: 0 };
    fc.assert(
      fc.property(fc.array(mutation, { minLength: 1, maxLength: 4 }), (mutations) => {
        let bytes = VALID.slice();
        for (const m of mutations) {
          const at = m.at % (bytes.length + 1);
          if (m.kind === 'flip' && at < bytes.length) bytes[at] = m.value;
          if (m.kind === 'truncate') bytes = bytes.slice(0, at);
          if (m.kind === 'insert') {
            const next = new Uint8Array(bytes.length + m.bytes.length);
            next.set(bytes.subarray(0, at));
            next.set(m.bytes, at);
            next.set(bytes.subarray(at), at + m.bytes.length);
            bytes = next;
          }
        }
        outcomes[parseOrTypedError(bytes)]++;
      }),
      { numRuns: 2000, ...LIMIT },
    );
    // Both outcomes happen: flips inside the data section still parse, most others do not.
    expect(outcomes.ok).toBeGreaterThan(0);
    expect(outcomes.error).toBeGreaterThan(0);
  });

  it('mutated header text: digits and quotes changed inside the JSON', () => {
    const headerLength = new DataView(VALID.buffer).getUint32(0, true);
    const header = new TextDecoder().decode(VALID.subarray(8, 8 + headerLength));
    const data = VALID.subarray(8 + headerLength);
    fc.assert(
      fc.property(fc.nat(), fc.constantFrom('0', '9', '-', '"', ',', ']', '}', 'e', ' ', '1'), (at, ch) => {
        const i = at % header.length;
        const text = header.slice(0, i) + ch + header.slice(i + 1);
        parseOrTypedError(withHeader(text, data));
      }),
      { numRuns: 2000, ...LIMIT },
    );
  });
});
