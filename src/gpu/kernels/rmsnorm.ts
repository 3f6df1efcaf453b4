// Thin wrapper over src/shaders/rmsnorm.wgsl: RMSNorm with a learned scale, forward and backward.
//
// Shapes: x [.., heads * dim] is normalised in groups of `dim` = w.size consecutive values, i.e.
// as rows = x.size / dim rows of length dim.
//   - the usual layer norm:         x [N, D],      w [D],  heads = 1 (default)  -> rows = N
//   - Qwen3 per-head q/k norm:      q [N, H * hd], w [hd], heads = H            -> rows = N * H
//     (the same kernel on the view [N*H, hd]: head h of token n is row n*H + h)
// `heads` must be given explicitly for the per-head use, so a wrong weight cannot silently turn a
// full-width norm into a per-head one.
//
//   rmsnorm(x, w, { eps }) -> { y [x.shape], rstd [rows] }        rstd is kept for the backward
//   rmsnormBackward(dy, x, w, rstd) -> { dx [x.shape], dw [dim] }
// dx may accumulate into an existing tensor (the residual stream's gradient: x is the residual
// input, so dL/dx = dL/dx(residual) + dL/dx(norm)); dw may accumulate over micro-batches.

import rmsnormWgsl from '../../shaders/rmsnorm.wgsl?raw';
import type { Gpu } from '../runtime.ts';
import type { Tensor } from '../tensor.ts';
import { defaultRowsPerChunk } from './elementwise.ts';
import { assertDistinct, expectDType, grid1d, gridFor, outputFor, sameShape, shapeOf } from './launch.ts';

const NAME = 'rmsnorm.wgsl';

/** 'row': one invocation per row, barrier-free (CPU adapters). 'wg': one workgroup per row (GPUs). */
export type RmsnormVariant = 'row' | 'wg';

export function defaultRmsnormVariant(gpu: Gpu): RmsnormVariant {
  return gpu.report.kind === 'gpu' ? 'wg' : 'row';
}

export interface RmsnormOptions {
  /** From the model config (rms_norm_eps, 1e-6 for Qwen2/Qwen3). Required. */
  eps: number;
  /** x's last dim = heads * w.size (per-head q/k norm); default 1. */
  heads?: number;
  out?: Tensor;
  /** Where to write rstd [rows] (default: a fresh tensor). */
  rstd?: Tensor;
  variant?: RmsnormVariant;
  label?: string;
}

function rowsOf(op: string, x: Tensor, w: Tensor, heads: number): { rows: number; dim: number } {
  expectDType(op, 'x', x, 'f32');
  expectDType(op, 'w', w, 'f32');
  if (!Number.isInteger(heads) || heads < 1)
    throw new Error(`${op}: heads must be a positive integer, got ${heads}`);
  const dim = w.size;
  const last = x.shape.at(-1) ?? 0;
  if (w.shape.length !== 1 || dim === 0 || last !== heads * dim) {
    throw new Error(
      `${op}: x ${shapeOf(x)} must end in heads * dim = ${heads} * ${dim} for w ${shapeOf(w)}` +
        (heads === 1 && dim > 0 && last % dim === 0 ? ` (per-head norm: pass heads = ${last / dim})` : ''),
    );
  }
  return { rows: x.size / dim, dim };
}

function checkRstd(op: string, rstd: Tensor, rows: number): void {
  expectDType(op, 'rstd', rstd, 'f32');
  if (rstd.size !== rows)
    throw new Error(`${op}: rstd ${shapeOf(rstd)} must hold one value per row (${rows})`);
}

function rowGrid(gpu: Gpu, variant: RmsnormVariant, rows: number): [number, number] {
  return variant === 'wg' ? grid1d(gpu, rows) : gridFor(gpu, rows);
}

/** y = x / sqrt(mean(x²) + eps) * w over groups of w.size values; also returns rstd [rows]. */
export function rmsnorm(
  gpu: Gpu,
  x: Tensor,
  w: Tensor,
  options: RmsnormOptions,
): { y: Tensor; rstd: Tensor } {
  const { eps, heads = 1 } = options;
  if (!(eps >= 0) || !Number.isFinite(eps))
    throw new Error(`rmsnorm: eps must be a finite number >= 0, got ${eps}`);
  const { rows, dim } = rowsOf('rmsnorm', x, w, heads);
  const y = outputFor(gpu, 'rmsnorm', options.out, x.shape, options.label ?? 'rmsnorm.y');
  const rstd = options.rstd ?? gpu.empty([rows], 'f32', 'rmsnorm.rstd');
  checkRstd('rmsnorm', rstd, rows);
  assertDistinct('rmsnorm', y, x, 'x');
  assertDistinct('rmsnorm', y, w, 'w');
  assertDistinct('rmsnorm', rstd, x, 'x');
  assertDistinct('rmsnorm', rstd, y, 'y');
  if (rows === 0) return { y, rstd };
  const variant = options.variant ?? defaultRmsnormVariant(gpu);
  const kernel = gpu.kernel({ name: NAME, code: rmsnormWgsl, entryPoint: `rmsnorm_fwd_${variant}` });
  const params = gpu.uniform('uufu', [rows, dim, eps, 0]);
  gpu.dispatch(kernel, [x, w, y, rstd, params], rowGrid(gpu, variant, rows), 4 * x.size);
  return { y, rstd };
}

export interface RmsnormBackwardOptions {
  heads?: number;
  /** Write dx here; with accumulateDx, add to its contents (residual-stream gradient). */
  dx?: Tensor;
  accumulateDx?: boolean;
  /** Write dw here; with accumulateDw, add to its contents (micro-batches). */
  dw?: Tensor;
  accumulateDw?: boolean;
  /** Rows per dw partial sum (see biasBackward); deterministic for a given value. */
  rowsPerChunk?: number;
  variant?: RmsnormVariant;
}

/** dx [x.shape] and dw [dim] from dy, the forward's x, w and rstd. */
export function rmsnormBackward(
  gpu: Gpu,
  dy: Tensor,
  x: Tensor,
  w: Tensor,
  rstd: Tensor,
  options: RmsnormBackwardOptions = {},
): { dx: Tensor; dw: Tensor } {
  const { heads = 1, accumulateDx = false, accumulateDw = false } = options;
  const { rows, dim } = rowsOf('rmsnormBackward', x, w, heads);
  expectDType('rmsnormBackward', 'dy', dy, 'f32');
  if (!sameShape(dy, x)) throw new Error(`rmsnormBackward: dy ${shapeOf(dy)} must match x ${shapeOf(x)}`);
  checkRstd('rmsnormBackward', rstd, rows);
  const rowsPerChunk = options.rowsPerChunk ?? defaultRowsPerChunk(gpu);
  if (!Number.isInteger(rowsPerChunk) || rowsPerChunk < 1) {
    throw new Error(`rmsnormBackward: rowsPerChunk must be a positive integer, got ${rowsPerChunk}`);
  }
  if (accumulateDx && !options.dx)
    throw new Error('rmsnormBackward: accumulateDx needs an existing `dx` tensor');
  if (accumulateDw && !options.dw)
    throw new Error('rmsnormBackward: accumulateDw needs an existing `dw` tensor');
  const dx = outputFor(gpu, 'rmsnormBackward', options.dx, x.shape, 'rmsnorm.dx');
  const dw = outputFor(gpu, 'rmsnormBackward', options.dw, [dim], 'rmsnorm.dw');
  for (const [what, t] of [
    ['dy', dy],
    ['x', x],
    ['w', w],
    ['rstd', rstd],
  ] as const) {
    assertDistinct('rmsnormBackward', dx, t, what);
    assertDistinct('rmsnormBackward', dw, t, what);
  }
  assertDistinct('rmsnormBackward', dw, dx, 'dx');
  if (rows === 0) {
    if (!accumulateDw) gpu.fill0(dw);
    return { dx, dw };
  }
  const variant = options.variant ?? defaultRmsnormVariant(gpu);
  const bwd = gpu.kernel({ name: NAME, code: rmsnormWgsl, entryPoint: `rmsnorm_bwd_${variant}` });
  gpu.dispatch(
    bwd,
    [dy, x, w, rstd, dx, gpu.uniform('uufu', [rows, dim, 0, accumulateDx ? 1 : 0])],
    rowGrid(gpu, variant, rows),
    6 * x.size,
  );

  const dwKernel = gpu.kernel({ name: NAME, code: rmsnormWgsl, entryPoint: 'rmsnorm_dw' });
  if (rows <= rowsPerChunk) {
    const params = gpu.uniform('uuuu', [rows, dim, rows, accumulateDw ? 1 : 0]);
    gpu.dispatch(dwKernel, [dy, x, rstd, dw, params], gridFor(gpu, dim), 3 * x.size);
    return { dx, dw };
  }
  const chunks = Math.ceil(rows / rowsPerChunk);
  const partial = gpu.empty([chunks, dim], 'f32', 'rmsnorm.dw.partial');
  gpu.dispatch(
    dwKernel,
    [dy, x, rstd, partial, gpu.uniform('uuuu', [rows, dim, rowsPerChunk, 0])],
    gridFor(gpu, chunks * dim),
    3 * x.size,
  );
  const reduce = gpu.kernel({ name: NAME, code: rmsnormWgsl, entryPoint: 'rmsnorm_dw_reduce' });
  gpu.dispatch(
    reduce,
    [partial, dw, gpu.uniform('uuuu', [chunks, dim, chunks, accumulateDw ? 1 : 0])],
    gridFor(gpu, dim),
    chunks * dim,
  );
  partial.release(); // pooled reuse is queue-ordered after these dispatches
  return { dx, dw };
}
