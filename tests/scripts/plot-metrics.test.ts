// scripts/plot-metrics.ts: metrics.jsonl of two small synthetic runs to SVG, checked as a user gets it
// (a child process writing a file): the SVG is well-formed XML with one line per run and panel, std
// bands where a std key exists, and bad input is one line naming the file (and line) with exit 2.
// The pure helpers (ticks, smoothing, std-key matching, parsing) are checked directly.
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  MetricsInputError,
  niceTicks,
  parseMetricsJsonl,
  renderMetricsSvg,
  smoothEma,
  stdKeyFor,
} from '../../scripts/plot-metrics.ts';
import { REPO_ROOT } from '../env/shared-data.ts';

/**
 * A small XML well-formedness check: tags nest and close in order, attributes are quoted, and text
 * holds no raw '<' or bare '&'. Returns the element names in document order.
 */
function checkWellFormedXml(xml: string): string[] {
  const body = xml.replace(/^<\?xml[^?]*\?>\s*/, '');
  const stack: string[] = [];
  const names: string[] = [];
  let pos = 0;
  let roots = 0;
  const tag = /<(\/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>/y;
  while (pos < body.length) {
    const lt = body.indexOf('<', pos);
    const text = body.slice(pos, lt < 0 ? body.length : lt);
    if (/&(?!(#\d+|#x[0-9a-f]+|amp|lt|gt|quot|apos);)/i.test(text)) throw new Error(`bare & in "${text}"`);
    if (stack.length === 0 && text.trim() !== '') throw new Error(`text outside the root: "${text}"`);
    if (lt < 0) break;
    tag.lastIndex = lt;
    const m = tag.exec(body);
    if (!m) throw new Error(`malformed tag at ${lt}: ${body.slice(lt, lt + 60)}`);
    const [, closing, name, , selfClosing] = m;
    if (closing) {
      if (stack.pop() !== name) throw new Error(`</${name}> does not close the open element`);
    } else {
      if (stack.length === 0) roots++;
      names.push(name);
      if (!selfClosing) stack.push(name);
    }
    pos = lt + m[0].length;
  }
  if (stack.length > 0) throw new Error(`unclosed <${stack.at(-1)}>`);
  if (roots !== 1) throw new Error(`${roots} root elements`);
  return names;
}

function runPlot(args: string[]) {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/plot-metrics.ts', ...args], {
    cwd: REPO_ROOT,
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** `<tag class="cls" …>` elements of a panel's SVG fragment, by data-run. */
function elements(svg: string, tag: string, cls: string): string[] {
  return [...svg.matchAll(new RegExp(`<${tag} class="${cls}" data-run="([^"]*)"`, 'g'))].map((m) => m[1]);
}

function panels(svg: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of svg.matchAll(
    /<g class="panel" data-key="([^"]*)">([\s\S]*?)<\/g>\n(?=<g class="panel"|<\/svg>)/g,
  ))
    out.set(m[1], m[2]);
  return out;
}

let dir = '';
let runA = '';
let runB = '';
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'plot-metrics-'));
  runA = join(dir, 'grpo & co'); // a name that must be escaped in the SVG
  runB = join(dir, 'ppo');
  await mkdir(runA);
  await mkdir(runB);
  const lines = (scale: number) =>
    Array.from({ length: 12 }, (_, i) => {
      const step = i + 1;
      const row: Record<string, unknown> = {
        step,
        algorithm: 'x',
        reward_mean: scale * (1 - Math.exp(-step / 4)),
        reward_std: 0.1,
        entropy: 2 - 0.05 * step,
      };
      if (step % 4 === 0) row.val = { em: scale * step * 0.05 };
      return JSON.stringify(row);
    }).join('\n');
  await writeFile(join(runA, 'metrics.jsonl'), `${lines(1)}\n`);
  await writeFile(join(runB, 'metrics.jsonl'), `${lines(0.7)}\n\n`);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('plot-metrics CLI', () => {
  it('writes a well-formed SVG: one panel per key, one path per run, bands from *_std keys', async () => {
    const out = join(dir, 'img', 'reward.svg');
    const run = runPlot(['--out', out, '--keys', 'reward_mean,val/em', '--key', 'entropy', runA, runB]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain(`wrote ${out}`);
    const svg = await readFile(out, 'utf8');
    const names = checkWellFormedXml(svg);
    expect(names[0]).toBe('svg');
    expect(svg).toContain('xmlns="http://www.w3.org/2000/svg"');
    expect(svg).toContain('grpo &#38; co');
    const byKey = panels(svg);
    expect([...byKey.keys()]).toEqual(['reward_mean', 'val/em', 'entropy']);
    for (const panel of byKey.values()) {
      expect(elements(panel, 'path', 'series')).toEqual(['grpo &#38; co', 'ppo']);
      expect(panel.match(/<path /g)).toHaveLength(2);
    }
    expect(elements(byKey.get('reward_mean')!, 'polygon', 'band')).toEqual(['grpo &#38; co', 'ppo']);
    expect(elements(byKey.get('entropy')!, 'polygon', 'band')).toEqual([]);
    // val/em is on every 4th line only: three points per run.
    const valPath = /<path class="series" data-run="ppo" d="([^"]*)"/.exec(byKey.get('val/em')!)![1];
    expect(valPath.split(' ').filter((p) => /^[ML]/.test(p))).toHaveLength(3);
  });

  it('--smooth keeps one path per run and adds the raw data as a faint polyline; --no-band drops bands', async () => {
    const out = join(dir, 'smooth.svg');
    const run = runPlot(['--out', out, '--key', 'reward_mean', '--smooth', '0.8', '--no-band', runA, runB]);
    expect(run.status, run.stderr).toBe(0);
    const svg = await readFile(out, 'utf8');
    checkWellFormedXml(svg);
    expect(elements(svg, 'path', 'series')).toHaveLength(2);
    expect(elements(svg, 'polyline', 'raw')).toHaveLength(2);
    expect(svg).not.toContain('class="band"');
  });

  it('a bad line: one error line naming the file and line, exit 2', async () => {
    const bad = join(dir, 'bad');
    await mkdir(bad);
    await writeFile(join(bad, 'metrics.jsonl'), '{"step": 1, "em": 0.5}\n\n{"step": 2, "em": \n');
    const run = runPlot(['--out', join(dir, 'x.svg'), '--key', 'em', bad]);
    expect(run.status).toBe(2);
    const lines = run.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(`^plot-metrics: ${join(bad, 'metrics.jsonl')}:3: not valid JSON \\(`),
    );
  });

  it.each([
    [
      'a missing run folder',
      (d: string) => [join(d, 'nope')],
      (d: string) => `plot-metrics: ${join(d, 'nope')}: no such file or folder`,
    ],
    [
      'a line that is not an object',
      (d: string) => [join(d, 'array.jsonl')],
      (d: string) => `plot-metrics: ${join(d, 'array.jsonl')}:1: expected a JSON object, got [1,2]`,
    ],
  ])('%s: one error line, exit 2', async (_what, args, message) => {
    await writeFile(join(dir, 'array.jsonl'), '[1,2]\n');
    const run = runPlot(['--out', join(dir, 'x.svg'), '--key', 'em', ...args(dir)]);
    expect(run.status).toBe(2);
    expect(run.stderr.trim()).toBe(message(dir));
  });

  it('a key no run has: exit 2, listing the numeric keys there are', () => {
    const run = runPlot(['--out', join(dir, 'x.svg'), '--key', 'reward/mean', runA]);
    expect(run.status).toBe(2);
    expect(run.stderr.trim()).toBe(
      `plot-metrics: ${join(runA, 'metrics.jsonl')}: no run has the key "reward/mean" (numeric keys: entropy, reward_mean, reward_std, step, val/em)`,
    );
  });

  it('a bad command line: the problem and the usage, exit 2', () => {
    const run = runPlot(['--key', 'em', runA]);
    expect(run.status).toBe(2);
    expect(run.stderr.split('\n')[0]).toBe('plot-metrics: --out FILE.svg is required');
    expect(run.stderr.split('\n')[1]).toMatch(/^usage: /);
  });
});

describe('plot-metrics helpers', () => {
  it("(the test's XML check rejects what a broken writer could produce)", () => {
    expect(checkWellFormedXml('<svg><g><path d="M0,0"/></g></svg>')).toEqual(['svg', 'g', 'path']);
    expect(() => checkWellFormedXml('<svg><g></svg>')).toThrow(/does not close/);
    expect(() => checkWellFormedXml('<svg><text>a & b</text></svg>')).toThrow(/bare &/);
    expect(() => checkWellFormedXml('<svg><text x=1>a</text></svg>')).toThrow(/malformed tag/);
    expect(() => checkWellFormedXml('<svg><text>a < b</text></svg>')).toThrow(/malformed tag/);
    expect(() => checkWellFormedXml('<svg/><svg/>')).toThrow(/2 root elements/);
  });

  it('parses lines into flat numeric rows, skipping blanks and non-numbers', () => {
    expect(
      parseMetricsJsonl('{"step": 1, "a": {"b": 2, "c": "x"}, "d": null}\n\n{"step": 2}\n', 'f'),
    ).toEqual([{ step: 1, 'a/b': 2 }, { step: 2 }]);
    expect(() => parseMetricsJsonl('{"a": 1}\nnope', 'm.jsonl')).toThrow(MetricsInputError);
    expect(() => parseMetricsJsonl('{"a": 1}\nnope', 'm.jsonl')).toThrow(/^m\.jsonl:2: not valid JSON/);
  });

  it('finds the std key of a mean key in either naming', () => {
    const rows = [
      { 'reward/mean': 1, 'reward/std': 0.1, reward_mean: 1, reward_std: 0.2, em: 1, em_std: 0.3 },
    ];
    expect(stdKeyFor('reward/mean', rows)).toBe('reward/std');
    expect(stdKeyFor('reward_mean', rows)).toBe('reward_std');
    expect(stdKeyFor('em', rows)).toBe('em_std');
    expect(stdKeyFor('em', [{ em: 1 }])).toBeNull();
  });

  it('makes round ticks that cover the range', () => {
    expect(niceTicks(0, 1)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks(3, 97)).toEqual([20, 40, 60, 80]);
    expect(niceTicks(-0.03, 0.12)).toEqual([0, 0.05, 0.1]);
    expect(niceTicks(-0.13, 0.02)).toEqual([-0.1, -0.05, 0]);
    expect(Object.is(niceTicks(-0.13, 0.02)[2], 0)).toBe(true);
    expect(() => niceTicks(1, 1)).toThrow(/bad tick range/);
  });

  it('smooths with a debiased EMA (a constant stays constant; weight 0 is the identity)', () => {
    expect(smoothEma([2, 2, 2], 0.9).map((v) => Number(v.toFixed(12)))).toEqual([2, 2, 2]);
    expect(smoothEma([1, 3], 0)).toEqual([1, 3]);
    const s = smoothEma([0, 1], 0.5);
    expect(s[0]).toBe(0);
    expect(s[1]).toBeCloseTo(0.5 / 0.75, 12);
    expect(() => smoothEma([1], 1)).toThrow(/\[0, 1\)/);
  });

  it('draws a single point and a constant series without dividing by zero', () => {
    const svg = renderMetricsSvg([{ name: 'one', file: 'f', rows: [{ step: 5, em: 0.5 }] }], {
      keys: ['em'],
    });
    checkWellFormedXml(svg);
    expect(svg).not.toMatch(/NaN|Infinity/);
    expect(svg).toContain('<circle');
  });

  it('lays the legend out in fewer columns when run names are long, so labels do not overlap', () => {
    const legend = (names: string[]) => {
      const svg = renderMetricsSvg(
        names.map((name) => ({ name, file: 'f', rows: [{ step: 1, em: 0.5 }] })),
        { keys: ['em'] },
      );
      return [...svg.matchAll(/<g class="legend"><line x1="([\d.]+)" y1="([\d.]+)"/g)].map((m) => [
        Number(m[1]),
        Number(m[2]),
      ]);
    };
    const short = legend(['a', 'b', 'c', 'd']);
    expect(new Set(short.map(([, y]) => y)).size).toBe(2); // three columns, two rows
    const longName = 'reinforce-pp-worlds-32x8-filter-no-loss-mask'; // 44 characters
    const long = legend(['x', longName, 'y', 'z']);
    for (let i = 0; i < long.length; i++)
      for (let j = i + 1; j < long.length; j++)
        if (long[i][1] === long[j][1])
          expect(Math.abs(long[j][0] - long[i][0])).toBeGreaterThanOrEqual(28 + 7 * 44);
    expect(new Set(long.map(([, y]) => y)).size).toBeGreaterThan(2);
  });
});
