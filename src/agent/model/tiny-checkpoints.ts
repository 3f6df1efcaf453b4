// Tiny random Qwen checkpoints in exact Hugging Face layout, for tests and for the app to load
// without downloading a real model. Seeded and deterministic: the same spec gives the same bytes on
// every machine (only integer PRNG arithmetic and float32 rounding; no Math.log/Math.cos, whose last
// bit may differ between JS engines).
//
// Two families:
//   real vocabulary (151,936 rows, like every Qwen2.5/Qwen3 model) with the Qwen tokenizer files, so
//     the real tokenizer and chat template work end to end. The [151936, 64] embedding is 39 MB in
//     F32, too big for unit tests: use these from scripts and e2e.
//   "-v512": 512-row vocabulary and no tokenizer. For kernel and model math tests only; no tokenizer
//     matches it, token ids are just row numbers.
//
// All share hidden 64, intermediate 128, 2 layers, 4 query heads, 2 kv heads (GQA, 2 query heads per
// kv head). Qwen2 has head_dim 64/4 = 16; Qwen3 has an explicit head_dim 32, so its attention width
// (4 * 32 = 128) differs from hidden_size as in real Qwen3 models.
//
// Weights are uniform with std 0.1 for projections, embeddings and biases (HF initialises with 0.02;
// larger weights give peaked attention and clearly non-uniform logits, so kernel errors show), and
// 1 + uniform(std 0.1) for RMSNorm weights (HF: exactly 1, which would hide a missing weight).

import { type Checkpoint, saveCheckpoint } from './checkpoint.ts';
import {
  type GenerationConfig,
  type ModelConfig,
  parseGenerationConfig,
  parseModelConfig,
} from './config.ts';
import { decodeBf16, decodeF16 } from './dtype.ts';
import { encodeFloat32, type FloatDtype } from './safetensors.ts';
import { expectedTensors } from './weights.ts';

export const QWEN_VOCAB_ROWS = 151936; // embedding rows of every Qwen2.5 / Qwen3 model (tokenizer: 151,669)
export const SMALL_VOCAB_ROWS = 512;

export interface TinyCheckpointSpec {
  name: string;
  arch: 'qwen2' | 'qwen3';
  vocabSize: number;
  tied: boolean;
  dtype: FloatDtype;
  /** Ship Qwen's tokenizer.json + tokenizer_config.json (only with the real vocabulary). */
  withTokenizer: boolean;
  seed: number;
}

export const TINY_CHECKPOINTS: readonly TinyCheckpointSpec[] = [
  {
    name: 'tiny-qwen2',
    arch: 'qwen2',
    vocabSize: QWEN_VOCAB_ROWS,
    tied: false,
    dtype: 'F32',
    withTokenizer: true,
    seed: 1,
  },
  {
    name: 'tiny-qwen2-tied',
    arch: 'qwen2',
    vocabSize: QWEN_VOCAB_ROWS,
    tied: true,
    dtype: 'F32',
    withTokenizer: true,
    seed: 2,
  },
  {
    name: 'tiny-qwen3',
    arch: 'qwen3',
    vocabSize: QWEN_VOCAB_ROWS,
    tied: true,
    dtype: 'F32',
    withTokenizer: true,
    seed: 3,
  },
  {
    name: 'tiny-qwen2-f16',
    arch: 'qwen2',
    vocabSize: QWEN_VOCAB_ROWS,
    tied: false,
    dtype: 'F16',
    withTokenizer: true,
    seed: 4,
  },
  {
    name: 'tiny-qwen3-bf16',
    arch: 'qwen3',
    vocabSize: QWEN_VOCAB_ROWS,
    tied: true,
    dtype: 'BF16',
    withTokenizer: true,
    seed: 5,
  },
  {
    name: 'tiny-qwen2-v512',
    arch: 'qwen2',
    vocabSize: SMALL_VOCAB_ROWS,
    tied: false,
    dtype: 'F32',
    withTokenizer: false,
    seed: 6,
  },
  {
    name: 'tiny-qwen2-tied-v512',
    arch: 'qwen2',
    vocabSize: SMALL_VOCAB_ROWS,
    tied: true,
    dtype: 'F32',
    withTokenizer: false,
    seed: 7,
  },
  {
    name: 'tiny-qwen3-v512',
    arch: 'qwen3',
    vocabSize: SMALL_VOCAB_ROWS,
    tied: false,
    dtype: 'F32',
    withTokenizer: false,
    seed: 8,
  },
  {
    name: 'tiny-qwen3-bf16-v512',
    arch: 'qwen3',
    vocabSize: SMALL_VOCAB_ROWS,
    tied: true,
    dtype: 'BF16',
    withTokenizer: false,
    seed: 9,
  },
];

export function tinySpec(name: string): TinyCheckpointSpec {
  const spec = TINY_CHECKPOINTS.find((s) => s.name === name);
  if (spec === undefined) {
    throw new Error(
      `no tiny checkpoint named '${name}' (have: ${TINY_CHECKPOINTS.map((s) => s.name).join(', ')})`,
    );
  }
  return spec;
}

const TORCH_DTYPE = { F32: 'float32', F16: 'float16', BF16: 'bfloat16' } as const;

/** config.json contents (as transformers would write them for such a model), parsed. */
export function tinyModelConfig(spec: TinyCheckpointSpec): ModelConfig {
  const realVocab = spec.vocabSize === QWEN_VOCAB_ROWS;
  const raw: Record<string, unknown> = {
    architectures: [spec.arch === 'qwen2' ? 'Qwen2ForCausalLM' : 'Qwen3ForCausalLM'],
    model_type: spec.arch,
    vocab_size: spec.vocabSize,
    hidden_size: 64,
    intermediate_size: 128,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    hidden_act: 'silu',
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    rope_scaling: null,
    max_position_embeddings: 32768,
    max_window_layers: 2,
    use_sliding_window: false,
    sliding_window: null,
    attention_dropout: 0,
    initializer_range: 0.02,
    use_cache: true,
    tie_word_embeddings: spec.tied,
    torch_dtype: TORCH_DTYPE[spec.dtype],
    // Qwen's <|endoftext|> and <|im_end|>; the small vocabulary has no such tokens, use rows 0 and 1.
    bos_token_id: realVocab ? 151643 : 0,
    eos_token_id: realVocab ? 151645 : 1,
  };
  if (spec.arch === 'qwen3') {
    raw.head_dim = 32;
    raw.attention_bias = false;
  }
  if (!realVocab) {
    raw.agent_r1_note = 'random tiny model with a 512-row vocabulary for kernel and model math tests only';
  }
  return parseModelConfig(raw, `${spec.name}/config.json`);
}

/** generation_config.json in the style of the Instruct models (Qwen3's sampling defaults for qwen3). */
export function tinyGenerationConfig(spec: TinyCheckpointSpec): GenerationConfig {
  const realVocab = spec.vocabSize === QWEN_VOCAB_ROWS;
  const eos = realVocab ? [151645, 151643] : [1];
  const pad = realVocab ? 151643 : 0;
  const sampling =
    spec.arch === 'qwen3'
      ? { temperature: 0.6, top_p: 0.95, top_k: 20 }
      : { temperature: 0.7, top_p: 0.8, top_k: 20, repetition_penalty: 1.05 };
  return parseGenerationConfig(
    {
      bos_token_id: realVocab ? 151643 : 0,
      eos_token_id: eos,
      pad_token_id: pad,
      do_sample: true,
      ...sampling,
    },
    `${spec.name}/generation_config.json`,
    spec.vocabSize,
  );
}

// ---------------------------------------------------------------------------------------------
// Deterministic random numbers

/** FNV-1a hash of a string to 32 bits: one independent stream per (seed, tensor name). */
export function hash32(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** mulberry32: a small, fast 32-bit PRNG; returns uniforms in [0, 1) with 32-bit resolution. */
export function mulberry32(seed: number): () => number {
  let a = seed | 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SQRT3 = Math.sqrt(3); // uniform on [-a, a] has std a / sqrt(3)

/** Uniform values with mean `mean` and standard deviation `std`, rounded to float32. */
function fillUniform(out: Float32Array, seed: number, mean: number, std: number): void {
  const rand = mulberry32(seed);
  const halfWidth = std * SQRT3;
  for (let i = 0; i < out.length; i++) out[i] = mean + (2 * rand() - 1) * halfWidth;
}

/**
 * The spec's weights as float32, keyed by HF tensor name. For F16/BF16 specs the values are already
 * rounded to that dtype, so they equal what loading the saved file gives back.
 */
export function tinyCheckpointTensors(
  spec: TinyCheckpointSpec,
): Map<string, { shape: number[]; data: Float32Array }> {
  const config = tinyModelConfig(spec);
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const { name, shape } of expectedTensors(config)) {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    const isNorm = name.endsWith('norm.weight'); // input/post_attention_layernorm, q_norm, k_norm, model.norm
    fillUniform(data, hash32(`${spec.seed}:${name}`), isNorm ? 1 : 0, 0.1);
    if (spec.dtype === 'F16') data.set(decodeF16(encodeFloat32(data, 'F16')));
    if (spec.dtype === 'BF16') data.set(decodeBf16(encodeFloat32(data, 'BF16')));
    tensors.set(name, { shape, data });
  }
  return tensors;
}

/**
 * All files of the tiny checkpoint (file name -> bytes), as transformers' save_pretrained lays them
 * out. Real-vocabulary specs need the Qwen tokenizer files (in Node: readQwenTokenizerFiles()).
 */
export function makeTinyCheckpoint(
  spec: TinyCheckpointSpec,
  tokenizerFiles?: ReadonlyMap<string, string>,
): Map<string, Uint8Array> {
  if (spec.withTokenizer && tokenizerFiles === undefined) {
    throw new Error(`${spec.name} ships the Qwen tokenizer: pass its files (Node: readQwenTokenizerFiles())`);
  }
  return saveCheckpoint({
    config: tinyModelConfig(spec),
    generationConfig: tinyGenerationConfig(spec),
    tensors: tinyCheckpointTensors(spec),
    dtype: spec.dtype,
    tokenizerFiles: spec.withTokenizer ? tokenizerFiles : undefined,
  });
}

/** The in-memory equivalent of loading the tiny checkpoint (no tokenizer), for math tests. */
export function tinyCheckpoint(spec: TinyCheckpointSpec): Pick<Checkpoint, 'config' | 'tensors'> {
  const tensors: Checkpoint['tensors'] = new Map();
  for (const [name, t] of tinyCheckpointTensors(spec)) tensors.set(name, { dtype: spec.dtype, ...t });
  return { config: tinyModelConfig(spec), tensors };
}
