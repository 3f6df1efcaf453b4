import { describe, expect, it } from 'vitest';
import { SAMPLE_INVALID_TOKEN, type SampleOptions, sampleTokens } from '../../src/gpu/kernels/sampling.ts';
import {
  INVALID_TOKEN_REF,
  pcgHash,
  type SampleRefOptions,
  type SamplingParams,
  sampleRef,
  sampleRowRef,
  samplingUniform,
} from '../../src/gpu/reference/sampling.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

// Tolerances: logprobs 1e-5 (absolute, |logprob| here is < 20), entropy 1e-5 relative. Tokens are
// exact except where the float32 GPU sums and the float64 reference straddle a CDF or top-p boundary;
// every such disagreement must be explained by moving u or topP by 1e-5 (relative) in the reference.

interface GpuSample {
  ids: Uint32Array;
  logprobs: Float32Array;
  entropy: Float32Array;
}

async function run(gpu: Gpu, logits: Tensor, options: SampleOptions): Promise<GpuSample> {
  const r = sampleTokens(gpu, logits, { ...options, entropy: true });
  const [ids, logprobs, entropy] = await gpu.readMany([r.ids, r.logprobs, r.entropy!]);
  r.ids.release();
  r.logprobs.release();
  r.entropy?.release();
  return { ids: ids as Uint32Array, logprobs: logprobs as Float32Array, entropy: entropy as Float32Array };
}

function rowOf(x: Float32Array, V: number, b: number): Float32Array {
  return x.subarray(b * V, (b + 1) * V);
}

/** log softmax(row / T)[token] in float64 (the full distribution). */
function logSoftmaxAt(row: ArrayLike<number>, T: number, token: number): number {
  let m = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < row.length; i++) if (Number.isFinite(row[i])) m = Math.max(m, row[i]);
  let Z = 0;
  for (let i = 0; i < row.length; i++) if (Number.isFinite(row[i])) Z += Math.exp((row[i] - m) / T);
  return (row[token] - m) / T - Math.log(Z);
}

/** Does the reference pick `token` when u or topP moves by at most 1e-5 (relative)? */
function boundaryExplains(row: ArrayLike<number>, u: number, opts: SampleRefOptions, token: number): boolean {
  const eps = 1e-5;
  const { topP = 1 } = opts;
  for (const du of [-eps, -eps / 10, eps / 10, eps]) {
    const uu = Math.min(Math.max(u + du, 0), 1 - 2 ** -24);
    if (sampleRowRef(row, uu, opts).token === token) return true;
  }
  if (topP < 1) {
    for (const dp of [-eps, eps]) {
      const o = { ...opts, topP: Math.min(topP * (1 + dp), 1) };
      for (const du of [0, -eps, eps]) {
        if (sampleRowRef(row, Math.min(Math.max(u + du, 0), 1 - 2 ** -24), o).token === token) return true;
      }
    }
  }
  return false;
}

/**
 * Compares a GPU sample with the reference: tokens (boundary disagreements counted and explained),
 * logprob of the GPU's own token, entropy. Returns the number of disagreements.
 */
function compareWithRef(
  got: GpuSample,
  x: Float32Array,
  B: number,
  V: number,
  opts: SampleRefOptions,
  label: string,
): number {
  const ref = sampleRef(x, B, V, opts);
  const greedy = opts.greedy === true || opts.temperature === 0;
  const T = greedy ? 1 : opts.temperature;
  let disagreements = 0;
  for (let b = 0; b < B; b++) {
    const row = rowOf(x, V, b);
    const token = got.ids[b];
    expect(token, `${label} row ${b}: token in range`).toBeLessThan(V);
    if (token !== ref.ids[b]) {
      disagreements++;
      expect(
        !greedy && boundaryExplains(row, ref.u[b], opts, token),
        `${label} row ${b}: GPU token ${token} vs reference ${ref.ids[b]} (u = ${ref.u[b]}) is not a boundary case`,
      ).toBe(true);
    }
    const lp = logSoftmaxAt(row, T, token);
    expect(
      Math.abs(got.logprobs[b] - lp),
      `${label} row ${b}: logprob ${got.logprobs[b]} vs ${lp}`,
    ).toBeLessThan(1e-5);
    const e = ref.entropy[b];
    expect(Math.abs(got.entropy[b] - e) / Math.max(1, e), `${label} row ${b}: entropy`).toBeLessThan(1e-5);
  }
  return disagreements;
}

/** Random logits with a spread like a language model's: mostly low, a few high. */
function lmLogits(n: number, seed: number, spread = 6): Float32Array {
  const a = randomArray(n, seed);
  const b = randomArray(n, seed + 7919);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = spread * a[i] + 3 * Math.max(0, b[i]) ** 8 * spread;
  return out;
}

describe('sampling: greedy', () => {
  it('equals the reference argmax (ties → lowest id), logprob and entropy under T = 1', async () => {
    const gpu = await getTestGpu();
    const [B, V] = [9, 1037];
    const x = lmLogits(B * V, 1);
    // Plant ties of the maximum: row 0 at ids 5, 900, 17 → 5 must win; row 1 at the last column and
    // at 1000 → 1000; row 2 at ids 64 and 0 → 0; row 3: -0 and +0 as the maximum of a negative row.
    const plant = (b: number, ids: number[], v: number) => {
      for (const i of ids) x[b * V + i] = v;
    };
    plant(0, [900, 17, 5], 100);
    plant(1, [V - 1, 1000], 100);
    plant(2, [64, 0], 100);
    for (let i = 0; i < V; i++) x[3 * V + i] = -1 - Math.abs(x[3 * V + i]);
    x[3 * V + 700] = 0;
    x[3 * V + 300] = -0;
    const t = gpu.upload(x, [B, V]);
    const got0 = await run(gpu, t, { temperature: 0, seed: 1, step: 0 });
    const got1 = await run(gpu, t, { temperature: 0.7, greedy: true, seed: 2, step: 5 });
    expect(compareWithRef(got0, x, B, V, { temperature: 0, seed: 1, step: 0 }, 'T=0')).toBe(0);
    expect(Array.from(got1.ids)).toEqual(Array.from(got0.ids));
    expect(Array.from(got1.logprobs)).toEqual(Array.from(got0.logprobs));
    expect(Array.from(got0.ids.subarray(0, 4))).toEqual([5, 1000, 0, 300]);
    t.release();
  });
});

describe('sampling: randomness', () => {
  it('draws the same u as the reference RNG, bit for bit in its top 10 bits', async () => {
    // 1024 equal logits: the kept weights are exactly 1, so the token is floor(u * 1024) on both.
    const gpu = await getTestGpu();
    const [B, V] = [300, 1024];
    const t = gpu.zeros([B, V]);
    const streams = Uint32Array.from({ length: B }, (_, b) => (b * 2654435761) >>> 0);
    const ts = gpu.upload(streams, [B]);
    const got = await run(gpu, t, { temperature: 1, seed: 0xdeadbeef, step: 77, streams: ts });
    for (let b = 0; b < B; b++) {
      expect(got.ids[b]).toBe(Math.floor(samplingUniform(0xdeadbeef, 77, streams[b]) * 1024));
    }
    t.release();
    ts.release();
  });

  it('is a decent uniform: mean, variance and 16-bin chi-square over 100k streams (CPU)', () => {
    const n = 100_000;
    const bins = new Float64Array(16);
    let sum = 0;
    let sq = 0;
    for (let s = 0; s < n; s++) {
      const u = samplingUniform(42, 3, s);
      expect(u >= 0 && u < 1).toBe(true);
      sum += u;
      sq += u * u;
      bins[Math.floor(u * 16)]++;
    }
    expect(Math.abs(sum / n - 0.5)).toBeLessThan(0.005);
    expect(Math.abs(sq / n - (sum / n) ** 2 - 1 / 12)).toBeLessThan(0.002);
    const chi2 = bins.reduce((acc, o) => acc + (o - n / 16) ** 2 / (n / 16), 0);
    expect(chi2).toBeLessThan(37.7); // df 15, p = 0.001
    // pcg is a bijection-based hash: distinct inputs give distinct outputs on a sample.
    const seen = new Set<number>();
    for (let v = 0; v < 4096; v++) seen.add(pcgHash(v));
    expect(seen.size).toBe(4096);
  });

  it('same seed → identical across runs and with rows permuted; other seeds or steps differ', async () => {
    const gpu = await getTestGpu();
    const [B, V] = [64, 1031];
    const x = lmLogits(B * V, 3, 1.5);
    const opts = { temperature: 1, seed: 12345, step: 9 };
    const t = gpu.upload(x, [B, V]);
    const a = await run(gpu, t, opts);
    const b = await run(gpu, t, opts);
    expect(Array.from(b.ids)).toEqual(Array.from(a.ids));
    expect(Array.from(b.logprobs)).toEqual(Array.from(a.logprobs));

    // Permute rows; each row keeps its stream (here: its original index).
    const perm = Array.from({ length: B }, (_, i) => (i * 37 + 11) % B);
    const xp = new Float32Array(B * V);
    perm.forEach((src, dst) => {
      xp.set(rowOf(x, V, src), dst * V);
    });
    const tp = gpu.upload(xp, [B, V]);
    const sp = gpu.upload(Uint32Array.from(perm), [B]);
    const c = await run(gpu, tp, { ...opts, streams: sp });
    perm.forEach((src, dst) => {
      expect(c.ids[dst], `permuted row ${dst} (was ${src})`).toBe(a.ids[src]);
      expect(c.logprobs[dst]).toBe(a.logprobs[src]);
    });

    const same = (p: GpuSample) => p.ids.reduce((n, id, i) => n + (id === a.ids[i] ? 1 : 0), 0);
    const otherSeed = await run(gpu, t, { ...opts, seed: 12346 });
    const otherStep = await run(gpu, t, { ...opts, step: 10 });
    // Σ p² of these rows is about 0.02, so ~1-2 of 64 rows agree by chance.
    expect(same(otherSeed)).toBeLessThan(B / 4);
    expect(same(otherStep)).toBeLessThan(B / 4);
    expect(compareWithRef(otherSeed, x, B, V, { ...opts, seed: 12346 }, 'seed 12346')).toBeLessThanOrEqual(1);
    expect(compareWithRef(otherStep, x, B, V, { ...opts, step: 10 }, 'step 10')).toBeLessThanOrEqual(1);
    for (const tt of [t, tp, sp]) tt.release();
  });
});

describe('sampling: matches the CPU reference', () => {
  it('temperature 0.7, topK 20, topP 0.9 on 64 rows × 8 (seed, step) cases, and filter variants', async () => {
    const gpu = await getTestGpu();
    const [B, V] = [64, 1531];
    const peaked = lmLogits(B * V, 5); // most mass in a few tokens
    const flat = lmLogits(B * V, 6, 1.5); // top-k cuts real mass, so top-p renormalisation matters
    let disagreements = 0;
    let cases = 0;
    const configs: Array<[Float32Array, SamplingParams]> = [];
    for (let s = 0; s < 8; s++) {
      configs.push([peaked, { temperature: 0.7, topK: 20, topP: 0.9, seed: 1000 + s, step: s * 3 }]);
    }
    configs.push([peaked, { temperature: 1.3, seed: 7, step: 1 }]); // temperature only
    configs.push([peaked, { temperature: 0.7, topK: 5, seed: 8, step: 2 }]); // top-k only
    configs.push([peaked, { temperature: 1, topP: 0.5, seed: 9, step: 3 }]); // top-p only
    configs.push([flat, { temperature: 1, topK: 50, topP: 0.9, seed: 10, step: 4 }]);
    configs.push([flat, { temperature: 2, topK: 200, topP: 0.6, seed: 11, step: 5 }]);
    configs.push([flat, { temperature: 0.7, topP: 0.3, seed: 12, step: 6 }]);
    const tensors = new Map([
      [peaked, gpu.upload(peaked, [B, V])],
      [flat, gpu.upload(flat, [B, V])],
    ]);
    const results = await Promise.all(configs.map(([x, o]) => run(gpu, tensors.get(x)!, o)));
    configs.forEach(([x, o], i) => {
      disagreements += compareWithRef(results[i], x, B, V, o, JSON.stringify(o));
      cases += B;
    });
    console.log(`[sampling] ${disagreements} boundary disagreements with the reference in ${cases} draws`);
    // Boundary cases need r within ~1e-6 of a CDF step: expect none or one in 896.
    expect(disagreements, `${disagreements} boundary disagreements in ${cases} cases`).toBeLessThanOrEqual(2);
    // On the flat logits, top-p after top-k keeps strictly fewer than k tokens, and measuring its
    // target against the full mass instead of the top-k mass would change the set in most rows.
    const o = configs[11][1];
    let differs = 0;
    for (let b = 0; b < B; b++) {
      const row = Array.from(rowOf(flat, V, b));
      const kept = sampleRowRef(row, 0.5, o).keptIds.length;
      expect(kept).toBeLessThan(50);
      const w = row.map((v) => Math.exp(v / o.temperature)).sort((p, q) => q - p);
      const wFull = w.reduce((acc, v) => acc + v, 0);
      let wrongCut = 0;
      for (let cum = 0; cum < o.topP! * wFull; wrongCut++) cum += w[wrongCut];
      if (Math.min(wrongCut, 50) !== kept) differs++;
    }
    expect(differs).toBeGreaterThan(B / 2);
    for (const t of tensors.values()) t.release();
  });

  it('keeps every logit tied at the top-k and top-p thresholds (quantised logits, many ties)', async () => {
    const gpu = await getTestGpu();
    const [B, V] = [32, 1000];
    const x = randomArray(B * V, 9).map((v) => Math.round(v * 12) / 4); // 97 distinct values
    const t = gpu.upload(x, [B, V]);
    const opts: SamplingParams[] = [
      { temperature: 0.8, topK: 20, seed: 3, step: 0 },
      { temperature: 0.8, topK: 20, topP: 0.5, seed: 4, step: 0 },
      { temperature: 0.8, topK: 1, seed: 5, step: 0 },
    ];
    for (const o of opts) {
      const got = await run(gpu, t, o);
      expect(compareWithRef(got, x, B, V, o, JSON.stringify(o))).toBeLessThanOrEqual(1);
      for (let b = 0; b < B; b++) {
        const row = rowOf(x, V, b);
        const { keptIds } = sampleRowRef(row, 0.5, o);
        const kth = [...row].sort((p, q) => q - p)[(o.topK ?? 1) - 1];
        if (o.topP === undefined) {
          // All ties of the k-th largest are kept: more than k survive.
          expect(keptIds.length).toBe(row.filter((v) => v >= kth).length);
          expect(keptIds.length).toBeGreaterThanOrEqual(o.topK!);
        }
        expect(keptIds.includes(got.ids[b]), `row ${b}: token ${got.ids[b]} outside the kept set`).toBe(true);
      }
    }
    t.release();
  });

  it('gives the same tokens for workgroup sizes 1, 16 and 256', async () => {
    const gpu = await getTestGpu();
    const [B, V] = [16, 777];
    const x = lmLogits(B * V, 11);
    const t = gpu.upload(x, [B, V]);
    const o = { temperature: 0.9, topK: 40, topP: 0.8, seed: 99, step: 1 };
    for (const workgroupSize of [1, 16, 256]) {
      const got = await run(gpu, t, { ...o, workgroupSize });
      expect(compareWithRef(got, x, B, V, o, `wg ${workgroupSize}`)).toBeLessThanOrEqual(1);
    }
    t.release();
  });
});

describe('sampling: statistics', () => {
  // Chi-square critical values at p = 0.001 by degrees of freedom.
  const CHI2_999 = [0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32];

  it('20,000 draws from V = 8 match the filtered distribution (chi-square, p = 0.001)', async () => {
    const gpu = await getTestGpu();
    const [B, V, steps] = [2000, 8, 10];
    const base = [1.0, 2.5, -0.5, 2.0, 0.3, -2.0, 1.7, 0.0];
    const x = new Float32Array(B * V);
    for (let b = 0; b < B; b++) x.set(base, b * V);
    const t = gpu.upload(x, [B, V]);
    const cases: SamplingParams[] = [
      { temperature: 1, seed: 2024, step: 0 }, // all 8 tokens
      { temperature: 0.7, topK: 6, topP: 0.9, seed: 2025, step: 0 },
    ];
    for (const o of cases) {
      const counts = new Float64Array(V);
      const { keptIds, keptProbs } = sampleRowRef(base, 0.5, o);
      // The filtered distribution, computed independently of the reference: softmax(x / T), keep the
      // top k by value, then the most likely tokens until their share of that reaches topP.
      const T = o.temperature;
      const byValue = base.map((v, i) => [v, i]).sort((p, q) => q[0] - p[0]);
      let kept = byValue.slice(0, o.topK ?? V).map(([v, i]) => ({ i, w: Math.exp(v / T) }));
      const wk = kept.reduce((acc, k) => acc + k.w, 0);
      let size = 0;
      for (let cum = 0; cum < (o.topP ?? 1) * wk; size++) cum += kept[size].w;
      kept = kept.slice(0, size).sort((p, q) => p.i - q.i);
      const wp = kept.reduce((acc, k) => acc + k.w, 0);
      expect(keptIds).toEqual(kept.map((k) => k.i));
      kept.forEach((k, j) => {
        expect(Math.abs(keptProbs[j] - k.w / wp)).toBeLessThan(1e-12);
      });
      let disagreements = 0;
      for (let s = 0; s < steps; s++) {
        const got = await run(gpu, t, { ...o, step: s });
        const ref = sampleRef(x, B, V, { ...o, step: s });
        for (let b = 0; b < B; b++) {
          counts[got.ids[b]]++;
          if (got.ids[b] !== ref.ids[b]) disagreements++;
        }
      }
      const n = B * steps;
      let chi2 = 0;
      keptIds.forEach((id, j) => {
        const expected = n * keptProbs[j];
        chi2 += (counts[id] - expected) ** 2 / expected;
      });
      const keptCount = keptIds.reduce((acc, id) => acc + counts[id], 0);
      expect(keptCount, `${JSON.stringify(o)}: draws outside the kept set`).toBe(n);
      expect(chi2, `${JSON.stringify(o)}: counts ${Array.from(counts)}`).toBeLessThan(
        CHI2_999[keptIds.length - 1],
      );
      expect(disagreements).toBeLessThanOrEqual(2);
      if (o.topK) expect(keptIds.length).toBeLessThan(6); // top-p really cut something
    }
    t.release();
  });
});

describe('sampling: special cases', () => {
  it('top-k = 1 equals greedy; a tiny top-p gives the argmax', async () => {
    const gpu = await getTestGpu();
    const [B, V] = [24, 2049];
    const x = lmLogits(B * V, 13);
    const t = gpu.upload(x, [B, V]);
    const greedy = await run(gpu, t, { temperature: 0, seed: 0, step: 0 });
    const k1 = await run(gpu, t, { temperature: 0.7, topK: 1, seed: 1, step: 1 });
    const p0 = await run(gpu, t, { temperature: 1.5, topP: 1e-6, seed: 2, step: 2 });
    expect(Array.from(k1.ids)).toEqual(Array.from(greedy.ids));
    expect(Array.from(p0.ids)).toEqual(Array.from(greedy.ids));
    t.release();
  });

  it('done rows output the pad id with logprob 0; other rows are unchanged', async () => {
    const gpu = await getTestGpu();
    const [B, V] = [10, 513];
    const x = lmLogits(B * V, 17);
    const t = gpu.upload(x, [B, V]);
    const doneMask = Uint32Array.from([0, 1, 0, 0, 1, 1, 0, 0, 0, 1]);
    const td = gpu.upload(doneMask, [B]);
    const o = { temperature: 0.8, topK: 50, seed: 5, step: 6 };
    const free = await run(gpu, t, o);
    const masked = await run(gpu, t, { ...o, done: td, padId: 151643 });
    const greedyMasked = await run(gpu, t, { temperature: 0, seed: 0, step: 0, done: td, padId: 7 });
    for (let b = 0; b < B; b++) {
      if (doneMask[b]) {
        expect(masked.ids[b]).toBe(151643);
        expect(masked.logprobs[b]).toBe(0);
        expect(masked.entropy[b]).toBe(0);
        expect(greedyMasked.ids[b]).toBe(7);
      } else {
        expect(masked.ids[b]).toBe(free.ids[b]);
        expect(masked.logprobs[b]).toBe(free.logprobs[b]);
      }
    }
    const ref = sampleRef(x, B, V, { ...o, done: doneMask, padId: 151643 });
    for (let b = 0; b < B; b++) if (doneMask[b]) expect(ref.ids[b]).toBe(151643);
    t.release();
    td.release();
  });

  it('masks -inf logits and columns >= vocabSize; NaN or +inf rows give the invalid token', async () => {
    const gpu = await getTestGpu();
    const [B, V] = [6, 300];
    const x = lmLogits(B * V, 19, 1);
    // Row 0: most logits -inf, the survivors are the only candidates.
    for (let i = 0; i < V; i++) if (i % 7 !== 3) x[i] = Number.NEGATIVE_INFINITY;
    // Rows 1-2: the padded tail (>= 280) holds huge logits that must never be sampled.
    for (const b of [1, 2]) for (let i = 280; i < V; i++) x[b * V + i] = 50;
    x[3 * V + 10] = Number.NaN;
    x[4 * V + 20] = Number.POSITIVE_INFINITY;
    for (let i = 0; i < V; i++) x[5 * V + i] = Number.NEGATIVE_INFINITY;
    const t = gpu.upload(x, [B, V]);
    const o = { temperature: 1, topK: 30, topP: 0.95, seed: 21, step: 0, vocabSize: 280 };
    const got = await run(gpu, t, o);
    const ref = sampleRef(x, B, V, o);
    expect(got.ids[0] % 7).toBe(3);
    for (const b of [0, 1, 2]) {
      expect(got.ids[b]).toBe(ref.ids[b]);
      expect(got.ids[b]).toBeLessThan(280);
      expect(Math.abs(got.logprobs[b] - ref.logprobs[b])).toBeLessThan(1e-5);
      expect(Number.isFinite(got.entropy[b])).toBe(true);
    }
    for (const b of [3, 4, 5]) {
      expect(got.ids[b]).toBe(SAMPLE_INVALID_TOKEN);
      expect(ref.ids[b]).toBe(INVALID_TOKEN_REF);
      expect(Number.isNaN(got.logprobs[b])).toBe(true);
      expect(Number.isNaN(got.entropy[b])).toBe(true);
    }
    t.release();
  });

  it('splits large inputs across dispatches (unaligned offsets) and reads a row range of a bigger buffer', async () => {
    const gpu = await getTestGpu();
    const [B, V] = [13, 333]; // 1332-byte rows: chunk starts are not 256-byte aligned
    const x = lmLogits(B * V, 23);
    const o = { temperature: 0.9, topK: 25, topP: 0.9, seed: 31, step: 2 };
    const t = gpu.upload(x, [B, V]);
    const whole = await run(gpu, t, o);
    const split = await run(gpu, t, { ...o, maxBindingBytes: 5000 }); // 3 rows per dispatch
    expect(Array.from(split.ids)).toEqual(Array.from(whole.ids));
    expect(Array.from(split.logprobs)).toEqual(Array.from(whole.logprobs));
    // Rows 4..11 inside a bigger buffer, bound as a view at byte 256, also split across dispatches.
    const padded = new Float32Array(64 + 8 * V + 5);
    padded.set(x.subarray(4 * V, 12 * V), 64);
    const t2 = gpu.upload(padded, [padded.length]);
    const view = { tensor: t2, offset: 256, size: 8 * V * 4, shape: [8, V] };
    const stream = gpu.upload(
      Uint32Array.from({ length: 8 }, (_, i) => i + 4),
      [8],
    );
    for (const maxBindingBytes of [undefined, 3000]) {
      const r = sampleTokens(gpu, view, { ...o, streams: stream, maxBindingBytes });
      const [ids, lps] = await gpu.readMany([r.ids, r.logprobs]);
      expect(Array.from(ids)).toEqual(Array.from(whole.ids.subarray(4, 12)));
      expect(Array.from(lps)).toEqual(Array.from(whole.logprobs.subarray(4, 12)));
      r.ids.release();
      r.logprobs.release();
    }
    expect(() => sampleTokens(gpu, { ...view, size: 8 * V * 4 - 4 }, o)).toThrow(/needs/);
    for (const tt of [t, t2, stream]) tt.release();
  });

  it('writes into caller-provided outputs', async () => {
    const gpu = await getTestGpu();
    const [B, V] = [3, 100];
    const x = lmLogits(B * V, 29);
    const t = gpu.upload(x, [B, V]);
    const ids = gpu.zeros([B], 'u32');
    const logprobs = gpu.zeros([B], 'f32');
    const r = sampleTokens(gpu, t, { temperature: 0, seed: 0, step: 0, out: { ids, logprobs } });
    expect(r.ids).toBe(ids);
    expect(r.logprobs).toBe(logprobs);
    expect(r.entropy).toBeNull();
    const [gi] = await gpu.readMany([ids]);
    expect(Array.from(gi)).toEqual(Array.from(sampleRef(x, B, V, { temperature: 0, seed: 0, step: 0 }).ids));
    for (const tt of [t, ids, logprobs]) tt.release();
  });

  it('rejects bad shapes and options with clear errors', async () => {
    const gpu = await getTestGpu();
    const t = gpu.zeros([4, 10]);
    const u = gpu.zeros([4, 10], 'u32');
    const d3 = gpu.zeros([3], 'u32');
    const o = { temperature: 1, seed: 1, step: 0 };
    expect(() => sampleTokens(gpu, gpu.zeros([40]) as Tensor, o)).toThrow(/\[B, V\]/);
    expect(() => sampleTokens(gpu, u, o)).toThrow(/f32/);
    expect(() => sampleTokens(gpu, t, { ...o, temperature: -1 })).toThrow(/temperature/);
    expect(() => sampleTokens(gpu, t, { ...o, temperature: Number.NaN })).toThrow(/temperature/);
    expect(() => sampleTokens(gpu, t, { ...o, topK: 1.5 })).toThrow(/topK/);
    expect(() => sampleTokens(gpu, t, { ...o, topP: 0 })).toThrow(/topP/);
    expect(() => sampleTokens(gpu, t, { ...o, topP: 1.1 })).toThrow(/topP/);
    expect(() => sampleTokens(gpu, t, { ...o, seed: -1 })).toThrow(/seed/);
    expect(() => sampleTokens(gpu, t, { ...o, step: 2 ** 32 })).toThrow(/step/);
    expect(() => sampleTokens(gpu, t, { ...o, vocabSize: 11 })).toThrow(/vocabSize/);
    expect(() => sampleTokens(gpu, t, { ...o, done: d3, padId: 0 })).toThrow(/done must be u32 \[4\]/);
    expect(() => sampleTokens(gpu, t, { ...o, done: gpu.zeros([4], 'u32') })).toThrow(/padId/);
    expect(() => sampleTokens(gpu, t, { ...o, streams: d3 })).toThrow(/streams/);
    expect(() => sampleTokens(gpu, t, { ...o, workgroupSize: 48 })).toThrow(/workgroupSize/);
    expect(() => sampleTokens(gpu, t, { ...o, maxBindingBytes: 32 })).toThrow(/does not fit/);
    const d4 = gpu.zeros([4], 'u32');
    expect(() => sampleTokens(gpu, t, { ...o, done: d4, padId: 0, out: { ids: d4 } })).toThrow(
      /also an input/,
    );
    await gpu.sync();
  });
});

describe('sampling: the real vocabulary', () => {
  it('V = 151,936, B = 2: matches the reference for greedy, temperature and top-k/top-p', async () => {
    const gpu = await getTestGpu();
    const [B, V] = [2, 151_936];
    const x = lmLogits(B * V, 31, 4);
    const t = gpu.upload(x, [B, V]);
    const configs: SamplingParams[] = [
      { temperature: 0.7, topK: 20, topP: 0.9, seed: 1, step: 0 },
      { temperature: 0, seed: 1, step: 0 },
      { temperature: 1, seed: 2, step: 1 },
      { temperature: 1, topP: 0.95, seed: 3, step: 2 },
    ];
    const start = performance.now();
    const results = await Promise.all(configs.map((o) => run(gpu, t, { ...o, vocabSize: 151_665 })));
    const ms = performance.now() - start;
    console.log(`[sampling] V=151936 B=2, 4 configurations: ${ms.toFixed(0)} ms on ${gpu.report.kind}`);
    const vx = new Float32Array(B * 151_665);
    for (let b = 0; b < B; b++) vx.set(x.subarray(b * V, b * V + 151_665), b * 151_665);
    configs.forEach((o, i) => {
      expect(compareWithRef(results[i], vx, B, 151_665, o, JSON.stringify(o))).toBeLessThanOrEqual(1);
    });
    expect(ms).toBeLessThan(10_000);
    t.release();
  });
});
