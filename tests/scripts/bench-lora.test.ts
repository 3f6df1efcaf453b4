// The micro version of `npm run bench:lora` (bench/lora-step.ts), so the benchmark keeps running: a
// GRPO update with LoRA, a bf16 base and recomputation on the tiny shape with Qwen's vocabulary, and
// the LM head timed alone. Checks that it completes and that the planner's prediction it prints is
// within 10% of the peak it measured (the benchmark's own figures are in docs/benchmarks.md).
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

const bench = (args: string[]) => {
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--import', './scripts/wgsl-hooks.mjs', 'bench/lora-step.ts', ...args],
    { encoding: 'utf8', timeout: 240_000 },
  );
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
};

describe('npm run bench:lora (micro)', () => {
  it('runs the update on the tiny shape; the planner is within 10% of the measured peak', () => {
    const r = bench(['--shape', 'tiny', '--rows', '2', '--tokens', '48', '--decode', '1']);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/LoRA r16 \(bf16 base\), recomputation, 2 × 48/);
    expect(r.out).toMatch(/update step: [\d.]+ s \([\d.]+ tok\/s over 96 tokens\)/);
    const ratio = Number(/\(ratio ([\d.]+)\)/.exec(r.out)?.[1]);
    expect(ratio, r.out).toBeGreaterThan(0.9);
    expect(ratio, r.out).toBeLessThan(1.1);
  }, 250_000);

  it('times the LM head before (all rows, f32, with dW) and after (policy rows, frozen bf16)', () => {
    const r = bench(['--shape', 'tiny', '--rows', '2', '--tokens', '48', '--head-only']);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/LM head before \(all 96 rows, f32, with dW\): [\d.]+ s per step/);
    expect(r.out).toMatch(
      /LM head after \(\d+ policy rows, bf16, frozen\): [\d.]+ s per step \([\d.]+× less time\)/,
    );
  }, 250_000);
});
