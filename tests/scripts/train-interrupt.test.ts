// `npm run train` stopped by Ctrl-C: the first SIGINT lets the step in flight finish, then the run
// evaluates, saves a checkpoint and exits 130; --resume continues from that checkpoint. The config
// is configs/micro.json with no periodic checkpoint, so the only checkpoint is the interrupt's. A
// second signal quits at once and saves nothing. An error mid-run ends it with a message naming
// the last checkpoint (exit 1), not an uncaught exception.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

function train(args: string[], onLine?: (line: string, child: ReturnType<typeof spawn>) => void) {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', '--import', './scripts/wgsl-hooks.mjs', 'scripts/train.ts', ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  const take = (chunk: Buffer) => {
    const text = chunk.toString('utf8');
    out += text;
    for (const line of text.split('\n')) if (line) onLine?.(line, child);
  };
  child.stdout.on('data', take);
  child.stderr.on('data', take);
  return new Promise<{ code: number | null; out: string }>((resolve) =>
    child.on('close', (code) => resolve({ code, out })),
  );
}

/** The micro config for 50 steps with no periodic eval or checkpoint, in a fresh temp folder. */
function microRun(prefix: string): { config: string; out: string } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const micro = JSON.parse(readFileSync('configs/micro.json', 'utf8'));
  const config = join(dir, 'micro-interrupt.json');
  writeFileSync(
    config,
    JSON.stringify({ ...micro, train: { ...micro.train, steps: 50, evalEvery: 0, checkpointEvery: 0 } }),
  );
  return { config, out: join(dir, 'run') };
}

describe('npm run train, interrupted', () => {
  it('finishes the step in flight, checkpoints, exits 130, and resumes from there', async () => {
    const { config, out } = microRun('train-interrupt-');
    let signalled = false;
    const first = await train(['--config', config, '--out', out], (line, child) => {
      // The progress line of step 1 (stdout is not a TTY, so each step prints one line).
      if (!signalled && /^\[1\/50\]/.test(line)) {
        signalled = true;
        child.kill('SIGINT');
      }
    });
    expect(signalled, first.out).toBe(true);
    expect(first.code, first.out).toBe(130);
    expect(first.out).toMatch(/train: SIGINT: stopping when the step in flight ends/);
    const stopped = /train: stopped \(SIGINT\) at step (\d+)/.exec(first.out);
    expect(stopped, first.out).not.toBeNull();
    const step = Number(stopped![1]);
    expect(step).toBeGreaterThanOrEqual(1);
    expect(step).toBeLessThan(50);
    expect(readdirSync(join(out, 'checkpoints'))).toEqual([`step-${String(step).padStart(6, '0')}`]);
    const stepLines = readFileSync(join(out, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((m) => typeof m['reward/mean'] === 'number');
    expect(stepLines.map((m) => m.step)).toEqual(Array.from({ length: step }, (_, i) => i + 1));

    const second = await train(['--config', config, '--out', out, '--resume', '--steps', String(step + 1)]);
    expect(second.code, second.out).toBe(0);
    expect(second.out).toMatch(new RegExp(`train: resuming .* from step ${step}`));
    expect(second.out).toMatch(new RegExp(`train: done at step ${step + 1}`));
    expect(existsSync(join(out, 'checkpoints', `step-${String(step + 1).padStart(6, '0')}`))).toBe(true);
  }, 400_000);

  it('quits at once on a second signal, saving nothing', async () => {
    const { config, out } = microRun('train-interrupt-twice-');
    let signalled = false;
    const r = await train(['--config', config, '--out', out], (line, child) => {
      // Two signals sent together merge into one pending signal: the second waits for the first's reply.
      if (!signalled && /^\[1\/50\]/.test(line)) {
        signalled = true;
        child.kill('SIGINT');
      }
      if (/train: SIGINT: stopping when the step in flight ends/.test(line)) child.kill('SIGINT');
    });
    expect(signalled, r.out).toBe(true);
    expect(r.code, r.out).toBe(130);
    expect(r.out).toMatch(/train: SIGINT again: quitting now/);
    expect(r.out).not.toMatch(/train: stopped \(SIGINT\)/);
    expect(existsSync(join(out, 'checkpoints'))).toBe(false);
  }, 400_000);

  it('stops on an error in the middle of a run with a message, not a crash', async () => {
    const { config, out } = microRun('train-fails-');
    // The run folder's samples/ is a plain file: the first sample trajectories the run writes (after
    // the step-0 evaluation) fail, once the trainer is built and the loop has begun.
    mkdirSync(out, { recursive: true });
    writeFileSync(join(out, 'samples'), 'not a folder');
    const r = await train(['--config', config, '--out', out]);
    expect(r.code, r.out).toBe(1);
    expect(r.out).toMatch(/train: the run failed after step 0: .*(ENOTDIR|EEXIST)/);
    expect(r.out).toMatch(/No checkpoint was saved yet: the run starts over \(--force\)/);
    expect(r.out).not.toMatch(/Node\.js v\d/); // no uncaught exception
  }, 400_000);
});
