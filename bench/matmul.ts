// npm run bench:matmul — fp32 matmul GFLOP/s of our kernels vs tf.matMul (tfjs-backend-webgpu) on
// the same adapter in the same run (how the runtime waits for the GPU: bench/wait.ts). Speed is only
// compared as ratios within one run on one adapter.
// Env: BENCH_SIZES="256,512,1024"; BENCH_MIN_MS (default 0): repeat each product back to back until
// one timed run takes at least this long, so that on a fast GPU a run times the kernels rather than
// one submit-and-wait round trip (a 1024³ product takes ~0.1 ms on an H100). Every variant's result
// is checked against tf.matMul's (max relative error over a sample of entries). BENCH_DECODE=1 adds
// decode-shaped products (M = 1, 8, 32 rows against Qwen2.5-0.5B's weights), per variant, in GB/s.
import { defaultMatmulVariant, type MatmulVariant, matmul } from '../src/gpu/kernels/matmul.ts';
import { Gpu } from '../src/gpu/runtime.ts';
import { tfjsOnSameAdapter } from './tfjs-node.ts';

const sizes = (process.env.BENCH_SIZES ?? '256,512,1024').split(',').map(Number);
const minMs = Number(process.env.BENCH_MIN_MS ?? 0);
const VARIANTS: MatmulVariant[] = ['regblock', 'regblock8', 'tiled', 'tiled128'];
const gpu = await Gpu.create();
const tf = await tfjsOnSameAdapter(gpu);
console.log(`adapter: ${gpu.report.kind} — ${gpu.report.description || gpu.report.device}`);
console.log(`tfjs backend: ${tf.getBackend()} (tfjs ${tf.version.tfjs})`);

function rand(n: number): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = Math.random() * 2 - 1;
  return a;
}

/**
 * GFLOP/s of `run(iters)` (iters products back to back, then a wait): one warm-up, then `iters`
 * grows until a run takes minMs, then the median of `reps` timed runs.
 */
async function gflops(
  run: (iters: number) => Promise<void>,
  flopsPerIter: number,
  iters0: number,
  reps: number,
) {
  let iters = iters0;
  let t0 = performance.now();
  await run(iters); // warm-up: pipeline compiled, buffers pooled
  let ms = performance.now() - t0;
  while (ms < minMs) {
    iters = Math.min(iters * Math.max(2, Math.ceil(minMs / Math.max(ms, 0.01))), 100_000);
    t0 = performance.now();
    await run(iters);
    ms = performance.now() - t0;
    if (iters === 100_000) break;
  }
  const times: number[] = [];
  for (let r = 0; r < reps; r++) {
    t0 = performance.now();
    await run(iters);
    times.push(performance.now() - t0);
  }
  times.sort((x, y) => x - y);
  const median = times[Math.floor(times.length / 2)];
  return { gflops: (flopsPerIter * iters) / median / 1e6, iters };
}

/** Max |x - ref| / max |ref| over every `stride`-th entry. */
function sampledRelError(x: Float32Array, ref: Float32Array): number {
  const stride = Math.max(1, Math.floor(ref.length / 100_000));
  let err = 0;
  let scale = 0;
  for (let i = 0; i < ref.length; i += stride) {
    err = Math.max(err, Math.abs(x[i] - ref[i]));
    scale = Math.max(scale, Math.abs(ref[i]));
  }
  return err / scale;
}

const rows: string[] = [];
for (const n of sizes) {
  const iters0 = n <= 256 ? 8 : n <= 512 ? 3 : 1;
  const reps = n <= 512 ? 5 : 3;
  const flops = 2 * n * n * n;
  const a = rand(n * n);
  const b = rand(n * n);
  const xa = tf.tensor2d(a, [n, n]);
  const xb = tf.tensor2d(b, [n, n]);
  const refT = tf.matMul(xa, xb);
  const ref = (await refT.data()) as Float32Array;
  refT.dispose();
  const tfjs = await gflops(
    async (iters) => {
      let y: import('@tensorflow/tfjs').Tensor | null = null;
      for (let i = 0; i < iters; i++) {
        y?.dispose();
        y = tf.matMul(xa, xb);
      }
      await y!.data();
      y!.dispose();
    },
    flops,
    iters0,
    reps,
  );
  xa.dispose();
  xb.dispose();
  const ta = gpu.upload(a, [n, n]);
  const tb = gpu.upload(b, [n, n]);
  const out = gpu.empty([n, n]);
  const ours: Record<string, number> = {};
  const errors: string[] = [];
  for (const variant of VARIANTS) {
    const r = await gflops(
      async (iters) => {
        for (let i = 0; i < iters; i++) matmul(gpu, ta, tb, { out, variant });
        await gpu.sync();
      },
      flops,
      iters0,
      reps,
    );
    ours[variant] = r.gflops;
    const err = sampledRelError(await gpu.readF32(out), ref);
    errors.push(`${variant} ${err.toExponential(1)}`);
    if (!(err < 1e-4)) console.log(`WARNING: ${variant} at ${n}³ differs from tf.matMul: rel err ${err}`);
    console.log(`${n}³ ${variant}: ${r.gflops.toFixed(1)} GFLOP/s (${r.iters} per timed run)`);
  }
  console.log(
    `${n}³ tf.matMul: ${tfjs.gflops.toFixed(1)} GFLOP/s (${tfjs.iters} per timed run); rel err vs tfjs: ${errors.join(', ')}`,
  );
  ta.release();
  tb.release();
  out.release();
  const chosen = defaultMatmulVariant(gpu, n, n);
  rows.push(
    `| ${n}³ | ${VARIANTS.map((v) => ours[v].toFixed(2)).join(' | ')} | ${tfjs.gflops.toFixed(2)} | ${chosen} | ${(ours[chosen] / tfjs.gflops).toFixed(2)}× |`,
  );
}
console.log(
  `\n| size | ${VARIANTS.map((v) => `ours ${v} GFLOP/s`).join(' | ')} | tf.matMul GFLOP/s | runtime's choice | choice / tfjs |`,
);
console.log(`|---|${VARIANTS.map(() => '---|').join('')}---|---|---|`);
for (const r of rows) console.log(r);

// Training-shaped products: qwen-tiny's projections over a micro-batch of BENCH_TOKENS tokens (default
// 16384) in the three layouts of a linear layer's forward and backward (forward x·Wᵀ: NT; dX = dY·W:
// NN; dW = dYᵀ·x: TN, the sum over tokens), and the LM head over a quarter of them (the policy's
// tokens), per register-block variant, with the runtime's choice. Outputs are compared bit for bit
// between the variants (the same K order).
{
  const tokens = Number(process.env.BENCH_TOKENS ?? 16384);
  const projections: Array<[string, number, number]> = [
    ['q/o_proj 128→128', 128, 128],
    ['k/v_proj 128→64', 64, 128],
    ['gate/up 128→384', 384, 128],
    ['down 384→128', 128, 384],
    ['LM head 128→3264 (¼ of the tokens)', 3264, 128],
  ];
  const variants: MatmulVariant[] = ['regblock', 'regblock8'];
  console.log(
    `\n| training shape, ${tokens} tokens | layout | M × N × K | ${variants.map((v) => `${v} GFLOP/s`).join(' | ')} | regblock8 ÷ regblock | runtime's choice |`,
  );
  console.log(`|---|---|---|${variants.map(() => '---|').join('')}---|---|`);
  for (const [name, out, inp] of projections) {
    const T = name.startsWith('LM head') ? tokens / 4 : tokens;
    const layouts: Array<[string, number, number, number, boolean, boolean]> = [
      ['forward x·Wᵀ', T, out, inp, false, true],
      ['dX = dY·W', T, inp, out, false, false],
      ['dW = dYᵀ·x', out, inp, T, true, false],
    ];
    for (const [layout, M, N, K, transA, transB] of layouts) {
      const a = gpu.upload(rand(M * K), transA ? [K, M] : [M, K]);
      const b = gpu.upload(rand(K * N), transB ? [N, K] : [K, N]);
      const c = gpu.empty([M, N]);
      const rates: number[] = [];
      const results: Float32Array[] = [];
      for (const variant of variants) {
        const r = await gflops(
          async (iters) => {
            for (let i = 0; i < iters; i++) matmul(gpu, a, b, { out: c, transA, transB, variant });
            await gpu.sync();
          },
          2 * M * N * K,
          1,
          3,
        );
        rates.push(r.gflops);
        results.push(await gpu.readF32(c));
      }
      const same = results[1].every((x, i) => Object.is(x, results[0][i]));
      if (!same) console.log(`WARNING: ${name} ${layout}: regblock8 differs from regblock`);
      console.log(
        `| ${name} | ${layout} | ${M} × ${N} × ${K} | ${rates.map((r) => r.toFixed(2)).join(' | ')} | ${(rates[1] / rates[0]).toFixed(2)}× | ${defaultMatmulVariant(gpu, M, N, 1, transB)} |`,
      );
      a.release();
      b.release();
      c.release();
    }
  }
}

// Decode-shaped products (BENCH_DECODE=1): x·Wᵀ with M = 1, 8, 32 rows (a decode step's batch) at
// Qwen2.5-0.5B's MLP and LM-head shapes, per variant. These are memory-bound: GB/s counts the weight
// bytes read once.
if (process.env.BENCH_DECODE === '1') {
  const shapes: Array<[string, number, number]> = [
    ['up/gate (4864×896)', 4864, 896],
    ['down (896×4864)', 896, 4864],
    ['LM head (151936×896)', 151936, 896],
  ];
  const variants: MatmulVariant[] = ['skinny', 'gemv', 'tiled', 'regblock'];
  console.log(`\n| decode x·Wᵀ | M | ${variants.map((v) => `${v} GB/s`).join(' | ')} | runtime's choice |`);
  console.log(`|---|---|${variants.map(() => '---|').join('')}---|`);
  for (const [name, N, K] of shapes) {
    if (N * K * 4 > gpu.limits.maxStorageBufferBindingSize) {
      console.log(`| ${name} | — | over this adapter's binding limit: skipped | | | | |`);
      continue;
    }
    const w = gpu.upload(rand(N * K), [N, K]);
    for (const M of [1, 8, 32]) {
      const x = gpu.upload(rand(M * K), [M, K]);
      const y = gpu.empty([M, N]);
      const cells: string[] = [];
      for (const variant of variants) {
        const r = await gflops(
          async (iters) => {
            for (let i = 0; i < iters; i++) matmul(gpu, x, w, { transB: true, out: y, variant });
            await gpu.sync();
          },
          N * K * 4, // "flops" = weight bytes, so the rate is bytes/ms·1e-6 = GB/s
          1,
          3,
        );
        cells.push(r.gflops.toFixed(1));
      }
      console.log(`| ${name} | ${M} | ${cells.join(' | ')} | ${defaultMatmulVariant(gpu, M, N, 1, true)} |`);
      x.release();
      y.release();
    }
    w.release();
  }
}

gpu.destroy();
// tfjs-backend-webgpu keeps its own Dawn device and has no call to release it, so Node would
// never exit on its own: end the process once the tables are printed.
process.exit(0);
