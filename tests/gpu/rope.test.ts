import { describe, expect, it } from 'vitest';
import { PIO2_SPLIT, rope, ropeBackward, ropeInvFreq, ropeQK } from '../../src/gpu/kernels/rope.ts';
import { maxRelativeError } from '../../src/gpu/reference/matmul.ts';
import { ropeAngleRef, ropeBackwardRef, ropeInvFreqRef, ropeRef } from '../../src/gpu/reference/rope.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

// Tolerance: GPU vs the float64 reference evaluated at HF's f32 angle, inputs in [-1, 1]:
// |y - ref| <= 5e-7 absolute (measured: <= 1.7e-7 on lavapipe and SwiftShader over 2,000+ positions
// up to 2.1e5; cos/sin after the Cody-Waite reduction plus the f32 products and sum), for positions
// up to 2e5 with theta 1e4 or 1e6 (see src/shaders/rope.wgsl).
const TOL = 5e-7;

function maxAbsError(x: ArrayLike<number>, y: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i]) || !Number.isFinite(y[i])) return Number.POSITIVE_INFINITY;
    worst = Math.max(worst, Math.abs(x[i] - y[i]));
  }
  return worst;
}

// Positions from 0 to 2e5: small, typical, a 32k context's end, and beyond.
const POSITIONS = [0, 1, 7, 1000, 4095, 32767, 31999, 65537, 131071, 200000, 12345, 3];

describe('rope reference', () => {
  it('backward (inverse rotation) matches float64 finite differences of the forward', () => {
    const args = { heads: 2, headDim: 6, theta: 1e4 };
    const N = 3;
    const pos = [0, 5, 1000];
    const x = Float64Array.from(randomArray(N * 12, 1));
    const w = randomArray(N * 12, 2);
    const loss = () => ropeRef(x, pos, args).reduce((s, v, i) => s + w[i] * v, 0);
    const h = 1e-6;
    const fd = Float64Array.from(x, (_, i) => {
      const keep = x[i];
      x[i] = keep + h;
      const up = loss();
      x[i] = keep - h;
      const down = loss();
      x[i] = keep;
      return (up - down) / (2 * h);
    });
    expect(maxRelativeError(ropeBackwardRef(w, pos, args), fd)).toBeLessThan(1e-8);
  });

  it("HF's f32 angle is within |a| * 2^-24 * (3 + ln theta) of the exact angle; real at 32k", () => {
    // Documents the convention the kernel reproduces: not an error budget for the kernel.
    let worstAtEnd = 0;
    for (const theta of [1e4, 1e6]) {
      for (const p of [1, 1000, 32767]) {
        for (let i = 0; i < 32; i++) {
          const args = { heads: 1, headDim: 64, theta };
          const f = ropeAngleRef(p, i, args);
          const exact = ropeAngleRef(p, i, { ...args, angles: 'exact' });
          expect(Math.abs(f - exact)).toBeLessThanOrEqual(Math.abs(exact) * 2 ** -24 * (3 + Math.log(theta)));
          if (p === 32767) worstAtEnd = Math.max(worstAtEnd, Math.abs(f - exact));
        }
      }
    }
    expect(worstAtEnd).toBeGreaterThan(1e-4); // rad: why the kernel must use HF's f32 angle
  });

  it('the pi/2 split: f32 pieces, c1..c4 of <= 7 significant bits, summing to pi/2', () => {
    for (const c of PIO2_SPLIT) expect(Math.fround(c)).toBe(c);
    for (const c of PIO2_SPLIT.slice(0, 4)) {
      const e = Math.floor(Math.log2(c));
      expect(Number.isInteger(c / 2 ** (e - 6))).toBe(true); // 7 bits from the leading one
    }
    // Exact sum of the pieces (they do not overlap) vs pi/2 in float64: within pi/2's own rounding.
    const sum = PIO2_SPLIT.reduce((a, b) => a + b, 0);
    expect(Math.abs(sum - Math.PI / 2)).toBeLessThanOrEqual(2 ** -52);
  });

  it('the kernel-side inv_freq table equals the reference (torch f32 steps) and theta^(-2i/hd)', () => {
    for (const [hd, theta] of [
      [64, 1e6],
      [128, 1e4],
      [6, 1e6],
    ]) {
      const k = ropeInvFreq(hd, theta);
      const r = ropeInvFreqRef(hd, theta);
      expect(Array.from(k)).toEqual(Array.from(r));
      // f32 rounding of the exponent is amplified by ln(theta) (d theta^e / theta^e = ln(theta) de),
      // plus the rounding of the power and of the reciprocal.
      const bound = 2 ** -24 * (2 + Math.log(theta));
      for (let i = 0; i < hd / 2; i++)
        expect(Math.abs(k[i] / theta ** ((-2 * i) / hd) - 1)).toBeLessThan(bound);
    }
  });
});

describe('rope kernel', () => {
  const CASES = [
    { heads: 3, headDim: 6, theta: 1e4 },
    { heads: 2, headDim: 10, theta: 1e6 },
    { heads: 4, headDim: 16, theta: 1e6 },
    { heads: 2, headDim: 64, theta: 1e6 },
    { heads: 1, headDim: 128, theta: 1e4 },
  ];

  it(`forward matches the reference at positions up to 2e5 (abs tol ${TOL})`, async () => {
    const gpu = await getTestGpu();
    const N = POSITIONS.length;
    const pos = gpu.upload(new Uint32Array(POSITIONS), [N]);
    const outs: Tensor[] = [];
    const refs: Float64Array[] = [];
    for (const [k, c] of CASES.entries()) {
      const x = randomArray(N * c.heads * c.headDim, 10 + k);
      outs.push(rope(gpu, gpu.upload(x, [N, c.heads * c.headDim]), pos, c));
      refs.push(ropeRef(x, POSITIONS, c));
    }
    const got = await gpu.readMany(outs);
    CASES.forEach((c, k) => {
      expect(maxAbsError(got[k], refs[k]), JSON.stringify(c)).toBeLessThanOrEqual(TOL);
    });
  });

  it(`backward is the inverse rotation: matches the reference, and undoes the forward (abs tol ${TOL})`, async () => {
    const gpu = await getTestGpu();
    const N = POSITIONS.length;
    const pos = gpu.upload(new Uint32Array(POSITIONS), [N]);
    for (const [k, c] of CASES.entries()) {
      const width = c.heads * c.headDim;
      const dy = randomArray(N * width, 20 + k);
      const tdy = gpu.upload(dy, [N, width]);
      const dx = ropeBackward(gpu, tdy, pos, c);
      const roundTrip = ropeBackward(gpu, rope(gpu, tdy, pos, c), pos, c);
      const [gdx, grt] = await gpu.readMany([dx, roundTrip]);
      expect(maxAbsError(gdx, ropeBackwardRef(dy, POSITIONS, c)), JSON.stringify(c)).toBeLessThanOrEqual(TOL);
      expect(maxAbsError(grt, dy), JSON.stringify(c)).toBeLessThanOrEqual(TOL);
    }
  });

  it('in place, out-of-place and `out` give identical results; ropeQK handles nH != nKv', async () => {
    const gpu = await getTestGpu();
    const [N, nH, nKv, hd, theta] = [7, 4, 2, 16, 1e6];
    const positions = new Uint32Array([0, 1, 2, 3, 100, 101, 32000]);
    const pos = gpu.upload(positions, [N]);
    const q = randomArray(N * nH * hd, 1);
    const k = randomArray(N * nKv * hd, 2);
    const opts = { headDim: hd, theta };
    const tq = gpu.upload(q, [N, nH * hd]);
    const outOfPlace = rope(gpu, tq, pos, opts);
    const into = rope(gpu, tq, pos, {
      ...opts,
      out: gpu.upload(new Float32Array(N * nH * hd).fill(Number.NaN), [N, nH * hd]),
    });
    const inPlace = gpu.upload(q, [N, nH * hd]);
    expect(rope(gpu, inPlace, pos, { ...opts, inPlace: true })).toBe(inPlace);
    const qk = ropeQK(gpu, gpu.upload(q, [N, nH * hd]), gpu.upload(k, [N, nKv * hd]), pos, {
      ...opts,
      inPlace: true,
    });
    const back = ropeQK(gpu, qk.q, qk.k, pos, { ...opts, inverse: true }); // out of place
    const [a, b, c, gq, gk, bq, bk] = await gpu.readMany([
      outOfPlace,
      into,
      inPlace,
      qk.q,
      qk.k,
      back.q,
      back.k,
    ]);
    expect(Array.from(b)).toEqual(Array.from(a));
    expect(Array.from(c)).toEqual(Array.from(a));
    expect(Array.from(gq)).toEqual(Array.from(a));
    const refK = ropeRef(k, positions, { heads: nKv, ...opts });
    expect(maxAbsError(gk, refK)).toBeLessThanOrEqual(TOL);
    expect(maxAbsError(bq, q)).toBeLessThanOrEqual(TOL);
    expect(maxAbsError(bk, k)).toBeLessThanOrEqual(TOL);
  });

  it('padding rows (zero activations) stay exactly 0 at any position, even a garbage one', async () => {
    const gpu = await getTestGpu();
    const [N, heads, hd] = [4, 2, 10];
    const x = randomArray(N * heads * hd, 3);
    x.fill(0, 1 * heads * hd, 2 * heads * hd);
    x.fill(0, 3 * heads * hd, 4 * heads * hd);
    const pos = gpu.upload(new Uint32Array([5, 0, 9, 0xffffffff]), [N]);
    const y = rope(gpu, gpu.upload(x, [N, heads * hd]), pos, { headDim: hd, theta: 1e6 });
    const dx = ropeBackward(gpu, y, pos, { headDim: hd, theta: 1e6 });
    const [gy, gdx] = await gpu.readMany([y, dx]);
    for (const g of [gy, gdx]) {
      expect(g.every((v) => Number.isFinite(v))).toBe(true);
      for (const r of [1, 3])
        expect(Array.from(g.subarray(r * heads * hd, (r + 1) * heads * hd)).every((v) => v === 0)).toBe(true);
    }
  });

  it('rejects bad shapes, odd head dims and positions of the wrong length', async () => {
    const gpu = await getTestGpu();
    const x = gpu.zeros([7, 24]);
    const pos = gpu.zeros([7], 'u32');
    expect(() => rope(gpu, x, pos, { headDim: 5, theta: 1e4 })).toThrow(/even/);
    expect(() => rope(gpu, x, pos, { headDim: 16, theta: 1e4 })).toThrow(
      /x \[7, 24\] must be \[N, heads \* 16\]/,
    );
    expect(() => rope(gpu, x, gpu.zeros([6], 'u32'), { headDim: 6, theta: 1e4 })).toThrow(/pos \[6\].*\(7\)/);
    expect(() => rope(gpu, x, gpu.zeros([7]), { headDim: 6, theta: 1e4 })).toThrow(/pos must be u32/);
    expect(() => rope(gpu, x, pos, { headDim: 6, theta: 1e4, out: x })).toThrow(/use inPlace/);
    expect(() => ropeQK(gpu, x, gpu.zeros([6, 12]), pos, { headDim: 6, theta: 1e4, inPlace: true })).toThrow(
      /ropeQK: pos/,
    );
  });
});
