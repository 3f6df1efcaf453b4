// loadCheckpoint / saveCheckpoint: round trips (bit-exact, byte-identical re-save in F32, F16 and
// BF16), sharded files, and every way files can fail to fit together.

import { describe, expect, it } from 'vitest';
import {
  type Checkpoint,
  type LoadCheckpointOptions,
  loadCheckpoint,
  saveCheckpoint,
} from '../../src/agent/model/checkpoint.ts';
import { parseModelConfig, serializeModelConfig } from '../../src/agent/model/config.ts';
import {
  CheckpointError,
  ModelSourceError,
  ModelTooLargeError,
  SafetensorsError,
} from '../../src/agent/model/errors.ts';
import {
  parseSafetensors,
  serializeSafetensors,
  serializeShardIndex,
  type TensorToWrite,
} from '../../src/agent/model/safetensors.ts';
import { type ModelSource, memorySource } from '../../src/agent/model/sources.ts';
import {
  makeTinyCheckpoint,
  type TinyCheckpointSpec,
  tinyCheckpointTensors,
  tinySpec,
} from '../../src/agent/model/tiny-checkpoints.ts';
import { sameBytes } from './helpers.ts';

const QWEN2 = tinySpec('tiny-qwen2-v512');
const QWEN3_BF16 = tinySpec('tiny-qwen3-bf16-v512');
// An F16 small-vocab variant made just for this test (the shipped F16 one has the real vocabulary).
const QWEN2_F16: TinyCheckpointSpec = { ...QWEN2, name: 'test-f16', dtype: 'F16', seed: 42 };

const load = (files: Map<string, Uint8Array | string>, options?: LoadCheckpointOptions) =>
  loadCheckpoint(memorySource(files), options);

async function loadError(promise: Promise<Checkpoint>): Promise<Error> {
  try {
    await promise;
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected loading to fail');
}

/** Rewrite model.safetensors of a file set with `edit` applied to its tensors. */
function editWeights(
  files: Map<string, Uint8Array>,
  edit: (tensors: Map<string, TensorToWrite>) => void,
): Map<string, Uint8Array> {
  const file = parseSafetensors(files.get('model.safetensors')!);
  const tensors = new Map<string, TensorToWrite>();
  const dataStart = 8 + file.headerLength;
  for (const [name, e] of file.tensors) {
    tensors.set(name, {
      dtype: e.dtype,
      shape: e.shape,
      data: file.bytes.subarray(dataStart + e.begin, dataStart + e.end),
    });
  }
  edit(tensors);
  return new Map([...files, ['model.safetensors', serializeSafetensors(tensors)]]);
}

describe('save -> load', () => {
  it.each([QWEN2, QWEN2_F16, QWEN3_BF16])(
    '$name: values, config and generation config survive',
    async (spec) => {
      const files = makeTinyCheckpoint(spec);
      expect([...files.keys()]).toEqual(['config.json', 'generation_config.json', 'model.safetensors']);
      const ckpt = await load(files);
      expect(ckpt.warnings).toEqual([]);
      expect(ckpt.weightFiles).toEqual(['model.safetensors']);
      expect(ckpt.config.torchDtype).toBe({ F32: 'float32', F16: 'float16', BF16: 'bfloat16' }[spec.dtype]);
      for (const [name, t] of tinyCheckpointTensors(spec)) {
        const loaded = ckpt.tensors.get(name)!;
        expect(loaded.dtype).toBe(spec.dtype);
        expect(loaded.shape).toEqual(t.shape);
        expect(sameBytes(loaded.data, t.data)).toBe(true);
      }
    },
  );

  it.each([QWEN2, QWEN2_F16, QWEN3_BF16])(
    '$name: re-saving a loaded checkpoint is byte-identical',
    async (spec) => {
      const files = makeTinyCheckpoint(spec);
      const ckpt = await load(files);
      const again = saveCheckpoint({
        config: ckpt.config,
        generationConfig: ckpt.generationConfig,
        tensors: ckpt.tensors,
        dtype: spec.dtype,
      });
      expect([...again.keys()]).toEqual([...files.keys()]);
      for (const [name, bytes] of files) expect(sameBytes(again.get(name)!, bytes), name).toBe(true);
    },
  );

  it('special values (NaN payloads, inf, -0, subnormals) survive BF16 and F16 save/load/save bit for bit', async () => {
    for (const spec of [QWEN3_BF16, QWEN2_F16]) {
      const tensors = tinyCheckpointTensors(spec);
      const norm = tensors.get('model.norm.weight')!.data;
      const bits = new Uint32Array(norm.buffer, norm.byteOffset, norm.length);
      // Values exactly representable in both F16 and BF16, as float32 bit patterns.
      const specials = [0x7fc00000, 0x7f810000, 0xff800000, 0x7f800000, 0x80000000, 0x37800000, 0x38000000];
      if (spec.dtype === 'BF16') specials.push(0x00010000); // a bfloat16 subnormal (f32 subnormal)
      specials.forEach((b, i) => {
        bits[i] = b;
      });
      const config = (await load(makeTinyCheckpoint(spec))).config;
      const saved = saveCheckpoint({ config, tensors, dtype: spec.dtype });
      const loaded = await load(saved);
      const back = loaded.tensors.get('model.norm.weight')!.data;
      expect([...new Uint32Array(back.buffer, back.byteOffset, specials.length)]).toEqual(specials);
      const resaved = saveCheckpoint({ config, tensors: loaded.tensors, dtype: spec.dtype });
      expect(sameBytes(resaved.get('model.safetensors')!, saved.get('model.safetensors')!)).toBe(true);
    }
  });

  it('converts between dtypes on save, rounding to nearest even', async () => {
    const ckpt = await load(makeTinyCheckpoint(QWEN2));
    const bf16 = await load(saveCheckpoint({ ...ckpt, dtype: 'BF16' }));
    expect(bf16.config.torchDtype).toBe('bfloat16');
    const a = ckpt.tensors.get('model.embed_tokens.weight')!.data;
    const b = bf16.tensors.get('model.embed_tokens.weight')!.data;
    for (let i = 0; i < a.length; i++)
      expect(Math.abs(a[i] - b[i])).toBeLessThanOrEqual(Math.abs(a[i]) * 2 ** -8);
  });

  it("keepRaw exposes each tensor's file bytes", async () => {
    const files = makeTinyCheckpoint(QWEN3_BF16);
    const ckpt = await load(files, { keepRaw: true });
    const raw = ckpt.tensors.get('model.layers.0.self_attn.q_norm.weight')!.raw!;
    expect(raw.length).toBe(32 * 2);
    expect(new Uint16Array(raw.slice().buffer)[0] << 16).toBe(
      new Uint32Array(ckpt.tensors.get('model.layers.0.self_attn.q_norm.weight')!.data.buffer)[0] | 0,
    );
  });

  it('saveCheckpoint refuses tensors that do not match the config', () => {
    const spec = QWEN2;
    const config = parseModelConfig(new TextDecoder().decode(makeTinyCheckpoint(spec).get('config.json')));
    const tensors = tinyCheckpointTensors(spec);
    tensors.delete('model.norm.weight');
    expect(() => saveCheckpoint({ config, tensors })).toThrow(CheckpointError);
    const wrongLength = tinyCheckpointTensors(spec);
    wrongLength.get('model.norm.weight')!.data = new Float32Array(3);
    expect(() => saveCheckpoint({ config, tensors: wrongLength })).toThrow(
      /tensor 'model.norm.weight' has 3 values but shape \[64\] needs 64/,
    );
  });
});

describe('sharded checkpoints', () => {
  /** Split a single-file checkpoint into shards by a tensor -> shard function. */
  function shard(
    files: Map<string, Uint8Array>,
    shardOf: (name: string, i: number) => number,
    count: number,
  ) {
    const file = parseSafetensors(files.get('model.safetensors')!);
    const dataStart = 8 + file.headerLength;
    const groups = Array.from({ length: count }, () => new Map<string, TensorToWrite>());
    const weightMap = new Map<string, string>();
    const shardName = (k: number) =>
      `model-${String(k + 1).padStart(5, '0')}-of-${String(count).padStart(5, '0')}.safetensors`;
    [...file.tensors].forEach(([name, e], i) => {
      const k = shardOf(name, i);
      groups[k].set(name, {
        dtype: e.dtype,
        shape: e.shape,
        data: file.bytes.subarray(dataStart + e.begin, dataStart + e.end),
      });
      weightMap.set(name, shardName(k));
    });
    const out = new Map([...files].filter(([n]) => n !== 'model.safetensors'));
    groups.forEach((g, k) => {
      out.set(shardName(k), serializeSafetensors(g));
    });
    out.set('model.safetensors.index.json', new TextEncoder().encode(serializeShardIndex(weightMap, 0)));
    return { files: out, weightMap, shardName };
  }

  it('loads the same tensors as the single file', async () => {
    const single = makeTinyCheckpoint(QWEN2);
    const { files } = shard(single, (_, i) => i % 3, 3);
    const a = await load(single);
    const b = await load(files);
    expect(b.weightFiles).toHaveLength(3);
    for (const [name, t] of a.tensors) expect(sameBytes(b.tensors.get(name)!.data, t.data), name).toBe(true);
  });

  it('index naming a tensor its shard does not have', async () => {
    const { files, weightMap, shardName } = shard(makeTinyCheckpoint(QWEN2), (_, i) => i % 2, 2);
    weightMap.set('model.layers.9.mlp.up_proj.weight', shardName(1));
    files.set('model.safetensors.index.json', new TextEncoder().encode(serializeShardIndex(weightMap, 0)));
    const e = await loadError(load(files));
    expect(e).toBeInstanceOf(CheckpointError);
    expect(e.message).toBe(
      "model-00002-of-00002.safetensors: has no tensor 'model.layers.9.mlp.up_proj.weight' although model.safetensors.index.json says it does",
    );
  });

  it('a tensor in the wrong shard, a tensor in two shards, a shard not listed', async () => {
    const base = shard(makeTinyCheckpoint(QWEN2), (name) => (name === 'model.norm.weight' ? 1 : 0), 2);
    const encodeIndex = (m: Map<string, string>) => new TextEncoder().encode(serializeShardIndex(m, 0));

    // The index says shard 1 has model.norm.weight, but it is in shard 2.
    const wrong = new Map(base.files);
    wrong.set(
      'model.safetensors.index.json',
      encodeIndex(new Map([...base.weightMap, ['model.norm.weight', base.shardName(0)]])),
    );
    const wrongError = await loadError(load(wrong));
    expect(wrongError.message).toBe(
      "model-00001-of-00002.safetensors: has no tensor 'model.norm.weight' although model.safetensors.index.json says it does",
    );

    // Shard 2 also carries a tensor that shard 1 has.
    const dup = new Map(base.files);
    const shard2 = editWeights(new Map([['model.safetensors', dup.get(base.shardName(1))!]]), (t) => {
      t.set('model.embed_tokens.weight', {
        dtype: 'F32',
        shape: [512, 64],
        data: new Uint8Array(512 * 64 * 4),
      });
    });
    dup.set(base.shardName(1), shard2.get('model.safetensors')!);
    const dupError = await loadError(load(dup));
    expect(dupError).toBeInstanceOf(CheckpointError);
    expect(dupError.message).toBe(
      "model-00002-of-00002.safetensors: tensor 'model.embed_tokens.weight' is also in model-00001-of-00002.safetensors",
    );

    // Shard 1 carries model.norm.weight too, which the index puts in shard 2.
    const misplaced = new Map(base.files);
    const shard1 = editWeights(new Map([['model.safetensors', misplaced.get(base.shardName(0))!]]), (t) => {
      t.set('model.norm.weight', { dtype: 'F32', shape: [64], data: new Uint8Array(256) });
    });
    misplaced.set(base.shardName(0), shard1.get('model.safetensors')!);
    expect((await loadError(load(misplaced))).message).toBe(
      "model-00001-of-00002.safetensors: has tensor 'model.norm.weight' but model.safetensors.index.json puts it in model-00002-of-00002.safetensors",
    );

    // A tensor no index entry mentions: ignored with a warning.
    const unlisted = new Map(base.files);
    const extra = editWeights(new Map([['model.safetensors', unlisted.get(base.shardName(0))!]]), (t) => {
      t.set('extra.weight', { dtype: 'F32', shape: [1], data: new Uint8Array(4) });
    });
    unlisted.set(base.shardName(0), extra.get('model.safetensors')!);
    expect((await load(unlisted)).warnings).toEqual([
      "model-00001-of-00002.safetensors: ignoring tensor 'extra.weight', which model.safetensors.index.json does not list",
    ]);
  });

  it('a shard file missing from the source', async () => {
    const { files, shardName } = shard(makeTinyCheckpoint(QWEN2), (_, i) => i % 2, 2);
    files.delete(shardName(1));
    const e = await loadError(load(files));
    expect(e).toBeInstanceOf(ModelSourceError);
    expect(e.message).toBe('model-00002-of-00002.safetensors: not in memory');
  });
});

describe('files that do not fit together', () => {
  const base = () => makeTinyCheckpoint(QWEN2);

  it('no config.json / no weights / one tokenizer file without the other', async () => {
    const noConfig = base();
    noConfig.delete('config.json');
    expect((await loadError(load(noConfig))).message).toBe(
      'config.json: missing from memory (every checkpoint needs one)',
    );
    const noWeights = base();
    noWeights.delete('model.safetensors');
    expect((await loadError(load(noWeights))).message).toBe(
      'model.safetensors: missing from memory, and there is no model.safetensors.index.json either',
    );
    const halfTokenizer = new Map<string, Uint8Array | string>([...base(), ['tokenizer_config.json', '{}']]);
    expect((await loadError(load(halfTokenizer))).message).toBe(
      'tokenizer.json: missing from memory although tokenizer_config.json is there',
    );
    expect((await loadError(load(base(), { requireTokenizer: true }))).message).toMatch(
      /tokenizer\.json: missing .*required/,
    );
  });

  it('a tokenizer with more tokens than the embedding has rows', async () => {
    // A minimal tokenizer.json whose largest id is 151668, like Qwen's.
    const tokenizer = JSON.stringify({
      model: { vocab: { a: 0, b: 1 } },
      added_tokens: [{ id: 151668, content: '</think>' }],
    });
    const files = new Map<string, Uint8Array | string>([
      ...base(),
      ['tokenizer.json', tokenizer],
      ['tokenizer_config.json', '{}'],
    ]);
    const e = await loadError(load(files));
    expect(e).toBeInstanceOf(CheckpointError);
    expect(e.message).toBe(
      "config.json: vocab_size 512 is smaller than the tokenizer's 151669 tokens: token ids 512..151668 have no embedding row",
    );
  });

  it('config and tensor shapes disagree', async () => {
    const files = base();
    const config = JSON.parse(new TextDecoder().decode(files.get('config.json')));
    config.intermediate_size = 96;
    files.set('config.json', new TextEncoder().encode(JSON.stringify(config)));
    const e = await loadError(load(files));
    expect(e).toBeInstanceOf(CheckpointError);
    expect(e.message).toBe(
      "model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64] but config.json implies [96, 64]",
    );
  });

  it('a missing tensor, and an unexpected one (error, or warning on request)', async () => {
    const missing = editWeights(base(), (t) => t.delete('model.layers.1.post_attention_layernorm.weight'));
    expect((await loadError(load(missing))).message).toBe(
      "model.safetensors: missing tensor 'model.layers.1.post_attention_layernorm.weight' [64]",
    );
    const extra = editWeights(base(), (t) =>
      t.set('model.layers.0.self_attn.o_proj.bias', { dtype: 'F32', shape: [64], data: new Uint8Array(256) }),
    );
    expect((await loadError(load(extra))).message).toMatch(
      /unexpected tensor 'model.layers.0.self_attn.o_proj.bias'/,
    );
    const warned = await load(extra, { unexpectedTensors: 'warn' });
    expect(warned.warnings).toEqual([
      "model.safetensors: ignoring unexpected tensor 'model.layers.0.self_attn.o_proj.bias'",
    ]);
    expect(warned.tensors.has('model.layers.0.self_attn.o_proj.bias')).toBe(false);
  });

  it('a weight stored as integers', async () => {
    const files = editWeights(base(), (t) => {
      t.set('model.norm.weight', { dtype: 'I32', shape: [64], data: new Uint8Array(256) });
    });
    const e = await loadError(load(files));
    expect(e).toBeInstanceOf(SafetensorsError);
    expect(e.message).toBe(
      "model.safetensors: tensor 'model.norm.weight' has dtype I32; only F32, F16 and BF16 weights can be loaded",
    );
  });

  it('a malformed model.safetensors names that file', async () => {
    const files = base();
    files.set('model.safetensors', files.get('model.safetensors')!.subarray(0, 5000)); // a cut download
    const e = await loadError(load(files));
    expect(e).toBeInstanceOf(SafetensorsError);
    expect(e.message).toMatch(/^model\.safetensors: tensor '.*' data_offsets \[\d+, \d+\] are out of range/);
  });

  it('a model too large for the adapter is refused before the weights are read', async () => {
    const reads: string[] = [];
    const inner = memorySource(base());
    const source: ModelSource = {
      ...inner,
      readBytes: (name, p) => {
        reads.push(name);
        return inner.readBytes(name, p);
      },
      readText: (name, p) => {
        reads.push(name);
        return inner.readText(name, p);
      },
    };
    const e = await loadError(
      loadCheckpoint(source, {
        adapterLimits: { maxBufferSize: 2 ** 30, maxStorageBufferBindingSize: 16384 },
      }),
    );
    expect(e).toBeInstanceOf(ModelTooLargeError);
    expect(e.message).toBe(
      "config.json: model too large for this GPU: tensor 'model.layers.0.mlp.gate_proj.weight' needs one binding of 32.0 KiB (32768 bytes) but this adapter's maxStorageBufferBindingSize is 16.0 KiB (16384 bytes)",
    );
    expect(reads).toEqual(['config.json']);
  });

  it('config.json written by serializeModelConfig loads (sorted keys, JS number spelling)', async () => {
    const files = base();
    const config = parseModelConfig(new TextDecoder().decode(files.get('config.json')));
    expect(new TextDecoder().decode(files.get('config.json'))).toBe(serializeModelConfig(config));
  });
});
