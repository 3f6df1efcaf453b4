// Thin wrapper over src/shaders/embedding.wgsl: token embedding lookup and its deterministic,
// sparse backward.
//
//   embedding(table [V, D], ids u32 [..], { seg? }) -> out [.., D]
//       padding rows (seg == 0) are exactly 0; an out-of-range id gives a NaN row (see the shader)
//   embeddingGradPlan(gpu, ids: Uint32Array, vocab, { seg? }) -> EmbeddingGradPlan
//       CPU: sort the non-padding positions by (id, position), upload [uniqueIds | offsets |
//       positions] once; reusable (e.g. for several micro-steps over the same batch); release() it
//   embeddingBackward(dOut [N, D], dTable [V, D], plan | ids, { seg? }) -> dTable
//       dTable[id, :] += Σ dOut[n, :] over the plan's positions of id; untouched rows are neither
//       read nor written, so the caller zeroes dTable once per step (or a tied LM head writes it
//       first). Work O(N * D), never O(V * D); no float atomics; same result every run.
//
// Tables (and their gradients) over maxStorageBufferBindingSize are bound a row block at a time:
// chunks of R rows, R a multiple of the rows that make a block start on the adapter's 256-byte
// offset alignment. `maxChunkRows` lowers R (for tests of the chunked path).
// The forward's table may be f16 or bf16 (frozen weights, widened to f32 on load: half.ts).

import embeddingWgsl from '../../shaders/embedding.wgsl?raw';
import type { Gpu } from '../runtime.ts';
import type { Tensor, TensorView } from '../tensor.ts';
import { isWeightDType, weightBytes, weightShader } from './half.ts';
import { expectDType, gridFor, outputFor, placeholderU32, shapeOf } from './launch.ts';

const NAME = 'embedding.wgsl';

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/** Rows per bound block of a [V, D] table: within the binding limit, blocks offset-aligned. */
export function embeddingChunkRows(
  gpu: Gpu,
  D: number,
  maxChunkRows = Number.POSITIVE_INFINITY,
  elementBytes = 4,
): number {
  const rowBytes = D * elementBytes;
  const align = gpu.limits.minStorageBufferOffsetAlignment;
  const step = align / gcd(rowBytes, align); // rows per aligned block start
  const fit = Math.floor(gpu.limits.maxStorageBufferBindingSize / rowBytes);
  const rows = Math.floor(Math.min(fit, maxChunkRows) / step) * step;
  if (rows < 1) {
    throw new Error(
      `embedding: cannot bind a block of rows of D = ${D}: a block must hold a multiple of ${step} rows (256-byte offset alignment)${
        maxChunkRows < fit ? ` and maxChunkRows is ${maxChunkRows}` : ''
      }`,
    );
  }
  return rows;
}

/** [v0, v1) row ranges and the bindable block of `t` for each. One whole-tensor chunk if it fits. */
function chunksOf(gpu: Gpu, t: Tensor, V: number, D: number, maxChunkRows?: number) {
  const eb = isWeightDType(t.dtype) ? weightBytes(t.dtype) : 4;
  const rows =
    V * D * eb <= gpu.limits.maxStorageBufferBindingSize && maxChunkRows === undefined
      ? V
      : embeddingChunkRows(gpu, D, maxChunkRows, eb);
  const out: Array<{ v0: number; v1: number; binding: Tensor | TensorView }> = [];
  if (rows >= V) return [{ v0: 0, v1: V, binding: t }];
  for (let v0 = 0; v0 < V; v0 += rows) {
    const v1 = Math.min(V, v0 + rows);
    const offset = v0 * D * eb;
    const size = Math.min(Math.ceil(((v1 - v0) * D * eb) / 4) * 4, t.byteSize - offset);
    out.push({ v0, v1, binding: { tensor: t, offset, size } });
  }
  return out;
}

function tableShape(op: string, table: Tensor, what: string, halfOk = false): { V: number; D: number } {
  if (!halfOk || !isWeightDType(table.dtype)) expectDType(op, what, table, 'f32');
  if (table.shape.length !== 2 || table.shape[0] === 0 || table.shape[1] === 0) {
    throw new Error(`${op}: ${what} ${shapeOf(table)} must be [V, D]`);
  }
  return { V: table.shape[0], D: table.shape[1] };
}

export interface EmbeddingOptions {
  /** u32 segment ids (or a 1/0 mask), one per id; 0 marks padding, whose output row is 0. */
  seg?: Tensor;
  out?: Tensor;
  /** Bind the table in blocks of at most this many rows (rounded down to the alignment step). */
  maxChunkRows?: number;
  label?: string;
}

/** out[n, :] = table[ids[n], :] for ids of any shape; out is [...ids.shape, D]. */
export function embedding(gpu: Gpu, table: Tensor, ids: Tensor, options: EmbeddingOptions = {}): Tensor {
  const { V, D } = tableShape('embedding', table, 'table', true);
  expectDType('embedding', 'ids', ids, 'u32');
  const N = ids.size;
  if (options.seg) {
    expectDType('embedding', 'seg', options.seg, 'u32');
    if (options.seg.size !== N) {
      throw new Error(
        `embedding: seg ${shapeOf(options.seg)} must have one entry per id (ids ${shapeOf(ids)})`,
      );
    }
  }
  const out = outputFor(gpu, 'embedding', options.out, [...ids.shape, D], options.label ?? 'embedding.out');
  if (out.buffer === table.buffer || out.buffer === ids.buffer) {
    throw new Error('embedding: out may not share a buffer with the table or the ids');
  }
  if (N === 0) return out;
  const code = weightShader(
    gpu,
    embeddingWgsl,
    table.dtype as 'f32' | 'f16' | 'bf16',
    'f_table',
    'load_table',
  );
  const kernel = gpu.kernel({ name: NAME, code, entryPoint: 'embedding_fwd' });
  const seg = options.seg ?? placeholderU32(gpu);
  const chunks = chunksOf(gpu, table, V, D, options.maxChunkRows);
  for (const [c, { v0, v1, binding }] of chunks.entries()) {
    const params = gpu.uniform('uuuuuuuu', [
      N,
      D,
      v0,
      v1,
      V,
      options.seg ? 1 : 0,
      c === 0 ? 1 : 0,
      0x7fc00000,
    ]);
    gpu.dispatch(kernel, [ids, seg, binding, out, params], gridFor(gpu, N * D), N * D);
  }
  return out;
}

/** The sorted token positions of one batch, on the GPU, for embeddingBackward. */
export interface EmbeddingGradPlan {
  /** Number of ids the plan was built from (rows of dOut). */
  readonly tokens: number;
  readonly vocab: number;
  /** Sorted distinct non-padding ids. */
  readonly uniqueIds: Uint32Array;
  /** Non-padding positions in the plan. */
  readonly live: number;
  /** u32 [U + (U + 1) + live]: uniqueIds | offsets | positions. */
  readonly tensor: Tensor;
  release(): void;
}

export interface EmbeddingGradPlanOptions {
  /** Per-position segment ids or a 1/0 mask; positions with 0 are padding and get no gradient. */
  seg?: ArrayLike<number>;
}

/** Builds and uploads the backward's plan from CPU ids (throws on an out-of-range non-padding id). */
export function embeddingGradPlan(
  gpu: Gpu,
  ids: Uint32Array,
  vocab: number,
  options: EmbeddingGradPlanOptions = {},
): EmbeddingGradPlan {
  const { seg } = options;
  const N = ids.length;
  if (seg && seg.length !== N) {
    throw new Error(`embeddingGradPlan: seg has ${seg.length} entries for ${N} ids`);
  }
  const order: number[] = [];
  for (let n = 0; n < N; n++) {
    if (seg && seg[n] === 0) continue;
    if (ids[n] >= vocab) {
      throw new Error(
        `embeddingGradPlan: token id ${ids[n]} at position ${n} is outside the vocabulary (${vocab})`,
      );
    }
    order.push(n);
  }
  order.sort((a, b) => ids[a] - ids[b] || a - b); // by id, then position: a fixed summation order
  const M = order.length;
  const unique: number[] = [];
  const offsets: number[] = [];
  for (let k = 0; k < M; k++) {
    if (k === 0 || ids[order[k]] !== ids[order[k - 1]]) {
      unique.push(ids[order[k]]);
      offsets.push(k);
    }
  }
  offsets.push(M);
  const U = unique.length;
  const data = new Uint32Array(2 * U + 1 + M);
  data.set(unique, 0);
  data.set(offsets, U);
  data.set(order, 2 * U + 1);
  const tensor = gpu.upload(data, [Math.max(data.length, 1)], 'u32', 'embedding.plan');
  return {
    tokens: N,
    vocab,
    uniqueIds: Uint32Array.from(unique),
    live: M,
    tensor,
    release: () => tensor.release(),
  };
}

export interface EmbeddingBackwardOptions {
  /** With CPU ids: per-position seg ids or 1/0 mask (0 = padding, no gradient). */
  seg?: ArrayLike<number>;
  /** Bind dTable in blocks of at most this many rows (see embedding). */
  maxChunkRows?: number;
}

/** Lower bound: first index k with sorted[k] >= value. */
function lowerBound(sorted: Uint32Array, value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sorted[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * dTable[id, :] += Σ_{n: ids[n] = id, not padding} dOut[n, :]. `idsOrPlan` is the batch's CPU ids
 * (a plan is built, used and released) or a plan from embeddingGradPlan (kept; the caller releases
 * it). Returns dTable.
 */
export function embeddingBackward(
  gpu: Gpu,
  dOut: Tensor,
  dTable: Tensor,
  idsOrPlan: Uint32Array | EmbeddingGradPlan,
  options: EmbeddingBackwardOptions = {},
): Tensor {
  const { V, D } = tableShape('embeddingBackward', dTable, 'dTable');
  expectDType('embeddingBackward', 'dOut', dOut, 'f32');
  if ((dOut.shape.at(-1) ?? 0) !== D) {
    throw new Error(
      `embeddingBackward: dOut ${shapeOf(dOut)} must end in D = ${D} (dTable ${shapeOf(dTable)})`,
    );
  }
  const N = dOut.size / D;
  const own = idsOrPlan instanceof Uint32Array;
  if (!own && options.seg)
    throw new Error('embeddingBackward: seg goes to embeddingGradPlan when passing a plan');
  if (own && idsOrPlan.length !== N) {
    throw new Error(`embeddingBackward: ${idsOrPlan.length} ids for dOut ${shapeOf(dOut)} (${N} rows)`);
  }
  if (dOut.buffer === dTable.buffer)
    throw new Error('embeddingBackward: dOut and dTable must be different tensors');
  const plan = own ? embeddingGradPlan(gpu, idsOrPlan, V, { seg: options.seg }) : idsOrPlan;
  try {
    if (plan.tokens !== N) {
      throw new Error(
        `embeddingBackward: the plan was built for ${plan.tokens} ids, dOut ${shapeOf(dOut)} has ${N} rows`,
      );
    }
    if (plan.vocab !== V) {
      throw new Error(
        `embeddingBackward: the plan was built for vocab ${plan.vocab}, dTable ${shapeOf(dTable)}`,
      );
    }
    const U = plan.uniqueIds.length;
    if (U === 0) return dTable;
    const kernel = gpu.kernel({ name: NAME, code: embeddingWgsl, entryPoint: 'embedding_bwd' });
    for (const { v0, v1, binding } of chunksOf(gpu, dTable, V, D, options.maxChunkRows)) {
      const u0 = lowerBound(plan.uniqueIds, v0);
      const u1 = lowerBound(plan.uniqueIds, v1);
      if (u1 === u0) continue; // no token in this block: not even bound
      const params = gpu.uniform('uuuuuu', [D, u0, u1, v0, U, 2 * U + 1]);
      gpu.dispatch(kernel, [dOut, plan.tensor, binding, params], gridFor(gpu, (u1 - u0) * D), plan.live * D);
    }
    return dTable;
  } finally {
    if (own) plan.release(); // pooled reuse is queue-ordered after the dispatches above
  }
}
