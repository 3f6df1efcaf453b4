// npm run export:onnx -- <checkpoint> <out> [--adapter DIR] [--external-data auto|yes|no] [--force]
// Writes the folder transformers.js loads for text generation (src/agent/model/onnx-export.ts):
// config.json, generation_config.json, tokenizer files and onnx/model.onnx (+ onnx/model.onnx_data).
//   <checkpoint>  an HF-layout folder: public/models/qwen-tiny, a run's checkpoints/step-N, an export
//   --adapter     a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) for that
//                 checkpoint: merged into the weights before the export
//   --external-data  weights outside the graph: auto (default: above 1.5 GiB), yes, no
//   --force       write into a folder that is not empty
// Bad input (no such folder, no tokenizer, a config or tensor that does not fit) is one line, exit 2.
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadCheckpoint } from '../src/agent/model/checkpoint.ts';
import { loadPeftAdapter, mergeLora, PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE } from '../src/agent/model/lora.ts';
import { directorySource, writeCheckpointFiles } from '../src/agent/model/node-fs.ts';
import { exportForTransformersJs, ONNX_DATA_FILE } from '../src/agent/model/onnx-export.ts';

const USAGE =
  'usage: npm run export:onnx -- <checkpoint> <out> [--adapter DIR] [--external-data auto|yes|no] [--force]';
function fail(message: string): never {
  console.error(`export:onnx: ${message}`);
  process.exit(2);
}

let parsed: ReturnType<typeof parse>;
function parse() {
  return parseArgs({
    allowPositionals: true,
    options: {
      adapter: { type: 'string' },
      'external-data': { type: 'string', default: 'auto' },
      force: { type: 'boolean', default: false },
    },
  });
}
try {
  parsed = parse();
} catch (e) {
  fail(`${(e as Error).message}\n${USAGE}`);
}
const { values, positionals } = parsed;
if (positionals.length !== 2) fail(USAGE);
const [from, to] = positionals;
const modes = { auto: 'auto', yes: true, no: false } as const;
const externalData = modes[values['external-data'] as keyof typeof modes];
if (externalData === undefined)
  fail(`--external-data must be auto, yes or no, got ${values['external-data']}`);

const existing = await readdir(to).catch(() => [] as string[]);
if (existing.length > 0 && !values.force) fail(`${to} is not empty: pass --force to write into it`);

const started = performance.now();
const checkpoint = await loadCheckpoint(directorySource(from), { requireTokenizer: true }).catch((e: Error) =>
  fail(`cannot load the checkpoint at ${from}: ${e.message}`),
);
let files: Map<string, Uint8Array>;
try {
  let tensors: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }> = checkpoint.tensors;
  if (values.adapter) {
    const adapterDir = values.adapter;
    const adapterFiles = new Map<string, Uint8Array>();
    for (const name of [PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE]) {
      const bytes = await readFile(join(adapterDir, name)).catch(() => null);
      if (bytes) adapterFiles.set(name, new Uint8Array(bytes));
    }
    const adapter = loadPeftAdapter(checkpoint.config, adapterFiles);
    tensors = mergeLora(checkpoint.config, checkpoint.tensors, adapter.tensors, adapter.lora);
  }
  files = exportForTransformersJs({ ...checkpoint, tensors }, { externalData });
} catch (e) {
  fail((e as Error).message);
}
await writeCheckpointFiles(to, files);
const mb = (n: number) => (n / 1e6).toFixed(1);
const total = [...files.values()].reduce((n, b) => n + b.length, 0);
console.log(
  `export:onnx: ${from}${values.adapter ? ` + adapter ${values.adapter} (merged)` : ''} → ${to}: ${[...files.keys()].sort().join(', ')} (${mb(total)} MB, ` +
    `weights ${files.has(ONNX_DATA_FILE) ? 'in onnx/model.onnx_data' : 'inside onnx/model.onnx'}) in ${((performance.now() - started) / 1000).toFixed(1)} s`,
);
