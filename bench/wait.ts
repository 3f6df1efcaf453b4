// npm run bench:wait — how the runtime waits for GPU work in Node (src/gpu/runtime.ts, Gpu.waitMode):
// 'await' (Dawn's busy-wait spins the JS thread), 'sleep' (sleep through 85 % of a learned prediction,
// then spin) and 'block' (Atomics.wait slices between Dawn's ticks, the default). Workloads: matmul
// rounds with a readback each, a chain of matmuls behind one readback, and qwen-tiny's shape (vocab
// 3,264, hidden 128, 4 layers; random weights): a train step (forward, backward, AdamW) of
// BENCH_TRAIN="16,256" rows × tokens, and BENCH_DECODE="64,40" rows × decode steps from a 200-token
// prompt (a sampled token read back each step, the rollout's pattern). One device; the modes take
// turns for BENCH_REPS rounds after a warm-up each, and the table shows the median wall time and the
// process's CPU time over the same runs (all threads: the adapter's workers too). Compare only as
// ratios within one run on one adapter.
import { QwenGpuModel } from '../src/agent/model/qwen-gpu.ts';
import { matmul } from '../src/gpu/kernels/matmul.ts';
import { Gpu, WAIT_MODES, type WaitMode } from '../src/gpu/runtime.ts';
import type { Tensor } from '../src/gpu/tensor.ts';
import { benchIds, benchTrainStep, type ModelShape, randomWeights, shapeConfig } from './random-model.ts';

const reps = Number(process.env.BENCH_REPS ?? 3);
const [trainB, trainT] = (process.env.BENCH_TRAIN ?? '16,256').split(',').map(Number);
const [decodeRows, decodeSteps] = (process.env.BENCH_DECODE ?? '64,40').split(',').map(Number);

const QWEN_TINY: ModelShape = {
  name: 'qwen-tiny',
  arch: 'qwen3',
  vocab: 3264,
  hidden: 128,
  intermediate: 384,
  layers: 4,
  heads: 4,
  kvHeads: 2,
  headDim: 32,
  tied: true,
};

const gpu = await Gpu.create();
console.log(`adapter: ${gpu.report.kind} — ${gpu.report.description || gpu.report.device}`);

function rand(n: number): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = Math.random() - 0.5;
  return a;
}

interface Workload {
  name: string;
  setup: () => { run: () => Promise<void>; release: () => void };
}

const square = (n: number) => [gpu.upload(rand(n * n), [n, n]), gpu.upload(rand(n * n), [n, n])];
const matmulRounds = (n: number, count: number): Workload => ({
  name: `${count} rounds of ${n}³ matmul + readback`,
  setup: () => {
    const [a, b] = square(n);
    return {
      run: async () => {
        for (let r = 0; r < count; r++) {
          const y = matmul(gpu, a, b);
          await gpu.readF32(y);
          y.release();
        }
      },
      release: () => {
        a.release();
        b.release();
      },
    };
  },
});
const matmulChain = (n: number, count: number): Workload => ({
  name: `${count} × ${n}³ matmul behind one readback`,
  setup: () => {
    const [a, b] = square(n);
    return {
      run: async () => {
        const outs: Tensor[] = [];
        let x = a;
        for (let i = 0; i < count; i++) {
          x = matmul(gpu, x, b);
          outs.push(x);
        }
        await gpu.readF32(x);
        for (const t of outs) t.release();
      },
      release: () => {
        a.release();
        b.release();
      },
    };
  },
});

const config = shapeConfig(QWEN_TINY);
const model = new QwenGpuModel(gpu, config, randomWeights(config, 3));
const trainStep: Workload = {
  name: `qwen-tiny train step, ${trainB} × ${trainT} tokens`,
  setup: () => benchTrainStep(gpu, model, trainB, trainT, 1e-6),
};
const decode: Workload = {
  name: `qwen-tiny decode, ${decodeRows} rows × ${decodeSteps} steps`,
  setup: () => {
    const prompts = Array.from({ length: decodeRows }, (_, r) => benchIds(200, r + 11, config.vocabSize));
    return {
      run: async () => {
        const session = model.startSession(decodeRows, 200 + decodeSteps + 2);
        session.append(prompts);
        await session.readLogits();
        await session.sample({ maxNewTokens: decodeSteps, temperature: 1, seed: 1 });
        session.release();
      },
      release: () => {},
    };
  },
};

const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
const workloads = [matmulRounds(128, 200), matmulRounds(384, 30), matmulChain(768, 40), decode, trainStep];
for (const w of workloads) {
  const { run, release } = w.setup();
  const wall = new Map<WaitMode, number[]>(WAIT_MODES.map((m) => [m, []]));
  const cpu = new Map<WaitMode, number[]>(WAIT_MODES.map((m) => [m, []]));
  for (const mode of WAIT_MODES) {
    gpu.waitMode = mode;
    await run(); // warm-up: pipelines compiled, buffers pooled, rates learned ('sleep')
  }
  for (let r = 0; r < reps; r++) {
    for (const mode of WAIT_MODES) {
      gpu.waitMode = mode;
      const t0 = performance.now();
      const c0 = process.cpuUsage();
      await run();
      const c = process.cpuUsage(c0);
      wall.get(mode)!.push(performance.now() - t0);
      cpu.get(mode)!.push((c.user + c.system) / 1000);
    }
  }
  release();
  const base = median(wall.get('block')!);
  console.log(`\n${w.name}`);
  for (const mode of WAIT_MODES) {
    const ms = median(wall.get(mode)!);
    console.log(
      `  ${mode.padEnd(5)} ${ms.toFixed(0).padStart(6)} ms wall (${(ms / base).toFixed(2)}× block's)  ${median(cpu.get(mode)!).toFixed(0).padStart(6)} ms CPU`,
    );
  }
}
gpu.destroy();
