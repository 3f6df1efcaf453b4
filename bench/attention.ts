// node --import tsx --import ./scripts/wgsl-hooks.mjs bench/attention.ts
//
// Causal GQA attention (src/gpu/kernels/attention.ts) on the current adapter: forward, and forward +
// backward, for T = 128, 512, 1024 at B = 1 with Qwen2.5-0.5B's attention shape (nH = 14, nKv = 2,
// hd = 64). Median of a few runs after one warm-up, each timed region closed by gpu.sync(). Also a
// KV-cache decode step (one new token attending a cache of T slots) for reference.
// If the T = 512 figures say T = 1024 would blow the ~2 minute budget, T = 1024 runs with fewer
// heads and says so. Env: BENCH_T="128,512,1024", BENCH_HEADS=14, BENCH_REPS=3, BENCH_DKV=rows|chunks
// (the dK/dV variant; default: the adapter's, src/gpu/kernels/attention.ts).
import {
  type AttentionBlocks,
  attentionBackward,
  attentionBlocks,
  attentionDecode,
  attentionForward,
  createKvCache,
  type DkvVariant,
  defaultDkvVariant,
  kvCacheAppend,
} from '../src/gpu/kernels/attention.ts';
import { Gpu } from '../src/gpu/runtime.ts';
import type { Tensor } from '../src/gpu/tensor.ts';

const lengths = (process.env.BENCH_T ?? '128,512,1024').split(',').map(Number);
const fullHeads = Number(process.env.BENCH_HEADS ?? 14);
const reps = Number(process.env.BENCH_REPS ?? 3);
const dkvVariant = process.env.BENCH_DKV as DkvVariant | undefined;
const nKv = 2;
const hd = 64;
const budgetMs = 120_000;

const gpu = await Gpu.create();
console.log(`adapter: ${gpu.report.kind} — ${gpu.report.description || gpu.report.device}`);
console.log(
  `shape: B=1, nKv=${nKv}, hd=${hd}; dK/dV ${dkvVariant ?? defaultDkvVariant(gpu)}; median of ${reps} runs after a warm-up\n`,
);

function rand(n: number): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = Math.random() * 2 - 1;
  return a;
}

async function median(run: () => void): Promise<number> {
  run();
  await gpu.sync(); // warm-up: pipelines compiled, buffers pooled
  const times: number[] = [];
  for (let r = 0; r < reps; r++) {
    await gpu.sync();
    const t0 = performance.now();
    run();
    await gpu.sync();
    times.push(performance.now() - t0);
  }
  times.sort((x, y) => x - y);
  return times[Math.floor(times.length / 2)];
}

interface Row {
  T: number;
  nH: number;
  fwd: number;
  fwdBwd: number;
  decode: number;
}

async function benchOne(T: number, nH: number): Promise<Row> {
  const N = T;
  const dims = { batch: 1, nHeads: nH, nKvHeads: nKv, headDim: hd };
  const q = gpu.upload(rand(N * nH * hd), [N, nH * hd]);
  const k = gpu.upload(rand(N * nKv * hd), [N, nKv * hd]);
  const v = gpu.upload(rand(N * nKv * hd), [N, nKv * hd]);
  const dO = gpu.upload(rand(N * nH * hd), [N, nH * hd]);
  const seg = gpu.upload(new Uint32Array(N).fill(1), [N], 'u32');
  const o = gpu.empty([N, nH * hd]);
  const lse = gpu.empty([N, nH]);
  const grads = { dq: gpu.empty([N, nH * hd]), dk: gpu.empty([N, nKv * hd]), dv: gpu.empty([N, nKv * hd]) };
  const fwd = await median(() => {
    attentionForward(gpu, q, k, v, seg, { ...dims, out: o, lse });
  });
  const fwdBwd = await median(() => {
    attentionForward(gpu, q, k, v, seg, { ...dims, out: o, lse });
    attentionBackward(gpu, q, k, v, seg, o, lse, dO, { ...dims, ...grads, dkvVariant });
  });

  // Decode: the cache holds the T tokens; one new token per row attends all of them.
  const cache = createKvCache(gpu, { batch: 1, maxLen: T, nKvHeads: nKv, headDim: hd });
  kvCacheAppend(gpu, cache, k, v, seg, [T]);
  const q1 = gpu.upload(rand(nH * hd), [1, nH * hd]);
  const o1 = gpu.empty([1, nH * hd]);
  const l1 = gpu.empty([1, nH]);
  const decode = await median(() => {
    attentionDecode(gpu, q1, cache, [T], { nHeads: nH, out: o1, lse: l1 });
  });
  const all: Tensor[] = [q, k, v, dO, seg, o, lse, grads.dq, grads.dk, grads.dv, cache.k, cache.v, cache.seg];
  for (const t of [...all, q1, o1, l1]) t.release();
  return { T, nH, fwd, fwdBwd, decode };
}

const rows: Row[] = [];
const started = performance.now();
for (const T of lengths) {
  let nH = fullHeads;
  const prev = rows.at(-1);
  if (prev) {
    // Causal attention is ~T² per head: predict this length's cost (warm-up + reps, both timings).
    const perHead = ((T / prev.T) ** 2 * (prev.fwd + prev.fwdBwd) * (reps + 1)) / prev.nH;
    const left = budgetMs - (performance.now() - started);
    while (nH > nKv && perHead * nH > left) nH -= nKv;
    if (nH !== fullHeads)
      console.log(`T=${T}: using nH=${nH} instead of ${fullHeads} to stay within ~2 minutes`);
  }
  rows.push(await benchOne(T, nH));
}

// FLOPs counted the usual way: forward = 2 matmuls (q·kᵀ, p·v) over the causal half, backward = 5.
const flops = (r: Row, matmuls: number) => matmuls * 2 * ((r.T * (r.T + 1)) / 2) * r.nH * hd;
console.log('| T | nH | forward ms | fwd+bwd ms | fwd GFLOP/s | fwd+bwd GFLOP/s | decode 1 token ms |');
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(
    `| ${r.T} | ${r.nH} | ${r.fwd.toFixed(1)} | ${r.fwdBwd.toFixed(1)} | ${(flops(r, 2) / r.fwd / 1e6).toFixed(2)} | ${(flops(r, 7) / r.fwdBwd / 1e6).toFixed(2)} | ${r.decode.toFixed(2)} |`,
  );
}

// qwen-tiny's attention at the size of a training micro-batch of agent episodes, with the generic
// loops and with the blocked kernels CPU adapters use by default (attention-blocked.ts), in one run.
// Rows of different lengths (700 down to 589 tokens, right-padded) as in a real batch.
if (process.env.BENCH_TINY !== '0') {
  const [B, T, tnH, tnKv, thd] = [4, 700, 4, 2, 32];
  const N = B * T;
  const dims = { batch: B, nHeads: tnH, nKvHeads: tnKv, headDim: thd };
  const segArr = new Uint32Array(N);
  for (let b = 0; b < B; b++) segArr.fill(1, b * T, b * T + T - 37 * b);
  const t = {
    q: gpu.upload(rand(N * tnH * thd), [N, tnH * thd]),
    k: gpu.upload(rand(N * tnKv * thd), [N, tnKv * thd]),
    v: gpu.upload(rand(N * tnKv * thd), [N, tnKv * thd]),
    dO: gpu.upload(rand(N * tnH * thd), [N, tnH * thd]),
    seg: gpu.upload(segArr, [N], 'u32'),
    o: gpu.empty([N, tnH * thd]),
    lse: gpu.empty([N, tnH]),
  };
  const grads = {
    dq: gpu.empty([N, tnH * thd]),
    dk: gpu.empty([N, tnKv * thd]),
    dv: gpu.empty([N, tnKv * thd]),
  };
  const blocked = attentionBlocks(gpu, thd);
  const time = async (block: AttentionBlocks) => {
    const fwd = await median(() => {
      attentionForward(gpu, t.q, t.k, t.v, t.seg, { ...dims, out: t.o, lse: t.lse, block: block.fwd });
    });
    const bwd = await median(() => {
      attentionBackward(gpu, t.q, t.k, t.v, t.seg, t.o, t.lse, t.dO, {
        ...dims,
        ...grads,
        dkvVariant: 'rows',
        dqBlock: block.dq,
        dkvBlock: block.dkv,
      });
    });
    return { fwd, bwd };
  };
  const generic = await time({ fwd: 1, dq: 1, dkv: 1 });
  const ours = await time(blocked);
  console.log(`\nqwen-tiny attention (nH ${tnH}, nKv ${tnKv}, hd ${thd}), B=${B} T=${T}, dK/dV rows:`);
  console.log('| kernels | forward ms | backward ms |');
  console.log('|---|---|---|');
  console.log(`| generic loops | ${generic.fwd.toFixed(1)} | ${generic.bwd.toFixed(1)} |`);
  console.log(
    `| blocked (${blocked.fwd}/${blocked.dq}/${blocked.dkv}) | ${ours.fwd.toFixed(1)} | ${ours.bwd.toFixed(1)} |`,
  );
  console.log(
    `| generic ÷ blocked | ${(generic.fwd / ours.fwd).toFixed(2)}× | ${(generic.bwd / ours.bwd).toFixed(2)}× |`,
  );
  for (const x of [...Object.values(t), ...Object.values(grads)]) x.release();
}

console.log(`\ntotal ${((performance.now() - started) / 1000).toFixed(1)} s`);
gpu.destroy();
