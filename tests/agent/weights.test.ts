// Expected tensor names/shapes, checks against a config, the vocab-size rule and the adapter-limit rule.

import { describe, expect, it } from 'vitest';
import { type ModelConfig, parseModelConfig } from '../../src/agent/model/config.ts';
import { CheckpointError, ModelTooLargeError } from '../../src/agent/model/errors.ts';
import { tinyModelConfig, tinySpec } from '../../src/agent/model/tiny-checkpoints.ts';
import {
  assertFitsAdapter,
  checkAdapterLimits,
  checkTensors,
  checkVocabSize,
  expectedTensors,
  parameterCount,
} from '../../src/agent/model/weights.ts';

const QWEN25_05B = parseModelConfig({
  architectures: ['Qwen2ForCausalLM'],
  vocab_size: 151936,
  hidden_size: 896,
  intermediate_size: 4864,
  num_hidden_layers: 24,
  num_attention_heads: 14,
  num_key_value_heads: 2,
  tie_word_embeddings: true,
});
const QWEN3_06B = parseModelConfig({
  architectures: ['Qwen3ForCausalLM'],
  vocab_size: 151936,
  hidden_size: 1024,
  intermediate_size: 3072,
  num_hidden_layers: 28,
  num_attention_heads: 16,
  num_key_value_heads: 8,
  head_dim: 128,
  tie_word_embeddings: true,
});

const shapesOf = (config: ModelConfig) =>
  new Map(expectedTensors(config).map((t) => [t.name, { shape: t.shape }]));

describe('expected tensors', () => {
  it('Qwen2: layer 0 of Qwen2.5-0.5B has q/k/v biases and GQA-sized k/v, Linear weights [out, in]', () => {
    const t = new Map(expectedTensors(QWEN25_05B).map((e) => [e.name, e.shape]));
    expect(t.get('model.embed_tokens.weight')).toEqual([151936, 896]);
    expect(t.get('model.layers.0.self_attn.q_proj.weight')).toEqual([896, 896]);
    expect(t.get('model.layers.0.self_attn.q_proj.bias')).toEqual([896]);
    expect(t.get('model.layers.0.self_attn.k_proj.weight')).toEqual([128, 896]); // 2 kv heads x 64
    expect(t.get('model.layers.0.self_attn.v_proj.bias')).toEqual([128]);
    expect(t.has('model.layers.0.self_attn.o_proj.bias')).toBe(false);
    expect(t.get('model.layers.23.mlp.down_proj.weight')).toEqual([896, 4864]);
    expect(t.has('model.layers.0.self_attn.q_norm.weight')).toBe(false);
    expect(t.has('lm_head.weight')).toBe(false); // tied
    expect(t.size).toBe(1 + 24 * 12 + 1);
  });

  it('Qwen3: q/k norms of size head_dim, o_proj [hidden, heads*head_dim], no biases', () => {
    const t = new Map(expectedTensors(QWEN3_06B).map((e) => [e.name, e.shape]));
    expect(t.get('model.layers.0.self_attn.q_proj.weight')).toEqual([2048, 1024]);
    expect(t.get('model.layers.0.self_attn.o_proj.weight')).toEqual([1024, 2048]);
    expect(t.get('model.layers.0.self_attn.q_norm.weight')).toEqual([128]);
    expect(t.get('model.layers.0.self_attn.k_norm.weight')).toEqual([128]);
    expect(t.has('model.layers.0.self_attn.q_proj.bias')).toBe(false);
  });

  it('parameter counts match the published model sizes', () => {
    expect(parameterCount(QWEN25_05B)).toBe(494_032_768); // "0.49B"
    expect(parameterCount(QWEN3_06B)).toBe(596_049_920); // "0.6B", 0.44B without the embedding
    expect(parameterCount(QWEN3_06B) - 151936 * 1024).toBe(440_467_456);
  });

  it('untied models also expect lm_head.weight [vocab, hidden]', () => {
    const untied = tinyModelConfig(tinySpec('tiny-qwen2-v512'));
    expect(expectedTensors(untied).at(-1)).toEqual({ name: 'lm_head.weight', shape: [512, 64] });
  });
});

describe('checkTensors', () => {
  const config = tinyModelConfig(tinySpec('tiny-qwen2-v512'));

  it('accepts exactly the expected tensors', () => {
    expect(checkTensors(config, shapesOf(config))).toEqual([]);
  });

  it('missing tensor: names the file, tensor and shape', () => {
    const shapes = shapesOf(config);
    shapes.delete('model.layers.1.self_attn.k_proj.bias');
    expect(() => checkTensors(config, shapes, 'model.safetensors')).toThrow(
      new CheckpointError('model.safetensors', "missing tensor 'model.layers.1.self_attn.k_proj.bias' [32]"),
    );
  });

  it('missing lm_head hints at tying', () => {
    const shapes = shapesOf(config);
    shapes.delete('lm_head.weight');
    expect(() => checkTensors(config, shapes)).toThrow(/tie_word_embeddings: false; is it a tied model/);
  });

  it('wrong shape: says both shapes', () => {
    const shapes = shapesOf(config);
    shapes.set('model.layers.0.mlp.up_proj.weight', { shape: [64, 128] });
    expect(() => checkTensors(config, shapes, (name) => `shard-for-${name}`)).toThrow(
      "shard-for-model.layers.0.mlp.up_proj.weight: tensor 'model.layers.0.mlp.up_proj.weight' has shape [64, 128] but config.json implies [128, 64]",
    );
  });

  it('unexpected tensor: error by default, warning on request', () => {
    const shapes = shapesOf(config);
    shapes.set('model.layers.0.self_attn.q_norm.weight', { shape: [16] }); // a Qwen3 tensor in a Qwen2 model
    expect(() => checkTensors(config, shapes)).toThrow(
      /unexpected tensor 'model.layers.0.self_attn.q_norm.weight' \(not part of a Qwen2ForCausalLM/,
    );
    expect(checkTensors(config, shapes, 'model.safetensors', { unexpected: 'warn' })).toEqual([
      "model.safetensors: ignoring unexpected tensor 'model.layers.0.self_attn.q_norm.weight'",
    ]);
  });

  it('tensors transformers ignores only warn: rotary inv_freq, lm_head in a tied model', () => {
    const tied = tinyModelConfig(tinySpec('tiny-qwen2-tied-v512'));
    const shapes = shapesOf(tied);
    shapes.set('model.layers.0.self_attn.rotary_emb.inv_freq', { shape: [8] });
    shapes.set('lm_head.weight', { shape: [512, 64] });
    expect(checkTensors(tied, shapes)).toHaveLength(2);
  });
});

describe('checkVocabSize', () => {
  it('accepts an embedding with more rows than tokens (Qwen pads to 151,936)', () => {
    expect(() => checkVocabSize(QWEN25_05B, 151669)).not.toThrow();
  });

  it('rejects fewer rows than tokens, saying both numbers', () => {
    const small = tinyModelConfig(tinySpec('tiny-qwen2-v512'));
    expect(() => checkVocabSize(small, 151669)).toThrow(
      new CheckpointError(
        'config.json',
        "vocab_size 512 is smaller than the tokenizer's 151669 tokens: token ids 512..151668 have no embedding row",
      ),
    );
  });
});

describe('adapter limits', () => {
  const MiB = 2 ** 20;

  it('Qwen2.5-0.5B in f32 fits a 128 MiB binding: the largest single binding is an MLP projection', () => {
    const fit = checkAdapterLimits(QWEN25_05B, {
      maxBufferSize: 256 * MiB,
      maxStorageBufferBindingSize: 128 * MiB,
    });
    expect(fit.fits).toBe(true);
    expect(fit.largest).toEqual({ name: 'model.layers.0.mlp.gate_proj.weight', bytes: 4864 * 896 * 4 });
    // The 544 MB embedding / LM head is split by rows: floor(128 MiB / (896 * 4)) rows per chunk.
    expect(fit.vocabRowsPerChunk).toBe(Math.floor((128 * MiB) / (896 * 4)));
    expect(fit.vocabChunks).toBe(5);
    expect(fit.totalBytes).toBe(494_032_768 * 4);
    expect(
      checkAdapterLimits(QWEN25_05B, { maxBufferSize: 4096 * MiB, maxStorageBufferBindingSize: 4096 * MiB })
        .vocabChunks,
    ).toBe(1);
  });

  it('too small a binding: says which tensor, how large, and the limit', () => {
    const limits = { maxBufferSize: 256 * MiB, maxStorageBufferBindingSize: 16 * MiB };
    const fit = checkAdapterLimits(QWEN25_05B, limits);
    expect(fit.fits).toBe(false);
    expect(fit.problems).toEqual([
      "tensor 'model.layers.0.mlp.gate_proj.weight' needs one binding of 16.6 MiB (17432576 bytes) but this adapter's maxStorageBufferBindingSize is 16.0 MiB (16777216 bytes)",
    ]);
    expect(() => assertFitsAdapter(QWEN25_05B, limits)).toThrow(ModelTooLargeError);
    expect(() => assertFitsAdapter(QWEN25_05B, limits)).toThrow(
      /^config\.json: model too large for this GPU: tensor/,
    );
    // The same model in f16 fits.
    expect(checkAdapterLimits(QWEN25_05B, limits, 2).fits).toBe(true);
  });

  it('a smaller maxBufferSize is the limit that counts, and is named', () => {
    const fit = checkAdapterLimits(QWEN25_05B, {
      maxBufferSize: 8 * MiB,
      maxStorageBufferBindingSize: 128 * MiB,
    });
    expect(fit.problems[0]).toMatch(/this adapter's maxBufferSize is 8\.0 MiB/);
  });
});
