// config.json / generation_config.json parsing, on configs written like the published
// Qwen2.5-0.5B-Instruct and Qwen3-0.6B ones (sizes as on their model cards, Python float spellings
// such as 1e-06 and 1000000.0 included; keys that do not affect us may differ) and broken variants.

import { describe, expect, it } from 'vitest';
import {
  parseGenerationConfig,
  parseModelConfig,
  serializeGenerationConfig,
  serializeModelConfig,
} from '../../src/agent/model/config.ts';
import { ModelConfigError } from '../../src/agent/model/errors.ts';

// Qwen/Qwen2.5-0.5B-Instruct-style config.json.
const QWEN25_05B = `{
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}`;

// Qwen/Qwen3-0.6B-style config.json.
const QWEN3_06B = `{
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}`;

const qwen25 = () => JSON.parse(QWEN25_05B) as Record<string, unknown>;

function expectConfigError(json: Record<string, unknown> | string, problem: RegExp): void {
  let error: unknown;
  try {
    parseModelConfig(json);
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(ModelConfigError);
  expect((error as ModelConfigError).file).toBe('config.json');
  expect((error as ModelConfigError).message).toMatch(/^config\.json: /);
  expect((error as ModelConfigError).problem).toMatch(problem);
}

describe('config.json', () => {
  it('Qwen2.5-0.5B-Instruct: head_dim from hidden/heads, q/k/v bias, no o bias, no qk-norm', () => {
    const c = parseModelConfig(QWEN25_05B);
    expect(c).toMatchObject({
      architecture: 'Qwen2ForCausalLM',
      modelType: 'qwen2',
      vocabSize: 151936,
      hiddenSize: 896,
      intermediateSize: 4864,
      numLayers: 24,
      numHeads: 14,
      numKvHeads: 2,
      headDim: 64,
      rmsNormEps: 1e-6,
      ropeTheta: 1e6,
      maxPositionEmbeddings: 32768,
      tieWordEmbeddings: true,
      qkvBias: true,
      oBias: false,
      qkNorm: false,
      torchDtype: 'bfloat16',
      bosTokenId: 151643,
      eosTokenIds: [151645],
    });
  });

  it('Qwen3-0.6B: explicit head_dim (heads x head_dim != hidden), q/k norm, no biases', () => {
    const c = parseModelConfig(QWEN3_06B);
    expect(c).toMatchObject({
      architecture: 'Qwen3ForCausalLM',
      modelType: 'qwen3',
      hiddenSize: 1024,
      numHeads: 16,
      numKvHeads: 8,
      headDim: 128,
      qkvBias: false,
      oBias: false,
      qkNorm: true,
      maxPositionEmbeddings: 40960,
    });
  });

  it('applies HF defaults: kv heads = heads, Qwen3 head_dim 128, eps, theta, untied', () => {
    const minimal = {
      model_type: 'qwen3',
      vocab_size: 10,
      hidden_size: 8,
      intermediate_size: 16,
      num_hidden_layers: 1,
      num_attention_heads: 2,
    };
    const c = parseModelConfig(minimal);
    expect(c).toMatchObject({
      architecture: 'Qwen3ForCausalLM',
      numKvHeads: 2,
      headDim: 128,
      rmsNormEps: 1e-6,
      ropeTheta: 10000,
      tieWordEmbeddings: false,
      torchDtype: null,
      eosTokenIds: [],
    });
  });

  it('Qwen3 with attention_bias has q/k/v and o biases', () => {
    const c = parseModelConfig({ ...JSON.parse(QWEN3_06B), attention_bias: true });
    expect([c.qkvBias, c.oBias]).toEqual([true, true]);
  });

  it('accepts the newer "dtype" key and rope_parameters.rope_theta', () => {
    const json = qwen25();
    delete json.torch_dtype;
    json.dtype = 'float16';
    json.rope_parameters = { rope_type: 'default', rope_theta: 5e5 };
    const c = parseModelConfig(json);
    expect(c.torchDtype).toBe('float16');
    expect(c.ropeTheta).toBe(5e5);
  });

  it('keeps an eos_token_id list', () => {
    expect(parseModelConfig({ ...qwen25(), eos_token_id: [151645, 151643] }).eosTokenIds).toEqual([
      151645, 151643,
    ]);
  });

  it('serialize -> parse gives the same config, unknown keys kept', () => {
    for (const text of [QWEN25_05B, QWEN3_06B]) {
      const c = parseModelConfig(text);
      const text2 = serializeModelConfig(c);
      const c2 = parseModelConfig(text2);
      const { raw: _a, ...typed } = c;
      const { raw: _b, ...typed2 } = c2;
      expect(typed2).toEqual(typed);
      expect(JSON.parse(text2).transformers_version).toBe(c.raw.transformers_version);
      expect(Object.keys(JSON.parse(text2))).toEqual(Object.keys(JSON.parse(text2)).sort());
      expect(serializeModelConfig(c2)).toBe(text2);
    }
  });

  it.each([
    ['{', /not JSON/],
    ['[1]', /not a JSON object/],
    [
      { ...qwen25(), architectures: ['LlamaForCausalLM'] },
      /architectures \["LlamaForCausalLM"\] has no supported model/,
    ],
    [
      { ...qwen25(), architectures: undefined, model_type: 'llama' },
      /model_type "llama" is not qwen2 or qwen3/,
    ],
    [{ ...qwen25(), model_type: 'qwen3' }, /model_type "qwen3" does not match architecture Qwen2ForCausalLM/],
    [{ ...qwen25(), hidden_size: undefined }, /missing required field "hidden_size"/],
    [{ ...qwen25(), vocab_size: -5 }, /"vocab_size" must be a positive integer, got -5/],
    [{ ...qwen25(), num_hidden_layers: 2.5 }, /"num_hidden_layers" must be a positive integer, got 2.5/],
    [
      { ...qwen25(), num_key_value_heads: 3 },
      /num_attention_heads \(14\) is not a multiple of num_key_value_heads \(3\)/,
    ],
    [
      { ...qwen25(), num_attention_heads: 12, num_key_value_heads: 2 },
      /hidden_size \(896\) is not a multiple of num_attention_heads \(12\)/,
    ],
    [{ ...qwen25(), head_dim: 63 }, /head_dim \(63\) must be even/],
    [{ ...qwen25(), hidden_act: 'gelu' }, /hidden_act "gelu" is not supported/],
    [{ ...qwen25(), use_sliding_window: true }, /use_sliding_window: true is not supported/],
    [
      { ...qwen25(), rope_scaling: { type: 'yarn', factor: 4 } },
      /rope_scaling of type "yarn" is not supported/,
    ],
    [{ ...qwen25(), torch_dtype: 'float8' }, /torch_dtype "float8" is not float32, float16 or bfloat16/],
    [{ ...qwen25(), eos_token_id: 200000 }, /"eos_token_id" 200000 is not below vocab_size 151936/],
    [{ ...qwen25(), bos_token_id: 'x' }, /"bos_token_id" must be a token id/],
    [{ ...qwen25(), tie_word_embeddings: 'yes' }, /"tie_word_embeddings" must be true or false/],
    [{ ...qwen25(), rms_norm_eps: 0 }, /"rms_norm_eps" must be a positive number/],
    [{ ...qwen25(), layer_types: ['full_attention', 'sliding_attention'] }, /sliding-window layers/],
  ])('rejects %j', (json, problem) => {
    expectConfigError(json as Record<string, unknown> | string, problem);
  });
});

describe('generation_config.json', () => {
  // Qwen2.5-Instruct-style generation_config.json.
  const QWEN25_GEN = `{
  "bos_token_id": 151643,
  "pad_token_id": 151643,
  "do_sample": true,
  "eos_token_id": [151645, 151643],
  "repetition_penalty": 1.1,
  "temperature": 0.7,
  "top_p": 0.8,
  "top_k": 20,
  "transformers_version": "4.37.0"
}`;

  it('parses the Qwen2.5 Instruct sampling defaults with an eos list', () => {
    expect(parseGenerationConfig(QWEN25_GEN, 'generation_config.json', 151936)).toMatchObject({
      bosTokenId: 151643,
      padTokenId: 151643,
      eosTokenIds: [151645, 151643],
      doSample: true,
      temperature: 0.7,
      topP: 0.8,
      topK: 20,
      repetitionPenalty: 1.1,
      maxNewTokens: null,
    });
  });

  it('takes transformers defaults for missing keys and a single eos id', () => {
    expect(parseGenerationConfig('{"eos_token_id": 151645}')).toMatchObject({
      eosTokenIds: [151645],
      doSample: false,
      temperature: 1,
      topP: 1,
      topK: 50,
      repetitionPenalty: 1,
      padTokenId: null,
    });
  });

  it('writes back only fields that were there or differ from the defaults', () => {
    const g = parseGenerationConfig(QWEN25_GEN);
    const again = parseGenerationConfig(serializeGenerationConfig(g));
    expect({ ...again, raw: null }).toEqual({ ...g, raw: null });
    expect(JSON.parse(serializeGenerationConfig(parseGenerationConfig('{"eos_token_id": 2}')))).toEqual({
      eos_token_id: 2,
    });
  });

  it.each([
    ['{"top_p": 1.5}', /"top_p" must be in \(0, 1\], got 1.5/],
    ['{"temperature": -1}', /"temperature" must be a number >= 0/],
    ['{"top_k": 2.5}', /"top_k" must be an integer >= 0/],
    ['{"eos_token_id": [1, "x"]}', /"eos_token_id"\[1\] must be a token id/],
    ['{"eos_token_id": 600}', /"eos_token_id" 600 is not below vocab_size 512/],
    ['{"max_new_tokens": 0}', /"max_new_tokens" must be a positive integer/],
  ])('rejects %s', (text, problem) => {
    expect(() => parseGenerationConfig(text, 'generation_config.json', 512)).toThrow(ModelConfigError);
    expect(() => parseGenerationConfig(text, 'generation_config.json', 512)).toThrow(problem);
    expect(() => parseGenerationConfig(text, 'generation_config.json', 512)).toThrow(
      /^generation_config\.json: /,
    );
  });
});
