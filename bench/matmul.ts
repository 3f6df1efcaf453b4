// npm run bench:matmul — fp32 matmul GFLOP/s of our kernels vs tf.matMul (tfjs-backend-webgpu) on
// the same adapter in the same run, and the cost of Dawn's busy-wait with and without the runtime's
// sleep-before-wait. Speed is only compared as ratios within one run on one adapter.
import { type MatmulVariant, matmul } from '../src/gpu/kernels/matmul.ts';
import { Gpu } from '../src/gpu/runtime.ts';
import { tfjsOnSameAdapter } from './tfjs-node.ts';

const sizes = (process.env.BENCH_SIZES ?? '256,512,1024').split(',').map(Number);
const gpu = await Gpu.create();
const tf = await tfjsOnSameAdapter(gpu);
console.log(`adapter: ${gpu.report.kind} — ${gpu.report.description || gpu.report.device}`);
console.log(`tfjs backend: ${tf.getBackend()} (tfjs ${tf.version.tfjs})`);

function rand(n: number): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = Math.random() * 2 - 1;
  return a;
}

/** Median wall time of `reps` timed runs of `iters` back-to-back ops after one warm-up run. */
async function timeIt(run: () => Promise<void>, reps: number): Promise<number> {
  await run();
  const times: number[] = [];
  for (let r = 0; r < reps; r++) {
    const t0 = performance.now();
    await run();
    times.push(performance.now() - t0);
  }
  times.sort((x, y) => x - y);
  return times[Math.floor(times.length / 2)];
}

const rows: string[] = [];
for (const n of sizes) {
  const iters = n <= 256 ? 8 : n <= 512 ? 3 : 1;
  const reps = n <= 512 ? 5 : 3;
  const flops = 2 * n * n * n * iters;
  const a = rand(n * n);
  const b = rand(n * n);
  const ta = gpu.upload(a, [n, n]);
  const tb = gpu.upload(b, [n, n]);
  const out = gpu.empty([n, n]);
  const ours: Record<string, number> = {};
  for (const variant of ['regblock', 'tiled'] as MatmulVariant[]) {
    const ms = await timeIt(async () => {
      for (let i = 0; i < iters; i++) matmul(gpu, ta, tb, { out, variant });
      await gpu.sync();
    }, reps);
    ours[variant] = flops / ms / 1e6;
  }
  const xa = tf.tensor2d(a, [n, n]);
  const xb = tf.tensor2d(b, [n, n]);
  const tfMs = await timeIt(async () => {
    let y: import('@tensorflow/tfjs').Tensor | null = null;
    for (let i = 0; i < iters; i++) {
      y?.dispose();
      y = tf.matMul(xa, xb);
    }
    await y!.data();
    y!.dispose();
  }, reps);
  const tfG = flops / tfMs / 1e6;
  xa.dispose();
  xb.dispose();
  ta.release();
  tb.release();
  out.release();
  const best = Math.max(ours.regblock, ours.tiled);
  rows.push(
    `| ${n}³ | ${ours.regblock.toFixed(2)} | ${ours.tiled.toFixed(2)} | ${tfG.toFixed(2)} | ${(best / tfG).toFixed(2)}× |`,
  );
}
console.log('\n| size | ours regblock GFLOP/s | ours tiled GFLOP/s | tf.matMul GFLOP/s | best ours / tfjs |');
console.log('|---|---|---|---|---|');
for (const r of rows) console.log(r);

// Dawn in Node busy-spins the JS thread while mapAsync is pending; on a 2-core machine that spin
// competes with the CPU adapter's own threads. Compare many small step+readback rounds.
async function readbackRounds(sleepBeforeWait: boolean): Promise<number> {
  const g = await Gpu.create({ sleepBeforeWait });
  const n = 384;
  const ta = g.upload(rand(n * n), [n, n]);
  const tb = g.upload(rand(n * n), [n, n]);
  const ms = await timeIt(async () => {
    for (let r = 0; r < 6; r++) {
      const y = matmul(g, ta, tb);
      await g.readF32(y);
      y.release();
    }
  }, 3);
  g.destroy();
  return ms;
}
const spin = await readbackRounds(false);
const slept = await readbackRounds(true);
console.log(
  `\nreadback wait, 6 rounds of 384³ matmul + readback: busy-wait ${spin.toFixed(0)} ms, sleep-then-wait ${slept.toFixed(0)} ms (${(spin / slept).toFixed(2)}× )`,
);
gpu.destroy();
// tfjs-backend-webgpu keeps its own Dawn device and has no call to release it, so Node would
// never exit on its own: end the process once the tables are printed.
process.exit(0);
