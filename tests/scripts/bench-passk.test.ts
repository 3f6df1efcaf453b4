// The micro version of `npm run bench:passk` (bench/pass-at-k.ts) on configs/micro.json: groups of two
// on two questions of each split print their line, and --json writes them per question; bad arguments
// are one line and exit 2. Also the train CLI's `--evaluate-only --split train`, which plays the
// training world's questions, and its `--questions N`.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ANSWER_SOURCES, EPISODE_OUTCOMES, VAIN_SEARCH_KINDS } from '../../src/rl/evidence.ts';

const node = (script: string, args: string[]) => {
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--import', './scripts/wgsl-hooks.mjs', script, ...args],
    {
      encoding: 'utf8',
      timeout: 240_000,
    },
  );
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
};

describe('npm run bench:passk (micro)', () => {
  it('prints the group signal of both splits at one temperature, and writes it per question with --json', () => {
    const prefix = join(mkdtempSync(join(tmpdir(), 'passk-json-')), 'micro');
    const r = node('bench/pass-at-k.ts', [
      '--config',
      'configs/micro.json',
      '--n',
      '2',
      '--samples',
      '2',
      '--temperatures',
      '1',
      '--json',
      prefix,
    ]);
    expect(r.status, r.out).toBe(0);
    for (const split of ['test', 'train']) {
      expect(r.out).toMatch(new RegExp(`${split}: greedy EM [\\d.]+ format-valid [\\d.]+`));
      const line = r.out.match(
        new RegExp(
          `${split} T=1: mean EM ([\\d.]+) · pass@2 ([\\d.]+) · maj@2 ([\\d.]+) · EM-split groups [\\d.]+ · reward-split groups [\\d.]+ · reward std [\\d.]+`,
        ),
      );
      expect(line, r.out).not.toBeNull();
      // --json: per question, the views npm run compare reads; each adds up to the printed line.
      const [mean, pass, maj] = ['mean2', 'pass2', 'maj2'].map((view) =>
        JSON.parse(readFileSync(`${prefix}-${split}-t1-${view}.json`, 'utf8')),
      );
      for (const [file, printed] of [
        [mean, line![1]],
        [pass, line![2]],
        [maj, line![3]],
      ] as const) {
        expect(file.split).toBe(split);
        expect(file.samples).toBe(2);
        expect(file.questions).toHaveLength(2);
        expect(file.em.toFixed(3)).toBe(printed);
        const ems = file.questions.map((q: { em: number }) => q.em);
        expect(ems.reduce((a: number, b: number) => a + b, 0) / 2).toBeCloseTo(file.em, 12);
      }
      expect(pass.questions.map((q: { id: string }) => q.id)).toEqual(
        maj.questions.map((q: { id: string }) => q.id),
      );
      pass.questions.forEach((q: { em: number; f1: number; type: string }, i: number) => {
        expect([0, 1]).toContain(q.em);
        expect(typeof q.type).toBe('string');
        // some sample right ⇔ the mean is above 0; the best sample's F1 bounds the mean and the vote
        expect(q.em === 1).toBe(mean.questions[i].em > 0);
        expect(q.f1).toBeGreaterThanOrEqual(mean.questions[i].f1);
        expect(q.f1).toBeGreaterThanOrEqual(maj.questions[i].f1);
        expect(q.em).toBeGreaterThanOrEqual(maj.questions[i].em);
      });
    }
    // The files are what npm run compare reads: pass@2 against maj@2, question by question.
    const c = node('scripts/compare-evals.ts', [
      `${prefix}-test-t1-maj2.json`,
      `${prefix}-test-t1-pass2.json`,
    ]);
    expect(c.status, c.out).toBe(0);
  }, 250_000);

  it('refuses bad arguments with one line and exit 2', () => {
    const t = node('bench/pass-at-k.ts', ['--config', 'configs/micro.json', '--temperatures', '0']);
    expect(t.status).toBe(2);
    expect(t.out).toMatch(/bench:passk: --temperatures must be numbers > 0, got 0/);
    const s = node('bench/pass-at-k.ts', ['--config', 'configs/micro.json', '--splits', 'dev']);
    expect(s.status).toBe(2);
    expect(s.out).toMatch(/bench:passk: --splits takes test and\/or train, got dev/);
    const j = node('bench/pass-at-k.ts', ['--config', 'configs/micro.json', '--json', '/nonexistent-dir/p']);
    expect(j.status).toBe(2);
    expect(j.out).toMatch(
      /bench:passk: --json \/nonexistent-dir\/p: the folder \/nonexistent-dir does not exist/,
    );
  }, 250_000);
});

describe('npm run train -- --evaluate-only --split', () => {
  it('plays the training world with --split train', () => {
    const r = node('scripts/train.ts', [
      '--config',
      'configs/micro.json',
      '--evaluate-only',
      '--split',
      'train',
    ]);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/on micro's training world \(2 questions, greedy\): EM [\d.]+/);
    expect(r.out).toMatch(/EM by question type: .*\(\d\).*; most frequent answer ".*" \(\d+ % of episodes\)/);
  }, 250_000);

  it('plays more held-out questions than the config has with --questions, and refuses bad counts', () => {
    // configs/micro.json has task.testSize 4 and train.evalSize 2.
    const json = join(mkdtempSync(join(tmpdir(), 'eval-json-')), 'eval.json');
    const r = node('scripts/train.ts', [
      '--config',
      'configs/micro.json',
      '--evaluate-only',
      '--questions',
      '6',
      '--json',
      json,
    ]);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/on micro's held-out split \(6 questions, greedy\)/);
    const counts = [...r.out.matchAll(/ \((\d+)\)/g)].map((m) => Number(m[1]));
    expect(counts.reduce((a, b) => a + b, 0)).toBe(6);
    // --json lists every question's outcome in the order played (what npm run compare reads), and
    // they add up to the summary.
    const written = JSON.parse(readFileSync(json, 'utf8'));
    expect(written.n).toBe(6);
    expect(written.questions).toHaveLength(6);
    expect(new Set(written.questions.map((q: { id: string }) => q.id)).size).toBe(6);
    for (const q of written.questions) {
      expect(typeof q.type).toBe('string');
      expect([0, 1]).toContain(q.em);
      expect(q.f1).toBeGreaterThanOrEqual(q.em);
      // What its searches found (src/rl/evidence.ts), which npm run compare -- --evidence reads.
      expect(EPISODE_OUTCOMES).toContain(q.outcome);
      expect(q.outcome === 'right').toBe(q.em === 1);
      expect(q.supportingPassages).toBeGreaterThan(0);
      expect(q.supportingRetrieved).toBeGreaterThanOrEqual(0);
      expect(q.supportingRetrieved).toBeLessThanOrEqual(q.supportingPassages);
      expect(q.turns).toBeGreaterThanOrEqual(1);
      expect(q.toolCalls).toBeGreaterThanOrEqual(0);
      expect(typeof q.doneReason).toBe('string');
      expect(q.missingTitles).toHaveLength(q.supportingPassages - q.supportingRetrieved);
      if ('lastVainQuery' in q) expect(VAIN_SEARCH_KINDS).toContain(q.vainSearch);
      else expect(q.vainSearch).toBeUndefined();
      // Where its answer's words came from (src/rl/evidence.ts): none exactly when there is no answer.
      expect(ANSWER_SOURCES).toContain(q.answerSource);
      expect(q.answerSource === 'no_answer').toBe(q.prediction === null);
    }
    expect(r.out).toMatch(
      /outcomes: right [\d.]+ % · no answer [\d.]+ % · .*; supporting passages found [\d.]+ %/,
    );
    expect(r.out).toMatch(
      /answers: yes\/no [\d.]+ % · from the question [\d.]+ % · from the results read [\d.]+ % · in nothing read [\d.]+ %/,
    );
    const emSum = written.questions.reduce((a: number, q: { em: number }) => a + q.em, 0);
    expect(emSum / 6).toBeCloseTo(written.em, 12);
    for (const [type, s] of Object.entries(written.byType as Record<string, { n: number }>))
      expect(written.questions.filter((q: { type: string }) => q.type === type)).toHaveLength(s.n);
    const a = node('scripts/train.ts', [
      '--config',
      'configs/micro.json',
      '--evaluate-only',
      '--questions',
      '0',
    ]);
    expect(a.status).toBe(2);
    expect(a.out).toMatch(/train: --questions must be a positive integer, got 0/);
    const b = node('scripts/train.ts', [
      '--config',
      'configs/micro.json',
      '--evaluate-only',
      '--split',
      'train',
      '--questions',
      '21',
    ]);
    expect(b.status).toBe(2);
    expect(b.out).toMatch(/train: --questions 21 is more than the training world's task.trainSize 20/);
  }, 250_000);

  it('refuses an unknown split, and --split without --evaluate-only', () => {
    const a = node('scripts/train.ts', [
      '--config',
      'configs/micro.json',
      '--evaluate-only',
      '--split',
      'dev',
    ]);
    expect(a.status).toBe(2);
    expect(a.out).toMatch(/train: --split must be test or train, got dev/);
    const b = node('scripts/train.ts', ['--config', 'configs/micro.json', '--split', 'train']);
    expect(b.status).toBe(2);
    expect(b.out).toMatch(/train: --split goes with --evaluate-only/);
  }, 250_000);
});
