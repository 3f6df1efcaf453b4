// The bundled model qwen-tiny: a Qwen3 architecture small enough to RL-train on a CPU adapter, with a
// tokenizer trimmed from Qwen3's to the text of the lab's synthetic task.
//   node --import tsx scripts/make-qwen-tiny.ts [--induction [--copy-gain G] [--pointer-layers L,…]] [outDir]
//   (npm run make:qwen-tiny)
// writes into outDir (default public/models/qwen-tiny-init): config.json, generation_config.json,
// tokenizer.json, tokenizer_config.json and model.safetensors with a seeded random initialisation.
// --induction (default outDir public/models/qwen-tiny-induction-init) writes an induction circuit
// into that init (src/agent/model/induction-init.ts): the bundled model's starting point.
// --pointer-layers 3 (default outDir public/models/qwen-tiny-pointer-init) adds pointer heads in those
// layers: copy value/output maps with learned attention (same file).
// The warm-started model made from it later lives in public/models/qwen-tiny/ (committed).
//
// The trimmed tokenizer (same pre-tokenizer, byte-level alphabet, added-token handling and chat
// template as Qwen3; only model.vocab, model.merges and the added tokens change):
//   corpus  "the task's text": for synthetic seeds 1..5, train and test: every question, answer and
//           passage, and the oracle's episodes in both think styles under both task presets
//           (src/env/presets.ts) rendered with the chat template and the search tool; the ToolEnv's
//           error and budget messages; printable ASCII.
//   keep    the 9 added tokens the chat template and the ToolEnv use; the 256 byte-level base tokens
//           (byte fallback: any text still encodes); every token the full tokenizer produces on the
//           corpus; and every merge (with its result) that BPE applies to build those tokens.
//   why it is exact: BPE on a pre-tokenized word applies, at each step, the lowest-ranked merge among
//           adjacent pairs. Merges never cross the boundary of a final token, so the merges inside a
//           final token are those BPE applies to that token's bytes alone; we replay exactly those.
//           Every merge the full BPE applies on a corpus word is kept, and kept merges keep their
//           relative rank, so at each step the chosen merge is also the lowest-ranked kept one: the
//           restricted BPE takes the same steps and gives the same split.
//   ids     BPE tokens renumbered 0..n-1 in their original id order, then the added tokens n..V-1 in
//           their original order; merges keep their original rank order.
//
// The model (config.json): hidden 128, 4 layers, 4 query heads and 2 kv heads of head_dim 32 with
// q/k RMSNorm (Qwen3), SwiGLU 384, tied embeddings, 2048 positions, rope_theta 10000, vocab_size = V
// rounded up to a multiple of 64 (the rows past V are never produced by the tokenizer). Weights as HF
// initialises them: normal(0, 0.02) for linear and embedding weights, 1 for RMSNorm weights. The
// normal draws are Irwin–Hall (sum of 12 uniforms from mulberry32, minus 6: mean 0, variance 1,
// tails cut at ±6σ) rather than Box–Muller, so only exact integer and float arithmetic is used and
// the bytes are the same on every JS engine (Math.log / Math.cos may differ in the last bit).

import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { saveCheckpoint } from '../src/agent/model/checkpoint.ts';
import {
  type GenerationConfig,
  type ModelConfig,
  parseGenerationConfig,
  parseModelConfig,
} from '../src/agent/model/config.ts';
import { type InductionInitOptions, plantInductionCircuit } from '../src/agent/model/induction-init.ts';
import { readQwenTokenizerFiles, writeCheckpointFiles } from '../src/agent/model/node-fs.ts';
import { hash32, mulberry32 } from '../src/agent/model/tiny-checkpoints.ts';
import { expectedTensors, formatBytes, parameterCount } from '../src/agent/model/weights.ts';
import { QwenTokenizer } from '../src/agent/tokenizer/qwen-tokenizer.ts';
import { renderQwen3Chat } from '../src/env/chat-format.ts';
import { episodeToSftExample, evaluate } from '../src/env/evaluate.ts';
import { createOraclePolicy, type OracleStyle } from '../src/env/policies/oracle.ts';
import { TASK_PRESETS } from '../src/env/presets.ts';
import { formatUserPrompt, initialMessages } from '../src/env/prompt.ts';
import { generateSyntheticDataset } from '../src/env/tasks/synthetic.ts';
import { toToolSpec } from '../src/env/tool.ts';
import { ToolEnv } from '../src/env/tool-env.ts';
import { createSearchTool, pooledSearchTools } from '../src/env/tools/search.ts';

export const QWEN_TINY_DEFAULT_DIR = 'public/models/qwen-tiny-init';
/** `--induction`: the same init with an induction circuit written in (src/agent/model/induction-init.ts). */
export const QWEN_TINY_INDUCTION_DIR = 'public/models/qwen-tiny-induction-init';
/** `--induction --pointer-layers …`: the induction init with pointer heads. */
export const QWEN_TINY_POINTER_DIR = 'public/models/qwen-tiny-pointer-init';
/** Synthetic-task seeds whose text the trimmed vocabulary is built from. */
export const QWEN_TINY_CORPUS_SEEDS: readonly number[] = [1, 2, 3, 4, 5];
/** Added tokens kept, in Qwen's id order: the chat turns, Hermes tool calls and responses, Qwen3 thinking. */
export const QWEN_TINY_ADDED_TOKENS: readonly string[] = [
  '<|endoftext|>',
  '<|im_start|>',
  '<|im_end|>',
  '<tool_call>',
  '</tool_call>',
  '<tool_response>',
  '</tool_response>',
  '<think>',
  '</think>',
];
const INIT_SEED = 20251118;
const INIT_STD = 0.02; // HF's initializer_range

// ---------------------------------------------------------------------------------------------
// The corpus

/** The 256 characters byte-level BPE writes bytes as (GPT-2's bytes_to_unicode), indexed by byte. */
export function byteLevelAlphabet(): string[] {
  const printable = (b: number) =>
    (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const out: string[] = [];
  let shifted = 0;
  for (let b = 0; b < 256; b++) out.push(String.fromCodePoint(printable(b) ? b : 256 + shifted++));
  return out;
}

/** Observations the ToolEnv writes for malformed turns, bad calls and the budgets, as rendered. */
async function toolEnvMessages(): Promise<string[]> {
  const task = { id: 't', question: 'Who founded Example Books?', answers: ['x'], supportingIds: [] };
  const passages = [{ id: 'p', title: 'Example Books', text: 'Example Books was founded in 1900.' }];
  const call = (args: string) => `<tool_call>\n{"name": "search", "arguments": ${args}}\n</tool_call>`;
  const actions = [
    '',
    'no tags at all',
    '<think>\nunclosed',
    '<think>\na\n</think>\n\n<think>\nb\n</think>\n\n<answer>x</answer>',
    '<answer></answer>',
    '<answer>a</answer><answer>b</answer>',
    `<answer>a</answer>${call('{"query": "x"}')}`,
    '<tool_call>\n\n</tool_call>',
    '<tool_call>\nnot json\n</tool_call>',
    '<tool_call>\n[1, 2]\n</tool_call>',
    '<tool_call>\n{"arguments": {}}\n</tool_call>',
    '<tool_call>\n{"name": "search"}\n</tool_call>',
    '<tool_call>\n{"name": "lookup", "arguments": {"query": "x"}}\n</tool_call>',
    '<tool_call>\n<answer>x</answer>\n</tool_call>',
    '</tool_call>',
    '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}',
    '<|im_start|>user\nhi',
    call('{}'),
    call('{"query": ""}'),
    call('{"query": 3}'),
    call('{"query": "x", "top": 2}'),
    call('{"query": " "}'),
    call('{"query": "zzzz"}'),
    call('{"query": "Example Books"}') + call('{"query": "Example"}'),
  ];
  const out: string[] = [];
  for (const action of actions) {
    const env = new ToolEnv(task, [createSearchTool(passages)], { maxToolCalls: 1 });
    const first = await env.step(action);
    out.push(first.observation.text);
    if (!first.done) {
      // A second call exceeds the budget of one.
      const second = await env.step(call('{"query": "Example Books"}'));
      out.push(second.observation.text);
    }
  }
  return out.filter((t) => t !== '');
}

/**
 * The task's text (deduplicated): what the trimmed tokenizer must split exactly as Qwen3's does.
 * About 3 s for the five default seeds (per seed and split, oracle episodes for 2 presets × 2 styles):
 * 14,114 texts, 22 M characters.
 */
export async function qwenTinyCorpus(seeds: readonly number[] = QWEN_TINY_CORPUS_SEEDS): Promise<string[]> {
  const texts = new Set<string>();
  let ascii = '';
  for (let c = 0x20; c < 0x7f; c++) ascii += String.fromCharCode(c);
  texts.add(ascii);
  for (const ch of `${ascii}\n\t`) texts.add(ch);
  for (const text of await toolEnvMessages()) texts.add(text);
  const styles: OracleStyle[] = ['full', 'compact'];
  for (const seed of seeds) {
    const dataset = generateSyntheticDataset({ seed });
    for (const split of [dataset.train, dataset.test]) {
      for (const p of split.corpus) {
        texts.add(p.title);
        texts.add(p.text);
      }
      for (const task of split.tasks) {
        texts.add(task.question);
        texts.add(formatUserPrompt(task.question));
        for (const a of task.answers) texts.add(a);
      }
      for (const preset of Object.values(TASK_PRESETS)) {
        const tools = pooledSearchTools(split.corpus, preset.search);
        // The prompt as the model sees it at the first turn, also with thinking switched off.
        const first = split.tasks[0];
        const specs = tools(first).map(toToolSpec);
        for (const enableThinking of [true, false]) {
          texts.add(
            renderQwen3Chat(initialMessages(first.question, preset.systemPrompt), {
              tools: specs,
              addGenerationPrompt: true,
              enableThinking,
            }),
          );
        }
        for (const style of styles) {
          const report = await evaluate(createOraclePolicy({ style }), split.tasks, {
            tools,
            env: { systemPrompt: preset.systemPrompt },
          });
          for (const episode of report.episodes) texts.add(episodeToSftExample(episode).text);
        }
      }
    }
  }
  return [...texts];
}

// ---------------------------------------------------------------------------------------------
// Trimming

type Json = Record<string, unknown>;

export interface TrimmedTokenizer {
  /** tokenizer.json and tokenizer_config.json texts. */
  files: Map<string, string>;
  /** Token ids the trimmed tokenizer can produce (BPE tokens + added tokens). */
  vocabSize: number;
  /** Kept merges. */
  mergeCount: number;
}

function mergePair(merge: unknown): [string, string] {
  if (Array.isArray(merge) && merge.length === 2) return [String(merge[0]), String(merge[1])];
  if (typeof merge === 'string') {
    const space = merge.indexOf(' ', 1);
    if (space > 0) return [merge.slice(0, space), merge.slice(space + 1)];
  }
  throw new Error(`tokenizer.json: merge ${JSON.stringify(merge)} is neither "a b" nor ["a", "b"]`);
}

/**
 * Replays BPE on one final token's bytes with the full merge ranks, recording each merge applied.
 * Follows HF's order: the lowest-ranked adjacent pair first, leftmost among equals.
 */
function replayMerges(token: string, rankOf: ReadonlyMap<string, number>, applied: Set<number>): void {
  const symbols = [...token];
  for (;;) {
    let best = -1;
    let bestRank = Number.POSITIVE_INFINITY;
    for (let i = 0; i + 1 < symbols.length; i++) {
      const rank = rankOf.get(`${symbols[i]}\u0000${symbols[i + 1]}`);
      if (rank !== undefined && rank < bestRank) {
        bestRank = rank;
        best = i;
      }
    }
    if (best < 0) break;
    applied.add(bestRank);
    symbols.splice(best, 2, symbols[best] + symbols[best + 1]);
  }
  if (symbols.length !== 1 || symbols[0] !== token) {
    throw new Error(
      `BPE on the bytes of token ${JSON.stringify(token)} gives [${symbols.map((s) => JSON.stringify(s)).join(', ')}], not the token itself`,
    );
  }
}

/**
 * Trims Qwen's tokenizer files to the corpus (see the header): same token strings on every corpus
 * text, byte fallback for any other text, the chat template unchanged.
 */
export function trimQwenTokenizer(
  fullFiles: ReadonlyMap<string, string>,
  corpus: readonly string[],
): TrimmedTokenizer {
  const full = QwenTokenizer.fromFiles(fullFiles);
  return trimQwenTokenizerToTokens(
    fullFiles,
    corpus.flatMap((text) => full.tokenize(text)),
  );
}

/**
 * The same, from the token strings the full tokenizer gives on the corpus (for callers that have
 * them already: tokenizing the corpus is most of the time).
 */
export function trimQwenTokenizerToTokens(
  fullFiles: ReadonlyMap<string, string>,
  corpusTokens: Iterable<string>,
): TrimmedTokenizer {
  const fullJsonText = fullFiles.get('tokenizer.json');
  const fullConfigText = fullFiles.get('tokenizer_config.json');
  if (fullJsonText === undefined || fullConfigText === undefined) {
    throw new Error('trimQwenTokenizer: needs tokenizer.json and tokenizer_config.json');
  }
  const json = JSON.parse(fullJsonText) as Json;
  const config = JSON.parse(fullConfigText) as Json;
  const model = json.model as { vocab: Record<string, number>; merges: unknown[] };
  const addedTokens = json.added_tokens as { id: number; content: string }[];

  const merges = model.merges.map(mergePair);
  const rankOf = new Map(merges.map(([a, b], rank) => [`${a}\u0000${b}`, rank]));

  const added = new Set(QWEN_TINY_ADDED_TOKENS);
  for (const text of QWEN_TINY_ADDED_TOKENS) {
    if (!addedTokens.some((t) => t.content === text)) {
      throw new Error(`tokenizer.json: the full tokenizer has no added token ${text}`);
    }
  }
  const allAdded = new Set(addedTokens.map((t) => t.content));

  // Final tokens of the corpus, and the merges that build them.
  const produced = new Set<string>();
  for (const token of corpusTokens) {
    if (allAdded.has(token)) {
      if (!added.has(token)) throw new Error(`the corpus uses added token ${token}, which is not kept`);
    } else {
      produced.add(token);
    }
  }
  const applied = new Set<number>();
  for (const token of produced) replayMerges(token, rankOf, applied);

  const keep = new Set<string>(byteLevelAlphabet());
  for (const rank of applied) keep.add(merges[rank][0] + merges[rank][1]);
  for (const token of produced) keep.add(token);
  for (const token of keep) {
    if (model.vocab[token] === undefined) {
      throw new Error(`tokenizer.json: token ${JSON.stringify(token)} is not in the vocabulary`);
    }
  }

  const kept = [...keep].sort((a, b) => model.vocab[a] - model.vocab[b]);
  const vocab: Record<string, number> = {};
  kept.forEach((token, id) => {
    vocab[token] = id;
  });
  const keptMerges = [...applied].sort((a, b) => a - b).map((rank) => merges[rank]);

  const newAddedId = new Map<string, number>();
  const keptAdded = addedTokens
    .filter((t) => added.has(t.content))
    .map((t) => {
      const id = kept.length + newAddedId.size;
      newAddedId.set(t.content, id);
      return { ...t, id };
    });

  const trimmedJson = { ...json, added_tokens: keptAdded, model: { ...model, vocab, merges: keptMerges } };

  const decoder = config.added_tokens_decoder as Record<string, { content: string }>;
  const trimmedDecoder: Record<string, unknown> = {};
  for (const entry of Object.values(decoder)) {
    const id = newAddedId.get(entry.content);
    if (id !== undefined) trimmedDecoder[String(id)] = entry;
  }
  const trimmedConfig: Json = { ...config, added_tokens_decoder: trimmedDecoder };
  if (Array.isArray(config.additional_special_tokens)) {
    trimmedConfig.additional_special_tokens = config.additional_special_tokens.filter((t: unknown) =>
      added.has(String(t)),
    );
  }
  for (const key of ['eos_token', 'pad_token'] as const) {
    const text = config[key];
    if (typeof text === 'string' && !added.has(text)) {
      throw new Error(`tokenizer_config.json: ${key} ${text} is not among the kept added tokens`);
    }
  }

  return {
    files: new Map([
      ['tokenizer.json', `${JSON.stringify(trimmedJson, null, 2)}\n`],
      ['tokenizer_config.json', `${JSON.stringify(trimmedConfig, null, 2)}\n`],
    ]),
    vocabSize: kept.length + keptAdded.length,
    mergeCount: keptMerges.length,
  };
}

// ---------------------------------------------------------------------------------------------
// The model

/** Ids the config needs, read from the trimmed tokenizer. */
export interface QwenTinyTokenIds {
  vocabSize: number;
  endOfText: number;
  imEnd: number;
}

export function qwenTinyTokenIds(tokenizer: QwenTokenizer): QwenTinyTokenIds {
  return {
    vocabSize: tokenizer.vocabSize,
    endOfText: tokenizer.specialId('endOfText'),
    imEnd: tokenizer.specialId('imEnd'),
  };
}

/** Embedding rows: the tokenizer's ids rounded up to a multiple of 64 (matmul tiles). */
export function qwenTinyVocabRows(tokenizerVocabSize: number): number {
  if (!Number.isInteger(tokenizerVocabSize) || tokenizerVocabSize < 1) {
    throw new Error(
      `qwen-tiny: tokenizer vocabulary size must be a positive integer, got ${tokenizerVocabSize}`,
    );
  }
  return Math.ceil(tokenizerVocabSize / 64) * 64;
}

export function qwenTinyModelConfig(ids: QwenTinyTokenIds): ModelConfig {
  return parseModelConfig(
    {
      architectures: ['Qwen3ForCausalLM'],
      model_type: 'qwen3',
      vocab_size: qwenTinyVocabRows(ids.vocabSize),
      hidden_size: 128,
      intermediate_size: 384,
      num_hidden_layers: 4,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      head_dim: 32,
      hidden_act: 'silu',
      rms_norm_eps: 1e-6,
      rope_theta: 10000,
      rope_scaling: null,
      max_position_embeddings: 2048,
      max_window_layers: 4,
      use_sliding_window: false,
      sliding_window: null,
      attention_bias: false,
      attention_dropout: 0,
      initializer_range: INIT_STD,
      use_cache: true,
      tie_word_embeddings: true,
      torch_dtype: 'float32',
      bos_token_id: ids.endOfText,
      eos_token_id: ids.imEnd,
    },
    'qwen-tiny/config.json',
  );
}

export function qwenTinyGenerationConfig(ids: QwenTinyTokenIds): GenerationConfig {
  return parseGenerationConfig(
    {
      bos_token_id: ids.endOfText,
      eos_token_id: [ids.imEnd, ids.endOfText],
      pad_token_id: ids.endOfText,
      do_sample: true,
      temperature: 0.6,
      top_p: 0.95,
      top_k: 20,
    },
    'qwen-tiny/generation_config.json',
    qwenTinyVocabRows(ids.vocabSize),
  );
}

/** HF's initialisation, seeded: normal(0, 0.02) weights (Irwin–Hall, see the header), RMSNorm weights 1. */
export function qwenTinyInitTensors(
  config: ModelConfig,
  seed = INIT_SEED,
): Map<string, { shape: number[]; data: Float32Array }> {
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const { name, shape } of expectedTensors(config)) {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    if (name.endsWith('norm.weight')) {
      data.fill(1);
    } else {
      const rand = mulberry32(hash32(`${seed}:${name}`));
      for (let i = 0; i < data.length; i++) {
        let sum = 0;
        for (let k = 0; k < 12; k++) sum += rand();
        data[i] = (sum - 6) * INIT_STD;
      }
    }
    tensors.set(name, { shape, data });
  }
  return tensors;
}

export interface QwenTinyCheckpoint {
  /** File name -> bytes, as saveCheckpoint lays them out. */
  files: Map<string, Uint8Array>;
  config: ModelConfig;
  trimmed: TrimmedTokenizer;
  corpusTexts: number;
}

/** Builds the corpus, trims the tokenizer and makes the random initial checkpoint. */
export async function makeQwenTiny(
  fullTokenizerFiles: ReadonlyMap<string, string>,
  seed = INIT_SEED,
  induction?: Partial<InductionInitOptions>,
): Promise<QwenTinyCheckpoint> {
  const corpus = await qwenTinyCorpus();
  const trimmed = trimQwenTokenizer(fullTokenizerFiles, corpus);
  const ids = qwenTinyTokenIds(QwenTokenizer.fromFiles(trimmed.files));
  const config = qwenTinyModelConfig(ids);
  const files = saveCheckpoint({
    config,
    generationConfig: qwenTinyGenerationConfig(ids),
    tensors: induction
      ? plantInductionCircuit(config, qwenTinyInitTensors(config, seed), { ...induction, initStd: INIT_STD })
      : qwenTinyInitTensors(config, seed),
    dtype: 'F32',
    tokenizerFiles: trimmed.files,
  });
  return { files, config, trimmed, corpusTexts: corpus.length };
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      induction: { type: 'boolean', default: false },
      'copy-gain': { type: 'string' },
      'pointer-layers': { type: 'string' },
    },
  });
  const copyGain = values['copy-gain'] === undefined ? undefined : Number(values['copy-gain']);
  if (copyGain !== undefined && !(copyGain > 0))
    throw new Error('make:qwen-tiny: --copy-gain must be a positive number');
  if (copyGain !== undefined && !values.induction)
    throw new Error('make:qwen-tiny: --copy-gain needs --induction');
  const pointerLayers = values['pointer-layers']?.split(',').map(Number);
  if (pointerLayers?.some((l) => !Number.isInteger(l)))
    throw new Error(`make:qwen-tiny: --pointer-layers must be a comma-separated list of layer numbers`);
  if (pointerLayers !== undefined && !values.induction)
    throw new Error('make:qwen-tiny: --pointer-layers needs --induction');
  const defaultDir = pointerLayers
    ? QWEN_TINY_POINTER_DIR
    : values.induction
      ? QWEN_TINY_INDUCTION_DIR
      : QWEN_TINY_DEFAULT_DIR;
  const outDir = positionals[0] ?? defaultDir;
  const induction = values.induction
    ? { ...(copyGain === undefined ? {} : { copyGain }), ...(pointerLayers ? { pointerLayers } : {}) }
    : undefined;
  const made = await makeQwenTiny(await readQwenTokenizerFiles(), INIT_SEED, induction);
  await writeCheckpointFiles(outDir, made.files);
  const bytes = [...made.files.values()].reduce((n, f) => n + f.length, 0);
  console.log(
    `${outDir}: ${[...made.files.keys()].join(', ')} (${formatBytes(bytes)})\n` +
      `tokenizer: ${made.trimmed.vocabSize} tokens (${made.trimmed.mergeCount} merges) from ${made.corpusTexts} corpus texts; ` +
      `vocab_size ${made.config.vocabSize}; ${(parameterCount(made.config) / 1e6).toFixed(2)}M parameters`,
  );
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((e) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  });
}
