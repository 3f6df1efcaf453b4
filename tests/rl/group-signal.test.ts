// groupSignal (src/rl/group-signal.ts): pass@k and the share of groups a group method can learn from,
// on worked examples.
import { describe, expect, it } from 'vitest';
import { groupSignal } from '../../src/rl/group-signal.ts';

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
});
