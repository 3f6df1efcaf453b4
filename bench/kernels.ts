// npm run bench:kernels — on the current adapter, side by side in one run:
//  1. matmul GFLOP/s at the bundled tiny model's forward, dX and dW shapes and at 1024³, ours vs
//     tf.matMul (tfjs-backend-webgpu) on the same adapter, with the ratio;
//  2. one decoder layer forward+backward, ours vs the tfjs twin (tests/reference/tfjs-decoder-layer.ts);
//  3. attention forward and forward+backward for T = 128, 512, 1024 (Qwen2.5-0.5B's heads).
// Speed is compared only as ratios within this run. Prints a Markdown table for docs/benchmarks.md.

import { packBatch, QwenGpuModel } from '../src/agent/model/qwen-gpu.ts';
import { attentionBackward, attentionForward } from '../src/gpu/kernels/attention.ts';
import { matmul } from '../src/gpu/kernels/matmul.ts';
import { Gpu } from '../src/gpu/runtime.ts';
import { hfLayerParams, initTf, timeDecoderLayerTf } from '../tests/reference/tfjs-decoder-layer.ts';
import { median, QWEN25_05B, randomWeights, shapeConfig, TINY } from './random-model.ts';

const quick = process.env.BENCH_QUICK === '1';
// The Qwen2.5-0.5B-shaped layer's tokens (B = 1) and the attention lengths: sized for a CPU adapter by
// default; a real GPU takes longer sequences (scripts/device/run.sh).
const layerT = Number(process.env.BENCH_LAYER_T ?? 128);
const attnT = (process.env.BENCH_T ?? '128,512,1024').split(',').map(Number);
const gpu = await Gpu.create();
const { tf, backend } = await initTf();
const adapter = `${gpu.report.kind} — ${gpu.report.description || gpu.report.device}`;
console.log(`adapter: ${adapter}\ntfjs backend: ${backend}\n`);
if (backend !== 'webgpu')
  console.log('WARNING: tfjs is not on webgpu; ratios compare against its CPU backend');

function rand(n: number, seed: number): Float32Array {
  const a = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = s / 2 ** 31 - 1;
  }
  return a;
}

// ---------------------------------------------------------------- 1. matmul
// Tokens per step for the tiny model: B*T = 4*64.
const Ntok = 256;
const D = TINY.hidden;
const F = TINY.intermediate;
const cases: Array<{ name: string; M: number; N: number; K: number; transA: boolean; transB: boolean }> = [
  { name: 'fwd x·Wᵀ (gate/up)', M: Ntok, N: F, K: D, transA: false, transB: true },
  { name: 'fwd x·Wᵀ (down)', M: Ntok, N: D, K: F, transA: false, transB: true },
  { name: 'fwd LM-head chunk h·Wᵀ', M: Ntok, N: 4096, K: D, transA: false, transB: true },
  { name: 'dX = dY·W (gate/up)', M: Ntok, N: D, K: F, transA: false, transB: false },
  { name: 'dW = dYᵀ·x (gate/up)', M: F, N: D, K: Ntok, transA: true, transB: false },
  { name: 'dW LM-head chunk dYᵀ·h', M: 4096, N: D, K: Ntok, transA: true, transB: false },
  { name: '1024³', M: 1024, N: 1024, K: 1024, transA: false, transB: false },
];
console.log('| matmul | M×N×K | ours GFLOP/s | tf.matMul GFLOP/s | ours / tfjs |');
console.log('|---|---|---|---|---|');
const matmulRows: string[] = [];
for (const c of cases) {
  const flops = 2 * c.M * c.N * c.K;
  const iters = Math.max(1, Math.min(50, Math.round(2e8 / flops)));
  const aShape = c.transA ? [c.K, c.M] : [c.M, c.K];
  const bShape = c.transB ? [c.N, c.K] : [c.K, c.N];
  const a = rand(c.M * c.K, 1);
  const b = rand(c.K * c.N, 2);
  const ta = gpu.upload(a, aShape);
  const tb = gpu.upload(b, bShape);
  const out = gpu.empty([c.M, c.N]);
  const ours = await median(
    async () => {
      for (let i = 0; i < iters; i++) matmul(gpu, ta, tb, { transA: c.transA, transB: c.transB, out });
      await gpu.sync();
    },
    quick ? 1 : 3,
  );
  const xa = tf.tensor2d(a, aShape as [number, number]);
  const xb = tf.tensor2d(b, bShape as [number, number]);
  const theirs = await median(
    async () => {
      const ys = [];
      for (let i = 0; i < iters; i++) ys.push(tf.matMul(xa, xb, c.transA, c.transB));
      await ys.at(-1)!.data();
      for (const y of ys) y.dispose();
    },
    quick ? 1 : 3,
  );
  xa.dispose();
  xb.dispose();
  for (const t of [ta, tb, out]) t.release();
  const og = (flops * iters) / ours / 1e6;
  const tg = (flops * iters) / theirs / 1e6;
  const row = `| ${c.name} | ${c.M}×${c.N}×${c.K} | ${og.toFixed(2)} | ${tg.toFixed(2)} | ${(og / tg).toFixed(2)}× |`;
  matmulRows.push(row);
  console.log(row);
}

// ---------------------------------------------------------------- 2. one decoder layer
async function layerBench(shape: typeof TINY, B: number, T: number): Promise<string> {
  const config = shapeConfig({ ...shape, vocab: 512, layers: 1 });
  const weights = randomWeights(config, 7);
  const model = new QwenGpuModel(gpu, config, weights);
  const batch = packBatch(
    Array.from({ length: B }, (_, b) => Array.from({ length: T - (b % 2) * 3 }, (_, i) => (i * 7 + b) % 500)),
    { padSide: 'left' },
  );
  const N = B * T;
  const Dm = config.hiddenSize;
  const x = rand(N * Dm, 3);
  const R = rand(N * Dm, 4);
  const seg = gpu.upload(batch.seg, [N], 'u32');
  const pos = gpu.upload(batch.pos, [N], 'u32');
  const xT = gpu.upload(x, [N, Dm]);
  const dOut = gpu.upload(R, [N, Dm]);
  const dx = gpu.empty([N, Dm]);
  const ours = await median(
    async () => {
      const act = model.layerForward(0, xT, seg, pos, B);
      const out = model.layerOutput(0, act);
      gpu.copy(dOut, dx);
      model.layerBackward(0, act, dx, seg, pos, B);
      out.release();
      // layerForward's activations include x (xT): release everything but it.
      // (the LoRA map, empty here, is not a tensor).
      for (const [k, t] of Object.entries(act)) {
        const r = (t as { release?: unknown } | null)?.release;
        if (k !== 'x' && typeof r === 'function') r.call(t);
      }
      await gpu.sync();
    },
    quick ? 1 : 3,
  );
  const params = hfLayerParams(weights, 0);
  const tfTime = await timeDecoderLayerTf(
    params,
    x,
    {
      T,
      seg: Array.from(batch.seg),
      pos: Array.from(batch.pos),
      nH: config.numHeads,
      nKv: config.numKvHeads,
      hd: config.headDim,
      eps: config.rmsNormEps,
      theta: config.ropeTheta,
    },
    { warmup: 1, runs: quick ? 1 : 3, R },
  );
  for (const t of [seg, pos, xT, dOut, dx]) t.release();
  model.release();
  return `| ${shape.name.split(' ')[0]} layer (D${Dm}, F${config.intermediateSize}, ${config.numHeads}/${config.numKvHeads} heads), B=${B} T=${T} | ${ours.toFixed(1)} ms | ${tfTime.medianMs.toFixed(1)} ms | ${(tfTime.medianMs / ours).toFixed(2)}× |`;
}
console.log('\n| decoder layer forward+backward | ours | tfjs | tfjs / ours |');
console.log('|---|---|---|---|');
const layerRows = [await layerBench(TINY, 4, 64)];
console.log(layerRows[0]);
if (!quick) {
  layerRows.push(await layerBench(QWEN25_05B, 1, layerT));
  console.log(layerRows[1]);
}

// ---------------------------------------------------------------- 3. attention
console.log('\n| attention (nH 14, nKv 2, hd 64, B 1) | forward | forward+backward |');
console.log('|---|---|---|');
const attnRows: string[] = [];
for (const T of quick ? [128] : attnT) {
  const nH = 14;
  const nKv = 2;
  const hd = 64;
  const q = gpu.upload(rand(T * nH * hd, 5), [T, nH * hd]);
  const k = gpu.upload(rand(T * nKv * hd, 6), [T, nKv * hd]);
  const v = gpu.upload(rand(T * nKv * hd, 7), [T, nKv * hd]);
  const dO = gpu.upload(rand(T * nH * hd, 8), [T, nH * hd]);
  const seg = gpu.upload(new Uint32Array(T).fill(1), [T], 'u32');
  const dims = { batch: 1, nHeads: nH, nKvHeads: nKv, headDim: hd };
  const fwd = await median(async () => {
    const { o, lse } = attentionForward(gpu, q, k, v, seg, dims);
    await gpu.sync();
    o.release();
    lse.release();
  }, 1);
  const both = await median(async () => {
    const { o, lse } = attentionForward(gpu, q, k, v, seg, dims);
    const g = attentionBackward(gpu, q, k, v, seg, o, lse, dO, dims);
    await gpu.sync();
    for (const t of [o, lse, g.dq, g.dk, g.dv]) t.release();
  }, 1);
  const row = `| T = ${T} | ${fwd.toFixed(1)} ms | ${both.toFixed(1)} ms |`;
  attnRows.push(row);
  console.log(row);
  for (const t of [q, k, v, dO, seg]) t.release();
}
console.log(`\n(${new Date().toISOString().slice(0, 10)}, ${adapter}, command: npm run bench:kernels)`);
gpu.destroy();
// tfjs-backend-webgpu keeps its own Dawn device and has no call to release it, so Node would
// never exit on its own: end the process once the tables are printed.
process.exit(0);
