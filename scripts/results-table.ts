// npm run results -- runs/grpo runs/ppo ...   (or: node --import tsx scripts/results-table.ts <run dirs>)
// Prints a markdown table from training runs' metrics.jsonl: the held-out evaluation (greedy, the
// run's test split) at the start (the warm start) and at the end, with the step count and wall time.
// docs/results.md is written from its output.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { keepWorkingWhenStdoutCloses } from './closed-stdout.ts';

keepWorkingWhenStdoutCloses();

interface Line {
  step: number;
  [key: string]: number | string;
}

function fail(message: string): never {
  console.error(`results: ${message}`);
  process.exit(2);
}

function readRun(dir: string): {
  name: string;
  algorithm: string;
  lines: Line[];
  config: Record<string, unknown>;
} {
  let text: string;
  try {
    text = readFileSync(join(dir, 'metrics.jsonl'), 'utf8');
  } catch (e) {
    console.error(`results: cannot read ${join(dir, 'metrics.jsonl')}: ${(e as Error).message}`);
    process.exit(2);
  }
  const lines = text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l, i) => {
      try {
        return JSON.parse(l) as Line;
      } catch {
        return fail(`${dir}/metrics.jsonl:${i + 1} is not JSON`);
      }
    });
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  const algorithm = (config.algorithm as { name: string }).name;
  return { name: String(config.name), algorithm, lines, config };
}

const pct = (x: unknown) => (typeof x === 'number' ? (100 * x).toFixed(1) : '–');

const dirs = process.argv.slice(2);
if (dirs.length === 0) {
  console.error('usage: node --import tsx scripts/results-table.ts <run dir> [<run dir> ...]');
  process.exit(2);
}
console.log(
  '| run | algorithm | steps | wall min | EM start | EM end | Δ EM | F1 start | F1 end | train reward first → last 5 |',
);
console.log('|---|---|---|---|---|---|---|---|---|---|');
for (const dir of dirs) {
  const run = readRun(dir);
  const evals = run.lines.filter((l) => typeof l['eval/em'] === 'number');
  const steps = run.lines.filter((l) => typeof l['time/step_s'] === 'number');
  const wall =
    run.lines.reduce(
      (s, l) => s + (typeof l['time/step_s'] === 'number' ? (l['time/step_s'] as number) : 0),
      0,
    ) +
    evals.reduce((s, l) => s + (typeof l['time/eval_s'] === 'number' ? (l['time/eval_s'] as number) : 0), 0);
  const first = evals[0];
  const last = evals.at(-1);
  const rewards = steps.map((l) => l['reward/mean']).filter((x): x is number => typeof x === 'number');
  const avg = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : Number.NaN);
  const r0 = avg(rewards.slice(0, 5));
  const r1 = avg(rewards.slice(-5));
  const delta =
    first && last ? 100 * ((last['eval/em'] as number) - (first['eval/em'] as number)) : Number.NaN;
  console.log(
    `| ${run.name} | ${run.algorithm} | ${steps.length} | ${(wall / 60).toFixed(1)} | ${pct(first?.['eval/em'])} | ${pct(last?.['eval/em'])} | ${Number.isNaN(delta) ? '–' : `${delta >= 0 ? '+' : ''}${delta.toFixed(1)}`} | ${pct(first?.['eval/f1'])} | ${pct(last?.['eval/f1'])} | ${Number.isNaN(r0) ? '–' : `${r0.toFixed(3)} → ${r1.toFixed(3)}`} |`,
  );
}
