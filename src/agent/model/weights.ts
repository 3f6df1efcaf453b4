// Which tensors a Qwen2/Qwen3 checkpoint must contain, with which shapes, and whether the model fits
// a GPU adapter. Names and shapes are those of transformers' modeling_qwen2.py / modeling_qwen3.py
// state dicts; nn.Linear stores its weight as [out_features, in_features].
//
//   model.embed_tokens.weight                          [vocab, hidden]
//   per layer i:
//     model.layers.i.input_layernorm.weight            [hidden]
//     model.layers.i.self_attn.q_proj.weight           [heads * head_dim, hidden]     (+ .bias [heads * head_dim])
//     model.layers.i.self_attn.k_proj.weight           [kv_heads * head_dim, hidden]  (+ .bias)
//     model.layers.i.self_attn.v_proj.weight           [kv_heads * head_dim, hidden]  (+ .bias)
//     model.layers.i.self_attn.o_proj.weight           [hidden, heads * head_dim]     (+ .bias [hidden], Qwen3 with attention_bias)
//     model.layers.i.self_attn.q_norm.weight           [head_dim]                      (Qwen3)
//     model.layers.i.self_attn.k_norm.weight           [head_dim]                      (Qwen3)
//     model.layers.i.post_attention_layernorm.weight   [hidden]
//     model.layers.i.mlp.gate_proj.weight              [intermediate, hidden]
//     model.layers.i.mlp.up_proj.weight                [intermediate, hidden]
//     model.layers.i.mlp.down_proj.weight              [hidden, intermediate]
//   model.norm.weight                                  [hidden]
//   lm_head.weight                                     [vocab, hidden]                 (absent when tied)

import type { ModelConfig } from './config.ts';
import { CheckpointError, ModelTooLargeError } from './errors.ts';

export interface ExpectedTensor {
  name: string;
  shape: number[];
}

/** Every tensor the checkpoint must hold, in state-dict order. */
export function expectedTensors(config: ModelConfig): ExpectedTensor[] {
  const { vocabSize: V, hiddenSize: H, intermediateSize: I, numHeads, numKvHeads, headDim: D } = config;
  const qDim = numHeads * D;
  const kvDim = numKvHeads * D;
  const out: ExpectedTensor[] = [{ name: 'model.embed_tokens.weight', shape: [V, H] }];
  for (let i = 0; i < config.numLayers; i++) {
    const p = `model.layers.${i}`;
    out.push({ name: `${p}.input_layernorm.weight`, shape: [H] });
    out.push({ name: `${p}.self_attn.q_proj.weight`, shape: [qDim, H] });
    if (config.qkvBias) out.push({ name: `${p}.self_attn.q_proj.bias`, shape: [qDim] });
    out.push({ name: `${p}.self_attn.k_proj.weight`, shape: [kvDim, H] });
    if (config.qkvBias) out.push({ name: `${p}.self_attn.k_proj.bias`, shape: [kvDim] });
    out.push({ name: `${p}.self_attn.v_proj.weight`, shape: [kvDim, H] });
    if (config.qkvBias) out.push({ name: `${p}.self_attn.v_proj.bias`, shape: [kvDim] });
    out.push({ name: `${p}.self_attn.o_proj.weight`, shape: [H, qDim] });
    if (config.oBias) out.push({ name: `${p}.self_attn.o_proj.bias`, shape: [H] });
    if (config.qkNorm) {
      out.push({ name: `${p}.self_attn.q_norm.weight`, shape: [D] });
      out.push({ name: `${p}.self_attn.k_norm.weight`, shape: [D] });
    }
    out.push({ name: `${p}.post_attention_layernorm.weight`, shape: [H] });
    out.push({ name: `${p}.mlp.gate_proj.weight`, shape: [I, H] });
    out.push({ name: `${p}.mlp.up_proj.weight`, shape: [I, H] });
    out.push({ name: `${p}.mlp.down_proj.weight`, shape: [H, I] });
  }
  out.push({ name: 'model.norm.weight', shape: [H] });
  if (!config.tieWordEmbeddings) out.push({ name: 'lm_head.weight', shape: [V, H] });
  return out;
}

/** Total parameter count (tied embeddings counted once). */
export function parameterCount(config: ModelConfig): number {
  return expectedTensors(config).reduce((n, t) => n + t.shape.reduce((a, b) => a * b, 1), 0);
}

// Tensors that transformers itself ignores when loading: old exports carry RoPE's inv_freq buffer,
// and some tied checkpoints still contain lm_head.weight (HF re-ties it to the embedding).
const IGNORED_BY_HF = /^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$/;

export interface TensorCheckOptions {
  /**
   * What to do with a tensor the config does not call for. 'error' (default) because a stray tensor
   * usually means a different architecture (e.g. a Qwen2 file under a Qwen3 config) whose weights
   * would silently go unused. 'warn' collects a warning instead. Tensors transformers itself ignores
   * (rotary_emb.inv_freq; lm_head.weight in a tied model) always only warn.
   */
  unexpected?: 'error' | 'warn';
}

/**
 * Check that `tensors` holds exactly the tensors `config` needs, each with the right shape. `where`
 * names the file a tensor is (or should be) in, for errors: one file name, or a function of the
 * tensor name for sharded checkpoints. Returns warnings (ignored tensors).
 */
export function checkTensors(
  config: ModelConfig,
  tensors: ReadonlyMap<string, { shape: readonly number[] }>,
  where: string | ((tensor: string) => string) = 'model.safetensors',
  options: TensorCheckOptions = {},
): string[] {
  const fileOf = typeof where === 'string' ? () => where : where;
  const warnings: string[] = [];
  const expected = expectedTensors(config);
  const expectedNames = new Set(expected.map((t) => t.name));
  for (const { name, shape } of expected) {
    const t = tensors.get(name);
    if (t === undefined) {
      const hint =
        name === 'lm_head.weight'
          ? ' (config.json says tie_word_embeddings: false; is it a tied model?)'
          : '';
      throw new CheckpointError(fileOf(name), `missing tensor '${name}' [${shape.join(', ')}]${hint}`);
    }
    if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
      throw new CheckpointError(
        fileOf(name),
        `tensor '${name}' has shape [${t.shape.join(', ')}] but config.json implies [${shape.join(', ')}]`,
      );
    }
  }
  for (const name of tensors.keys()) {
    if (expectedNames.has(name)) continue;
    if (IGNORED_BY_HF.test(name) || (name === 'lm_head.weight' && config.tieWordEmbeddings)) {
      warnings.push(`${fileOf(name)}: ignoring tensor '${name}' (transformers ignores it too)`);
    } else if (options.unexpected === 'warn') {
      warnings.push(`${fileOf(name)}: ignoring unexpected tensor '${name}'`);
    } else {
      throw new CheckpointError(
        fileOf(name),
        `unexpected tensor '${name}' (not part of a ${config.architecture} with this config)`,
      );
    }
  }
  return warnings;
}

/**
 * The embedding must have a row for every token the tokenizer can produce. Qwen pads the matrix
 * (151,936 rows for 151,669 tokens), so more rows than tokens is normal; fewer is fatal.
 */
export function checkVocabSize(config: ModelConfig, tokenizerVocabSize: number, file = 'config.json'): void {
  if (config.vocabSize < tokenizerVocabSize) {
    throw new CheckpointError(
      file,
      `vocab_size ${config.vocabSize} is smaller than the tokenizer's ${tokenizerVocabSize} tokens: ` +
        `token ids ${config.vocabSize}..${tokenizerVocabSize - 1} have no embedding row`,
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Adapter limits
//
// WebGPU caps each buffer at `maxBufferSize` and each storage binding (what a shader sees at once) at
// `maxStorageBufferBindingSize` (often 128 MiB on laptops, 1-4 GiB on desktops). The rule:
//   - the [vocab, hidden] embedding / LM-head matrix may be split by rows into chunks (the embedding
//     gather and the LM-head matmul both work on row ranges), so only one row must fit, and we report
//     how many chunks it takes;
//   - every other weight must fit whole in one binding and one buffer. The largest of these, usually
//     an MLP projection [intermediate, hidden], decides whether the model fits.
// Activations are not counted: they depend on batch and sequence length, and are the runtime's job.

export interface AdapterLimits {
  maxBufferSize: number;
  maxStorageBufferBindingSize: number;
}

export interface AdapterFit {
  fits: boolean;
  /** The largest tensor that must be one binding (everything but the embedding / LM head). */
  largest: { name: string; bytes: number };
  /** Chunks the [vocab, hidden] matrix is split into (1 when it fits whole). */
  vocabChunks: number;
  /** Rows per chunk of the [vocab, hidden] matrix. */
  vocabRowsPerChunk: number;
  /** Total weight bytes at this element size. */
  totalBytes: number;
  /** Each reason it does not fit, in words; empty when it fits. */
  problems: string[];
}

export function formatBytes(n: number): string {
  if (n >= 2 ** 30) return `${(n / 2 ** 30).toFixed(2)} GiB`;
  if (n >= 2 ** 20) return `${(n / 2 ** 20).toFixed(1)} MiB`;
  if (n >= 2 ** 10) return `${(n / 2 ** 10).toFixed(1)} KiB`;
  return `${n} B`;
}

/**
 * Does this model fit the adapter? Pure function of the config and limits. `bytesPerElement` is the
 * element size the weights will have on the GPU (4 for f32, 2 for f16).
 */
export function checkAdapterLimits(
  config: ModelConfig,
  limits: AdapterLimits,
  bytesPerElement = 4,
): AdapterFit {
  const bindingLimit = Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize);
  const problems: string[] = [];
  let largest = { name: '', bytes: 0 };
  let totalBytes = 0;
  for (const t of expectedTensors(config)) {
    const bytes = t.shape.reduce((a, b) => a * b, 1) * bytesPerElement;
    totalBytes += bytes;
    if (t.name === 'model.embed_tokens.weight' || t.name === 'lm_head.weight') continue;
    if (bytes > largest.bytes) largest = { name: t.name, bytes };
  }
  if (largest.bytes > bindingLimit) {
    const which =
      limits.maxStorageBufferBindingSize <= limits.maxBufferSize
        ? 'maxStorageBufferBindingSize'
        : 'maxBufferSize';
    problems.push(
      `tensor '${largest.name}' needs one binding of ${formatBytes(largest.bytes)} (${largest.bytes} bytes) ` +
        `but this adapter's ${which} is ${formatBytes(bindingLimit)} (${bindingLimit} bytes)`,
    );
  }
  const rowBytes = config.hiddenSize * bytesPerElement;
  const vocabRowsPerChunk = Math.min(config.vocabSize, Math.floor(bindingLimit / rowBytes));
  if (vocabRowsPerChunk === 0) {
    problems.push(
      `one embedding row (${rowBytes} bytes) is larger than this adapter's binding limit of ${bindingLimit} bytes`,
    );
  }
  const vocabChunks =
    vocabRowsPerChunk === 0 ? Number.POSITIVE_INFINITY : Math.ceil(config.vocabSize / vocabRowsPerChunk);
  return { fits: problems.length === 0, largest, vocabChunks, vocabRowsPerChunk, totalBytes, problems };
}

/** checkAdapterLimits, throwing ModelTooLargeError (naming config.json) when the model does not fit. */
export function assertFitsAdapter(
  config: ModelConfig,
  limits: AdapterLimits,
  bytesPerElement = 4,
): AdapterFit {
  const fit = checkAdapterLimits(config, limits, bytesPerElement);
  if (!fit.fits)
    throw new ModelTooLargeError('config.json', `model too large for this GPU: ${fit.problems.join('; ')}`);
  return fit;
}
