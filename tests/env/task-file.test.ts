// Task files as users bring them (issue 11, items 1 and 2): a UTF-8 byte-order mark is accepted; any
// other file-level defect is one TaskFileError line (file:line:column, expected, found, a hint) that
// quotes nothing of the file; bad records are repaired when one reading is possible, else skipped,
// each with its line; strict stops at the first.
import { describe, expect, it } from 'vitest';
import { loadMusiqueJsonl } from '../../src/env/tasks/musique.ts';
import { TaskRecordError } from '../../src/env/tasks/schema.ts';
import {
  describeLoadProblem,
  readTaskFile,
  summarizeLoad,
  TaskFileError,
} from '../../src/env/tasks/task-file.ts';

const SECRET = 'Zqxjvbnm'; // a word that must never appear in an error message
const hotpot = (id: string, over: Record<string, unknown> = {}) => ({
  _id: id,
  question: `Where did ${SECRET} live?`,
  answer: 'Veldhaven',
  type: 'bridge',
  level: 'easy',
  supporting_facts: [
    ['A', 0],
    ['B', 1],
  ],
  context: [
    ['A', [`${SECRET} was born in Orsa.`, ' Then moved.']],
    ['B', ['Orsa is a river.', ' It flows through Veldhaven.']],
    ['C', ['Unrelated.']],
  ],
  ...over,
});
const musique = (id: string, over: Record<string, unknown> = {}) => ({
  id,
  question: `Who founded ${SECRET}?`,
  answer: 'Hall',
  answer_aliases: ['G. Hall'],
  answerable: true,
  paragraphs: [
    { idx: 0, title: 'X', paragraph_text: `${SECRET} was founded by Hall.`, is_supporting: true },
    { idx: 1, title: 'Y', paragraph_text: 'Unrelated.', is_supporting: false },
  ],
  question_decomposition: [{ id: 1 }, { id: 2 }],
  ...over,
});
const HOTPOT_TEXT = JSON.stringify([hotpot('h1'), hotpot('h2')], null, 2);
const MUSIQUE_TEXT = `${[musique('2hop__1'), musique('2hop__2')].map((r) => JSON.stringify(r)).join('\n')}\n`;
const utf8 = (text: string) => new TextEncoder().encode(text);

/** The TaskFileError readTaskFile throws, checked to be one line that quotes nothing of the file. */
function fileError(input: Uint8Array | string, kind: 'hotpotqa' | '2wiki' | 'musique', file = 'data.json') {
  try {
    readTaskFile(input, kind, file);
  } catch (error) {
    expect(error).toBeInstanceOf(TaskFileError);
    const message = (error as Error).message;
    expect(message).not.toContain('\n');
    expect(message).not.toContain(SECRET);
    expect(message.length).toBeLessThan(300);
    return error as TaskFileError;
  }
  throw new Error('readTaskFile accepted the file');
}

describe('byte-order mark', () => {
  it('is accepted at the start of a HotpotQA JSON file', () => {
    const result = readTaskFile(utf8(`\uFEFF${HOTPOT_TEXT}`), 'hotpotqa', 'h.json');
    expect(result.tasks.map((t) => t.id)).toEqual(['h1', 'h2']);
    expect(result.skipped).toBe(0);
  });

  it('does not drop the first record of a MuSiQue JSON-lines file', () => {
    const withBom = `\uFEFF${MUSIQUE_TEXT}`;
    expect(loadMusiqueJsonl(withBom).tasks.map((t) => t.id)).toEqual(['2hop__1', '2hop__2']);
    const bytes = new Uint8Array([0xef, 0xbb, 0xbf, ...utf8(MUSIQUE_TEXT)]);
    const result = readTaskFile(bytes, 'musique', 'm.jsonl');
    expect(result.tasks.map((t) => t.id)).toEqual(['2hop__1', '2hop__2']);
    expect(result.skipped).toBe(0);
  });
});

describe('a file that cannot be read as its task set: one clear line', () => {
  it('truncated JSON: where, what was expected, and that it looks truncated', () => {
    const cut = HOTPOT_TEXT.slice(0, HOTPOT_TEXT.indexOf(SECRET) + 3);
    const error = fileError(cut, 'hotpotqa', 'hotpot.json');
    const lines = cut.split('\n');
    expect(error).toMatchObject({
      file: 'hotpot.json',
      line: lines.length,
      found: 'end of file inside a string',
    });
    expect(error.column).toBe(lines[lines.length - 1].length + 1);
    expect(error.message).toBe(
      `hotpot.json:${lines.length}:${error.column}: expected a closing '"', found end of file inside a string (the file looks truncated)`,
    );
  });

  it('truncated between values', () => {
    const error = fileError('[{"_id": "a"}, ', 'hotpotqa');
    expect(error.message).toBe(
      `data.json:1:16: expected a JSON value, found end of file (the file looks truncated)`,
    );
  });

  it('JSON lines given as HotpotQA: the hint says so', () => {
    const lines = [hotpot('h1'), hotpot('h2')].map((r) => JSON.stringify(r)).join('\n');
    const error = fileError(lines, 'hotpotqa', 'h.jsonl');
    expect(error).toMatchObject({ line: 2, column: 1, expected: 'end of file', found: "'{'" });
    expect(error.hint).toMatch(/looks like JSON lines/);
  });

  it('a JSON array given as MuSiQue: the hint says so', () => {
    const error = fileError(JSON.stringify([musique('2hop__1')]), 'musique', 'm.json');
    expect(error).toMatchObject({ line: 1, column: 1, found: "'['" });
    expect(error.hint).toMatch(/looks like a JSON array; musique:FILE takes JSON lines/);
  });

  it('pretty-printed JSON given as MuSiQue', () => {
    const error = fileError(JSON.stringify(musique('2hop__1'), null, 2), 'musique', 'm.json');
    expect(error.line).toBe(1);
    expect(error.hint).toMatch(/spread over several lines/);
  });

  it('a single record object, or records under a key, instead of an array', () => {
    expect(fileError(JSON.stringify(hotpot('h1')), 'hotpotqa').message).toBe(
      'data.json:1:1: expected a JSON array of hotpotqa records, found a JSON object (one record? wrap it in [ ])',
    );
    expect(fileError(`\n  ${JSON.stringify({ data: [hotpot('h1')] })}`, '2wiki').message).toBe(
      'data.json:2:3: expected a JSON array of 2wiki records, found a JSON object (its key "data" holds a list: the records must be the top-level array)',
    );
  });

  it('an empty file', () => {
    expect(fileError('  \n', 'hotpotqa').message).toBe(
      'data.json:1:1: expected a JSON array of hotpotqa records, found end of file (the file is empty)',
    );
  });

  it('bytes that are not UTF-8, with a hint for gzip / parquet / UTF-16', () => {
    const bad = new Uint8Array([...utf8('[\n  {"a": "caf'), 0xe9, ...utf8('"}]')]);
    expect(fileError(bad, 'hotpotqa').message).toBe('data.json:2:13: expected UTF-8 text, found byte 0xe9');
    expect(fileError(new Uint8Array([0x1f, 0x8b, 8, 0, 0xff]), 'hotpotqa').hint).toMatch(/gzip/);
    expect(fileError(new Uint8Array([...utf8('PAR1'), 0x15, 0xff, 0xfe]), 'musique').hint).toMatch(/parquet/);
    expect(fileError(new Uint8Array([0xff, 0xfe, 0x5b, 0x00]), 'hotpotqa').hint).toMatch(/UTF-16/);
  });

  it('syntax errors inside the array name line, column and the token found', () => {
    const text = `[\n  {"_id": "a", "answer": 'x'}\n]`;
    expect(fileError(text, 'hotpotqa').message).toBe(`data.json:2:26: expected a JSON value, found '''`);
    expect(fileError('[{"a": 1,}]', 'hotpotqa').message).toBe(
      `data.json:1:10: expected a "key" string, found '}'`,
    );
    expect(fileError('[NaN]', 'hotpotqa').message).toBe(
      `data.json:1:2: expected a value or ']', found 'NaN'`,
    );
  });
});

describe('bad records: repaired when unambiguous, else skipped; each with its line', () => {
  it('HotpotQA: sentence index 99 or -1 is repaired (title stays gold), a duplicate title or empty answer skipped', () => {
    const records = [
      hotpot('r99', {
        supporting_facts: [
          ['A', 99],
          ['B', 1],
        ],
      }),
      hotpot('rneg', { supporting_facts: [['A', -1]] }),
      hotpot('dup', {
        context: [
          ['A', ['one.']],
          ['A', ['another text.']],
        ],
        supporting_facts: [['A', 0]],
      }),
      hotpot('empty', { answer: '' }),
      hotpot('num', { answer: 1990 }),
      hotpot('ok'),
    ];
    const text = JSON.stringify(records, null, 2);
    const result = readTaskFile(text, 'hotpotqa', 'h.json');
    expect(result.tasks.map((t) => t.id)).toEqual(['r99', 'rneg', 'num', 'ok']);
    const lineOf = (id: string) => text.split('\n').findIndex((l) => l.includes(`"_id": "${id}"`)); // 0-based line of _id = 1-based line of '{'
    const r99 = result.tasks[0];
    expect(r99.supportingIds).toEqual([r99.passages[0].id, r99.passages[1].id]);
    expect(r99.meta?.supportingFacts).toEqual([['B', 1]]);
    expect(result.tasks[1].supportingIds).toEqual([result.tasks[1].passages[0].id]);
    expect(result.tasks[2].answers).toEqual(['1990']);
    expect(result.repairs.map((p) => [p.id, p.line, p.kind])).toEqual([
      ['r99', lineOf('r99'), 'supporting fact out of range'],
      ['rneg', lineOf('rneg'), 'supporting fact out of range'],
      ['num', lineOf('num'), 'answer is not a string'],
    ]);
    expect(result.problems.map((p) => [p.id, p.line, p.kind])).toEqual([
      ['dup', lineOf('dup'), 'duplicate title'],
      ['empty', lineOf('empty'), 'missing answer'],
    ]);
    expect(describeLoadProblem('h.json', result.repairs[0])).toBe(
      `h.json:${lineOf('r99')}: record 1 (id "r99") repaired: supporting fact ['A', 99] points outside the paragraph's 2 sentence(s): the title stays gold, the index is dropped`,
    );
    expect(describeLoadProblem('h.json', result.problems[0])).toMatch(
      /^h\.json:\d+: record 3 \(id "dup"\) skipped: two context paragraphs are titled 'A' with different text/,
    );
    expect(summarizeLoad('h.json', result)).toBe(
      'h.json: 4 task(s); skipped 2: duplicate title ×1, missing answer ×1; repaired 3: supporting fact out of range ×2, answer is not a string ×1',
    );
  });

  it('MuSiQue: "true"/"false" strings and a non-list decomposition are repaired; other values skipped', () => {
    const lines = [
      musique('2hop__s', {
        answerable: 'true',
        paragraphs: [
          { title: 'X', paragraph_text: 'x', is_supporting: 'True' },
          { title: 'Y', paragraph_text: 'y', is_supporting: 'false' },
          { title: 'Z', paragraph_text: 'z', is_supporting: 'false' },
        ],
      }),
      musique('3hop1__d', { question_decomposition: 'a, b, c' }),
      musique('nohop', { question_decomposition: {} }),
      musique('2hop__yes', { paragraphs: [{ title: 'X', paragraph_text: 'x', is_supporting: 'yes' }] }),
      musique('2hop__na', { answerable: 'false' }),
      musique('2hop__e', { answer: ' ' }),
    ].map((r) => JSON.stringify(r));
    const text = `${lines.join('\n')}\n\n{"id": "2hop__cut", "question": "Wh`;
    const result = readTaskFile(text, 'musique', 'm.jsonl');
    expect(result.tasks.map((t) => t.id)).toEqual(['2hop__s', '3hop1__d']);
    const [s, d] = result.tasks;
    expect(s.supportingIds).toEqual([s.passages[0].id]);
    expect(d.meta).toEqual({ hops: 3 });
    expect(result.repairs.map((p) => [p.line, p.kind, p.reason])).toEqual([
      [1, 'answerable is a string', 'answerable "true" is a string: read as true'],
      [1, 'is_supporting is a string', 'is_supporting "True" is a string: read as true (and 2 more like it)'],
      [
        2,
        'question_decomposition is not a list',
        'question_decomposition is "a, b, c", not a list: hops = 3 from the id',
      ],
    ]);
    expect(result.problems.map((p) => [p.line, p.kind])).toEqual([
      [3, 'question_decomposition is not a list'],
      [4, 'is_supporting is not a boolean'],
      [5, 'unanswerable'],
      [6, 'missing answer'],
      [8, 'invalid JSON'],
    ]);
    expect(result.problems[4].reason).toBe(
      `invalid JSON at column 36: expected a closing '"', found end of line inside a string`,
    );
  });

  it('strict: the first bad record (skip or repair) throws, naming its line', () => {
    const text = JSON.stringify(
      [hotpot('a'), hotpot('b', { answer: '' }), hotpot('c', { answer: 3 })],
      null,
      1,
    );
    let caught: unknown;
    try {
      readTaskFile(text, 'hotpotqa', 'h.json', { strict: true });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(TaskRecordError);
    const problem = (caught as TaskRecordError).problem;
    expect(problem).toMatchObject({ index: 1, id: 'b', action: 'skipped', kind: 'missing answer' });
    expect(problem.line).toBe(text.split('\n').findIndex((l) => l.includes('"_id": "b"')));
    expect(() =>
      readTaskFile(MUSIQUE_TEXT.replace('true', '"true"'), 'musique', 'm', { strict: true }),
    ).toThrow(/record 1 \(id "2hop__1"\) repaired: answerable "true" is a string/);
    expect(() => readTaskFile(`${MUSIQUE_TEXT}{oops\n`, 'musique', 'm', { strict: true })).toThrow(
      /^line 3: record 3 skipped: invalid JSON/,
    );
    // Without strict the same files load.
    expect(readTaskFile(text, 'hotpotqa', 'h.json').tasks.map((t) => t.id)).toEqual(['a', 'c']);
  });
});
