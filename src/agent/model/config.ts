// config.json and generation_config.json of Hugging Face Qwen2 / Qwen2.5 / Qwen3 checkpoints.
//
// Defaults follow transformers' Qwen2Config / Qwen3Config for keys that only tune behaviour
// (rms_norm_eps 1e-6, rope_theta 10000, tie_word_embeddings false, max_position_embeddings 32768,
// Qwen3 attention_bias false and head_dim 128). The size keys have no default we would trust (HF's are
// a 7B model's), so a config without them is rejected.
//
// The two architectures differ only in attention:
//   Qwen2 (Qwen2, Qwen2.5): q/k/v projections have a bias, o_proj has none; head_dim = hidden/heads.
//   Qwen3: q/k/v/o biases only when attention_bias (false in every released model); an RMSNorm over
//          each head's head_dim for q and k (q_norm, k_norm) before RoPE; head_dim explicit (and
//          heads * head_dim may differ from hidden_size, e.g. Qwen3-0.6B: 16 * 128 = 2048 != 1024).

import { ModelConfigError } from './errors.ts';

export type Architecture = 'Qwen2ForCausalLM' | 'Qwen3ForCausalLM';
export type TorchDtype = 'float32' | 'float16' | 'bfloat16';

export interface ModelConfig {
  architecture: Architecture;
  modelType: 'qwen2' | 'qwen3';
  vocabSize: number; // rows of embed_tokens (and lm_head); >= the tokenizer's token count
  hiddenSize: number; // d_model
  intermediateSize: number; // MLP width
  numLayers: number;
  numHeads: number; // query heads
  numKvHeads: number; // key/value heads (GQA: each serves numHeads / numKvHeads query heads)
  headDim: number;
  rmsNormEps: number;
  ropeTheta: number;
  maxPositionEmbeddings: number;
  tieWordEmbeddings: boolean; // lm_head shares embed_tokens' weight; no lm_head.weight in the file
  qkvBias: boolean; // q_proj/k_proj/v_proj have a bias
  oBias: boolean; // o_proj has a bias
  qkNorm: boolean; // Qwen3's per-head q_norm / k_norm
  torchDtype: TorchDtype | null; // the dtype the weights were saved in, when the config says
  bosTokenId: number | null;
  eosTokenIds: number[]; // config.json's eos_token_id, as a list
  /** The parsed JSON, kept so saving writes back keys we do not model (transformers_version, ...). */
  raw: Readonly<Record<string, unknown>>;
}

export interface GenerationConfig {
  bosTokenId: number | null;
  eosTokenIds: number[]; // generation stops at any of these
  padTokenId: number | null;
  doSample: boolean;
  temperature: number;
  topP: number;
  topK: number;
  repetitionPenalty: number;
  maxNewTokens: number | null;
  raw: Readonly<Record<string, unknown>>;
}

// ---------------------------------------------------------------------------------------------
// Field readers: each names the file and the key in its error.

type Json = Record<string, unknown>;

function parseObject(text: string | Json, file: string): Json {
  let json: unknown = text;
  if (typeof text === 'string') {
    try {
      json = JSON.parse(text);
    } catch (e) {
      throw new ModelConfigError(file, `not JSON (${(e as Error).message})`);
    }
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new ModelConfigError(file, 'not a JSON object');
  }
  return json as Json;
}

function present(json: Json, key: string): boolean {
  return json[key] !== undefined && json[key] !== null;
}

function positiveInt(json: Json, key: string, file: string, fallback?: number): number {
  if (!present(json, key)) {
    if (fallback !== undefined) return fallback;
    throw new ModelConfigError(file, `missing required field "${key}"`);
  }
  const v = json[key];
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) {
    throw new ModelConfigError(file, `"${key}" must be a positive integer, got ${JSON.stringify(v)}`);
  }
  return v;
}

function positiveNumber(json: Json, key: string, file: string, fallback: number): number {
  if (!present(json, key)) return fallback;
  const v = json[key];
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
    throw new ModelConfigError(file, `"${key}" must be a positive number, got ${JSON.stringify(v)}`);
  }
  return v;
}

function boolean(json: Json, key: string, file: string, fallback: boolean): boolean {
  if (!present(json, key)) return fallback;
  const v = json[key];
  if (typeof v !== 'boolean')
    throw new ModelConfigError(file, `"${key}" must be true or false, got ${JSON.stringify(v)}`);
  return v;
}

function tokenId(json: Json, key: string, file: string, vocabSize: number | null): number | null {
  if (!present(json, key)) return null;
  const v = json[key];
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw new ModelConfigError(file, `"${key}" must be a token id, got ${JSON.stringify(v)}`);
  }
  if (vocabSize !== null && v >= vocabSize) {
    throw new ModelConfigError(file, `"${key}" ${v} is not below vocab_size ${vocabSize}`);
  }
  return v;
}

/** eos_token_id may be one id or a list (Qwen2.5-Instruct's generation_config: [151645, 151643]). */
function tokenIdList(json: Json, key: string, file: string, vocabSize: number | null): number[] {
  if (!present(json, key)) return [];
  const v = json[key];
  const list = Array.isArray(v) ? v : [v];
  return list.map((id, i) => {
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) {
      throw new ModelConfigError(file, `"${key}"[${i}] must be a token id, got ${JSON.stringify(id)}`);
    }
    if (vocabSize !== null && id >= vocabSize) {
      throw new ModelConfigError(file, `"${key}" ${id} is not below vocab_size ${vocabSize}`);
    }
    return id;
  });
}

// ---------------------------------------------------------------------------------------------
// config.json

const ARCHITECTURES: Record<string, { architecture: Architecture; modelType: 'qwen2' | 'qwen3' }> = {
  Qwen2ForCausalLM: { architecture: 'Qwen2ForCausalLM', modelType: 'qwen2' },
  Qwen3ForCausalLM: { architecture: 'Qwen3ForCausalLM', modelType: 'qwen3' },
};

/** Parse config.json (text or already-parsed object). Throws ModelConfigError naming `file`. */
export function parseModelConfig(text: string | Json, file = 'config.json'): ModelConfig {
  const json = parseObject(text, file);
  const fail = (problem: string): never => {
    throw new ModelConfigError(file, problem);
  };

  // Which architecture: "architectures" when present, else "model_type".
  let arch: (typeof ARCHITECTURES)[string] | undefined;
  if (present(json, 'architectures')) {
    const list = json.architectures;
    if (!Array.isArray(list)) fail('"architectures" must be a list');
    const known = (list as unknown[]).find((a) => typeof a === 'string' && a in ARCHITECTURES);
    if (known === undefined) {
      fail(
        `architectures ${JSON.stringify(list)} has no supported model ` +
          `(supported: ${Object.keys(ARCHITECTURES).join(', ')})`,
      );
    }
    arch = ARCHITECTURES[known as string];
  } else if (json.model_type === 'qwen2' || json.model_type === 'qwen3') {
    arch = json.model_type === 'qwen2' ? ARCHITECTURES.Qwen2ForCausalLM : ARCHITECTURES.Qwen3ForCausalLM;
  } else {
    fail(`no "architectures" and model_type ${JSON.stringify(json.model_type)} is not qwen2 or qwen3`);
  }
  const { architecture, modelType } = arch!;
  if (present(json, 'model_type') && json.model_type !== modelType) {
    fail(`model_type ${JSON.stringify(json.model_type)} does not match architecture ${architecture}`);
  }

  const vocabSize = positiveInt(json, 'vocab_size', file);
  const hiddenSize = positiveInt(json, 'hidden_size', file);
  const intermediateSize = positiveInt(json, 'intermediate_size', file);
  const numLayers = positiveInt(json, 'num_hidden_layers', file);
  const numHeads = positiveInt(json, 'num_attention_heads', file);
  // HF: num_key_value_heads None means multi-head attention (one kv head per query head).
  const numKvHeads = positiveInt(json, 'num_key_value_heads', file, numHeads);
  if (numHeads % numKvHeads !== 0) {
    fail(`num_attention_heads (${numHeads}) is not a multiple of num_key_value_heads (${numKvHeads})`);
  }

  // head_dim: explicit when given (both modeling files use getattr(config, "head_dim", ...)); Qwen2
  // falls back to hidden/heads, Qwen3Config defaults to 128.
  let headDim: number;
  if (present(json, 'head_dim')) {
    headDim = positiveInt(json, 'head_dim', file);
  } else if (modelType === 'qwen3') {
    headDim = 128;
  } else {
    if (hiddenSize % numHeads !== 0) {
      fail(
        `hidden_size (${hiddenSize}) is not a multiple of num_attention_heads (${numHeads}) and no head_dim is given`,
      );
    }
    headDim = hiddenSize / numHeads;
  }
  if (headDim % 2 !== 0) fail(`head_dim (${headDim}) must be even: RoPE rotates pairs of dimensions`);

  if (present(json, 'hidden_act') && json.hidden_act !== 'silu') {
    fail(`hidden_act ${JSON.stringify(json.hidden_act)} is not supported (only "silu")`);
  }
  // Sliding-window attention and RoPE scaling (YaRN etc.) change the math; refuse rather than be wrong.
  if (json.use_sliding_window === true) fail('use_sliding_window: true is not supported');
  if (Array.isArray(json.layer_types) && json.layer_types.some((t) => t !== 'full_attention')) {
    fail('layer_types other than "full_attention" (sliding-window layers) are not supported');
  }
  const ropeScaling = json.rope_scaling ?? null;
  const ropeParams = (json.rope_parameters ?? null) as Json | null; // transformers v5 spelling
  for (const [key, value] of [
    ['rope_scaling', ropeScaling],
    ['rope_parameters', ropeParams],
  ] as const) {
    if (value === null) continue;
    const type = (value as Json).rope_type ?? (value as Json).type ?? 'default';
    if (type !== 'default')
      fail(`${key} of type ${JSON.stringify(type)} is not supported (only default RoPE)`);
  }
  let ropeTheta = positiveNumber(json, 'rope_theta', file, 10000);
  if (ropeParams !== null && present(ropeParams, 'rope_theta')) {
    ropeTheta = positiveNumber(ropeParams, 'rope_theta', `${file} rope_parameters`, ropeTheta);
  }

  // Attention biases. Qwen2's q/k/v bias is hard-coded True in modeling_qwen2.py (o_proj: False).
  const attentionBias = boolean(json, 'attention_bias', file, false);
  const qkvBias = modelType === 'qwen2' ? true : attentionBias;
  const oBias = modelType === 'qwen2' ? false : attentionBias;

  const dtypeValue = json.torch_dtype ?? json.dtype ?? null; // newer transformers write "dtype"
  if (
    dtypeValue !== null &&
    dtypeValue !== 'float32' &&
    dtypeValue !== 'float16' &&
    dtypeValue !== 'bfloat16'
  ) {
    fail(`torch_dtype ${JSON.stringify(dtypeValue)} is not float32, float16 or bfloat16`);
  }

  return {
    architecture,
    modelType,
    vocabSize,
    hiddenSize,
    intermediateSize,
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    rmsNormEps: positiveNumber(json, 'rms_norm_eps', file, 1e-6),
    ropeTheta,
    maxPositionEmbeddings: positiveInt(json, 'max_position_embeddings', file, 32768),
    tieWordEmbeddings: boolean(json, 'tie_word_embeddings', file, false),
    qkvBias,
    oBias,
    qkNorm: modelType === 'qwen3',
    torchDtype: dtypeValue as TorchDtype | null,
    bosTokenId: tokenId(json, 'bos_token_id', file, vocabSize),
    eosTokenIds: tokenIdList(json, 'eos_token_id', file, vocabSize),
    raw: json,
  };
}

/**
 * config.json text for a ModelConfig: the raw JSON it came from (unknown keys kept) with every
 * modelled field written back under its HF name, as transformers writes it: indent 2, keys sorted,
 * trailing newline. (Numbers are written JS-style, e.g. 1e-6 as 0.000001 where Python writes 1e-06;
 * both read back to the same double.)
 */
export function serializeModelConfig(config: ModelConfig): string {
  const out: Json = { ...config.raw };
  delete out.dtype; // we write torch_dtype; keep one spelling
  const eos = config.eosTokenIds.length === 1 ? config.eosTokenIds[0] : config.eosTokenIds;
  Object.assign(out, {
    architectures: [config.architecture],
    model_type: config.modelType,
    vocab_size: config.vocabSize,
    hidden_size: config.hiddenSize,
    intermediate_size: config.intermediateSize,
    num_hidden_layers: config.numLayers,
    num_attention_heads: config.numHeads,
    num_key_value_heads: config.numKvHeads,
    rms_norm_eps: config.rmsNormEps,
    rope_theta: config.ropeTheta,
    max_position_embeddings: config.maxPositionEmbeddings,
    tie_word_embeddings: config.tieWordEmbeddings,
    hidden_act: 'silu',
    torch_dtype: config.torchDtype,
    bos_token_id: config.bosTokenId,
    eos_token_id: config.eosTokenIds.length === 0 ? null : eos,
  });
  if (config.modelType === 'qwen3') {
    out.head_dim = config.headDim;
    out.attention_bias = config.qkvBias;
  } else if (present(config.raw, 'head_dim') || config.headDim * config.numHeads !== config.hiddenSize) {
    out.head_dim = config.headDim;
  }
  return sortedJson(out);
}

/** JSON with object keys sorted at every level, indent 2, trailing newline (Python's sort_keys=True). */
export function sortedJson(value: unknown): string {
  const sortKeys = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sortKeys);
    if (typeof v === 'object' && v !== null) {
      const o: Json = {};
      for (const k of Object.keys(v).sort()) o[k] = sortKeys((v as Json)[k]);
      return o;
    }
    return v;
  };
  return `${JSON.stringify(sortKeys(value), null, 2)}\n`;
}

// ---------------------------------------------------------------------------------------------
// generation_config.json

/**
 * Parse generation_config.json. Missing keys take transformers' GenerationConfig defaults
 * (do_sample false, temperature 1, top_p 1, top_k 50, repetition_penalty 1). Pass the model's
 * vocab size to check token ids against it.
 */
export function parseGenerationConfig(
  text: string | Json,
  file = 'generation_config.json',
  vocabSize: number | null = null,
): GenerationConfig {
  const json = parseObject(text, file);
  const number = (key: string, fallback: number, ok: (v: number) => boolean, rule: string): number => {
    if (!present(json, key)) return fallback;
    const v = json[key];
    if (typeof v !== 'number' || !Number.isFinite(v) || !ok(v)) {
      throw new ModelConfigError(file, `"${key}" must be ${rule}, got ${JSON.stringify(v)}`);
    }
    return v;
  };
  return {
    bosTokenId: tokenId(json, 'bos_token_id', file, vocabSize),
    eosTokenIds: tokenIdList(json, 'eos_token_id', file, vocabSize),
    padTokenId: tokenId(json, 'pad_token_id', file, vocabSize),
    doSample: boolean(json, 'do_sample', file, false),
    temperature: number('temperature', 1, (v) => v >= 0, 'a number >= 0'),
    topP: number('top_p', 1, (v) => v > 0 && v <= 1, 'in (0, 1]'),
    topK: number('top_k', 50, (v) => Number.isSafeInteger(v) && v >= 0, 'an integer >= 0'),
    repetitionPenalty: number('repetition_penalty', 1, (v) => v > 0, 'a number > 0'),
    maxNewTokens: present(json, 'max_new_tokens') ? positiveInt(json, 'max_new_tokens', file) : null,
    raw: json,
  };
}

/**
 * generation_config.json text. Like transformers (which writes only what differs from its defaults),
 * a field is written when the original file had it or its value is not the default; raw keys we do
 * not model are kept. Sorted keys, indent 2.
 */
export function serializeGenerationConfig(g: GenerationConfig): string {
  const out: Json = { ...g.raw };
  const eos = g.eosTokenIds.length === 1 ? g.eosTokenIds[0] : g.eosTokenIds;
  const fields: [string, unknown, unknown][] = [
    // [HF key, value, transformers' default]
    ['bos_token_id', g.bosTokenId, null],
    ['eos_token_id', g.eosTokenIds.length === 0 ? null : eos, null],
    ['pad_token_id', g.padTokenId, null],
    ['do_sample', g.doSample, false],
    ['temperature', g.temperature, 1],
    ['top_p', g.topP, 1],
    ['top_k', g.topK, 50],
    ['repetition_penalty', g.repetitionPenalty, 1],
    ['max_new_tokens', g.maxNewTokens, null],
  ];
  for (const [key, value, fallback] of fields) {
    if (present(g.raw, key) || value !== fallback) out[key] = value;
  }
  return sortedJson(out);
}
