import { describe, expect, it } from 'vitest';
import {
  embedding,
  embeddingBackward,
  embeddingChunkRows,
  embeddingGradPlan,
} from '../../src/gpu/kernels/embedding.ts';
import { embeddingBackwardRef, embeddingRef } from '../../src/gpu/reference/embedding.ts';
import { maxRelativeError } from '../../src/gpu/reference/matmul.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

// Tolerances: the forward is a copy, so GPU == reference exactly (bitwise). The backward sums at
// most a few dozen f32 rows per id, in position order: |gpu - ref| / max(1, |ref|) <= 1e-6; rows no
// token touches must keep their old bits exactly.
const TOL_BWD = 1e-6;

/** Deterministic ids in [0, range) with many repeats. */
function makeIds(n: number, range: number, seed: number): Uint32Array {
  const r = randomArray(n, seed);
  return Uint32Array.from(r, (v) => Math.floor(((v + 1) / 2) * range) % range);
}

function sameBits(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return true;
}

describe('embedding reference', () => {
  it('backward matches float64 finite differences (padding positions get nothing)', () => {
    const [V, D] = [6, 3];
    const ids = [2, 0, 2, 5, 2];
    const seg = [1, 1, 0, 1, 1];
    const table = Float64Array.from(randomArray(V * D, 1));
    const w = randomArray(ids.length * D, 2);
    const loss = () => embeddingRef(table, ids, V, D, seg).reduce((s, v, i) => s + w[i] * v, 0);
    const h = 1e-6;
    const fd = Float64Array.from(table, (_, i) => {
      const keep = table[i];
      table[i] = keep + h;
      const up = loss();
      table[i] = keep - h;
      const down = loss();
      table[i] = keep;
      return (up - down) / (2 * h);
    });
    expect(maxRelativeError(embeddingBackwardRef(w, ids, V, D, seg), fd)).toBeLessThan(1e-8);
  });
});

describe('embedding forward', () => {
  it('copies rows exactly; padding rows are exactly 0; an out-of-range id gives NaN', async () => {
    const gpu = await getTestGpu();
    const [V, D] = [50, 33];
    const table = randomArray(V * D, 1);
    const ids = new Uint32Array([3, 49, 3, 0, 7, 1000, 12]); // 1000: out of range, but padding below
    const seg = new Uint32Array([1, 1, 1, 2, 2, 0, 0]);
    const tTable = gpu.upload(table, [V, D]);
    const out = embedding(gpu, tTable, gpu.upload(ids, [7]), { seg: gpu.upload(seg, [7]) });
    const bad = embedding(gpu, tTable, gpu.upload(new Uint32Array([1, 50, 2]), [3]));
    const batched = embedding(gpu, tTable, gpu.upload(ids.subarray(0, 4), [2, 2]));
    expect(batched.shape).toEqual([2, 2, D]);
    const [g, gb, gbt] = await gpu.readMany([out, bad, batched]);
    expect(sameBits(g, Float32Array.from(embeddingRef(table, ids, V, D, seg)))).toBe(true);
    expect(g.subarray(5 * D).every((v) => v === 0)).toBe(true);
    expect(sameBits(gb.subarray(0, D), table.subarray(D, 2 * D))).toBe(true);
    expect(gb.subarray(D, 2 * D).every((v) => Number.isNaN(v))).toBe(true);
    expect(sameBits(gb.subarray(2 * D), table.subarray(2 * D, 3 * D))).toBe(true);
    expect(sameBits(gbt, Float32Array.from(embeddingRef(table, ids.subarray(0, 4), V, D)))).toBe(true);
  });

  it('binds a table too big for one binding in aligned row blocks (forced: 64-row blocks)', async () => {
    const gpu = await getTestGpu();
    const [V, D, N] = [200, 33, 40];
    // D = 33 floats = 132 bytes: blocks must start on 256 bytes, so a block holds a multiple of 64 rows.
    expect(embeddingChunkRows(gpu, D, 100)).toBe(64);
    expect(() => embeddingChunkRows(gpu, D, 63)).toThrow(/multiple of 64 rows/);
    const table = randomArray(V * D, 2);
    const ids = makeIds(N, V, 3);
    ids[0] = 199; // the last, partial block
    ids[1] = 64; // a block boundary
    ids[2] = 63;
    const seg = new Uint32Array(N).fill(1);
    seg[5] = 0;
    const out = embedding(gpu, gpu.upload(table, [V, D]), gpu.upload(ids, [N]), {
      seg: gpu.upload(seg, [N]),
      maxChunkRows: 100,
    });
    expect(sameBits(await gpu.readF32(out), Float32Array.from(embeddingRef(table, ids, V, D, seg)))).toBe(
      true,
    );
  });
});

describe('embedding backward', () => {
  it(`scatter-adds repeated tokens into touched rows only, skips padding (tol ${TOL_BWD}); deterministic`, async () => {
    const gpu = await getTestGpu();
    const [V, D, N] = [50, 33, 47];
    const ids = makeIds(N, 9, 4); // 9 distinct ids over 47 positions: heavy repetition
    const seg = Uint32Array.from({ length: N }, (_, n) => (n % 6 === 5 ? 0 : 1 + (n >> 4)));
    const dOut = randomArray(N * D, 5);
    const init = randomArray(V * D, 6); // accumulate on top of existing contents
    const tdOut = gpu.upload(dOut, [N, D]);
    const dTable = gpu.upload(init, [V, D]);
    embeddingBackward(gpu, tdOut, dTable, ids, { seg });
    const again = gpu.upload(init, [V, D]);
    embeddingBackward(gpu, tdOut, again, ids, { seg });
    const [g, g2] = await gpu.readMany([dTable, again]);
    const ref = embeddingBackwardRef(dOut, ids, V, D, seg);
    const touched = new Set<number>();
    ids.forEach((id, n) => {
      if (seg[n] !== 0) touched.add(id);
    });
    for (let v = 0; v < V; v++) {
      const got = g.subarray(v * D, (v + 1) * D);
      const before = init.subarray(v * D, (v + 1) * D);
      if (touched.has(v)) {
        const want = ref.subarray(v * D, (v + 1) * D).map((x, j) => x + before[j]);
        expect(maxRelativeError(got, want), `row ${v}`).toBeLessThanOrEqual(TOL_BWD);
      } else {
        expect(sameBits(got, before), `untouched row ${v}`).toBe(true);
      }
    }
    expect(sameBits(g, g2)).toBe(true);
    // A token that only appears at padding positions gets nothing.
    const padOnly = ids.filter((id, n) => seg[n] === 0 && !touched.has(id));
    for (const v of padOnly)
      expect(sameBits(g.subarray(v * D, (v + 1) * D), init.subarray(v * D, (v + 1) * D))).toBe(true);
  });

  it('reuses a plan, and chunks dTable into aligned 64-row blocks', async () => {
    const gpu = await getTestGpu();
    const [V, D, N] = [200, 33, 30];
    const ids = makeIds(N, V, 7);
    ids[0] = 199;
    ids[1] = 199;
    ids[2] = 128;
    const dOut = randomArray(N * D, 8);
    const tdOut = gpu.upload(dOut, [N, D]);
    const plan = embeddingGradPlan(gpu, ids, V);
    expect(plan.live).toBe(N);
    const dTable = gpu.zeros([V, D]);
    embeddingBackward(gpu, tdOut, dTable, plan, { maxChunkRows: 64 });
    embeddingBackward(gpu, tdOut, dTable, plan, { maxChunkRows: 64 }); // twice: 2x the gradient
    plan.release();
    const ref = embeddingBackwardRef(dOut, ids, V, D).map((x) => 2 * x);
    expect(maxRelativeError(await gpu.readF32(dTable), ref)).toBeLessThanOrEqual(TOL_BWD);
  });

  it('handles Qwen-sized vocabularies (151,936 rows) in O(N * D): only touched rows change', async () => {
    const gpu = await getTestGpu();
    const [V, D, N] = [151936, 8, 16];
    const ids = Uint32Array.from({ length: N }, (_, n) => [0, 151932, 77777, 151643][n % 4] + (n >> 2));
    ids[15] = 151935; // the last row, also at position 13
    const seg = Uint32Array.from({ length: N }, (_, n) => (n === 3 ? 0 : 1));
    const table = randomArray(V * D, 9);
    const tTable = gpu.upload(table, [V, D]);
    const out = embedding(gpu, tTable, gpu.upload(ids, [N]), { seg: gpu.upload(seg, [N]) });
    const dOut = randomArray(N * D, 10);
    const dTable = gpu.zeros([V, D]);
    embeddingBackward(gpu, gpu.upload(dOut, [N, D]), dTable, ids, { seg });
    const [gout, gd] = await gpu.readMany([out, dTable]);
    expect(sameBits(gout, Float32Array.from(embeddingRef(table, ids, V, D, seg)))).toBe(true);
    expect(maxRelativeError(gd, embeddingBackwardRef(dOut, ids, V, D, seg))).toBeLessThanOrEqual(TOL_BWD);
    tTable.release();
    dTable.release();
  });

  it('rejects out-of-range ids (naming the position), mismatched shapes and stale plans', async () => {
    const gpu = await getTestGpu();
    const [V, D] = [10, 4];
    const dTable = gpu.zeros([V, D]);
    const dOut = gpu.zeros([3, D]);
    expect(() => embeddingBackward(gpu, dOut, dTable, new Uint32Array([1, 10, 2]))).toThrow(
      /token id 10 at position 1 is outside the vocabulary \(10\)/,
    );
    // An out-of-range id at a padding position is fine: it is never read.
    expect(() =>
      embeddingBackward(gpu, dOut, dTable, new Uint32Array([1, 10, 2]), { seg: [1, 0, 1] }),
    ).not.toThrow();
    expect(() => embeddingBackward(gpu, dOut, dTable, new Uint32Array([1, 2]))).toThrow(
      /2 ids for dOut \[3, 4\]/,
    );
    expect(() => embeddingBackward(gpu, gpu.zeros([3, 5]), dTable, new Uint32Array(3))).toThrow(
      /must end in D = 4/,
    );
    const plan = embeddingGradPlan(gpu, new Uint32Array([1, 2]), V);
    expect(() => embeddingBackward(gpu, dOut, dTable, plan)).toThrow(/plan was built for 2 ids/);
    expect(() => embedding(gpu, dTable, gpu.zeros([3]))).toThrow(/ids must be u32/);
    expect(() => embedding(gpu, dTable, gpu.zeros([3], 'u32'), { seg: gpu.zeros([4], 'u32') })).toThrow(
      /one entry per id/,
    );
  });
});
