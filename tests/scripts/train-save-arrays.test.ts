// npm run train -- --save-arrays: sets train.saveArrays from the command line (so a config need not be
// copied to probe a run), writes arrays/step-*.json that npm run probe:adv-mask reads, and changes no
// number the run computes: the same run without the flag logs the same metrics but timings.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const node = (script: string, args: string[]) => {
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--import', './scripts/wgsl-hooks.mjs', script, ...args],
    { encoding: 'utf8', timeout: 300_000 },
  );
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
};

const dir = mkdtempSync(join(tmpdir(), 'train-save-arrays-'));
const config = join(dir, 'micro-ppo.json');
const micro = JSON.parse(readFileSync('configs/micro.json', 'utf8'));
writeFileSync(
  config,
  JSON.stringify({
    ...micro,
    algorithm: { name: 'ppo', gamma: 1, lam: 0.95 },
    train: { ...micro.train, steps: 1, evalEvery: 0, evalSize: 0, checkpointEvery: 0 },
  }),
);

/** The run's step lines without what measures time or the machine (seconds, rates, GPU memory, readbacks). */
function stepMetrics(run: string): Array<Record<string, unknown>> {
  return readFileSync(join(run, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .filter((m) => typeof m['reward/mean'] === 'number')
    .map((m) =>
      Object.fromEntries(Object.entries(m).filter(([k]) => !/^(time|perf)\//.test(k) && !/_s$/.test(k))),
    );
}

describe('npm run train -- --save-arrays', () => {
  it("writes each step's arrays for the probe and changes no number the run computes", () => {
    const withArrays = join(dir, 'with');
    const a = node('scripts/train.ts', ['--config', config, '--out', withArrays, '--save-arrays', '--quiet']);
    expect(a.status, a.out).toBe(0);
    expect(readdirSync(join(withArrays, 'arrays'))).toEqual(['step-000001.json']);
    expect(JSON.parse(readFileSync(join(withArrays, 'config.json'), 'utf8')).train.saveArrays).toBe(true);

    const without = join(dir, 'without');
    const b = node('scripts/train.ts', ['--config', config, '--out', without, '--quiet']);
    expect(b.status, b.out).toBe(0);
    expect(existsSync(join(without, 'arrays'))).toBe(false);
    const m = stepMetrics(withArrays);
    expect(m).toHaveLength(1);
    expect(Object.keys(m[0]).length).toBeGreaterThan(20);
    expect(stepMetrics(without)).toEqual(m);

    const probe = node('scripts/advantage-mask-probe.ts', [withArrays]);
    expect(probe.status, probe.out).toBe(0);
    expect(probe.out).toContain("the run's own arm: with the advantage mask");
  }, 600_000);

  it('is refused with --evaluate-only, in one line', () => {
    const r = node('scripts/train.ts', ['--config', config, '--evaluate-only', '--save-arrays']);
    expect(r.status).toBe(2);
    expect(r.out).toMatch(/train: --save-arrays goes with training, not --evaluate-only/);
    expect(r.out).not.toMatch(/\n\s+at /); // no stack trace
  });
});
