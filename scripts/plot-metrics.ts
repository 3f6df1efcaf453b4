// Line charts of training metrics as standalone SVG (hand-written, no dependencies):
//
//   npm run -s plot -- --out docs/img/grpo-reward.svg --key reward/mean runs/grpo runs/ppo
//   npm run -s plot -- --out docs/img/curves.svg --keys reward/mean,val/em --smooth 0.6 runs/a runs/b
//
// Input: each RUN is a folder holding metrics.jsonl, or a .jsonl file. One JSON object per line; nested
// objects are flattened with '/' ({"reward": {"mean": 1}} is reward/mean); every finite number is a
// metric, anything else (strings, null) is ignored. A line may lack a key (evaluation every k steps).
// Output: one SVG with one panel per key (stacked), x = --x (default `step`, else the line number),
// one <path class="series"> per run that has the key, a legend with the run names, and a ± band
// (<polygon class="band">) where the run also has the key's standard deviation: for `…mean` keys the
// same name with `std` (reward/mean → reward/std, reward_mean → reward_std), else `<key>_std` or
// `<key>/std`. --smooth a (0 ≤ a < 1) draws the exponential moving average (debiased, as TensorBoard)
// over the raw data, which stays visible as a faint <polyline class="raw">.
// Bad input (a missing file, a line that is not a JSON object, an unknown key) prints one line naming
// the file and line, and exits 2.
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

/** One line of a metrics file: its finite numeric fields, flattened. */
export type MetricsRow = Record<string, number>;

export interface MetricsRun {
  /** Legend label. */
  name: string;
  /** The file it came from (error messages). */
  file: string;
  rows: MetricsRow[];
}

export interface PlotOptions {
  keys: string[];
  /** x-axis key; rows without it use their 0-based index among the file's rows. Default 'step'. */
  x?: string;
  /** EMA weight of the past, in [0, 1); 0 = none. */
  smooth?: number;
  /** Draw ± std bands where a matching std key exists. Default true. */
  band?: boolean;
  title?: string;
  /** Size of one panel, in px. */
  width?: number;
  panelHeight?: number;
}

/** Bad input for the plot, with the file (and line) it is about. */
export class MetricsInputError extends Error {
  constructor(
    readonly file: string,
    readonly line: number | null,
    readonly problem: string,
  ) {
    super(`${file}${line === null ? '' : `:${line}`}: ${problem}`);
    this.name = 'MetricsInputError';
  }
}

/** Parses metrics.jsonl text. Blank lines are skipped; any other line must be a JSON object. */
export function parseMetricsJsonl(text: string, file: string): MetricsRow[] {
  const rows: MetricsRow[] = [];
  const lines = text.split('\n');
  for (const [i, raw] of lines.entries()) {
    const line = raw.trim();
    if (line === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (error) {
      throw new MetricsInputError(file, i + 1, `not valid JSON (${(error as Error).message})`);
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      throw new MetricsInputError(
        file,
        i + 1,
        `expected a JSON object, got ${JSON.stringify(value).slice(0, 40)}`,
      );
    const row: MetricsRow = {};
    flatten(value as Record<string, unknown>, '', row);
    rows.push(row);
  }
  return rows;
}

function flatten(value: Record<string, unknown>, prefix: string, out: MetricsRow): void {
  for (const [key, v] of Object.entries(value)) {
    const name = prefix + key;
    if (typeof v === 'number' && Number.isFinite(v)) out[name] = v;
    else if (typeof v === 'object' && v !== null && !Array.isArray(v))
      flatten(v as Record<string, unknown>, `${name}/`, out);
  }
}

/** The key holding the standard deviation of `key` in `rows`, or null. */
export function stdKeyFor(key: string, rows: readonly MetricsRow[]): string | null {
  const candidates: string[] = [];
  const mean = /^(.*?)(mean)$/i.exec(key);
  if (mean && mean[1] !== '') candidates.push(`${mean[1]}std`);
  candidates.push(`${key}_std`, `${key}/std`);
  return candidates.find((c) => c !== key && rows.some((r) => c in r)) ?? null;
}

/** Exponential moving average with TensorBoard's debiasing (the first points are not pulled to 0). */
export function smoothEma(values: readonly number[], weight: number): number[] {
  if (!(weight >= 0 && weight < 1)) throw new Error(`smoothing weight must be in [0, 1), got ${weight}`);
  let acc = 0;
  return values.map((v, i) => {
    acc = acc * weight + (1 - weight) * v;
    return weight === 0 ? v : acc / (1 - weight ** (i + 1));
  });
}

/** About `count` round tick values (1, 2 or 5 × 10^k apart) covering [lo, hi]. */
export function niceTicks(lo: number, hi: number, count = 5): number[] {
  if (!(Number.isFinite(lo) && Number.isFinite(hi) && hi > lo))
    throw new Error(`bad tick range [${lo}, ${hi}]`);
  const rough = (hi - lo) / count;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough) ?? 10 * power;
  const ticks: number[] = [];
  for (let t = Math.ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push(Number(t.toPrecision(12)) + 0); // + 0 turns -0 into 0
  }
  return ticks;
}

function tickStep(ticks: readonly number[]): number {
  return ticks.length > 1 ? ticks[1] - ticks[0] : 1;
}

function formatTick(v: number, step: number): string {
  if (v === 0) return '0';
  if (Math.abs(v) >= 1e5 || Math.abs(v) < 1e-4) return v.toExponential(1);
  return v.toFixed(Math.max(0, -Math.floor(Math.log10(step))));
}

function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

// Tableau 10: distinguishable, and readable on white.
const COLORS = [
  '#4e79a7',
  '#f28e2b',
  '#e15759',
  '#76b7b2',
  '#59a14f',
  '#edc948',
  '#b07aa1',
  '#ff9da7',
  '#9c755f',
  '#bab0ac',
];

interface Series {
  run: number;
  xs: number[];
  ys: number[];
  raw: number[] | null;
  band: { lo: number[]; hi: number[] } | null;
}

function seriesFor(
  run: MetricsRun,
  index: number,
  key: string,
  options: Required<PlotOptions>,
): Series | null {
  const rows = run.rows.map((row, i) => ({ row, x: row[options.x] ?? i })).filter(({ row }) => key in row);
  if (rows.length === 0) return null;
  const xs = rows.map((r) => r.x);
  const raw = rows.map((r) => r.row[key]);
  const ys = options.smooth > 0 ? smoothEma(raw, options.smooth) : raw;
  const stdKey = options.band ? stdKeyFor(key, run.rows) : null;
  let band: Series['band'] = null;
  if (stdKey !== null) {
    const std = rows.map((r) => r.row[stdKey] ?? 0);
    const sd = options.smooth > 0 ? smoothEma(std, options.smooth) : std;
    band = { lo: ys.map((y, i) => y - sd[i]), hi: ys.map((y, i) => y + sd[i]) };
  }
  return { run: index, xs, ys, raw: options.smooth > 0 ? raw : null, band };
}

/** The SVG document: one panel per key, one line per run. Throws MetricsInputError for unknown keys. */
export function renderMetricsSvg(runs: readonly MetricsRun[], options: PlotOptions): string {
  if (runs.length === 0) throw new Error('no runs to plot');
  if (options.keys.length === 0) throw new Error('no keys to plot');
  const o: Required<PlotOptions> = {
    x: 'step',
    smooth: 0,
    band: true,
    title: '',
    width: 720,
    panelHeight: 300,
    ...options,
  };
  smoothEma([], o.smooth); // validates the weight
  const margin = { left: 64, right: 20, top: 30, bottom: 44 };
  // Legend: up to three columns, fewer when the longest run name (at about 7 px a character at this
  // font size) would run into the next column.
  const legendWidth = o.width - margin.left;
  const entryWidth = 28 + 7 * Math.max(0, ...runs.map((r) => r.name.length)) + 16;
  const legendColumns = Math.max(1, Math.min(3, Math.floor(legendWidth / entryWidth)));
  const legendRows = Math.ceil(runs.length / legendColumns);
  const header = (o.title ? 28 : 8) + legendRows * 18 + 6;
  const height = header + o.keys.length * o.panelHeight;
  const parts: string[] = [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<svg xmlns="http://www.w3.org/2000/svg" width="${o.width}" height="${height}" viewBox="0 0 ${o.width} ${height}" font-family="sans-serif" font-size="12">`,
    // An accessible name for the chart (screen readers; biome's a11y rule for SVG files).
    `<title>${escapeXml(o.title || `${o.keys.join(', ')} by ${o.x}`)}</title>`,
    `<rect x="0" y="0" width="${o.width}" height="${height}" fill="white"/>`,
  ];
  if (o.title)
    parts.push(
      `<text x="${o.width / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">${escapeXml(o.title)}</text>`,
    );
  runs.forEach((run, i) => {
    const lx = margin.left + (i % legendColumns) * (legendWidth / legendColumns);
    const ly = (o.title ? 28 : 8) + Math.floor(i / legendColumns) * 18 + 9;
    const color = COLORS[i % COLORS.length];
    parts.push(
      `<g class="legend"><line x1="${lx}" y1="${ly}" x2="${lx + 22}" y2="${ly}" stroke="${color}" stroke-width="2.5"/>` +
        `<text x="${lx + 28}" y="${ly + 4}">${escapeXml(run.name)}</text></g>`,
    );
  });

  for (const [k, key] of o.keys.entries()) {
    const series = runs.map((run, i) => seriesFor(run, i, key, o)).filter((s): s is Series => s !== null);
    if (series.length === 0) {
      const known = [...new Set(runs.flatMap((r) => r.rows.flatMap((row) => Object.keys(row))))].sort();
      throw new MetricsInputError(
        runs.map((r) => r.file).join(', '),
        null,
        `no run has the key "${key}" (numeric keys: ${known.join(', ') || 'none'})`,
      );
    }
    const top = header + k * o.panelHeight + margin.top;
    const plotW = o.width - margin.left - margin.right;
    const plotH = o.panelHeight - margin.top - margin.bottom;
    const allX = series.flatMap((s) => s.xs);
    const allY = series.flatMap((s) => [
      ...s.ys,
      ...(s.raw ?? []),
      ...(s.band ? [...s.band.lo, ...s.band.hi] : []),
    ]);
    let [x0, x1] = [Math.min(...allX), Math.max(...allX)];
    let [y0, y1] = [Math.min(...allY), Math.max(...allY)];
    if (x1 === x0) [x0, x1] = [x0 - 1, x1 + 1];
    if (y1 === y0) {
      const pad = Math.abs(y0) * 0.1 || 1;
      [y0, y1] = [y0 - pad, y1 + pad];
    }
    // The y range snaps outward to whole tick steps so the top and bottom gridlines frame the data.
    const yStep = tickStep(niceTicks(y0, y1));
    y0 = Math.floor(y0 / yStep + 1e-9) * yStep;
    y1 = Math.ceil(y1 / yStep - 1e-9) * yStep;
    const yTicks = niceTicks(y0, y1).filter((t) => Math.abs(t / yStep - Math.round(t / yStep)) < 1e-6);
    const xTicks = niceTicks(x0, x1, 6);
    const px = (x: number) => margin.left + ((x - x0) / (x1 - x0)) * plotW;
    const py = (y: number) => top + plotH - ((y - y0) / (y1 - y0)) * plotH;
    const f = (v: number) => v.toFixed(2);

    parts.push(`<g class="panel" data-key="${escapeXml(key)}">`);
    parts.push(
      `<text x="${margin.left}" y="${top - 10}" font-size="13" font-weight="bold">${escapeXml(key)}</text>`,
    );
    for (const t of yTicks) {
      parts.push(
        `<line x1="${margin.left}" y1="${f(py(t))}" x2="${margin.left + plotW}" y2="${f(py(t))}" stroke="#e6e6e6"/>` +
          `<text x="${margin.left - 6}" y="${f(py(t) + 4)}" text-anchor="end" fill="#444">${formatTick(t, tickStep(yTicks))}</text>`,
      );
    }
    for (const t of xTicks) {
      parts.push(
        `<line x1="${f(px(t))}" y1="${top + plotH}" x2="${f(px(t))}" y2="${top + plotH + 5}" stroke="#444"/>` +
          `<text x="${f(px(t))}" y="${top + plotH + 18}" text-anchor="middle" fill="#444">${formatTick(t, tickStep(xTicks))}</text>`,
      );
    }
    parts.push(
      `<rect x="${margin.left}" y="${top}" width="${plotW}" height="${plotH}" fill="none" stroke="#444"/>` +
        `<text x="${margin.left + plotW / 2}" y="${top + plotH + 36}" text-anchor="middle">${escapeXml(o.x)}</text>`,
    );
    for (const s of series) {
      const color = COLORS[s.run % COLORS.length];
      const name = escapeXml(runs[s.run].name);
      if (s.band) {
        const upper = s.xs.map((x, i) => `${f(px(x))},${f(py(s.band!.hi[i]))}`);
        const lower = s.xs.map((x, i) => `${f(px(x))},${f(py(s.band!.lo[i]))}`).reverse();
        parts.push(
          `<polygon class="band" data-run="${name}" points="${[...upper, ...lower].join(' ')}" fill="${color}" fill-opacity="0.15" stroke="none"/>`,
        );
      }
      if (s.raw) {
        const points = s.xs.map((x, i) => `${f(px(x))},${f(py(s.raw![i]))}`).join(' ');
        parts.push(
          `<polyline class="raw" data-run="${name}" points="${points}" fill="none" stroke="${color}" stroke-opacity="0.3" stroke-width="1"/>`,
        );
      }
      const d = s.xs.map((x, i) => `${i === 0 ? 'M' : 'L'}${f(px(x))},${f(py(s.ys[i]))}`).join(' ');
      parts.push(
        `<path class="series" data-run="${name}" d="${d}" fill="none" stroke="${color}" stroke-width="2"/>`,
      );
      if (s.xs.length === 1)
        parts.push(`<circle cx="${f(px(s.xs[0]))}" cy="${f(py(s.ys[0]))}" r="3" fill="${color}"/>`);
    }
    parts.push('</g>');
  }
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

/** A run argument: a folder with metrics.jsonl, or a .jsonl file. */
export async function readRun(path: string, name?: string): Promise<MetricsRun> {
  const info = await stat(path).catch(() => null);
  if (info === null) throw new MetricsInputError(path, null, 'no such file or folder');
  const file = info.isDirectory() ? join(path, 'metrics.jsonl') : path;
  const text = await readFile(file, 'utf8').catch((e: NodeJS.ErrnoException) => {
    throw new MetricsInputError(file, null, `cannot read (${e.code ?? e.message})`);
  });
  const rows = parseMetricsJsonl(text, file);
  if (rows.length === 0) throw new MetricsInputError(file, null, 'no metrics lines');
  const label = name ?? (info.isDirectory() ? basename(path) : basename(path).replace(/\.jsonl$/, ''));
  return { name: label, file, rows };
}

const USAGE =
  'usage: npm run -s plot -- --out FILE.svg (--key KEY | --keys K1,K2) [--x step] [--smooth 0..1) [--no-band] ' +
  '[--title T] [--labels a,b] [--width PX] [--height PX] RUN...   (RUN: a folder with metrics.jsonl, or a .jsonl file)';

/** A bad command line: the problem, then the usage; exit 2. */
function fail(message: string): never {
  console.error(`plot-metrics: ${message}\n${USAGE}`);
  process.exit(2);
}

async function main(): Promise<void> {
  let parsed: ReturnType<typeof parseCli>;
  try {
    parsed = parseCli();
  } catch (error) {
    fail((error as Error).message);
  }
  const { values, positionals, tokens } = parsed;
  const out = values.out ?? fail('--out FILE.svg is required');
  // --key and --keys in the order given: that is the order of the panels.
  const keys = (tokens ?? [])
    .flatMap((t) =>
      t.kind === 'option' && (t.name === 'key' || t.name === 'keys') ? (t.value ?? '').split(',') : [],
    )
    .map((k) => k.trim())
    .filter(Boolean);
  if (keys.length === 0) fail('give at least one --key or --keys');
  if (positionals.length === 0) fail('give at least one run folder or metrics .jsonl file');
  const labels = values.labels?.split(',');
  if (labels && labels.length !== positionals.length)
    fail(`--labels has ${labels.length} names for ${positionals.length} runs`);
  const smooth = Number(values.smooth ?? 0);
  if (!(smooth >= 0 && smooth < 1)) fail(`--smooth must be in [0, 1), got ${values.smooth}`);
  const width = Number(values.width ?? 720);
  const height = Number(values.height ?? 300);
  if (!(Number.isInteger(width) && width >= 200))
    fail(`--width must be an integer ≥ 200, got ${values.width}`);
  if (!(Number.isInteger(height) && height >= 120))
    fail(`--height must be an integer ≥ 120, got ${values.height}`);
  try {
    const runs = await Promise.all(positionals.map((p, i) => readRun(p, labels?.[i])));
    const svg = renderMetricsSvg(runs, {
      keys,
      x: values.x,
      smooth,
      band: !values['no-band'],
      title: values.title ?? '',
      width,
      panelHeight: height,
    });
    await mkdir(dirname(out), { recursive: true });
    await writeFile(out, svg);
    console.log(
      `wrote ${out} (${keys.join(', ')}; ${runs.map((r) => `${r.name}: ${r.rows.length} lines`).join(', ')})`,
    );
  } catch (error) {
    if (error instanceof MetricsInputError) {
      console.error(`plot-metrics: ${error.message}`);
      process.exit(2);
    }
    throw error;
  }
}

function parseCli() {
  return parseArgs({
    options: {
      out: { type: 'string' },
      key: { type: 'string', multiple: true },
      keys: { type: 'string', multiple: true },
      x: { type: 'string', default: 'step' },
      smooth: { type: 'string' },
      'no-band': { type: 'boolean', default: false },
      title: { type: 'string' },
      labels: { type: 'string' },
      width: { type: 'string' },
      height: { type: 'string' },
    },
    allowPositionals: true,
    strict: true,
    tokens: true,
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
