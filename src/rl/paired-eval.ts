// Two checkpoints played on the same questions: is the difference in EM more than noise? Each question
// gives a pair of scores, so the right error is the paired one (the spread of the per-question
// differences), much smaller than two independent evaluations' when both models get the same easy
// questions right. The discordant counts are McNemar's: questions only the other model gets right
// against questions only the base gets right; the exact two-sided sign test on them gives p.
//
// Input: per-question scores in [0, 1] (EM is 0/1; F1 works too, then the counts mean "better" and
// "worse"), the two arrays in the same question order (scripts/compare-evals.ts checks the ids).

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
