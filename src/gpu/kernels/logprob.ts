// LM head fused with the loss (src/shaders/logprob.wgsl + matmul.wgsl): per-token log-probabilities
// of given targets, the entropy of each next-token distribution, their backward, and the
// supervised cross-entropy built on them. The vocabulary is walked in chunks of C rows of W, so
// only [N, C] logits exist at a time; running statistics live in a [N, 4] buffer.
//
//   h: [.., H] final-normed hidden states (leading dims flattened to N rows)
//   W: [V, H]  the LM head, or the tied embedding (HF layout); may exceed one storage binding
//   targets: u32 [N]; mask (optional): u32 (nonzero = active) or f32 weights [N]
//
// W may be f16 or bf16 (a frozen head: half.ts; matmul widens it to f32), and then has no dW.
//
// Memory per call: logits [N, C] + stats [N, 4] + outputs [N]·3; backward adds nothing beyond
// dh and dW. Cost: forward one N·C·H matmul per chunk; backward three (recomputed logits, dh, dW).

import logprobWgsl from '../../shaders/logprob.wgsl?raw';
import { formatBytes, GpuLimitError } from '../errors.ts';
import type { Gpu } from '../runtime.ts';
import type { Tensor } from '../tensor.ts';
import { isWeightDType, weightBytes } from './half.ts';
import { effectiveBindingLimit, grid64, matmulViews, rowBlock, rowQuantum } from './linear.ts';
import type { MatmulVariant } from './matmul.ts';

export type LogprobFoldVariant = 'rows' | 'workgroup';

/** One invocation per row (no barriers) on CPU adapters; a workgroup per row on real GPUs. */
export function defaultLogprobVariant(gpu: Gpu): LogprobFoldVariant {
  return gpu.report.kind === 'gpu' ? 'workgroup' : 'rows';
}

/** Largest default chunk, and the memory budget for the [N, C] logits temporary. */
export const DEFAULT_VOCAB_CHUNK = 4096;
const LOGITS_BUDGET_BYTES = 64 * 1024 * 1024;
const NAN_BITS = 0x7fc00000;

export interface TokenLogprobOptions {
  /**
   * Vocabulary rows per chunk. Default: min(4096, V), lowered to fit the binding limit and a
   * 64 MiB logits temporary. Unless it covers all of V it must be a multiple of the alignment
   * quantum (256 / gcd(4H, 256) rows, so W's row blocks start on bindable offsets).
   */
  chunk?: number;
  /** Log-probs of softmax(logits / T). Default 1. */
  temperature?: number;
  /** u32 (nonzero = active) or f32 (nonzero weight = active) [N]. Inactive rows output 0. */
  mask?: Tensor | null;
  /** Plan chunks against this binding size instead of the adapter's (never above it). */
  maxBindingBytes?: number;
  variant?: LogprobFoldVariant;
  matmulVariant?: MatmulVariant;
}

export interface TokenLogprobResult {
  /** log softmax(h·Wᵀ / T)[target], [N] (h's leading dims). 0 on inactive rows. */
  logprob: Tensor;
  /** -Σ p log p of softmax(h·Wᵀ / T), [N]. 0 on inactive rows. */
  entropy: Tensor;
  /** log Σ exp(h·Wᵀ / T), [N], saved for the backward. 0 on inactive rows. */
  lse: Tensor;
  temperature: number;
  chunk: number;
  mask: Tensor | null;
  /** Releases logprob, entropy and lse. */
  release(): void;
}

interface HeadDims {
  N: number;
  H: number;
  V: number;
  /** Bytes per element of W (4, or 2 for a half-precision head). */
  wBytes: number;
  rowShape: number[];
}

function shapeStr(t: Tensor): string {
  return `[${t.shape.join(', ')}]`;
}

function headDims(
  fn: string,
  h: Tensor,
  w: Tensor,
  targets: Tensor,
  mask: Tensor | null | undefined,
): HeadDims {
  if (h.dtype !== 'f32' || !isWeightDType(w.dtype))
    throw new Error(`${fn}: h must be f32 and W f32, f16 or bf16, got h ${h.dtype}, W ${w.dtype}`);
  if (w.shape.length !== 2) throw new Error(`${fn}: W must be [V, H], got ${shapeStr(w)}`);
  const [V, H] = w.shape;
  if (h.shape.length < 1 || h.shape.at(-1) !== H) {
    throw new Error(`${fn}: h ${shapeStr(h)} must end in H = ${H} to match W ${shapeStr(w)}`);
  }
  if (V === 0) throw new Error(`${fn}: W ${shapeStr(w)} has an empty vocabulary`);
  const rowShape = h.shape.slice(0, -1);
  const N = rowShape.reduce((a, b) => a * b, 1);
  if (targets.dtype !== 'u32' || targets.size !== N) {
    throw new Error(
      `${fn}: targets ${shapeStr(targets)} (${targets.dtype}) must be u32 with ${N} elements for h ${shapeStr(h)}`,
    );
  }
  if (mask && ((mask.dtype !== 'u32' && mask.dtype !== 'f32') || mask.size !== N)) {
    throw new Error(
      `${fn}: mask ${shapeStr(mask)} (${mask.dtype}) must be u32 or f32 with ${N} elements for h ${shapeStr(h)}`,
    );
  }
  return { N, H, V, wBytes: isWeightDType(w.dtype) ? weightBytes(w.dtype) : 4, rowShape };
}

function checkRowVector(fn: string, name: string, t: Tensor | null | undefined, N: number): void {
  if (t && (t.dtype !== 'f32' || t.size !== N)) {
    throw new Error(`${fn}: ${name} ${shapeStr(t)} (${t.dtype}) must be f32 with ${N} elements`);
  }
}

/** The vocabulary chunk size (rows of W per step), validated against alignment and binding limits. */
export function planVocabChunk(
  gpu: Gpu,
  dims: { N: number; H: number; V: number; wBytes?: number },
  options: { chunk?: number; maxBindingBytes?: number } = {},
): number {
  const { N, H, V, wBytes = 4 } = dims;
  const limit = effectiveBindingLimit(gpu, options.maxBindingBytes);
  const q = rowQuantum(gpu, Math.max(H, 1) * wBytes);
  const rowLimit = (C: number) => C * H * wBytes <= limit && N * C * 4 <= limit;
  if (options.chunk !== undefined) {
    const C = options.chunk;
    if (!Number.isInteger(C) || C <= 0) throw new Error(`vocab chunk must be a positive integer, got ${C}`);
    const eff = Math.min(C, V);
    if (eff < V && C % q !== 0) {
      throw new Error(
        `vocab chunk ${C} must be a multiple of ${q} rows for H = ${H} (W's row blocks must start at ${gpu.limits.minStorageBufferOffsetAlignment}-byte offsets)`,
      );
    }
    if (!rowLimit(eff)) {
      throw new GpuLimitError(
        `vocab chunk ${eff}: W block ${formatBytes(eff * H * wBytes)} or logits [${N}, ${eff}] ${formatBytes(N * eff * 4)} exceed the ${formatBytes(limit)} binding limit`,
      );
    }
    return eff;
  }
  let C = Math.min(DEFAULT_VOCAB_CHUNK, V);
  const cap = Math.min(
    Math.floor(limit / Math.max(1, H * wBytes)),
    Math.floor(Math.min(limit, LOGITS_BUDGET_BYTES) / Math.max(1, N * 4)),
  );
  if (C > cap || C < V) C = Math.floor(Math.min(C, cap) / q) * q;
  if (C <= 0) {
    throw new GpuLimitError(
      `no vocab chunk fits: ${q} rows of W [${V}, ${H}] plus logits [${N}, ${q}] exceed the ${formatBytes(limit)} binding limit or the ${formatBytes(LOGITS_BUDGET_BYTES)} logits budget`,
    );
  }
  return Math.min(C, V);
}

function kernelFor(gpu: Gpu, entryPoint: string, constants: Record<string, number>) {
  return gpu.kernel({ name: 'logprob.wgsl', code: logprobWgsl, entryPoint, constants });
}

function maskConstants(mask: Tensor | null | undefined): Record<string, number> {
  return { HAS_MASK: mask ? 1 : 0, MASK_F32: mask?.dtype === 'f32' ? 1 : 0 };
}

function checkTemperature(T: number): number {
  if (!(T > 0) || !Number.isFinite(T))
    throw new Error(`temperature must be a positive finite number, got ${T}`);
  return T;
}

/**
 * Per-token log-probabilities of `targets` and entropies under softmax(h·Wᵀ / T), chunked over the
 * vocabulary. An active row whose target is >= V gets logprob NaN.
 */
export function tokenLogprob(
  gpu: Gpu,
  h: Tensor,
  w: Tensor,
  targets: Tensor,
  options: TokenLogprobOptions = {},
): TokenLogprobResult {
  const mask = options.mask ?? null;
  const { N, H, V, wBytes, rowShape } = headDims('tokenLogprob', h, w, targets, mask);
  const temperature = checkTemperature(options.temperature ?? 1);
  const chunk = planVocabChunk(gpu, { N, H, V, wBytes }, options);
  const variant = options.variant ?? defaultLogprobVariant(gpu);
  const logprob = gpu.empty(rowShape, 'f32', 'logprob.logprob');
  const entropy = gpu.empty(rowShape, 'f32', 'logprob.entropy');
  const lse = gpu.empty(rowShape, 'f32', 'logprob.lse');
  const result: TokenLogprobResult = {
    logprob,
    entropy,
    lse,
    temperature,
    chunk,
    mask,
    release() {
      logprob.release();
      entropy.release();
      lse.release();
    },
  };
  if (N === 0) return result;
  const consts = maskConstants(mask);
  const maskBind = mask ?? targets;
  const invT = 1 / temperature;
  const stats = gpu.empty([N, 4], 'f32', 'logprob.stats');
  const logits = gpu.empty([N, chunk], 'f32', 'logprob.logits');
  const fold = kernelFor(gpu, variant === 'workgroup' ? 'fold_wg' : 'fold_rows', consts);
  const foldGrid = variant === 'workgroup' ? grid64(gpu, N * 64) : grid64(gpu, N);
  for (let v0 = 0; v0 < V; v0 += chunk) {
    const Cc = Math.min(chunk, V - v0);
    matmulViews(gpu, h, rowBlock(w, v0, Cc, H), logits, {
      M: N,
      N: Cc,
      K: H,
      transB: true,
      variant: options.matmulVariant,
    });
    const params = gpu.uniform('uuuuuuff', [N, Cc, v0, v0 === 0 ? 1 : 0, V, NAN_BITS, invT, 1]);
    gpu.dispatch(fold, [logits, stats, targets, maskBind, params], foldGrid, 4 * N * Cc);
  }
  const params = gpu.uniform('uuuuuuff', [N, 0, 0, 0, V, NAN_BITS, invT, 1]);
  gpu.dispatch(
    kernelFor(gpu, 'finalize', consts),
    [stats, targets, maskBind, logprob, entropy, lse, params],
    grid64(gpu, N),
    N * 8,
  );
  stats.release();
  logits.release();
  return result;
}

export interface TokenLogprobBackwardOptions {
  /** dLoss/dlogprob [N] (f32). Rows with 0 in both gLogprob and gEntropy contribute nothing. */
  gLogprob?: Tensor | null;
  /** dLoss/dentropy [N] (f32). */
  gEntropy?: Tensor | null;
  /** Where dh goes ([.., H], like h). Allocated if absent. */
  dh?: Tensor;
  /** dh += … instead of dh = …. Requires `dh`. */
  accumulateDh?: boolean;
  /** Default true. */
  computeDh?: boolean;
  /** Where dW goes ([V, H]). Allocated if absent. For tied weights pass the embedding's gradient. */
  dW?: Tensor;
  /** dW += … (micro-batches, tied embedding). Requires `dW`. */
  accumulateDw?: boolean;
  /** Default true (false for a frozen head). */
  computeDw?: boolean;
  /** Chunk for the backward walk (default: the forward's, fwd.chunk). */
  chunk?: number;
  maxBindingBytes?: number;
  matmulVariant?: MatmulVariant;
}

export interface TokenLogprobGrads {
  dh: Tensor | null;
  dW: Tensor | null;
}

/**
 * Backward of tokenLogprob: dh and dW for the loss whose gradients w.r.t. logprob and entropy are
 * gLogprob and gEntropy. Uses fwd's lse, entropy, temperature and mask; recomputes each chunk's
 * logits.
 */
export function tokenLogprobBackward(
  gpu: Gpu,
  h: Tensor,
  w: Tensor,
  targets: Tensor,
  fwd: TokenLogprobResult,
  options: TokenLogprobBackwardOptions = {},
): TokenLogprobGrads {
  const fn = 'tokenLogprobBackward';
  const mask = fwd.mask;
  const { N, H, V, wBytes } = headDims(fn, h, w, targets, mask);
  const { accumulateDh = false, accumulateDw = false, computeDh = true, computeDw = true } = options;
  if (computeDw && w.dtype !== 'f32')
    throw new Error(`${fn}: W ${shapeStr(w)} is ${w.dtype} (a frozen head): pass computeDw: false`);
  const gLp = options.gLogprob ?? null;
  const gEnt = options.gEntropy ?? null;
  if (!gLp && !gEnt) throw new Error(`${fn}: give gLogprob and/or gEntropy`);
  checkRowVector(fn, 'gLogprob', gLp, N);
  checkRowVector(fn, 'gEntropy', gEnt, N);
  checkRowVector(fn, 'fwd.lse', fwd.lse, N);
  checkRowVector(fn, 'fwd.entropy', fwd.entropy, N);
  let dh: Tensor | null = null;
  if (computeDh) {
    dh = options.dh ?? null;
    if (dh) {
      if (dh.dtype !== 'f32' || dh.size !== N * H)
        throw new Error(`${fn}: dh ${shapeStr(dh)} does not hold h ${shapeStr(h)}`);
    } else {
      if (accumulateDh) throw new Error(`${fn}: accumulateDh needs an existing \`dh\` tensor`);
      dh = gpu.empty(h.shape, 'f32', 'logprob.dh');
    }
  }
  let dW: Tensor | null = null;
  if (computeDw) {
    dW = options.dW ?? null;
    if (dW) {
      if (dW.dtype !== 'f32' || dW.size !== V * H)
        throw new Error(`${fn}: dW ${shapeStr(dW)} does not hold W ${shapeStr(w)}`);
    } else {
      if (accumulateDw) throw new Error(`${fn}: accumulateDw needs an existing \`dW\` tensor`);
      dW = gpu.empty([V, H], 'f32', 'logprob.dW');
    }
  }
  if (N === 0) {
    if (dW && !accumulateDw) gpu.fill0(dW);
    return { dh, dW };
  }
  if (!dh && !dW) return { dh, dW };
  const chunk = planVocabChunk(
    gpu,
    { N, H, V, wBytes },
    { chunk: options.chunk ?? fwd.chunk, maxBindingBytes: options.maxBindingBytes },
  );
  const consts = { ...maskConstants(mask), HAS_GLP: gLp ? 1 : 0, HAS_GENT: gEnt ? 1 : 0 };
  const kernel = kernelFor(gpu, 'dlogits', consts);
  const invT = 1 / fwd.temperature;
  const mv = options.matmulVariant;
  const logits = gpu.empty([N, chunk], 'f32', 'logprob.dlogits');
  for (let v0 = 0; v0 < V; v0 += chunk) {
    const Cc = Math.min(chunk, V - v0);
    const wBlk = rowBlock(w, v0, Cc, H);
    matmulViews(gpu, h, wBlk, logits, { M: N, N: Cc, K: H, transB: true, variant: mv });
    const params = gpu.uniform('uuuuuuff', [N, Cc, v0, 0, V, NAN_BITS, invT, 1]);
    gpu.dispatch(
      kernel,
      [logits, targets, mask ?? targets, fwd.lse, fwd.entropy, gLp ?? fwd.lse, gEnt ?? fwd.lse, params],
      grid64(gpu, N * Cc),
      8 * N * Cc,
    );
    // dh accumulates over chunks (the vocabulary is its K dimension); dW's row blocks are disjoint.
    if (dh)
      matmulViews(gpu, logits, wBlk, dh, {
        M: N,
        N: H,
        K: Cc,
        accumulate: accumulateDh || v0 > 0,
        variant: mv,
      });
    if (dW) {
      matmulViews(gpu, logits, h, rowBlock(dW, v0, Cc, H), {
        M: Cc,
        N: H,
        K: N,
        transA: true,
        accumulate: accumulateDw,
        variant: mv,
      });
    }
  }
  logits.release();
  return { dh, dW };
}

// ---------------------------------------------------------------- cross-entropy

export interface CrossEntropyResult {
  /** -Σ w·logprob / Σ w over rows, shape [1] (0 when Σ w = 0). */
  loss: Tensor;
  /** Σ w, shape [1]. */
  weightSum: Tensor;
  /** The per-token forward (logprob, entropy, lse), kept for the backward. */
  fwd: TokenLogprobResult;
  weights: Tensor;
  release(): void;
}

/**
 * Supervised next-token cross-entropy: loss = -mean over weighted tokens of logprob(target).
 * `weights` is u32 (nonzero = 1, e.g. a loss mask or segment ids) or f32 per-token weights [N].
 */
export function crossEntropy(
  gpu: Gpu,
  h: Tensor,
  w: Tensor,
  targets: Tensor,
  weights: Tensor,
  options: Omit<TokenLogprobOptions, 'mask'> = {},
): CrossEntropyResult {
  const fwd = tokenLogprob(gpu, h, w, targets, { ...options, mask: weights });
  const N = fwd.logprob.size;
  const loss = gpu.empty([1], 'f32', 'ce.loss');
  const weightSum = gpu.empty([1], 'f32', 'ce.weightSum');
  const params = gpu.uniform('uuuuuuff', [N, 0, 0, 0, 0, 0, 1, 1]);
  gpu.dispatch(
    kernelFor(gpu, 'ce_loss', { MASK_F32: weights.dtype === 'f32' ? 1 : 0 }),
    [fwd.logprob, weights, loss, weightSum, params],
    [1],
    N * 4,
  );
  return {
    loss,
    weightSum,
    fwd,
    weights,
    release() {
      loss.release();
      weightSum.release();
      fwd.release();
    },
  };
}

export interface CrossEntropyBackwardOptions
  extends Omit<TokenLogprobBackwardOptions, 'gLogprob' | 'gEntropy'> {
  /** dLoss_total/dloss (default 1). */
  scale?: number;
}

/** dh and dW of `scale · ce.loss`. */
export function crossEntropyBackward(
  gpu: Gpu,
  h: Tensor,
  w: Tensor,
  targets: Tensor,
  ce: CrossEntropyResult,
  options: CrossEntropyBackwardOptions = {},
): TokenLogprobGrads {
  const N = ce.fwd.logprob.size;
  const scale = options.scale ?? 1;
  if (!Number.isFinite(scale)) throw new Error(`crossEntropyBackward: scale must be finite, got ${scale}`);
  const gLp = gpu.empty([N], 'f32', 'ce.gLogprob');
  const params = gpu.uniform('uuuuuuff', [N, 0, 0, 0, 0, 0, 1, scale]);
  gpu.dispatch(
    kernelFor(gpu, 'ce_grad', { MASK_F32: ce.weights.dtype === 'f32' ? 1 : 0 }),
    [ce.weights, ce.weightSum, gLp, params],
    grid64(gpu, N),
    N,
  );
  const grads = tokenLogprobBackward(gpu, h, w, targets, ce.fwd, {
    ...options,
    gLogprob: gLp,
    gEntropy: null,
  });
  gLp.release();
  return grads;
}
