// truncatedTurnShare (src/rl/trainer.ts): the share of the policy's turns cut at the new-token limit.
import { describe, expect, it } from 'vitest';
import type { Trajectory, TurnEnd } from '../../src/rl/rollout.ts';
import { truncatedTurnShare } from '../../src/rl/trainer.ts';

const episode = (...ends: TurnEnd[]) =>
  ({ turnRecords: ends.map((end) => ({ end })) }) as unknown as Trajectory;

describe('truncatedTurnShare', () => {
  it('counts turns, not episodes; no turns gives 0', () => {
    expect(truncatedTurnShare([])).toBe(0);
    expect(truncatedTurnShare([episode()])).toBe(0);
    expect(truncatedTurnShare([episode('length', 'im_end', 'im_end'), episode('length')])).toBe(0.5);
    expect(truncatedTurnShare([episode('endoftext', 'im_end')])).toBe(0);
  });
});
