import { describe, expect, it } from 'vitest';
import { linear, linearBackward } from '../../src/gpu/kernels/linear.ts';
import type { MatmulVariant } from '../../src/gpu/kernels/matmul.ts';
import { type LinearRefDims, linearBackwardRef, linearRef } from '../../src/gpu/reference/linear.ts';
import { maxRelativeError } from '../../src/gpu/reference/matmul.ts';
import { numericGradient } from '../helpers/finite-diff.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

// Tolerance: fp32 dot products of length <= 64 against float64; |err| / max(1, |ref|) <= 1e-4.
const TOL = 1e-4;

function dims(N: number, inFeatures: number, outFeatures: number): LinearRefDims {
  return { N, inFeatures, outFeatures };
}

describe('linear CPU reference', () => {
  it('analytic backward matches central finite differences (float64)', () => {
    const d = dims(3, 4, 5);
    const x = Float64Array.from(randomArray(12, 1));
    const w = Float64Array.from(randomArray(20, 2));
    const b = Float64Array.from(randomArray(5, 3));
    const g = Float64Array.from(randomArray(15, 4)); // L = Σ g ⊙ y
    const loss = () => linearRef(x, w, b, d).reduce((acc, y, i) => acc + g[i] * y, 0);
    const { dx, dw, db } = linearBackwardRef(g, x, w, d);
    const eps = 1e-6;
    for (const [param, grad] of [
      [x, dx],
      [w, dw],
      [b, db],
    ] as const) {
      const fd = numericGradient(param, loss, eps);
      for (let i = 0; i < param.length; i++) expect(Math.abs(fd[i] - grad[i])).toBeLessThan(1e-8);
    }
  });
});

// [N, in, out]: odd sizes, a single row, a single output, and in/out not tile multiples.
const SHAPES: Array<[number, number, number]> = [
  [7, 13, 5],
  [1, 33, 65],
  [37, 24, 45],
  [20, 1, 3],
  [5, 17, 1],
];

describe('linear (GPU vs reference)', () => {
  it(`forward with and without bias matches the reference (rel err <= ${TOL})`, async () => {
    const gpu = await getTestGpu();
    const outs = [];
    const refs: Float64Array[] = [];
    for (const [N, I, O] of SHAPES) {
      const x = randomArray(N * I, N * 31 + I);
      const w = randomArray(O * I, O * 17 + I);
      const b = randomArray(O, O + 5);
      const tx = gpu.upload(x, [N, I]);
      const tw = gpu.upload(w, [O, I]);
      const tb = gpu.upload(b, [O]);
      outs.push(linear(gpu, tx, tw, tb), linear(gpu, tx, tw));
      refs.push(linearRef(x, w, b, dims(N, I, O)), linearRef(x, w, null, dims(N, I, O)));
    }
    const got = await gpu.readMany(outs);
    got.forEach((g, i) => {
      const [N, I, O] = SHAPES[i >> 1];
      expect(maxRelativeError(g, refs[i]), `${N}x${I}->${O} bias=${i % 2 === 0}`).toBeLessThanOrEqual(TOL);
    });
  });

  it('keeps leading dims: x [B, T, in] -> y [B, T, out]', async () => {
    const gpu = await getTestGpu();
    const [B, T, I, O] = [2, 3, 13, 6];
    const x = randomArray(B * T * I, 5);
    const w = randomArray(O * I, 6);
    const y = linear(gpu, gpu.upload(x, [B, T, I]), gpu.upload(w, [O, I]));
    expect(y.shape).toEqual([B, T, O]);
    expect(
      maxRelativeError(await gpu.readF32(y), linearRef(x, w, null, dims(B * T, I, O))),
    ).toBeLessThanOrEqual(TOL);
  });

  it(`backward dX, dW, db match the reference, and accumulate adds (rel err <= ${TOL})`, async () => {
    const gpu = await getTestGpu();
    for (const [N, I, O] of SHAPES) {
      const d = dims(N, I, O);
      const x = randomArray(N * I, N + 1);
      const w = randomArray(O * I, O + 2);
      const dy = randomArray(N * O, N * O + 3);
      const prevW = randomArray(O * I, 7);
      const prevB = randomArray(O, 8);
      const prevX = randomArray(N * I, 9);
      const tx = gpu.upload(x, [N, I]);
      const tw = gpu.upload(w, [O, I]);
      const tdy = gpu.upload(dy, [N, O]);
      // Overwrite into NaN-filled outputs: beta = 0 must never read them.
      const nan = (n: number, shape: number[]) => gpu.upload(new Float32Array(n).fill(Number.NaN), shape);
      const fresh = linearBackward(gpu, tdy, tx, tw, {
        dx: nan(N * I, [N, I]),
        dW: nan(O * I, [O, I]),
        db: nan(O, [O]),
      });
      const acc = linearBackward(gpu, tdy, tx, tw, {
        dx: gpu.upload(prevX, [N, I]),
        accumulateDx: true,
        dW: gpu.upload(prevW, [O, I]),
        db: gpu.upload(prevB, [O]),
        accumulate: true,
      });
      const [fdx, fdw, fdb, adx, adw, adb] = await gpu.readMany([
        fresh.dx!,
        fresh.dW!,
        fresh.db!,
        acc.dx!,
        acc.dW!,
        acc.db!,
      ]);
      const ref = linearBackwardRef(dy, x, w, d);
      const plus = (a: Float64Array, b: Float32Array) => a.map((v, i) => v + b[i]);
      const tag = `${N}x${I}->${O}`;
      expect(maxRelativeError(fdx, ref.dx), `dx ${tag}`).toBeLessThanOrEqual(TOL);
      expect(maxRelativeError(fdw, ref.dw), `dW ${tag}`).toBeLessThanOrEqual(TOL);
      expect(maxRelativeError(fdb, ref.db), `db ${tag}`).toBeLessThanOrEqual(TOL);
      expect(maxRelativeError(adx, plus(ref.dx, prevX)), `dx+= ${tag}`).toBeLessThanOrEqual(TOL);
      expect(maxRelativeError(adw, plus(ref.dw, prevW)), `dW+= ${tag}`).toBeLessThanOrEqual(TOL);
      expect(maxRelativeError(adb, plus(ref.db, prevB)), `db+= ${tag}`).toBeLessThanOrEqual(TOL);
    }
  });

  it('skips dX and db when not asked for', async () => {
    const gpu = await getTestGpu();
    const x = gpu.upload(randomArray(12, 1), [3, 4]);
    const w = gpu.upload(randomArray(8, 2), [2, 4]);
    const g = linearBackward(gpu, gpu.upload(randomArray(6, 3), [3, 2]), x, w, { computeDx: false });
    expect(g.dx).toBeNull();
    expect(g.db).toBeNull();
    expect(g.dW!.shape).toEqual([2, 4]);
  });

  it('a frozen weight (computeDw false): dX only, the same values, no dW or db', async () => {
    const gpu = await getTestGpu();
    const x = gpu.upload(randomArray(12, 1), [3, 4]);
    const w = gpu.upload(randomArray(8, 2), [2, 4]);
    const dy = gpu.upload(randomArray(6, 3), [3, 2]);
    const full = linearBackward(gpu, dy, x, w, { bias: true });
    const frozen = linearBackward(gpu, dy, x, w, { computeDw: false, bias: true });
    expect(frozen.dW).toBeNull();
    expect(frozen.db).toBeNull();
    const [a, b] = await gpu.readMany([full.dx!, frozen.dx!]);
    expect(b).toEqual(a);
  });
});

describe('linear with W chunked into row blocks (tiny maxBindingBytes)', () => {
  // W is over the pretend binding limit, so it is bound as aligned row-block views:
  //  in = 24: 96-byte rows, blocks of 8k rows; limit 2048 -> blocks of 16 rows (16, 16, 13).
  //  in = 13: 52-byte rows, blocks must be multiples of 64 rows; limit 4000 -> 64, 64, 22.
  const CASES: Array<{ N: number; I: number; O: number; limit: number; variant: MatmulVariant }> = [
    { N: 7, I: 24, O: 45, limit: 2048, variant: 'regblock' },
    { N: 11, I: 13, O: 150, limit: 4000, variant: 'regblock' },
    { N: 11, I: 13, O: 150, limit: 4000, variant: 'tiled' }, // the real-GPU variant
  ];
  for (const { N, I, O, limit, variant } of CASES) {
    it(`N=${N} in=${I} out=${O}, limit ${limit} B, ${variant} matmul: forward and backward match`, async () => {
      const gpu = await getTestGpu();
      expect(O * I * 4).toBeGreaterThan(limit);
      const d = dims(N, I, O);
      const x = randomArray(N * I, 21);
      const w = randomArray(O * I, 22);
      const b = randomArray(O, 23);
      const dy = randomArray(N * O, 24);
      const prevW = randomArray(O * I, 25);
      const tx = gpu.upload(x, [N, I]);
      const tw = gpu.upload(w, [O, I]);
      const opts = { maxBindingBytes: limit, variant };
      const y = linear(gpu, tx, tw, gpu.upload(b, [O]), opts);
      const yNoBias = linear(gpu, tx, tw, null, opts);
      const tdy = gpu.upload(dy, [N, O]);
      const g = linearBackward(gpu, tdy, tx, tw, { ...opts, bias: true });
      const acc = linearBackward(gpu, tdy, tx, tw, {
        ...opts,
        computeDx: false,
        dW: gpu.upload(prevW, [O, I]),
        accumulate: true,
      });
      const [gy, gy0, gdx, gdw, gdb, adw] = await gpu.readMany([y, yNoBias, g.dx!, g.dW!, g.db!, acc.dW!]);
      const ref = linearBackwardRef(dy, x, w, d);
      expect(maxRelativeError(gy, linearRef(x, w, b, d))).toBeLessThanOrEqual(TOL);
      expect(maxRelativeError(gy0, linearRef(x, w, null, d))).toBeLessThanOrEqual(TOL);
      expect(maxRelativeError(gdx, ref.dx)).toBeLessThanOrEqual(TOL);
      expect(maxRelativeError(gdw, ref.dw)).toBeLessThanOrEqual(TOL);
      expect(maxRelativeError(gdb, ref.db)).toBeLessThanOrEqual(TOL);
      expect(
        maxRelativeError(
          adw,
          ref.dw.map((v, i) => v + prevW[i]),
        ),
      ).toBeLessThanOrEqual(TOL);
    });
  }

  it('refuses a limit too small for one aligned block, naming the sizes', async () => {
    const gpu = await getTestGpu();
    const x = gpu.upload(randomArray(7 * 13, 1), [7, 13]);
    const w = gpu.upload(randomArray(150 * 13, 2), [150, 13]);
    expect(() => linear(gpu, x, w, null, { maxBindingBytes: 1024 })).toThrow(/W \[150, 13\].*64 rows/);
  });
});

describe('linear input checks', () => {
  it('rejects mismatched shapes and misuse with clear messages', async () => {
    const gpu = await getTestGpu();
    const x = gpu.zeros([3, 4]);
    const w = gpu.zeros([5, 6]);
    expect(() => linear(gpu, x, w)).toThrow(/x \[3, 4\] has 4 features, W \[5, 6\] expects 6/);
    const w2 = gpu.zeros([5, 4]);
    expect(() => linear(gpu, x, w2, gpu.zeros([4]))).toThrow(/bias \[4\].*\[5\]/);
    expect(() => linearBackward(gpu, gpu.zeros([3, 4]), x, w2)).toThrow(/dY \[3, 4\].*\[3, 5\]/);
    expect(() => linearBackward(gpu, gpu.zeros([3, 5]), x, w2, { accumulate: true })).toThrow(
      /accumulate needs an existing `dW`/,
    );
  });
});
