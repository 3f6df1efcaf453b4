// The inspector's per-token training arrays: token j of trajectory `row` reads position j − 1 of the
// [B, T] batch arrays (the position that predicts it), and only policy tokens get values.
import { describe, expect, it } from 'vitest';
import { perTokenTrainArrays } from '../../src/worker/engine.ts';

describe('perTokenTrainArrays', () => {
  it('maps token j to batch position row·T + j − 1, policy tokens only', () => {
    const T = 4;
    // Row 1 of a [2, 4] batch: prompt, policy, policy, env.
    const traj = { ids: [10, 11, 12, 13], sources: ['prompt', 'policy', 'policy', 'env'] as const };
    const logprob = Float32Array.from([0, 0, 0, 0, -0.5, -1, -2, 0]);
    const oldLogprob = Float32Array.from([0, 0, 0, 0, -0.25, -1.5, 0, 0]);
    const ref = Float32Array.from([0, 0, 0, 0, -0.75, -0.5, 0, 0]);
    const advantages = Float32Array.from([9, 9, 9, 9, 0.3, -0.7, 9, 9]);
    const out = perTokenTrainArrays({ ids: traj.ids, sources: [...traj.sources] }, 1, {
      batch: { T, oldLogprob },
      logprob,
      ref,
      advantages,
    });
    expect(out.advantage.map((x) => (Number.isNaN(x) ? null : Number(x.toFixed(6))))).toEqual([
      null,
      0.3,
      -0.7,
      null,
    ]);
    expect(out.ratio[1]).toBeCloseTo(Math.exp(-0.5 + 0.25), 6);
    expect(out.ratio[2]).toBeCloseTo(Math.exp(-1 + 1.5), 6);
    expect(out.kl[1]).toBeCloseTo(-0.5 + 0.75, 6);
    expect(out.kl[2]).toBeCloseTo(-1 + 0.5, 6);
    expect(Number.isNaN(out.kl[3])).toBe(true);
  });
});
