// The paired comparison of two checkpoints' per-question scores (src/rl/paired-eval.ts) against
// worked examples: the paired standard error, the discordant counts and the exact sign test; and the
// paired t test's power, which plans how many seeds an ablation needs, against scipy; and the text of
// the per-question files npm run compare reads.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  detectableEffect,
  normalCdf,
  oneSampleT,
  pairedComparison,
  pairedTPower,
  pairsForPower,
  perQuestionFileText,
  pooledPairedComparison,
  regularizedIncompleteBeta,
  signTestTwoSided,
  studentTCritical,
  studentTTwoSided,
} from '../../src/rl/paired-eval.ts';

describe('pairedComparison', () => {
  it('gives the difference, its paired SE and the discordant counts of a worked example', () => {
    // Differences 0, +1, 0, 0: mean 0.25, sample std sqrt((3·0.0625 + 0.5625) / 3) = 0.5, SE 0.5 / 2.
    const c = pairedComparison([1, 0, 1, 0], [1, 1, 1, 0]);
    expect(c.n).toBe(4);
    expect(c.baseMean).toBe(0.5);
    expect(c.otherMean).toBe(0.75);
    expect(c.difference).toBeCloseTo(0.25, 15);
    expect(c.pairedSe).toBeCloseTo(0.25, 15);
    expect([c.better, c.worse]).toEqual([1, 0]);
    expect(c.signTestP).toBe(1); // one discordant question: 2 · ½, capped at 1
  });

  it('is much tighter than two independent evaluations when the models agree on most questions', () => {
    // 100 questions, both right on the same 20, the other also on 5 more: +5 points.
    const base = Array.from({ length: 100 }, (_, i) => (i < 20 ? 1 : 0));
    const other = Array.from({ length: 100 }, (_, i) => (i < 25 ? 1 : 0));
    const c = pairedComparison(base, other);
    expect(c.difference).toBeCloseTo(0.05, 15);
    // d has five 1s: sample std sqrt((5·0.95² + 95·0.05²) / 99), SE that / 10.
    expect(c.pairedSe).toBeCloseTo(Math.sqrt((5 * 0.95 ** 2 + 95 * 0.05 ** 2) / 99) / 10, 15);
    const independent = Math.sqrt((0.2 * 0.8) / 100 + (0.25 * 0.75) / 100);
    expect(c.pairedSe).toBeLessThan(independent / 2.5);
    expect(c.signTestP).toBeCloseTo(2 / 32, 15); // 5 : 0
  });

  it('reads F1 scores as better / worse per question', () => {
    const c = pairedComparison([0.5, 1, 0], [0.75, 0.5, 0]);
    expect([c.better, c.worse]).toEqual([1, 1]);
    expect(c.difference).toBeCloseTo(-0.25 / 3, 15);
  });

  it('refuses empty, unequal or non-finite input with a message', () => {
    expect(() => pairedComparison([], [])).toThrow(/no questions/);
    expect(() => pairedComparison([1, 0], [1])).toThrow(/2 base scores against 1 others/);
    expect(() => pairedComparison([1, Number.NaN], [1, 0])).toThrow(/question 1 has a non-finite score/);
  });
});

describe('signTestTwoSided', () => {
  it('matches the binomial tail of worked examples', () => {
    expect(signTestTwoSided(8, 2)).toBeCloseTo((2 * (1 + 10 + 45)) / 1024, 15);
    expect(signTestTwoSided(2, 8)).toBe(signTestTwoSided(8, 2));
    expect(signTestTwoSided(0, 0)).toBe(1);
    expect(signTestTwoSided(5, 5)).toBe(1);
  });

  it('stays finite and positive for hundreds of discordant questions', () => {
    const p = signTestTwoSided(0, 600);
    expect(p).toBeGreaterThan(0);
    expect(p / (2 * 2 ** -600)).toBeCloseTo(1, 9);
    // 2 · Σ_{i ≤ 270} C(600, i) / 2^600, computed with exact integers (Python's math.comb).
    expect(signTestTwoSided(330, 270)).toBeCloseTo(0.015940437036359587, 9);
  });
});

describe('studentTTwoSided', () => {
  it('matches the closed forms of one and two degrees of freedom', () => {
    for (const t of [0.3, 1, 2.58, 10]) {
      expect(studentTTwoSided(t, 1)).toBeCloseTo(1 - (2 / Math.PI) * Math.atan(t), 13);
      expect(studentTTwoSided(-t, 2)).toBeCloseTo(1 - t / Math.sqrt(2 + t * t), 13);
    }
  });

  it("matches scipy's stats.t (2 · sf(|t|, df)) elsewhere", () => {
    const cases: [number, number, number][] = [
      [-3, 5, 0.030099247897462586],
      [0.5, 10, 0.627893605742973],
      [4.2, 3, 0.024632078176939253],
      [2, 30, 0.054625044962983094],
    ];
    for (const [t, df, p] of cases) expect(studentTTwoSided(t, df)).toBeCloseTo(p, 12);
    expect(studentTTwoSided(0, 4)).toBe(1);
    expect(studentTTwoSided(Number.NEGATIVE_INFINITY, 4)).toBe(0);
    expect(() => studentTTwoSided(1, 0)).toThrow(/df must be positive/);
  });

  it("gives scipy's regularized incomplete beta", () => {
    // scipy.special.betainc(a, b, x)
    expect(regularizedIncompleteBeta(0.3, 2.5, 0.5)).toBeCloseTo(0.018927124071945658, 13);
    expect(regularizedIncompleteBeta(0.9, 0.5, 0.5)).toBeCloseTo(0.7951672353008664, 13);
    expect(regularizedIncompleteBeta(0.97, 15, 0.5)).toBeCloseTo(0.3431267055881709, 12);
  });
});

describe('oneSampleT', () => {
  it('gives the closed form of two degrees of freedom', () => {
    // 1 2 3: mean 2, sample sd 1, se 1/√3, t 2√3; with 2 df, p = 1 − t/√(2 + t²).
    const r = oneSampleT([1, 2, 3]);
    expect(r.mean).toBe(2);
    expect(r.se).toBeCloseTo(1 / Math.sqrt(3), 15);
    expect(r.t).toBeCloseTo(2 * Math.sqrt(3), 14);
    expect(r.df).toBe(2);
    expect(r.p).toBeCloseTo(1 - (2 * Math.sqrt(3)) / Math.sqrt(14), 13);
  });

  it('reads equal differences as no spread, and refuses fewer than two', () => {
    expect(oneSampleT([-1, -1])).toMatchObject({ mean: -1, se: 0, p: 0 });
    expect(oneSampleT([0, 0, 0])).toMatchObject({ t: 0, p: 1 });
    expect(() => oneSampleT([1])).toThrow(/at least 2/);
  });
});

describe('pooledPairedComparison', () => {
  it('averages the pairs question by question, and tests the pairs against their own spread', () => {
    // Two pairs on four questions. Pair 0: differences 0 −1 0 0; pair 1: −1 −1 0 +1.
    const c = pooledPairedComparison([
      { base: [1, 1, 0, 0], other: [1, 0, 0, 0] },
      { base: [1, 1, 0, 0], other: [0, 0, 0, 1] },
    ]);
    expect([c.k, c.n]).toEqual([2, 4]);
    expect(c.pairs.map((p) => p.difference)).toEqual([-0.25, -0.25]);
    // Per-question means −0.5 −1 0 +0.5: mean −0.25, sample std sqrt((0.0625+0.5625+0.0625+0.5625)/3).
    expect(c.questionLevel.difference).toBeCloseTo(-0.25, 15);
    expect(c.questionLevel.se).toBeCloseTo(Math.sqrt(1.25 / 3) / 2, 15);
    expect([c.questionLevel.better, c.questionLevel.worse]).toEqual([1, 2]);
    expect(c.questionLevel.signTestP).toBe(1);
    // The pairs agree exactly: no spread, t infinite, p 0.
    expect(c.pairLevel).toMatchObject({ mean: -0.25, se: 0, df: 1, p: 0 });
  });

  it("gives Student's t over the pairs' differences", () => {
    const n = 1000;
    // Three pairs whose EM differs by −3.5, −1.8 and −0.8 points: the base right on the first 100
    // questions, the other on the first 100 − m.
    const pair = (m: number) => ({
      base: Array.from({ length: n }, (_, i) => (i < 100 ? 1 : 0)),
      other: Array.from({ length: n }, (_, i) => (i < 100 - m ? 1 : 0)),
    });
    const c = pooledPairedComparison([pair(35), pair(18), pair(8)]);
    const d = [-0.035, -0.018, -0.008];
    const mean = (d[0] + d[1] + d[2]) / 3;
    const sd = Math.sqrt(d.reduce((s, x) => s + (x - mean) ** 2, 0) / 2);
    expect(c.pairLevel?.mean).toBeCloseTo(mean, 15);
    expect(c.pairLevel?.se).toBeCloseTo(sd / Math.sqrt(3), 15);
    expect(c.pairLevel?.df).toBe(2);
    expect(c.pairLevel?.t).toBeCloseTo(-2.5800251000706624, 12);
    expect(c.pairLevel?.p).toBeCloseTo(0.12309605484128167, 12); // scipy: 2 · stats.t.sf(2.58003, 2)
    // Question by question: no question gains, the 35 that pair 0 loses have a negative net.
    expect([c.questionLevel.better, c.questionLevel.worse]).toEqual([0, 35]);
  });

  it('has no pair-level test for one pair, and refuses pairs of different lengths', () => {
    const c = pooledPairedComparison([{ base: [1, 0], other: [0, 0] }]);
    expect(c.pairLevel).toBeNull();
    expect(c.questionLevel.difference).toBe(c.pairs[0].difference);
    expect(() => pooledPairedComparison([])).toThrow(/no pairs/);
    expect(() =>
      pooledPairedComparison([
        { base: [1, 0], other: [0, 0] },
        { base: [1], other: [0] },
      ]),
    ).toThrow(/pair 1 has 1 questions, pair 0 2/);
  });

  it('puts pairs on different question sets side by side, averaging only within a set (questionSets)', () => {
    // Set 0: pairs 0 and 2 on two questions (+1 0 and +1 −1, so per question +1 and −0.5); set 1:
    // pair 1 on three others (−1 +1 +1).
    const c = pooledPairedComparison(
      [
        { base: [0, 1], other: [1, 1] },
        { base: [1, 0, 0], other: [0, 1, 1] },
        { base: [0, 1], other: [1, 0] },
      ],
      { questionSets: [0, 1, 0] },
    );
    expect([c.k, c.n]).toEqual([3, 5]);
    expect(c.pairs.map((p) => p.difference)).toEqual([0.5, 1 / 3, 0]);
    // Units +1 −0.5 −1 +1 +1: mean 0.3, sample std sqrt((3 · 0.49 + 0.64 + 1.69) / 4).
    expect(c.questionLevel.difference).toBeCloseTo(0.3, 15);
    expect(c.questionLevel.se).toBeCloseTo(Math.sqrt((3 * 0.49 + 0.64 + 1.69) / 4) / Math.sqrt(5), 15);
    expect([c.questionLevel.better, c.questionLevel.worse]).toEqual([3, 2]);
    expect(c.questionLevel.signTestP).toBeCloseTo(1, 12);
    expect(c.pairLevel?.mean).toBeCloseTo((0.5 + 1 / 3) / 3, 15);
    // One set for every pair is the default reading; a wrong count of sets is refused.
    const same = pooledPairedComparison(
      [
        { base: [1, 1, 0, 0], other: [1, 0, 0, 0] },
        { base: [1, 1, 0, 0], other: [0, 0, 0, 1] },
      ],
      { questionSets: [0, 0] },
    );
    expect(same.questionLevel.difference).toBeCloseTo(-0.25, 15);
    expect(same.n).toBe(4);
    expect(() => pooledPairedComparison([{ base: [1], other: [0] }], { questionSets: [0, 1] })).toThrow(
      /2 question sets for 1 pairs/,
    );
  });
});

describe('paired t power (planning how many pairs an ablation needs)', () => {
  // The six pairings of PPO's plain advantage-mask ablation at step 12 (docs/results.md, item 76).
  const sd = 2.251388460483885;

  it("gives scipy's normal CDF and Student's t critical values", () => {
    // scipy.stats.norm.cdf / norm.sf
    expect(normalCdf(1.96)).toBeCloseTo(0.9750021048517795, 14);
    expect(normalCdf(0.5)).toBeCloseTo(0.6914624612740131, 14);
    expect(normalCdf(-3.5) / 0.00023262907903552502).toBeCloseTo(1, 10);
    expect(normalCdf(-8) / 6.22096057427174e-16).toBeCloseTo(1, 10);
    expect(1 - normalCdf(5)).toBeCloseTo(2.866515718791933e-7, 15);
    expect(normalCdf(0)).toBeCloseTo(0.5, 15);
    // scipy.stats.t.ppf(0.975, df); with one df the closed form tan(0.475 π)
    expect(studentTCritical(1, 0.05)).toBeCloseTo(Math.tan(0.475 * Math.PI), 9);
    expect(studentTCritical(5, 0.05)).toBeCloseTo(2.5705818356363146, 11);
    expect(studentTCritical(41, 0.05)).toBeCloseTo(2.019540970441376, 11);
    expect(() => studentTCritical(5, 0)).toThrow(/alpha/);
  });

  it("gives scipy's noncentral-t power, and the test's size when there is no difference", () => {
    // scipy: nct.sf(c, df, nc) + nct.cdf(−c, df, nc), c = t.ppf(0.975, df), nc = effect √k / sd
    const cases: [number, number, number, number][] = [
      [6, 3, sd, 0.7420627716744062],
      [2, 2, 1, 0.17570741109776025],
      [101, 0.3, 1, 0.8475362033385551],
      [10, 1, 0.9926815535037742, 0.8087292509252776],
    ];
    for (const [k, effect, s, power] of cases) {
      expect(pairedTPower(k, effect, s)).toBeCloseTo(power, 8);
      expect(pairedTPower(k, -effect, s)).toBeCloseTo(power, 8);
    }
    for (const k of [2, 6, 40]) expect(pairedTPower(k, 0, 1)).toBeCloseTo(0.05, 8);
    expect(pairedTPower(6, 3, sd, 0.01)).toBeLessThan(pairedTPower(6, 3, sd, 0.05));
    expect(() => pairedTPower(1, 1, 1)).toThrow(/pairs/);
    expect(() => pairedTPower(6, 1, 0)).toThrow(/sd must be positive/);
  });

  it('finds the fewest pairs for 80 % power, and the difference a number of pairs finds', () => {
    // scipy, searching k upwards: 42, 20 and 13 pairs for 1, 1.5 and 2 points at this spread.
    expect([1, 1.5, 2].map((e) => pairsForPower(e, sd))).toEqual([42, 20, 13]);
    const k = pairsForPower(1, sd);
    expect(pairedTPower(k, 1, sd)).toBeGreaterThanOrEqual(0.8);
    expect(pairedTPower(k - 1, 1, sd)).toBeLessThan(0.8);
    expect(pairsForPower(1, 0.9926815535037742)).toBe(10);
    // scipy.optimize.brentq on the power: six pairs find 3.2297 points with 80 % power.
    expect(detectableEffect(6, sd)).toBeCloseTo(3.229717568332974, 6);
    expect(pairedTPower(6, detectableEffect(6, sd), sd)).toBeCloseTo(0.8, 8);
    // A tiny difference needs hundreds of thousands of pairs: found by doubling and bisection, and near
    // the normal approximation ((1.959964 + 0.841621) · sd / effect)² = 397,349.5.
    expect(Math.abs(pairsForPower(0.01, 2.25) - 397349.5)).toBeLessThan(5);
    expect(() => pairsForPower(0, sd)).toThrow(/non-zero/);
    expect(() => pairsForPower(1, sd, 1)).toThrow(/power/);
  });
});

describe('perQuestionFileText', () => {
  it('writes a committed replay again byte for byte: the summary indented, one question per line', () => {
    const file = 'docs/replays/world-2001-bundle-400q.json';
    const text = readFileSync(file, 'utf8');
    const { questions, ...summary } = JSON.parse(text);
    expect(questions).toHaveLength(400);
    expect(perQuestionFileText(summary, questions)).toBe(text);
    const small = perQuestionFileText({ n: 2 }, [{ id: 'a' }, { id: 'b' }]);
    expect(small).toBe('{\n  "n": 2,\n  "questions": [\n    {"id":"a"},\n    {"id":"b"}\n  ]\n}\n');
  });
});
