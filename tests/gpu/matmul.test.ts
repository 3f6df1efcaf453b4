import { describe, expect, it } from 'vitest';
import {
  defaultMatmulVariant,
  type MatmulVariant,
  MIN_TILES128,
  matmul,
} from '../../src/gpu/kernels/matmul.ts';
import { matmulRef, maxRelativeError } from '../../src/gpu/reference/matmul.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

// [M, N, K]: degenerate, odd, prime, tile multiples and one larger square-ish shape.
const SHAPES: Array<[number, number, number]> = [
  [1, 1, 1],
  [7, 13, 5],
  [1, 64, 33],
  [31, 1, 17],
  [33, 31, 1],
  [65, 33, 129],
  [64, 64, 64],
  [100, 3, 250],
  [3, 100, 250],
  [128, 96, 80],
  [256, 512, 128],
  [200, 300, 45],
];
const VARIANTS: Array<[boolean, boolean]> = [
  [false, false],
  [false, true],
  [true, false],
];

describe.each<MatmulVariant>(['regblock', 'regblock8', 'tiled', 'tiled128', 'skinny', 'gemv'])(
  'matmul (%s)',
  (variant) => {
    for (const [transA, transB] of VARIANTS) {
      const label = `${transA ? 'Aᵀ' : 'A'}·${transB ? 'Bᵀ' : 'B'}`;
      it(`${label} matches the CPU reference on ${SHAPES.length} shapes (rel err <= 1e-4)`, async () => {
        const gpu = await getTestGpu();
        const outs: Tensor[] = [];
        const refs: Float32Array[] = [];
        for (const [M, N, K] of SHAPES) {
          const a = randomArray(M * K, M * 1000 + K);
          const b = randomArray(K * N, N * 7 + K);
          const ta = gpu.upload(a, transA ? [K, M] : [M, K]);
          const tb = gpu.upload(b, transB ? [N, K] : [K, N]);
          outs.push(matmul(gpu, ta, tb, { transA, transB, variant }));
          refs.push(matmulRef(a, b, { M, N, K, transA, transB }));
          ta.release();
          tb.release();
        }
        const got = await gpu.readMany(outs);
        SHAPES.forEach(([M, N, K], i) => {
          const err = maxRelativeError(got[i], refs[i]);
          expect(err, `${label} ${M}x${N}x${K}`).toBeLessThanOrEqual(1e-4);
        });
        for (const t of outs) t.release();
      });
    }
  },
);

describe('matmul variant choice', () => {
  const on = (kind: string) => ({ report: { kind } }) as unknown as Gpu;
  it('skinny / gemv (GPU, B as [N, K]) for M <= 4, regblock8 (M > 8) or regblock on CPU adapters, tiled128 on a GPU only with enough tiles', () => {
    expect(defaultMatmulVariant(on('gpu'), 4, 4096)).toBe('skinny');
    expect(defaultMatmulVariant(on('gpu'), 4, 4096, 1, true)).toBe('gemv');
    expect(defaultMatmulVariant(on('lavapipe'), 1, 4096, 1, true)).toBe('skinny');
    expect(defaultMatmulVariant(on('lavapipe'), 4096, 4096)).toBe('regblock8');
    expect(defaultMatmulVariant(on('swiftshader'), 64, 64)).toBe('regblock8');
    expect(defaultMatmulVariant(on('lavapipe'), 8, 64)).toBe('regblock');
    expect(defaultMatmulVariant(on('lavapipe'), 5, 64)).toBe('regblock');
    expect(defaultMatmulVariant(on('gpu'), 2048, 2048)).toBe('tiled128');
    expect(defaultMatmulVariant(on('gpu'), 1024, 1024)).toBe('tiled');
    expect(defaultMatmulVariant(on('gpu'), 128 * MIN_TILES128, 128)).toBe('tiled128');
    expect(defaultMatmulVariant(on('gpu'), 128 * MIN_TILES128 - 128, 128)).toBe('tiled');
    expect(defaultMatmulVariant(on('gpu'), 128, 128, MIN_TILES128)).toBe('tiled128');
  });
});

describe('matmul semantics', () => {
  it("regblock8 gives regblock's bits (the same order of the K sum per entry), every layout, ragged M", async () => {
    const gpu = await getTestGpu();
    for (const [transA, transB] of VARIANTS)
      for (const [M, N, K] of [
        [13, 9, 70],
        [67, 30, 33],
        [8, 5, 3],
      ]) {
        const ta = gpu.upload(randomArray(M * K, M + 5 * K), transA ? [K, M] : [M, K]);
        const tb = gpu.upload(randomArray(K * N, N + 3 * K), transB ? [N, K] : [K, N]);
        const [a, b] = (await gpu.readMany([
          matmul(gpu, ta, tb, { transA, transB, variant: 'regblock' }),
          matmul(gpu, ta, tb, { transA, transB, variant: 'regblock8' }),
        ])) as Float32Array[];
        expect(Array.from(b), `${M}x${N}x${K} ${transA} ${transB}`).toEqual(Array.from(a));
        ta.release();
        tb.release();
      }
  });

  it('gemv: more columns than one grid dimension holds (the LM head at decode)', async () => {
    const gpu = await getTestGpu();
    const [M, N, K] = [3, 70_001, 8];
    const a = randomArray(M * K, 21);
    const b = randomArray(N * K, 22);
    const ta = gpu.upload(a, [M, K]);
    const tb = gpu.upload(b, [N, K]);
    const got = await gpu.readF32(matmul(gpu, ta, tb, { transB: true, variant: 'gemv' }));
    expect(maxRelativeError(got, matmulRef(a, b, { M, N, K, transB: true }))).toBeLessThanOrEqual(1e-5);
  });

  it('accumulates (beta = 1) and scales (alpha) without reading garbage when overwriting', async () => {
    const gpu = await getTestGpu();
    const [M, N, K] = [9, 11, 7];
    const a = randomArray(M * K, 1);
    const b = randomArray(K * N, 2);
    const c0 = randomArray(M * N, 3);
    const ta = gpu.upload(a, [M, K]);
    const tb = gpu.upload(b, [K, N]);
    const acc = gpu.upload(c0, [M, N]);
    matmul(gpu, ta, tb, { out: acc, accumulate: true, alpha: 0.5 });
    // Overwrite into a buffer full of NaN: beta = 0 must not read it.
    const nanOut = gpu.upload(new Float32Array(M * N).fill(Number.NaN), [M, N]);
    matmul(gpu, ta, tb, { out: nanOut });
    const [gotAcc, gotOver] = await gpu.readMany([acc, nanOut]);
    expect(maxRelativeError(gotAcc, matmulRef(a, b, { M, N, K, alpha: 0.5, beta: 1, c: c0 }))).toBeLessThan(
      1e-5,
    );
    expect(maxRelativeError(gotOver, matmulRef(a, b, { M, N, K }))).toBeLessThan(1e-5);
  });

  it('runs a batch, with b shared across the batch or batched', async () => {
    const gpu = await getTestGpu();
    const [Bt, M, N, K] = [3, 5, 6, 7];
    const a = randomArray(Bt * M * K, 11);
    const bShared = randomArray(K * N, 12);
    const bBatched = randomArray(Bt * K * N, 13);
    const ta = gpu.upload(a, [Bt, M, K]);
    const shared = matmul(gpu, ta, gpu.upload(bShared, [K, N]));
    const batched = matmul(gpu, ta, gpu.upload(bBatched, [Bt, K, N]));
    expect(shared.shape).toEqual([Bt, M, N]);
    const [gs, gb] = await gpu.readMany([shared, batched]);
    for (let i = 0; i < Bt; i++) {
      const ai = a.subarray(i * M * K, (i + 1) * M * K);
      const rs = matmulRef(ai, bShared, { M, N, K });
      const rb = matmulRef(ai, bBatched.subarray(i * K * N, (i + 1) * K * N), { M, N, K });
      expect(maxRelativeError(gs.subarray(i * M * N, (i + 1) * M * N), rs)).toBeLessThan(1e-5);
      expect(maxRelativeError(gb.subarray(i * M * N, (i + 1) * M * N), rb)).toBeLessThan(1e-5);
    }
  });

  it('rejects mismatched shapes with a message naming both', async () => {
    const gpu = await getTestGpu();
    const a = gpu.zeros([3, 4]);
    const b = gpu.zeros([5, 6]);
    expect(() => matmul(gpu, a, b)).toThrow(/inner dimensions differ.*\[3, 4\].*\[5, 6\]/);
  });
});
