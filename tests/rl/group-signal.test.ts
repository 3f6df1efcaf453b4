// groupSignal (src/rl/group-signal.ts): pass@k and the share of groups a group method can learn from,
// on worked examples; groupScores, the per-question rows behind pass@k and maj@k.
import { describe, expect, it } from 'vitest';
import { groupScores, groupSignal } from '../../src/rl/group-signal.ts';

describe('groupSignal', () => {
  it('gives pass@k, split groups and the reward std of a worked example', () => {
    const s = groupSignal([
      // group 0: one right of three, rewards differ
      { group: 0, em: 1, reward: 1 },
      { group: 0, em: 0, reward: 0 },
      { group: 0, em: 0, reward: -1 },
      // group 1: none right, rewards differ (format)
      { group: 1, em: 0, reward: 0 },
      { group: 1, em: 0, reward: -1 },
      // group 2: all right, all equal: no signal
      { group: 2, em: 1, reward: 1 },
      { group: 2, em: 1, reward: 1 },
      // group 3: a group of one
      { group: 3, em: 0, reward: 0.5 },
    ]);
    expect(s.groups).toBe(4);
    expect(s.episodes).toBe(8);
    expect(s.meanEm).toBe(3 / 8);
    expect(s.passAtK).toBe(2 / 4);
    expect(s.emSplitGroups).toBe(1 / 4);
    expect(s.rewardSplitGroups).toBe(2 / 4);
    const std0 = Math.sqrt(2 / 3); // rewards 1, 0, −1 around 0
    expect(s.meanRewardStd).toBeCloseTo((std0 + 0.5 + 0 + 0) / 4, 12);
  });

  it("gives maj@k, the EM of each group's most frequent answer, when every episode has an answer", () => {
    const ep = (group: number, answer: string | null, em: number) => ({ group, em, reward: em, answer });
    const s = groupSignal([
      // group 0: the right answer is the mode (2 of 4 votes; the null does not vote)
      ep(0, 'paris', 1),
      ep(0, 'paris', 1),
      ep(0, 'lyon', 0),
      ep(0, null, 0),
      // group 1: right once, a wrong answer twice: pass but no majority
      ep(1, 'no', 0),
      ep(1, 'no', 0),
      ep(1, 'yes', 1),
      // group 2: a tie between a right and a wrong answer counts half
      ep(2, 'a', 1),
      ep(2, 'b', 0),
      // group 3: no answer at all
      ep(3, null, 0),
      ep(3, null, 0),
    ]);
    expect(s.passAtK).toBe(3 / 4);
    expect(s.majAtK).toBe((1 + 0 + 0.5 + 0) / 4);
    // without answers (or with any missing) there is no maj@k
    expect(groupSignal([{ group: 0, em: 1, reward: 1 }]).majAtK).toBeUndefined();
    expect(
      groupSignal([
        { group: 0, em: 1, reward: 1, answer: 'x' },
        { group: 0, em: 1, reward: 1 },
      ]).majAtK,
    ).toBeUndefined();
  });

  it('takes interleaved groups and refuses an empty batch', () => {
    const s = groupSignal([
      { group: 1, em: 0, reward: 0 },
      { group: 0, em: 1, reward: 1 },
      { group: 1, em: 1, reward: 1 },
      { group: 0, em: 1, reward: 1 },
    ]);
    expect(s.passAtK).toBe(1);
    expect(s.emSplitGroups).toBe(0.5);
    expect(() => groupSignal([])).toThrow(/no episodes/);
  });

  it("gives each group's mean, pass and majority scores with F1, in the order the groups come", () => {
    const ep = (group: number, answer: string | null, em: number, f1: number) => ({
      group,
      em,
      f1,
      reward: em,
      answer,
    });
    const episodes = [
      // group 2 comes first: a tie between a right answer and a half-right one
      ep(2, 'a', 1, 1),
      ep(2, 'b', 0, 0.5),
      // group 0: the wrong answer is the mode; one sample right
      ep(0, 'no', 0, 0),
      ep(0, 'no', 0, 0),
      ep(0, 'yes', 1, 1),
      ep(0, null, 0, 0),
      // group 1: no answer at all
      ep(1, null, 0, 0),
    ];
    expect(groupScores(episodes)).toEqual([
      { group: 2, meanEm: 0.5, meanF1: 0.75, pass: 1, bestF1: 1, majEm: 0.5, majF1: 0.75 },
      { group: 0, meanEm: 0.25, meanF1: 0.25, pass: 1, bestF1: 1, majEm: 0, majF1: 0 },
      { group: 1, meanEm: 0, meanF1: 0, pass: 0, bestF1: 0, majEm: 0, majF1: 0 },
    ]);
    // The group rows add up to groupSignal's pass@k and maj@k.
    const s = groupSignal(episodes);
    expect(s.passAtK).toBe(2 / 3);
    expect(s.majAtK).toBe(0.5 / 3);
    // Without F1 or answers those fields are left out.
    expect(groupScores([{ group: 0, em: 1, reward: 1 }])).toEqual([{ group: 0, meanEm: 1, pass: 1 }]);
  });
});
