// npm run bench:model — the Qwen policy on the current adapter:
//  - train step (forward + backward + AdamW) tokens/s,
//  - decode tokens/s with the KV cache at batch 1, 8, 32,
//  - KV-cache speed-up at 256 tokens: one decode step vs recomputing the 256-token prefix,
//  - peak GPU memory (live tensors from the runtime's pool) of each,
// for the bundled tiny config and a Qwen2.5-0.5B-shaped random model (BENCH_05B=0 skips it;
// BENCH_05B_TRAIN="B,T" and BENCH_05B_DECODE_STEPS size it).
import { QwenGpuModel } from '../src/agent/model/qwen-gpu.ts';
import { formatBytes } from '../src/gpu/errors.ts';
import { Gpu } from '../src/gpu/runtime.ts';
import {
  benchIds,
  benchTrainStep,
  type ModelShape,
  median,
  QWEN25_05B,
  randomWeights,
  shapeConfig,
  TINY,
} from './random-model.ts';

const gpu = await Gpu.create();
const adapter = `${gpu.report.kind} — ${gpu.report.description || gpu.report.device}`;
console.log(`adapter: ${adapter}`);
const rows: string[] = [];

async function bench(
  shape: ModelShape,
  opts: { trainB: number; trainT: number; decodeBatches: number[]; decodeSteps: number; reps: number },
) {
  const config = shapeConfig(shape);
  const t0 = performance.now();
  const model = new QwenGpuModel(gpu, config, randomWeights(config, 3));
  await gpu.sync();
  console.log(
    `\n${shape.name}: ${(performance.now() - t0).toFixed(0)} ms to make and upload weights; params ${formatBytes(gpu.stats.liveBytes)}`,
  );

  // Train step: forward, backward, AdamW.
  const { trainB: B, trainT: T } = opts;
  const N = B * T;
  const step = benchTrainStep(gpu, model, B, T);
  gpu.resetPeakMemory();
  const trainMs = await median(step.run, opts.reps);
  const trainPeak = gpu.stats.peakLiveBytes;
  step.release();
  for (const g of model.grads.values()) g.release();
  model.grads.clear();
  gpu.trimPool();
  rows.push(
    `| ${shape.name} | train step B=${B} T=${T} | ${(N / (trainMs / 1000)).toFixed(1)} tok/s (${trainMs.toFixed(0)} ms/step) | ${formatBytes(trainPeak)} |`,
  );
  console.log(rows.at(-1));

  // Decode with the KV cache.
  for (const b of opts.decodeBatches) {
    const prompts = Array.from({ length: b }, (_, r) => benchIds(16, r + 11, config.vocabSize));
    gpu.resetPeakMemory();
    const session = model.startSession(b, 16 + opts.decodeSteps + 2);
    session.append(prompts);
    await session.readLogits();
    const t1 = performance.now();
    await session.sample({ maxNewTokens: opts.decodeSteps, temperature: 1, seed: 1 });
    const ms = performance.now() - t1;
    const peak = gpu.stats.peakLiveBytes;
    session.release();
    rows.push(
      `| ${shape.name} | decode batch ${b} | ${((b * opts.decodeSteps) / (ms / 1000)).toFixed(1)} tok/s (${(ms / opts.decodeSteps).toFixed(0)} ms/step) | ${formatBytes(peak)} |`,
    );
    console.log(rows.at(-1));
  }

  // KV cache at 256 tokens: one decode step vs recomputing the whole 256-token prefix.
  const prompt = [benchIds(255, 5, config.vocabSize)];
  const session = model.startSession(1, 260);
  const prefillMs = await median(async () => {
    const s = model.startSession(1, 257);
    s.append(prompt);
    await s.readLogits();
    s.release();
  }, 1);
  session.append(prompt);
  await session.readLogits();
  const stepMs = await median(
    async () => {
      await session.sample({ maxNewTokens: 1, temperature: 0 });
      session.append([[]]); // writes the sampled token: the decode step at position 256
      await session.readLogits();
    },
    1,
    0,
  );
  session.release();
  rows.push(
    `| ${shape.name} | KV cache at 256 tokens | ${(prefillMs / stepMs).toFixed(1)}× faster (step ${stepMs.toFixed(1)} ms vs recompute ${prefillMs.toFixed(1)} ms) | |`,
  );
  console.log(rows.at(-1));
  model.release();
  gpu.trimPool();
}

await bench(TINY, { trainB: 4, trainT: 64, decodeBatches: [1, 8, 32], decodeSteps: 16, reps: 3 });
if (process.env.BENCH_05B !== '0') {
  // Sized for a CPU adapter; BENCH_05B_TRAIN="B,T" and BENCH_05B_DECODE_STEPS size it for a real GPU.
  const [trainB, trainT] = (process.env.BENCH_05B_TRAIN ?? '1,32').split(',').map(Number);
  const decodeSteps = Number(process.env.BENCH_05B_DECODE_STEPS ?? 3);
  await bench(QWEN25_05B, { trainB, trainT, decodeBatches: [1, 8, 32], decodeSteps, reps: 1 });
}
console.log('\n| model | measurement | speed | peak GPU memory |\n|---|---|---|---|');
for (const r of rows) console.log(r);
console.log(`\n(${new Date().toISOString().slice(0, 10)}, ${adapter}, command: npm run bench:model)`);
gpu.destroy();
