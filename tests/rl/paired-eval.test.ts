// The paired comparison of two checkpoints' per-question scores (src/rl/paired-eval.ts) against
// worked examples: the paired standard error, the discordant counts and the exact sign test.
import { describe, expect, it } from 'vitest';
import { pairedComparison, signTestTwoSided } from '../../src/rl/paired-eval.ts';

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
