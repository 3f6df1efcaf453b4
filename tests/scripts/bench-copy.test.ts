// The micro version of `npm run bench:copy` (bench/copy-probe.ts): the copy probe on two held-out
// traces with the bundled qwen-tiny prints its line; a bad argument or model folder is one line, exit 2.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

const bench = (args: string[]) => {
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--import', './scripts/wgsl-hooks.mjs', 'bench/copy-probe.ts', ...args],
    { encoding: 'utf8', timeout: 120_000 },
  );
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
};

describe('npm run bench:copy (micro)', () => {
  it('probes the bundled model on 2 held-out traces', () => {
    const r = bench(['--n', '2']);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(
      /public\/models\/qwen-tiny: 2 held-out traces · answer's first token p [\d.]+ \(p > ½: \d+ %\) · its other \d+ tokens p [\d.]+/,
    );
  }, 130_000);

  it('refuses a bad --n and a missing model folder with one line and exit 2', () => {
    const n = bench(['--n', '0']);
    expect(n.status).toBe(2);
    expect(n.out).toMatch(/bench:copy: --n must be a positive integer, got 0/);
    const m = bench(['--model', 'no/such/folder']);
    expect(m.status).toBe(2);
    expect(m.out).toMatch(/bench:copy: cannot load the model at no\/such\/folder: /);
  }, 130_000);
});
