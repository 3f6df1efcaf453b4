import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { renderToolCall } from '../../src/env/chat-format.ts';
import { extractAnswer, parseTurn } from '../../src/env/parse.ts';
import { stripNewlines, stripStopTokens } from '../../src/env/text.ts';

const call = (name: string, args: unknown) => renderToolCall(name, args);

describe('parseTurn: well-formed turns', () => {
  it('reads a Qwen3 tool-call turn with reasoning', () => {
    const text = `<think>\nI should search.\n</think>\n\n${call('search', { query: 'Alû demon' })}`;
    const turn = parseTurn(text);
    expect(turn.kind).toBe('tool_calls');
    expect(turn.think).toBe('I should search.');
    expect(turn.toolCalls).toEqual([
      {
        name: 'search',
        arguments: { query: 'Alû demon' },
        raw: '{"name": "search", "arguments": {"query": "Alû demon"}}',
      },
    ]);
    expect(turn.errors).toEqual([]);
  });

  it('reads an answer turn, trimming the answer', () => {
    const turn = parseTurn('<think>done</think><answer>  Paris </answer>');
    expect(turn).toMatchObject({ kind: 'answer', answer: 'Paris', errors: [] });
  });

  it('reads several calls, ignores prose around them and a trailing stop token', () => {
    const turn = parseTurn(`Let me look.\n${call('a', {})}\n${call('b', { n: 1 })}<|im_end|>`);
    expect(turn.kind).toBe('tool_calls');
    expect(turn.toolCalls.map((c) => c.name)).toEqual(['a', 'b']);
  });

  it('accepts arguments given as a JSON string (OpenAI style)', () => {
    const turn = parseTurn(
      '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>',
    );
    expect(turn.toolCalls[0].arguments).toEqual({ query: 'x' });
  });

  it('ignores tags inside the reasoning, like the chat template does', () => {
    const turn = parseTurn('<think>maybe <tool_call> or <answer>?</think>\n<answer>yes</answer>');
    expect(turn).toMatchObject({ kind: 'answer', answer: 'yes' });
  });

  it('treats text before a bare </think> as reasoning (the <think> was in the prompt)', () => {
    expect(parseTurn('hmm\n</think>\n\n<answer>x</answer>')).toMatchObject({ kind: 'answer', think: 'hmm' });
  });

  it('plain text is a "none" turn, not an error', () => {
    expect(parseTurn('I think it is Paris.')).toMatchObject({ kind: 'none', errors: [] });
  });

  it('extractAnswer', () => {
    expect(extractAnswer('<answer>42</answer>')).toBe('42');
    expect(extractAnswer('no tags')).toBeNull();
  });
});

describe('text helpers', () => {
  it('stripStopTokens removes trailing stop tokens and the white space around them, nothing else', () => {
    expect(stripStopTokens('<answer>x</answer> <|im_end|>\n')).toBe('<answer>x</answer>');
    expect(stripStopTokens('a<|im_end|><|endoftext|>')).toBe('a');
    expect(stripStopTokens('a  ')).toBe('a  ');
    expect(stripStopTokens('<|im_end|> a')).toBe('<|im_end|> a');
    expect(stripNewlines('\n\na\nb\n')).toBe('a\nb');
  });

  it('stays linear on long runs of spaces and newlines (no regex backtracking)', () => {
    const inputs = [`a${' '.repeat(19_990)}b`, '\n'.repeat(19_999), `<think>${'\n'.repeat(19_000)}x</think>`];
    const t0 = performance.now();
    for (const text of inputs) parseTurn(text);
    expect(performance.now() - t0).toBeLessThan(100);
  });
});

describe('parseTurn: malformed turns become readable errors', () => {
  const cases: [string, unknown, RegExp][] = [
    ['empty', '', /empty/],
    ['white space', '  \n ', /empty/],
    ['not text', 42, /not text/],
    ['huge', 'x'.repeat(20_001), /too long/],
    ['invalid JSON', '<tool_call>{"name": "search", "arguments": {query: 1}}</tool_call>', /invalid JSON/],
    ['JSON array', '<tool_call>[1, 2]</tool_call>', /JSON object/],
    ['no name', '<tool_call>{"arguments": {}}</tool_call>', /"name"/],
    ['no arguments', '<tool_call>{"name": "search"}</tool_call>', /"arguments" object/],
    [
      'arguments not an object',
      '<tool_call>{"name": "s", "arguments": [1]}</tool_call>',
      /"arguments" object/,
    ],
    ['empty call', '<tool_call>  </tool_call>', /empty <tool_call>/],
    ['unclosed call', '<tool_call>{"name": "s", "arguments": {}}', /unclosed <tool_call>/],
    ['stray close', '</tool_call>', /without an opening/],
    ['nested', '<tool_call><tool_call>{}</tool_call></tool_call>', /nested/],
    ['mismatched', '<tool_call>{}</answer>', /mismatched/],
    ['answer inside call', '<tool_call><answer>x</answer></tool_call>', /nested/],
    ['unclosed answer', '<answer>Paris', /unclosed <answer>/],
    ['two answers', '<answer>a</answer><answer>b</answer>', /exactly one/],
    ['empty answer', '<answer> </answer>', /empty/],
    ['call and answer', `${call('s', {})}<answer>x</answer>`, /not both/],
    ['unclosed think', '<think>still thinking <answer>x</answer>', /unclosed <think>/],
    ['two thinks', '<think>a</think><think>b</think><answer>x</answer>', /at most one/],
    ['control tokens', '<answer>x</answer><|im_start|>user', /control tokens/],
  ];
  it.each(cases)('%s', (_label, input, message) => {
    const turn = parseTurn(input);
    expect(turn.kind).toBe('invalid');
    expect(turn.errors.join(' | ')).toMatch(message);
  });

  it('keeps the calls that did parse when another block is broken (the env refuses the whole turn)', () => {
    const turn = parseTurn(`${call('a', {})}<tool_call>{oops</tool_call>`);
    expect(turn.kind).toBe('invalid');
    expect(turn.toolCalls).toHaveLength(1);
  });
});

// Pieces that, glued at random, produce near-misses of the format.
const FRAGMENTS = [
  '<tool_call>',
  '</tool_call>',
  '<answer>',
  '</answer>',
  '<think>',
  '</think>',
  '<tool_call',
  'answer>',
  '{',
  '}',
  '[',
  ']',
  '"',
  "'",
  '\\',
  ':',
  ',',
  '"name"',
  '"arguments"',
  '"search"',
  '{"query": "x"}',
  '{"name": "search", "arguments": {"query": "x"}}',
  'null',
  '\n',
  ' ',
  'Paris',
  '<|im_end|>',
  '<|im_start|>',
  '\u0000',
  '😀',
];

const nearMiss = fc.array(fc.constantFrom(...FRAGMENTS), { maxLength: 40 }).map((parts) => parts.join(''));

describe('parseTurn fuzz', () => {
  it('never throws and always classifies consistently on arbitrary strings', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string({ maxLength: 300 }), fc.string({ unit: 'binary', maxLength: 300 }), nearMiss),
        (text) => {
          const turn = parseTurn(text);
          expect(['tool_calls', 'answer', 'none', 'invalid']).toContain(turn.kind);
          expect(turn.kind === 'invalid').toBe(turn.errors.length > 0);
          if (turn.kind === 'tool_calls') expect(turn.toolCalls.length).toBeGreaterThan(0);
          if (turn.kind === 'answer') expect(turn.answer).not.toBeNull();
          for (const c of turn.toolCalls) {
            expect(typeof c.name).toBe('string');
            expect(
              c.arguments !== null && typeof c.arguments === 'object' && !Array.isArray(c.arguments),
            ).toBe(true);
          }
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('reads back any call rendered the way the chat template renders it', () => {
    const name = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_-]{0,20}$/);
    const args = fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 });
    fc.assert(
      fc.property(fc.string({ maxLength: 40 }), name, args, (reasoning, toolName, toolArgs) => {
        const safeReasoning = reasoning.replace(/<\/?think>/g, '');
        const turn = parseTurn(`<think>\n${safeReasoning}\n</think>\n\n${call(toolName, toolArgs)}`);
        expect(turn.kind).toBe('tool_calls');
        expect(turn.toolCalls).toHaveLength(1);
        expect(turn.toolCalls[0].name).toBe(toolName);
        // JSON.parse(JSON.stringify(x)) is how the args survive the round trip (-0 becomes 0).
        expect(turn.toolCalls[0].arguments).toEqual(JSON.parse(JSON.stringify(toolArgs)));
      }),
      { numRuns: 500 },
    );
  });
});
