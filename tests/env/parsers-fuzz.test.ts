// Property-based fuzzing of every loader and parser that reads outside input (issue 11, item 4):
// task files (HotpotQA / 2Wiki JSON, MuSiQue JSON lines), the JSON syntax scanner, the parquet export,
// the RL config parser, and the chat-turn parser. Inputs: random bytes, truncations of valid files,
// deep nesting, very long strings, wrong types. Every case must end in a valid result or the parser's
// typed, readable error, within a time bound; never another exception, never a hang.
import fc from 'fast-check';
import { parquetReadObjects } from 'hyparquet';
import { describe, expect, it } from 'vitest';
import { parseTurn } from '../../src/env/parse.ts';
import { loadHotpotQa } from '../../src/env/tasks/hotpotqa.ts';
import { MAX_JSON_DEPTH, scanJson } from '../../src/env/tasks/json-scan.ts';
import { loadMusique } from '../../src/env/tasks/musique.ts';
import { exportTasksToParquet, toVerlRows } from '../../src/env/tasks/parquet.ts';
import { passageId, type QaTask, validateTask } from '../../src/env/tasks/schema.ts';
import { readTaskFile, TaskFileError } from '../../src/env/tasks/task-file.ts';
import { loadTwoWiki } from '../../src/env/tasks/twowiki.ts';
import { ConfigError, DEFAULT_CONFIG, parseConfigText } from '../../src/rl/config.ts';

const KINDS = ['hotpotqa', '2wiki', 'musique'] as const;
const TAGS = [
  '<tool_call>',
  '</tool_call>',
  '<tool_response>',
  '<answer>',
  '</answer>',
  '<|im_end|>',
  '<|im_start|>',
];

const hotpotRecord = (i: number) => ({
  _id: `h${i}`,
  question: `Where is ${i}?`,
  answer: `place ${i}`,
  type: 'comparison',
  supporting_facts: [['A', 0]],
  context: [
    ['A', ['First.', ' Second.']],
    ['B', ['Other.']],
  ],
  evidences: [['a', 'b', 'c']],
});
const musiqueRecord = (i: number) => ({
  id: `2hop__${i}`,
  question: `Who ${i}?`,
  answer: `person ${i}`,
  answerable: true,
  paragraphs: [{ title: 'X', paragraph_text: `text ${i}`, is_supporting: true }],
  question_decomposition: [{}, {}],
});
const VALID: Record<(typeof KINDS)[number], string> = {
  hotpotqa: JSON.stringify([0, 1, 2].map(hotpotRecord), null, 2),
  '2wiki': JSON.stringify([0, 1].map(hotpotRecord)),
  musique: [0, 1, 2].map((i) => JSON.stringify(musiqueRecord(i))).join('\n'),
};

/** readTaskFile's contract: a LoadResult whose tasks are valid, or a one-line TaskFileError. */
function checkTaskFile(input: Uint8Array | string, kind: (typeof KINDS)[number]): void {
  let result: ReturnType<typeof readTaskFile>;
  try {
    result = readTaskFile(input, kind, 'f');
  } catch (error) {
    if (!(error instanceof TaskFileError)) throw error;
    expect(error.message.startsWith(`f:${error.line}:${error.column}: expected `)).toBe(true);
    expect(error.message).not.toContain('\n');
    expect(error.message.length).toBeLessThan(400);
    return;
  }
  for (const task of result.tasks) expect(validateTask(task)).toEqual([]);
  expect(result.skipped).toBe(result.problems.length);
  for (const p of [...result.problems, ...result.repairs]) {
    expect(typeof p.reason).toBe('string');
    expect(p.reason.length).toBeLessThan(400);
  }
}

describe('task files', () => {
  it('random bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 400 }), fc.constantFrom(...KINDS), (bytes, kind) =>
        checkTaskFile(bytes, kind),
      ),
      { numRuns: 400 },
    );
  });

  it('every truncation and a random byte flip of a valid file', () => {
    for (const kind of KINDS) {
      const text = VALID[kind];
      for (let cut = 0; cut <= text.length; cut += 7) checkTaskFile(text.slice(0, cut), kind);
    }
    fc.assert(
      fc.property(fc.constantFrom(...KINDS), fc.nat(), fc.integer({ min: 0, max: 255 }), (kind, at, byte) => {
        const bytes = new TextEncoder().encode(VALID[kind]);
        bytes[at % bytes.length] = byte;
        checkTaskFile(bytes, kind);
      }),
      { numRuns: 400 },
    );
  });

  it('deep nesting is refused or loaded, quickly, without a stack overflow', () => {
    for (const depth of [100, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 200_000]) {
      const t0 = performance.now();
      checkTaskFile(`${'['.repeat(depth)}${']'.repeat(depth)}`, 'hotpotqa');
      checkTaskFile(`${'['.repeat(depth)}`, 'hotpotqa');
      checkTaskFile(`{"id": ${'{"a": '.repeat(depth)}1${'}'.repeat(depth)}}`, 'musique');
      expect(performance.now() - t0).toBeLessThan(5000);
    }
  });

  it('very long strings and lines load in linear time', () => {
    const long = 'x'.repeat(4_000_000);
    const record = { ...hotpotRecord(0), question: long };
    const t0 = performance.now();
    const result = readTaskFile(JSON.stringify([record]), 'hotpotqa', 'f');
    expect(result.tasks[0].question.length).toBe(long.length);
    checkTaskFile(`["${long}`, 'hotpotqa');
    checkTaskFile(`{"id": "${long}`, 'musique');
    expect(performance.now() - t0).toBeLessThan(10_000);
  });

  it('wrong types anywhere in a record: every loader skips or repairs, never throws', () => {
    const mutate = (record: Record<string, unknown>) =>
      fc.tuple(fc.constantFrom(...Object.keys(record), 'extra'), fc.anything()).map(([key, value]) => ({
        ...record,
        [key]: value,
      }));
    fc.assert(
      fc.property(
        fc.array(fc.oneof(mutate(hotpotRecord(1)), mutate(musiqueRecord(1)), fc.anything()), {
          maxLength: 5,
        }),
        (records) => {
          for (const load of [loadHotpotQa, loadTwoWiki, loadMusique]) {
            const result = load(records);
            expect(result.tasks.length + result.skipped).toBe(records.length);
            for (const task of result.tasks) expect(validateTask(task)).toEqual([]);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('scanJson agrees with JSON.parse', () => {
  const jsonish = fc
    .array(
      fc.constantFrom(
        '[',
        ']',
        '{',
        '}',
        ',',
        ':',
        '"',
        '"a"',
        '1',
        '-',
        '0',
        '.5',
        'e3',
        'true',
        'nul',
        ' ',
        '\n',
        '\\',
        '\\u12',
        'x',
      ),
      { maxLength: 30 },
    )
    .map((parts) => parts.join(''));
  it('accepts exactly what JSON.parse accepts (random JSON-ish text and random JSON)', () => {
    fc.assert(
      fc.property(
        fc.oneof(jsonish, fc.json({ depthSize: 'medium' }), fc.string({ maxLength: 40 })),
        (text) => {
          let parses = true;
          try {
            JSON.parse(text);
          } catch {
            parses = false;
          }
          const scan = scanJson(text);
          expect(scan.ok).toBe(parses);
          if (!scan.ok) {
            expect(scan.offset).toBeGreaterThanOrEqual(0);
            expect(scan.offset).toBeLessThanOrEqual(text.length);
          }
        },
      ),
      { numRuns: 2000 },
    );
  });
});

describe('parquet export', () => {
  const text = fc.oneof(
    fc.string({ maxLength: 30, unit: 'grapheme' }),
    fc.constantFrom(...TAGS),
    fc.constantFrom('x'.repeat(100_000)),
  );
  const task = fc
    .record({
      question: text,
      answers: fc.array(
        text.filter((a) => a.trim() !== ''),
        { minLength: 1, maxLength: 3 },
      ),
      passages: fc.array(fc.tuple(text, text), { maxLength: 3 }),
      type: fc.option(text, { nil: undefined }),
    })
    .map(
      ({ question, answers, passages, type }): QaTask => ({
        id: `q${question.length}`,
        source: 'fuzz',
        question,
        answers,
        passages: passages.map(([title, body]) => ({ id: passageId(title, body), title, text: body })),
        supportingIds: passages.slice(0, 1).map(([title, body]) => passageId(title, body)),
        type,
      }),
    );
  it('any task text (tags, unicode, 100k-character strings) round-trips through parquet', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(task, { minLength: 1, maxLength: 4 }), fc.boolean(), async (tasks, first) => {
        const options = { split: 'train', groundTruth: first ? ('first' as const) : ('list' as const) };
        const rows = await parquetReadObjects({ file: exportTasksToParquet(tasks, options) });
        expect(rows).toEqual(toVerlRows(tasks, options));
      }),
      { numRuns: 40 },
    );
  });
});

describe('RL config text', () => {
  const valid = JSON.stringify({ seed: 3, rollout: { questionsPerStep: 2 } }, null, 2);
  const check = (text: string) => {
    try {
      const config = parseConfigText(text, 'c.json');
      expect(typeof config.seed).toBe('number');
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      expect(error.message.startsWith('config: ')).toBe(true);
    }
  };
  it('random text, truncations, deep nesting and wrong types give a config or a ConfigError', () => {
    for (let cut = 0; cut <= valid.length; cut++) check(valid.slice(0, cut));
    check(`${'['.repeat(100_000)}`);
    check(`{"rollout": ${'{"a": '.repeat(5000)}1${'}'.repeat(5000)}}`);
    check(`{"__proto__": {"seed": "x"}, "constructor": 1}`);
    const sections = Object.keys(DEFAULT_CONFIG);
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ maxLength: 100 }),
          fc.json(),
          fc
            .dictionary(fc.constantFrom(...sections, 'seed', 'x'), fc.jsonValue({ maxDepth: 3 }))
            .map((o) => JSON.stringify(o)),
        ),
        check,
      ),
      { numRuns: 500 },
    );
  });
});

describe('tool-call text', () => {
  const argText = fc
    .array(
      fc.oneof(
        fc.constantFrom(...TAGS, '<think>', '</think>', '"', '\\', '{', '}'),
        fc.string({ maxLength: 5 }),
      ),
      {
        maxLength: 12,
      },
    )
    .map((p) => p.join(''));
  it('any tag inside the argument strings: the call parses back exactly', () => {
    fc.assert(
      fc.property(argText, argText, (query, other) => {
        const args = { query, other };
        const turn = parseTurn(
          `<think>\nlook\n</think>\n\n<tool_call>\n${JSON.stringify({ name: 'search', arguments: args })}\n</tool_call>`,
        );
        expect(turn.errors).toEqual([]);
        expect(turn.kind).toBe('tool_calls');
        expect(turn.toolCalls[0].arguments).toEqual(args);
      }),
      { numRuns: 500 },
    );
  });

  it('deep nesting and long strings end in a result, quickly', () => {
    const t0 = performance.now();
    const deep = `<tool_call>{"name": "s", "arguments": ${'{"a": '.repeat(5000)}1${'}'.repeat(5000)}}</tool_call>`;
    expect(parseTurn(deep, { maxChars: Number.MAX_SAFE_INTEGER }).kind).toBe('tool_calls');
    const long = `<tool_call>{"name": "s", "arguments": {"q": "${'x'.repeat(1_000_000)}"}}</tool_call>`;
    expect(parseTurn(long, { maxChars: Number.MAX_SAFE_INTEGER }).kind).toBe('tool_calls');
    const unclosed = `<tool_call>{"q": "${'x'.repeat(1_000_000)}`;
    expect(parseTurn(unclosed, { maxChars: Number.MAX_SAFE_INTEGER }).kind).toBe('invalid');
    expect(performance.now() - t0).toBeLessThan(5000);
  });
});
