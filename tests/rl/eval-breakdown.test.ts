// scoresByType and modalAnswer (src/rl/trainer.ts): the evaluation's EM per question type and the most
// frequent answer, which show a policy that learned one answer ("no") instead of reading.
import { describe, expect, it } from 'vitest';
import type { QaTask } from '../../src/env/tasks/schema.ts';
import type { Trajectory } from '../../src/rl/rollout.ts';
import { modalAnswer, scoresByType } from '../../src/rl/trainer.ts';

const task = (id: string, type?: string) => ({ id, ...(type ? { type } : {}) }) as unknown as QaTask;
const episode = (taskId: string, prediction: string | null, em: number, f1 = em) =>
  ({ taskId, prediction, outcome: { em, f1 } }) as unknown as Trajectory;

describe('scoresByType', () => {
  it('averages EM and F1 within each task type; a task without a type is "untyped"', () => {
    const tasks = [task('a', 'yesno'), task('b', 'bridge'), task('c', 'yesno'), task('d')];
    const scores = scoresByType(tasks, [
      episode('a', 'no', 1),
      episode('b', 'Port Vel', 0, 0.5),
      episode('c', 'no', 0),
      episode('d', null, 0),
      episode('a', 'yes', 0),
    ]);
    expect(Object.keys(scores)).toEqual(['yesno', 'bridge', 'untyped']);
    expect(scores.yesno).toEqual({ n: 3, em: 1 / 3, f1: 1 / 3 });
    expect(scores.bridge).toEqual({ n: 1, em: 0, f1: 0.5 });
    expect(scores.untyped).toEqual({ n: 1, em: 0, f1: 0 });
    expect(scoresByType(tasks, [])).toEqual({});
  });
});

describe('modalAnswer', () => {
  it('counts answers as EM normalises them; no answer counts as the empty answer', () => {
    expect(modalAnswer([episode('a', 'No.', 1), episode('b', ' no', 0), episode('c', 'The Vel', 0)])).toEqual(
      {
        answer: 'no',
        share: 2 / 3,
      },
    );
    expect(modalAnswer([episode('a', null, 0), episode('b', null, 0), episode('c', 'yes', 0)])).toEqual({
      answer: '',
      share: 2 / 3,
    });
    expect(modalAnswer([])).toEqual({ answer: '', share: 0 });
  });
});
