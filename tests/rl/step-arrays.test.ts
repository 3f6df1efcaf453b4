// The step-arrays file (train.saveArrays) and the advantage-mask comparison on worked examples:
// a zero critic, so GAE's advantage at a position is λ^(positions of the arm's mask after it) × the
// outcome, computed here by hand and whitened by hand (unbiased variance), independently of core-algos.
import { describe, expect, it } from 'vitest';
import { buildTrainingBatch } from '../../src/rl/batch.ts';
import type { TokenSource } from '../../src/rl/rollout.ts';
import {
  compareAdvantageMasks,
  parseStepArrays,
  STEP_ARRAYS_FORMAT,
  type StepArraysFile,
  stepArraysFile,
} from '../../src/rl/step-arrays.ts';

// Targets of positions 0..8: prompt, policy × 2, env × 3, policy × 3 (position i scores token i + 1).
const layout = '0' + '11' + '000' + '111';
const length = layout.length;

function file(outcomes: number[], advMask: 'policy' | 'response' = 'policy'): StepArraysFile {
  return {
    format: STEP_ARRAYS_FORMAT,
    step: 1,
    rows: outcomes.map((r, b) => ({
      group: b,
      length,
      firstResponse: 1,
      policy: layout,
      advMask: advMask === 'policy' ? layout : response,
      rewards: r === 0 ? [] : [[length - 1, r]],
      values: Array(length).fill(0),
      advantages: Array(length).fill(0),
    })),
  };
}

/** Hand GAE with a zero critic and γ = 1: λ^(mask positions after j) × outcome, over the row's mask. */
function handGae(outcome: number, mask: string, lam: number): number[] {
  const out = Array(length).fill(0);
  let after = 0;
  for (let j = length - 1; j >= 0; j--) {
    if (mask[j] !== '1') continue;
    out[j] = lam ** after * outcome;
    after++;
  }
  return out;
}

function handWhiten(rows: number[][], mask: string): number[][] {
  const xs = rows.flatMap((r) => r.filter((_, j) => mask[j] === '1'));
  const n = xs.length;
  const mean = xs.reduce((a, b) => a + b, 0) / (n + 1e-8); // verl's masked_mean, its 1e-8 too
  // verl's masked_var (unbiased; the 1e-8 on the count is verl's) and masked_whiten: (x − mean) · rsqrt(var + 1e-8)
  const variance = (xs.reduce((a, x) => a + (x - mean) ** 2, 0) / (n + 1e-8)) * (n / (n - 1));
  return rows.map((r) => r.map((x, j) => (mask[j] === '1' ? (x - mean) / Math.sqrt(variance + 1e-8) : 0)));
}

/** Every response position (the ablation's mask). */
const response = '0' + '1'.repeat(length - 1);

/** Mean |x| over the policy positions of [from, to) of every row. */
function meanAbs(rows: number[][], from = 0, to = length): number {
  const xs = rows.flatMap((r) => r.slice(from, to).filter((_, k) => layout[from + k] === '1'));
  return xs.reduce((a, x) => a + Math.abs(x), 0) / xs.length;
}

function pearson(a: number[], b: number[]): number {
  const ma = a.reduce((x, y) => x + y, 0) / a.length;
  const mb = b.reduce((x, y) => x + y, 0) / b.length;
  const cov = a.reduce((s, x, i) => s + (x - ma) * (b[i] - mb), 0);
  const va = a.reduce((s, x) => s + (x - ma) ** 2, 0);
  const vb = b.reduce((s, x) => s + (x - mb) ** 2, 0);
  return cov / Math.sqrt(va * vb);
}

describe('step arrays: the advantage-mask comparison', () => {
  it('γ = λ = 1, zero critic: both arms give each row its outcome; they differ only by the whitening', () => {
    const cmp = compareAdvantageMasks(file([1, 0]), { gamma: 1, lam: 1 });
    // with the mask: 5 policy positions a row, 1 and 0: mean 0.5, std √(10 · 0.25 / 9)
    const sMasked = Math.sqrt((10 * 0.25) / 9);
    const sUnmasked = Math.sqrt((16 * 0.25) / 15); // 8 response positions a row
    expect(cmp.whitening.masked.mean).toBeCloseTo(0.5, 12);
    expect(cmp.whitening.masked.std).toBeCloseTo(sMasked, 12);
    expect(cmp.whitening.unmasked.std).toBeCloseTo(sUnmasked, 12);
    expect(cmp.all.tokens).toBe(10);
    expect(cmp.lastTurn.tokens).toBe(6);
    expect(cmp.earlierTurns.tokens).toBe(4);
    expect(cmp.all.meanAbsMasked).toBeCloseTo(
      meanAbs(handWhiten([handGae(1, layout, 1), handGae(0, layout, 1)], layout)),
      12,
    );
    expect(cmp.all.meanAbsUnmasked).toBeCloseTo(
      meanAbs(handWhiten([handGae(1, response, 1), handGae(0, response, 1)], response)),
      12,
    );
    // every whitened advantage is ±0.5/std (each arm's own std), so the mean |A| ≈ that
    expect(cmp.all.meanAbsMasked).toBeCloseTo(0.5 / sMasked, 6);
    expect(cmp.all.meanAbsUnmasked).toBeCloseTo(0.5 / sUnmasked, 6);
    expect(cmp.all.correlation).toBeCloseTo(1, 12);
    expect(cmp.all.signAgreement).toBe(1);
    expect(cmp.all.rewardCorrelationMasked).toBeCloseTo(1, 12);
    expect(cmp.all.rewardCorrelationUnmasked).toBeCloseTo(1, 12);
    expect(cmp.runArm).toBe('masked');
  });

  it('λ < 1: the earlier turn is discounted once per environment token without the mask', () => {
    const lam = 0.5;
    const cmp = compareAdvantageMasks(file([1, 0, 1]), { gamma: 1, lam });
    const masked = handWhiten(
      [1, 0, 1].map((r) => handGae(r, layout, lam)),
      layout,
    );
    const unmasked = handWhiten(
      [1, 0, 1].map((r) => handGae(r, response, lam)),
      response,
    );
    expect(cmp.earlierTurns.meanAbsMasked).toBeCloseTo(meanAbs(masked, 0, 3), 12);
    expect(cmp.earlierTurns.meanAbsUnmasked).toBeCloseTo(meanAbs(unmasked, 0, 3), 12);
    expect(cmp.lastTurn.meanAbsMasked).toBeCloseTo(meanAbs(masked, 6), 12);
    expect(cmp.lastTurn.meanAbsUnmasked).toBeCloseTo(meanAbs(unmasked, 6), 12);
    // each arm's correlation with the episode's reward, on the earlier turn's tokens (positions 1 and 2)
    const earlier = (rows: number[][]) => rows.flatMap((r) => [r[1], r[2]]);
    const rewards = [1, 1, 0, 0, 1, 1];
    expect(cmp.earlierTurns.rewardCorrelationMasked).toBeCloseTo(pearson(earlier(masked), rewards), 12);
    expect(cmp.earlierTurns.rewardCorrelationUnmasked).toBeCloseTo(pearson(earlier(unmasked), rewards), 12);
    // rows of one layout and a zero critic: without the mask each earlier advantage is λ³ times the
    // masked one before whitening (three environment tokens more), so the two correlate alike with the
    // reward and with each other
    expect(cmp.earlierTurns.rewardCorrelationUnmasked).toBeCloseTo(
      cmp.earlierTurns.rewardCorrelationMasked,
      12,
    );
    expect(cmp.earlierTurns.correlation).toBeCloseTo(1, 12);
    // the raw advantage at the first policy token: λ⁴ with the mask, λ⁷ without (three env tokens more)
    expect(handGae(1, layout, lam)[1]).toBe(lam ** 4);
    expect(handGae(1, response, lam)[1]).toBe(lam ** 7);
  });

  it('names the run arm and measures the GPU advantages against the CPU twin of that arm', () => {
    const f = file([1, 0], 'response');
    const lam = 0.5;
    const unmasked = handWhiten(
      [1, 0].map((r) => handGae(r, response, lam)),
      response,
    );
    f.rows.forEach((r, b) => {
      r.advantages = unmasked[b].map((x) => Math.fround(x));
    });
    const cmp = compareAdvantageMasks(f, { gamma: 1, lam });
    expect(cmp.runArm).toBe('unmasked');
    expect(cmp.gpuVsCpuMaxAbs).toBeLessThan(1e-6);
    f.rows[0].advantages[1] += 0.25;
    expect(compareAdvantageMasks(f, { gamma: 1, lam }).gpuVsCpuMaxAbs).toBeCloseTo(0.25, 6);
    f.rows[0].advMask = '0' + '1'.repeat(4) + '0'.repeat(4); // neither arm (another ablation)
    const other = compareAdvantageMasks(f, { gamma: 1, lam });
    expect(other.runArm).toBe('other');
    expect(other.gpuVsCpuMaxAbs).toBeNaN();
  });
});

describe('step arrays: the file', () => {
  it('holds a batch row by row (real positions only, float32 exact) and reads back', () => {
    const sources = (s: string): TokenSource[] =>
      [...s].map((c) => (c === 'p' ? 'prompt' : c === 'a' ? 'policy' : 'env'));
    const episodes = [
      { s: 'ppaaeeaa', outcome: 1 },
      { s: 'pppaaea', outcome: -0.5 },
    ].map(({ s, outcome }, b) => ({
      ids: [...s].map((_, j) => 10 + j),
      sources: sources(s),
      logprobs: [...s].map((c) => (c === 'a' ? -0.5 : 0)),
      group: b,
      outcome,
      process: [],
    }));
    const batch = buildTrainingBatch(episodes);
    const N = batch.B * batch.T;
    const advantages = Float32Array.from({ length: N }, (_, i) =>
      batch.advMask[i] ? Math.fround(0.1 * i - 0.3) : 0,
    );
    const values = Float32Array.from({ length: N }, (_, i) => Math.fround(1 / (i + 3)));
    const f = parseStepArrays(JSON.stringify(stepArraysFile(7, { batch, advantages, values })));
    expect(f.step).toBe(7);
    expect(f.rows.map((r) => r.length)).toEqual([7, 6]);
    expect(f.rows.map((r) => r.policy)).toEqual(['0110011', '001101']);
    expect(f.rows.map((r) => r.firstResponse)).toEqual([1, 2]);
    expect(f.rows.map((r) => r.rewards)).toEqual([[[6, 1]], [[5, -0.5]]]);
    f.rows.forEach((r, b) => {
      for (let j = 0; j < r.length; j++) {
        expect(r.values![j]).toBe(values[b * batch.T + j]);
        expect(r.advantages[j]).toBe(advantages[b * batch.T + j]);
      }
    });
    expect(stepArraysFile(1, { batch, advantages, values: null }).rows[0].values).toBeNull();
  });

  it('rejects what is not a step file, naming it', () => {
    expect(() => parseStepArrays('{', 'a.json')).toThrow(/a\.json: not JSON/);
    expect(() => parseStepArrays('{"format":"x","rows":[]}', 'a.json')).toThrow(/not a step-arrays file/);
    const f = file([1]);
    f.rows[0].advantages.pop();
    expect(() => parseStepArrays(JSON.stringify(f), 'a.json')).toThrow(/a\.json: row 0 is malformed/);
    const g = file([1]);
    g.rows[0].rewards = [[99, 1]];
    expect(() => parseStepArrays(JSON.stringify(g), 'a.json')).toThrow(/row 0 is malformed/);
  });
});
