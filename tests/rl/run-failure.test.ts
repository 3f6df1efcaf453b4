// The message `npm run train` prints when a run stops on an error between or inside steps.
import { describe, expect, it } from 'vitest';
import { GpuOutOfMemoryError } from '../../src/gpu/errors.ts';
import { runFailureMessage } from '../../src/rl/run.ts';

describe('runFailureMessage', () => {
  it('names the last step, the error and where --resume starts', () => {
    const m = runFailureMessage(new Error('disk full'), 12, 10);
    expect(m).toBe(
      'the run failed after step 12: disk full\nThe last checkpoint is step 10: --resume continues from it.',
    );
    expect(runFailureMessage('odd', 0, undefined)).toBe(
      'the run failed after step 0: odd\nNo checkpoint was saved yet: the run starts over (--force).',
    );
  });

  it('says what to change when the GPU ran out of memory', () => {
    const m = runFailureMessage(new GpuOutOfMemoryError('allocating 56.0 MiB for "linear.y"'), 1, undefined);
    expect(m).toMatch(
      /^the run failed after step 1: GPU out of memory: allocating 56\.0 MiB for "linear\.y"\n/,
    );
    expect(m).toMatch(/Other programs on the same GPU/);
    expect(m).toMatch(/train\.memoryBudgetMiB \(--memory-budget\)/);
    expect(m).toMatch(/train\.microBatchRows/);
  });
});
