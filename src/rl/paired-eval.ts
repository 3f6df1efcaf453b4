// Two checkpoints played on the same questions: is the difference in EM more than noise? Each question
// gives a pair of scores, so the right error is the paired one (the spread of the per-question
// differences), much smaller than two independent evaluations' when both models get the same easy
// questions right. The discordant counts are McNemar's: questions only the other model gets right
// against questions only the base gets right; the exact two-sided sign test on them gives p.
//
// Input: per-question scores in [0, 1] (EM is 0/1; F1 works too, then the counts mean "better" and
// "worse"), the two arrays in the same question order (scripts/compare-evals.ts checks the ids).

/**
 * The text of a per-question file, the kind `npm run compare` reads (`npm run train -- --evaluate-only
 * --json`, `npm run bench:passk -- --json`): the summary's keys indented, then "questions", one question
 * per line, so that a 400-question replay stays a few tens of kB and two files still diff question by
 * question.
 */
export function perQuestionFileText(summary: object, questions: readonly object[]): string {
  const head = JSON.stringify(summary, null, 2);
  const list = questions.map((q) => `    ${JSON.stringify(q)}`).join(',\n');
  return `${head.slice(0, -2)},\n  "questions": [\n${list}\n  ]\n}\n`;
}

export interface PairedComparison {
  n: number;
  baseMean: number;
  otherMean: number;
  /** otherMean − baseMean. */
  difference: number;
  /** Standard error of the difference: sample std (n − 1) of the per-question differences / √n. */
  pairedSe: number;
  /** Questions where the other model scores higher / lower than the base. */
  better: number;
  worse: number;
  /** Exact two-sided sign test on better vs worse (ties dropped): McNemar's exact test for 0/1 scores. */
  signTestP: number;
}

export function pairedComparison(base: readonly number[], other: readonly number[]): PairedComparison {
  const n = base.length;
  if (n === 0) throw new Error('pairedComparison: no questions');
  if (other.length !== n)
    throw new Error(`pairedComparison: ${n} base scores against ${other.length} others`);
  let sumBase = 0;
  let sumOther = 0;
  let better = 0;
  let worse = 0;
  const d: number[] = [];
  for (let i = 0; i < n; i++) {
    const a = base[i];
    const b = other[i];
    if (!(Number.isFinite(a) && Number.isFinite(b)))
      throw new Error(`pairedComparison: question ${i} has a non-finite score`);
    sumBase += a;
    sumOther += b;
    d.push(b - a);
    if (b > a) better++;
    else if (b < a) worse++;
  }
  const meanD = (sumOther - sumBase) / n;
  let ss = 0;
  for (const x of d) ss += (x - meanD) ** 2;
  const pairedSe = n > 1 ? Math.sqrt(ss / (n - 1) / n) : 0;
  return {
    n,
    baseMean: sumBase / n,
    otherMean: sumOther / n,
    difference: meanD,
    pairedSe,
    better,
    worse,
    signTestP: signTestTwoSided(better, worse),
  };
}

/** P(a result at least as unbalanced as k : m − k) under Binomial(m, ½), two-sided, capped at 1. */
export function signTestTwoSided(a: number, b: number): number {
  const m = a + b;
  if (m === 0) return 1;
  const k = Math.min(a, b);
  // Sum of C(m, i) / 2^m for i ≤ k, in logs so that m of several hundred stays finite.
  let logC = -m * Math.LN2; // log(C(m, 0) / 2^m)
  let tail = Math.exp(logC);
  for (let i = 1; i <= k; i++) {
    logC += Math.log((m - i + 1) / i);
    tail += Math.exp(logC);
  }
  return Math.min(1, 2 * tail);
}

// Several pairings of one ablation (with / without a mask, each pair from its own seed, all played on
// the same questions): is the effect more than the noise of checkpoints, and more than the noise of
// seeds? Two answers, because they answer different questions:
// - question by question: per question, the mean over the pairs of (other − base); the mean of those,
//   its standard error over questions, and the sign test on the questions whose net is not zero. This
//   is the checkpoints' noise only: it treats the trained runs as fixed. Pairs played on different
//   question sets (say one test world each; questionSets names each pair's set) are averaged within
//   their set and the sets' questions put side by side, so each question counts once.
// - pair by pair: the k differences in EM as k draws of the effect of the switch (one per seed); their
//   mean, sd / √k, and Student's t with k − 1 degrees of freedom. This counts the seed-to-seed spread,
//   which a single pairing cannot see; with two or three pairs it is wide.

export interface PooledPairedComparison {
  /** Pairs, and distinct questions (per pair when all share one question set). */
  k: number;
  n: number;
  pairs: PairedComparison[];
  questionLevel: {
    /** Mean over questions of the per-question mean difference (= the mean of the pairs' differences). */
    difference: number;
    /** Sample std (n − 1) of the per-question mean differences / √n. */
    se: number;
    /** Questions whose summed difference over the pairs is positive / negative. */
    better: number;
    worse: number;
    signTestP: number;
  };
  /** Null when k < 2 (no spread between pairs to measure). */
  pairLevel: OneSampleT | null;
}

export interface OneSampleT {
  mean: number;
  se: number;
  t: number;
  df: number;
  p: number;
}

export function pooledPairedComparison(
  pairs: ReadonlyArray<{ base: readonly number[]; other: readonly number[] }>,
  { questionSets }: { questionSets?: readonly number[] } = {},
): PooledPairedComparison {
  const k = pairs.length;
  if (k === 0) throw new Error('pooledPairedComparison: no pairs');
  if (questionSets && questionSets.length !== k)
    throw new Error(`pooledPairedComparison: ${questionSets.length} question sets for ${k} pairs`);
  const each = pairs.map((p) => pairedComparison(p.base, p.other));
  // Question by question: within each question set, the pairs' mean base score against their mean
  // other score per question (whose paired comparison is exactly that of the per-question mean
  // differences); the sets, distinct questions, side by side. One set (the default) is the usual case.
  const setOf = (j: number) => questionSets?.[j] ?? 0;
  const sets = [...new Set(pairs.map((_, j) => setOf(j)))];
  const pooledBase: number[] = [];
  const pooledOther: number[] = [];
  for (const set of sets) {
    const members = pairs.flatMap((_, j) => (setOf(j) === set ? [j] : []));
    const n = each[members[0]].n;
    for (const j of members)
      if (each[j].n !== n)
        throw new Error(
          `pooledPairedComparison: pair ${j} has ${each[j].n} questions, pair ${members[0]} ${n}`,
        );
    const meanOver = (pick: (p: (typeof pairs)[number]) => readonly number[]) =>
      Array.from(
        { length: n },
        (_, i) => members.reduce((s, j) => s + pick(pairs[j])[i], 0) / members.length,
      );
    pooledBase.push(...meanOver((p) => p.base));
    pooledOther.push(...meanOver((p) => p.other));
  }
  const pooled = pairedComparison(pooledBase, pooledOther);
  const n = pooled.n;
  const pairLevel = k >= 2 ? oneSampleT(each.map((c) => c.difference)) : null;
  return {
    k,
    n,
    pairs: each,
    questionLevel: {
      difference: pooled.difference,
      se: pooled.pairedSe,
      better: pooled.better,
      worse: pooled.worse,
      signTestP: pooled.signTestP,
    },
    pairLevel,
  };
}

/**
 * Student's one-sample t test of mean 0 over differences (≥ 2 of them): the pair-by-pair reading of an
 * ablation, one difference per seed. Used by pooledPairedComparison, and on its own (npm run compare --
 * --differences) where only the pairs' recorded differences are left.
 */
export function oneSampleT(differences: readonly number[]): OneSampleT {
  const k = differences.length;
  if (k < 2) throw new Error(`oneSampleT: needs at least 2 differences, got ${k}`);
  const m = differences.reduce((s, x) => s + x, 0) / k;
  const sd = Math.sqrt(differences.reduce((s, x) => s + (x - m) ** 2, 0) / (k - 1));
  const se = sd / Math.sqrt(k);
  const t = se > 0 ? m / se : m === 0 ? 0 : Math.sign(m) * Number.POSITIVE_INFINITY;
  return { mean: m, se, t, df: k - 1, p: studentTTwoSided(t, k - 1) };
}

/** P(|T| ≥ |t|) for Student's t with df degrees of freedom: I_{df/(df+t²)}(df/2, ½). */
export function studentTTwoSided(t: number, df: number): number {
  if (!(df > 0)) throw new Error(`studentTTwoSided: df must be positive, got ${df}`);
  if (Number.isNaN(t)) return Number.NaN;
  if (!Number.isFinite(t)) return 0;
  return regularizedIncompleteBeta(df / (df + t * t), df / 2, 0.5);
}

/** I_x(a, b), by the continued fraction (modified Lentz), on the side where it converges fast. */
export function regularizedIncompleteBeta(x: number, a: number, b: number): number {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const front = Math.exp(a * Math.log(x) + b * Math.log(1 - x) - logBeta(a, b));
  if (x < (a + 1) / (a + b + 2)) return (front * betaContinuedFraction(x, a, b)) / a;
  return 1 - (front * betaContinuedFraction(1 - x, b, a)) / b;
}

function betaContinuedFraction(x: number, a: number, b: number): number {
  const tiny = 1e-300;
  let c = 1;
  let d = 1 - ((a + b) * x) / (a + 1);
  if (Math.abs(d) < tiny) d = tiny;
  d = 1 / d;
  let h = d;
  for (let m = 1; m <= 300; m++) {
    // The even step, then the odd step, of the fraction's terms d_{2m} and d_{2m+1}.
    const even = (m * (b - m) * x) / ((a + 2 * m - 1) * (a + 2 * m));
    d = 1 + even * d;
    if (Math.abs(d) < tiny) d = tiny;
    c = 1 + even / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    const odd = (-(a + m) * (a + b + m) * x) / ((a + 2 * m) * (a + 2 * m + 1));
    d = 1 + odd * d;
    if (Math.abs(d) < tiny) d = tiny;
    c = 1 + odd / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const delta = d * c;
    h *= delta;
    if (Math.abs(delta - 1) < 1e-15) return h;
  }
  return h;
}

function logBeta(a: number, b: number): number {
  return logGamma(a) + logGamma(b) - logGamma(a + b);
}

// Lanczos' approximation (g = 7, nine terms), about 15 significant digits for x > 0.
const LANCZOS = [
  0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
  12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
];
function logGamma(x: number): number {
  if (x < 0.5) return Math.log(Math.PI / Math.abs(Math.sin(Math.PI * x))) - logGamma(1 - x);
  const z = x - 1;
  let s = LANCZOS[0];
  for (let i = 1; i < 9; i++) s += LANCZOS[i] / (z + i);
  const t = z + 7.5;
  return 0.5 * Math.log(2 * Math.PI) + (z + 0.5) * Math.log(t) - t + Math.log(s);
}

// ---------------------------------------------------------------------------------------------------
// Planning the next ablation: how many pairs (seeds) a paired t test needs to find a difference of a
// given size, at the spread the pairs measured so far. The test's statistic, when the true mean
// difference is `effect`, is noncentral t with df = k − 1 and noncentrality effect·√k / sd; its power is
// P(|T| > t_crit). Written as an integral over the chi-distributed scale w of the sample sd:
//   power = ∫ chi_df(w) · [Φ(δ − c·w/√df) + Φ(−δ − c·w/√df)] dw,
// taken by Simpson's rule, since E[Φ(δ − c·s)] over s = w/√df is P(Z + δ > c·s).

/** Standard normal CDF Φ(x): erf's Taylor series for |x| < 3, erfc's continued fraction beyond. */
export function normalCdf(x: number): number {
  if (Number.isNaN(x)) return Number.NaN;
  const z = Math.abs(x) / Math.SQRT2;
  let upper: number; // P(Z > |x|) = erfc(z) / 2
  if (z < 3) {
    // erf(z) = 2/√π · Σ (−1)ⁿ z^(2n+1) / (n! (2n+1)).
    let term = z;
    let sum = z;
    for (let n = 1; n < 200 && Math.abs(term) > 1e-17 * Math.abs(sum); n++) {
      term *= (-z * z) / n;
      sum += term / (2 * n + 1);
    }
    upper = (1 - (2 / Math.sqrt(Math.PI)) * sum) / 2;
  } else {
    // erfc(z) = e^(−z²)/√π · 1/(z + (1/2)/(z + 1/(z + (3/2)/(z + …)))), evaluated from the tail up.
    let f = z;
    for (let m = 60; m >= 1; m--) f = z + m / 2 / f;
    upper = Math.exp(-z * z) / Math.sqrt(Math.PI) / f / 2;
  }
  return x >= 0 ? 1 - upper : upper;
}

/** The two-sided critical value c of Student's t: P(|T| ≥ c) = alpha (bisection on studentTTwoSided). */
export function studentTCritical(df: number, alpha: number): number {
  if (!(alpha > 0 && alpha < 1)) throw new Error(`studentTCritical: alpha must be in (0, 1), got ${alpha}`);
  let lo = 0;
  let hi = 1;
  while (studentTTwoSided(hi, df) > alpha) hi *= 2;
  for (let i = 0; i < 200 && hi - lo > 1e-13 * hi; i++) {
    const mid = (lo + hi) / 2;
    if (studentTTwoSided(mid, df) > alpha) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

/**
 * Power of the two-sided one-sample (paired) t test over `pairs` differences whose true mean is
 * `effect` and whose standard deviation is `sd`, at level `alpha`.
 */
export function pairedTPower(pairs: number, effect: number, sd: number, alpha = 0.05): number {
  if (!Number.isInteger(pairs) || pairs < 2)
    throw new Error(`pairedTPower: needs an integer number of pairs ≥ 2, got ${pairs}`);
  if (!(sd > 0) || !Number.isFinite(sd)) throw new Error(`pairedTPower: sd must be positive, got ${sd}`);
  if (!Number.isFinite(effect)) throw new Error(`pairedTPower: effect must be finite, got ${effect}`);
  const df = pairs - 1;
  const c = studentTCritical(df, alpha);
  const delta = (Math.abs(effect) * Math.sqrt(pairs)) / sd;
  // chi_df density: w^(df−1) e^(−w²/2) / (2^(df/2 − 1) Γ(df/2)). Its spread is about 0.71 around
  // √df, so outside √df ± 12 it is negligible; the grid keeps about 300 points per unit of w.
  const logNorm = (df / 2 - 1) * Math.log(2) + logGamma(df / 2);
  const bottom = Math.max(0, Math.sqrt(df) - 12);
  const top = Math.sqrt(df) + 12;
  const steps = 2 * Math.ceil((top - bottom) * 150);
  const h = (top - bottom) / steps;
  let sum = 0;
  for (let i = 0; i <= steps; i++) {
    const w = bottom + i * h;
    const density =
      w === 0
        ? df === 1
          ? Math.exp(-logNorm)
          : 0
        : Math.exp((df - 1) * Math.log(w) - (w * w) / 2 - logNorm);
    const s = w / Math.sqrt(df);
    const f = density * (normalCdf(delta - c * s) + normalCdf(-delta - c * s));
    sum += (i === 0 || i === steps ? 1 : i % 2 === 1 ? 4 : 2) * f;
  }
  return Math.min(1, (sum * h) / 3);
}

/** The fewest pairs (≥ 2) whose paired t test has at least `power` to find `effect` at spread `sd`. */
export function pairsForPower(effect: number, sd: number, power = 0.8, alpha = 0.05): number {
  if (!(effect !== 0 && Number.isFinite(effect)))
    throw new Error(`pairsForPower: effect must be a non-zero number, got ${effect}`);
  if (!(power > 0 && power < 1)) throw new Error(`pairsForPower: power must be in (0, 1), got ${power}`);
  // Power grows with the pairs: double until it is reached, then bisect.
  const enough = (k: number) => pairedTPower(k, effect, sd, alpha) >= power;
  if (enough(2)) return 2;
  let lo = 2;
  let hi = 4;
  while (!enough(hi)) {
    if (hi >= 1e7) throw new Error(`pairsForPower: more than 10⁷ pairs needed for ${effect} at sd ${sd}`);
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (enough(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

/** The smallest difference that `pairs` pairs at spread `sd` find with at least `power` (bisection). */
export function detectableEffect(pairs: number, sd: number, power = 0.8, alpha = 0.05): number {
  if (!(power > alpha && power < 1))
    throw new Error(`detectableEffect: power must be in (alpha, 1), got ${power}`);
  let lo = 0;
  let hi = sd;
  while (pairedTPower(pairs, hi, sd, alpha) < power) hi *= 2;
  for (let i = 0; i < 60 && hi - lo > 1e-9 * hi; i++) {
    const mid = (lo + hi) / 2;
    if (pairedTPower(pairs, mid, sd, alpha) < power) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}
