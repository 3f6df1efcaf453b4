// Thin wrapper over src/shaders/attention.wgsl: causal grouped-query self-attention (Qwen2/Qwen3),
// forward, backward, and KV-cache decoding. Shape checks, output allocation, dispatch.
//
// Shapes (N = batch * T tokens, row-major; RoPE already applied to q and k):
//   q [N, nHeads*headDim], k/v [N, nKvHeads*headDim], seg [N] u32 (0 = padding)
//   o [N, nHeads*headDim], lse [N, nHeads]
// Query i attends key j iff same batch row, j <= i and seg[j] == seg[i] != 0 (causal, left/right
// padding and packed sequences in one rule). Padding queries output exactly 0. The training kernels
// loop over each token's segment span only (Segments: uploadSegments, which the model calls once per
// batch; a bare seg tensor means whole rows), so the sequences packed into one row cost what they
// would cost in rows of their own.
//
// Memory: O(N·nH·hd) (q, k, v, o, gradients) plus O(N·nH) (lse, and D during the backward); nothing
// grows as heads × T² × batch. The forward is an online softmax; the backward recomputes the
// probabilities from q, k and lse in two passes: dQ (+ D = Σ dO·O) per query row, then dK/dV: per
// key row summing the nHeads/nKvHeads query heads of each kv head inside the kernel ('rows', CPU
// adapters), or per (key, query head, query chunk) into partials summed by a second dispatch
// ('chunks', real GPUs: see DkvVariant). Both in a fixed order, no atomics.
//
// KV-cache decoding: createKvCache allocates k/v [B, maxLen, nKv*hd] and seg [B, maxLen];
// kvCacheAppend writes new tokens at the cache slots kvSlots gives: a ragged block packed row after
// row (each row its own count, none for a finished row: no work for padding), or a uniform block
// of Tq per row at slots rowLen[b]-Tq .. rowLen[b]-1 (kvRowLengths; a right-padded row's next token
// then overwrites its first padding slot). attentionDecode attends those queries to the slots
// before them with the same masking rule, which equals full attention over the cache contents.
// Positions (for RoPE) are the caller's business: the kernel only uses slots.

import attentionWgsl from '../../shaders/attention.wgsl?raw';
import type { Gpu, Kernel } from '../runtime.ts';
import { Tensor } from '../tensor.ts';
import {
  attentionBlock,
  type BlockedEntry,
  blockedAttentionWgsl,
  decodeQueryBlock,
} from './attention-blocked.ts';

/** Largest head dimension the kernels hold in registers (WGSL MAX_HD). */
export const ATTENTION_MAX_HEAD_DIM = 128;
const WG = 64; // workgroup size of every entry point

export interface AttentionDims {
  /** Batch rows B; N = seg.size tokens split into B rows of T = N / B. */
  batch: number;
  nHeads: number;
  nKvHeads: number;
  headDim: number;
  /** Softmax scale; default 1/sqrt(headDim). */
  scale?: number;
}

export interface AttentionForwardOptions extends AttentionDims {
  out?: Tensor;
  lse?: Tensor;
  /** Queries per invocation of the blocked CPU kernel; 1 = the generic loops. Default: attentionBlocks. */
  block?: number;
}

export interface AttentionBackwardOptions extends AttentionDims {
  dq?: Tensor;
  dk?: Tensor;
  dv?: Tensor;
  /** How dK/dV are computed: see defaultDkvVariant. */
  dkvVariant?: DkvVariant;
  /** 'chunks' only: queries per chunk (default from dkvChunking). */
  dkvChunk?: number;
  /** Queries per invocation of the blocked dQ kernel; 1 = the generic loops. Default: attentionBlocks. */
  dqBlock?: number;
  /** 'rows' only: keys per invocation of the blocked dK/dV kernel; 1 = the generic loops. */
  dkvBlock?: number;
}

/** Items per invocation of each attention kernel; 1 everywhere means the generic loops. */
export interface AttentionBlocks {
  fwd: number;
  dq: number;
  dkv: number;
}

/**
 * The blocks the kernels use by default: on CPU adapters the blocked, unrolled kernels of
 * attention-blocked.ts, sized per head dimension; on real GPUs the generic loops (1).
 */
export function attentionBlocks(gpu: Gpu, headDim: number): AttentionBlocks {
  if (gpu.report.kind === 'gpu') return { fwd: 1, dq: 1, dkv: 1 };
  const block = attentionBlock(headDim);
  return { fwd: block, dq: block, dkv: block };
}

/**
 * 'rows': one invocation per (key, kv head) loops over every later query of the group's heads: the
 * CPU adapters' choice (few, long invocations). 'chunks': one invocation per (key, query head, query
 * chunk) writes partials that a second dispatch sums: many short invocations, what a real GPU needs
 * (an H100 has room for 270k resident invocations; 'rows' gives one 512-token sequence 1,024).
 */
export type DkvVariant = 'rows' | 'chunks';

/** Bytes one partial buffer of the 'chunks' variant may take before the chunks grow longer. */
export const DKV_PARTIAL_BUDGET = 256 * 2 ** 20;

export function defaultDkvVariant(gpu: Gpu): DkvVariant {
  return gpu.report.kind === 'gpu' ? 'chunks' : 'rows';
}

/**
 * Query chunk length for the 'chunks' variant: at least 64 queries, at most 16 chunks per sequence,
 * longer chunks while a partial buffer [nC, N, nH*hd] f32 would exceed DKV_PARTIAL_BUDGET. Null
 * when even one chunk exceeds it (the caller then uses 'rows').
 */
export function dkvChunking(T: number, N: number, nHeads: number, headDim: number): number | null {
  let chunk = Math.max(64, Math.ceil(T / 16));
  const bytes = (c: number) => Math.ceil(T / c) * N * nHeads * headDim * 4;
  while (bytes(chunk) > DKV_PARTIAL_BUDGET && chunk < T) chunk = Math.min(T, chunk * 2);
  return bytes(chunk) > DKV_PARTIAL_BUDGET ? null : chunk;
}

function shapeOf(t: Tensor): string {
  return `[${t.shape.join(', ')}]`;
}

function checkHeads(fn: string, nHeads: number, nKvHeads: number, headDim: number): void {
  for (const [name, x] of [
    ['nHeads', nHeads],
    ['nKvHeads', nKvHeads],
    ['headDim', headDim],
  ] as const) {
    if (!Number.isInteger(x) || x < 1) throw new Error(`${fn}: ${name} must be a positive integer, got ${x}`);
  }
  if (nHeads % nKvHeads !== 0) {
    throw new Error(`${fn}: nHeads (${nHeads}) must be a multiple of nKvHeads (${nKvHeads})`);
  }
  if (headDim > ATTENTION_MAX_HEAD_DIM || headDim % 4 !== 0) {
    throw new Error(
      `${fn}: headDim ${headDim} is not supported: the kernels need a multiple of 4 up to ${ATTENTION_MAX_HEAD_DIM}`,
    );
  }
}

/** Checks a [rows, width] activation (any leading shape whose last dim is `width`). */
function checkMatrix(fn: string, name: string, t: Tensor, rows: number, width: number, what: string): void {
  if (t.dtype !== 'f32') throw new Error(`${fn}: ${name} must be f32, got ${t.dtype}`);
  if (t.size !== rows * width || t.shape.at(-1) !== width) {
    throw new Error(`${fn}: ${name} is ${shapeOf(t)}, expected [${rows}, ${width}] (${what})`);
  }
}

function checkSeg(fn: string, seg: Tensor, batch: number): { N: number; T: number } {
  if (seg.dtype !== 'u32') throw new Error(`${fn}: seg must be u32 segment ids, got ${seg.dtype}`);
  if (!Number.isInteger(batch) || batch < 1) throw new Error(`${fn}: batch must be a positive integer`);
  const N = seg.size;
  if (N % batch !== 0)
    throw new Error(`${fn}: seg ${shapeOf(seg)} has ${N} tokens, not a multiple of batch ${batch}`);
  return { N, T: N / batch };
}

/**
 * A batch's segments as the training kernels read them: the ids [N], and per token the slots
 * [first, end) of its row that hold its segment id ([N] vec2 u32; its own slot, empty, for a padding
 * token): the kernels' loop bounds. `pairs` counts the (query, key) pairs the masking rule allows,
 * for the dispatch's cost estimate.
 */
export interface Segments {
  seg: Tensor;
  spans: Tensor;
  pairs: number;
}

/**
 * Each token's segment span (see Segments) of B rows of segment ids, and the allowed pairs. Exact
 * for any layout: a segment id that occurs in two places of a row spans from the first to the last.
 */
export function segmentSpans(seg: ArrayLike<number>, batch: number): { spans: Uint32Array; pairs: number } {
  const N = seg.length;
  if (!Number.isInteger(batch) || batch < 1 || N % batch !== 0)
    throw new Error(`segmentSpans: ${N} segment ids do not split into ${batch} rows`);
  const T = N / batch;
  const spans = new Uint32Array(2 * N);
  let pairs = 0;
  for (let b = 0; b < batch; b++) {
    const first = new Map<number, number>();
    const end = new Map<number, number>();
    const seen = new Map<number, number>(); // tokens of each segment so far: the keys token t sees
    for (let t = 0; t < T; t++) {
      const s = seg[b * T + t];
      if (s === 0) continue;
      if (!first.has(s)) first.set(s, t);
      end.set(s, t + 1);
      const n = (seen.get(s) ?? 0) + 1;
      seen.set(s, n);
      pairs += n;
    }
    for (let t = 0; t < T; t++) {
      const i = b * T + t;
      const s = seg[i];
      spans[2 * i] = s === 0 ? t : first.get(s)!;
      spans[2 * i + 1] = s === 0 ? t : end.get(s)!;
    }
  }
  return { spans, pairs };
}

/** Uploads a batch's segment ids with their spans (segmentSpans): what the model's layers share. */
export function uploadSegments(gpu: Gpu, seg: Uint32Array, batch: number, label = 'batch'): Segments {
  const { spans, pairs } = segmentSpans(seg, batch);
  return {
    seg: gpu.upload(seg, [seg.length], 'u32', `${label}.seg`),
    spans: gpu.upload(spans, [seg.length, 2], 'u32', `${label}.spans`),
    pairs,
  };
}

/**
 * The seg tensor, the spans and the allowed pairs of `segments`; for a bare seg tensor, whole-row
 * spans (uploaded here, released by the caller through `release`) and every causal pair.
 */
function spansOf(
  gpu: Gpu,
  fn: string,
  segments: Tensor | Segments,
  batch: number,
): { seg: Tensor; spans: Tensor; pairs: number; N: number; T: number; release(): void } {
  const seg = segments instanceof Tensor ? segments : segments.seg;
  const { N, T } = checkSeg(fn, seg, batch);
  if (!(segments instanceof Tensor)) {
    if (segments.spans.dtype !== 'u32' || segments.spans.size !== 2 * N)
      throw new Error(
        `${fn}: spans ${shapeOf(segments.spans)} ${segments.spans.dtype}, expected [${N}, 2] u32`,
      );
    return { seg, spans: segments.spans, pairs: segments.pairs, N, T, release() {} };
  }
  const whole = new Uint32Array(2 * Math.max(N, 1));
  for (let i = 0; i < N; i++) whole[2 * i + 1] = T;
  const spans = gpu.upload(whole, [whole.length / 2, 2], 'u32', 'attention.spans');
  return { seg, spans, pairs: (batch * T * (T + 1)) / 2, N, T, release: () => spans.release() };
}

function output(gpu: Gpu, given: Tensor | undefined, fn: string, name: string, shape: number[]): Tensor {
  if (!given) return gpu.empty(shape, 'f32', `attention.${name}`);
  const want = shape.reduce((a, b) => a * b, 1);
  if (given.dtype !== 'f32' || given.size !== want) {
    throw new Error(`${fn}: ${name} is ${shapeOf(given)} ${given.dtype}, expected [${shape.join(', ')}] f32`);
  }
  return given;
}

/** One pipeline per entry point serves every head size (hd is a uniform, see the .wgsl header). */
function kernel(gpu: Gpu, entryPoint: string): Kernel {
  return gpu.kernel({ name: 'attention.wgsl', code: attentionWgsl, entryPoint });
}

/**
 * A blocked kernel: one pipeline per (entry point, head size, block, and for decoding the query heads
 * per kv head), generated on first use.
 */
function blockedKernel(
  gpu: Gpu,
  entryPoint: BlockedEntry,
  headDim: number,
  block: number,
  group = 1,
): Kernel {
  return gpu.kernel({
    name: `attention-blocked(hd ${headDim}, block ${block}${group > 1 ? ` × ${group} heads` : ''})`,
    code: blockedAttentionWgsl(entryPoint, headDim / 4, block, group),
    entryPoint,
  });
}

function checkBlock(fn: string, name: string, block: number): number {
  if (!Number.isInteger(block) || block < 1 || block > 16)
    throw new Error(`${fn}: ${name} must be an integer from 1 to 16, got ${block}`);
  return block;
}

/** Workgroups of blocked invocations: ceil(T / block) blocks per batch row, y given. */
function blockGrid(gpu: Gpu, batch: number, T: number, block: number, y: number): [number, number, number] {
  return rowGrid(gpu, batch * Math.ceil(T / block), y);
}

/** Workgroups covering `rows` rows of 64 on x (split over z past the per-dimension limit), y given. */
function rowGrid(gpu: Gpu, rows: number, y: number): [number, number, number] {
  const groups = Math.ceil(rows / WG);
  const maxWg = gpu.limits.maxComputeWorkgroupsPerDimension;
  const z = Math.ceil(groups / maxWg);
  if (z > maxWg || y > maxWg)
    throw new Error(`attention: ${rows} rows × ${y} heads is too large to dispatch`);
  return [Math.ceil(groups / z), y, z];
}

function params(gpu: Gpu, nQ: number, Tq: number, S: number, d: AttentionDims, chunk = 0): GPUBuffer {
  const scale = d.scale ?? 1 / Math.sqrt(d.headDim);
  if (!Number.isFinite(scale)) throw new Error(`attention: scale must be finite, got ${scale}`);
  return gpu.uniform('uuuuufuu', [nQ, Tq, S, d.nHeads, d.nKvHeads, scale, d.headDim / 4, chunk]);
}

/** Multiply-adds of the score and value products over all allowed (query, key, head) triples, ×2. */
function causalFlops(pairs: number, nHeads: number, headDim: number, perPair: number): number {
  return pairs * nHeads * headDim * 2 * perPair;
}

/**
 * Forward attention. Returns o [N, nHeads*headDim] and lse [N, nHeads] (the per-(query, head)
 * logsumexp of the scaled scores, needed by attentionBackward; 0 at padding queries).
 */
export function attentionForward(
  gpu: Gpu,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  segments: Tensor | Segments,
  options: AttentionForwardOptions,
): { o: Tensor; lse: Tensor } {
  const fn = 'attentionForward';
  const { batch, nHeads, nKvHeads, headDim } = options;
  checkHeads(fn, nHeads, nKvHeads, headDim);
  const { seg, spans, pairs, N, T, release } = spansOf(gpu, fn, segments, batch);
  checkMatrix(fn, 'q', q, N, nHeads * headDim, 'tokens × nHeads*headDim');
  checkMatrix(fn, 'k', k, N, nKvHeads * headDim, 'tokens × nKvHeads*headDim');
  checkMatrix(fn, 'v', v, N, nKvHeads * headDim, 'tokens × nKvHeads*headDim');
  const o = output(gpu, options.out, fn, 'out', [N, nHeads * headDim]);
  const lse = output(gpu, options.lse, fn, 'lse', [N, nHeads]);
  if (N === 0) {
    release();
    return { o, lse };
  }
  const block = checkBlock(fn, 'block', options.block ?? attentionBlocks(gpu, headDim).fwd);
  const none = undefined;
  gpu.dispatch(
    block > 1 ? blockedKernel(gpu, 'attn_fwd_blocked', headDim, block) : kernel(gpu, 'attn_fwd'),
    [q, k, v, seg, o, lse, params(gpu, N, T, T, options), none, none, none, none, none, spans],
    block > 1 ? blockGrid(gpu, batch, T, block, nHeads) : rowGrid(gpu, N, nHeads),
    causalFlops(pairs, nHeads, headDim, 2),
  );
  release(); // safe: pooled reuse is ordered after the recorded dispatch
  return { o, lse };
}

/**
 * Backward of attentionForward: gradients of sum(o * dO) with respect to q, k and v. Needs the
 * forward's o and lse. Padding rows get exactly 0 gradients. Temporary memory: D [N, nHeads].
 */
export function attentionBackward(
  gpu: Gpu,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  segments: Tensor | Segments,
  o: Tensor,
  lse: Tensor,
  dO: Tensor,
  options: AttentionBackwardOptions,
): { dq: Tensor; dk: Tensor; dv: Tensor } {
  const fn = 'attentionBackward';
  const { batch, nHeads, nKvHeads, headDim } = options;
  checkHeads(fn, nHeads, nKvHeads, headDim);
  const { seg, spans, pairs, N, T, release } = spansOf(gpu, fn, segments, batch);
  const qw = nHeads * headDim;
  const kw = nKvHeads * headDim;
  checkMatrix(fn, 'q', q, N, qw, 'tokens × nHeads*headDim');
  checkMatrix(fn, 'k', k, N, kw, 'tokens × nKvHeads*headDim');
  checkMatrix(fn, 'v', v, N, kw, 'tokens × nKvHeads*headDim');
  checkMatrix(fn, 'o', o, N, qw, 'the forward output');
  checkMatrix(fn, 'lse', lse, N, nHeads, "the forward's logsumexp");
  checkMatrix(fn, 'dO', dO, N, qw, 'gradient of the output');
  const dq = output(gpu, options.dq, fn, 'dq', [N, qw]);
  const dk = output(gpu, options.dk, fn, 'dk', [N, kw]);
  const dv = output(gpu, options.dv, fn, 'dv', [N, kw]);
  if (N === 0) {
    release();
    return { dq, dk, dv };
  }
  const D = gpu.empty([N, nHeads], 'f32', 'attention.D');
  const none = undefined;
  const u = params(gpu, N, T, T, options);
  const blocks = attentionBlocks(gpu, headDim);
  const dqBlock = checkBlock(fn, 'dqBlock', options.dqBlock ?? blocks.dq);
  gpu.dispatch(
    dqBlock > 1 ? blockedKernel(gpu, 'attn_bwd_dq_blocked', headDim, dqBlock) : kernel(gpu, 'attn_bwd_dq'),
    [q, k, v, seg, lse, dO, u, D, o, dq, none, none, spans],
    dqBlock > 1 ? blockGrid(gpu, batch, T, dqBlock, nHeads) : rowGrid(gpu, N, nHeads),
    causalFlops(pairs, nHeads, headDim, 3),
  );
  const variant = options.dkvVariant ?? defaultDkvVariant(gpu);
  const chunk = variant === 'chunks' ? (options.dkvChunk ?? dkvChunking(T, N, nHeads, headDim)) : null;
  if (chunk !== null) {
    if (!Number.isInteger(chunk) || chunk < 1) throw new Error(`${fn}: dkvChunk must be a positive integer`);
    const nC = Math.ceil(T / chunk);
    const uc = params(gpu, N, T, T, options, chunk);
    const pdk = gpu.empty([nC, N, qw], 'f32', 'attention.pdk');
    const pdv = gpu.empty([nC, N, qw], 'f32', 'attention.pdv');
    gpu.dispatch(
      kernel(gpu, 'attn_bwd_dkv_part'),
      [q, k, v, seg, lse, dO, uc, D, pdk, pdv, none, none, spans],
      rowGrid(gpu, N, nHeads * nC),
      causalFlops(pairs, nHeads, headDim, 4),
    );
    gpu.dispatch(
      kernel(gpu, 'attn_bwd_dkv_sum'),
      [none, none, none, none, none, none, uc, none, dk, dv, pdk, pdv],
      rowGrid(gpu, N * (headDim / 4), nKvHeads),
      2 * nC * N * qw,
    );
    pdk.release();
    pdv.release();
  } else {
    const dkvBlock = checkBlock(fn, 'dkvBlock', options.dkvBlock ?? blocks.dkv);
    gpu.dispatch(
      dkvBlock > 1
        ? blockedKernel(gpu, 'attn_bwd_dkv_blocked', headDim, dkvBlock)
        : kernel(gpu, 'attn_bwd_dkv'),
      [q, k, v, seg, lse, dO, u, D, dk, dv, none, none, spans],
      dkvBlock > 1 ? blockGrid(gpu, batch, T, dkvBlock, nKvHeads) : rowGrid(gpu, N, nKvHeads),
      causalFlops(pairs, nHeads, headDim, 4),
    );
  }
  D.release(); // safe: pooled reuse is ordered after the recorded dispatches
  release();
  return { dq, dk, dv };
}

// ------------------------------------------------------------------------------------ KV cache

export interface KvCache {
  /** [batch, maxLen, nKvHeads*headDim] */
  k: Tensor;
  /** [batch, maxLen, nKvHeads*headDim] */
  v: Tensor;
  /** [batch, maxLen] u32 segment id per slot, 0 = empty/padding. May be shared by every layer's cache. */
  seg: Tensor;
  batch: number;
  maxLen: number;
  nKvHeads: number;
  headDim: number;
}

export interface KvCacheDims {
  batch: number;
  maxLen: number;
  nKvHeads: number;
  headDim: number;
}

/** A zeroed cache (all slots empty). Pass `seg` to share one slot-id tensor between layers. */
export function createKvCache(gpu: Gpu, dims: KvCacheDims, seg?: Tensor): KvCache {
  const { batch, maxLen, nKvHeads, headDim } = dims;
  checkHeads('createKvCache', nKvHeads, nKvHeads, headDim);
  if (!Number.isInteger(batch) || batch < 1 || !Number.isInteger(maxLen) || maxLen < 1) {
    throw new Error(`createKvCache: batch (${batch}) and maxLen (${maxLen}) must be positive integers`);
  }
  if (seg && (seg.dtype !== 'u32' || seg.size !== batch * maxLen)) {
    throw new Error(
      `createKvCache: shared seg is ${shapeOf(seg)} ${seg.dtype}, expected [${batch}, ${maxLen}] u32`,
    );
  }
  const shape = [batch, maxLen, nKvHeads * headDim];
  return {
    k: gpu.zeros(shape, 'f32', 'kvcache.k'),
    v: gpu.zeros(shape, 'f32', 'kvcache.v'),
    seg: seg ?? gpu.zeros([batch, maxLen], 'u32', 'kvcache.seg'),
    ...dims,
  };
}

/**
 * The cache row (b * maxLen + slot) of every new token, as the [N] u32 tensor kvCacheAppend and
 * attentionDecode take, so one upload serves every layer of a decoding step. New tokens are packed
 * row after row: row b's count[b] tokens (0 for a row with nothing new) land at slots start[b] ..
 * start[b] + count[b] - 1. Validated here (start + count <= maxLen); the caller releases it.
 */
export function kvSlots(
  gpu: Gpu,
  cache: KvCache,
  start: ArrayLike<number>,
  count: ArrayLike<number>,
): Tensor {
  const { batch, maxLen } = cache;
  if (start.length !== batch || count.length !== batch) {
    throw new Error(
      `kvSlots: ${start.length} starts and ${count.length} counts for a cache of batch ${batch}`,
    );
  }
  let n = 0;
  for (let b = 0; b < batch; b++) {
    const s0 = start[b];
    const c = count[b];
    if (!Number.isInteger(s0) || !Number.isInteger(c) || s0 < 0 || c < 0 || s0 + c > maxLen) {
      throw new Error(
        `kvSlots: row ${b} adds ${c} tokens at slot ${s0}: must be integers >= 0 within the cache's maxLen ${maxLen}`,
      );
    }
    n += c;
  }
  const slots = new Uint32Array(n);
  let i = 0;
  for (let b = 0; b < batch; b++) for (let t = 0; t < count[b]; t++) slots[i++] = b * maxLen + start[b] + t;
  return gpu.upload(slots, [n], 'u32', 'kvcache.slots');
}

/**
 * kvSlots for a uniform block: the Tq newest tokens of each row, which then holds rowLen[b] tokens
 * (Tq <= rowLen[b] <= maxLen), at slots rowLen[b] - Tq .. rowLen[b] - 1.
 */
export function kvRowLengths(gpu: Gpu, cache: KvCache, rowLen: ArrayLike<number>, Tq: number): Tensor {
  if (rowLen.length !== cache.batch) {
    throw new Error(`kvRowLengths: ${rowLen.length} row lengths for a cache of batch ${cache.batch}`);
  }
  for (let b = 0; b < rowLen.length; b++) {
    const n = rowLen[b];
    if (!Number.isInteger(n) || n < Tq || n > cache.maxLen) {
      throw new Error(
        `kvRowLengths: rowLen[${b}] = ${n} must be an integer in [${Tq}, ${cache.maxLen}] (Tq = ${Tq} newest tokens, cache maxLen ${cache.maxLen})`,
      );
    }
  }
  return kvSlots(
    gpu,
    cache,
    Array.from(rowLen, (n) => n - Tq),
    new Array(cache.batch).fill(Tq),
  );
}

/**
 * The slots of N new tokens: the caller's tensor (from kvSlots or kvRowLengths), or a temporary one
 * for a uniform block from per-row lengths (Tq = N / batch).
 */
function slotsTensor(
  gpu: Gpu,
  fn: string,
  cache: KvCache,
  slots: Tensor | ArrayLike<number>,
  N: number,
): { t: Tensor; temp: boolean } {
  if (!(slots instanceof Tensor)) {
    if (N % cache.batch !== 0) {
      throw new Error(`${fn}: ${N} new tokens are not a uniform block over batch ${cache.batch}`);
    }
    return { t: kvRowLengths(gpu, cache, slots, N / cache.batch), temp: true };
  }
  if (slots.dtype !== 'u32' || slots.size !== N) {
    throw new Error(
      `${fn}: slots is ${shapeOf(slots)} ${slots.dtype}, expected [${N}] u32 (one per new token)`,
    );
  }
  return { t: slots, temp: false };
}

/**
 * Writes N new tokens into the cache: row i of kNew/vNew [N, nKv*hd] and segNew [N] goes to cache
 * row slots[i]. slots: a tensor from kvSlots (ragged) or kvRowLengths (uniform), or per-row lengths
 * after the append as a CPU array (a uniform block of N / batch tokens per row, validated here).
 * (Kernel guard: a slot outside the cache is skipped.)
 */
export function kvCacheAppend(
  gpu: Gpu,
  cache: KvCache,
  kNew: Tensor,
  vNew: Tensor,
  segNew: Tensor,
  slots: Tensor | ArrayLike<number>,
): void {
  const fn = 'kvCacheAppend';
  if (segNew.dtype !== 'u32') throw new Error(`${fn}: segNew must be u32 segment ids, got ${segNew.dtype}`);
  const N = segNew.size;
  const kw = cache.nKvHeads * cache.headDim;
  checkMatrix(fn, 'kNew', kNew, N, kw, 'new tokens × nKvHeads*headDim');
  checkMatrix(fn, 'vNew', vNew, N, kw, 'new tokens × nKvHeads*headDim');
  if (N === 0) return;
  const { t, temp } = slotsTensor(gpu, fn, cache, slots, N);
  const dims = {
    batch: cache.batch,
    nHeads: cache.nKvHeads,
    nKvHeads: cache.nKvHeads,
    headDim: cache.headDim,
  };
  const maxWg = gpu.limits.maxComputeWorkgroupsPerDimension;
  const z = Math.ceil(N / maxWg);
  gpu.dispatch(
    kernel(gpu, 'kv_append'),
    [kNew, vNew, segNew, cache.k, cache.v, cache.seg, params(gpu, N, 0, cache.maxLen, dims), t],
    [Math.ceil(kw / 4 / WG), Math.ceil(N / z), z],
    2 * N * kw,
  );
  if (temp) t.release();
}

export interface AttentionDecodeOptions {
  nHeads: number;
  scale?: number;
  out?: Tensor;
  lse?: Tensor;
  /**
   * The blocked kernel (attention-blocked.ts: one invocation per new token, or per block of them, and
   * kv head, with the kv head's query heads). Default: decodeBlocked(gpu, headDim, nHeads / nKvHeads).
   */
  blocked?: boolean;
  /** Blocks of consecutive new tokens of a row (kvQueryBlocks), for the blocked kernel; default 1 token. */
  queryBlocks?: QueryBlocks;
}

/** Blocks of up to `block` consecutive new tokens of one cache row: the first token of each. */
export interface QueryBlocks {
  starts: Tensor;
  block: number;
}

/** Whether KV-cache decoding uses the blocked kernel by default: CPU adapters, small enough groups. */
export function decodeBlocked(gpu: Gpu, headDim: number, group: number): boolean {
  return gpu.report.kind !== 'gpu' && decodeQueryBlock(headDim, group) >= 1;
}

/**
 * The blocks of an append whose rows add count[b] new tokens each (packed row after row, as
 * kvSlots): each row's tokens cut into blocks of `block`, the last one shorter. The caller releases
 * starts.
 */
export function kvQueryBlocks(gpu: Gpu, count: ArrayLike<number>, block: number): QueryBlocks {
  checkBlock('kvQueryBlocks', 'block', block);
  const starts: number[] = [];
  let i = 0;
  for (let b = 0; b < count.length; b++) {
    const c = count[b];
    if (!Number.isInteger(c) || c < 0)
      throw new Error(`kvQueryBlocks: count[${b}] = ${c} is not an integer >= 0`);
    for (let t = 0; t < c; t += block) starts.push(i + t);
    i += c;
  }
  return { starts: gpu.upload(Uint32Array.from(starts), [starts.length], 'u32', 'kvcache.blocks'), block };
}

/**
 * Attention of N new tokens (already appended with kvCacheAppend, same slots) to the cache.
 * q [N, nHeads*hd] → o [N, nHeads*hd], lse [N, nHeads]. The token at cache row slots[i] = b*maxLen
 * + s attends row b's slots <= s with its own segment id, so the result equals attentionForward
 * over the cache contents at those slots. slots: as kvCacheAppend's.
 */
export function attentionDecode(
  gpu: Gpu,
  q: Tensor,
  cache: KvCache,
  slots: Tensor | ArrayLike<number>,
  options: AttentionDecodeOptions,
): { o: Tensor; lse: Tensor } {
  const fn = 'attentionDecode';
  const { nHeads } = options;
  const { batch, nKvHeads, headDim, maxLen } = cache;
  checkHeads(fn, nHeads, nKvHeads, headDim);
  const qw = nHeads * headDim;
  if (q.size % qw !== 0) {
    throw new Error(`${fn}: q is ${shapeOf(q)}, expected [new tokens, ${qw}]`);
  }
  const N = q.size / qw;
  checkMatrix(fn, 'q', q, N, qw, 'new tokens × nHeads*headDim');
  const o = output(gpu, options.out, fn, 'out', [N, qw]);
  const lse = output(gpu, options.lse, fn, 'lse', [N, nHeads]);
  if (N === 0) return { o, lse };
  const { t, temp } = slotsTensor(gpu, fn, cache, slots, N);
  const dims = { batch, nHeads, nKvHeads, headDim, scale: options.scale };
  const u = params(gpu, N, 0, maxLen, dims);
  const group = nHeads / nKvHeads;
  const blocks = options.queryBlocks;
  if (blocks && (blocks.starts.dtype !== 'u32' || blocks.starts.size < 1 || blocks.starts.size > N)) {
    throw new Error(
      `${fn}: queryBlocks.starts is ${shapeOf(blocks.starts)} ${blocks.starts.dtype}, expected 1 to ${N} u32 block starts`,
    );
  }
  if (options.blocked ?? decodeBlocked(gpu, headDim, group)) {
    const block = blocks ? checkBlock(fn, 'queryBlocks.block', blocks.block) : 1;
    const withStarts = block > 1;
    gpu.dispatch(
      blockedKernel(gpu, 'attn_decode_blocked', headDim, block, group),
      [q, cache.k, cache.v, cache.seg, o, lse, u, t, withStarts ? blocks!.starts : undefined],
      rowGrid(gpu, withStarts ? blocks!.starts.size : N, nKvHeads),
      N * maxLen * nHeads * headDim * 4,
    );
  } else {
    gpu.dispatch(
      kernel(gpu, 'attn_decode'),
      [q, cache.k, cache.v, cache.seg, o, lse, u, t],
      rowGrid(gpu, N, nHeads),
      N * maxLen * nHeads * headDim * 4,
    );
  }
  if (temp) t.release();
  return { o, lse };
}
