// Thin wrapper over src/shaders/matmul.wgsl: shape checks, variant choice per adapter, dispatch.
//
// Shapes (last two dims; leading dims are a batch):
//   a: [.., M, K]  (transA: [.., K, M])
//   b: [.., K, N]  (transB: [.., N, K])    b may also be unbatched [K, N] and shared by all batches
//   out: [.., M, N]
// a and out are f32; b may also be f16 or bf16 (frozen weights, widened to f32 on load: half.ts).

import matmulWgsl from '../../shaders/matmul.wgsl?raw';
import type { Gpu } from '../runtime.ts';
import type { Bindable, Tensor } from '../tensor.ts';
import { bindingDType, isWeightDType, weightShader } from './half.ts';

export type MatmulVariant = 'regblock' | 'regblock8' | 'tiled' | 'tiled128' | 'skinny' | 'gemv';

/**
 * Measured (docs/benchmarks.md): on CPU adapters (lavapipe, SwiftShader) the barrier-free
 * register-blocked kernel beats the workgroup-tiled ones several times over, and its 8-row block
 * (regblock8) the 4-row one by 1.2× over qwen-tiny's training products (M > 8; fewer rows would be
 * clamped duplicates). On an H100, tiled128
 * runs at 24-27 TFLOP/s from 2048³ to 8192³ (tiled: 16-17, regblock: 9-10), but at 1024³, 64 tiles
 * of 128x128 leave half the 132 SMs idle and tiled (256 tiles) is faster (11.6 against 9.3): below
 * MIN_TILES128 tiles a real GPU takes tiled. Kept per adapter, overridable for benchmarks.
 * M <= 4 (decode steps) goes to the skinny kernel, whose invocations own whole columns (the 4x4
 * blocks of the others would compute duplicate rows), or on a real GPU with B stored [N, K] (x·Wᵀ,
 * every decode projection and the LM head) to gemv, whose workgroups own them.
 */
export function defaultMatmulVariant(
  gpu: Gpu,
  M = Number.POSITIVE_INFINITY,
  N = Number.POSITIVE_INFINITY,
  batch = 1,
  transB = false,
): MatmulVariant {
  const real = gpu.report.kind === 'gpu';
  if (M <= 4) return real && transB ? 'gemv' : 'skinny';
  if (!real) return M > 8 ? 'regblock8' : 'regblock';
  return Math.ceil(M / 128) * Math.ceil(N / 128) * batch >= MIN_TILES128 ? 'tiled128' : 'tiled';
}

/** Fewest 128x128 output tiles for which a real GPU takes tiled128 (about one per SM of an H100). */
export const MIN_TILES128 = 128;

/** One workgroup per output column, columns over x then y (past the per-dimension limit). */
function gemvGrid(gpu: Gpu, N: number, batch: number): [number, number, number] {
  const y = Math.ceil(N / gpu.limits.maxComputeWorkgroupsPerDimension);
  return [Math.ceil(N / y), y, batch];
}

/** Problem size and layout for matmulInto (strides in elements; 0 shares an operand across the batch). */
export interface MatmulDims {
  M: number;
  N: number;
  K: number;
  batch?: number;
  strideA?: number;
  strideB?: number;
  strideC?: number;
  transA?: boolean;
  transB?: boolean;
  alpha?: number;
  /** C += alpha·op(A)·op(B) instead of C = ... */
  accumulate?: boolean;
  variant?: MatmulVariant;
}

/**
 * The one dispatch path of matmul.wgsl, on any bindings (whole tensors or byte ranges of them, e.g.
 * a vocabulary chunk of the LM head). Callers check shapes; this checks nothing but sizes > 0.
 */
export function matmulInto(gpu: Gpu, a: Bindable, b: Bindable, c: Bindable, dims: MatmulDims): void {
  const { M, N, K, batch = 1, transA = false, transB = false, alpha = 1, accumulate = false } = dims;
  if (M === 0 || N === 0 || K === 0 || batch === 0) return;
  const variant = dims.variant ?? defaultMatmulVariant(gpu, M, N, batch, transB);
  const rows = M >= 4 ? 4 : M >= 2 ? 2 : 1;
  const bType = bindingDType(b);
  if (!isWeightDType(bType)) throw new Error(`matmul: b must be f32, f16 or bf16, got ${bType}`);
  const kernel = gpu.kernel({
    name: 'matmul.wgsl',
    code: weightShader(gpu, matmulWgsl, bType, 'B', 'load_b'),
    entryPoint: variant === 'regblock8' ? 'matmul_regblock' : `matmul_${variant}`,
    constants: {
      TRANS_A: transA ? 1 : 0,
      TRANS_B: transB ? 1 : 0,
      ...(variant === 'skinny' ? { ROWS: rows } : {}),
      ...(variant === 'regblock8' ? { REG_ROWS: 8 } : {}),
    },
  });
  const params = gpu.uniform('uuuuuuuff', [
    M,
    N,
    K,
    batch,
    dims.strideA ?? M * K,
    dims.strideB ?? K * N,
    dims.strideC ?? M * N,
    alpha,
    accumulate ? 1 : 0,
  ]);
  const grid: [number, number, number] =
    variant === 'skinny'
      ? [Math.ceil(N / 64), Math.ceil(M / rows), batch]
      : variant === 'tiled'
        ? [Math.ceil(N / 64), Math.ceil(M / 64), batch]
        : variant === 'tiled128'
          ? [Math.ceil(N / 128), Math.ceil(M / 128), batch]
          : variant === 'gemv'
            ? gemvGrid(gpu, N, batch)
            : variant === 'regblock8'
              ? [Math.ceil(N / 32), Math.ceil(M / 64), batch]
              : [Math.ceil(N / 32), Math.ceil(M / 32), batch];
  gpu.dispatch(kernel, [a, b, c, params], grid, 2 * M * N * K * batch);
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
  if (a.dtype !== 'f32' || !isWeightDType(b.dtype))
    throw new Error(`matmul: a must be f32 and b f32, f16 or bf16, got ${a.dtype} and ${b.dtype}`);
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
  matmulInto(gpu, a, b, out, {
    M,
    N,
    K,
    batch,
    strideB: bBatch === 1 ? 0 : K * N,
    transA,
    transB,
    alpha,
    accumulate,
    variant: options.variant,
  });
  return out;
}
