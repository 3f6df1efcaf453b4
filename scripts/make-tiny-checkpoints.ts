// Write the tiny random Qwen checkpoints (see src/agent/model/tiny-checkpoints.ts) in HF layout:
//   node --import tsx scripts/make-tiny-checkpoints.ts [--manifest] [outDir] [name ...]
// outDir defaults to public/models, so the app serves them at /models/<name>/. With names, only
// those checkpoints are written. Output is deterministic: running it twice gives identical files,
// and a file whose bytes are already on disk is not written again (so a repeat run is quick and
// leaves modification times alone).
//
// --manifest also writes <outDir>/index.json, the list the lab's model panel offers: every folder in
// outDir with a config.json (the checkpoints written now first, in the order named, then any other
// folder, e.g. a real model copied in by hand), each with a name, a description and its size.

import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseModelConfig } from '../src/agent/model/config.ts';
import { readQwenTokenizerFiles, writeCheckpointFiles } from '../src/agent/model/node-fs.ts';
import {
  makeTinyCheckpoint,
  QWEN_VOCAB_ROWS,
  TINY_CHECKPOINTS,
  type TinyCheckpointSpec,
  tinyModelConfig,
  tinySpec,
} from '../src/agent/model/tiny-checkpoints.ts';
import { formatBytes, parameterCount } from '../src/agent/model/weights.ts';

const MANIFEST_FILE = 'index.json';

/** One model folder, as public/models/index.json lists it. */
interface ManifestEntry {
  name: string;
  description: string;
  /** Bytes of all files in the folder. */
  size: number;
  files: { name: string; size: number }[];
  architecture: string;
  parameters: number;
  vocabSize: number;
  /** Has tokenizer.json + tokenizer_config.json (chat template). */
  tokenizer: boolean;
}

/** Files whose bytes differ from what is on disk (missing files included). */
async function changedFiles(dir: string, files: ReadonlyMap<string, Uint8Array>): Promise<string[]> {
  const changed: string[] = [];
  for (const [name, bytes] of files) {
    const path = join(dir, name);
    const size = await stat(path).then(
      (s) => (s.isFile() ? s.size : -1),
      () => -1,
    );
    if (size !== bytes.length || !(await readFile(path)).equals(bytes)) changed.push(name);
  }
  return changed;
}

function describeTiny(spec: TinyCheckpointSpec): string {
  const c = tinyModelConfig(spec);
  const arch = spec.arch === 'qwen2' ? 'Qwen2' : 'Qwen3';
  const shape =
    `${c.numLayers} layers, hidden ${c.hiddenSize}, ${c.numHeads}/${c.numKvHeads} heads, ` +
    `${spec.tied ? 'tied' : 'untied'} LM head, ${spec.dtype}`;
  return spec.vocabSize === QWEN_VOCAB_ROWS
    ? `Random tiny ${arch} (${shape}) with Qwen's real 151,936-row vocabulary, tokenizer and chat ` +
        'template: exercises the whole pipeline; its text is gibberish.'
    : `Random tiny ${arch} (${shape}) with a ${spec.vocabSize}-row vocabulary and no tokenizer: ` +
        'generates token ids only; fast on software adapters.';
}

async function manifestEntry(outDir: string, name: string): Promise<ManifestEntry | null> {
  const dir = join(outDir, name);
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => null);
  if (entries === null || !entries.some((e) => e.isFile() && e.name === 'config.json')) return null;
  let config: ReturnType<typeof parseModelConfig>;
  try {
    config = parseModelConfig(await readFile(join(dir, 'config.json'), 'utf8'), `${name}/config.json`);
  } catch (e) {
    console.warn(`${MANIFEST_FILE}: leaving out ${dir}: ${(e as Error).message}`);
    return null;
  }
  const files: ManifestEntry['files'] = [];
  for (const e of entries.filter((e) => e.isFile()).sort((a, b) => a.name.localeCompare(b.name))) {
    files.push({ name: e.name, size: (await stat(join(dir, e.name))).size });
  }
  const spec = TINY_CHECKPOINTS.find((s) => s.name === name);
  const parameters = parameterCount(config);
  const description = spec
    ? describeTiny(spec)
    : `${config.architecture}: ${config.numLayers} layers, hidden ${config.hiddenSize}, ` +
      `${config.numHeads}/${config.numKvHeads} heads, vocab ${config.vocabSize}, ` +
      `${(parameters / 1e6).toFixed(1)}M parameters${config.torchDtype ? `, ${config.torchDtype}` : ''}`;
  return {
    name,
    description,
    size: files.reduce((n, f) => n + f.size, 0),
    files,
    architecture: config.architecture,
    parameters,
    vocabSize: config.vocabSize,
    tokenizer:
      files.some((f) => f.name === 'tokenizer.json') && files.some((f) => f.name === 'tokenizer_config.json'),
  };
}

async function writeManifest(outDir: string, first: readonly string[]): Promise<void> {
  const folders = (await readdir(outDir, { withFileTypes: true }))
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  const order = [...first, ...folders.filter((n) => !first.includes(n))];
  const models: ManifestEntry[] = [];
  for (const name of order) {
    const entry = await manifestEntry(outDir, name);
    if (entry) models.push(entry);
  }
  const text = `${JSON.stringify({ models }, null, 2)}\n`;
  const path = join(outDir, MANIFEST_FILE);
  const old = await readFile(path, 'utf8').catch(() => null);
  if (old !== text) await writeFile(path, text);
  const total = models.reduce((n, m) => n + m.size, 0);
  console.log(
    `${path}: ${models.map((m) => m.name).join(', ')} (${formatBytes(total)})${old === text ? ' unchanged' : ''}`,
  );
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const manifest = args.includes('--manifest');
  const [outDir = 'public/models', ...names] = args.filter((a) => a !== '--manifest');
  const specs = names.length > 0 ? names.map(tinySpec) : TINY_CHECKPOINTS;
  const tokenizerFiles = await readQwenTokenizerFiles();
  for (const spec of specs) {
    const files = makeTinyCheckpoint(spec, tokenizerFiles);
    const dir = join(outDir, spec.name);
    const changed = await changedFiles(dir, files);
    if (changed.length > 0) {
      await writeCheckpointFiles(dir, new Map(changed.map((name) => [name, files.get(name)!])));
    }
    const bytes = [...files.values()].reduce((n, f) => n + f.length, 0);
    const note = changed.length === 0 ? ' unchanged' : '';
    console.log(`${dir}: ${[...files.keys()].join(', ')} (${formatBytes(bytes)})${note}`);
  }
  if (manifest)
    await writeManifest(
      outDir,
      specs.map((s) => s.name),
    );
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
