// Thin wrappers over src/shaders/policy-loss.wgsl: the whole actor loss (PPO clip with dual clip, or
// GSPO, or CISPO; entropy bonus; KL loss) and the clipped value loss in one call each, returning the per-token
// gradients the model's backward consumes and a small stats tensor, so a trainer reads every
// metric of a step with one readback. The float64 CPU twin is src/rl/core-algos.ts.
//
// Shapes (B rows padded to T positions, N = B*T; any tensor shape holding N elements is accepted):
//   policyLoss: logprob, oldLogprob, advantages, mask [, entropy, refLogprob]: f32 [N]
//     → gLogprob f32 [B, T] = d loss / d logprob, gEntropy f32 [B, T] | null = d loss / d entropy,
//       stats f32 [POLICY_STAT.size]
//     loss = pg − entropyCoef·agg(entropy) + klCoef·agg(kl(logprob, refLogprob))   (verl's actor)
//   valueLoss: vpreds, oldValues, returns, mask: f32 [N]
//     → gValue f32 [B, T] = d loss / d vpreds, stats f32 [VALUE_STAT.size]
//     loss = 0.5·agg(max((v − R)², (clip(v, old ± clipRangeValue) − R)²))
//   Gradients are 0 at mask = 0 and are written, not accumulated.
//
// Aggregation modes and globals: see the header of policy-loss.wgsl. `globals` overrides the
// denominators (active tokens, non-empty rows, L) so that micro-batches of one step add up to the
// whole batch's loss and gradient; metrics (clipfrac, ppoKl, ...) are always this batch's masked means.
//
// Usage in a training step:
//   const { gLogprob, gEntropy, stats } = policyLoss(gpu, { logprob, oldLogprob, advantages, mask,
//     entropy, B, T, mode: 'token-mean', entropyCoef: 0.001 });
//   model.backward(fwd, gLogprob, gEntropy);
//   const s = await gpu.readF32(stats);   // s[POLICY_STAT.loss], s[POLICY_STAT.clipfrac], ...

import policyLossWgsl from '../../shaders/policy-loss.wgsl?raw';
import type { Gpu } from '../runtime.ts';
import type { Tensor } from '../tensor.ts';
import { KL_KIND_CODE, type KlKind } from './advantage.ts';
import { expectDType, gridFor, shapeOf } from './launch.ts';

const NAME = 'policy-loss.wgsl';

/**
 * The policy-gradient term (verl `policy_loss.loss_mode`): 'vanilla' PPO clip with dual clip;
 * 'gspo' one clipped ratio per row, exp(min(mean row log-ratio, 10)), always aggregated
 * seq-mean-token-mean (entropy and KL keep `mode`); 'cispo' −sg(clip(r))·A·logprob.
 */
export type PolicyLossMode = 'vanilla' | 'gspo' | 'cispo';
const POLICY_CODE: Record<PolicyLossMode, number> = { vanilla: 0, gspo: 1, cispo: 2 };

export type LossAggMode =
  | 'token-mean'
  | 'seq-mean-token-sum'
  | 'seq-mean-token-mean'
  | 'seq-mean-token-sum-norm';

const MODE_CODE: Record<LossAggMode, number> = {
  'token-mean': 0,
  'seq-mean-token-sum': 1,
  'seq-mean-token-mean': 2,
  'seq-mean-token-sum-norm': 3,
};

/** Denominators of the whole batch when this call sees one micro-batch of it. */
export interface LossGlobals {
  /** Active (mask = 1) tokens of the whole batch (token-mean). */
  tokens?: number;
  /** Non-empty rows of the whole batch (seq-mean-* modes). */
  rows?: number;
  /** L of seq-mean-token-sum-norm (default T). */
  maxLen?: number;
}

/** Slots of the actor stats tensor (f32). */
export const POLICY_STAT = {
  /** pg − entropyCoef·entropy + klCoef·kl */
  loss: 0,
  pgLoss: 1,
  /** agg(entropy) (0 without entropy) */
  entropy: 2,
  /** agg(kl) (0 without refLogprob) */
  klLoss: 3,
  clipfrac: 4,
  /** dual-clip fraction: A < 0 and max(L1, L2) > −A·c */
  clipfracLower: 5,
  /** masked mean of oldLogprob − logprob (clamped to ±20) */
  ppoKl: 6,
  activeTokens: 7,
  activeRows: 8,
  tokensDenominator: 9,
  rowsDenominator: 10,
  size: 11,
} as const;

/** Slots of the critic stats tensor (f32). */
export const VALUE_STAT = {
  loss: 0,
  clipfrac: 1,
  vpredMean: 2,
  activeTokens: 3,
  activeRows: 4,
  tokensDenominator: 5,
  rowsDenominator: 6,
  size: 7,
} as const;

export interface PolicyLossArgs {
  logprob: Tensor;
  oldLogprob: Tensor;
  advantages: Tensor;
  mask: Tensor;
  /** Per-token entropy of the current policy; needed for the entropy bonus and its metric. */
  entropy?: Tensor | null;
  /** Reference-policy log-probs; needed for the KL loss and its metric. */
  refLogprob?: Tensor | null;
  B: number;
  T: number;
  /** Default 0.2. */
  clipRatioLow?: number;
  /** Default 0.2. */
  clipRatioHigh?: number;
  /** Dual-clip bound c (> 1, vanilla only). Default 3. */
  clipRatioC?: number;
  /** Default 'vanilla'. */
  policyLossMode?: PolicyLossMode;
  /** Default 'token-mean'. */
  mode?: LossAggMode;
  globals?: LossGlobals;
  /** Default 0. */
  entropyCoef?: number;
  /** Default 0. */
  klCoef?: number;
  /** Default 'k3' (verl's low_var_kl). */
  klKind?: KlKind;
}

export interface PolicyLossResult {
  gLogprob: Tensor;
  /** null without `entropy` or with entropyCoef = 0 (the backward then skips the entropy path). */
  gEntropy: Tensor | null;
  stats: Tensor;
}

export interface ValueLossArgs {
  vpreds: Tensor;
  oldValues: Tensor;
  returns: Tensor;
  mask: Tensor;
  B: number;
  T: number;
  /** Default 0.2. */
  clipRangeValue?: number;
  mode?: LossAggMode;
  globals?: LossGlobals;
}

export interface ValueLossResult {
  gValue: Tensor;
  stats: Tensor;
}

// ---------------------------------------------------------------- argument checks

function checkTokens(op: string, what: string, t: Tensor, B: number, T: number): void {
  expectDType(op, what, t, 'f32');
  if (t.size !== B * T) {
    throw new Error(`${op}: ${what} ${shapeOf(t)} must hold B*T = ${B}*${T} = ${B * T} elements`);
  }
}

function checkNumber(op: string, what: string, x: number, ok: (x: number) => boolean, need: string): void {
  if (!Number.isFinite(x) || !ok(x)) throw new Error(`${op}: ${what} must be ${need}, got ${x}`);
}

function modeCode(op: string, mode: LossAggMode): number {
  const code = MODE_CODE[mode];
  if (code === undefined) {
    throw new Error(`${op}: mode must be one of ${Object.keys(MODE_CODE).join(', ')}, got ${String(mode)}`);
  }
  return code;
}

/** The LossParams uniform of policy-loss.wgsl (17 four-byte slots). */
function lossParams(
  gpu: Gpu,
  op: string,
  B: number,
  T: number,
  mode: LossAggMode,
  globals: LossGlobals | undefined,
  extra: {
    klKind: number;
    hasEntropy: boolean;
    hasRef: boolean;
    clipLow: number;
    clipHigh: number;
    clipC: number;
    entropyCoef: number;
    klCoef: number;
    /** Aggregation of the policy-gradient term when it differs from `mode` (GSPO). */
    pgMode?: LossAggMode;
  },
): GPUBuffer {
  if (!Number.isInteger(B) || B < 0) throw new Error(`${op}: B must be a non-negative integer, got ${B}`);
  if (!Number.isInteger(T) || T < 0) throw new Error(`${op}: T must be a non-negative integer, got ${T}`);
  const nonNegInt = (x: number) => Number.isInteger(x) && x >= 0;
  if (globals?.tokens !== undefined)
    checkNumber(op, 'globals.tokens', globals.tokens, nonNegInt, 'a non-negative integer');
  if (globals?.rows !== undefined)
    checkNumber(op, 'globals.rows', globals.rows, nonNegInt, 'a non-negative integer');
  const maxLen = globals?.maxLen ?? T;
  checkNumber(op, 'globals.maxLen', maxLen, (x) => x >= 0, 'a non-negative number');
  return gpu.uniform('uuuuuuuuffffffffu', [
    B,
    T,
    modeCode(op, mode),
    extra.klKind,
    extra.hasEntropy ? 1 : 0,
    extra.hasRef ? 1 : 0,
    globals?.tokens !== undefined ? 1 : 0,
    globals?.rows !== undefined ? 1 : 0,
    globals?.tokens ?? 0,
    globals?.rows ?? 0,
    maxLen,
    extra.clipLow,
    extra.clipHigh,
    extra.clipC,
    extra.entropyCoef,
    extra.klCoef,
    modeCode(op, extra.pgMode ?? mode),
  ]);
}

const placeholders = new WeakMap<Gpu, Tensor>();

/** A one-element f32 tensor bound where an optional read-only input is absent. */
function placeholderF32(gpu: Gpu): Tensor {
  let t = placeholders.get(gpu);
  if (!t || t.released) {
    t = gpu.zeros([1], 'f32', 'placeholder.f32');
    placeholders.set(gpu, t);
  }
  return t;
}

/**
 * The stats of an empty batch (no tokens: nothing can be bound): every loss and metric 0, the last
 * two slots the denominators (the globals, or 0).
 */
function emptyStats(gpu: Gpu, size: number, globals: LossGlobals | undefined, label: string): Tensor {
  const values = new Float32Array(size);
  values[size - 2] = globals?.tokens ?? 0;
  values[size - 1] = globals?.rows ?? 0;
  return gpu.upload(values, [size], 'f32', label);
}

function kernel(gpu: Gpu, entryPoint: string, constants?: Record<string, number>) {
  return gpu.kernel({ name: NAME, code: policyLossWgsl, entryPoint, constants });
}

// ---------------------------------------------------------------- actor

/** The whole actor loss of one (micro-)batch: gradients for the backward and a stats tensor. */
export function policyLoss(gpu: Gpu, args: PolicyLossArgs): PolicyLossResult {
  const op = 'policyLoss';
  const { B, T } = args;
  const entropy = args.entropy ?? undefined;
  const refLogprob = args.refLogprob ?? undefined;
  const mode = args.mode ?? 'token-mean';
  const clipLow = args.clipRatioLow ?? 0.2;
  const clipHigh = args.clipRatioHigh ?? 0.2;
  const clipC = args.clipRatioC ?? 3;
  const entropyCoef = args.entropyCoef ?? 0;
  const klCoef = args.klCoef ?? 0;
  const klKind = args.klKind ?? 'k3';
  checkNumber(op, 'clipRatioLow', clipLow, (x) => x >= 0, 'a non-negative number');
  checkNumber(op, 'clipRatioHigh', clipHigh, (x) => x >= 0, 'a non-negative number');
  checkNumber(op, 'clipRatioC', clipC, (x) => x > 1, 'a number > 1 (dual-clip PPO)');
  checkNumber(op, 'entropyCoef', entropyCoef, () => true, 'a finite number');
  checkNumber(op, 'klCoef', klCoef, () => true, 'a finite number');
  const policyMode = args.policyLossMode ?? 'vanilla';
  const policyCode = POLICY_CODE[policyMode];
  if (policyCode === undefined) {
    throw new Error(`${op}: policyLossMode must be 'vanilla', 'gspo' or 'cispo', got ${String(policyMode)}`);
  }
  if (clipLow >= 1) throw new Error(`${op}: clipRatioLow must be below 1, got ${clipLow}`);
  const klCode = KL_KIND_CODE[klKind];
  if (klCode === undefined)
    throw new Error(`${op}: klKind must be 'k1', 'k2' or 'k3', got ${String(klKind)}`);
  const params = lossParams(gpu, op, B, T, mode, args.globals, {
    klKind: klCode,
    hasEntropy: entropy !== undefined,
    hasRef: refLogprob !== undefined,
    clipLow,
    clipHigh,
    clipC,
    entropyCoef,
    klCoef,
    pgMode: policyMode === 'gspo' ? 'seq-mean-token-mean' : mode,
  });
  for (const what of ['logprob', 'oldLogprob', 'advantages', 'mask'] as const)
    checkTokens(op, what, args[what], B, T);
  if (entropy) checkTokens(op, 'entropy', entropy, B, T);
  if (refLogprob) checkTokens(op, 'refLogprob', refLogprob, B, T);
  if (klCoef !== 0 && !refLogprob) throw new Error(`${op}: klCoef = ${klCoef} needs refLogprob`);
  if (entropyCoef !== 0 && !entropy) throw new Error(`${op}: entropyCoef = ${entropyCoef} needs entropy`);

  const gLogprob = gpu.empty([B, T], 'f32', 'policyLoss.gLogprob');
  if (B * T === 0) {
    const gEntropy = entropy && entropyCoef !== 0 ? gpu.empty([B, T], 'f32', 'policyLoss.gEntropy') : null;
    return {
      gLogprob,
      gEntropy,
      stats: emptyStats(gpu, POLICY_STAT.size, args.globals, 'policyLoss.stats'),
    };
  }
  // Without entropy the shader never writes gEntropy, but the binding must exist: a private scratch.
  const gEntropy = gpu.empty(entropy ? [B, T] : [1], 'f32', 'policyLoss.gEntropy');
  const stats = gpu.empty([POLICY_STAT.size], 'f32', 'policyLoss.stats');
  const rowN = gpu.empty([Math.max(B, 1)], 'f32', 'policyLoss.rowN');
  const rowSums = gpu.empty([Math.max(B, 1) * 6], 'f32', 'policyLoss.rowSums');
  const none = placeholderF32(gpu);
  gpu.dispatch(kernel(gpu, 'row_counts'), [args.mask, rowN, params], gridFor(gpu, B), B * T);
  gpu.dispatch(
    kernel(gpu, 'actor_rows', { POLICY: policyCode }),
    [
      args.logprob,
      args.oldLogprob,
      args.advantages,
      args.mask,
      entropy ?? none,
      refLogprob ?? none,
      rowN,
      gLogprob,
      gEntropy,
      rowSums,
      params,
    ],
    gridFor(gpu, B),
    B * B + 30 * B * T,
  );
  gpu.dispatch(kernel(gpu, 'actor_finalize'), [rowN, rowSums, stats, params], [1], 8 * B);
  rowN.release();
  rowSums.release();
  const keepEntropy = entropy !== undefined && entropyCoef !== 0;
  if (!keepEntropy) gEntropy.release();
  return { gLogprob, gEntropy: keepEntropy ? gEntropy : null, stats };
}

// ---------------------------------------------------------------- critic

/** The clipped value loss of one (micro-)batch: d loss / d vpreds and a stats tensor. */
export function valueLoss(gpu: Gpu, args: ValueLossArgs): ValueLossResult {
  const op = 'valueLoss';
  const { B, T } = args;
  const clip = args.clipRangeValue ?? 0.2;
  checkNumber(op, 'clipRangeValue', clip, (x) => x >= 0, 'a non-negative number');
  const params = lossParams(gpu, op, B, T, args.mode ?? 'token-mean', args.globals, {
    klKind: 0,
    hasEntropy: false,
    hasRef: false,
    clipLow: clip,
    clipHigh: clip,
    clipC: 0,
    entropyCoef: 0,
    klCoef: 0,
  });
  for (const what of ['vpreds', 'oldValues', 'returns', 'mask'] as const)
    checkTokens(op, what, args[what], B, T);
  const gValue = gpu.empty([B, T], 'f32', 'valueLoss.gValue');
  if (B * T === 0)
    return { gValue, stats: emptyStats(gpu, VALUE_STAT.size, args.globals, 'valueLoss.stats') };
  const stats = gpu.empty([VALUE_STAT.size], 'f32', 'valueLoss.stats');
  const rowN = gpu.empty([Math.max(B, 1)], 'f32', 'valueLoss.rowN');
  const rowSums = gpu.empty([Math.max(B, 1) * 3], 'f32', 'valueLoss.rowSums');
  gpu.dispatch(kernel(gpu, 'row_counts'), [args.mask, rowN, params], gridFor(gpu, B), B * T);
  gpu.dispatch(
    kernel(gpu, 'value_rows'),
    [args.vpreds, args.oldValues, args.returns, args.mask, rowN, gValue, rowSums, params],
    gridFor(gpu, B),
    B * B + 10 * B * T,
  );
  gpu.dispatch(kernel(gpu, 'value_finalize'), [rowN, rowSums, stats, params], [1], 4 * B);
  rowN.release();
  rowSums.release();
  return { gValue, stats };
}
