// Thin wrappers over src/shaders/elementwise.wgsl: SwiGLU forward/backward (plain and packed
// gate|up), residual add, in-place axpy and scale, linear-layer bias forward and backward.
//
// Shapes (N = rows = tokens, F = intermediate size, C = output features):
//   swiglu(g [.., F], u [.., F]) -> h [.., F]             h = silu(g) * u
//   swigluPacked(gu [N, 2F]) -> h [N, F]                   gu = [g | u] per row (fused gate_up matmul)
//   swigluBackward(dh, g, u) -> { dg, du }                 all [.., F]
//   swigluPackedBackward(dh [N, F], gu [N, 2F]) -> dgu [N, 2F]
//   add(a, b) -> a + alpha * b;  addInPlace(y, x): y += alpha * x;  scaleInPlace(y): y *= alpha
//   biasAdd(y [N, C], b [C], { seg? }):  y += b in place; rows with seg == 0 are set to 0
//   biasBackward(dy [N, C], { seg? }) -> db [C] = Σ over rows (with seg: rows with seg != 0 only)
//
// Padding convention: with `seg`, biasAdd writes exact zeros at padding rows (so q/k/v stay 0
// there) and biasBackward skips them; without `seg`, biasBackward sums every row, which is also
// right when dY is already 0 at padding rows (as every kernel here guarantees).

import elementwiseWgsl from '../../shaders/elementwise.wgsl?raw';
import type { Gpu } from '../runtime.ts';
import type { Tensor } from '../tensor.ts';
import {
  assertDistinct,
  checkSeg,
  expectDType,
  gridFor,
  outputFor,
  placeholderU32,
  sameShape,
  shapeOf,
} from './launch.ts';

const NAME = 'elementwise.wgsl';

// ---------------------------------------------------------------- SwiGLU

export interface SwigluOptions {
  out?: Tensor;
  label?: string;
}

function swigluParams(gpu: Gpu, N: number, F: number, packed: boolean): GPUBuffer {
  return packed
    ? gpu.uniform('uuuuuu', [N * F, F, 2 * F, 0, 2 * F, F])
    : gpu.uniform('uuuuuu', [N * F, F, F, 0, F, 0]);
}

/** h = silu(g) * u elementwise; g and u have the same shape [.., F]; h gets that shape. */
export function swiglu(gpu: Gpu, g: Tensor, u: Tensor, options: SwigluOptions = {}): Tensor {
  expectDType('swiglu', 'g', g, 'f32');
  expectDType('swiglu', 'u', u, 'f32');
  if (!sameShape(g, u))
    throw new Error(`swiglu: g ${shapeOf(g)} and u ${shapeOf(u)} must have the same shape`);
  const h = outputFor(gpu, 'swiglu', options.out, g.shape, options.label ?? 'swiglu.h');
  assertDistinct('swiglu', h, g, 'g');
  assertDistinct('swiglu', h, u, 'u');
  const F = g.shape.at(-1) ?? 1;
  const N = F === 0 ? 0 : g.size / F;
  if (g.size === 0) return h;
  const kernel = gpu.kernel({
    name: NAME,
    code: elementwiseWgsl,
    entryPoint: 'swiglu_fwd',
    constants: { PACKED: 0 },
  });
  gpu.dispatch(kernel, [g, u, h, swigluParams(gpu, N, F, false)], gridFor(gpu, g.size), 8 * g.size);
  return h;
}

/** h = silu(gu[:, :F]) * gu[:, F:] for a packed gate|up activation gu [N, 2F]; h is [N, F]. */
export function swigluPacked(gpu: Gpu, gu: Tensor, options: SwigluOptions = {}): Tensor {
  expectDType('swigluPacked', 'gu', gu, 'f32');
  const twoF = gu.shape.at(-1) ?? 0;
  if (gu.shape.length < 2 || twoF % 2 !== 0) {
    throw new Error(`swigluPacked: gu ${shapeOf(gu)} must be [N, 2F] with an even last dimension`);
  }
  const F = twoF / 2;
  const N = gu.size / Math.max(twoF, 1);
  const h = outputFor(
    gpu,
    'swigluPacked',
    options.out,
    [...gu.shape.slice(0, -1), F],
    options.label ?? 'swiglu.h',
  );
  assertDistinct('swigluPacked', h, gu, 'gu');
  if (N * F === 0) return h;
  const kernel = gpu.kernel({
    name: NAME,
    code: elementwiseWgsl,
    entryPoint: 'swiglu_fwd',
    constants: { PACKED: 1 },
  });
  gpu.dispatch(kernel, [gu, gu, h, swigluParams(gpu, N, F, true)], gridFor(gpu, N * F), 8 * N * F);
  return h;
}

export interface SwigluBackwardOptions {
  dg?: Tensor;
  du?: Tensor;
}

/** dg = dh * u * silu'(g), du = dh * silu(g); all the shape of g (overwritten, not accumulated). */
export function swigluBackward(
  gpu: Gpu,
  dh: Tensor,
  g: Tensor,
  u: Tensor,
  options: SwigluBackwardOptions = {},
): { dg: Tensor; du: Tensor } {
  for (const [what, t] of [
    ['dh', dh],
    ['g', g],
    ['u', u],
  ] as const)
    expectDType('swigluBackward', what, t, 'f32');
  if (!sameShape(g, u) || !sameShape(g, dh)) {
    throw new Error(
      `swigluBackward: dh ${shapeOf(dh)}, g ${shapeOf(g)} and u ${shapeOf(u)} must have the same shape`,
    );
  }
  const dg = outputFor(gpu, 'swigluBackward', options.dg, g.shape, 'swiglu.dg');
  const du = outputFor(gpu, 'swigluBackward', options.du, g.shape, 'swiglu.du');
  for (const out of [dg, du])
    for (const [what, t] of [
      ['dh', dh],
      ['g', g],
      ['u', u],
    ] as const)
      assertDistinct('swigluBackward', out, t, what);
  assertDistinct('swigluBackward', dg, du, 'du');
  const F = g.shape.at(-1) ?? 1;
  if (g.size === 0) return { dg, du };
  const kernel = gpu.kernel({ name: NAME, code: elementwiseWgsl, entryPoint: 'swiglu_bwd' });
  gpu.dispatch(
    kernel,
    [dh, g, u, dg, du, swigluParams(gpu, g.size / F, F, false)],
    gridFor(gpu, g.size),
    12 * g.size,
  );
  return { dg, du };
}

/** dgu [N, 2F] = [dg | du] per row for packed gu [N, 2F] and dh [N, F] (overwritten). */
export function swigluPackedBackward(gpu: Gpu, dh: Tensor, gu: Tensor, options: SwigluOptions = {}): Tensor {
  expectDType('swigluPackedBackward', 'dh', dh, 'f32');
  expectDType('swigluPackedBackward', 'gu', gu, 'f32');
  const twoF = gu.shape.at(-1) ?? 0;
  const F = twoF / 2;
  const N = gu.size / Math.max(twoF, 1);
  if (
    gu.shape.length < 2 ||
    twoF % 2 !== 0 ||
    dh.size !== N * F ||
    (dh.shape.at(-1) ?? 0) !== F ||
    dh.shape.length !== gu.shape.length
  ) {
    throw new Error(
      `swigluPackedBackward: need gu [N, 2F] and dh [N, F], got gu ${shapeOf(gu)} and dh ${shapeOf(dh)}`,
    );
  }
  const dgu = outputFor(gpu, 'swigluPackedBackward', options.out, gu.shape, options.label ?? 'swiglu.dgu');
  assertDistinct('swigluPackedBackward', dgu, dh, 'dh');
  assertDistinct('swigluPackedBackward', dgu, gu, 'gu');
  if (N * F === 0) return dgu;
  const kernel = gpu.kernel({ name: NAME, code: elementwiseWgsl, entryPoint: 'swiglu_bwd_packed' });
  gpu.dispatch(kernel, [dh, gu, dgu, swigluParams(gpu, N, F, true)], gridFor(gpu, N * F), 12 * N * F);
  return dgu;
}

// ---------------------------------------------------------------- add, axpy, scale

export interface AddOptions {
  /** y = a + alpha * b (default 1). */
  alpha?: number;
  out?: Tensor;
  label?: string;
}

/** y = a + alpha * b (residual add); a and b have the same shape; `out` must be a third tensor. */
export function add(gpu: Gpu, a: Tensor, b: Tensor, options: AddOptions = {}): Tensor {
  expectDType('add', 'a', a, 'f32');
  expectDType('add', 'b', b, 'f32');
  if (!sameShape(a, b)) throw new Error(`add: a ${shapeOf(a)} and b ${shapeOf(b)} must have the same shape`);
  const y = outputFor(gpu, 'add', options.out, a.shape, options.label ?? 'add.out');
  assertDistinct('add', y, a, 'a (use addInPlace)');
  assertDistinct('add', y, b, 'b (use addInPlace)');
  if (a.size === 0) return y;
  const kernel = gpu.kernel({ name: NAME, code: elementwiseWgsl, entryPoint: 'add' });
  const params = gpu.uniform('uf', [a.size, options.alpha ?? 1]);
  gpu.dispatch(kernel, [a, b, y, params], gridFor(gpu, a.size), 2 * a.size);
  return y;
}

/** y += alpha * x in place (residual accumulate, gradient accumulate); same shapes, distinct buffers. */
export function addInPlace(gpu: Gpu, y: Tensor, x: Tensor, alpha = 1): Tensor {
  expectDType('addInPlace', 'y', y, 'f32');
  expectDType('addInPlace', 'x', x, 'f32');
  if (y.size !== x.size || !sameShape(y, x)) {
    throw new Error(`addInPlace: y ${shapeOf(y)} and x ${shapeOf(x)} must have the same shape`);
  }
  assertDistinct('addInPlace', y, x, 'x (for y += alpha * y use scaleInPlace(y, 1 + alpha))');
  if (y.size === 0) return y;
  const kernel = gpu.kernel({ name: NAME, code: elementwiseWgsl, entryPoint: 'axpy' });
  gpu.dispatch(kernel, [y, x, gpu.uniform('uf', [y.size, alpha])], gridFor(gpu, y.size), 2 * y.size);
  return y;
}

/** y *= alpha in place. */
export function scaleInPlace(gpu: Gpu, y: Tensor, alpha: number): Tensor {
  expectDType('scaleInPlace', 'y', y, 'f32');
  if (y.size === 0) return y;
  const kernel = gpu.kernel({ name: NAME, code: elementwiseWgsl, entryPoint: 'scale' });
  gpu.dispatch(kernel, [y, gpu.uniform('uf', [y.size, alpha])], gridFor(gpu, y.size), y.size);
  return y;
}

// ---------------------------------------------------------------- bias

export interface BiasAddOptions {
  /** u32 [N] segment ids; rows with seg == 0 (padding) are set to exactly 0 instead of biased. */
  seg?: Tensor;
}

/** y[r, :] += b in place, y [.., C] (rows = y.size / C), b [C]. Returns y. */
export function biasAdd(gpu: Gpu, y: Tensor, b: Tensor, options: BiasAddOptions = {}): Tensor {
  expectDType('biasAdd', 'y', y, 'f32');
  expectDType('biasAdd', 'b', b, 'f32');
  const C = y.shape.at(-1) ?? 0;
  if (b.shape.length !== 1 || b.size !== C) {
    throw new Error(`biasAdd: b ${shapeOf(b)} must be [${C}] for y ${shapeOf(y)}`);
  }
  const rows = C === 0 ? 0 : y.size / C;
  checkSeg('biasAdd', options.seg, rows);
  assertDistinct('biasAdd', y, b, 'b');
  if (y.size === 0) return y;
  const kernel = gpu.kernel({ name: NAME, code: elementwiseWgsl, entryPoint: 'bias_add' });
  const params = gpu.uniform('uuu', [rows, C, options.seg ? 1 : 0]);
  gpu.dispatch(kernel, [y, b, options.seg ?? placeholderU32(gpu), params], gridFor(gpu, y.size), y.size);
  return y;
}

export interface BiasBackwardOptions {
  /** u32 [N]: rows with seg == 0 are skipped. Without it every row is summed. */
  seg?: Tensor;
  /** Write into this [C] tensor; with `accumulate`, add to its contents (micro-batches). */
  out?: Tensor;
  accumulate?: boolean;
  /**
   * Rows per partial sum. Rows <= rowsPerChunk: one pass (one invocation per column loops over
   * all rows). Otherwise two passes: partial sums per chunk, then their column sum. Default: 64 on
   * real GPUs (parallelism), 1024 on CPU adapters (fewer passes). Results are deterministic for a
   * given value.
   */
  rowsPerChunk?: number;
  label?: string;
}

export function defaultRowsPerChunk(gpu: Gpu): number {
  return gpu.report.kind === 'gpu' ? 64 : 1024;
}

/** db[C] = Σ_rows dy[r, :] (rows with seg == 0 skipped when seg is given). Deterministic. */
export function biasBackward(gpu: Gpu, dy: Tensor, options: BiasBackwardOptions = {}): Tensor {
  expectDType('biasBackward', 'dy', dy, 'f32');
  const C = dy.shape.at(-1) ?? 0;
  const rows = C === 0 ? 0 : dy.size / C;
  checkSeg('biasBackward', options.seg, rows);
  if (options.accumulate && !options.out)
    throw new Error('biasBackward: accumulate needs an existing `out` tensor');
  const db = outputFor(gpu, 'biasBackward', options.out, [C], options.label ?? 'bias.grad');
  assertDistinct('biasBackward', db, dy, 'dy');
  return columnSum(gpu, dy, rows, C, db, {
    seg: options.seg,
    accumulate: options.accumulate ?? false,
    rowsPerChunk: options.rowsPerChunk ?? defaultRowsPerChunk(gpu),
  });
}

/** dst[C] (+)= Σ_r src[r, :] over `rows` rows of a row-major [rows, C] tensor (seg-masked rows skipped). */
function columnSum(
  gpu: Gpu,
  src: Tensor,
  rows: number,
  C: number,
  dst: Tensor,
  o: { seg?: Tensor; accumulate: boolean; rowsPerChunk: number },
): Tensor {
  if (!Number.isInteger(o.rowsPerChunk) || o.rowsPerChunk < 1) {
    throw new Error(`biasBackward: rowsPerChunk must be a positive integer, got ${o.rowsPerChunk}`);
  }
  if (C === 0) return dst;
  if (rows === 0) {
    if (!o.accumulate) gpu.fill0(dst);
    return dst;
  }
  const kernel = gpu.kernel({ name: NAME, code: elementwiseWgsl, entryPoint: 'colsum' });
  const seg = o.seg ?? placeholderU32(gpu);
  const hasSeg = o.seg ? 1 : 0;
  if (rows <= o.rowsPerChunk) {
    const params = gpu.uniform('uuuuu', [rows, C, rows, hasSeg, o.accumulate ? 1 : 0]);
    gpu.dispatch(kernel, [src, seg, dst, params], gridFor(gpu, C), rows * C);
    return dst;
  }
  const chunks = Math.ceil(rows / o.rowsPerChunk);
  const partial = gpu.empty([chunks, C], 'f32', 'colsum.partial');
  gpu.dispatch(
    kernel,
    [src, seg, partial, gpu.uniform('uuuuu', [rows, C, o.rowsPerChunk, hasSeg, 0])],
    gridFor(gpu, chunks * C),
    rows * C,
  );
  gpu.dispatch(
    kernel,
    [partial, seg, dst, gpu.uniform('uuuuu', [chunks, C, chunks, 0, o.accumulate ? 1 : 0])],
    gridFor(gpu, C),
    chunks * C,
  );
  partial.release(); // safe with work in flight: pooled reuse is queue-ordered
  return dst;
}
