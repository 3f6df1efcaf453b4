// npm run compare (scripts/compare-evals.ts) on small evaluation files: the table's numbers, and one
// line with exit 2 for files it cannot compare.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const dir = mkdtempSync(join(tmpdir(), 'compare-evals-'));
const write = (
  name: string,
  model: string,
  ems: number[],
  ids = ems.map((_, i) => `q${i}`),
  types: string[] = ems.map((_, i) => (i % 2 === 0 ? 'bridge' : 'yesno')),
) => {
  const file = join(dir, name);
  const questions = ems.map((em, i) => ({ id: ids[i], type: types[i], em, f1: em }));
  writeFileSync(file, JSON.stringify({ model, n: ems.length, questions }));
  return file;
};
const run = (...files: string[]) => {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/compare-evals.ts', ...files], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
};

describe('npm run compare', () => {
  it('ends with status 0 and no error trace when its reader closes the pipe early (| head)', () => {
    const base = write('pipe-base.json', 'start', [1, 0, 1, 0]);
    const other = write('pipe-other.json', 'grpo', [1, 1, 1, 0]);
    // `true` exits without reading, so the script's first write meets a closed pipe (EPIPE).
    const r = spawnSync(
      'bash',
      [
        '-c',
        `"${process.execPath}" --import tsx scripts/compare-evals.ts "$1" "$2" | true; echo "status \${PIPESTATUS[0]}"`,
        '_',
        base,
        other,
      ],
      { encoding: 'utf8', timeout: 60_000 },
    );
    expect(r.stdout.trim(), r.stderr).toBe('status 0');
    expect(r.stderr).not.toMatch(/EPIPE|Unhandled/);
  });

  it('prints each model against the base with the paired SE, the discordant counts and per type', () => {
    const base = write('base.json', 'start', [1, 0, 1, 0, 0, 0, 1, 0]);
    const other = write('other.json', 'grpo', [1, 1, 1, 0, 1, 0, 0, 0]);
    const r = run(base, other);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/base: start \(8 questions\)/);
    expect(r.out).toMatch(/\| start \| 37\.5 \| – \|/);
    // Differences 0 +1 0 0 +1 0 −1 0: mean +0.125, sample std sqrt((2·0.875² + 0.125²·5 + 1.125²)/7).
    const se = Math.sqrt((2 * 0.875 ** 2 + 5 * 0.125 ** 2 + 1.125 ** 2) / 7) / Math.sqrt(8);
    expect(r.out).toContain(`| grpo | 50.0 | +12.5 ± ${(100 * se).toFixed(1)} | 2 / 1 | 1.0 |`);
    // bridge (even indices): 1 0 0 0 → 1 1 1 0; yesno: 0 0 0 0 → 1 0 0 0.
    expect(r.out).toMatch(/\| Δ bridge \| Δ yesno \|/);
    expect(r.out).toMatch(/\| \+0\.0 ± [\d.]+ \| \+25\.0 ± 25\.0 \|/);
  });

  it('pools pairs of an ablation question by question and pair by pair (--pairs)', () => {
    // Pair 0 loses questions 1 and 3; pair 1 loses question 1 and gains question 4.
    const a0 = write('a0.json', 'mask-s1', [1, 1, 0, 1, 0, 0]);
    const b0 = write('b0.json', 'nomask-s1', [1, 0, 0, 0, 0, 0]);
    const a1 = write('a1.json', 'mask-s2', [1, 1, 0, 0, 0, 0]);
    const b1 = write('b1.json', 'nomask-s2', [1, 0, 0, 0, 1, 0]);
    const r = run('--pairs', a0, b0, a1, b1);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/2 pairs on the same 6 questions/);
    expect(r.out).toContain('| nomask-s1 vs mask-s1 | 16.7 vs 50.0 | −33.3 ± 21.1 | 0 / 2 | 0.50 |');
    expect(r.out).toContain('| nomask-s2 vs mask-s2 | 33.3 vs 33.3 | +0.0 ± 25.8 | 1 / 1 | 1.0 |');
    // Per-question means 0 −1 0 −0.5 +0.5 0: mean −1/6, sample std sqrt((1/36·3 + (5/6)² + (1/3)² + (2/3)²)/5).
    const se = Math.sqrt((3 / 36 + (5 / 6) ** 2 + (1 / 3) ** 2 + (2 / 3) ** 2) / 5) / Math.sqrt(6);
    expect(r.out).toContain(
      `| pooled, question by question (checkpoint noise) | | −16.7 ± ${(100 * se).toFixed(1)} | 1 / 2 (net per question) | 1.0 |`,
    );
    // Pair differences −1/3 and 0: mean −1/6, sd / √2 = 1/6, t −1, 1 df: p = 1 − (2/π)·atan(1) = 0.5.
    expect(r.out).toContain(
      '| pooled, pair by pair (seed noise: t −1.00, 1 df) | | −16.7 ± 16.7 | 0 up / 1 down of 2 pairs | 0.50 (t test) |',
    );
    // Two pairs with the same difference: no spread, so no t test (not "t −Infinity, p 0").
    const same = run('--pairs', a0, b0, a0, b0);
    expect(same.status, same.out).toBe(0);
    expect(same.out).toContain(
      '| pooled, pair by pair | | −33.3 in every pair | – (no spread between the pairs: no t test) | |',
    );
    expect(same.out).not.toMatch(/Infinity/);
    const odd = run('--pairs', a0, b0, a1);
    expect(odd.status, odd.out).toBe(2);
    expect(odd.out.trim()).toBe('compare: --pairs takes BASE OTHER files two by two, got 3');
  });

  it('reads recorded pair differences pair by pair (--differences), either minus sign', () => {
    // −2.5 −1.0 −1.25: mean −1.5833, sd 0.8036, se 0.4640, t −3.41, 2 df: p = 1 − |t|/√(2 + t²).
    const r = run('--differences', '-2.5', '\u22121.0', '-1.25');
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/3 recorded pair differences \(EM points\): −2\.50, −1\.00, −1\.25/);
    const d = [-2.5, -1, -1.25];
    const mean = (d[0] + d[1] + d[2]) / 3;
    const se = Math.sqrt(d.reduce((s, x) => s + (x - mean) ** 2, 0) / 2) / Math.sqrt(3);
    const t = mean / se;
    const p = 1 - Math.abs(t) / Math.sqrt(2 + t * t);
    expect(r.out).toContain(
      `| seed noise: t −${Math.abs(t).toFixed(2)}, 2 df | −${Math.abs(mean).toFixed(2)} ± ${se.toFixed(2)} | 0 up / 3 down | ${p.toPrecision(2)} |`,
    );
    const same = run('--differences', '-1.25', '-1.25');
    expect(same.status, same.out).toBe(0);
    expect(same.out).toContain('| no spread between the pairs: no t test | −1.25 in every pair | | |');
    expect(same.out).not.toMatch(/Infinity/);
    const bad = run('--differences', '-2.5', 'x');
    expect(bad.status, bad.out).toBe(2);
    expect(bad.out.trim()).toBe('compare: --differences takes numbers (EM points), got "x"');
    const one = run('--differences', '-2.5');
    expect(one.status, one.out).toBe(2);
    expect(one.out.trim()).toBe('compare: --differences needs at least 2 differences (one per pair), got 1');
  });

  it("plans the next ablation from the pairs' spread (--power-for), with --differences or --pairs", () => {
    // The six pairings of PPO's plain advantage-mask ablation at step 12: sd 2.25 points; scipy gives
    // 42, 20 and 13 pairs for 1, 1.5 and 2 points, and 3.23 points for these six pairs.
    const r = run(
      '--differences',
      '3.0',
      '\u22121.5',
      '-3.25',
      '-2.75',
      '-0.75',
      '0',
      '--power-for',
      '1,1.5,2',
    );
    expect(r.status, r.out).toBe(0);
    expect(r.out).toContain("at these 6 pairs' spread, sd 2.25 points");
    expect(r.out).toContain('| 1.00 | 42 | 0.14 |');
    expect(r.out).toContain('| 1.50 | 20 | 0.26 |');
    expect(r.out).toContain('| 2.00 | 13 | 0.42 |');
    expect(r.out).toContain('these 6 pairs find a difference of 3.23 points with 80 % power');
    // --pairs measures the spread from the files: differences −33.3 and 0 points, sd 23.57.
    const a0 = write('pw-a0.json', 'mask-s1', [1, 1, 0, 1, 0, 0]);
    const b0 = write('pw-b0.json', 'nomask-s1', [1, 0, 0, 0, 0, 0]);
    const a1 = write('pw-a1.json', 'mask-s2', [1, 1, 0, 0, 0, 0]);
    const b1 = write('pw-b1.json', 'nomask-s2', [1, 0, 0, 0, 1, 0]);
    const p = run('--power-for', '20', '--pairs', a0, b0, a1, b1);
    expect(p.status, p.out).toBe(0);
    expect(p.out).toContain("at these 2 pairs' spread, sd 23.57 points");
    expect(p.out).toMatch(/\| 20\.00 \| \d+ \| 0\.\d\d \|/);
    const cases: [string[], string][] = [
      [['--differences', '1', '1', '--power-for', '1'], '--power-for needs at least two pairs that differ'],
      [['--pairs', a0, b0, a0, b0, '--power-for', '1'], '--power-for needs at least two pairs that differ'],
      [['--pairs', a0, b0, '--power-for', '1'], '--power-for needs at least two pairs that differ'],
      [
        [a0, b0, '--power-for', '1'],
        '--power-for reads the spread between pairs: use it with --pairs or --differences',
      ],
      [['--differences', '1', '2', '--power-for', 'x'], '--power-for takes differences in EM points'],
      [['--differences', '1', '2', '--power-for', '0'], '--power-for takes differences in EM points'],
      [['--differences', '1', '2', '--power-for'], '--power-for takes differences in EM points'],
      [['--differences', '1', '2', '--power-for', '1', '--power-for', '2'], '--power-for is given once'],
    ];
    for (const [words, message] of cases) {
      const bad = run(...words);
      expect(bad.status, bad.out).toBe(2);
      expect(bad.out.trim().split('\n')).toHaveLength(1);
      expect(bad.out).toContain(`compare: ${message}`);
    }
  });

  it("sorts each file's questions by what their searches found (--evidence), with the moves from the base", () => {
    const q = (id: string, type: string, outcome: string, k: number, em = outcome === 'right' ? 1 : 0) => ({
      id,
      type,
      em,
      f1: em,
      outcome,
      supportingPassages: 2,
      supportingRetrieved: k,
    });
    const file = (name: string, model: string, questions: object[]) => {
      const f = join(dir, name);
      writeFileSync(f, JSON.stringify({ model, questions }));
      return f;
    };
    const base = file('eb.json', 'start', [
      q('q0', 'bridge', 'wrong_stopped_short', 1),
      q('q1', 'bridge', 'wrong_all_evidence', 2),
      q('q2', 'yesno', 'no_answer', 0),
      q('q3', 'yesno', 'right', 2),
    ]);
    const other = file('eo.json', 'grpo', [
      { ...q('q0', 'bridge', 'right', 1), answerSource: 'from_results' },
      { ...q('q1', 'bridge', 'wrong_all_evidence', 2), answerSource: 'from_question' },
      { ...q('q2', 'yesno', 'wrong_no_evidence', 0), vainSearch: 'invented_name', answerSource: 'nowhere' },
      { ...q('q3', 'yesno', 'right', 2), answerSource: 'yes_no' },
    ]);
    const r = run('--evidence', base, other);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/4 questions; % of questions by outcome/);
    // No task without supporting passages: no "none named" column.
    expect(r.out).toContain(
      '| model | right | right, all found | no answer | wrong, none found | wrong, some found, stopped | wrong, some found, searched again | wrong, all found | supporting passages found |',
    );
    // Recall (0.5 + 1 + 0 + 1) / 4 in both.
    // grpo's q0 is right with one of its two passages found, q3 with both: 50 % right, half of it with the evidence.
    expect(r.out).toContain('| start | 25.0 | 25.0 | 25.0 | 0.0 | 25.0 | 0.0 | 25.0 | 62.5 |');
    expect(r.out).toContain('| grpo | 50.0 | 25.0 | 0.0 | 25.0 | 0.0 | 0.0 | 25.0 | 62.5 |');
    expect(r.out).toContain('| grpo · bridge | 2 | 50.0 | 0.0 | 0.0 | 0.0 | 0.0 | 0.0 | 50.0 | 75.0 |');
    expect(r.out).toContain('| start · bridge | 2 | 0.0 | 0.0 | 0.0 | 0.0 | 50.0 | 0.0 | 50.0 | 75.0 |');
    expect(r.out).toContain('| grpo · yesno | 2 | 50.0 | 50.0 | 0.0 | 50.0 | 0.0 | 0.0 | 0.0 | 50.0 |');
    expect(r.out).toMatch(/questions by outcome: start \(rows\) → grpo \(columns\)/);
    expect(r.out).toContain('| wrong, some found, stopped | 1 | 0 | 0 | 0 | 0 | 0 | 1 |');
    expect(r.out).toContain('| no answer | 0 | 0 | 1 | 0 | 0 | 0 | 1 |');
    expect(r.out).toContain('| wrong, all found | 0 | 0 | 0 | 0 | 0 | 1 | 1 |');
    // The fruitless searches, where recorded: grpo's one wrong answer with none found searched a name no passage has.
    expect(r.out).toMatch(/wrong answers after a fruitless last search/);
    expect(r.out).toContain(
      '| model | such answers | a missing passage | a passage already found | another passage | no passage (invented name) | no query |',
    );
    expect(r.out).toContain('| start | 0 | 0 (0.0 %) | 0 (0.0 %) | 0 (0.0 %) | 0 (0.0 %) | 0 (0.0 %) |');
    expect(r.out).toContain('| grpo | 1 | 0 (0.0 %) | 0 (0.0 %) | 0 (0.0 %) | 1 (100.0 %) | 0 (0.0 %) |');
    // Where the answers came from, where recorded (grpo only): counts, right ones in brackets.
    expect(r.out).toMatch(/where the answers came from/);
    expect(r.out).toContain(
      '| model · type | n | no answer | yes / no | from the question | from the results read | in nothing read |',
    );
    expect(r.out).toContain('| grpo · all | 4 | 0 (0) | 1 (1) | 1 (0) | 1 (1) | 1 (0) |');
    expect(r.out).toContain('| grpo · bridge | 2 | 0 (0) | 0 (0) | 1 (0) | 1 (1) | 0 (0) |');
    expect(r.out).toContain('| grpo · yesno | 2 | 0 (0) | 1 (1) | 0 (0) | 0 (0) | 1 (0) |');
    expect(r.out).not.toMatch(/\| start · all/);
    // One file alone: its breakdown, no moves (and no search table: the base records none).
    const alone = run('--evidence', base);
    expect(alone.status, alone.out).toBe(0);
    expect(alone.out).not.toMatch(/questions by outcome:/);
    expect(alone.out).not.toMatch(/fruitless/);
    expect(alone.out).not.toMatch(/where the answers came from/);
    // A file written before the outcome fields existed: one line naming it, exit 2.
    const old = write('eold.json', 'old', [1, 0, 1, 0], undefined, ['bridge', 'bridge', 'yesno', 'yesno']);
    const bad = run('--evidence', base, old);
    expect(bad.status, bad.out).toBe(2);
    expect(bad.out.trim()).toMatch(
      /^compare: .*eold\.json: question 0 has no outcome or supporting-passage counts: write the file again with npm run train -- --evaluate-only --json$/,
    );
    const none = run('--evidence');
    expect(none.status, none.out).toBe(2);
    expect(none.out.trim()).toBe('compare: --evidence takes one evaluation file or more');
  });

  it('leaves out a question type before comparing (--without-type), plain and with --pairs', () => {
    // Types alternate bridge, yesno; the yes/no questions (odd indices) hold every difference but one.
    const a0 = write('wt-a0.json', 'mask-s1', [1, 1, 0, 1, 0, 0]);
    const b0 = write('wt-b0.json', 'nomask-s1', [1, 0, 0, 0, 1, 0]);
    const plain = run('--without-type', 'yesno', a0, b0);
    expect(plain.status, plain.out).toBe(0);
    expect(plain.out).toMatch(/without the questions of type yesno: 3 questions left/);
    expect(plain.out).toMatch(/base: mask-s1 \(3 questions\)/);
    // bridge: 1 0 0 → 1 0 1: +33.3, one up and none down.
    expect(plain.out).toMatch(
      /\| nomask-s1 \| 66\.7 \| \+33\.3 ± 33\.3 \| 1 \/ 0 \| 1\.0 \| \+33\.3 ± 33\.3 \|$/m,
    );
    expect(plain.out).not.toMatch(/Δ yesno/);
    const pairs = run('--pairs', a0, b0, a0, b0, '--without-type', 'yesno');
    expect(pairs.status, pairs.out).toBe(0);
    expect(pairs.out).toMatch(/2 pairs on the same 3 questions/);
    // The base named in both pairs: its three questions counted once.
    expect(pairs.out).toMatch(/without the questions of type yesno: 3 questions left/);
    expect(pairs.out).toContain('| nomask-s1 vs mask-s1 | 66.7 vs 33.3 | +33.3 ± 33.3 | 1 / 0 | 1.0 |');
    // A lone file is its own base (--evidence needs per-question outcomes, which these files lack).
    const lone = run('--evidence', '--without-type', 'yesno', a0);
    expect(lone.out).toMatch(/without the questions of type yesno: 3 questions left/);
    // Both types left out: nothing to compare; an unknown type or a missing one: one line, exit 2.
    const cases: [string[], RegExp][] = [
      [['--without-type', 'yesno', '--without-type', 'bridge', a0, b0], /leaves no question to compare/],
      [
        ['--without-type', 'nope', a0, b0],
        /--without-type nope: .*wt-a0\.json has no question of that type \(types: bridge, yesno\)/,
      ],
      [[a0, b0, '--without-type'], /--without-type takes a question type/],
      [['--without-type', 'yesno', '--differences', '1', '2'], /not of --differences/],
    ];
    for (const [words, message] of cases) {
      const r = run(...words);
      expect(r.status, r.out).toBe(2);
      expect(r.out).toMatch(message);
      expect(r.out.trim().split('\n')).toHaveLength(1);
    }
  });

  it('pools pairs played on different question sets (one test world each) side by side', () => {
    // World A (types bridge yesno bridge yesno): +1 on question 0. World B, the same ids but other types
    // (yesno yesno bridge bridge, six questions): +1 on 2 and 3, −1 on 4.
    const typesB = ['yesno', 'yesno', 'bridge', 'bridge', 'comparison', 'comparison'];
    const a0 = write('dw-a0.json', 'bundle', [0, 1, 0, 0]);
    const a1 = write('dw-a1.json', 'grpo', [1, 1, 0, 0]);
    const b0 = write('dw-b0.json', 'bundle', [1, 0, 0, 0, 1, 0], undefined, typesB);
    const b1 = write('dw-b1.json', 'grpo', [1, 0, 1, 1, 0, 0], undefined, typesB);
    const r = run('--pairs', a0, a1, b0, b1);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/2 pairs on 2 different question sets, 10 questions in all/);
    // Ten differences: +1 +1 +1 −1 and six zeros: mean +0.2, sample std sqrt((4 − 10 · 0.04) / 9).
    const se = Math.sqrt((4 - 10 * 0.04) / 9) / Math.sqrt(10);
    expect(r.out).toContain(
      `| pooled, question by question (checkpoint noise) | | +20.0 ± ${(100 * se).toFixed(1)} | 3 / 1 (net per question) | 0.63 |`,
    );
    // Pair by pair: +25.0 and +16.7.
    expect(r.out).toMatch(/\| pooled, pair by pair \(seed noise: t [\d.]+, 1 df\) \| \| \+20\.8 ± 4\.2 \|/);
    // Per type, each pair on its own questions of the type. bridge: A's 0 and 2 (+1, 0), B's 2 and 3
    // (+1, +1): mean +0.75, sample std 0.5 over 4; pairs +50 and +100 (t 3, 1 df: p 1 − 2·atan(3)/π).
    // yesno: no change anywhere. comparison: B's alone (−1, 0).
    expect(r.out).toContain('| bridge | 4 | 2 | +75.0 ± 25.0 | 3 / 0 | 0.25 | +75.0 ± 25.0 | 0.20 |');
    expect(r.out).toContain('| yesno | 4 | 2 | +0.0 ± 0.0 | 0 / 0 | 1.0 | +0.0 in every pair | – |');
    expect(r.out).toContain('| comparison | 2 | 1 | −50.0 ± 50.0 | 0 / 1 | 1.0 | – (one pair) | |');
    // One type only: the pooled rows already are its table.
    const one = ['bridge', 'bridge', 'bridge', 'bridge'];
    const oneType = run(
      '--pairs',
      write('ot-a.json', 'bundle', [0, 1, 0, 0], undefined, one),
      write('ot-b.json', 'grpo', [1, 1, 0, 0], undefined, one),
    );
    expect(oneType.status, oneType.out).toBe(0);
    expect(oneType.out).not.toContain('by question type');
    // --without-type drops each pair's own yes/no questions: world A keeps 0 and 2, world B 2–5.
    const w = run('--pairs', a0, a1, b0, b1, '--without-type', 'yesno');
    expect(w.status, w.out).toBe(0);
    expect(w.out).toMatch(/without the questions of type yesno: 6 questions left/);
    expect(w.out).toContain('| grpo vs bundle | 50.0 vs 0.0 | +50.0 ± 50.0 | 1 / 0 | 1.0 |');
    expect(w.out).toContain('| grpo vs bundle | 50.0 vs 25.0 | +25.0 ± 47.9 | 2 / 1 | 1.0 |');
    expect(w.out).toMatch(
      /\| pooled, question by question \(checkpoint noise\) \| \| \+33\.3 ± [\d.]+ \| 3 \/ 1 \(net per question\) \|/,
    );
  });

  it('refuses files it cannot compare with one line and exit 2', () => {
    const base = write('b.json', 'start', [1, 0, 1]);
    const shorter = write('s.json', 'x', [1, 0]);
    const otherIds = write('o.json', 'y', [1, 0, 1], ['q0', 'q9', 'q2']);
    const otherWorld = write('w.json', 'z', [1, 0, 1], undefined, ['comparison', 'yesno', 'bridge']);
    const noList = join(dir, 'old.json');
    writeFileSync(noList, JSON.stringify({ model: 'old', em: 0.2 }));
    const cases: [string[], RegExp][] = [
      [[base], /usage: npm run -s compare -- BASE\.json OTHER\.json/],
      [[base, join(dir, 'missing.json')], /cannot read .*missing\.json/],
      [[base, noList], /old\.json has no per-question list \("questions"\)/],
      [[base, shorter], /s\.json has 2 questions, .*b\.json 3: evaluate both on the same ones/],
      [
        [base, otherIds],
        /o\.json: question 1 is q9 \(yesno\), in .*b\.json q1 \(yesno\): not the same questions/,
      ],
      // The same ids from another test world ("test-0", …): the types tell them apart.
      [
        [base, otherWorld],
        /w\.json: question 0 is q0 \(comparison\), in .*b\.json q0 \(bridge\): not the same/,
      ],
      // With --pairs each pair must share its questions.
      [
        ['--pairs', base, base, base, otherWorld],
        /w\.json: question 0 is q0 \(comparison\), in .*b\.json q0/,
      ],
    ];
    for (const [files, message] of cases) {
      const r = run(...files);
      expect(r.status, r.out).toBe(2);
      expect(r.out).toMatch(message);
      expect(r.out.trim().split('\n')).toHaveLength(1);
    }
  });
});
