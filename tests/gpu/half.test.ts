// Frozen weights in half precision (src/gpu/kernels/half.ts): every kernel that reads a weight
// (matmul's B, linear forward and dX, the embedding lookup, the fused LM head and its dh) gives, with
// an f16 or bf16 weight, the same result as with the f32 weight holding the widened values: the
// storage changes, the arithmetic does not. Runs on lavapipe (native f16 with shader-f16, and the
// packed path forced) and on SwiftShader (no shader-f16: packed words).
import { afterEach, describe, expect, it } from 'vitest';
import { decodeBf16, decodeF16, encodeBf16, encodeF16 } from '../../src/agent/model/dtype.ts';
import { embedding } from '../../src/gpu/kernels/embedding.ts';
import { setPreferNativeF16 } from '../../src/gpu/kernels/half.ts';
import { linear, linearBackward } from '../../src/gpu/kernels/linear.ts';
import { tokenLogprob, tokenLogprobBackward } from '../../src/gpu/kernels/logprob.ts';
import { type MatmulVariant, matmul } from '../../src/gpu/kernels/matmul.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

type Half = 'f16' | 'bf16';

/** The half bits of `values` and the f32 values they stand for (exact widening). */
function halfOf(values: Float32Array, dtype: Half): { bits: Uint16Array; widened: Float32Array } {
  const bytes = dtype === 'f16' ? encodeF16(values) : encodeBf16(values);
  return {
    bits: new Uint16Array(bytes.buffer, bytes.byteOffset, values.length),
    widened: dtype === 'f16' ? decodeF16(bytes) : decodeBf16(bytes),
  };
}

function upload2(gpu: Gpu, values: Float32Array, shape: number[], dtype: Half): [Tensor, Tensor] {
  const { bits, widened } = halfOf(values, dtype);
  return [gpu.upload(bits, shape, dtype), gpu.upload(widened, shape, 'f32')];
}

function maxAbs(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

// Both f16 paths on adapters that have shader-f16; one (packed) elsewhere.
const MODES: Array<{ dtype: Half; native: boolean; name: string }> = [
  { dtype: 'bf16', native: true, name: 'bf16' },
  { dtype: 'f16', native: true, name: 'f16 (native where shader-f16)' },
  { dtype: 'f16', native: false, name: 'f16 (packed words)' },
];

afterEach(() => {
  setPreferNativeF16(true);
});

describe.each(MODES)('half-precision weights: $name', ({ dtype, native }) => {
  // Odd sizes put a weight row across a word boundary of the packed layout.
  const shapes: Array<[number, number, number]> = [
    [1, 7, 5],
    [3, 33, 17],
    [37, 65, 31],
    [64, 128, 96],
  ];

  it('matmul with a half B equals matmul with the widened f32 B (NN and NT, every variant)', async () => {
    const gpu = await getTestGpu();
    setPreferNativeF16(native);
    for (const variant of ['regblock', 'regblock8', 'tiled', 'tiled128', 'skinny', 'gemv'] as MatmulVariant[])
      for (const transB of [false, true])
        for (const [M, N, K] of shapes) {
          const a = gpu.upload(randomArray(M * K, M + K), [M, K]);
          const [bh, bf] = upload2(gpu, randomArray(K * N, N * 3 + K), transB ? [N, K] : [K, N], dtype);
          const yh = matmul(gpu, a, bh, { transB, variant });
          const yf = matmul(gpu, a, bf, { transB, variant });
          const [gh, gf] = (await gpu.readMany([yh, yf])) as Float32Array[];
          // Same products in the same order: equal up to FMA contraction differences.
          expect(maxAbs(gh, gf), `${variant} ${transB ? 'NT' : 'NN'} ${M}x${N}x${K}`).toBeLessThan(1e-5);
          for (const t of [a, bh, bf, yh, yf]) t.release();
        }
  });

  it('linear forward (whole and row-chunked) and dX with a half W; dW is refused', async () => {
    const gpu = await getTestGpu();
    setPreferNativeF16(native);
    const [N, inF, outF] = [19, 48, 200];
    const x = gpu.upload(randomArray(N * inF, 5), [N, inF]);
    const [wh, wf] = upload2(gpu, randomArray(outF * inF, 6, 0.5), [outF, inF], dtype);
    const b = gpu.upload(randomArray(outF, 7), [outF]);
    const dy = gpu.upload(randomArray(N * outF, 8), [N, outF]);
    for (const maxBindingBytes of [undefined, 64 * inF * 2]) {
      const yh = linear(gpu, x, wh, b, { maxBindingBytes });
      const yf = linear(gpu, x, wf, b, { maxBindingBytes });
      const dh = linearBackward(gpu, dy, x, wh, { computeDw: false, maxBindingBytes }).dx!;
      const df = linearBackward(gpu, dy, x, wf, { computeDw: false, maxBindingBytes }).dx!;
      const [a1, a2, a3, a4] = (await gpu.readMany([yh, yf, dh, df])) as Float32Array[];
      expect(maxAbs(a1, a2), `forward, binding limit ${maxBindingBytes}`).toBeLessThan(1e-5);
      expect(maxAbs(a3, a4), `dX, binding limit ${maxBindingBytes}`).toBeLessThan(1e-5);
      for (const t of [yh, yf, dh, df]) t.release();
    }
    expect(() => linearBackward(gpu, dy, x, wh)).toThrow(/frozen weight.*computeDw: false/);
    for (const t of [x, wh, wf, b, dy]) t.release();
  });

  it('embedding lookup from a half table gives the widened rows exactly (whole and chunked)', async () => {
    const gpu = await getTestGpu();
    setPreferNativeF16(native);
    const [V, D] = [300, 24];
    const values = randomArray(V * D, 11);
    const { bits, widened } = halfOf(values, dtype);
    const table = gpu.upload(bits, [V, D], dtype);
    const idList = [0, 299, 17, 17, 128, 3, 250, 1];
    const ids = gpu.upload(Uint32Array.from(idList), [idList.length], 'u32');
    for (const maxChunkRows of [undefined, 64]) {
      const out = embedding(gpu, table, ids, { maxChunkRows });
      const got = await gpu.readF32(out);
      const want = new Float32Array(idList.length * D);
      for (const [n, id] of idList.entries()) want.set(widened.subarray(id * D, (id + 1) * D), n * D);
      expect(got).toEqual(want);
      out.release();
    }
    for (const t of [table, ids]) t.release();
  });

  it('the fused LM head (log-probs, entropy, dh) over a half W equals the widened f32 W', async () => {
    const gpu = await getTestGpu();
    setPreferNativeF16(native);
    const [N, H, V] = [13, 32, 700];
    const h = gpu.upload(randomArray(N * H, 21), [N, H]);
    const [wh, wf] = upload2(gpu, randomArray(V * H, 22, 0.3), [V, H], dtype);
    const targets = gpu.upload(
      Uint32Array.from({ length: N }, (_, i) => (i * 53) % V),
      [N],
      'u32',
    );
    const gLp = gpu.upload(randomArray(N, 23), [N]);
    const gEnt = gpu.upload(randomArray(N, 24), [N]);
    const chunk = 128; // several chunks: W's half row blocks are bound at aligned offsets
    const fh = tokenLogprob(gpu, h, wh, targets, { chunk });
    const ff = tokenLogprob(gpu, h, wf, targets, { chunk });
    const bh = tokenLogprobBackward(gpu, h, wh, targets, fh, {
      gLogprob: gLp,
      gEntropy: gEnt,
      computeDw: false,
    });
    const bf = tokenLogprobBackward(gpu, h, wf, targets, ff, {
      gLogprob: gLp,
      gEntropy: gEnt,
      computeDw: false,
    });
    const got = (await gpu.readMany([
      fh.logprob,
      ff.logprob,
      fh.entropy,
      ff.entropy,
      bh.dh!,
      bf.dh!,
    ])) as Float32Array[];
    expect(maxAbs(got[0], got[1])).toBeLessThan(1e-5);
    expect(maxAbs(got[2], got[3])).toBeLessThan(1e-5);
    expect(maxAbs(got[4], got[5])).toBeLessThan(1e-5);
    expect(() => tokenLogprobBackward(gpu, h, wh, targets, fh, { gLogprob: gLp })).toThrow(/frozen head/);
    fh.release();
    ff.release();
    for (const t of [h, wh, wf, targets, gLp, gEnt, bh.dh!, bf.dh!]) t.release();
  });
});
