// The micro version of `npm run bench:rollout` (bench/rollout.ts) on configs/micro.json: one rep of
// two questions × two samples prints its phase table with the shared and per-row prefills, decoding
// with a readback per step and in blocks of 4, and their ratios; bad arguments are one line and exit 2.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

const bench = (args: string[]) => {
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--import', './scripts/wgsl-hooks.mjs', 'bench/rollout.ts', ...args],
    { encoding: 'utf8', timeout: 240_000 },
  );
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
};

describe('npm run bench:rollout (micro)', () => {
  it('times one rollout by phase: shared or per-row prompt prefill, a readback per step or per block', () => {
    const r = bench(['--config', 'configs/micro.json', '--reps', '1', '--readback-steps', '1,4']);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/2 questions × 2 samples/);
    // | rep | prefill | steps per readback | rollout | appends | sampling | env | readbacks | ids appended | prompt / policy / env | tok/s |
    const row = (kind: string, steps: number) =>
      new RegExp(
        `\\| 0 \\| ${kind} \\| ${steps} \\| [\\d.]+ \\| [\\d.]+ \\| [\\d.]+ \\| [\\d.]+ \\| (\\d+) \\| (\\d+) \\| (\\d+) / (\\d+) / (\\d+) \\|`,
      );
    const shared = r.out.match(row('shared', 1));
    const perRow = r.out.match(row('per row', 1));
    const blocks = r.out.match(row('shared', 4));
    expect(shared, r.out).not.toBeNull();
    expect(perRow, r.out).not.toBeNull();
    expect(blocks, r.out).not.toBeNull();
    // Sharing appends each question's prompt once instead of twice; the episodes are the same.
    const [, readbacks, sharedIds, prompt, policy, env] = shared!.map(Number);
    const [, perRowReadbacks, perRowIds, prompt2, policy2, env2] = perRow!.map(Number);
    expect([prompt2, policy2, env2]).toEqual([prompt, policy, env]);
    expect(perRowIds - sharedIds).toBe(prompt / 2);
    expect(perRowReadbacks).toBe(readbacks);
    // Appended: the prompts and the env ids that continue an episode (not a last turn's closing one).
    expect(perRowIds).toBeLessThanOrEqual(prompt + env);
    expect(perRowIds).toBeGreaterThan(prompt);
    // Blocks of 4 decode steps: the same episodes, fewer readbacks.
    const [, blockReadbacks, blockIds, ...blockCounts] = blocks!.map(Number);
    expect([blockIds, ...blockCounts]).toEqual([sharedIds, prompt, policy, env]);
    expect(blockReadbacks).toBeLessThan(readbacks);
    expect(r.out).toMatch(/\| 0 \| per row ÷ shared \| \| [\d.]+× \|/);
    expect(r.out).toMatch(/\| 0 \| 1 ÷ 4 steps per readback \| \| [\d.]+× \|/);
  }, 250_000);

  it('refuses bad arguments with one line and exit 2', () => {
    const r = bench(['--config', 'configs/micro.json', '--samples', '0']);
    expect(r.status).toBe(2);
    expect(r.out).toMatch(/bench:rollout: --samples must be a positive integer, got 0/);
    const steps = bench(['--config', 'configs/micro.json', '--readback-steps', '1,0']);
    expect(steps.status).toBe(2);
    expect(steps.out).toMatch(/bench:rollout: --readback-steps takes positive integers, got 1,0/);
  }, 250_000);
});
