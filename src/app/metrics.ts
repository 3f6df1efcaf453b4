// Metrics lines (metrics.jsonl) as the charts and downloads want them: CSV, smoothing, and one row per
// step with a column per run. Pure functions (no React, no DOM), tested in tests/app/metrics.test.ts.
import type { StepMetrics } from '../rl/trainer.ts';

/** metrics.jsonl text: one JSON object per line. */
export function metricsToJsonl(lines: readonly StepMetrics[]): string {
  return lines.map((l) => `${JSON.stringify(l)}\n`).join('');
}

function csvCell(v: number | string | undefined): string {
  if (v === undefined) return '';
  const s = String(v);
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** CSV with a header of every key that appears (step first), one row per line; missing cells empty. */
export function metricsToCsv(lines: readonly StepMetrics[]): string {
  const keys = new Set<string>(['step']);
  for (const l of lines) for (const k of Object.keys(l)) keys.add(k);
  const cols = [...keys];
  const rows = lines.map((l) => cols.map((k) => csvCell(l[k])).join(','));
  return `${[cols.map(csvCell).join(','), ...rows].join('\n')}\n`;
}

/**
 * Debiased exponential moving average (TensorBoard's smoothing): s_t = w·s_{t−1} + (1 − w)·x_t,
 * divided by 1 − w^t so early points are not pulled toward 0. w = 0 returns the values unchanged.
 */
export function smooth(values: readonly number[], weight: number): number[] {
  if (!(weight >= 0 && weight < 1)) throw new RangeError(`smoothing weight must be in [0, 1), got ${weight}`);
  let acc = 0;
  let n = 0;
  return values.map((x) => {
    if (!Number.isFinite(x)) return x;
    n++;
    acc = weight * acc + (1 - weight) * x;
    return acc / (1 - weight ** n);
  });
}

export interface ChartRun {
  id: string;
  lines: readonly StepMetrics[];
}

/** One chart row per step: { step, [runId]: value, [`${runId}:band`]: [mean − std, mean + std] }. */
export type ChartRow = { step: number } & Record<string, number | [number, number] | undefined>;

/**
 * Rows for one metric over several runs, merged on the step axis. `stdKey` adds a ± band per run;
 * values are smoothed per run (the band moves with its smoothed mean). Lines without the key (e.g.
 * evaluation lines for a training metric) are skipped.
 */
export function chartRows(
  runs: readonly ChartRun[],
  key: string,
  smoothing: number,
  stdKey?: string,
): ChartRow[] {
  const byStep = new Map<number, ChartRow>();
  for (const run of runs) {
    const points = run.lines.filter((l) => typeof l[key] === 'number' && typeof l.step === 'number');
    const values = smooth(
      points.map((l) => l[key] as number),
      smoothing,
    );
    points.forEach((l, i) => {
      const step = l.step as number;
      let row = byStep.get(step);
      if (!row) {
        row = { step } as ChartRow;
        byStep.set(step, row);
      }
      row[run.id] = values[i];
      const sd = stdKey ? l[stdKey] : undefined;
      if (typeof sd === 'number') row[`${run.id}:band`] = [values[i] - sd, values[i] + sd];
    });
  }
  return [...byStep.values()].sort((a, b) => a.step - b.step);
}
