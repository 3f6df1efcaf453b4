// qwen-tiny's trimmed tokenizer (scripts/make-qwen-tiny.ts) against Qwen3's full one: the same token
// strings on all of the task's text (seeds 1..5) and, as information, on a seed it was not built
// from; byte fallback for any other text; the chat template with tools; the random initial
// checkpoint loading through the ordinary loader.
//
// Tokenizing the ~22 M characters of the corpus takes ~12 s per tokenizer on one core: the full
// tokenizer runs once, and its tokens both build the trimmed vocabulary and are the expected output.

import { beforeAll, describe, expect, it } from 'vitest';
import {
  byteLevelAlphabet,
  QWEN_TINY_ADDED_TOKENS,
  qwenTinyCorpus,
  qwenTinyGenerationConfig,
  qwenTinyInitTensors,
  qwenTinyModelConfig,
  qwenTinyTokenIds,
  type TrimmedTokenizer,
  trimQwenTokenizerToTokens,
} from '../../scripts/make-qwen-tiny.ts';
import { loadCheckpoint, saveCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { readQwenTokenizerFiles } from '../../src/agent/model/node-fs.ts';
import { memorySource } from '../../src/agent/model/sources.ts';
import { QWEN_TOKENS, QwenTokenizer, type QwenTokenName } from '../../src/agent/tokenizer/qwen-tokenizer.ts';
import { renderQwen3Chat } from '../../src/env/chat-format.ts';
import { evaluate } from '../../src/env/evaluate.ts';
import { createOraclePolicy } from '../../src/env/policies/oracle.ts';
import { TASK_PRESETS } from '../../src/env/presets.ts';
import { generateSyntheticDataset } from '../../src/env/tasks/synthetic.ts';
import { pooledSearchTools } from '../../src/env/tools/search.ts';

let fullFiles: Map<string, string>;
let full: QwenTokenizer;
let corpus: string[];
let expected: string[][]; // the full tokenizer's token strings, per corpus text
let trimmed: TrimmedTokenizer;
let tiny: QwenTokenizer;

beforeAll(async () => {
  fullFiles = await readQwenTokenizerFiles();
  full = QwenTokenizer.fromFiles(fullFiles);
  corpus = await qwenTinyCorpus();
  expected = corpus.map((text) => full.tokenize(text));
  trimmed = trimQwenTokenizerToTokens(fullFiles, expected.flat());
  tiny = QwenTokenizer.fromFiles(trimmed.files);
  console.log(
    `qwen-tiny tokenizer: ${trimmed.vocabSize} tokens, ${trimmed.mergeCount} merges, from ${corpus.length} texts ` +
      `(${corpus.reduce((n, t) => n + t.length, 0)} characters, ${expected.reduce((n, t) => n + t.length, 0)} tokens)`,
  );
}, 120_000);

/** Corpus texts on which the two tokenizers disagree (at most `limit`, with the first differing token). */
function mismatches(texts: readonly string[], want: readonly (readonly string[])[], limit = 5): string[] {
  const out: string[] = [];
  texts.forEach((text, i) => {
    if (out.length >= limit) return;
    const got = tiny.tokenize(text);
    const expect_ = want[i];
    if (got.length === expect_.length && got.every((t, k) => t === expect_[k])) return;
    const k = got.findIndex((t, j) => t !== expect_[j]);
    out.push(
      `${JSON.stringify(text.slice(0, 80))}: token ${k}: ${JSON.stringify(got[k])} vs ${JSON.stringify(expect_[k])}`,
    );
  });
  return out;
}

describe('qwen-tiny tokenizer: trimmed from Qwen3', () => {
  it('is small: at most 4096 tokens, with the 256 bytes and the 9 chat tokens', () => {
    expect(trimmed.vocabSize).toBeLessThanOrEqual(4096);
    expect(tiny.vocabSize).toBe(trimmed.vocabSize);
    for (const ch of byteLevelAlphabet()) expect(tiny.tokenToId(ch), ch).not.toBeNull();
    const json = JSON.parse(trimmed.files.get('tokenizer.json')!) as {
      added_tokens: { id: number; content: string }[];
      model: { vocab: Record<string, number>; merges: [string, string][] };
    };
    const bpeCount = Object.keys(json.model.vocab).length;
    expect(json.added_tokens.map((t) => t.content)).toEqual(QWEN_TINY_ADDED_TOKENS);
    expect(json.added_tokens.map((t) => t.id)).toEqual(QWEN_TINY_ADDED_TOKENS.map((_, i) => bpeCount + i));
    // Ids are 0..V-1 without gaps; every merge joins two kept tokens into a kept token.
    expect(new Set(Object.values(json.model.vocab))).toEqual(new Set([...Array(bpeCount).keys()]));
    for (const [a, b] of json.model.merges) {
      expect(json.model.vocab[a], a).toBeDefined();
      expect(json.model.vocab[b], b).toBeDefined();
      expect(json.model.vocab[a + b], a + b).toBeDefined();
    }
  });

  it('gives the same token strings as the full tokenizer on every corpus text (seeds 1..5)', () => {
    expect(corpus.length).toBeGreaterThan(10_000);
    expect(mismatches(corpus, expected)).toEqual([]);
  });

  it('on an unseen seed (7) it still gives valid tokens; reports how many texts match exactly', () => {
    const data = generateSyntheticDataset({ seed: 7 });
    const texts = [...data.train.corpus, ...data.test.corpus].flatMap((p) => [p.title, p.text]);
    texts.push(...[...data.train.tasks, ...data.test.tasks].map((t) => t.question));
    const want = texts.map((t) => full.tokenize(t));
    const differ = texts.filter((t, i) => tiny.tokenize(t).join('\u0000') !== want[i].join('\u0000'));
    console.log(
      `seed 7 (not in the corpus): ${texts.length - differ.length} of ${texts.length} texts tokenize identically; ` +
        `e.g. ${differ
          .slice(0, 3)
          .map((t) => JSON.stringify(t.slice(0, 60)))
          .join(', ')}`,
    );
    // Whatever the split, it decodes back to the text.
    for (const text of texts) expect(tiny.decode(tiny.encode(text))).toBe(text);
  });

  it('round-trips any text through byte fallback, non-ASCII included', () => {
    const samples = [
      'héllo wörld',
      '你好，世界',
      'emoji 🎉 ok',
      '  spaces\n\ttabs ',
      '{"a": [1, 2]}',
      'Ærøskøbing — “quoted” … ½°C',
      'zxqv wjkq qqqq 0123456789',
      '\u0000\u0001\u007f',
    ];
    for (const text of samples) expect(tiny.decode(tiny.encode(text)), text).toBe(text);
    // A character the corpus never has falls back to its UTF-8 bytes, written in the byte alphabet.
    const alphabet = byteLevelAlphabet();
    const bytes = [...new TextEncoder().encode('🎉')].map((b) => alphabet[b]).join('');
    expect(tiny.tokenize('🎉').join('')).toBe(bytes);
    const ids = tiny.encode('Ærøskøbing 你好 🎉');
    for (const id of ids) expect(id).toBeLessThan(tiny.vocabSize);
  });

  it('maps the chat tokens to single ids and renders the chat template with tools', async () => {
    for (const [name, { text }] of Object.entries(QWEN_TOKENS)) {
      const id = tiny.specialId(name as QwenTokenName);
      expect(tiny.encode(text), text).toEqual([id]);
      expect(id).toBeGreaterThanOrEqual(tiny.vocabSize - QWEN_TINY_ADDED_TOKENS.length);
    }
    expect(tiny.eosTokenId).toBe(tiny.specialId('imEnd'));
    expect(tiny.padTokenId).toBe(tiny.specialId('endOfText'));

    // The first exchange of a compact oracle episode on seed 1 (corpus text), up to the next turn.
    const preset = TASK_PRESETS.compact;
    const split = generateSyntheticDataset({ seed: 1 }).test;
    const report = await evaluate(
      createOraclePolicy({ style: preset.oracleStyle }),
      split.tasks.slice(0, 1),
      {
        tools: pooledSearchTools(split.corpus, preset.search),
        env: { systemPrompt: preset.systemPrompt },
      },
    );
    const [tool] = report.episodes[0].tools;
    const messages = report.episodes[0].messages.slice(0, 4);
    expect(messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool']);
    const prompt = tiny.applyChatTemplate(messages, { tools: [tool], addGenerationPrompt: true });
    // The same Jinja template as Qwen3's, rendering the same text as the full tokenizer and our TS renderer.
    expect(prompt).toBe(full.applyChatTemplate(messages, { tools: [tool], addGenerationPrompt: true }));
    expect(prompt).toBe(renderQwen3Chat(messages, { tools: [tool], addGenerationPrompt: true }));
    expect(prompt).toContain('<tools>\n{"type": "function", "function": {"name": "search"');
    expect(tiny.tokenize(prompt)).toEqual(full.tokenize(prompt));
    const ids = tiny.encodeChat(messages, { tools: [tool], addGenerationPrompt: true });
    expect(ids.slice(-3)).toEqual(tiny.encode('<|im_start|>assistant\n'));
    expect(ids.filter((id) => id === tiny.specialId('toolResponse'))).toHaveLength(1);
    expect(tiny.decode(ids)).toBe(prompt);
  });
});

describe('qwen-tiny initial checkpoint', () => {
  it('loads with loadCheckpoint and QwenTokenizer.fromFiles; config as specified', async () => {
    const ids = qwenTinyTokenIds(tiny);
    const config = qwenTinyModelConfig(ids);
    const files = saveCheckpoint({
      config,
      generationConfig: qwenTinyGenerationConfig(ids),
      tensors: qwenTinyInitTensors(config),
      dtype: 'F32',
      tokenizerFiles: trimmed.files,
    });
    const checkpoint = await loadCheckpoint(memorySource(files), { requireTokenizer: true });
    expect(checkpoint.config).toMatchObject({
      architecture: 'Qwen3ForCausalLM',
      vocabSize: Math.ceil(trimmed.vocabSize / 64) * 64,
      hiddenSize: 128,
      intermediateSize: 384,
      numLayers: 4,
      numHeads: 4,
      numKvHeads: 2,
      headDim: 32,
      qkNorm: true,
      tieWordEmbeddings: true,
      maxPositionEmbeddings: 2048,
      ropeTheta: 10000,
    });
    expect(checkpoint.config.vocabSize % 64).toBe(0);
    expect(checkpoint.tokenizerVocabSize).toBe(trimmed.vocabSize);
    const rawConfig = JSON.parse(new TextDecoder().decode(files.get('config.json'))) as Record<
      string,
      unknown
    >;
    expect(rawConfig.eos_token_id).toBe(tiny.specialId('imEnd'));
    const gen = JSON.parse(new TextDecoder().decode(files.get('generation_config.json'))) as Record<
      string,
      unknown
    >;
    expect(gen.eos_token_id).toEqual([tiny.specialId('imEnd'), tiny.specialId('endOfText')]);
    expect(gen.pad_token_id).toBe(tiny.specialId('endOfText'));

    const loadedTok = QwenTokenizer.fromFiles(checkpoint.tokenizerFiles);
    expect(loadedTok.encode('<|im_start|>user\nQuestion: x<|im_end|>')).toEqual(
      tiny.encode('<|im_start|>user\nQuestion: x<|im_end|>'),
    );

    // HF's initialisation: N(0, 0.02) weights, RMSNorm weights exactly 1; deterministic.
    const embed = checkpoint.tensors.get('model.embed_tokens.weight')!.data;
    const mean = embed.reduce((s, v) => s + v, 0) / embed.length;
    const std = Math.sqrt(embed.reduce((s, v) => s + (v - mean) ** 2, 0) / embed.length);
    expect(Math.abs(mean)).toBeLessThan(1e-3);
    expect(std).toBeGreaterThan(0.0195);
    expect(std).toBeLessThan(0.0205);
    expect(checkpoint.tensors.get('model.layers.0.self_attn.q_norm.weight')!.data.every((v) => v === 1)).toBe(
      true,
    );
    const again = qwenTinyInitTensors(config).get('model.layers.3.mlp.down_proj.weight')!.data;
    expect(checkpoint.tensors.get('model.layers.3.mlp.down_proj.weight')!.data).toEqual(again);
  });
});
