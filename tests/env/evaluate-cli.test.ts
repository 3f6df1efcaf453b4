// The evaluation CLI (scripts/evaluate.ts) as a user runs it, in a child process: the scripted policies
// refuse real data in one line with exit 2, the rule-based Naive RAG is labelled as what it is, --json
// leaves the episodes' messages out unless --episodes, and Naive RAG with a checkpoint folder runs on a
// HotpotQA file end to end (random tiny Qwen3 written to a temp folder; its answers are noise).
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SCRIPTED_NAIVE_RAG_NAME } from '../../src/env/policies/naive-rag.ts';
import { HAS_SHARED_DATA, HOTPOT_FILE, REPO_ROOT, readSharedText, SKIP_MESSAGE } from './shared-data.ts';

function runCli(script: string, args: string[]) {
  const result = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--import', './scripts/wgsl-hooks.mjs', script, ...args],
    { cwd: REPO_ROOT, encoding: 'utf8', timeout: 120_000 },
  );
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

const evaluateCli = (args: string[]) => runCli('scripts/evaluate.ts', args);

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'evaluate-cli-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe.skipIf(!HAS_SHARED_DATA)('evaluate CLI on real data', () => {
  if (!HAS_SHARED_DATA) console.warn(SKIP_MESSAGE);
  let hotpotFile = '';
  beforeAll(async () => {
    // Three records of the shared sample, in HotpotQA's own format.
    const records = JSON.parse(readSharedText(HOTPOT_FILE)) as unknown[];
    hotpotFile = join(dir, 'hotpot-3.json');
    await writeFile(hotpotFile, JSON.stringify(records.slice(0, 3)));
  });

  it.each([
    ['naive-rag', SCRIPTED_NAIVE_RAG_NAME],
    ['oracle', 'oracle'],
  ])('refuses --policy %s on HotpotQA: one line, exit 2, no EM printed', (policy, name) => {
    const run = evaluateCli(['--policy', policy, '--tasks', `hotpotqa:${hotpotFile}`]);
    expect(run.status).toBe(2);
    const lines = run.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toBe(
      `evaluate: ${name} cannot read hotpotqa data: it follows the synthetic question templates only ` +
        '(it would score EM 0 without reading a word); use naive-rag:model:DIR or model:DIR',
    );
    expect(run.stdout).not.toContain('EM');
  });

  it('runs naive-rag:model:DIR on HotpotQA: one search, one model answer per question', async () => {
    const made = runCli('scripts/make-tiny-checkpoints.ts', [dir, 'tiny-qwen3']);
    expect(made.status, made.stderr).toBe(0);
    const modelDir = join(dir, 'tiny-qwen3');
    const jsonFile = join(dir, 'model-rag.json');
    const run = evaluateCli([
      '--policy',
      `naive-rag:model:${modelDir}`,
      '--tasks',
      `hotpotqa:${hotpotFile}`,
      '--max-new-tokens',
      '4',
      '--json',
      jsonFile,
    ]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain(`naive-rag(${modelDir}) on hotpotqa:${hotpotFile}, 3 questions`);
    expect(run.stdout).toContain('temperature 0, max 4 new tokens, seed 1');
    const report = JSON.parse(await readFile(jsonFile, 'utf8'));
    expect(report.config).toMatchObject({
      policy: `naive-rag:model:${modelDir}`,
      temperature: 0,
      maxNewTokens: 4,
    });
    expect(report.n).toBe(3);
    for (const episode of report.episodes) {
      expect(episode).toMatchObject({ source: 'hotpotqa', turns: 2, toolCalls: 1, doneReason: 'answer' });
      expect(typeof episode.prediction).toBe('string');
      expect(episode.messages).toBeUndefined();
    }
  });
});

describe('evaluate CLI on the synthetic world', () => {
  it('labels the rule-based Naive RAG; --json omits the messages unless --episodes', async () => {
    const plain = join(dir, 'plain.json');
    const run = evaluateCli(['--policy', 'naive-rag', '--limit', '4', '--split', 'train', '--json', plain]);
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain(`${SCRIPTED_NAIVE_RAG_NAME} on synthetic train, 4 questions`);
    const report = JSON.parse(await readFile(plain, 'utf8'));
    expect(report.policy).toBe(SCRIPTED_NAIVE_RAG_NAME);
    expect(report.config).toMatchObject({ tasks: 'synthetic', split: 'train', preset: 'default', limit: 4 });
    expect(report.episodes).toHaveLength(4);
    for (const e of report.episodes) {
      expect(e.messages).toBeUndefined();
      expect(e.tools).toBeUndefined();
    }

    const full = join(dir, 'full.json');
    const again = evaluateCli([
      '--policy',
      'naive-rag',
      '--limit',
      '4',
      '--split',
      'train',
      '--json',
      full,
      '--episodes',
    ]);
    expect(again.status, again.stderr).toBe(0);
    const withEpisodes = JSON.parse(await readFile(full, 'utf8'));
    expect(withEpisodes.em).toBe(report.em);
    for (const e of withEpisodes.episodes)
      expect(e.messages.map((m: { role: string }) => m.role)).toEqual([
        'system',
        'user',
        'assistant',
        'tool',
        'assistant',
      ]);
  });

  it('the compact preset shortens the search responses the policy sees', async () => {
    const file = join(dir, 'compact.json');
    const run = evaluateCli([
      '--policy',
      'oracle',
      '--limit',
      '2',
      '--preset',
      'compact',
      '--json',
      file,
      '--episodes',
    ]);
    expect(run.status, run.stderr).toBe(0);
    const report = JSON.parse(await readFile(file, 'utf8'));
    for (const e of report.episodes) {
      for (const m of e.messages.filter((x: { role: string }) => x.role === 'tool')) {
        expect(m.content.length).toBeLessThanOrEqual(540);
        expect(m.content.split('\n').length).toBeLessThanOrEqual(3);
      }
    }
  });

  it.each([
    [['--policy', 'naive-rag', '--split', 'dev'], '--split must be train or test, got dev'],
    [['--policy', 'naive-rag', '--preset', 'huge'], '--preset must be one of default, compact, got huge'],
    [
      ['--policy', 'naive-rag', '--temperature=-1'],
      '--temperature must be a number ≥ 0 (0 = greedy), got -1',
    ],
    [
      ['--policy', 'naive-rag', '--max-new-tokens', '0'],
      '--max-new-tokens must be a positive integer, got 0',
    ],
    [
      ['--policy', 'naive-rag', '--episodes'],
      '--episodes adds the episodes to the --json report; give --json FILE',
    ],
    [['--policy', 'naive-rag:model'], 'unknown policy "naive-rag:model"'],
    [['--policy', 'naive-rag:model:'], '--policy naive-rag:model: needs a checkpoint folder after the colon'],
    [
      ['--tasks', 'squad:x.json', '--policy', 'naive-rag'],
      'unknown task set "squad" in --tasks squad:x.json',
    ],
  ])('refuses %j with a clear message and exit 2', (args, message) => {
    const run = evaluateCli(args);
    expect(run.status).toBe(2);
    expect(run.stderr.split('\n')[0]).toBe(`evaluate: ${message}`);
  });

  it('turns a mistyped option into the same exit 2 with the usage, not a stack trace', () => {
    const run = evaluateCli(['--policy', 'naive-rag', '--temprature', '1']);
    expect(run.status).toBe(2);
    expect(run.stderr.split('\n')[0]).toMatch(/^evaluate: .*'--temprature'/);
    expect(run.stderr.split('\n')[1]).toMatch(/^usage: npm run evaluate/);
  });
});

// Damaged task files (issue 11): one helpful line and exit 2 for a file that cannot be read, bad
// records reported with their line, a summary by reason at the end, --strict stops at the first.
describe('evaluate CLI on damaged task files', () => {
  const SECRET = 'Zqxjvbnm'; // in every record: must never be printed
  const record = (id: string, over: Record<string, unknown> = {}) => ({
    _id: id,
    question: `Where did ${SECRET} live?`,
    answer: 'Veldhaven',
    type: 'bridge',
    supporting_facts: [['A', 0]],
    context: [
      ['A', [`${SECRET} lived in Veldhaven.`]],
      ['B', ['Unrelated.']],
    ],
    ...over,
  });
  const write = async (name: string, content: string | Uint8Array) => {
    const file = join(dir, name);
    await writeFile(file, content);
    return file;
  };
  // The file is read before the checkpoint: a folder that does not exist is never reached.
  const run = (spec: string, extra: string[] = []) =>
    evaluateCli(['--policy', `model:${join(dir, 'no-such-model')}`, '--tasks', spec, ...extra]);
  const oneLine = (r: ReturnType<typeof run>) => {
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).not.toContain(SECRET);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    return lines[0];
  };

  it('a truncated JSON file', async () => {
    const text = JSON.stringify([record('a'), record('b')]);
    const file = await write('trunc.json', text.slice(0, text.indexOf(SECRET, 100) + 2));
    expect(oneLine(run(`hotpotqa:${file}`))).toMatch(
      new RegExp(
        `^evaluate: ${file}:1:\\d+: expected a closing '"', found end of file inside a string \\(the file looks truncated\\)$`,
      ),
    );
  });

  it('JSON lines given as a HotpotQA file, a JSON array as MuSiQue, a gzip file, a missing file', async () => {
    const jsonl = await write('h.jsonl', `${JSON.stringify(record('a'))}\n${JSON.stringify(record('b'))}\n`);
    expect(oneLine(run(`hotpotqa:${jsonl}`))).toBe(
      `evaluate: ${jsonl}:2:1: expected end of file, found '{' (this looks like JSON lines (one record per line); hotpotqa:FILE takes one JSON array)`,
    );
    const array = await write('m.json', JSON.stringify([{ id: '2hop__a', question: SECRET }]));
    expect(oneLine(run(`musique:${array}`))).toBe(
      `evaluate: ${array}:1:1: expected a JSON object on each line, found '[' (this looks like a JSON array; musique:FILE takes JSON lines (one record per line))`,
    );
    const gz = await write('h.json.gz', new Uint8Array([0x1f, 0x8b, 0x08, 0x00, 0xff, 0x00]));
    expect(oneLine(run(`hotpotqa:${gz}`))).toBe(
      `evaluate: ${gz}:1:2: expected UTF-8 text, found byte 0x8b (this looks like a gzip file: decompress it first)`,
    );
    expect(oneLine(run(`2wiki:${join(dir, 'absent.json')}`))).toBe(
      `evaluate: cannot read ${join(dir, 'absent.json')}: no such file`,
    );
  });

  it('a BOM is accepted: the run gets past the file (and stops at the missing checkpoint)', async () => {
    const file = await write('bom.json', `\uFEFF${JSON.stringify([record('a')])}`);
    const r = run(`hotpotqa:${file}`);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/cannot load the checkpoint folder/);
    expect(r.stderr).not.toContain(file);
  });

  it('bad records: each reported with its line; --strict stops at the first; all bad means no tasks', async () => {
    const text = JSON.stringify(
      [record('bad', { answer: '' }), record('fix', { supporting_facts: [['A', 99]] })],
      null,
      1,
    );
    const file = await write('records.json', text);
    const lineOf = (id: string) => text.split('\n').findIndex((l) => l.includes(`"_id": "${id}"`));
    const strict = run(`hotpotqa:${file}`, ['--strict']);
    expect(oneLine(strict)).toBe(
      `evaluate: ${file}:${lineOf('bad')}: record 1 (id "bad") skipped: missing answer (answer is "") (--strict stops at the first bad record)`,
    );
    const allBad = await write(
      'all-bad.json',
      JSON.stringify([record('x', { answer: '' }), record('y', { context: [] })]),
    );
    const r = run(`hotpotqa:${allBad}`);
    expect(r.status).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual([
      `${allBad}:1: record 1 (id "x") skipped: missing answer (answer is "")`,
      `${allBad}:1: record 2 (id "y") skipped: missing context`,
      `evaluate: no tasks to evaluate: ${allBad}: 0 task(s); skipped 2: missing answer ×1, missing context ×1`,
    ]);
  });

  it('ends a real run with the summary of skips and repairs by reason', async () => {
    const made = runCli('scripts/make-tiny-checkpoints.ts', [dir, 'tiny-qwen3']);
    expect(made.status, made.stderr).toBe(0);
    const text = JSON.stringify(
      [record('fix', { supporting_facts: [['A', -1]] }), record('bad', { answer: '' }), record('ok')],
      null,
      1,
    );
    const file = await write('mixed.json', text);
    const r = evaluateCli([
      '--policy',
      `naive-rag:model:${join(dir, 'tiny-qwen3')}`,
      '--tasks',
      `hotpotqa:${file}`,
      '--max-new-tokens',
      '2',
    ]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toContain(
      `${file}:2: record 1 (id "fix") repaired: supporting fact ['A', -1] points outside`,
    );
    expect(r.stderr).toContain(`record 2 (id "bad") skipped: missing answer`);
    expect(r.stdout).toContain(', 2 questions,');
    expect(r.stdout.trim().split('\n').at(-1)).toBe(
      `${file}: 2 task(s); skipped 1: missing answer ×1; repaired 1: supporting fact out of range ×1`,
    );
    expect(r.stdout).not.toContain(SECRET);
  });
});

describe('evaluate CLI piped into a reader that stops early', () => {
  it('still writes its --json report and exits 0, without an EPIPE trace', async () => {
    const file = join(dir, 'piped.json');
    // `true` exits without reading, so every line the CLI prints meets a closed pipe (EPIPE).
    const result = spawnSync(
      'bash',
      [
        '-c',
        `"${process.execPath}" --import tsx --import ./scripts/wgsl-hooks.mjs scripts/evaluate.ts --policy oracle --limit 2 --json "$1" | true; echo "status \${PIPESTATUS[0]}"`,
        '_',
        file,
      ],
      { cwd: REPO_ROOT, encoding: 'utf8', timeout: 120_000 },
    );
    expect(result.stdout.trim(), result.stderr).toBe('status 0');
    expect(result.stderr).not.toMatch(/EPIPE|Unhandled/);
    const report = JSON.parse(await readFile(file, 'utf8'));
    expect(report.policy).toBe('oracle');
    expect(report.n).toBe(2);
  });
});
