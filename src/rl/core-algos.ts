// RL advantage estimators and losses as pure CPU functions in float64: the reference (the "CPU twin")
// that the WGSL RL kernels are tested against, and the readable statement of the semantics.
//
// Names mirror verl's `verl/trainer/ppo/core_algos.py` and `verl/utils/torch_functional.py` (and
// Agent-R1's `agent_r1/src/core_algos.py`) in camelCase, so the two can be read side by side. The
// comment above each function names the verl function and any difference; the choices where this lab
// departs from verl are those of /work/shared/notes/rl-estimator-semantics.md.
//
// Layout: a batch of B response rows, each padded to T positions, flattened row-major; N = B*T and
// every per-token array has N entries (position t of row b is index b*T + t).
//   mask   [N] 0/1   1 on policy-sampled tokens, 0 on prompt, environment (tool output) and padding
//                    tokens; interior zeros between the turns of one episode are normal.
//   index  [B]       group id per row (u32 on the GPU): the G samples of one question share an id.
//   outMask [N] 0/1  optional, for the estimators: positions that receive an advantage beyond the
//                    mask, i.e. the positions the loss reads outside it (the loss-mask ablation's
//                    environment tokens). Default: none beyond the mask.
// Advantages and returns are 0 outside mask ∪ outMask. Inputs at mask=0 positions are never read by
// the masked statistics and losses (like verl's masked_sum, which selects rather than multiplies), so
// garbage or NaN there cannot leak into a result.
//
// Every loss returns the aggregated scalar and its gradient with respect to what the model produces
// (log-probs, entropies or value predictions), per token: exactly what autograd gives for verl's
// formula, including torch's rules at kinks (torch.clamp passes the gradient at the bounds inclusive;
// torch.maximum / torch.minimum split it in half between exactly equal arguments).

export class RlInputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RlInputError';
  }
}

export type Values = ArrayLike<number>;
export type KlKind = 'k1' | 'k2' | 'k3';
export type LossAggMode =
  | 'token-mean'
  | 'seq-mean-token-sum'
  | 'seq-mean-token-mean'
  | 'seq-mean-token-sum-norm';

/**
 * Denominators of the whole (global) batch, for a batch split into micro-batches: with the same
 * globals on every part, the parts' losses (and gradients) sum to the whole batch's.
 *   tokens: active (mask=1) tokens, the token-mean denominator
 *   rows:   non-empty rows (at least one active token), the seq-mean-* denominator
 *   maxLen: L of seq-mean-token-sum-norm (the padded response length)
 */
export interface AggGlobals {
  tokens: number;
  rows: number;
  maxLen: number;
}

export const LOSS_AGG_MODES: readonly LossAggMode[] = [
  'token-mean',
  'seq-mean-token-sum',
  'seq-mean-token-mean',
  'seq-mean-token-sum-norm',
];
export const KL_KINDS: readonly KlKind[] = ['k1', 'k2', 'k3'];

// ---------------------------------------------------------------------------------------------
// Input checks: a bad shape or value is a typed error naming it, never a silently wrong number.

function checkShape(B: number, T: number): void {
  if (!Number.isInteger(B) || B < 0) throw new RlInputError(`B must be a non-negative integer, got ${B}`);
  if (!Number.isInteger(T) || T < 0) throw new RlInputError(`T must be a non-negative integer, got ${T}`);
}

function checkLength(name: string, x: Values, n: number): void {
  if (x == null || typeof x.length !== 'number') throw new RlInputError(`${name} must be an array, got ${x}`);
  if (x.length !== n) throw new RlInputError(`${name} has length ${x.length}, expected ${n}`);
}

function checkMask(mask: Values, n: number, name = 'mask'): void {
  checkLength(name, mask, n);
  for (let i = 0; i < n; i++) {
    const m = mask[i];
    if (m !== 0 && m !== 1) throw new RlInputError(`${name}[${i}] = ${m}; a mask holds only 0 and 1`);
  }
}

function checkIndex(index: Values, B: number): void {
  checkLength('index', index, B);
  for (let b = 0; b < B; b++) {
    const id = index[b];
    if (!Number.isInteger(id) || id < 0 || id > 0xffffffff)
      throw new RlInputError(`index[${b}] = ${id}; group ids are u32 integers`);
  }
}

function checkFinite(name: string, v: number): void {
  if (typeof v !== 'number' || !Number.isFinite(v))
    throw new RlInputError(`${name} must be a finite number, got ${v}`);
}

function checkMode(mode: string): asserts mode is LossAggMode {
  if (!LOSS_AGG_MODES.includes(mode as LossAggMode))
    throw new RlInputError(
      `unknown loss aggregation mode '${mode}'; expected one of ${LOSS_AGG_MODES.join(', ')}`,
    );
}

function checkKind(kind: string): asserts kind is KlKind {
  if (!KL_KINDS.includes(kind as KlKind))
    throw new RlInputError(`unknown KL kind '${kind}'; expected one of ${KL_KINDS.join(', ')}`);
}

function checkGlobals(globals: AggGlobals | undefined): void {
  if (globals === undefined) return;
  for (const key of ['tokens', 'rows', 'maxLen'] as const) {
    const v = globals[key];
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0)
      throw new RlInputError(`globals.${key} must be a finite number >= 0, got ${v}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Masked statistics (verl/utils/torch_functional.py). All are global over the whole batch.

/** verl masked_sum: Σ x where mask=1 (selects, so NaN outside the mask is ignored). */
export function maskedSum(x: Values, mask: Values): number {
  checkLength('x', x, mask.length);
  checkMask(mask, mask.length);
  let s = 0;
  for (let i = 0; i < x.length; i++) if (mask[i] === 1) s += x[i];
  return s;
}

function activeCount(mask: Values): number {
  let n = 0;
  for (let i = 0; i < mask.length; i++) n += mask[i] === 1 ? 1 : 0;
  return n;
}

/** verl masked_mean: Σ x·m / (Σ m + 1e-8), so an empty mask gives 0 (the 1e-8 is verl's). */
export function maskedMean(x: Values, mask: Values): number {
  return maskedSum(x, mask) / (activeCount(mask) + 1e-8);
}

/**
 * verl masked_var (unbiased): masked_mean((x − μ)²)·n/(n − 1), with μ = masked_mean(x).
 * Difference: verl raises for n ≤ 1; here n ≤ 1 gives 0, so a training step never crashes on it.
 */
export function maskedVar(x: Values, mask: Values): number {
  checkMask(mask, mask.length);
  checkLength('x', x, mask.length);
  const n = activeCount(mask);
  if (n <= 1) return 0;
  const mean = maskedMean(x, mask);
  let s = 0;
  for (let i = 0; i < x.length; i++) if (mask[i] === 1) s += (x[i] - mean) * (x[i] - mean);
  return (s / (n + 1e-8)) * (n / (n - 1));
}

/**
 * verl masked_whiten: (x − μ)·rsqrt(var + 1e-8) (shift_mean=false adds μ back), μ and var over the
 * mask. The epsilon sits on the variance. Differences: the result is written where `applyMask` is 1
 * (default the mask; verl transforms every position) and is 0 elsewhere, and with ≤ 1 active token it
 * is all zeros instead of verl's exception (`skipped` reports it).
 */
export function maskedWhitenWithInfo(
  x: Values,
  mask: Values,
  shiftMean = true,
  applyMask: Values = mask,
): { whitened: Float64Array; skipped: boolean } {
  checkMask(mask, mask.length);
  checkLength('x', x, mask.length);
  checkMask(applyMask, mask.length, 'applyMask');
  const out = new Float64Array(x.length);
  if (activeCount(mask) <= 1) return { whitened: out, skipped: true };
  const mean = maskedMean(x, mask);
  const rstd = 1 / Math.sqrt(maskedVar(x, mask) + 1e-8);
  for (let i = 0; i < x.length; i++) {
    if (applyMask[i] !== 1) continue;
    out[i] = (x[i] - mean) * rstd + (shiftMean ? 0 : mean);
  }
  return { whitened: out, skipped: false };
}

/** verl masked_whiten; see maskedWhitenWithInfo for the differences. */
export function maskedWhiten(x: Values, mask: Values, shiftMean = true): Float64Array {
  return maskedWhitenWithInfo(x, mask, shiftMean).whitened;
}

/** mask ∪ outMask: the positions an estimator writes (outMask checked as a 0/1 mask of length N). */
function writtenPositions(mask: Values, outMask: Values | undefined, N: number): Values {
  if (outMask === undefined) return mask;
  checkMask(outMask, N, 'outMask');
  const w = new Float64Array(N);
  for (let i = 0; i < N; i++) w[i] = mask[i] === 1 || outMask[i] === 1 ? 1 : 0;
  return w;
}

// ---------------------------------------------------------------------------------------------
// Advantage estimators. Each returns advantages and returns [N], 0 outside mask ∪ outMask.

export interface AdvantageResult {
  advantages: Float64Array;
  returns: Float64Array;
  /** Set by the estimators that whiten: true when ≤ 1 active token made whitening return zeros. */
  whitenSkipped?: boolean;
}

export interface GaeArgs {
  tokenRewards: Values;
  values: Values;
  mask: Values;
  outMask?: Values;
  B: number;
  T: number;
  gamma: number;
  lam: number;
  whiten?: boolean;
  /**
   * The positions whose mean and variance whiten the advantages; default the mask (verl, Agent-R1). The
   * advantage-mask ablation may set the policy's tokens here, so that both arms' advantages have unit
   * variance where the loss reads them and differ only by the recursion (ablation.whitenOver).
   */
  whitenMask?: Values;
}

/**
 * verl compute_gae_advantage_return (multi-turn form). Runs backwards over each row; at a mask=0
 * position nextValue and lastGaeLam carry over unchanged, so γ and λ advance over policy tokens only
 * and the last policy token of one turn bootstraps from the value of the first policy token of the
 * next turn; rewards and values at mask=0 positions are never read. returns = advantages before
 * whitening + values. Advantages are then whitened over the mask, or over whitenMask where given
 * (whiten=false skips that).
 * At an outMask position outside the mask the advantage is the carried lastGaeLam (the next policy
 * token's, as verl leaves it), whitened with the mask's statistics. Difference: advantages are 0
 * outside mask ∪ outMask and returns 0 outside the mask (verl leaves the carried values everywhere).
 */
export function computeGaeAdvantageReturn(args: GaeArgs): AdvantageResult {
  const { tokenRewards, values, mask, B, T, gamma, lam, whiten = true, whitenMask = mask } = args;
  checkShape(B, T);
  const N = B * T;
  checkLength('tokenRewards', tokenRewards, N);
  checkLength('values', values, N);
  checkMask(mask, N);
  const written = writtenPositions(mask, args.outMask, N);
  checkFinite('gamma', gamma);
  checkFinite('lam', lam);
  const raw = new Float64Array(N);
  const returns = new Float64Array(N);
  for (let b = 0; b < B; b++) {
    let nextValue = 0; // the value after the episode's last policy token: terminal, 0
    let lastGaeLam = 0;
    for (let t = T - 1; t >= 0; t--) {
      const i = b * T + t;
      if (mask[i] === 1) {
        const delta = tokenRewards[i] + gamma * nextValue - values[i];
        lastGaeLam = delta + gamma * lam * lastGaeLam;
        nextValue = values[i];
        returns[i] = lastGaeLam + values[i];
      } // else an environment / padding token: carry both
      if (written[i] === 1) raw[i] = lastGaeLam;
    }
  }
  if (!whiten) return { advantages: raw, returns };
  checkMask(whitenMask, N, 'whitenMask');
  const { whitened, skipped } = maskedWhitenWithInfo(raw, whitenMask, true, written);
  return { advantages: whitened, returns, whitenSkipped: skipped };
}

function rowScores(tokenRewards: Values, B: number, T: number): Float64Array {
  // verl sums every token reward of the row; rewards are only ever placed on policy tokens here, so
  // this equals Agent-R1's masked sum.
  const scores = new Float64Array(B);
  for (let b = 0; b < B; b++) {
    let s = 0;
    for (let t = 0; t < T; t++) s += tokenRewards[b * T + t];
    scores[b] = s;
  }
  return scores;
}

/** Rows of each group, in first-seen order of the group ids. */
function groupRows(index: Values, B: number): number[][] {
  const groups = new Map<number, number[]>();
  for (let b = 0; b < B; b++) {
    const rows = groups.get(index[b]);
    if (rows) rows.push(b);
    else groups.set(index[b], [b]);
  }
  return [...groups.values()];
}

function broadcastRows(perRow: Float64Array, mask: Values, B: number, T: number): Float64Array {
  const out = new Float64Array(B * T);
  for (let b = 0; b < B; b++)
    for (let t = 0; t < T; t++) if (mask[b * T + t] === 1) out[b * T + t] = perRow[b];
  return out;
}

export interface GrpoArgs {
  tokenRewards: Values;
  mask: Values;
  outMask?: Values;
  index: Values;
  B: number;
  T: number;
  normByStd?: boolean;
  epsilon?: number;
}

/**
 * verl compute_grpo_outcome_advantage. score = Σ_t tokenRewards of the row; per group
 * (score − mean)/(std + ε) with torch.std's unbiased std (ε on the std); a group of one has mean 0 and
 * std 1. normByStd=false is Dr.GRPO: score − mean. Broadcast to the row's policy tokens (and its
 * outMask positions); returns = advantages. Same as verl.
 */
export function computeGrpoOutcomeAdvantage(args: GrpoArgs): AdvantageResult {
  const { tokenRewards, mask, index, B, T, normByStd = true, epsilon = 1e-6 } = args;
  checkShape(B, T);
  checkLength('tokenRewards', tokenRewards, B * T);
  checkMask(mask, B * T);
  checkIndex(index, B);
  checkFinite('epsilon', epsilon);
  const scores = rowScores(tokenRewards, B, T);
  const perRow = new Float64Array(B);
  for (const rows of groupRows(index, B)) {
    const G = rows.length;
    let mean = 0;
    let std = 1;
    if (G > 1) {
      for (const b of rows) mean += scores[b];
      mean /= G;
      let ss = 0;
      for (const b of rows) ss += (scores[b] - mean) * (scores[b] - mean);
      std = Math.sqrt(ss / (G - 1));
    }
    for (const b of rows) perRow[b] = normByStd ? (scores[b] - mean) / (std + epsilon) : scores[b] - mean;
  }
  const advantages = broadcastRows(perRow, writtenPositions(mask, args.outMask, B * T), B, T);
  return { advantages, returns: advantages.slice() };
}

/**
 * DAPO's dynamic-sampling filter (verl's DAPO recipe, `algorithm.filter_groups`), without its
 * re-sampling: which rows to keep for the update, from each row's score (the sum of its token rewards,
 * as GRPO sums them) and group id. A group whose scores are all equal (std 0) has GRPO, Dr.GRPO and RLOO
 * advantage exactly 0 on every token: it would train only the KL and entropy terms and dilute the
 * loss's token mean, so it is dropped. A group of one is kept, as in DAPO (its GRPO advantage is its
 * score). Equality is exact, as DAPO's `std > 0`; a NaN score counts as a spread, so the group reaches
 * the loss and the trainer's non-finite check skips the step.
 */
export function groupsWithScoreSpread(scores: Values, index: Values): boolean[] {
  const B = scores.length;
  checkIndex(index, B);
  const keep = new Array<boolean>(B).fill(false);
  for (const rows of groupRows(index, B)) {
    const spread = rows.length === 1 || rows.some((b) => scores[b] !== scores[rows[0]]);
    for (const b of rows) keep[b] = spread;
  }
  return keep;
}

export interface GroupArgs {
  tokenRewards: Values;
  mask: Values;
  outMask?: Values;
  index: Values;
  B: number;
  T: number;
}

/**
 * verl compute_rloo_outcome_advantage: score − mean of the other samples of the group; a group of one
 * keeps its score. verl writes it G/(G−1)·score − G/(G−1)·mean; here the leave-one-out mean
 * (Σ − score)/(G − 1) directly (equal in exact arithmetic; exactly 0 for equal scores).
 * Broadcast to policy tokens (and outMask positions); returns = advantages.
 */
export function computeRlooOutcomeAdvantage(args: GroupArgs): AdvantageResult {
  const { tokenRewards, mask, index, B, T } = args;
  checkShape(B, T);
  checkLength('tokenRewards', tokenRewards, B * T);
  checkMask(mask, B * T);
  checkIndex(index, B);
  const scores = rowScores(tokenRewards, B, T);
  const perRow = new Float64Array(B);
  for (const rows of groupRows(index, B)) {
    const G = rows.length;
    let sum = 0;
    for (const b of rows) sum += scores[b];
    for (const b of rows) perRow[b] = G > 1 ? scores[b] - (sum - scores[b]) / (G - 1) : scores[b];
  }
  const advantages = broadcastRows(perRow, writtenPositions(mask, args.outMask, B * T), B, T);
  return { advantages, returns: advantages.slice() };
}

export interface ReinforcePlusPlusArgs {
  tokenRewards: Values;
  mask: Values;
  outMask?: Values;
  B: number;
  T: number;
  gamma: number;
}

/**
 * verl compute_reinforce_plus_plus_outcome_advantage, with Agent-R1's multi-turn compaction: the
 * discounted return runs backwards over the row's policy tokens only, γ advancing once per policy
 * token, and is NOT reset at mask=0 positions (verl resets it there, which would stop a later turn's
 * reward from reaching an earlier turn). Rewards at mask=0 positions are not read. Then masked
 * whitening over the batch. returns = the unwhitened return; at an outMask position outside the mask,
 * the return carried from the next policy token (whitened with the mask's statistics); 0 outside
 * mask ∪ outMask.
 */
export function computeReinforcePlusPlusOutcomeAdvantage(args: ReinforcePlusPlusArgs): AdvantageResult {
  const { tokenRewards, mask, B, T, gamma } = args;
  checkShape(B, T);
  const N = B * T;
  checkLength('tokenRewards', tokenRewards, N);
  checkMask(mask, N);
  const written = writtenPositions(mask, args.outMask, N);
  checkFinite('gamma', gamma);
  const returns = new Float64Array(N);
  for (let b = 0; b < B; b++) {
    let running = 0;
    for (let t = T - 1; t >= 0; t--) {
      const i = b * T + t;
      if (mask[i] === 1) running = tokenRewards[i] + gamma * running;
      if (written[i] === 1) returns[i] = running;
    }
  }
  const { whitened, skipped } = maskedWhitenWithInfo(returns, mask, true, written);
  return { advantages: whitened, returns, whitenSkipped: skipped };
}

/**
 * verl compute_reinforce_plus_plus_baseline_outcome_advantage: score − group mean (a group of one:
 * mean 0), broadcast to policy tokens (and outMask positions), then whitening with the statistics of
 * all policy tokens of the batch. returns = advantages (as verl). Same as verl.
 */
export function computeReinforcePlusPlusBaselineOutcomeAdvantage(args: GroupArgs): AdvantageResult {
  const { tokenRewards, mask, index, B, T } = args;
  checkShape(B, T);
  checkLength('tokenRewards', tokenRewards, B * T);
  checkMask(mask, B * T);
  checkIndex(index, B);
  const scores = rowScores(tokenRewards, B, T);
  const perRow = new Float64Array(B);
  for (const rows of groupRows(index, B)) {
    let mean = 0;
    if (rows.length > 1) {
      for (const b of rows) mean += scores[b];
      mean /= rows.length;
    }
    for (const b of rows) perRow[b] = scores[b] - mean;
  }
  const written = writtenPositions(mask, args.outMask, B * T);
  const { whitened, skipped } = maskedWhitenWithInfo(
    broadcastRows(perRow, written, B, T),
    mask,
    true,
    written,
  );
  return { advantages: whitened, returns: whitened.slice(), whitenSkipped: skipped };
}

// ---------------------------------------------------------------------------------------------
// KL.

/**
 * verl kl_penalty for 'k1' (logp − ref), 'k2' (½(logp − ref)²) and 'k3' (low_var_kl:
 * d = clamp(ref − logp, ±20), clamp(exp(d) − d − 1, ±10)), per token over all N positions, with its
 * derivative with respect to logprob (0 where a clamp is active, as autograd gives; clamps pass the
 * gradient at their bounds).
 */
export function klPenalty(
  logprob: Values,
  refLogprob: Values,
  kind: KlKind,
): { kl: Float64Array; gradLogprob: Float64Array } {
  checkKind(kind);
  checkLength('refLogprob', refLogprob, logprob.length);
  const n = logprob.length;
  const kl = new Float64Array(n);
  const grad = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const diff = logprob[i] - refLogprob[i];
    if (kind === 'k1') {
      kl[i] = diff;
      grad[i] = 1;
    } else if (kind === 'k2') {
      kl[i] = 0.5 * diff * diff;
      grad[i] = diff;
    } else {
      const raw = refLogprob[i] - logprob[i];
      const d = Math.min(20, Math.max(-20, raw));
      const kld = Math.exp(d) - d - 1;
      kl[i] = Math.min(10, Math.max(-10, kld));
      // d kld / d logprob = (exp(d) − 1)·(d d / d logprob) = (1 − exp(d)) inside both clamps.
      const inside = raw >= -20 && raw <= 20 && kld >= -10 && kld <= 10;
      grad[i] = inside ? 1 - Math.exp(d) : 0;
    }
  }
  return { kl, gradLogprob: grad };
}

export interface KlRewardArgs {
  tokenRewards: Values;
  logprob: Values;
  refLogprob: Values;
  mask: Values;
  beta: number;
  kind: KlKind;
}

/**
 * verl apply_kl_penalty (the in-reward KL): tokenRewards − β·k(logprob, ref)·mask. verl passes the
 * rollout's (old) log-probs as `logprob`. Positions with mask=0 keep their reward unchanged.
 */
export function applyKlPenaltyToRewards(args: KlRewardArgs): Float64Array {
  const { tokenRewards, logprob, refLogprob, mask, beta, kind } = args;
  const n = tokenRewards.length;
  checkLength('logprob', logprob, n);
  checkLength('refLogprob', refLogprob, n);
  checkMask(mask, n);
  checkFinite('beta', beta);
  const { kl } = klPenalty(logprob, refLogprob, kind);
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = mask[i] === 1 ? tokenRewards[i] - beta * kl[i] : tokenRewards[i];
  return out;
}

// ---------------------------------------------------------------------------------------------
// Loss aggregation.

interface AggDenominators {
  tokens: number;
  rows: number;
  maxLen: number;
  rowTokens: Float64Array;
}

function aggDenominators(mask: Values, B: number, T: number, globals?: AggGlobals): AggDenominators {
  const rowTokens = new Float64Array(B);
  let tokens = 0;
  let rows = 0;
  for (let b = 0; b < B; b++) {
    let n = 0;
    for (let t = 0; t < T; t++) n += mask[b * T + t] === 1 ? 1 : 0;
    rowTokens[b] = n;
    tokens += n;
    rows += n > 0 ? 1 : 0;
  }
  if (globals) return { tokens: globals.tokens, rows: globals.rows, maxLen: globals.maxLen, rowTokens };
  return { tokens, rows, maxLen: T, rowTokens };
}

function checkAgg(mask: Values, B: number, T: number, mode: string, globals?: AggGlobals): void {
  checkShape(B, T);
  checkMask(mask, B * T);
  checkMode(mode);
  checkGlobals(globals);
}

/**
 * d aggLoss / d lossMat[i] per token: the weight each active token's loss enters the scalar with
 * (aggLoss = Σ_i weight[i]·lossMat[i] over active tokens). 0 at mask=0 positions, and everywhere when
 * the denominator is 0 (the guarded empty batch).
 */
export function aggLossWeights(
  mask: Values,
  B: number,
  T: number,
  mode: LossAggMode,
  globals?: AggGlobals,
): Float64Array {
  checkAgg(mask, B, T, mode, globals);
  const d = aggDenominators(mask, B, T, globals);
  const w = new Float64Array(B * T);
  for (let b = 0; b < B; b++) {
    let rowWeight = 0;
    if (mode === 'token-mean') rowWeight = d.tokens > 0 ? 1 / d.tokens : 0;
    else if (mode === 'seq-mean-token-sum') rowWeight = d.rows > 0 ? 1 / d.rows : 0;
    else if (mode === 'seq-mean-token-mean')
      rowWeight = d.rows > 0 && d.rowTokens[b] > 0 ? 1 / (d.rowTokens[b] * d.rows) : 0;
    else rowWeight = d.maxLen > 0 ? 1 / d.maxLen : 0;
    for (let t = 0; t < T; t++) if (mask[b * T + t] === 1) w[b * T + t] = rowWeight;
  }
  return w;
}

/**
 * verl agg_loss (with its global-batch denominators, here `globals`):
 *   token-mean:              Σ active / tokens
 *   seq-mean-token-sum:      Σ_rows (row sum) / rows            (rows = non-empty rows)
 *   seq-mean-token-mean:     Σ_rows (row sum / row tokens) / rows, empty rows excluded
 *   seq-mean-token-sum-norm: Σ active / maxLen                  (not divided by the rows: Dr.GRPO)
 * Defaults come from this batch (maxLen = T). A zero denominator gives 0 (verl has no guard on
 * token-mean; seq-mean-token-mean uses the exact row count, where verl adds 1e-8 to it).
 */
export function aggLoss(
  lossMat: Values,
  mask: Values,
  B: number,
  T: number,
  mode: LossAggMode,
  globals?: AggGlobals,
): number {
  checkAgg(mask, B, T, mode, globals);
  checkLength('lossMat', lossMat, B * T);
  const d = aggDenominators(mask, B, T, globals);
  let total = 0;
  for (let b = 0; b < B; b++) {
    let rowSum = 0;
    for (let t = 0; t < T; t++) if (mask[b * T + t] === 1) rowSum += lossMat[b * T + t];
    if (mode === 'seq-mean-token-mean') total += d.rowTokens[b] > 0 ? rowSum / d.rowTokens[b] : 0;
    else total += rowSum;
  }
  const denom = mode === 'token-mean' ? d.tokens : mode === 'seq-mean-token-sum-norm' ? d.maxLen : d.rows;
  return denom > 0 ? total / denom : 0;
}

// ---------------------------------------------------------------------------------------------
// Losses. Each takes the model's outputs and returns the scalar and its per-token gradient.

export interface PolicyLossArgs {
  oldLogprob: Values;
  logprob: Values;
  advantages: Values;
  mask: Values;
  B: number;
  T: number;
  clipRatioLow?: number;
  clipRatioHigh?: number;
  clipRatioC?: number;
  mode?: LossAggMode;
  globals?: AggGlobals;
}

export interface PolicyLossResult {
  loss: number;
  /** d loss / d logprob [N]. */
  gradLogprob: Float64Array;
  /** Fraction of active tokens where the ε-clipped loss is strictly larger (verl pg_clipfrac). */
  clipfrac: number;
  /** Fraction of active tokens where the dual clip is active (A < 0, verl pg_clipfrac_lower). */
  clipfracLower: number;
  /** masked_mean(old − new) of the clamped log-ratio (verl ppo_kl). */
  ppoKl: number;
  /** Importance ratio per token [N], 0 at mask=0. */
  ratio: Float64Array;
  /** The per-token loss before aggregation [N], 0 at mask=0. */
  lossMat: Float64Array;
}

function checkPolicyInputs(
  a: { oldLogprob: Values; logprob: Values; advantages: Values; mask: Values; B: number; T: number },
  mode: string,
  globals?: AggGlobals,
): void {
  checkAgg(a.mask, a.B, a.T, mode, globals);
  const N = a.B * a.T;
  checkLength('oldLogprob', a.oldLogprob, N);
  checkLength('logprob', a.logprob, N);
  checkLength('advantages', a.advantages, N);
}

function checkClipRatios(low: number, high: number): void {
  checkFinite('clipRatioLow', low);
  checkFinite('clipRatioHigh', high);
  if (low < 0 || low >= 1) throw new RlInputError(`clipRatioLow must be in [0, 1), got ${low}`);
  if (high < 0) throw new RlInputError(`clipRatioHigh must be >= 0, got ${high}`);
}

/** d max(a, b) / d a under torch.maximum's rule (half at a tie); for the min use it with the signs flipped. */
function maxShare(a: number, b: number): number {
  return a > b ? 1 : a < b ? 0 : 0.5;
}

/**
 * verl compute_policy_loss_vanilla (PPO clip with dual clip). Per active token:
 *   r = exp(clamp(logprob − old, ±20)); L1 = −A·r; L2 = −A·clip(r, 1 − εlow, 1 + εhigh)
 *   ℓ = max(L1, L2), and where A < 0: min(−A·c, max(L1, L2)).
 * clipfrac counts L2 > L1 strictly; clipfracLower counts max(L1, L2) > −A·c where A < 0.
 * Gradient: autograd's. At a tie L1 = L2, torch.maximum gives half to each branch and both branches
 * then have the gradient −A·r (the ratio sits on a clip bound, where torch.clamp passes it, or A = 0),
 * so a tie takes the unclipped branch's gradient. At a dual-clip tie max(L1, L2) = −A·c, torch.minimum
 * gives half of it (−A·c is constant): reproduced here. Same as verl.
 */
export function computePolicyLoss(args: PolicyLossArgs): PolicyLossResult {
  const {
    oldLogprob,
    logprob,
    advantages,
    mask,
    B,
    T,
    clipRatioLow = 0.2,
    clipRatioHigh = 0.2,
    clipRatioC = 3,
    mode = 'token-mean',
    globals,
  } = args;
  checkPolicyInputs(args, mode, globals);
  checkClipRatios(clipRatioLow, clipRatioHigh);
  checkFinite('clipRatioC', clipRatioC);
  if (clipRatioC <= 1) throw new RlInputError(`clipRatioC must be > 1 (verl asserts it), got ${clipRatioC}`);
  const N = B * T;
  const lo = 1 - clipRatioLow;
  const hi = 1 + clipRatioHigh;
  const lossMat = new Float64Array(N);
  const dLossDLogprob = new Float64Array(N); // d ℓ_i / d logprob_i before aggregation
  const ratio = new Float64Array(N);
  let clipped = 0;
  let clippedLower = 0;
  let klSum = 0;
  let active = 0;
  for (let i = 0; i < N; i++) {
    if (mask[i] !== 1) continue;
    active++;
    const A = advantages[i];
    const logRatioRaw = logprob[i] - oldLogprob[i];
    const logRatio = Math.min(20, Math.max(-20, logRatioRaw));
    const r = Math.exp(logRatio);
    const dRatio = logRatioRaw >= -20 && logRatioRaw <= 20 ? r : 0; // d r / d logprob
    ratio[i] = r;
    klSum -= logRatio; // old − new; 0 − 0 stays +0
    const rClip = Math.min(hi, Math.max(lo, r));
    const l1 = -A * r;
    const l2 = -A * rClip;
    const dl1 = -A; // d L1 / d r
    const dl2 = r >= lo && r <= hi ? -A : 0;
    const clip1 = Math.max(l1, l2);
    const dClip1 = maxShare(l1, l2) * dl1 + maxShare(l2, l1) * dl2;
    if (l2 > l1) clipped++;
    let loss = clip1;
    let dLoss = dClip1;
    if (A < 0) {
      const l3 = -A * clipRatioC;
      if (clip1 > l3) clippedLower++;
      loss = Math.min(l3, clip1);
      dLoss = maxShare(l3, clip1) * dClip1; // min(l3, clip1): clip1's share is 1 when it is smaller
    }
    lossMat[i] = loss;
    dLossDLogprob[i] = dLoss * dRatio;
  }
  const w = aggLossWeights(mask, B, T, mode, globals);
  const gradLogprob = new Float64Array(N);
  for (let i = 0; i < N; i++) gradLogprob[i] = w[i] * dLossDLogprob[i];
  const denom = active + 1e-8;
  return {
    loss: aggLoss(lossMat, mask, B, T, mode, globals),
    gradLogprob,
    clipfrac: clipped / denom,
    clipfracLower: clippedLower / denom,
    ppoKl: klSum / denom,
    ratio,
    lossMat,
  };
}

export interface GspoLossArgs {
  oldLogprob: Values;
  logprob: Values;
  advantages: Values;
  mask: Values;
  B: number;
  T: number;
  clipRatioLow: number;
  clipRatioHigh: number;
  globals?: AggGlobals;
}

/**
 * verl compute_policy_loss_gspo (GSPO-token). Per row the sequence log-ratio is the mean of
 * logprob − old over its active tokens (divided by max(n, 1)); the token ratio has the value
 * s = exp(min(that, 10)) and, through verl's stop-gradient construction
 * logprob − sg(logprob) + sg(seq log-ratio), the gradient d s_t / d logprob_t = s (0 above the clamp);
 * the log-ratio is not clamped at ±20. ℓ = max(−A·s, −A·clip(s, 1 − εlow, 1 + εhigh)), always
 * aggregated seq-mean-token-mean. With an advantage constant over the row (outcome estimators) this
 * gradient equals the true derivative of the loss. Same as verl.
 */
export function computeGspoPolicyLoss(args: GspoLossArgs): Omit<PolicyLossResult, 'clipfracLower'> {
  const { oldLogprob, logprob, advantages, mask, B, T, clipRatioLow, clipRatioHigh, globals } = args;
  const mode: LossAggMode = 'seq-mean-token-mean';
  checkPolicyInputs(args, mode, globals);
  checkClipRatios(clipRatioLow, clipRatioHigh);
  const N = B * T;
  const lo = 1 - clipRatioLow;
  const hi = 1 + clipRatioHigh;
  const lossMat = new Float64Array(N);
  const dLossDLogprob = new Float64Array(N);
  const ratio = new Float64Array(N);
  let clipped = 0;
  let klSum = 0;
  let active = 0;
  for (let b = 0; b < B; b++) {
    let n = 0;
    let sum = 0;
    for (let t = 0; t < T; t++) {
      const i = b * T + t;
      if (mask[i] !== 1) continue;
      n++;
      sum += logprob[i] - oldLogprob[i];
    }
    const seqLogRatio = sum / Math.max(n, 1);
    const s = Math.exp(Math.min(seqLogRatio, 10));
    const dS = seqLogRatio <= 10 ? s : 0;
    for (let t = 0; t < T; t++) {
      const i = b * T + t;
      if (mask[i] !== 1) continue;
      active++;
      klSum += oldLogprob[i] - logprob[i];
      const A = advantages[i];
      ratio[i] = s;
      const l1 = -A * s;
      const l2 = -A * Math.min(hi, Math.max(lo, s));
      const dl2 = s >= lo && s <= hi ? -A : 0;
      if (l2 > l1) clipped++;
      lossMat[i] = Math.max(l1, l2);
      dLossDLogprob[i] = (maxShare(l1, l2) * -A + maxShare(l2, l1) * dl2) * dS;
    }
  }
  const w = aggLossWeights(mask, B, T, mode, globals);
  const gradLogprob = new Float64Array(N);
  for (let i = 0; i < N; i++) gradLogprob[i] = w[i] * dLossDLogprob[i];
  const denom = active + 1e-8;
  return {
    loss: aggLoss(lossMat, mask, B, T, mode, globals),
    gradLogprob,
    clipfrac: clipped / denom,
    ppoKl: klSum / denom,
    ratio,
    lossMat,
  };
}

export interface CispoLossArgs {
  oldLogprob: Values;
  logprob: Values;
  advantages: Values;
  mask: Values;
  B: number;
  T: number;
  clipRatioLow: number;
  clipRatioHigh: number;
  mode?: LossAggMode;
  globals?: AggGlobals;
}

/**
 * verl compute_policy_loss_cispo: ℓ = −sg(clip(r, 1 − εlow, 1 + εhigh))·A·logprob with
 * r = exp(clamp(logprob − old, ±20)); the clipped ratio is detached, so d ℓ / d logprob = −clip(r)·A
 * everywhere (clipped tokens still get a gradient, which is CISPO's point). clipfrac counts tokens whose
 * ratio lies outside the clip range.
 */
export function computeCispoPolicyLoss(args: CispoLossArgs): Omit<PolicyLossResult, 'clipfracLower'> {
  const {
    oldLogprob,
    logprob,
    advantages,
    mask,
    B,
    T,
    clipRatioLow,
    clipRatioHigh,
    mode = 'token-mean',
    globals,
  } = args;
  checkPolicyInputs(args, mode, globals);
  checkClipRatios(clipRatioLow, clipRatioHigh);
  const N = B * T;
  const lo = 1 - clipRatioLow;
  const hi = 1 + clipRatioHigh;
  const lossMat = new Float64Array(N);
  const dLossDLogprob = new Float64Array(N);
  const ratio = new Float64Array(N);
  let clipped = 0;
  let klSum = 0;
  let active = 0;
  for (let i = 0; i < N; i++) {
    if (mask[i] !== 1) continue;
    active++;
    const logRatio = Math.min(20, Math.max(-20, logprob[i] - oldLogprob[i]));
    const r = Math.exp(logRatio);
    ratio[i] = r;
    klSum -= logRatio; // old − new; 0 − 0 stays +0
    if (r < lo || r > hi) clipped++;
    const rClip = Math.min(hi, Math.max(lo, r));
    lossMat[i] = -rClip * advantages[i] * logprob[i];
    dLossDLogprob[i] = -rClip * advantages[i];
  }
  const w = aggLossWeights(mask, B, T, mode, globals);
  const gradLogprob = new Float64Array(N);
  for (let i = 0; i < N; i++) gradLogprob[i] = w[i] * dLossDLogprob[i];
  const denom = active + 1e-8;
  return {
    loss: aggLoss(lossMat, mask, B, T, mode, globals),
    gradLogprob,
    clipfrac: clipped / denom,
    ppoKl: klSum / denom,
    ratio,
    lossMat,
  };
}

export interface EntropyLossArgs {
  entropy: Values;
  mask: Values;
  B: number;
  T: number;
  mode?: LossAggMode;
  globals?: AggGlobals;
}

/**
 * verl compute_entropy_loss / the actor's agg_loss(entropy): the aggregated token entropy (the caller
 * subtracts entropy_coeff times it). gradEntropy = d loss / d entropy = the aggregation weights.
 */
export function computeEntropyLoss(args: EntropyLossArgs): { loss: number; gradEntropy: Float64Array } {
  const { entropy, mask, B, T, mode = 'token-mean', globals } = args;
  checkAgg(mask, B, T, mode, globals);
  checkLength('entropy', entropy, B * T);
  return {
    loss: aggLoss(entropy, mask, B, T, mode, globals),
    gradEntropy: aggLossWeights(mask, B, T, mode, globals),
  };
}

export interface KlLossArgs {
  logprob: Values;
  refLogprob: Values;
  mask: Values;
  B: number;
  T: number;
  kind: KlKind;
  mode?: LossAggMode;
  globals?: AggGlobals;
}

/** The actor's KL loss (use_kl_loss): agg_loss(kl_penalty(logprob, ref, kind)). Same as verl. */
export function computeKlLoss(args: KlLossArgs): { loss: number; gradLogprob: Float64Array } {
  const { logprob, refLogprob, mask, B, T, kind, mode = 'token-mean', globals } = args;
  checkAgg(mask, B, T, mode, globals);
  checkLength('logprob', logprob, B * T);
  checkLength('refLogprob', refLogprob, B * T);
  const { kl, gradLogprob: dKl } = klPenalty(logprob, refLogprob, kind);
  const w = aggLossWeights(mask, B, T, mode, globals);
  const gradLogprob = new Float64Array(B * T);
  for (let i = 0; i < B * T; i++) gradLogprob[i] = w[i] * dKl[i];
  return { loss: aggLoss(kl, mask, B, T, mode, globals), gradLogprob };
}

export interface ValueLossArgs {
  vpreds: Values;
  oldValues: Values;
  returns: Values;
  mask: Values;
  B: number;
  T: number;
  clipRangeValue?: number;
  mode?: LossAggMode;
  globals?: AggGlobals;
}

/**
 * verl compute_value_loss: 0.5·agg(max((v − R)², (clip(v, old ± c) − R)²)), the 0.5 outside agg.
 * clipfrac counts the clipped loss strictly larger. Gradient: autograd's, with torch.maximum's half
 * split at a tie; the clip passes the gradient at its bounds (torch.clamp; verl's clip_by_value is a
 * torch.max/min pair that would give half there, a measure-zero difference).
 */
export function computeValueLoss(args: ValueLossArgs): {
  loss: number;
  gradVpreds: Float64Array;
  clipfrac: number;
  lossMat: Float64Array;
} {
  const { vpreds, oldValues, returns, mask, B, T, clipRangeValue = 0.2, mode = 'token-mean', globals } = args;
  checkAgg(mask, B, T, mode, globals);
  const N = B * T;
  checkLength('vpreds', vpreds, N);
  checkLength('oldValues', oldValues, N);
  checkLength('returns', returns, N);
  checkFinite('clipRangeValue', clipRangeValue);
  if (clipRangeValue < 0) throw new RlInputError(`clipRangeValue must be >= 0, got ${clipRangeValue}`);
  const lossMat = new Float64Array(N);
  const dLoss = new Float64Array(N);
  let clipped = 0;
  let active = 0;
  for (let i = 0; i < N; i++) {
    if (mask[i] !== 1) continue;
    active++;
    const v = vpreds[i];
    const lo = oldValues[i] - clipRangeValue;
    const hi = oldValues[i] + clipRangeValue;
    const vClip = Math.min(hi, Math.max(lo, v));
    const l1 = (v - returns[i]) ** 2;
    const l2 = (vClip - returns[i]) ** 2;
    const dl1 = 2 * (v - returns[i]);
    const dl2 = v >= lo && v <= hi ? 2 * (vClip - returns[i]) : 0;
    if (l2 > l1) clipped++;
    lossMat[i] = Math.max(l1, l2);
    dLoss[i] = maxShare(l1, l2) * dl1 + maxShare(l2, l1) * dl2;
  }
  const w = aggLossWeights(mask, B, T, mode, globals);
  const gradVpreds = new Float64Array(N);
  for (let i = 0; i < N; i++) gradVpreds[i] = 0.5 * w[i] * dLoss[i];
  return {
    loss: 0.5 * aggLoss(lossMat, mask, B, T, mode, globals),
    gradVpreds,
    clipfrac: clipped / (active + 1e-8),
    lossMat,
  };
}
