// npm run bench:copy -- [--model DIR[,DIR...]] [--n 60] [--split test|train]
// The copy probe (src/rl/copy-probe.ts) on the oracle's traces of the held-out synthetic world (task
// seed 1, 2 hops, compact preset, yes/no questions left out: their answers copy nothing): for each
// model, the mean probability of the answer's first token (choosing the name) and of its other tokens
// (copying the name on), teacher-forced. --split train takes the traces from the training world instead
// (names the SFT saw: recall, not reading).
import { parseArgs } from 'node:util';
import { loadCheckpoint } from '../src/agent/model/checkpoint.ts';
import { directorySource } from '../src/agent/model/node-fs.ts';
import { QwenGpuModel } from '../src/agent/model/qwen-gpu.ts';
import { QwenTokenizer } from '../src/agent/tokenizer/qwen-tokenizer.ts';
import { Gpu } from '../src/gpu/runtime.ts';
import { copyProbe, copyProbeTraces } from '../src/rl/copy-probe.ts';

function fail(message: string): never {
  console.error(
    `bench:copy: ${message}\nusage: npm run bench:copy -- [--model DIR[,DIR...]] [--n 60] [--split test|train]`,
  );
  process.exit(2);
}

let args: { model: string; n: string; split: string };
try {
  args = parseArgs({
    options: {
      model: { type: 'string', default: 'public/models/qwen-tiny' },
      n: { type: 'string', default: '60' },
      split: { type: 'string', default: 'test' },
    },
  }).values;
} catch (e) {
  fail((e as Error).message);
}
const n = Number(args.n);
if (!Number.isInteger(n) || n < 1) fail(`--n must be a positive integer, got ${args.n}`);
const split = args.split;
if (split !== 'test' && split !== 'train') fail(`--split must be test or train, got ${split}`);
const gpu = await Gpu.create();
console.log(`adapter: ${gpu.report.kind} — ${gpu.report.description || gpu.report.device}`);
for (const dir of args.model.split(',')) {
  const ckpt = await loadCheckpoint(directorySource(dir), { requireTokenizer: true }).catch((e: Error) =>
    fail(`cannot load the model at ${dir}: ${e.message}`),
  );
  const tokenizer = QwenTokenizer.fromFiles(ckpt.tokenizerFiles);
  const traces = await copyProbeTraces(tokenizer, n, split);
  const model = new QwenGpuModel(gpu, ckpt.config, ckpt.tensors);
  const r = await copyProbe(model, tokenizer, traces);
  model.release();
  console.log(
    `${dir}: ${r.traces} ${split === 'test' ? 'held-out' : 'training-world'} traces · answer's first token p ${r.firstP.toFixed(3)} (p > ½: ${(100 * r.firstGtHalf).toFixed(0)} %) · ` +
      `its other ${r.restTokens} tokens p ${r.restP.toFixed(3)} (p > ½: ${(100 * r.restGtHalf).toFixed(0)} %)`,
  );
}
gpu.destroy();
