import { describe, expect, it } from 'vitest';
import {
  add,
  addInPlace,
  biasAdd,
  biasBackward,
  scaleInPlace,
  swiglu,
  swigluBackward,
  swigluPacked,
  swigluPackedBackward,
} from '../../src/gpu/kernels/elementwise.ts';
import {
  addRef,
  biasAddRef,
  biasBackwardRef,
  packRows,
  swigluBackwardRef,
  swigluRef,
} from '../../src/gpu/reference/elementwise.ts';
import { maxRelativeError } from '../../src/gpu/reference/matmul.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { numericGradient } from '../helpers/finite-diff.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

// Tolerances (|gpu - ref| / max(1, |ref|)): SwiGLU uses f32 exp and a division, a few ulp: 1e-5.
// add with alpha = 1 is one correctly rounded f32 add: exact. axpy/scale with alpha != 1 may be
// fused (fma) or not: 1e-6. Column sums of <= 40 terms of size <= 1 in f32: 1e-5.
const TOL_SWIGLU = 1e-5;
const TOL_SUM = 1e-5;

function allFinite(x: ArrayLike<number>): boolean {
  for (let i = 0; i < x.length; i++) if (!Number.isFinite(x[i])) return false;
  return true;
}

/** Inputs with a few extreme gate values, where a naive sigmoid overflows exp. */
function gateValues(n: number, seed: number): Float32Array {
  const g = randomArray(n, seed, 4);
  const extremes = [-100, -30, -15, 15, 30, 100, 0];
  for (let i = 0; i < extremes.length && i < n; i++) g[(i * 7) % n] = extremes[i];
  return g;
}

/** Central differences of L = Σ w ⊙ f(x) with respect to each x[i], in float64. */
function finiteDiff(
  x: Float64Array,
  w: ArrayLike<number>,
  f: (x: Float64Array) => ArrayLike<number>,
): Float64Array {
  const loss = (v: ArrayLike<number>) => {
    let s = 0;
    for (let i = 0; i < v.length; i++) s += w[i] * v[i];
    return s;
  };
  return numericGradient(x, () => loss(f(x)));
}

describe('swiglu', () => {
  const SHAPES: number[][] = [
    [1, 1],
    [7, 37],
    [3, 5, 37],
    [2, 130],
  ];

  it(`forward matches the reference on ${SHAPES.length} shapes, finite for |g| up to 100 (tol ${TOL_SWIGLU})`, async () => {
    const gpu = await getTestGpu();
    const outs: Tensor[] = [];
    const refs: Float64Array[] = [];
    for (const [k, shape] of SHAPES.entries()) {
      const n = shape.reduce((a, b) => a * b, 1);
      const g = gateValues(n, 10 + k);
      const u = randomArray(n, 20 + k, 2);
      outs.push(swiglu(gpu, gpu.upload(g, shape), gpu.upload(u, shape)));
      refs.push(swigluRef(g, u));
    }
    const got = await gpu.readMany(outs);
    SHAPES.forEach((shape, i) => {
      expect(outs[i].shape).toEqual(shape);
      expect(allFinite(got[i]), `NaN/inf in [${shape}]`).toBe(true);
      expect(maxRelativeError(got[i], refs[i]), `[${shape}]`).toBeLessThanOrEqual(TOL_SWIGLU);
    });
  });

  it('analytic backward of the reference matches float64 finite differences', () => {
    const [N, F] = [3, 5];
    const g = Float64Array.from(gateValues(N * F, 1));
    g[0] = -12; // large but FD-friendly
    const u = Float64Array.from(randomArray(N * F, 2, 2));
    const dh = randomArray(N * F, 3);
    const { dg, du } = swigluBackwardRef(dh, g, u);
    const fdG = finiteDiff(g, dh, (x) => swigluRef(x, u));
    const fdU = finiteDiff(u, dh, (x) => swigluRef(g, x));
    expect(maxRelativeError(dg, fdG)).toBeLessThan(1e-7);
    expect(maxRelativeError(du, fdU)).toBeLessThan(1e-7);
  });

  it(`backward (dense and packed) matches the reference's analytic gradients (tol ${TOL_SWIGLU})`, async () => {
    const gpu = await getTestGpu();
    const [N, F] = [7, 37];
    const g = gateValues(N * F, 4);
    const u = randomArray(N * F, 5, 2);
    const dh = randomArray(N * F, 6);
    const ref = swigluBackwardRef(dh, g, u);
    const tdh = gpu.upload(dh, [N, F]);
    // NaN-filled outputs: the kernel must overwrite, never read them.
    const nan = new Float32Array(N * F).fill(Number.NaN);
    const { dg, du } = swigluBackward(gpu, tdh, gpu.upload(g, [N, F]), gpu.upload(u, [N, F]), {
      dg: gpu.upload(nan, [N, F]),
      du: gpu.upload(nan, [N, F]),
    });
    const gu = gpu.upload(Float32Array.from(packRows(g, u, N, F)), [N, 2 * F]);
    const hPacked = swigluPacked(gpu, gu);
    const dgu = swigluPackedBackward(gpu, tdh, gu);
    expect(hPacked.shape).toEqual([N, F]);
    expect(dgu.shape).toEqual([N, 2 * F]);
    const [gdg, gdu, gh, gdgu] = await gpu.readMany([dg, du, hPacked, dgu]);
    expect(maxRelativeError(gdg, ref.dg)).toBeLessThanOrEqual(TOL_SWIGLU);
    expect(maxRelativeError(gdu, ref.du)).toBeLessThanOrEqual(TOL_SWIGLU);
    expect(maxRelativeError(gh, swigluRef(g, u))).toBeLessThanOrEqual(TOL_SWIGLU);
    expect(maxRelativeError(gdgu, packRows(ref.dg, ref.du, N, F))).toBeLessThanOrEqual(TOL_SWIGLU);
  });

  it('rejects mismatched shapes and aliased outputs', async () => {
    const gpu = await getTestGpu();
    const g = gpu.zeros([3, 4]);
    const u = gpu.zeros([3, 5]);
    expect(() => swiglu(gpu, g, u)).toThrow(/g \[3, 4\] and u \[3, 5\] must have the same shape/);
    expect(() => swiglu(gpu, g, g, { out: g })).toThrow(/may not share a buffer/);
    expect(() => swigluPacked(gpu, gpu.zeros([3, 5]))).toThrow(/even last dimension/);
    expect(() => swigluPackedBackward(gpu, gpu.zeros([3, 3]), gpu.zeros([3, 4]))).toThrow(
      /need gu \[N, 2F\] and dh \[N, F\]/,
    );
  });
});

describe('add, addInPlace, scaleInPlace', () => {
  it('add is exact for alpha = 1; axpy and scale match the reference', async () => {
    const gpu = await getTestGpu();
    const n = 7 * 33;
    const a = randomArray(n, 1, 3);
    const b = randomArray(n, 2, 3);
    const ta = gpu.upload(a, [7, 33]);
    const tb = gpu.upload(b, [7, 33]);
    const y = add(gpu, ta, tb);
    const y2 = add(gpu, ta, tb, { alpha: -0.5 });
    const acc = gpu.upload(a, [7, 33]);
    addInPlace(gpu, acc, tb, 0.25);
    addInPlace(gpu, acc, tb);
    const scaled = gpu.upload(a, [7, 33]);
    scaleInPlace(gpu, scaled, -3);
    const [gy, gy2, gacc, gsc] = await gpu.readMany([y, y2, acc, scaled]);
    const exact = Float32Array.from(addRef(a, b)); // one rounding of the exact sum
    expect(Array.from(gy)).toEqual(Array.from(exact));
    expect(maxRelativeError(gy2, addRef(a, b, -0.5))).toBeLessThan(1e-6);
    expect(maxRelativeError(gacc, addRef(a, b, 1.25))).toBeLessThan(1e-6);
    expect(maxRelativeError(gsc, addRef(a, a, -4))).toBeLessThan(1e-6);
  });

  it('splits more than 65535 workgroups over a 2-D grid (every element touched once)', async () => {
    const gpu = await getTestGpu();
    const n = 65535 * 64 + 100; // one workgroup row more than a single dimension allows
    const y = gpu.zeros([n]);
    const x = gpu.upload(new Float32Array(n).fill(1), [n]);
    addInPlace(gpu, y, x);
    const got = await gpu.readF32(y);
    let bad = -1;
    for (let i = 0; i < n; i++) {
      if (got[i] !== 1) {
        bad = i;
        break;
      }
    }
    expect(bad).toBe(-1);
    y.release();
    x.release();
  });

  it('rejects aliasing and shape mismatches with clear messages', async () => {
    const gpu = await getTestGpu();
    const a = gpu.zeros([2, 3]);
    expect(() => addInPlace(gpu, a, a)).toThrow(/scaleInPlace/);
    expect(() => add(gpu, a, gpu.zeros([3, 2]))).toThrow(/a \[2, 3\] and b \[3, 2\]/);
    expect(() => add(gpu, a, a, { out: a })).toThrow(/use addInPlace/);
  });
});

describe('bias', () => {
  const [N, C] = [7, 33];
  const seg = new Uint32Array([1, 1, 0, 2, 2, 0, 0]); // packed rows and padding

  it('biasAdd adds b to every row, and writes exact zeros at padding rows (even over NaN)', async () => {
    const gpu = await getTestGpu();
    const y0 = randomArray(N * C, 1);
    for (let c = 0; c < C; c++) y0[2 * C + c] = Number.NaN; // garbage at a padding row
    const b = randomArray(C, 2);
    const tb = gpu.upload(b, [C]);
    const masked = biasAdd(gpu, gpu.upload(y0, [N, C]), tb, { seg: gpu.upload(seg, [N]) });
    const y1 = randomArray(N * C, 3);
    const plain = biasAdd(gpu, gpu.upload(y1, [N, C]), tb);
    const [gm, gp] = await gpu.readMany([masked, plain]);
    expect(allFinite(gm)).toBe(true);
    const refM = biasAddRef(y0, b, N, C, seg);
    expect(Array.from(gm)).toEqual(Array.from(Float32Array.from(refM))); // one f32 add: exact
    expect(Array.from(gp)).toEqual(Array.from(Float32Array.from(biasAddRef(y1, b, N, C))));
    for (const r of [2, 5, 6])
      expect(Array.from(gm.subarray(r * C, (r + 1) * C)).every((v) => v === 0)).toBe(true);
  });

  it('reference db matches float64 finite differences (masked rows get no gradient)', () => {
    const dyW = randomArray(C, 9); // loss weights on db
    const dy = Float64Array.from(randomArray(N * C, 4));
    // L = Σ_c w_c db_c; dL/ddy[r, c] = w_c for live rows, 0 for padding rows.
    const fd = finiteDiff(dy, dyW, (x) => biasBackwardRef(x, N, C, seg));
    for (let r = 0; r < N; r++) {
      for (let c = 0; c < C; c++) expect(fd[r * C + c]).toBeCloseTo(seg[r] === 0 ? 0 : dyW[c], 8);
    }
  });

  it(`biasBackward: one pass, two passes, masked, accumulated; deterministic (tol ${TOL_SUM})`, async () => {
    const gpu = await getTestGpu();
    const rows = 40;
    const dy = randomArray(rows * C, 5);
    const segL = new Uint32Array(rows).map((_, i) => (i % 5 === 3 ? 0 : 1 + (i >> 4)));
    const tdy = gpu.upload(dy, [rows, C]);
    const tseg = gpu.upload(segL, [rows]);
    const onePass = biasBackward(gpu, tdy);
    const twoPass = biasBackward(gpu, tdy, { rowsPerChunk: 3 });
    const maskedOne = biasBackward(gpu, tdy, { seg: tseg, rowsPerChunk: 1000 });
    const maskedTwo = biasBackward(gpu, tdy, { seg: tseg, rowsPerChunk: 7 });
    const maskedTwoAgain = biasBackward(gpu, tdy, { seg: tseg, rowsPerChunk: 7 });
    const start = randomArray(C, 6);
    const acc = gpu.upload(start, [C]);
    biasBackward(gpu, tdy, { out: acc, accumulate: true, rowsPerChunk: 4 });
    const [g1, g2, gm1, gm2, gm2b, gacc] = await gpu.readMany([
      onePass,
      twoPass,
      maskedOne,
      maskedTwo,
      maskedTwoAgain,
      acc,
    ]);
    const ref = biasBackwardRef(dy, rows, C);
    const refM = biasBackwardRef(dy, rows, C, segL);
    expect(maxRelativeError(g1, ref)).toBeLessThanOrEqual(TOL_SUM);
    expect(maxRelativeError(g2, ref)).toBeLessThanOrEqual(TOL_SUM);
    expect(maxRelativeError(gm1, refM)).toBeLessThanOrEqual(TOL_SUM);
    expect(maxRelativeError(gm2, refM)).toBeLessThanOrEqual(TOL_SUM);
    expect(Array.from(gm2b)).toEqual(Array.from(gm2));
    expect(maxRelativeError(gacc, addRef(start, ref))).toBeLessThanOrEqual(TOL_SUM);
    // The masked sum really differs from the unmasked one (the mask is not ignored).
    expect(maxRelativeError(gm1, ref)).toBeGreaterThan(1e-3);
  });

  it('rejects a bias of the wrong size and a seg of the wrong length', async () => {
    const gpu = await getTestGpu();
    const y = gpu.zeros([N, C]);
    expect(() => biasAdd(gpu, y, gpu.zeros([C + 1]))).toThrow(/b \[34\] must be \[33\]/);
    expect(() => biasAdd(gpu, y, gpu.zeros([C]), { seg: gpu.zeros([N + 1], 'u32') })).toThrow(
      /one entry per row \(7\)/,
    );
    expect(() => biasBackward(gpu, y, { seg: gpu.zeros([N], 'f32') })).toThrow(/seg must be u32/);
    expect(() => biasBackward(gpu, y, { accumulate: true })).toThrow(/accumulate needs/);
  });
});
