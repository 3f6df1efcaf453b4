// One RL step's per-token arrays, written by a run with train.saveArrays (arrays/step-XXXXXX.json), and
// the advantage-mask comparison that reads them (`npm run probe:adv-mask`).
//
// Position i of a row scores token i + 1 (the batch's convention, src/rl/batch.ts). A row keeps its real
// positions only (L − 1 for an episode of L tokens), so a file holds what the step's estimator read
// (rewards, the critic's values, the mask it ran over) and what it gave (the advantages), per token.
//
// The comparison answers "how different are the advantages with and without the advantage mask, on the
// same rollout and the same critic": it runs the CPU twin of GAE (core-algos.ts) over the policy's tokens
// (Agent-R1's mask) and over every response token (the ablation), whitens each over its own mask as the
// trainer does, and compares the two on the policy's tokens, the only ones the loss reads. The run's own
// arm is also checked against the advantages the GPU kernel produced in the run.

import { computeGaeAdvantageReturn } from './core-algos.ts';
import type { UpdateArrays } from './trainer.ts';

export const STEP_ARRAYS_FORMAT = 'agent-r1-lab/step-arrays@1';

export interface StepArraysRow {
  /** Group id (the question). */
  group: number;
  /** Real positions of the row (the episode's tokens − 1). */
  length: number;
  /** First position whose target is not a prompt token: the response is [firstResponse, length). */
  firstResponse: number;
  /** One character per position: '1' where the target is a token the policy sampled. */
  policy: string;
  /** One character per position: '1' where the run's advantage estimator ran. */
  advMask: string;
  /** [position, reward] where the token reward is not 0. */
  rewards: Array<[number, number]>;
  /** The critic's values before the update (PPO), or null. */
  values: number[] | null;
  /** The advantages the run's update read. */
  advantages: number[];
}

export interface StepArraysFile {
  format: typeof STEP_ARRAYS_FORMAT;
  step: number;
  rows: StepArraysRow[];
}

/** float32 → 9 significant digits, which read back (Math.fround, parseStepArrays) as the same float32. */
function f32(x: number): number {
  return x === 0 ? 0 : Number(x.toPrecision(9));
}

/** The step file of one RL step's update arrays. */
export function stepArraysFile(
  step: number,
  a: Pick<UpdateArrays, 'batch' | 'advantages' | 'values'>,
): StepArraysFile {
  const { batch } = a;
  const { B, T } = batch;
  const rows: StepArraysRow[] = [];
  for (let b = 0; b < B; b++) {
    let tokens = 0;
    for (let t = 0; t < T; t++) if (batch.tokens.seg[b * T + t] !== 0) tokens++;
    const length = Math.max(0, tokens - 1);
    const at = (x: ArrayLike<number>, j: number) => x[b * T + j];
    let policy = '';
    let advMask = '';
    const rewards: Array<[number, number]> = [];
    const advantages: number[] = [];
    const values: number[] | null = a.values ? [] : null;
    let firstResponse = length;
    for (let j = 0; j < length; j++) {
      const isPolicy = at(batch.policyMask, j) > 0;
      policy += isPolicy ? '1' : '0';
      advMask += at(batch.advMask, j) > 0 ? '1' : '0';
      const r = at(batch.rewards, j);
      if (r !== 0) rewards.push([j, f32(r)]);
      advantages.push(f32(at(a.advantages, j)));
      if (values && a.values) values.push(f32(at(a.values, j)));
    }
    // The prompt is a prefix and the response begins with the policy's first turn, so the first response
    // position is the first one the policy or the estimator's mask touches (the batch stores no sources).
    const firstPolicy = policy.indexOf('1');
    const firstAdv = advMask.indexOf('1');
    const candidates = [firstPolicy, firstAdv].filter((j) => j >= 0);
    if (candidates.length > 0) firstResponse = Math.min(...candidates);
    rows.push({ group: batch.index[b], length, firstResponse, policy, advMask, rewards, values, advantages });
  }
  return { format: STEP_ARRAYS_FORMAT, step, rows };
}

/** Parses and checks a step file; the error names what is wrong. */
export function parseStepArrays(text: string, name = 'step arrays'): StepArraysFile {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`${name}: not JSON (${(e as Error).message})`);
  }
  const f = raw as StepArraysFile;
  if (f === null || typeof f !== 'object' || f.format !== STEP_ARRAYS_FORMAT)
    throw new Error(`${name}: not a step-arrays file (format must be "${STEP_ARRAYS_FORMAT}")`);
  if (!Array.isArray(f.rows) || f.rows.length === 0) throw new Error(`${name}: no rows`);
  f.rows.forEach((r, b) => {
    const n = r.length;
    const ok =
      Number.isInteger(n) &&
      n >= 0 &&
      typeof r.policy === 'string' &&
      r.policy.length === n &&
      typeof r.advMask === 'string' &&
      r.advMask.length === n &&
      Array.isArray(r.advantages) &&
      r.advantages.length === n &&
      (r.values === null || (Array.isArray(r.values) && r.values.length === n)) &&
      Array.isArray(r.rewards) &&
      r.rewards.every((p) => Array.isArray(p) && Number.isInteger(p[0]) && p[0] >= 0 && p[0] < n);
    if (!ok) throw new Error(`${name}: row ${b} is malformed (its arrays must all hold ${n} positions)`);
    // back to the float32 values the run held (the file's 9 significant digits round-trip through float32)
    r.advantages = r.advantages.map(Math.fround);
    if (r.values) r.values = r.values.map(Math.fround);
    r.rewards = r.rewards.map(([j, x]) => [j, Math.fround(x)]);
  });
  return f;
}

/** How the two estimators' advantages compare on one set of policy tokens. */
export interface AdvantagePairStats {
  /** Policy tokens in the set. */
  tokens: number;
  /** Mean |advantage| with the mask (GAE over the policy's tokens) and without (over every response token). */
  meanAbsMasked: number;
  meanAbsUnmasked: number;
  /** Pearson correlation of the two over the set (NaN when either is constant). */
  correlation: number;
  /** Share of the set where the two have the same sign (0 counts as its own sign). */
  signAgreement: number;
  /**
   * Pearson correlation of each arm's advantage with its episode's reward (the sum of the row's token
   * rewards): how much of the outcome reaches these tokens (NaN when either is constant).
   */
  rewardCorrelationMasked: number;
  rewardCorrelationUnmasked: number;
}

export interface AdvantageMaskComparison {
  step: number;
  rows: number;
  /** Which arm the run itself was: its mask equal to the policy's tokens, to every response token, or neither. */
  runArm: 'masked' | 'unmasked' | 'other';
  /** max |GPU advantage − CPU twin of the run's arm| on the policy's tokens (NaN for 'other'). */
  gpuVsCpuMaxAbs: number;
  /** Whether the file had the critic's values (PPO); without, both estimators read values of 0. */
  hasValues: boolean;
  /** Mean and standard deviation of the raw (unwhitened) advantages over each arm's whitening mask. */
  whitening: { masked: { mean: number; std: number }; unmasked: { mean: number; std: number } };
  /** The policy's tokens of each episode's last turn, of its earlier turns, and all of them. */
  lastTurn: AdvantagePairStats;
  earlierTurns: AdvantagePairStats;
  all: AdvantagePairStats;
}

function pearson(a: readonly number[], b: readonly number[]): number {
  const n = a.length;
  let sa = 0;
  let sb = 0;
  for (let i = 0; i < n; i++) {
    sa += a[i];
    sb += b[i];
  }
  const ma = sa / n;
  const mb = sb / n;
  let cov = 0;
  let va = 0;
  let vb = 0;
  for (let i = 0; i < n; i++) {
    cov += (a[i] - ma) * (b[i] - mb);
    va += (a[i] - ma) ** 2;
    vb += (b[i] - mb) ** 2;
  }
  return va > 0 && vb > 0 ? cov / Math.sqrt(va * vb) : Number.NaN;
}

/** a, b: the two arms' advantages on a set of tokens; reward: each token's episode reward. */
function pairStats(a: number[], b: number[], reward: number[]): AdvantagePairStats {
  const n = a.length;
  let absA = 0;
  let absB = 0;
  let agree = 0;
  for (let i = 0; i < n; i++) {
    absA += Math.abs(a[i]);
    absB += Math.abs(b[i]);
    if (Math.sign(a[i]) === Math.sign(b[i])) agree++;
  }
  return {
    tokens: n,
    meanAbsMasked: n > 0 ? absA / n : Number.NaN,
    meanAbsUnmasked: n > 0 ? absB / n : Number.NaN,
    correlation: pearson(a, b),
    signAgreement: n > 0 ? agree / n : Number.NaN,
    rewardCorrelationMasked: pearson(a, reward),
    rewardCorrelationUnmasked: pearson(b, reward),
  };
}

/** Unbiased mean and standard deviation of x over mask (as the whitening computes them). */
function maskedMoments(x: ArrayLike<number>, mask: ArrayLike<number>): { mean: number; std: number } {
  let n = 0;
  let s = 0;
  for (let i = 0; i < x.length; i++)
    if (mask[i] === 1) {
      n++;
      s += x[i];
    }
  const mean = s / n;
  let v = 0;
  for (let i = 0; i < x.length; i++) if (mask[i] === 1) v += (x[i] - mean) ** 2;
  return { mean, std: n > 1 ? Math.sqrt(v / (n - 1)) : Number.NaN };
}

/**
 * GAE with and without the advantage mask on one step's rollout, rewards and critic values (CPU float64
 * twin, whitened over each arm's own mask as the trainer does), compared on the policy's tokens.
 */
export function compareAdvantageMasks(
  file: StepArraysFile,
  options: { gamma: number; lam: number; whitenOver?: 'advantage-mask' | 'policy' },
): AdvantageMaskComparison {
  const { gamma, lam, whitenOver = 'advantage-mask' } = options;
  const B = file.rows.length;
  const T = Math.max(1, ...file.rows.map((r) => r.length));
  const N = B * T;
  const policy = new Float64Array(N);
  const response = new Float64Array(N);
  const runMask = new Float64Array(N);
  const rewards = new Float64Array(N);
  const values = new Float64Array(N);
  const gpu = new Float64Array(N);
  const hasValues = file.rows.every((r) => r.values !== null);
  let runIsPolicy = true;
  let runIsResponse = true;
  file.rows.forEach((r, b) => {
    for (let j = 0; j < r.length; j++) {
      const i = b * T + j;
      policy[i] = r.policy[j] === '1' ? 1 : 0;
      response[i] = j >= r.firstResponse ? 1 : 0;
      runMask[i] = r.advMask[j] === '1' ? 1 : 0;
      if (runMask[i] !== policy[i]) runIsPolicy = false;
      if (runMask[i] !== response[i]) runIsResponse = false;
      values[i] = r.values ? r.values[j] : 0;
      gpu[i] = r.advantages[j];
    }
    for (const [j, x] of r.rewards) rewards[b * T + j] += x;
  });
  const gae = (mask: Float64Array, whitenMask: Float64Array) => {
    const args = { tokenRewards: rewards, values, mask, B, T, gamma, lam };
    const raw = computeGaeAdvantageReturn({ ...args, whiten: false });
    const white = computeGaeAdvantageReturn({ ...args, whitenMask });
    return { raw: raw.advantages, white: white.advantages };
  };
  const masked = gae(policy, policy);
  // without the mask: whitened over every response token (verl's and Agent-R1's code), or over the
  // policy's tokens (ablation.whitenOver "policy")
  const unmaskedWhitenMask = whitenOver === 'policy' ? policy : response;
  const unmasked = gae(response, unmaskedWhitenMask);
  const runArm = runIsPolicy ? 'masked' : runIsResponse ? 'unmasked' : 'other';
  let gpuVsCpuMaxAbs = Number.NaN;
  if (runArm !== 'other') {
    const mine = runArm === 'masked' ? masked.white : unmasked.white;
    gpuVsCpuMaxAbs = 0;
    for (let i = 0; i < N; i++)
      if (policy[i] === 1) gpuVsCpuMaxAbs = Math.max(gpuVsCpuMaxAbs, Math.abs(gpu[i] - mine[i]));
  }
  const sets = { last: [[], [], []] as number[][], earlier: [[], [], []] as number[][] };
  file.rows.forEach((r, b) => {
    const reward = r.rewards.reduce((sum, [, x]) => sum + x, 0);
    // The last turn: the last run of policy positions (a turn's sampled ids are contiguous).
    const lastPolicy = r.policy.lastIndexOf('1');
    const lastTurnStart = lastPolicy < 0 ? r.length : r.policy.lastIndexOf('0', lastPolicy) + 1;
    for (let j = 0; j < r.length; j++) {
      const i = b * T + j;
      if (policy[i] !== 1) continue;
      const set = j >= lastTurnStart ? sets.last : sets.earlier;
      set[0].push(masked.white[i]);
      set[1].push(unmasked.white[i]);
      set[2].push(reward);
    }
  });
  return {
    step: file.step,
    rows: B,
    runArm,
    gpuVsCpuMaxAbs,
    hasValues,
    whitening: {
      masked: maskedMoments(masked.raw, policy),
      unmasked: maskedMoments(unmasked.raw, unmaskedWhitenMask),
    },
    lastTurn: pairStats(sets.last[0], sets.last[1], sets.last[2]),
    earlierTurns: pairStats(sets.earlier[0], sets.earlier[1], sets.earlier[2]),
    all: pairStats(
      [...sets.last[0], ...sets.earlier[0]],
      [...sets.last[1], ...sets.earlier[1]],
      [...sets.last[2], ...sets.earlier[2]],
    ),
  };
}
