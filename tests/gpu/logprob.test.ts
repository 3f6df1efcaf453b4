import { describe, expect, it } from 'vitest';
import {
  crossEntropy,
  crossEntropyBackward,
  type LogprobFoldVariant,
  planVocabChunk,
  tokenLogprob,
  tokenLogprobBackward,
} from '../../src/gpu/kernels/logprob.ts';
import {
  crossEntropyBackwardRef,
  crossEntropyRef,
  type LogprobRefDims,
  tokenLogprobBackwardRef,
  tokenLogprobRef,
} from '../../src/gpu/reference/logprob.ts';
import { maxRelativeError } from '../../src/gpu/reference/matmul.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import { numericGradient } from '../helpers/finite-diff.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

// Tolerances, as |err| / max(1, |ref|) against float64:
//  - logits O(1) (|logit| <= ~3): logprob, entropy, lse and the gradients <= 1e-4;
//  - logits ~ ±80: every fp32 logit carries ~1e-5 absolute error, which moves logprob and the
//    softmax by as much; <= 5e-4.
const TOL = 1e-4;
const TOL_LARGE = 5e-4;

/** Deterministic targets in [0, V). */
function randomTargets(N: number, V: number, seed: number): Uint32Array {
  const r = randomArray(N, seed);
  return Uint32Array.from(r, (x) => Math.floor(((x + 1) / 2) * V) % V);
}

function expectFinite(name: string, a: ArrayLike<number>): void {
  for (let i = 0; i < a.length; i++) {
    if (!Number.isFinite(a[i])) throw new Error(`${name}[${i}] = ${a[i]}`);
  }
}

describe('logprob CPU reference', () => {
  it('analytic gradients of Σ gLp·logprob + gEnt·entropy match finite differences (float64)', () => {
    const [N, H, V] = [4, 5, 7];
    const dims: LogprobRefDims = { N, H, V, temperature: 0.7, mask: [1, 0, 1, 1] };
    const h = Float64Array.from(randomArray(N * H, 1, 1.5));
    const w = Float64Array.from(randomArray(V * H, 2, 1.5));
    const targets = [3, 0, 6, 1];
    const gLp = Float64Array.from(randomArray(N, 3));
    const gEnt = Float64Array.from(randomArray(N, 4));
    const loss = () => {
      const r = tokenLogprobRef(h, w, targets, dims);
      let acc = 0;
      for (let n = 0; n < N; n++) acc += gLp[n] * r.logprob[n] + gEnt[n] * r.entropy[n];
      return acc;
    };
    const { dh, dw } = tokenLogprobBackwardRef(h, w, targets, gLp, gEnt, dims);
    const eps = 1e-6;
    for (const [param, grad] of [
      [h, dh],
      [w, dw],
    ] as const) {
      const fd = numericGradient(param, loss, eps);
      for (let i = 0; i < param.length; i++) expect(Math.abs(fd[i] - grad[i])).toBeLessThan(1e-7);
    }
    // The masked row has no gradient into h.
    for (let k = 0; k < H; k++) expect(dh[H + k]).toBe(0);
  });

  it('cross-entropy gradient matches finite differences (float64), f32-style weights', () => {
    const [N, H, V] = [5, 3, 6];
    const dims = { N, H, V };
    const h = Float64Array.from(randomArray(N * H, 5, 2));
    const w = Float64Array.from(randomArray(V * H, 6, 2));
    const targets = [0, 5, 2, 2, 4];
    const weights = [1, 0.5, 0, 2, 1];
    const { dh, dw } = crossEntropyBackwardRef(h, w, targets, weights, dims, 1.5);
    const eps = 1e-6;
    for (const [param, grad] of [
      [h, dh],
      [w, dw],
    ] as const) {
      for (let i = 0; i < param.length; i++) {
        const keep = param[i];
        param[i] = keep + eps;
        const up = 1.5 * crossEntropyRef(h, w, targets, weights, dims);
        param[i] = keep - eps;
        const down = 1.5 * crossEntropyRef(h, w, targets, weights, dims);
        param[i] = keep;
        expect(Math.abs((up - down) / (2 * eps) - grad[i])).toBeLessThan(1e-7);
      }
    }
  });

  it('entropy is log V for uniform logits and logprob sums to 1 over targets', () => {
    const [N, H, V] = [1, 2, 9];
    const h = [0, 0];
    const w = randomArray(V * H, 7);
    const r = tokenLogprobRef(h, w, [4], { N, H, V });
    expect(r.entropy[0]).toBeCloseTo(Math.log(V), 12);
    const h2 = randomArray(H, 8);
    let total = 0;
    for (let t = 0; t < V; t++) total += Math.exp(tokenLogprobRef(h2, w, [t], { N, H, V }).logprob[0]);
    expect(total).toBeCloseTo(1, 12);
  });
});

interface Case {
  N: number;
  H: number;
  V: number;
  chunk?: number;
  temperature?: number;
  hScale?: number;
  /** Rows that are padding (mask 0, garbage target). */
  padRows?: number[];
  /** Rows with gLp = gEnt = 0 but mask 1 (non-policy tokens). */
  zeroGradRows?: number[];
  maskF32?: boolean;
  maxBindingBytes?: number;
}

/** Runs forward + backward on the GPU and the reference; returns everything read back. */
async function runCase(gpu: Gpu, c: Case, variant: LogprobFoldVariant, seed: number) {
  const { N, H, V, temperature = 1, hScale = 1, padRows = [], zeroGradRows = [] } = c;
  const h = randomArray(N * H, seed, hScale);
  const w = randomArray(V * H, seed + 1);
  const targets = randomTargets(N, V, seed + 2);
  const mask = new Float32Array(N).fill(1);
  const gLp = randomArray(N, seed + 3);
  const gEnt = randomArray(N, seed + 4);
  for (const r of padRows) {
    mask[r] = 0;
    targets[r] = 0xffffffff; // garbage target on a padding row must not matter
  }
  for (const r of zeroGradRows) {
    gLp[r] = 0;
    gEnt[r] = 0;
  }
  const hasMask = padRows.length > 0;
  // The real-GPU configuration (workgroup fold + tiled matmul) runs here too, on the CPU adapter.
  const matmulVariant = variant === 'workgroup' ? 'tiled' : 'regblock';
  const th = gpu.upload(h, [N, H]);
  const tw = gpu.upload(w, [V, H]);
  const tt = gpu.upload(targets, [N], 'u32');
  const tm = hasMask
    ? c.maskF32
      ? gpu.upload(mask, [N])
      : gpu.upload(Uint32Array.from(mask), [N], 'u32')
    : null;
  const fwd = tokenLogprob(gpu, th, tw, tt, {
    chunk: c.chunk,
    temperature,
    mask: tm,
    variant,
    matmulVariant,
    maxBindingBytes: c.maxBindingBytes,
  });
  const grads = tokenLogprobBackward(gpu, th, tw, tt, fwd, {
    gLogprob: gpu.upload(gLp, [N]),
    gEntropy: gpu.upload(gEnt, [N]),
    chunk: c.chunk,
    maxBindingBytes: c.maxBindingBytes,
    matmulVariant,
  });
  const [lp, ent, lse, dh, dw] = (await gpu.readMany([
    fwd.logprob,
    fwd.entropy,
    fwd.lse,
    grads.dh!,
    grads.dW!,
  ])) as Float32Array[];
  const dims: LogprobRefDims = { N, H, V, temperature, mask: hasMask ? mask : null };
  const ref = tokenLogprobRef(h, w, targets, dims);
  const refGrad = tokenLogprobBackwardRef(h, w, targets, gLp, gEnt, dims);
  return { lp, ent, lse, dh, dw, ref, refGrad, fwd };
}

function expectMatches(got: Awaited<ReturnType<typeof runCase>>, tol: number, tag: string): void {
  for (const [name, a] of Object.entries({
    lp: got.lp,
    ent: got.ent,
    lse: got.lse,
    dh: got.dh,
    dw: got.dw,
  })) {
    expectFinite(`${tag} ${name}`, a);
  }
  expect(maxRelativeError(got.lp, got.ref.logprob), `${tag} logprob`).toBeLessThanOrEqual(tol);
  expect(maxRelativeError(got.ent, got.ref.entropy), `${tag} entropy`).toBeLessThanOrEqual(tol);
  expect(maxRelativeError(got.lse, got.ref.lse), `${tag} lse`).toBeLessThanOrEqual(tol);
  expect(maxRelativeError(got.dh, got.refGrad.dh), `${tag} dh`).toBeLessThanOrEqual(tol);
  expect(maxRelativeError(got.dw, got.refGrad.dw), `${tag} dW`).toBeLessThanOrEqual(tol);
}

describe.each<LogprobFoldVariant>(['rows', 'workgroup'])(
  'tokenLogprob (GPU, fold %s; tiled matmul with workgroup)',
  (variant) => {
    it(`V = 1000 in chunks of 256 (last partial), padding and zero-weight rows (tol ${TOL})`, async () => {
      const gpu = await getTestGpu();
      const c: Case = { N: 13, H: 24, V: 1000, chunk: 256, padRows: [0, 7, 12], zeroGradRows: [3] };
      const got = await runCase(gpu, c, variant, 100);
      expect(got.fwd.chunk).toBe(256);
      expectMatches(got, TOL, 'V=1000');
      for (const r of c.padRows!) {
        expect([got.lp[r], got.ent[r], got.lse[r]]).toEqual([0, 0, 0]);
        for (let k = 0; k < c.H; k++) expect(got.dh[r * c.H + k]).toBe(0);
      }
      for (let k = 0; k < c.H; k++) expect(got.dh[3 * c.H + k]).toBe(0);
    });

    it('V < chunk (one partial chunk), f32 mask, temperature 0.6', async () => {
      const gpu = await getTestGpu();
      const c: Case = { N: 9, H: 20, V: 100, chunk: 256, temperature: 0.6, padRows: [4], maskF32: true };
      const got = await runCase(gpu, c, variant, 200);
      expect(got.fwd.chunk).toBe(100);
      expectMatches(got, TOL, 'V<C');
    });

    it(`logits ~ ±80 stay finite and accurate (running max; tol ${TOL_LARGE})`, async () => {
      const gpu = await getTestGpu();
      // |h·w| over H = 16 uniform(-1,1) terms with h scaled by 40 reaches ~±80 for the extreme tokens.
      const c: Case = { N: 6, H: 16, V: 300, chunk: 64, hScale: 40 };
      const got = await runCase(gpu, c, variant, 300);
      let maxLogit = 0;
      const h = randomArray(c.N * c.H, 300, 40);
      const w = randomArray(c.V * c.H, 301);
      for (let n = 0; n < c.N; n++) {
        for (let v = 0; v < c.V; v++) {
          let acc = 0;
          for (let k = 0; k < c.H; k++) acc += h[n * c.H + k] * w[v * c.H + k];
          maxLogit = Math.max(maxLogit, Math.abs(acc));
        }
      }
      expect(maxLogit).toBeGreaterThan(60);
      expectMatches(got, TOL_LARGE, 'large');
    });

    it('plans chunks from a tiny maxBindingBytes and still matches', async () => {
      const gpu = await getTestGpu();
      // H = 24: 96-byte rows; 4096 B fits 42 rows of W and 78 columns of [13, C] logits -> C = 40.
      const c: Case = { N: 13, H: 24, V: 301, maxBindingBytes: 4096, padRows: [5] };
      expect(planVocabChunk(gpu, c, { maxBindingBytes: 4096 })).toBe(40);
      const got = await runCase(gpu, c, variant, 400);
      expect(got.fwd.chunk).toBe(40);
      expectMatches(got, TOL, 'planned');
    });
  },
);

describe('tokenLogprob semantics', () => {
  it('tied weights: dW accumulates into an existing gradient (e.g. the embedding’s), dh too', async () => {
    const gpu = await getTestGpu();
    const [N, H, V] = [7, 12, 130];
    const h = randomArray(N * H, 1);
    const w = randomArray(V * H, 2);
    const targets = randomTargets(N, V, 3);
    const gLp = randomArray(N, 4);
    const prevW = randomArray(V * H, 5); // what the embedding backward already put there
    const prevH = randomArray(N * H, 6);
    const th = gpu.upload(h, [N, H]);
    const tw = gpu.upload(w, [V, H]);
    const tt = gpu.upload(targets, [N], 'u32');
    const fwd = tokenLogprob(gpu, th, tw, tt, { chunk: 64 });
    const dW = gpu.upload(prevW, [V, H]);
    const dh = gpu.upload(prevH, [N, H]);
    const g = tokenLogprobBackward(gpu, th, tw, tt, fwd, {
      gLogprob: gpu.upload(gLp, [N]),
      dW,
      accumulateDw: true,
      dh,
      accumulateDh: true,
    });
    expect(g.dW).toBe(dW);
    expect(g.dh).toBe(dh);
    const [gdw, gdh] = await gpu.readMany([dW, dh]);
    const ref = tokenLogprobBackwardRef(h, w, targets, gLp, null, { N, H, V });
    expect(
      maxRelativeError(
        gdw,
        ref.dw.map((v, i) => v + prevW[i]),
      ),
    ).toBeLessThanOrEqual(TOL);
    expect(
      maxRelativeError(
        gdh,
        ref.dh.map((v, i) => v + prevH[i]),
      ),
    ).toBeLessThanOrEqual(TOL);
  });

  it('overwrites NaN-filled dh/dW when not accumulating, and skips dW for a frozen head', async () => {
    const gpu = await getTestGpu();
    const [N, H, V] = [5, 8, 70];
    const h = randomArray(N * H, 11);
    const w = randomArray(V * H, 12);
    const targets = randomTargets(N, V, 13);
    const gEnt = randomArray(N, 14);
    const th = gpu.upload(h, [N, H]);
    const tw = gpu.upload(w, [V, H]);
    const tt = gpu.upload(targets, [N], 'u32');
    const fwd = tokenLogprob(gpu, th, tw, tt, { chunk: 32 });
    const nan = (n: number, shape: number[]) => gpu.upload(new Float32Array(n).fill(Number.NaN), shape);
    const tg = gpu.upload(gEnt, [N]);
    const g = tokenLogprobBackward(gpu, th, tw, tt, fwd, {
      gEntropy: tg,
      dh: nan(N * H, [N, H]),
      dW: nan(V * H, [V, H]),
    });
    const frozen = tokenLogprobBackward(gpu, th, tw, tt, fwd, { gEntropy: tg, computeDw: false });
    expect(frozen.dW).toBeNull();
    const [gdh, gdw, fdh] = await gpu.readMany([g.dh!, g.dW!, frozen.dh!]);
    const ref = tokenLogprobBackwardRef(h, w, targets, null, gEnt, { N, H, V });
    expect(maxRelativeError(gdh, ref.dh)).toBeLessThanOrEqual(TOL);
    expect(maxRelativeError(gdw, ref.dw)).toBeLessThanOrEqual(TOL);
    expect(maxRelativeError(fdh, ref.dh)).toBeLessThanOrEqual(TOL);
  });

  it('an out-of-range target on an active row gives NaN on that row only', async () => {
    const gpu = await getTestGpu();
    const [N, H, V] = [4, 8, 50];
    const h = randomArray(N * H, 21);
    const w = randomArray(V * H, 22);
    const targets = Uint32Array.from([3, 50, 7, 49]);
    const fwd = tokenLogprob(
      gpu,
      gpu.upload(h, [N, H]),
      gpu.upload(w, [V, H]),
      gpu.upload(targets, [N], 'u32'),
      {
        chunk: 32,
      },
    );
    const [lp, ent] = await gpu.readMany([fwd.logprob, fwd.entropy]);
    expect(Number.isNaN(lp[1])).toBe(true);
    const ref = tokenLogprobRef(h, w, targets, { N, H, V });
    for (const n of [0, 2, 3]) expect(Math.abs(lp[n] - ref.logprob[n])).toBeLessThan(TOL);
    expect(maxRelativeError(ent, ref.entropy)).toBeLessThanOrEqual(TOL);
  });

  it('rejects bad shapes, chunks and options with clear messages', async () => {
    const gpu = await getTestGpu();
    const h = gpu.zeros([3, 24]);
    const w = gpu.zeros([100, 24]);
    const t = gpu.zeros([3], 'u32');
    expect(() => tokenLogprob(gpu, gpu.zeros([3, 8]), w, t)).toThrow(
      /h \[3, 8\] must end in H = 24.*W \[100, 24\]/,
    );
    expect(() => tokenLogprob(gpu, h, w, gpu.zeros([4], 'u32'))).toThrow(/targets \[4\].*3 elements/);
    expect(() => tokenLogprob(gpu, h, w, gpu.zeros([3]))).toThrow(/targets.*\(f32\).*u32/);
    expect(() => tokenLogprob(gpu, h, w, t, { chunk: 36 })).toThrow(/chunk 36 must be a multiple of 8 rows/);
    expect(() => tokenLogprob(gpu, h, w, t, { temperature: 0 })).toThrow(/temperature/);
    expect(() => tokenLogprob(gpu, h, w, t, { mask: gpu.zeros([2], 'u32') })).toThrow(/mask \[2\]/);
    const fwd = tokenLogprob(gpu, h, w, t, { chunk: 64 });
    expect(() => tokenLogprobBackward(gpu, h, w, t, fwd)).toThrow(/gLogprob and\/or gEntropy/);
    expect(() =>
      tokenLogprobBackward(gpu, h, w, t, fwd, { gLogprob: gpu.zeros([3]), accumulateDw: true }),
    ).toThrow(/accumulateDw needs an existing `dW`/);
    await gpu.sync();
  });
});

describe('crossEntropy (GPU)', () => {
  const [N, H, V] = [11, 16, 333];
  for (const kind of ['u32 mask', 'f32 weights'] as const) {
    it(`${kind}: loss and gradients match the reference (tol ${TOL})`, async () => {
      const gpu = await getTestGpu();
      const h = randomArray(N * H, 31);
      const w = randomArray(V * H, 32);
      const targets = randomTargets(N, V, 33);
      const weights =
        kind === 'u32 mask'
          ? Float64Array.from({ length: N }, (_, n) => (n % 4 === 1 ? 0 : 1))
          : Float64Array.from({ length: N }, (_, n) => (n % 4 === 1 ? 0 : 0.25 + (n % 3) * 0.5));
      const tw8 =
        kind === 'u32 mask'
          ? gpu.upload(Uint32Array.from(weights), [N], 'u32')
          : gpu.upload(Float32Array.from(weights), [N]);
      const th = gpu.upload(h, [N, H]);
      const tw = gpu.upload(w, [V, H]);
      const tt = gpu.upload(targets, [N], 'u32');
      const ce = crossEntropy(gpu, th, tw, tt, tw8, { chunk: 128 });
      const g = crossEntropyBackward(gpu, th, tw, tt, ce, { scale: 2 });
      const [loss, wsum, dh, dw] = await gpu.readMany([ce.loss, ce.weightSum, g.dh!, g.dW!]);
      const refLoss = crossEntropyRef(h, w, targets, weights, { N, H, V });
      const refGrad = crossEntropyBackwardRef(h, w, targets, weights, { N, H, V }, 2);
      expect(Math.abs(loss[0] - refLoss) / Math.max(1, refLoss)).toBeLessThanOrEqual(TOL);
      expect(wsum[0]).toBeCloseTo(
        weights.reduce((a, b) => a + b, 0),
        5,
      );
      expect(maxRelativeError(dh, refGrad.dh)).toBeLessThanOrEqual(TOL);
      expect(maxRelativeError(dw, refGrad.dw)).toBeLessThanOrEqual(TOL);
      ce.release();
    });
  }

  it('all-masked batch: loss 0 and zero gradients, no NaN', async () => {
    const gpu = await getTestGpu();
    const th = gpu.upload(randomArray(3 * 8, 1), [3, 8]);
    const tw = gpu.upload(randomArray(40 * 8, 2), [40, 8]);
    const tt = gpu.upload(new Uint32Array(3), [3], 'u32');
    const ce = crossEntropy(gpu, th, tw, tt, gpu.zeros([3], 'u32'));
    const g = crossEntropyBackward(gpu, th, tw, tt, ce);
    const [loss, dh, dw] = await gpu.readMany([ce.loss, g.dh!, g.dW!]);
    expect(loss[0]).toBe(0);
    expect(dh.every((x) => x === 0)).toBe(true);
    expect(dw.every((x) => x === 0)).toBe(true);
  });
});
