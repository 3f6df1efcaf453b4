// Tests of src/rl/core-algos.ts, the float64 CPU twin of the RL estimators and losses: worked examples
// by hand or by an independent straight-line computation here, the invariants of
// /work/shared/notes/rl-estimator-semantics.md, ragged masks, every aggregation mode, globals splitting,
// and every gradient against central finite differences.

import { describe, expect, it } from 'vitest';
import {
  type AggGlobals,
  aggLoss,
  aggLossWeights,
  applyKlPenaltyToRewards,
  computeCispoPolicyLoss,
  computeEntropyLoss,
  computeGaeAdvantageReturn,
  computeGrpoOutcomeAdvantage,
  computeGspoPolicyLoss,
  computeKlLoss,
  computePolicyLoss,
  computeReinforcePlusPlusBaselineOutcomeAdvantage,
  computeReinforcePlusPlusOutcomeAdvantage,
  computeRlooOutcomeAdvantage,
  computeValueLoss,
  groupsWithScoreSpread,
  KL_KINDS,
  klPenalty,
  LOSS_AGG_MODES,
  type LossAggMode,
  maskedMean,
  maskedSum,
  maskedVar,
  maskedWhiten,
  RlInputError,
} from '../../src/rl/core-algos.ts';
import { numericGradient } from '../helpers/finite-diff.ts';

function expectAllClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: number): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const err = Math.abs(actual[i] - expected[i]);
    if (!(err <= tol * Math.max(1, Math.abs(expected[i]))))
      throw new Error(`index ${i}: got ${actual[i]}, expected ${expected[i]} (err ${err}, tol ${tol})`);
  }
}

/** mulberry32: a small seeded PRNG so random cases are reproducible. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randArray(n: number, rand: () => number, lo = -1, hi = 1): Float64Array {
  const x = new Float64Array(n);
  for (let i = 0; i < n; i++) x[i] = lo + (hi - lo) * rand();
  return x;
}

// A ragged multi-turn batch, B = 4, T = 6: turns with interior environment zeros, an all-zero row, a
// one-token row.
const B4 = 4;
const T6 = 6;
const RAGGED_MASK = new Float64Array([
  1,
  1,
  0,
  0,
  1,
  0, // two turns, then padding
  0,
  0,
  0,
  0,
  0,
  0, // empty row
  1,
  0,
  0,
  0,
  0,
  0, // one token
  1,
  1,
  1,
  0,
  1,
  1, // two turns, no padding
]);

describe('masked statistics', () => {
  it('masked sum / mean / unbiased var by hand, NaN outside the mask ignored', () => {
    const x = [1, 2, Number.NaN, 4];
    const m = [1, 1, 0, 1];
    expect(maskedSum(x, m)).toBe(7);
    expect(maskedMean(x, m)).toBe(7 / (3 + 1e-8)); // verl's 1e-8 in the denominator
    // mean 7/3; squared deviations 16/9, 1/9, 25/9 → 42/9; unbiased / 2 → 7/3
    expect(maskedVar(x, m)).toBeCloseTo(7 / 3, 7);
    expect(maskedMean([5, 5], [0, 0])).toBe(0);
  });

  it('whitening: zero mean, unit unbiased variance over the mask, zeros elsewhere and for ≤ 1 token', () => {
    const x = [3, 100, 5, 10];
    const m = [1, 0, 1, 1];
    const w = maskedWhiten(x, m);
    expect(w[1]).toBe(0);
    const mean = 6;
    const rstd = 1 / Math.sqrt((9 + 1 + 16) / 2 + 1e-8);
    expectAllClose([w[0], w[2], w[3]], [(3 - mean) * rstd, (5 - mean) * rstd, (10 - mean) * rstd], 1e-7);
    expect(Array.from(maskedWhiten([7, 9], [0, 1]))).toEqual([0, 0]);
    expect(Array.from(maskedWhiten([7, 9], [0, 0]))).toEqual([0, 0]);
  });

  it('rejects a mask that is not 0/1 and mismatched lengths', () => {
    expect(() => maskedSum([1, 2], [1, 0.5])).toThrow(RlInputError);
    expect(() => maskedSum([1, 2], [1, 0.5])).toThrow(/mask\[1\] = 0.5/);
    expect(() => maskedMean([1, 2, 3], [1, 0])).toThrow(/x has length 3, expected 2/);
  });
});

describe('GAE', () => {
  it('matches a straight-line computation on one row of policy tokens', () => {
    const r = [0.5, -1, 2];
    const v = [0.3, 0.7, -0.2];
    const gamma = 0.9;
    const lam = 0.8;
    const d2 = r[2] + gamma * 0 - v[2];
    const a2 = d2;
    const d1 = r[1] + gamma * v[2] - v[1];
    const a1 = d1 + gamma * lam * a2;
    const d0 = r[0] + gamma * v[1] - v[0];
    const a0 = d0 + gamma * lam * a1;
    const out = computeGaeAdvantageReturn({
      tokenRewards: r,
      values: v,
      mask: [1, 1, 1],
      B: 1,
      T: 3,
      gamma,
      lam,
      whiten: false,
    });
    expectAllClose(out.advantages, [a0, a1, a2], 1e-14);
    expectAllClose(out.returns, [a0 + v[0], a1 + v[1], a2 + v[2]], 1e-14);
  });

  it('skips environment tokens: bootstraps from the next turn’s first policy token, γλ advance per policy token', () => {
    // mask 1 1 0 0 1 0: policy tokens at 0, 1, 4
    const r = [0, 0.25, 9, 9, 1, 9];
    const v = [0.1, 0.2, 50, 50, 0.4, 50];
    const gamma = 0.95;
    const lam = 0.9;
    const a4 = r[4] - v[4];
    const a1 = r[1] + gamma * v[4] - v[1] + gamma * lam * a4;
    const a0 = r[0] + gamma * v[1] - v[0] + gamma * lam * a1;
    const mask = [1, 1, 0, 0, 1, 0];
    const out = computeGaeAdvantageReturn({
      tokenRewards: r,
      values: v,
      mask,
      B: 1,
      T: 6,
      gamma,
      lam,
      whiten: false,
    });
    expectAllClose(out.advantages, [a0, a1, 0, 0, a4, 0], 1e-14);
    expectAllClose(out.returns, [a0 + v[0], a1 + v[1], 0, 0, a4 + v[4], 0], 1e-14);
  });

  it('γ = λ = 1: advantage = return − value on policy tokens before whitening', () => {
    const rand = rng(1);
    const N = B4 * T6;
    const r = randArray(N, rand);
    const v = randArray(N, rand);
    const out = computeGaeAdvantageReturn({
      tokenRewards: r,
      values: v,
      mask: RAGGED_MASK,
      B: B4,
      T: T6,
      gamma: 1,
      lam: 1,
      whiten: false,
    });
    for (let b = 0; b < B4; b++) {
      for (let t = 0; t < T6; t++) {
        const i = b * T6 + t;
        let ret = 0; // undiscounted return over this and later policy tokens
        for (let u = t; u < T6; u++) if (RAGGED_MASK[b * T6 + u] === 1) ret += r[b * T6 + u];
        const expected = RAGGED_MASK[i] === 1 ? ret - v[i] : 0;
        expect(out.advantages[i]).toBeCloseTo(expected, 12);
      }
    }
  });

  it('values and rewards at environment positions do not change advantages; whitening is over policy tokens', () => {
    const rand = rng(2);
    const N = B4 * T6;
    const r = randArray(N, rand);
    const v = randArray(N, rand);
    const r2 = r.slice();
    const v2 = v.slice();
    for (let i = 0; i < N; i++) {
      if (RAGGED_MASK[i] === 0) {
        r2[i] = 1000 * rand();
        v2[i] = Number.NaN;
      }
    }
    const args = { mask: RAGGED_MASK, B: B4, T: T6, gamma: 0.99, lam: 0.95 };
    const a = computeGaeAdvantageReturn({ ...args, tokenRewards: r, values: v });
    const b = computeGaeAdvantageReturn({ ...args, tokenRewards: r2, values: v2 });
    expectAllClose(b.advantages, a.advantages, 1e-15);
    expectAllClose(b.returns, a.returns, 1e-15);
    expect(a.whitenSkipped).toBe(false);
    const raw = computeGaeAdvantageReturn({ ...args, tokenRewards: r, values: v, whiten: false });
    expectAllClose(a.advantages, maskedWhiten(raw.advantages, RAGGED_MASK), 1e-15);
    expect(maskedMean(a.advantages, RAGGED_MASK)).toBeCloseTo(0, 7);
    expect(maskedVar(a.advantages, RAGGED_MASK)).toBeCloseTo(1, 6);
  });

  it('a single policy token in the batch: whitening skipped, zeros, no throw', () => {
    const out = computeGaeAdvantageReturn({
      tokenRewards: [0, 1],
      values: [0, 0.5],
      mask: [0, 1],
      B: 1,
      T: 2,
      gamma: 1,
      lam: 1,
    });
    expect(Array.from(out.advantages)).toEqual([0, 0]);
    expect(out.whitenSkipped).toBe(true);
    expect(Array.from(out.returns)).toEqual([0, 1]);
  });
});

describe('GRPO / RLOO / REINFORCE++', () => {
  // B = 5, T = 3; groups 7: rows 0, 2, 3; 9: row 1; 4: row 4 (group of one)
  const T = 3;
  const mask = [1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 1];
  const index = [7, 9, 7, 7, 4];
  // scores: row0 = 1, row1 = 0.5, row2 = 0, row3 = 0.5, row4 = 2 (rewards only on policy tokens)
  const tokenRewards = [0, 1, 0, 0.5, 0, 0, 0, 0, 0, 0, 0, 0.5, 0, 0, 2];

  function broadcast(perRow: number[]): number[] {
    return mask.map((m, i) => (m === 1 ? perRow[Math.floor(i / T)] : 0));
  }

  it('GRPO: (score − mean)/(std_unbiased + ε) per group; group of one: score/(1 + ε); empty row: 0', () => {
    const out = computeGrpoOutcomeAdvantage({ tokenRewards, mask, index, B: 5, T });
    const mean = 0.5; // group 7: 1, 0, 0.5
    const std = Math.sqrt((0.25 + 0.25 + 0) / 2);
    const eps = 1e-6;
    const perRow = [(1 - mean) / (std + eps), 0.5 / (1 + eps), (0 - mean) / (std + eps), 0, 2 / (1 + eps)];
    expectAllClose(out.advantages, broadcast(perRow), 1e-14);
    expectAllClose(out.returns, out.advantages, 0);
    const dr = computeGrpoOutcomeAdvantage({ tokenRewards, mask, index, B: 5, T, normByStd: false });
    expectAllClose(dr.advantages, broadcast([0.5, 0.5, -0.5, 0, 2]), 1e-15);
  });

  it('GRPO: equal rewards in a group give exactly 0 (std and Dr.GRPO), beside a group that differs', () => {
    // group 0: rows 0, 2, 4 all 0.75; group 1: rows 1, 3 differ
    const args = {
      tokenRewards: [0.75, 1, 0.75, 0, 0.75],
      mask: [1, 1, 1, 1, 1],
      index: [0, 1, 0, 1, 0],
      B: 5,
      T: 1,
    };
    for (const normByStd of [true, false]) {
      const out = computeGrpoOutcomeAdvantage({ ...args, normByStd });
      expect([out.advantages[0], out.advantages[2], out.advantages[4]]).toEqual([0, 0, 0]);
      expect(out.advantages[1]).toBeGreaterThan(0);
      expect(out.advantages[3]).toBeLessThan(0);
    }
  });

  it('RLOO: score − mean of the others; group of one keeps its score; equal scores give 0', () => {
    const out = computeRlooOutcomeAdvantage({ tokenRewards, mask, index, B: 5, T });
    const perRow = [1 - (0 + 0.5) / 2, 0.5, 0 - (1 + 0.5) / 2, 0.5 - (1 + 0) / 2, 2];
    expectAllClose(out.advantages, broadcast(perRow), 1e-15);
    const eq = computeRlooOutcomeAdvantage({
      tokenRewards: [0.375, 0.375, 0.375], // exact binary fractions
      mask: [1, 1, 1],
      index: [1, 1, 1],
      B: 3,
      T: 1,
    });
    expect(Array.from(eq.advantages)).toEqual([0, 0, 0]);
  });

  it('REINFORCE++ baseline: score − group mean broadcast, then whitened over all policy tokens', () => {
    const out = computeReinforcePlusPlusBaselineOutcomeAdvantage({ tokenRewards, mask, index, B: 5, T });
    const centred = broadcast([0.5, 0.5, -0.5, 0, 2]);
    // straight-line whitening over the 7 policy tokens
    const active = centred.filter((_, i) => mask[i] === 1);
    const mean = active.reduce((a, b) => a + b, 0) / (active.length + 1e-8);
    const varBiased = active.reduce((a, b) => a + (b - mean) ** 2, 0) / (active.length + 1e-8);
    const rstd = 1 / Math.sqrt((varBiased * active.length) / (active.length - 1) + 1e-8);
    expectAllClose(
      out.advantages,
      centred.map((c, i) => (mask[i] === 1 ? (c - mean) * rstd : 0)),
      1e-12,
    );
  });

  it('REINFORCE++: discounted return over policy tokens only, no reset at environment tokens', () => {
    // one row: policy at 0, 1, 4; environment at 2, 3 (with a reward there that must be ignored)
    const r = [0.5, 0, 7, 7, 1, 0];
    const mask1 = [1, 1, 0, 0, 1, 0];
    const g = 0.9;
    const g4 = 1;
    const g1 = 0 + g * g4;
    const g0 = 0.5 + g * g1;
    const out = computeReinforcePlusPlusOutcomeAdvantage({
      tokenRewards: r,
      mask: mask1,
      B: 1,
      T: 6,
      gamma: g,
    });
    expectAllClose(out.returns, [g0, g1, 0, 0, g4, 0], 1e-15);
    expectAllClose(out.advantages, maskedWhiten([g0, g1, 0, 0, g4, 0], mask1), 1e-15);
    expect(maskedMean(out.advantages, mask1)).toBeCloseTo(0, 6);
  });

  it('group filter (DAPO): drops exactly the groups whose scores are all equal; keeps groups of one', () => {
    // groups: 7 → [1, 1] equal, 3 → [0, 1] spread, 5 → [2] alone, 9 → [−1, −1, −1] equal, 4 → [0, NaN]
    const scores = [1, 0, 1, 2, 1, -1, -1, -1, 0, Number.NaN];
    const index = [7, 3, 7, 5, 3, 9, 9, 9, 4, 4];
    expect(groupsWithScoreSpread(scores, index)).toEqual([
      false,
      true,
      false,
      true,
      true,
      false,
      false,
      false,
      true,
      true,
    ]);
    // A kept group's GRPO advantages are the unfiltered batch's; a dropped group's were all 0.
    const mask = new Array(scores.length).fill(1);
    const finite = scores.map((x) => (Number.isNaN(x) ? 0 : x));
    const all = computeGrpoOutcomeAdvantage({ tokenRewards: finite, mask, index, B: 10, T: 1 }).advantages;
    groupsWithScoreSpread(finite, index).forEach((keep, b) => {
      if (!keep) expect(all[b]).toBe(0);
    });
    expect(() => groupsWithScoreSpread([1, 2], [0])).toThrow(/index has length 1, expected 2/);
  });

  it('rejects bad group ids and shapes', () => {
    expect(() =>
      computeGrpoOutcomeAdvantage({ tokenRewards: [1], mask: [1], index: [-1], B: 1, T: 1 }),
    ).toThrow(/index\[0\] = -1/);
    expect(() =>
      computeGrpoOutcomeAdvantage({ tokenRewards: [1], mask: [1], index: [0.5], B: 1, T: 1 }),
    ).toThrow(RlInputError);
    expect(() =>
      computeRlooOutcomeAdvantage({ tokenRewards: [1, 2], mask: [1], index: [0], B: 1, T: 1 }),
    ).toThrow(/tokenRewards has length 2, expected 1/);
    expect(() =>
      computeGaeAdvantageReturn({ tokenRewards: [], values: [], mask: [], B: -1, T: 0, gamma: 1, lam: 1 }),
    ).toThrow(/B must be/);
  });
});

describe('outMask: the positions the loss reads outside the mask (loss-mask ablation)', () => {
  // One episode: prompt, policy, policy, two environment tokens, policy (the answer, reward 1).
  const mask = [0, 1, 1, 0, 0, 1];
  const outMask = [0, 1, 1, 1, 1, 1];
  const tokenRewards = [0, 0, 0, 0, 0, 1];
  // Values at mask = 0 positions are never read.
  const values = [9, 0.2, 0.4, 9, 9, 0.7];

  it("GAE: an environment token carries the next policy token's advantage; returns only on the mask", () => {
    // γ = 1, λ = 0.5, backwards: t5 δ = 1 − 0.7 = 0.3, A = 0.3; t4, t3 carry 0.3;
    // t2 δ = 0.7 − 0.4 = 0.3, A = 0.3 + 0.5·0.3 = 0.45; t1 δ = 0.4 − 0.2 = 0.2, A = 0.2 + 0.5·0.45 = 0.425.
    const gae = (extra: { outMask?: number[]; whiten?: boolean }) =>
      computeGaeAdvantageReturn({ tokenRewards, values, mask, B: 1, T: 6, gamma: 1, lam: 0.5, ...extra });
    const r = gae({ outMask, whiten: false });
    expectAllClose(r.advantages, [0, 0.425, 0.45, 0.3, 0.3, 0.3], 1e-12);
    expectAllClose(r.returns, [0, 0.625, 0.85, 0, 0, 1], 1e-12);
    expectAllClose(gae({ whiten: false }).advantages, [0, 0.425, 0.45, 0, 0, 0.3], 1e-12);
    // Whitened with the mask's statistics: the carried positions equal the token they carry from.
    const w = gae({ outMask });
    const wPlain = gae({});
    for (const t of [1, 2, 5]) expect(w.advantages[t]).toBe(wPlain.advantages[t]);
    expect(w.advantages[3]).toBe(w.advantages[5]);
    expect(w.advantages[4]).toBe(w.advantages[5]);
    expect(w.advantages[0]).toBe(0);
  });

  it("REINFORCE++: an environment token carries the next policy token's return", () => {
    const r = computeReinforcePlusPlusOutcomeAdvantage({
      tokenRewards,
      mask,
      outMask,
      B: 1,
      T: 6,
      gamma: 0.9,
    });
    expectAllClose(r.returns, [0, 0.81, 0.9, 1, 1, 1], 1e-12);
    const plain = computeReinforcePlusPlusOutcomeAdvantage({ tokenRewards, mask, B: 1, T: 6, gamma: 0.9 });
    for (const t of [1, 2, 5]) expect(r.advantages[t]).toBe(plain.advantages[t]);
    expect(r.advantages[3]).toBe(r.advantages[5]);
    expect(r.advantages[5]).toBeGreaterThan(0);
    expect(r.advantages[0]).toBe(0);
  });

  it("GRPO, RLOO, REINFORCE++-baseline: every outMask position gets its row's advantage", () => {
    // Two samples of one question: rewards 1 and 0. GRPO: mean 0.5, unbiased std √0.5, so ±0.5/(√0.5 + ε).
    const m2 = [1, 0, 1, 0, 1, 1, 0, 0];
    const o2 = [1, 1, 1, 1, 0, 0, 1, 0];
    const r2 = [0, 0, 1, 0, 0, 0, 0, 0];
    const args = { tokenRewards: r2, mask: m2, outMask: o2, index: [7, 7], B: 2, T: 4 };
    const a = 0.5 / (Math.SQRT1_2 + 1e-6);
    expectAllClose(computeGrpoOutcomeAdvantage(args).advantages, [a, a, a, a, -a, -a, -a, 0], 1e-12);
    expectAllClose(computeRlooOutcomeAdvantage(args).advantages, [1, 1, 1, 1, -1, -1, -1, 0], 1e-12);
    const base = computeReinforcePlusPlusBaselineOutcomeAdvantage(args).advantages;
    const basePlain = computeReinforcePlusPlusBaselineOutcomeAdvantage({
      ...args,
      outMask: undefined,
    }).advantages;
    for (let i = 0; i < 8; i++) {
      if (m2[i] === 1) expect(base[i]).toBe(basePlain[i]);
      else expect(base[i]).toBe(o2[i] === 1 ? base[i < 4 ? 0 : 4] : 0);
    }
  });

  it('rejects an outMask that is not a 0/1 mask of the batch', () => {
    expect(() =>
      computeGrpoOutcomeAdvantage({
        tokenRewards,
        mask,
        outMask: [0, 1, 2, 0, 0, 1],
        index: [0],
        B: 1,
        T: 6,
      }),
    ).toThrow(/outMask\[2\] = 2/);
    expect(() =>
      computeRlooOutcomeAdvantage({ tokenRewards, mask, outMask: [1, 1], index: [0], B: 1, T: 6 }),
    ).toThrow(RlInputError);
  });
});

describe('KL', () => {
  it('k1, k2, k3 by hand, k3 clamps, derivatives by finite differences', () => {
    const lp = [-1, -2, -0.5, -30, 0];
    const ref = [-1.5, -1, -0.5, 0, -40];
    const k1 = klPenalty(lp, ref, 'k1');
    expectAllClose(k1.kl, [0.5, -1, 0, -30, 40], 1e-15);
    const k2 = klPenalty(lp, ref, 'k2');
    expectAllClose(k2.kl, [0.125, 0.5, 0, 450, 800], 1e-15);
    const k3 = klPenalty(lp, ref, 'k3');
    const d0 = -0.5;
    const d1 = 1;
    expectAllClose(k3.kl.slice(0, 3), [Math.exp(d0) - d0 - 1, Math.exp(d1) - d1 - 1, 0], 1e-15);
    expect(k3.kl[3]).toBe(10); // d = 30 → clamp 20 → exp(20) − 21 → clamp 10
    expect(k3.kl[4]).toBe(10); // d = −40 → clamp −20 → exp(−20) + 19 → clamp 10
    expect(k3.gradLogprob[3]).toBe(0);
    expect(k3.gradLogprob[4]).toBe(0);
    for (const kind of KL_KINDS) {
      const x = Float64Array.from([-1, -2, -0.5, -2.3]);
      const r = [-1.5, -1, -0.7, -0.1];
      const { gradLogprob } = klPenalty(x, r, kind);
      for (let i = 0; i < x.length; i++) {
        const num = numericGradient(x, () => klPenalty(x, r, kind).kl[i]);
        expect(gradLogprob[i]).toBeCloseTo(num[i], 7);
      }
    }
  });

  it('in-reward KL: r − β·k·mask, unchanged at mask=0', () => {
    const out = applyKlPenaltyToRewards({
      tokenRewards: [0, 1, 0.5],
      logprob: [-1, -2, -3],
      refLogprob: [-1.5, -1, 0],
      mask: [1, 1, 0],
      beta: 0.1,
      kind: 'k1',
    });
    expectAllClose(out, [-0.05, 1.1, 0.5], 1e-15);
    expect(() =>
      applyKlPenaltyToRewards({
        tokenRewards: [0],
        logprob: [0],
        refLogprob: [0],
        mask: [1],
        beta: 0.1,
        kind: 'k9' as never,
      }),
    ).toThrow(/unknown KL kind 'k9'/);
  });
});

describe('aggLoss', () => {
  const lossMat = Float64Array.from({ length: B4 * T6 }, (_, i) => (i % 7) - 2.5);

  it('each mode by hand on the ragged batch; empty batch gives 0', () => {
    const rowSums: number[] = [];
    const rowCounts: number[] = [];
    for (let b = 0; b < B4; b++) {
      let s = 0;
      let n = 0;
      for (let t = 0; t < T6; t++) {
        if (RAGGED_MASK[b * T6 + t] === 1) {
          s += lossMat[b * T6 + t];
          n++;
        }
      }
      rowSums.push(s);
      rowCounts.push(n);
    }
    const total = rowSums.reduce((a, b) => a + b, 0);
    expect(aggLoss(lossMat, RAGGED_MASK, B4, T6, 'token-mean')).toBeCloseTo(total / 9, 14);
    expect(aggLoss(lossMat, RAGGED_MASK, B4, T6, 'seq-mean-token-sum')).toBeCloseTo(total / 3, 14);
    const seqMeans = [0, 2, 3].map((b) => rowSums[b] / rowCounts[b]);
    expect(aggLoss(lossMat, RAGGED_MASK, B4, T6, 'seq-mean-token-mean')).toBeCloseTo(
      (seqMeans[0] + seqMeans[1] + seqMeans[2]) / 3,
      14,
    );
    expect(aggLoss(lossMat, RAGGED_MASK, B4, T6, 'seq-mean-token-sum-norm')).toBeCloseTo(total / 6, 14);
    for (const mode of LOSS_AGG_MODES) {
      expect(aggLoss([1, 2], [0, 0], 1, 2, mode)).toBe(0);
      expect(aggLoss([], [], 0, 0, mode)).toBe(0);
      // the weights are the gradient of aggLoss
      const x = lossMat.slice();
      expectAllClose(
        aggLossWeights(RAGGED_MASK, B4, T6, mode),
        numericGradient(x, () => aggLoss(x, RAGGED_MASK, B4, T6, mode)),
        1e-8,
      );
    }
    expect(() => aggLoss(lossMat, RAGGED_MASK, B4, T6, 'mean' as LossAggMode)).toThrow(
      /unknown loss aggregation mode 'mean'/,
    );
  });

  it('two micro-batches with the whole batch’s globals sum to the whole, in every mode', () => {
    const globals: AggGlobals = { tokens: 9, rows: 3, maxLen: T6 };
    const half = 2 * T6; // rows 0-1 | rows 2-3
    for (const mode of LOSS_AGG_MODES) {
      const whole = aggLoss(lossMat, RAGGED_MASK, B4, T6, mode);
      const first = aggLoss(lossMat.slice(0, half), RAGGED_MASK.slice(0, half), 2, T6, mode, globals);
      const second = aggLoss(lossMat.slice(half), RAGGED_MASK.slice(half), 2, T6, mode, globals);
      expect(first + second).toBeCloseTo(whole, 14);
      const w = aggLossWeights(RAGGED_MASK, B4, T6, mode);
      const w1 = aggLossWeights(RAGGED_MASK.slice(0, half), 2, T6, mode, globals);
      const w2 = aggLossWeights(RAGGED_MASK.slice(half), 2, T6, mode, globals);
      expectAllClose([...w1, ...w2], w, 1e-15);
    }
    expect(() =>
      aggLoss(lossMat, RAGGED_MASK, B4, T6, 'token-mean', { tokens: -1, rows: 1, maxLen: 1 }),
    ).toThrow(/globals.tokens/);
  });
});

describe('PPO clip policy loss', () => {
  const N = B4 * T6;

  it('ratio 1: loss = −mean(A) under token-mean, ppo_kl 0, no clipping', () => {
    const rand = rng(3);
    const lp = randArray(N, rand, -3, -0.1);
    const A = randArray(N, rand);
    const out = computePolicyLoss({
      oldLogprob: lp,
      logprob: lp,
      advantages: A,
      mask: RAGGED_MASK,
      B: B4,
      T: T6,
    });
    expect(out.loss).toBeCloseTo(-maskedSum(A, RAGGED_MASK) / 9, 14);
    expect(out.ppoKl).toBe(0);
    expect(out.clipfrac).toBe(0);
    expect(out.clipfracLower).toBe(0);
  });

  it('per-token losses, clip fractions and gradient by hand', () => {
    // five tokens, one row, token-mean
    const old = [0, 0, 0, 0, 0];
    const logRatio = [0.1, 0.5, -0.5, Math.log(4), Math.log(1.1)];
    const A = [1, 1, 1, -1, -1];
    const out = computePolicyLoss({
      oldLogprob: old,
      logprob: logRatio,
      advantages: A,
      mask: [1, 1, 1, 1, 1],
      B: 1,
      T: 5,
    });
    const r = logRatio.map(Math.exp);
    // 0: inside → −r; 1: A>0, r > 1.2 → clipped to −1.2 (flat); 2: A>0, r < 0.8 → −r (unclipped bigger);
    // 3: A<0, r = 4: max(4, 1.2) = 4 > c = 3 → dual clip 3 (flat); 4: A<0, r = 1.1 inside → r
    const lossMat = [-r[0], -1.2, -r[2], 3, r[4]];
    expectAllClose(out.lossMat, lossMat, 1e-15);
    expect(out.loss).toBeCloseTo(lossMat.reduce((a, b) => a + b, 0) / 5, 14);
    expect(out.clipfrac).toBeCloseTo(1 / 5, 9);
    expect(out.clipfracLower).toBeCloseTo(1 / 5, 9);
    expect(out.ppoKl).toBeCloseTo(-logRatio.reduce((a, b) => a + b, 0) / (5 + 1e-8), 14);
    expectAllClose(out.gradLogprob, [-r[0] / 5, 0, -r[2] / 5, 0, r[4] / 5], 1e-15);
    expectAllClose(out.ratio, r, 1e-15);
  });

  it('gradient = central finite differences in every aggregation mode, with globals', () => {
    const rand = rng(4);
    const old = randArray(N, rand, -3, -0.5);
    const A = randArray(N, rand, -2, 2);
    A[4 * 0 + 1] = -1.5; // keep one dual-clip candidate
    for (const mode of LOSS_AGG_MODES) {
      for (const globals of [undefined, { tokens: 13, rows: 5, maxLen: 8 }]) {
        const lp = Float64Array.from(old, (o) => o + (rand() - 0.5) * 1.6);
        lp[1] = old[1] + 1.3; // ratio ≈ 3.7 with A < 0: the dual clip's flat part
        const f = () =>
          computePolicyLoss({
            oldLogprob: old,
            logprob: lp,
            advantages: A,
            mask: RAGGED_MASK,
            B: B4,
            T: T6,
            mode,
            globals,
          });
        const { gradLogprob, clipfrac } = f();
        expect(clipfrac).toBeGreaterThan(0);
        expectAllClose(
          gradLogprob,
          numericGradient(lp, () => f().loss),
          1e-7,
        );
      }
    }
  });

  it('micro-batches with the whole batch’s globals: losses and gradients sum / concatenate to the whole', () => {
    const rand = rng(10);
    const old = randArray(N, rand, -3, -0.5);
    const lp = Float64Array.from(old, (o) => o + (rand() - 0.5));
    const A = randArray(N, rand);
    const globals: AggGlobals = { tokens: 9, rows: 3, maxLen: T6 };
    const half = 2 * T6;
    for (const mode of LOSS_AGG_MODES) {
      const whole = computePolicyLoss({
        oldLogprob: old,
        logprob: lp,
        advantages: A,
        mask: RAGGED_MASK,
        B: B4,
        T: T6,
        mode,
      });
      const part = (from: number, to: number) =>
        computePolicyLoss({
          oldLogprob: old.slice(from, to),
          logprob: lp.slice(from, to),
          advantages: A.slice(from, to),
          mask: RAGGED_MASK.slice(from, to),
          B: 2,
          T: T6,
          mode,
          globals,
        });
      const first = part(0, half);
      const second = part(half, N);
      expect(first.loss + second.loss).toBeCloseTo(whole.loss, 14);
      expectAllClose([...first.gradLogprob, ...second.gradLogprob], whole.gradLogprob, 1e-15);
    }
  });

  it('log-ratio clamped at ±20 before exp: no gradient beyond it', () => {
    const out = computePolicyLoss({
      oldLogprob: [0, 0],
      logprob: [25, -25],
      advantages: [-0.1, 1],
      mask: [1, 1],
      B: 1,
      T: 2,
      clipRatioC: 1e12,
    });
    expect(out.ratio[0]).toBe(Math.exp(20));
    expect(out.ratio[1]).toBe(Math.exp(-20));
    expect(out.gradLogprob[0] === 0).toBe(true);
    expect(out.gradLogprob[1] === 0).toBe(true);
    expect(out.ppoKl).toBe(0); // mean of −(20) and −(−20)
  });

  it('ties: ε-clip tie takes the unclipped gradient; dual-clip tie takes half (torch.maximum/minimum)', () => {
    // ε-clip tie: ratio exactly 1 + εhigh (A > 0) and exactly 1 − εlow (A < 0)
    const rHigh = Math.exp(0.15);
    const rLow = Math.exp(-0.1);
    const tie = computePolicyLoss({
      oldLogprob: [0, 0],
      logprob: [0.15, -0.1],
      advantages: [2, -3],
      mask: [1, 1],
      B: 1,
      T: 2,
      clipRatioHigh: rHigh - 1,
      clipRatioLow: 1 - rLow,
      mode: 'seq-mean-token-sum',
    });
    expect(tie.clipfrac).toBe(0); // strict comparison: a tie is not clipped
    expectAllClose(tie.gradLogprob, [-2 * rHigh, 3 * rLow], 1e-15);
    // dual-clip tie: A < 0, ratio exactly c
    const c = Math.exp(1);
    const dual = computePolicyLoss({
      oldLogprob: [0],
      logprob: [1],
      advantages: [-2],
      mask: [1],
      B: 1,
      T: 1,
      clipRatioC: c,
    });
    expect(dual.clipfracLower).toBe(0);
    expect(dual.loss).toBe(2 * c);
    expect(dual.gradLogprob[0]).toBe(0.5 * 2 * c);
  });

  it('rejects a dual-clip constant ≤ 1 and bad lengths', () => {
    expect(() =>
      computePolicyLoss({
        oldLogprob: [0],
        logprob: [0],
        advantages: [1],
        mask: [1],
        B: 1,
        T: 1,
        clipRatioC: 1,
      }),
    ).toThrow(/clipRatioC must be > 1/);
    expect(() =>
      computePolicyLoss({ oldLogprob: [0], logprob: [0, 1], advantages: [1], mask: [1], B: 1, T: 1 }),
    ).toThrow(/logprob has length 2/);
  });
});

describe('entropy, KL and value losses', () => {
  const N = B4 * T6;

  it('entropy loss: agg of entropy, gradient = finite differences', () => {
    const rand = rng(5);
    for (const mode of LOSS_AGG_MODES) {
      const h = randArray(N, rand, 0, 3);
      const out = computeEntropyLoss({ entropy: h, mask: RAGGED_MASK, B: B4, T: T6, mode });
      expect(out.loss).toBe(aggLoss(h, RAGGED_MASK, B4, T6, mode));
      expectAllClose(
        out.gradEntropy,
        numericGradient(
          h,
          () => computeEntropyLoss({ entropy: h, mask: RAGGED_MASK, B: B4, T: T6, mode }).loss,
        ),
        1e-8,
      );
    }
  });

  it('KL loss: 0 at logprob = ref for every kind; gradient = finite differences for every kind and mode', () => {
    const rand = rng(6);
    const ref = randArray(N, rand, -4, -0.1);
    for (const kind of KL_KINDS) {
      expect(
        computeKlLoss({ logprob: ref, refLogprob: ref, mask: RAGGED_MASK, B: B4, T: T6, kind }).loss,
      ).toBe(0);
      for (const mode of LOSS_AGG_MODES) {
        const lp = Float64Array.from(ref, (r) => r + (rand() - 0.5) * 2);
        const f = () =>
          computeKlLoss({ logprob: lp, refLogprob: ref, mask: RAGGED_MASK, B: B4, T: T6, kind, mode });
        expectAllClose(
          f().gradLogprob,
          numericGradient(lp, () => f().loss),
          1e-7,
        );
      }
    }
  });

  it('value loss by hand and gradient = finite differences', () => {
    // v inside the clip; v clipped with the clipped loss larger; v clipped with the unclipped loss larger
    const out = computeValueLoss({
      vpreds: [0.1, 1, -1],
      oldValues: [0, 0, 0],
      returns: [0.5, 0, 0.5],
      mask: [1, 1, 1],
      B: 1,
      T: 3,
    });
    // 0: (0.1−0.5)² = 0.16; 1: max(1, 0.04) = 1; 2: max(2.25, (−0.2−0.5)² = 0.49) = 2.25
    expectAllClose(out.lossMat, [0.16, 1, 2.25], 1e-15);
    expect(out.loss).toBeCloseTo((0.5 * (0.16 + 1 + 2.25)) / 3, 15);
    expect(out.clipfrac).toBe(0);
    const clipped = computeValueLoss({
      vpreds: [0.5],
      oldValues: [0],
      returns: [0.1],
      mask: [1],
      B: 1,
      T: 1,
    });
    // l1 = 0.16, vclip = 0.2, l2 = 0.01: unclipped bigger; now returns above: vclip − R larger
    expect(clipped.clipfrac).toBe(0);
    const clipped2 = computeValueLoss({
      vpreds: [0.5],
      oldValues: [0],
      returns: [0.45],
      mask: [1],
      B: 1,
      T: 1,
    });
    expect(clipped2.clipfrac).toBeCloseTo(1, 7); // (0.2 − 0.45)² > (0.5 − 0.45)²
    expect(clipped2.gradVpreds[0]).toBe(0); // the clipped branch is flat in v
    const rand = rng(7);
    for (const mode of LOSS_AGG_MODES) {
      const old = randArray(N, rand);
      const ret = randArray(N, rand);
      const v = Float64Array.from(old, (o) => o + (rand() - 0.5));
      const f = () =>
        computeValueLoss({
          vpreds: v,
          oldValues: old,
          returns: ret,
          mask: RAGGED_MASK,
          B: B4,
          T: T6,
          mode,
          clipRangeValue: 0.2,
        });
      expectAllClose(
        f().gradVpreds,
        numericGradient(v, () => f().loss),
        1e-7,
      );
    }
  });
});

describe('GSPO and CISPO', () => {
  const N = B4 * T6;

  it('GSPO: sequence ratio from the mean row log-ratio, seq-mean-token-mean; gradient = finite differences for a row-constant advantage', () => {
    const rand = rng(8);
    const old = randArray(N, rand, -3, -0.5);
    const lp = Float64Array.from(old, (o) => o + (rand() - 0.5) * 0.6);
    const rowA = [0.8, -0.4, -1.2, 1.5];
    const A = Float64Array.from({ length: N }, (_, i) => rowA[Math.floor(i / T6)]);
    const f = () =>
      computeGspoPolicyLoss({
        oldLogprob: old,
        logprob: lp,
        advantages: A,
        mask: RAGGED_MASK,
        B: B4,
        T: T6,
        clipRatioLow: 0.05,
        clipRatioHigh: 0.05,
      });
    const out = f();
    // row 0: policy tokens 0, 1, 4
    const s0 = Math.exp((lp[0] - old[0] + lp[1] - old[1] + lp[4] - old[4]) / 3);
    expect(out.ratio[0]).toBeCloseTo(s0, 14);
    expect(out.ratio[4]).toBeCloseTo(s0, 14);
    expect(out.ratio[2]).toBe(0);
    // straight-line loss: mean over the 3 non-empty rows of max(−A·s, −A·clip(s))
    let expected = 0;
    for (const b of [0, 2, 3]) {
      let n = 0;
      let sum = 0;
      for (let t = 0; t < T6; t++) {
        if (RAGGED_MASK[b * T6 + t] !== 1) continue;
        n++;
        sum += lp[b * T6 + t] - old[b * T6 + t];
      }
      const s = Math.exp(sum / n);
      expected += Math.max(-rowA[b] * s, -rowA[b] * Math.min(1.05, Math.max(0.95, s)));
    }
    expect(out.loss).toBeCloseTo(expected / 3, 14);
    expectAllClose(
      out.gradLogprob,
      numericGradient(lp, () => f().loss),
      1e-7,
    );
  });

  it('CISPO: −clip(r)·A·logp; gradient = finite differences with the clipped ratio held fixed', () => {
    const rand = rng(9);
    const old = randArray(N, rand, -3, -0.5);
    const lp = Float64Array.from(old, (o) => o + (rand() - 0.5) * 1.2);
    const A = randArray(N, rand);
    for (const mode of LOSS_AGG_MODES) {
      const out = computeCispoPolicyLoss({
        oldLogprob: old,
        logprob: lp,
        advantages: A,
        mask: RAGGED_MASK,
        B: B4,
        T: T6,
        clipRatioLow: 0.2,
        clipRatioHigh: 0.2,
        mode,
      });
      const rClip = Float64Array.from(lp, (l, i) => Math.min(1.2, Math.max(0.8, Math.exp(l - old[i]))));
      expect(out.clipfrac).toBeGreaterThan(0);
      const surrogate = () =>
        aggLoss(
          Float64Array.from(lp, (l, i) => -rClip[i] * A[i] * l),
          RAGGED_MASK,
          B4,
          T6,
          mode,
        );
      expect(out.loss).toBeCloseTo(surrogate(), 14);
      expectAllClose(out.gradLogprob, numericGradient(lp, surrogate), 1e-7);
    }
  });
});
