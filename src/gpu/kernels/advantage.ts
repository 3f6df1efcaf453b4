// Thin wrappers over src/shaders/advantage.wgsl: the advantage estimators, masked whitening and the
// in-reward KL penalty, on the GPU. The float64 CPU twin is src/rl/core-algos.ts (same semantics;
// /work/shared/notes/rl-estimator-semantics.md explains them).
//
// Shapes (B rows padded to T positions, N = B*T, flattened row-major):
//   tokenRewards, values, mask, logprob, refLogprob: f32 [N] (or [B, T]); mask is 0/1
//   index: u32 [B] (group id per row)
//   outMask (optional, f32 [N]): the positions that receive an advantage, the mask plus the positions
//     the loss reads outside it (the loss-mask ablation's environment tokens); default the mask. It
//     must contain the mask (the CPU twin writes mask ∪ outMask; broadcast and whitening here write
//     outMask alone).
//     Statistics (GAE's recursion, group scores, whitening) run over the mask alone; at an outMask
//     position outside the mask the value is the one carried from the next masked token (GAE,
//     REINFORCE++, as verl's recursions carry it) or the row's (group estimators).
//   → { advantages, returns }: f32 [B, T], 0 outside mask ∪ outMask
//
//   gaeAdvantageReturn         GAE with the multi-turn skip; returns = raw GAE + values; advantages
//                              whitened over the mask (whiten = true)
//   grpoOutcomeAdvantage       (score − μ_g)/(σ_g + eps) (normByStd) or score − μ_g (Dr.GRPO); returns = advantages
//   rlooOutcomeAdvantage       score − mean of the others in the group; returns = advantages
//   reinforcePlusPlusOutcomeAdvantage          discounted return over policy tokens, whitened;
//                                              returns = the unwhitened return
//   reinforcePlusPlusBaselineOutcomeAdvantage  score − μ_g broadcast, whitened; returns = advantages
//   maskedWhiten(x, mask)      (x − μ)·rsqrt(var_unbiased + 1e-8) over mask ≠ 0, 0 elsewhere; ≤ 1 active → 0
//   klPenaltyRewards           tokenRewards − beta·k(logprob, refLogprob)·mask, k ∈ k1 | k2 | k3
//   advantage({ estimator, ... })  any of the above by name, after the optional in-reward KL penalty
//
// Every output is a fresh pooled tensor the caller releases; scratch tensors are released here.
// Nothing is read back.

import advantageWgsl from '../../shaders/advantage.wgsl?raw';
import type { Gpu } from '../runtime.ts';
import type { Tensor } from '../tensor.ts';
import { expectDType, gridFor, shapeOf } from './launch.ts';

const NAME = 'advantage.wgsl';
/** Tokens per whitening partial (must match CHUNK in advantage.wgsl). */
export const WHITEN_CHUNK = 256;

export type KlKind = 'k1' | 'k2' | 'k3';
export const KL_KIND_CODE: Record<KlKind, number> = { k1: 0, k2: 1, k3: 2 };

export interface AdvantageResult {
  advantages: Tensor;
  returns: Tensor;
}

// ---------------------------------------------------------------- argument checks

function checkBT(op: string, B: number, T: number): void {
  if (!Number.isInteger(B) || B < 0) throw new Error(`${op}: B must be a non-negative integer, got ${B}`);
  if (!Number.isInteger(T) || T < 0) throw new Error(`${op}: T must be a non-negative integer, got ${T}`);
}

/** An f32 tensor of exactly B*T elements (any shape, e.g. [N] or [B, T]). */
export function checkTokens(op: string, what: string, t: Tensor, B: number, T: number): void {
  expectDType(op, what, t, 'f32');
  if (t.size !== B * T) {
    throw new Error(`${op}: ${what} ${shapeOf(t)} must hold B*T = ${B}*${T} = ${B * T} elements`);
  }
}

function checkIndex(op: string, index: Tensor, B: number): void {
  expectDType(op, 'index', index, 'u32');
  if (index.size !== B)
    throw new Error(`${op}: index ${shapeOf(index)} must hold one group id per row (B = ${B})`);
}

function checkFinite(op: string, what: string, x: number): void {
  if (!Number.isFinite(x)) throw new Error(`${op}: ${what} must be a finite number, got ${x}`);
}

function kernel(gpu: Gpu, entryPoint: string, constants?: Record<string, number>) {
  return gpu.kernel({ name: NAME, code: advantageWgsl, entryPoint, constants });
}

// ---------------------------------------------------------------- whitening

/**
 * Records masked whitening of x into `out` (both [N]): statistics over `mask`, applied where
 * `applyMask` ≠ 0 (default the mask), 0 elsewhere. Masks are 0/1. Three dispatches: chunk partials,
 * one finalize invocation, the elementwise apply. `out` may not be x or a mask.
 */
function whitenInto(gpu: Gpu, x: Tensor, mask: Tensor, out: Tensor, N: number, applyMask = mask): void {
  if (N === 0) return;
  const chunks = Math.ceil(N / WHITEN_CHUNK);
  const params = gpu.uniform('uu', [N, chunks]);
  const partial = gpu.empty([chunks, 3], 'f32', 'whiten.partial');
  const stats = gpu.empty([4], 'f32', 'whiten.stats');
  gpu.dispatch(kernel(gpu, 'whiten_partial'), [x, mask, partial, params], gridFor(gpu, chunks), 2 * N);
  gpu.dispatch(kernel(gpu, 'whiten_finalize'), [partial, stats, params], [1], chunks);
  gpu.dispatch(kernel(gpu, 'whiten_apply'), [x, applyMask, stats, out, params], gridFor(gpu, N), N);
  partial.release();
  stats.release();
}

/** (x − μ)·rsqrt(var + 1e-8) over mask ≠ 0 (var unbiased), 0 where mask = 0; ≤ 1 active → all 0. */
export function maskedWhiten(gpu: Gpu, x: Tensor, mask: Tensor, label = 'whiten.out'): Tensor {
  expectDType('maskedWhiten', 'x', x, 'f32');
  expectDType('maskedWhiten', 'mask', mask, 'f32');
  if (x.size !== mask.size)
    throw new Error(`maskedWhiten: x ${shapeOf(x)} and mask ${shapeOf(mask)} must have the same size`);
  const out = gpu.empty(x.shape, 'f32', label);
  whitenInto(gpu, x, mask, out, x.size);
  return out;
}

// ---------------------------------------------------------------- GAE

export interface GaeArgs {
  tokenRewards: Tensor;
  values: Tensor;
  mask: Tensor;
  /** The positions that receive an advantage (see the header); default the mask. */
  outMask?: Tensor;
  B: number;
  T: number;
  gamma: number;
  lam: number;
  /** Whiten the advantages over the mask (verl does). Default true. */
  whiten?: boolean;
  /** The positions whose statistics whiten the advantages; default the mask (core-algos GaeArgs.whitenMask). */
  whitenMask?: Tensor;
}

/** GAE (verl, multi-turn skip). advantages whitened unless whiten = false; returns = raw GAE + values. */
export function gaeAdvantageReturn(gpu: Gpu, args: GaeArgs): AdvantageResult {
  const op = 'gaeAdvantageReturn';
  const { B, T, gamma, lam } = args;
  checkBT(op, B, T);
  checkTokens(op, 'tokenRewards', args.tokenRewards, B, T);
  checkTokens(op, 'values', args.values, B, T);
  checkTokens(op, 'mask', args.mask, B, T);
  const outMask = args.outMask ?? args.mask;
  checkTokens(op, 'outMask', outMask, B, T);
  checkFinite(op, 'gamma', gamma);
  checkFinite(op, 'lam', lam);
  const whiten = args.whiten ?? true;
  const raw = gpu.empty([B, T], 'f32', whiten ? 'gae.raw' : 'gae.advantages');
  const returns = gpu.empty([B, T], 'f32', 'gae.returns');
  if (B * T === 0) return { advantages: raw, returns };
  gpu.dispatch(
    kernel(gpu, 'gae_rows'),
    [
      args.tokenRewards,
      args.values,
      args.mask,
      outMask,
      raw,
      returns,
      gpu.uniform('uuff', [B, T, gamma, lam]),
    ],
    gridFor(gpu, B),
    4 * B * T,
  );
  if (!whiten) return { advantages: raw, returns };
  const advantages = gpu.empty([B, T], 'f32', 'gae.advantages');
  const whitenMask = args.whitenMask ?? args.mask;
  checkTokens(op, 'whitenMask', whitenMask, B, T);
  whitenInto(gpu, raw, whitenMask, advantages, B * T, outMask);
  raw.release();
  return { advantages, returns };
}

// ---------------------------------------------------------------- outcome (group) estimators

export interface OutcomeArgs {
  tokenRewards: Tensor;
  mask: Tensor;
  /** The positions that receive the row's advantage (see the header); default the mask. */
  outMask?: Tensor;
  /** u32 [B]: rows with the same id are the samples of one prompt. */
  index: Tensor;
  B: number;
  T: number;
}

const GROUP_MODE = { grpo: 0, mean: 1, rloo: 2 } as const;

/** Per-row group-normalised scores [B], broadcast to the outMask into a fresh [B, T] tensor. */
function groupAdvantage(
  gpu: Gpu,
  op: string,
  args: OutcomeArgs,
  mode: keyof typeof GROUP_MODE,
  epsilon: number,
  label: string,
): Tensor {
  const { B, T } = args;
  checkBT(op, B, T);
  checkTokens(op, 'tokenRewards', args.tokenRewards, B, T);
  checkTokens(op, 'mask', args.mask, B, T);
  const outMask = args.outMask ?? args.mask;
  checkTokens(op, 'outMask', outMask, B, T);
  checkIndex(op, args.index, B);
  checkFinite(op, 'epsilon', epsilon);
  const out = gpu.empty([B, T], 'f32', label);
  if (B * T === 0) return out;
  const params = gpu.uniform('uufu', [B, T, epsilon, 0]);
  const score = gpu.empty([B], 'f32', 'outcome.score');
  const rowAdv = gpu.empty([B], 'f32', 'outcome.rowAdvantage');
  gpu.dispatch(kernel(gpu, 'row_scores'), [args.tokenRewards, score, params], gridFor(gpu, B), B * T);
  gpu.dispatch(
    kernel(gpu, 'group_scores', { MODE: GROUP_MODE[mode] }),
    [score, args.index, rowAdv, params],
    gridFor(gpu, B),
    2 * B * B,
  );
  gpu.dispatch(
    kernel(gpu, 'broadcast_rows'),
    [rowAdv, outMask, out, gpu.uniform('uu', [B * T, T])],
    gridFor(gpu, B * T),
    B * T,
  );
  score.release();
  rowAdv.release();
  return out;
}

export interface GrpoArgs extends OutcomeArgs {
  /** Divide by the group std (GRPO); false = Dr.GRPO (score − group mean). Default true. */
  normByStd?: boolean;
  /** Added to the std. Default 1e-6. */
  epsilon?: number;
}

/** GRPO / Dr.GRPO outcome advantage; `returns` is the same tensor as `advantages`. */
export function grpoOutcomeAdvantage(gpu: Gpu, args: GrpoArgs): AdvantageResult {
  const byStd = args.normByStd ?? true;
  const advantages = groupAdvantage(
    gpu,
    'grpoOutcomeAdvantage',
    args,
    byStd ? 'grpo' : 'mean',
    args.epsilon ?? 1e-6,
    'grpo.advantages',
  );
  return { advantages, returns: advantages };
}

/** RLOO: score − mean of the other samples of the group (a group of one keeps its score). */
export function rlooOutcomeAdvantage(gpu: Gpu, args: OutcomeArgs): AdvantageResult {
  const advantages = groupAdvantage(gpu, 'rlooOutcomeAdvantage', args, 'rloo', 0, 'rloo.advantages');
  return { advantages, returns: advantages };
}

/** REINFORCE++-baseline: score − group mean, broadcast, whitened over the batch; returns = advantages. */
export function reinforcePlusPlusBaselineOutcomeAdvantage(gpu: Gpu, args: OutcomeArgs): AdvantageResult {
  const op = 'reinforcePlusPlusBaselineOutcomeAdvantage';
  const centred = groupAdvantage(gpu, op, args, 'mean', 0, 'rpp-baseline.centred');
  const advantages = gpu.empty([args.B, args.T], 'f32', 'rpp-baseline.advantages');
  whitenInto(gpu, centred, args.mask, advantages, args.B * args.T, args.outMask ?? args.mask);
  centred.release();
  return { advantages, returns: advantages };
}

export interface ReinforcePlusPlusArgs {
  tokenRewards: Tensor;
  mask: Tensor;
  /** The positions that receive an advantage (see the header); default the mask. */
  outMask?: Tensor;
  B: number;
  T: number;
  gamma: number;
}

/** REINFORCE++ (Agent-R1 compaction): discounted return over policy tokens, whitened over the batch. */
export function reinforcePlusPlusOutcomeAdvantage(gpu: Gpu, args: ReinforcePlusPlusArgs): AdvantageResult {
  const op = 'reinforcePlusPlusOutcomeAdvantage';
  const { B, T, gamma } = args;
  checkBT(op, B, T);
  checkTokens(op, 'tokenRewards', args.tokenRewards, B, T);
  checkTokens(op, 'mask', args.mask, B, T);
  const outMask = args.outMask ?? args.mask;
  checkTokens(op, 'outMask', outMask, B, T);
  checkFinite(op, 'gamma', gamma);
  const returns = gpu.empty([B, T], 'f32', 'rpp.returns');
  const advantages = gpu.empty([B, T], 'f32', 'rpp.advantages');
  if (B * T === 0) return { advantages, returns };
  gpu.dispatch(
    kernel(gpu, 'discounted_rows'),
    [args.tokenRewards, args.mask, outMask, returns, gpu.uniform('uuff', [B, T, gamma, 0])],
    gridFor(gpu, B),
    2 * B * T,
  );
  whitenInto(gpu, returns, args.mask, advantages, B * T, outMask);
  return { advantages, returns };
}

// ---------------------------------------------------------------- KL penalty in the reward

export interface KlPenaltyRewardsArgs {
  tokenRewards: Tensor;
  logprob: Tensor;
  refLogprob: Tensor;
  mask: Tensor;
  beta: number;
  kind: KlKind;
}

/** tokenRewards − beta·k(logprob, refLogprob)·mask, all [N]. */
export function klPenaltyRewards(gpu: Gpu, args: KlPenaltyRewardsArgs): Tensor {
  const op = 'klPenaltyRewards';
  const N = args.tokenRewards.size;
  for (const what of ['tokenRewards', 'logprob', 'refLogprob', 'mask'] as const) {
    expectDType(op, what, args[what], 'f32');
    if (args[what].size !== N) {
      throw new Error(
        `${op}: ${what} ${shapeOf(args[what])} must have as many elements as tokenRewards ${shapeOf(args.tokenRewards)}`,
      );
    }
  }
  const kind = KL_KIND_CODE[args.kind];
  if (kind === undefined) throw new Error(`${op}: kind must be 'k1', 'k2' or 'k3', got ${String(args.kind)}`);
  checkFinite(op, 'beta', args.beta);
  const out = gpu.empty(args.tokenRewards.shape, 'f32', 'klPenalty.rewards');
  if (N === 0) return out;
  gpu.dispatch(
    kernel(gpu, 'kl_reward'),
    [
      args.tokenRewards,
      args.logprob,
      args.refLogprob,
      args.mask,
      out,
      gpu.uniform('uuf', [N, kind, args.beta]),
    ],
    gridFor(gpu, N),
    4 * N,
  );
  return out;
}

// ---------------------------------------------------------------- one entry point for a trainer

/** The estimators by name: 'ppo' and 'gae' are GAE; 'drgrpo' is GRPO without the std. */
export type AdvantageEstimator =
  | 'gae'
  | 'ppo'
  | 'grpo'
  | 'drgrpo'
  | 'rloo'
  | 'reinforce++'
  | 'reinforce++-baseline';

export interface AdvantageArgs {
  estimator: AdvantageEstimator;
  tokenRewards: Tensor;
  mask: Tensor;
  /** The positions that receive an advantage (see the header); default the mask. */
  outMask?: Tensor;
  /** u32 [B]; required by grpo, drgrpo, rloo and reinforce++-baseline. */
  index?: Tensor | null;
  /** Old values [N]; required by GAE. */
  values?: Tensor | null;
  B: number;
  T: number;
  /** Default 1 (verl). */
  gamma?: number;
  /** Default 1 (verl). */
  lam?: number;
  /** GAE only: whiten the advantages. Default true. */
  whiten?: boolean;
  /** GAE only: the positions whose statistics whiten the advantages; default the mask. */
  whitenMask?: Tensor;
  /** GRPO only: added to the group std. Default 1e-6. */
  epsilon?: number;
  /** In-reward KL penalty applied to tokenRewards first (verl apply_kl_penalty); null = none. */
  klInReward?: { logprob: Tensor; refLogprob: Tensor; beta: number; kind: KlKind } | null;
}

/**
 * Rewards → { advantages, returns } with the named estimator, after the optional in-reward KL
 * penalty. For the group estimators `returns` is the same tensor as `advantages` (release it once).
 */
export function advantage(gpu: Gpu, args: AdvantageArgs): AdvantageResult {
  const op = 'advantage';
  const { estimator, mask, outMask, B, T } = args;
  const gamma = args.gamma ?? 1;
  const lam = args.lam ?? 1;
  const needIndex = (): Tensor => {
    if (!args.index) throw new Error(`${op}: estimator '${estimator}' needs index (u32 [B], the group ids)`);
    return args.index;
  };
  if (estimator === 'gae' || estimator === 'ppo') {
    if (!args.values) throw new Error(`${op}: estimator '${estimator}' (GAE) needs values`);
  } else if (estimator !== 'reinforce++') {
    if (!['grpo', 'drgrpo', 'rloo', 'reinforce++-baseline'].includes(estimator)) {
      throw new Error(
        `${op}: unknown estimator '${String(estimator)}'; expected gae, ppo, grpo, drgrpo, rloo, reinforce++ or reinforce++-baseline`,
      );
    }
    needIndex();
  }
  let tokenRewards = args.tokenRewards;
  const kl = args.klInReward;
  if (kl) {
    checkTokens(op, 'tokenRewards', tokenRewards, B, T);
    tokenRewards = klPenaltyRewards(gpu, {
      tokenRewards,
      logprob: kl.logprob,
      refLogprob: kl.refLogprob,
      mask,
      beta: kl.beta,
      kind: kl.kind,
    });
  }
  let result: AdvantageResult;
  switch (estimator) {
    case 'gae':
    case 'ppo':
      result = gaeAdvantageReturn(gpu, {
        tokenRewards,
        values: args.values as Tensor,
        mask,
        outMask,
        B,
        T,
        gamma,
        lam,
        whiten: args.whiten,
        whitenMask: args.whitenMask,
      });
      break;
    case 'grpo':
    case 'drgrpo':
      result = grpoOutcomeAdvantage(gpu, {
        tokenRewards,
        mask,
        outMask,
        index: needIndex(),
        B,
        T,
        normByStd: estimator === 'grpo',
        epsilon: args.epsilon,
      });
      break;
    case 'rloo':
      result = rlooOutcomeAdvantage(gpu, { tokenRewards, mask, outMask, index: needIndex(), B, T });
      break;
    case 'reinforce++':
      result = reinforcePlusPlusOutcomeAdvantage(gpu, { tokenRewards, mask, outMask, B, T, gamma });
      break;
    default:
      result = reinforcePlusPlusBaselineOutcomeAdvantage(gpu, {
        tokenRewards,
        mask,
        outMask,
        index: needIndex(),
        B,
        T,
      });
  }
  if (tokenRewards !== args.tokenRewards) tokenRewards.release();
  return result;
}
