// Dispatch grids for the 1-D problems of the pointwise/row-wise kernels (elementwise, rmsnorm,
// rope, embedding). A dispatch dimension may not exceed maxComputeWorkgroupsPerDimension (65535),
// so a long 1-D problem is laid out as an [x, y] grid and the shader recovers the linear index as
//   wg = wid.y * num_workgroups.x + wid.x,   i = wg * WORKGROUP + lid.x
// and skips i >= count (the last row of the grid may be partly used).
// Also: the placeholder for optional bindings, and the argument checks the wrappers share.

import type { Gpu } from '../runtime.ts';
import type { Tensor } from '../tensor.ts';

/** Invocations per workgroup of the 1-D kernels (the shaders' @workgroup_size must match). */
export const WORKGROUP_1D = 64;

/** An [x, y] grid of at least `workgroups` workgroups, each dimension within the adapter limit. */
export function grid1d(gpu: Gpu, workgroups: number): [number, number] {
  if (workgroups <= 0) return [0, 1];
  const maxWg = gpu.limits.maxComputeWorkgroupsPerDimension;
  const y = Math.ceil(workgroups / maxWg);
  if (y > maxWg) throw new Error(`grid1d: ${workgroups} workgroups do not fit a ${maxWg}x${maxWg} grid`);
  return [Math.ceil(workgroups / y), y];
}

/** The grid for `count` invocations of WORKGROUP_1D each. */
export function gridFor(gpu: Gpu, count: number): [number, number] {
  return grid1d(gpu, Math.ceil(count / WORKGROUP_1D));
}

const placeholders = new WeakMap<Gpu, Tensor>();

/**
 * A tiny u32 tensor bound where an entry point declares an optional input (e.g. `seg`) that this
 * call does not use: pipelines use layout 'auto', so every declared binding must be bound; a
 * uniform flag tells the shader not to read it. One per Gpu, never released.
 */
export function placeholderU32(gpu: Gpu): Tensor {
  let t = placeholders.get(gpu);
  if (!t || t.released) {
    t = gpu.zeros([1], 'u32', 'placeholder.u32');
    placeholders.set(gpu, t);
  }
  return t;
}

// ---------------------------------------------------------------- argument checks shared by the wrappers

export function shapeOf(t: Tensor): string {
  return `[${t.shape.join(', ')}]`;
}

export function expectDType(op: string, what: string, t: Tensor, dtype: Tensor['dtype']): void {
  if (t.dtype !== dtype) throw new Error(`${op}: ${what} must be ${dtype}, got ${t.toString()}`);
}

export function sameShape(a: Tensor, b: Tensor): boolean {
  return a.shape.length === b.shape.length && a.shape.every((d, i) => d === b.shape[i]);
}

/** Returns `out` after checking it holds `shape`, or a fresh pooled tensor of that shape. */
export function outputFor(
  gpu: Gpu,
  op: string,
  out: Tensor | undefined,
  shape: readonly number[],
  label: string,
): Tensor {
  if (!out) return gpu.empty(shape, 'f32', label);
  expectDType(op, 'out', out, 'f32');
  const size = shape.reduce((x, y) => x * y, 1);
  if (out.size !== size) throw new Error(`${op}: out ${shapeOf(out)} does not hold [${shape.join(', ')}]`);
  return out;
}

export function assertDistinct(op: string, written: Tensor, read: Tensor, what: string): void {
  if (written.buffer === read.buffer) {
    throw new Error(
      `${op}: the output may not share a buffer with ${what} (WebGPU forbids a writable binding aliasing another binding)`,
    );
  }
}

export function checkSeg(op: string, seg: Tensor | undefined, rows: number): void {
  if (!seg) return;
  expectDType(op, 'seg', seg, 'u32');
  if (seg.size !== rows) throw new Error(`${op}: seg ${shapeOf(seg)} must have one entry per row (${rows})`);
}
