// The micro version of `npm run bench:rollout` (bench/rollout.ts) on configs/micro.json: one rep of
// two questions × two samples prints its phase table with the shared and per-row prefills and their
// ratio; bad arguments are one line and exit 2.
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
  it('times one rollout by phase, with and without the shared prompt prefill', () => {
    const r = bench(['--config', 'configs/micro.json', '--reps', '1']);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/2 questions × 2 samples/);
    const row = (kind: string) =>
      new RegExp(
        `\\| 0 \\| ${kind} \\| [\\d.]+ \\| [\\d.]+ \\| [\\d.]+ \\| [\\d.]+ \\| (\\d+) \\| (\\d+) / \\d+ / (\\d+) \\|`,
      );
    const shared = r.out.match(row('shared'));
    const perRow = r.out.match(row('per row'));
    expect(shared, r.out).not.toBeNull();
    expect(perRow, r.out).not.toBeNull();
    // Sharing appends each question's prompt once instead of twice; the episodes are the same.
    const [, sharedIds, prompt, env] = shared!.map(Number);
    const [, perRowIds, prompt2, env2] = perRow!.map(Number);
    expect([prompt2, env2]).toEqual([prompt, env]);
    expect(perRowIds - sharedIds).toBe(prompt / 2);
    // Appended: the prompts and the env ids that continue an episode (not a last turn's closing one).
    expect(perRowIds).toBeLessThanOrEqual(prompt + env);
    expect(perRowIds).toBeGreaterThan(prompt);
    expect(r.out).toMatch(/\| 0 \| per row ÷ shared \| [\d.]+× \|/);
  }, 250_000);

  it('refuses bad arguments with one line and exit 2', () => {
    const r = bench(['--config', 'configs/micro.json', '--samples', '0']);
    expect(r.status).toBe(2);
    expect(r.out).toMatch(/bench:rollout: --samples must be a positive integer, got 0/);
  }, 250_000);
});
