// Thin wrapper over src/shaders/matmul.wgsl: shape checks, variant choice per adapter, dispatch.
//
// Shapes (last two dims; leading dims are a batch):
//   a: [.., M, K]  (transA: [.., K, M])
//   b: [.., K, N]  (transB: [.., N, K])    b may also be unbatched [K, N] and shared by all batches
//   out: [.., M, N]

import matmulWgsl from '../../shaders/matmul.wgsl?raw';
import type { Gpu } from '../runtime.ts';
import type { Tensor } from '../tensor.ts';

export type MatmulVariant = 'regblock' | 'tiled';

/**
 * Measured here: on CPU adapters (lavapipe, SwiftShader) the barrier-free register-blocked kernel
 * beats the workgroup-tiled one several times over; real GPUs want the tiled one. Kept per adapter,
 * overridable for benchmarks.
 */
export function defaultMatmulVariant(gpu: Gpu): MatmulVariant {
  return gpu.report.kind === 'gpu' ? 'tiled' : 'regblock';
}

export interface MatmulOptions {
  transA?: boolean;
  transB?: boolean;
  alpha?: number;
  /** Accumulate into `out` (beta = 1) instead of overwriting it. Requires `out`. */
  accumulate?: boolean;
  out?: Tensor;
  variant?: MatmulVariant;
  label?: string;
}

export function matmul(gpu: Gpu, a: Tensor, b: Tensor, options: MatmulOptions = {}): Tensor {
  const { transA = false, transB = false, alpha = 1, accumulate = false } = options;
  if (a.dtype !== 'f32' || b.dtype !== 'f32')
    throw new Error(`matmul: f32 only, got ${a.dtype} and ${b.dtype}`);
  if (a.shape.length < 2 || b.shape.length < 2) {
    throw new Error(`matmul: needs matrices, got [${a.shape.join(', ')}] and [${b.shape.join(', ')}]`);
  }
  const ar = a.shape.at(-2)!;
  const ac = a.shape.at(-1)!;
  const br = b.shape.at(-2)!;
  const bc = b.shape.at(-1)!;
  const [M, K] = transA ? [ac, ar] : [ar, ac];
  const [Kb, N] = transB ? [bc, br] : [br, bc];
  if (K !== Kb) {
    throw new Error(
      `matmul: inner dimensions differ: op(a) is [${M}, ${K}], op(b) is [${Kb}, ${N}] (a [${a.shape.join(', ')}]${transA ? 'ᵀ' : ''}, b [${b.shape.join(', ')}]${transB ? 'ᵀ' : ''})`,
    );
  }
  const batchShape = a.shape.slice(0, -2);
  const batch = batchShape.reduce((x, y) => x * y, 1);
  const bBatch = b.shape.slice(0, -2).reduce((x, y) => x * y, 1);
  if (bBatch !== 1 && bBatch !== batch) {
    throw new Error(`matmul: batch of b (${bBatch}) must be 1 or equal a's (${batch})`);
  }
  const outShape = [...batchShape, M, N];
  let out = options.out;
  if (out) {
    if (out.size !== batch * M * N) {
      throw new Error(`matmul: out [${out.shape.join(', ')}] does not hold [${outShape.join(', ')}]`);
    }
  } else {
    if (accumulate) throw new Error('matmul: accumulate needs an existing `out` tensor');
    out = gpu.empty(outShape, 'f32', options.label ?? 'matmul.out');
  }
  if (M === 0 || N === 0 || batch === 0) return out;
  if (K === 0) {
    if (!accumulate) gpu.fill0(out);
    return out;
  }
  const variant = options.variant ?? defaultMatmulVariant(gpu);
  const kernel = gpu.kernel({
    name: 'matmul.wgsl',
    code: matmulWgsl,
    entryPoint: variant === 'tiled' ? 'matmul_tiled' : 'matmul_regblock',
    constants: { TRANS_A: transA ? 1 : 0, TRANS_B: transB ? 1 : 0 },
  });
  const params = gpu.uniform('uuuuuuuff', [
    M,
    N,
    K,
    batch,
    M * K,
    bBatch === 1 ? 0 : K * N,
    M * N,
    alpha,
    accumulate ? 1 : 0,
  ]);
  const tile = variant === 'tiled' ? 64 : 32;
  gpu.dispatch(
    kernel,
    [a, b, out, params],
    [Math.ceil(N / tile), Math.ceil(M / tile), batch],
    2 * M * N * K * batch,
  );
  return out;
}
