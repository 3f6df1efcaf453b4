import { describe, expect, it } from 'vitest';
import { type RmsnormVariant, rmsnorm, rmsnormBackward } from '../../src/gpu/kernels/rmsnorm.ts';
import { maxRelativeError } from '../../src/gpu/reference/matmul.ts';
import { rmsnormBackwardRef, rmsnormRef } from '../../src/gpu/reference/rmsnorm.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

// Tolerance (|gpu - ref| / max(1, |ref|)) for y, rstd, dx and dw: f32 sums of <= 130 squares or
// products and one sqrt/division per row, a few ulp of the row's scale: 1e-5.
const TOL = 1e-5;
const EPS = 1e-6;

function allFinite(x: ArrayLike<number>): boolean {
  for (let i = 0; i < x.length; i++) if (!Number.isFinite(x[i])) return false;
  return true;
}

/** Random rows with varied scales; rows listed in `zeroRows` are all 0 (padding). */
function makeX(rows: number, dim: number, seed: number, zeroRows: number[] = []): Float32Array {
  const x = randomArray(rows * dim, seed);
  for (let r = 0; r < rows; r++) {
    const scale = zeroRows.includes(r) ? 0 : [1, 30, 0.01, 3][r % 4];
    for (let j = 0; j < dim; j++) x[r * dim + j] *= scale;
  }
  return x;
}

describe('rmsnorm reference', () => {
  it('analytic dx and dw match float64 finite differences', () => {
    const [rows, dim] = [3, 5];
    const args = { rows, dim, eps: 1e-3 };
    const x = Float64Array.from(randomArray(rows * dim, 1));
    const w = Float64Array.from(randomArray(dim, 2, 2));
    const dy = randomArray(rows * dim, 3);
    const loss = (xx: ArrayLike<number>, ww: ArrayLike<number>) => {
      const { y } = rmsnormRef(xx, ww, args);
      let s = 0;
      for (let i = 0; i < y.length; i++) s += dy[i] * y[i];
      return s;
    };
    const h = 1e-6;
    const fd = (v: Float64Array, i: number) => {
      const keep = v[i];
      v[i] = keep + h;
      const up = loss(x, w);
      v[i] = keep - h;
      const down = loss(x, w);
      v[i] = keep;
      return (up - down) / (2 * h);
    };
    const { dx, dw } = rmsnormBackwardRef(dy, x, w, args);
    const fdx = Float64Array.from(x, (_, i) => fd(x, i));
    const fdw = Float64Array.from(w, (_, i) => fd(w, i));
    expect(maxRelativeError(dx, fdx)).toBeLessThan(1e-7);
    expect(maxRelativeError(dw, fdw)).toBeLessThan(1e-7);
  });
});

describe.each<RmsnormVariant>(['row', 'wg'])('rmsnorm (%s)', (variant) => {
  // [leading shape..., heads, headDim]: x is [...leading, heads * dim], w is [dim].
  const CASES: Array<{ lead: number[]; heads: number; dim: number; zeroRows?: number[] }> = [
    { lead: [7], heads: 1, dim: 33, zeroRows: [2, 6] },
    { lead: [1], heads: 1, dim: 1 },
    { lead: [2, 3], heads: 1, dim: 70 }, // > 64: the workgroup variant strides
    { lead: [2], heads: 1, dim: 130 },
    { lead: [7], heads: 4, dim: 6, zeroRows: [3] }, // per-head q/k norm, hd = 6
    { lead: [7], heads: 3, dim: 10 },
    { lead: [5], heads: 2, dim: 16 },
  ];

  it(`forward matches the reference on ${CASES.length} shapes, zero rows stay exactly 0 (tol ${TOL})`, async () => {
    const gpu = await getTestGpu();
    const outs: Tensor[] = [];
    const refs: Array<ReturnType<typeof rmsnormRef>> = [];
    const zeros: number[][] = [];
    for (const [k, c] of CASES.entries()) {
      const N = c.lead.reduce((a, b) => a * b, 1);
      const rows = N * c.heads;
      // Zero rows are token rows: all heads of that token are zero.
      const zero = (c.zeroRows ?? []).flatMap((n) =>
        Array.from({ length: c.heads }, (_, h) => n * c.heads + h),
      );
      const x = makeX(rows, c.dim, 100 + k, zero);
      const w = randomArray(c.dim, 200 + k, 2);
      const { y, rstd } = rmsnorm(gpu, gpu.upload(x, [...c.lead, c.heads * c.dim]), gpu.upload(w, [c.dim]), {
        eps: EPS,
        heads: c.heads,
        variant,
      });
      expect(y.shape).toEqual([...c.lead, c.heads * c.dim]);
      outs.push(y, rstd);
      refs.push(rmsnormRef(x, w, { rows, dim: c.dim, eps: EPS }));
      zeros.push(zero);
    }
    const got = await gpu.readMany(outs);
    CASES.forEach((c, k) => {
      const ref = refs[k];
      const zero = zeros[k];
      const [y, rstd] = [got[2 * k], got[2 * k + 1]];
      const what = `lead [${c.lead}] heads ${c.heads} dim ${c.dim}`;
      expect(allFinite(y) && allFinite(rstd), what).toBe(true);
      expect(maxRelativeError(y, ref.y), what).toBeLessThanOrEqual(TOL);
      // rstd of a zero row is 1/sqrt(eps) = 1000: compare relatively.
      for (let r = 0; r < ref.rstd.length; r++) expect(Math.abs(rstd[r] / ref.rstd[r] - 1)).toBeLessThan(TOL);
      for (const r of zero)
        expect(Array.from(y.subarray(r * c.dim, (r + 1) * c.dim)).every((v) => v === 0)).toBe(true);
    });
  });

  it(`backward dx and dw match the reference, incl. per-head, chunked dw and accumulation (tol ${TOL})`, async () => {
    const gpu = await getTestGpu();
    for (const [k, c] of CASES.entries()) {
      const N = c.lead.reduce((a, b) => a * b, 1);
      const rows = N * c.heads;
      const zero = (c.zeroRows ?? []).flatMap((n) =>
        Array.from({ length: c.heads }, (_, h) => n * c.heads + h),
      );
      const x = makeX(rows, c.dim, 300 + k, zero);
      const w = randomArray(c.dim, 400 + k, 2);
      const dy = randomArray(rows * c.dim, 500 + k);
      for (const r of zero) dy.fill(0, r * c.dim, (r + 1) * c.dim); // no gradient from padding
      const shape = [...c.lead, c.heads * c.dim];
      const tx = gpu.upload(x, shape);
      const tw = gpu.upload(w, [c.dim]);
      const tdy = gpu.upload(dy, shape);
      const { y, rstd } = rmsnorm(gpu, tx, tw, { eps: EPS, heads: c.heads, variant });
      // Plain: dw in one pass; NaN-filled outputs must be overwritten, not read.
      const nan = new Float32Array(rows * c.dim).fill(Number.NaN);
      const plain = rmsnormBackward(gpu, tdy, tx, tw, rstd, {
        heads: c.heads,
        variant,
        dx: gpu.upload(nan, shape),
        dw: gpu.upload(nan.subarray(0, c.dim), [c.dim]),
        rowsPerChunk: 1 << 20,
      });
      // Accumulating: dx += .., dw += .. with dw split into chunks of 3 rows (two passes).
      const dx0 = randomArray(rows * c.dim, 600 + k);
      const dw0 = randomArray(c.dim, 700 + k);
      const acc = rmsnormBackward(gpu, tdy, tx, tw, rstd, {
        heads: c.heads,
        variant,
        dx: gpu.upload(dx0, shape),
        accumulateDx: true,
        dw: gpu.upload(dw0, [c.dim]),
        accumulateDw: true,
        rowsPerChunk: 3,
      });
      const [gdx, gdw, gadx, gadw] = await gpu.readMany([plain.dx, plain.dw, acc.dx, acc.dw]);
      const ref = rmsnormBackwardRef(dy, x, w, { rows, dim: c.dim, eps: EPS });
      const what = `lead [${c.lead}] heads ${c.heads} dim ${c.dim}`;
      expect(allFinite(gdx) && allFinite(gdw) && allFinite(gadx) && allFinite(gadw), what).toBe(true);
      expect(maxRelativeError(gdx, ref.dx), what).toBeLessThanOrEqual(TOL);
      expect(maxRelativeError(gdw, ref.dw), what).toBeLessThanOrEqual(TOL);
      expect(
        maxRelativeError(
          gadx,
          ref.dx.map((v, i) => v + dx0[i]),
        ),
        what,
      ).toBeLessThanOrEqual(TOL);
      expect(
        maxRelativeError(
          gadw,
          ref.dw.map((v, i) => v + dw0[i]),
        ),
        what,
      ).toBeLessThanOrEqual(TOL);
      for (const r of zero)
        expect(
          Array.from(gdx.subarray(r * c.dim, (r + 1) * c.dim)).every((v) => v === 0),
          what,
        ).toBe(true);
      for (const t of [tx, tw, tdy, y, rstd, plain.dx, plain.dw, acc.dx, acc.dw]) t.release();
    }
  });
});

describe('rmsnorm semantics', () => {
  it('the per-head norm equals a [N*H, hd] norm, and both variants agree', async () => {
    const gpu = await getTestGpu();
    const [N, H, hd] = [7, 4, 10];
    const x = randomArray(N * H * hd, 1);
    const w = randomArray(hd, 2);
    const tw = gpu.upload(w, [hd]);
    const perHead = rmsnorm(gpu, gpu.upload(x, [N, H * hd]), tw, { eps: EPS, heads: H, variant: 'row' });
    const flat = rmsnorm(gpu, gpu.upload(x, [N * H, hd]), tw, { eps: EPS, variant: 'row' });
    const wg = rmsnorm(gpu, gpu.upload(x, [N, H * hd]), tw, { eps: EPS, heads: H, variant: 'wg' });
    const [a, b, c] = await gpu.readMany([perHead.y, flat.y, wg.y]);
    expect(Array.from(a)).toEqual(Array.from(b));
    expect(maxRelativeError(c, a)).toBeLessThanOrEqual(TOL);
  });

  it('dw is deterministic: repeated runs are bitwise identical', async () => {
    const gpu = await getTestGpu();
    const [rows, dim] = [50, 33];
    const tx = gpu.upload(randomArray(rows * dim, 1), [rows, dim]);
    const tw = gpu.upload(randomArray(dim, 2), [dim]);
    const tdy = gpu.upload(randomArray(rows * dim, 3), [rows, dim]);
    const { rstd } = rmsnorm(gpu, tx, tw, { eps: EPS });
    const a = rmsnormBackward(gpu, tdy, tx, tw, rstd, { rowsPerChunk: 8 });
    const b = rmsnormBackward(gpu, tdy, tx, tw, rstd, { rowsPerChunk: 8 });
    const [da, db, xa, xb] = await gpu.readMany([a.dw, b.dw, a.dx, b.dx]);
    expect(Array.from(da)).toEqual(Array.from(db));
    expect(Array.from(xa)).toEqual(Array.from(xb));
  });

  it('rejects a weight that does not fit, naming the shapes and suggesting heads', async () => {
    const gpu = await getTestGpu();
    const x = gpu.zeros([7, 40]);
    expect(() => rmsnorm(gpu, x, gpu.zeros([33]), { eps: EPS })).toThrow(
      /x \[7, 40\] must end in heads \* dim = 1 \* 33/,
    );
    expect(() => rmsnorm(gpu, x, gpu.zeros([10]), { eps: EPS })).toThrow(/pass heads = 4/);
    expect(() => rmsnorm(gpu, x, gpu.zeros([10]), { eps: Number.NaN, heads: 4 })).toThrow(/eps/);
    const { rstd } = rmsnorm(gpu, x, gpu.zeros([10]), { eps: EPS, heads: 4 });
    expect(() => rmsnormBackward(gpu, gpu.zeros([7, 40]), x, gpu.zeros([10]), rstd)).toThrow(
      /pass heads = 4/,
    );
    expect(() => rmsnormBackward(gpu, gpu.zeros([7, 41]), x, gpu.zeros([10]), rstd, { heads: 4 })).toThrow(
      /dy \[7, 41\] must match x \[7, 40\]/,
    );
    expect(() => rmsnormBackward(gpu, gpu.zeros([7, 40]), x, gpu.zeros([40]), rstd)).toThrow(/rstd \[28\]/);
  });
});
