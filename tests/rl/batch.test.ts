import { describe, expect, it } from 'vitest';
import { buildTrainingBatch, sliceRows, type TrainableEpisode } from '../../src/rl/batch.ts';

// Two turns: prompt P P P, policy a b END, env e e, policy c END.
const ep: TrainableEpisode = {
  ids: [10, 11, 12, 20, 21, 99, 30, 31, 22, 99],
  sources: ['prompt', 'prompt', 'prompt', 'policy', 'policy', 'policy', 'env', 'env', 'policy', 'policy'],
  logprobs: [0, 0, 0, -0.1, -0.2, -0.3, 0, 0, -0.4, -0.5],
  group: 7,
  outcome: 1,
  process: [{ tokenIndex: 5, reward: 0.25 }],
};
const short: TrainableEpisode = {
  ids: [10, 11, 40, 99],
  sources: ['prompt', 'prompt', 'policy', 'policy'],
  logprobs: [0, 0, -1, -2],
  group: 3,
  outcome: -0.5,
  process: [],
};

describe('training batch', () => {
  it('shifts per-token quantities to the position that predicts the token', () => {
    const b = buildTrainingBatch([ep, short]);
    expect([b.B, b.T]).toEqual([2, 10]);
    // position i predicts ids[i + 1]
    expect(Array.from(b.targets.slice(0, 9))).toEqual(ep.ids.slice(1));
    expect(Array.from(b.lossMask.slice(0, 10))).toEqual([0, 0, 1, 1, 1, 0, 0, 1, 1, 0]);
    expect(Array.from(b.advMask.slice(0, 10))).toEqual([0, 0, 1, 1, 1, 0, 0, 1, 1, 0]);
    expect(Array.from(b.oldLogprob.slice(0, 10))).toEqual(
      Array.from(Float32Array.from([0, 0, -0.1, -0.2, -0.3, 0, 0, -0.4, -0.5, 0])),
    );
    // outcome on the last policy token (index 9 → position 8), process on token 5 → position 4
    expect(b.rewards[8]).toBe(1);
    expect(b.rewards[4]).toBe(0.25);
    expect(b.rewards.slice(0, 10).reduce((a, x) => a + x, 0)).toBe(1.25);
    // second row: padding after its 4 tokens is all zero
    expect(Array.from(b.lossMask.slice(10, 20))).toEqual([0, 1, 1, 0, 0, 0, 0, 0, 0, 0]);
    expect(b.rewards[12]).toBe(-0.5);
    expect(Array.from(b.index)).toEqual([7, 3]);
    expect(b.policyTokens).toEqual([5, 2]);
    expect(b.maxResponseLength).toBe(7);
  });

  it('ablations widen a mask to every response position; the policy mask stays', () => {
    const noLoss = buildTrainingBatch([ep], { lossMask: false });
    expect(Array.from(noLoss.lossMask)).toEqual([0, 0, 1, 1, 1, 1, 1, 1, 1, 0]);
    expect(Array.from(noLoss.advMask)).toEqual([0, 0, 1, 1, 1, 0, 0, 1, 1, 0]);
    const noAdv = buildTrainingBatch([ep], { advantageMask: false });
    expect(Array.from(noAdv.advMask)).toEqual([0, 0, 1, 1, 1, 1, 1, 1, 1, 0]);
    expect(Array.from(noAdv.policyMask)).toEqual([0, 0, 1, 1, 1, 0, 0, 1, 1, 0]);
  });

  it('weights process rewards and refuses one that is not on a policy token', () => {
    expect(buildTrainingBatch([ep], { processWeight: 2 }).rewards[4]).toBe(0.5);
    expect(() => buildTrainingBatch([{ ...ep, process: [{ tokenIndex: 6, reward: 1 }] }])).toThrow(
      /not a policy token/,
    );
    expect(() => buildTrainingBatch([{ ...ep, sources: ep.sources.slice(1) }])).toThrow(
      /episode 0 has 10 ids, 9 sources/,
    );
  });

  it('slices rows into mini-batches with the same T', () => {
    const b = buildTrainingBatch([ep, short]);
    const s = sliceRows(b, 1, 2);
    expect([s.B, s.T]).toEqual([1, 10]);
    expect(Array.from(s.lossMask)).toEqual(Array.from(b.lossMask.slice(10, 20)));
    expect(Array.from(s.index)).toEqual([3]);
    expect(Array.from(s.tokens.ids)).toEqual(Array.from(b.tokens.ids.slice(10, 20)));
  });
});
