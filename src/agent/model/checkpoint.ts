// Load a Hugging Face Qwen checkpoint from any ModelSource, and save one back as HF files.
//
// A checkpoint folder (what `save_pretrained` writes):
//   config.json                    architecture and sizes                      (required)
//   generation_config.json         eos ids, sampling defaults                  (optional)
//   model.safetensors              all weights                                 (or:)
//   model.safetensors.index.json   + model-0000k-of-0000n.safetensors shards
//   tokenizer.json                 BPE vocab, merges, added tokens             (optional, both or neither)
//   tokenizer_config.json          special tokens, chat template
//
// loadCheckpoint reads and checks everything in the order that fails fastest: config first (and the
// adapter limits, before downloading gigabytes), then the tokenizer (to check the vocab size), then
// the weights, whose header is checked against the config before any value is converted.

import { tokenizerVocabSize } from '../tokenizer/vocab.ts';
import {
  type GenerationConfig,
  type ModelConfig,
  parseGenerationConfig,
  parseModelConfig,
  serializeGenerationConfig,
  serializeModelConfig,
  type TorchDtype,
} from './config.ts';
import { CheckpointError, ModelSourceError, TokenizerError } from './errors.ts';
import {
  encodeFloat32,
  type FloatDtype,
  numElements,
  parseSafetensors,
  parseShardIndex,
  type SafetensorsDtype,
  type SafetensorsFile,
  SHARD_INDEX_FILE,
  serializeSafetensors,
  type TensorEntry,
  type TensorToWrite,
  tensorBytes,
  tensorToFloat32,
} from './safetensors.ts';
import type { ModelSource, ProgressCallback } from './sources.ts';
import {
  type AdapterLimits,
  assertFitsAdapter,
  checkTensors,
  checkVocabSize,
  expectedTensors,
} from './weights.ts';

export const CONFIG_FILE = 'config.json';
export const GENERATION_CONFIG_FILE = 'generation_config.json';
export const WEIGHTS_FILE = 'model.safetensors';
export const TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json'] as const;

export interface LoadedTensor {
  /** The dtype in the file. */
  dtype: SafetensorsDtype;
  shape: number[];
  /** Values as float32 (exact for F32/F16/BF16 files). Row-major; Linear weights are [out, in]. */
  data: Float32Array;
  /** The file's bytes for this tensor (little-endian, `dtype`), when loaded with keepRaw. */
  raw?: Uint8Array;
}

export interface Checkpoint {
  config: ModelConfig;
  /** null when the checkpoint has no generation_config.json. */
  generationConfig: GenerationConfig | null;
  tensors: Map<string, LoadedTensor>;
  /** tokenizer.json and tokenizer_config.json texts, unchanged; empty when the checkpoint has none. */
  tokenizerFiles: Map<string, string>;
  /** Token count of tokenizer.json, or null without a tokenizer. */
  tokenizerVocabSize: number | null;
  /** The safetensors files the weights came from. */
  weightFiles: string[];
  /** Things that were ignored on the way (see checkTensors). */
  warnings: string[];
}

export interface LoadCheckpointOptions {
  /** Called for every chunk of every file read. */
  onProgress?: ProgressCallback;
  /** A tensor the config does not call for: error (default) or warning. */
  unexpectedTensors?: 'error' | 'warn';
  /** Also keep each tensor's raw file bytes (e.g. to upload F16 weights packed). */
  keepRaw?: boolean;
  /** Fail when the checkpoint has no tokenizer files (default: a tokenizer is optional). */
  requireTokenizer?: boolean;
  /** Refuse, before downloading weights, a model that does not fit these adapter limits. */
  adapterLimits?: AdapterLimits & { bytesPerElement?: number };
}

async function requireFile(source: ModelSource, name: string, why: string): Promise<void> {
  if (!(await source.has(name))) {
    throw new ModelSourceError('not-found', name, `missing from ${source.description} (${why})`);
  }
}

export async function loadCheckpoint(
  source: ModelSource,
  options: LoadCheckpointOptions = {},
): Promise<Checkpoint> {
  const { onProgress } = options;
  const warnings: string[] = [];

  // 1. config.json, and the adapter limits it implies.
  await requireFile(source, CONFIG_FILE, 'every checkpoint needs one');
  const config = parseModelConfig(await source.readText(CONFIG_FILE, onProgress), CONFIG_FILE);
  if (options.adapterLimits) {
    assertFitsAdapter(config, options.adapterLimits, options.adapterLimits.bytesPerElement ?? 4);
  }

  // 2. generation_config.json (optional).
  const generationConfig = (await source.has(GENERATION_CONFIG_FILE))
    ? parseGenerationConfig(
        await source.readText(GENERATION_CONFIG_FILE, onProgress),
        GENERATION_CONFIG_FILE,
        config.vocabSize,
      )
    : null;

  // 3. Tokenizer files: both or neither; the embedding needs a row for every token.
  const tokenizerFiles = new Map<string, string>();
  for (const name of TOKENIZER_FILES) {
    if (await source.has(name)) tokenizerFiles.set(name, await source.readText(name, onProgress));
  }
  let vocabFromTokenizer: number | null = null;
  if (tokenizerFiles.size === 1) {
    const [have] = tokenizerFiles.keys();
    const missing = TOKENIZER_FILES.find((f) => f !== have)!;
    throw new ModelSourceError(
      'not-found',
      missing,
      `missing from ${source.description} although ${have} is there`,
    );
  }
  if (tokenizerFiles.size === 2) {
    let tokenizerJSON: unknown;
    try {
      tokenizerJSON = JSON.parse(tokenizerFiles.get('tokenizer.json')!);
    } catch (e) {
      throw new TokenizerError('tokenizer.json', `not JSON (${(e as Error).message})`);
    }
    vocabFromTokenizer = tokenizerVocabSize(tokenizerJSON);
    checkVocabSize(config, vocabFromTokenizer, CONFIG_FILE);
  } else if (options.requireTokenizer) {
    throw new ModelSourceError(
      'not-found',
      'tokenizer.json',
      `missing from ${source.description} (a tokenizer is required)`,
    );
  }

  // 4. Weights: one file, or shards named by the index.
  let weightFiles: string[];
  let shardOf: Map<string, string> | null = null; // tensor -> shard, from the index
  if (await source.has(SHARD_INDEX_FILE)) {
    const index = parseShardIndex(await source.readText(SHARD_INDEX_FILE, onProgress), SHARD_INDEX_FILE);
    shardOf = index.weightMap;
    weightFiles = [...new Set(index.weightMap.values())].sort(); // shard order, as transformers loads them
  } else if (await source.has(WEIGHTS_FILE)) {
    weightFiles = [WEIGHTS_FILE];
  } else {
    throw new ModelSourceError(
      'not-found',
      WEIGHTS_FILE,
      `missing from ${source.description}, and there is no ${SHARD_INDEX_FILE} either`,
    );
  }

  const located = new Map<string, { file: SafetensorsFile; entry: TensorEntry }>();
  for (const name of weightFiles) {
    const file = parseSafetensors(await source.readBytes(name, onProgress), name);
    for (const [tensor, entry] of file.tensors) {
      const previous = located.get(tensor);
      if (previous !== undefined) {
        throw new CheckpointError(name, `tensor '${tensor}' is also in ${previous.file.fileName}`);
      }
      if (shardOf !== null && shardOf.get(tensor) !== name) {
        if (!shardOf.has(tensor)) {
          warnings.push(`${name}: ignoring tensor '${tensor}', which ${SHARD_INDEX_FILE} does not list`);
          continue;
        }
        throw new CheckpointError(
          name,
          `has tensor '${tensor}' but ${SHARD_INDEX_FILE} puts it in ${shardOf.get(tensor)}`,
        );
      }
      located.set(tensor, { file, entry });
    }
  }
  if (shardOf !== null) {
    for (const [tensor, shard] of shardOf) {
      if (!located.has(tensor)) {
        throw new CheckpointError(
          shard,
          `has no tensor '${tensor}' although ${SHARD_INDEX_FILE} says it does`,
        );
      }
    }
  }

  // 5. Names and shapes against the config, then convert what we keep.
  const fileOf = (tensor: string) =>
    located.get(tensor)?.file.fileName ?? (shardOf === null ? WEIGHTS_FILE : SHARD_INDEX_FILE);
  const shapes = new Map([...located].map(([name, { entry }]) => [name, { shape: entry.shape }]));
  warnings.push(
    ...checkTensors(config, shapes, fileOf, { unexpected: options.unexpectedTensors ?? 'error' }),
  );

  const tensors = new Map<string, LoadedTensor>();
  for (const { name } of expectedTensors(config)) {
    const { file, entry } = located.get(name)!;
    const t: LoadedTensor = { dtype: entry.dtype, shape: entry.shape, data: tensorToFloat32(file, name) };
    if (options.keepRaw) t.raw = tensorBytes(file, name);
    tensors.set(name, t);
  }

  return {
    config,
    generationConfig,
    tensors,
    tokenizerFiles,
    tokenizerVocabSize: vocabFromTokenizer,
    weightFiles,
    warnings,
  };
}

// ---------------------------------------------------------------------------------------------
// Saving

export interface SaveCheckpointInput {
  config: ModelConfig;
  generationConfig?: GenerationConfig | null;
  /** Exactly the tensors expectedTensors(config) lists, as float32 values. */
  tensors: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>;
  /** dtype of model.safetensors; default: the config's torch_dtype, else F32. */
  dtype?: FloatDtype;
  /** Tokenizer files to copy through unchanged (e.g. Checkpoint.tokenizerFiles). */
  tokenizerFiles?: ReadonlyMap<string, string | Uint8Array>;
}

const TORCH_DTYPE: Record<FloatDtype, TorchDtype> = { F32: 'float32', F16: 'float16', BF16: 'bfloat16' };
const FILE_DTYPE: Record<TorchDtype, FloatDtype> = { float32: 'F32', float16: 'F16', bfloat16: 'BF16' };

/**
 * The checkpoint as HF files: file name -> bytes (config.json, generation_config.json when given,
 * model.safetensors, tokenizer files when given). Written as transformers' save_pretrained would
 * (sorted-key JSON; safetensors with {"format": "pt"} metadata; no lm_head.weight when tied), so
 * transformers can load the folder. Node: writeCheckpointFiles in node-fs.ts puts them in a directory.
 */
export function saveCheckpoint(input: SaveCheckpointInput): Map<string, Uint8Array> {
  const dtype = input.dtype ?? (input.config.torchDtype ? FILE_DTYPE[input.config.torchDtype] : 'F32');
  const config: ModelConfig = { ...input.config, torchDtype: TORCH_DTYPE[dtype] };
  checkTensors(config, input.tensors, WEIGHTS_FILE, { unexpected: 'error' });

  const toWrite = new Map<string, TensorToWrite>();
  for (const { name, shape } of expectedTensors(config)) {
    const t = input.tensors.get(name)!;
    if (t.data.length !== numElements(shape)) {
      throw new CheckpointError(
        WEIGHTS_FILE,
        `tensor '${name}' has ${t.data.length} values but shape [${shape.join(', ')}] needs ${numElements(shape)}`,
      );
    }
    toWrite.set(name, { dtype, shape, data: encodeFloat32(t.data, dtype) });
  }

  const encoder = new TextEncoder();
  const files = new Map<string, Uint8Array>();
  files.set(CONFIG_FILE, encoder.encode(serializeModelConfig(config)));
  if (input.generationConfig) {
    files.set(GENERATION_CONFIG_FILE, encoder.encode(serializeGenerationConfig(input.generationConfig)));
  }
  files.set(WEIGHTS_FILE, serializeSafetensors(toWrite));
  for (const [name, content] of input.tokenizerFiles ?? []) {
    files.set(name, typeof content === 'string' ? encoder.encode(content) : content);
  }
  return files;
}
