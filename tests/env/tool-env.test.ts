import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { renderToolCall } from '../../src/env/chat-format.ts';
import type { Passage } from '../../src/env/retrieval/bm25.ts';
import { defineTool, type Tool } from '../../src/env/tool.ts';
import { type EnvTask, ToolEnv } from '../../src/env/tool-env.ts';
import { createSearchTool } from '../../src/env/tools/search.ts';

const CORPUS: Passage[] = [
  { id: 'p1', title: 'Talrin Moss', text: 'Talrin Moss is a novelist born in Veldhaven in 1921.' },
  { id: 'p2', title: 'Veldhaven', text: 'Veldhaven is a city in Orsland. It was founded in 1204.' },
  { id: 'p3', title: 'Orsland', text: 'Orsland is a country whose capital is Veldhaven.' },
  { id: 'p4', title: 'The Glass Tide', text: 'The Glass Tide is a 1950 novel written by Talrin Moss.' },
  { id: 'p5', title: 'Brenmark', text: 'Brenmark is a city in Orsland known for its markets.' },
];
const TASK: EnvTask = {
  id: 't1',
  question: 'Where was the author of the novel The Glass Tide born?',
  answers: ['Veldhaven'],
  supportingIds: ['p4', 'p1'],
};

const search = () => createSearchTool(CORPUS, { topK: 2 });
const echo: Tool = defineTool<{ text: string; times?: number }>({
  name: 'echo',
  description: 'Repeats text.',
  parameters: {
    type: 'object',
    properties: { text: { type: 'string' }, times: { type: 'integer', minimum: 1, maximum: 3 } },
    required: ['text'],
    additionalProperties: false,
  },
  execute: ({ text, times }) => ({ content: text.repeat(times ?? 1), success: true }),
}) as unknown as Tool;
const broken: Tool = {
  name: 'broken',
  description: 'Always throws.',
  parameters: { type: 'object', properties: {} },
  execute: () => {
    throw new Error('disk on fire');
  },
};

const callText = (name: string, args: unknown, think = 'ok') =>
  `<think>\n${think}\n</think>\n\n${renderToolCall(name, args)}`;

function makeEnv(tools: Tool[] = [search()], options: ConstructorParameters<typeof ToolEnv>[2] = {}) {
  const env = new ToolEnv(TASK, tools, options);
  env.reset();
  return env;
}

describe('ToolEnv basics', () => {
  it('starts from a system prompt and the question', () => {
    const env = new ToolEnv(TASK, [search()]);
    const state = env.reset();
    expect(state.messages.map((m) => m.role)).toEqual(['system', 'user']);
    expect(state.messages[1].content).toContain(TASK.question);
    expect(state).toMatchObject({
      taskId: 't1',
      question: TASK.question,
      turn: 0,
      toolCalls: 0,
      done: false,
    });
    expect(env.toolSpecs[0]).toMatchObject({ type: 'function', function: { name: 'search' } });
  });

  it('runs a valid search, renders the observation like the chat template, and rewards a gold hit', async () => {
    const env = makeEnv();
    const step = await env.step(callText('search', { query: 'The Glass Tide novel' }));
    expect(step.done).toBe(false);
    expect(step.reward).toEqual({ retrieval: 0.1, format: 0, call: 0, total: 0.1 });
    const content = step.observation.messages[0].content;
    expect(step.observation.messages).toEqual([{ role: 'tool', content }]);
    expect(content).toBe('1. The Glass Tide: The Glass Tide is a 1950 novel written by Talrin Moss.');
    expect(step.observation.text).toBe(
      `<|im_start|>user\n<tool_response>\n${content}\n</tool_response><|im_end|>\n`,
    );
    expect(step.observation.continuation).toBe(`\n${step.observation.text}<|im_start|>assistant\n`);
    expect(step.info.calls[0]).toMatchObject({
      name: 'search',
      status: 'executed',
      success: true,
      newGoldIds: ['p4'],
    });
    const state = env.snapshot();
    expect(state.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool']);
    expect(state).toMatchObject({ turn: 1, toolCalls: 1 });
  });

  it('penalises a search that brings nothing new, and rewards each gold passage only once', async () => {
    const env = makeEnv();
    await env.step(callText('search', { query: 'The Glass Tide novel' }));
    const again = await env.step(callText('search', { query: 'The Glass Tide novel' }));
    expect(again.reward).toEqual({ retrieval: 0, format: 0, call: -0.05, total: -0.05 });
    expect(again.info.calls[0].ineffective).toBe(true);
    const nothing = await env.step(callText('search', { query: 'zzzz qqqq' }));
    expect(nothing.observation.messages[0].content).toBe('No results found.');
    expect(nothing.reward.call).toBe(-0.05);
  });

  it('ends on an answer with the outcome reward, and refuses further steps', async () => {
    const env = makeEnv();
    await env.step(callText('search', { query: 'Glass Tide' }));
    const step = await env.step('<think>\nfound\n</think>\n\n<answer>Veldhaven</answer><|im_end|>');
    expect(step).toMatchObject({ done: true, doneReason: 'answer' });
    expect(step.observation).toEqual({ messages: [], text: '', continuation: '', continuationPieces: [] });
    expect(step.outcome).toMatchObject({ formatValid: true, prediction: 'Veldhaven', em: 1, outcome: 1 });
    expect(env.snapshot().messages.at(-1)?.content.endsWith('</answer>')).toBe(true); // stop token stripped
    await expect(env.step('<answer>x</answer>')).rejects.toThrow(/episode is over/);
  });

  it('ends when a turn has no tool call; the missing answer fails the format gate', async () => {
    const env = makeEnv();
    const step = await env.step('It is probably Veldhaven.');
    expect(step).toMatchObject({ done: true, doneReason: 'no_tool_call' });
    expect(step.outcome).toMatchObject({ formatValid: false, prediction: null, outcome: -0.5 });
  });

  it('reset() starts a fresh episode', async () => {
    const env = makeEnv();
    await env.step('<answer>x</answer>');
    const state = env.reset();
    expect(state).toMatchObject({ turn: 0, toolCalls: 0, done: false });
    const step = await env.step(callText('search', { query: 'Glass Tide' }));
    expect(step.reward.retrieval).toBe(0.1); // gold seen in the previous episode counts again
  });
});

describe('ToolEnv: malformed actions give an error observation and a penalty, never an exception', () => {
  const cases: [string, string, RegExp, Partial<Record<'format' | 'call', number>>][] = [
    [
      'invalid JSON',
      '<tool_call>{"name": "search", "arguments": {"query": }}</tool_call>',
      /^Error: invalid format: invalid JSON/,
      { format: -0.1 },
    ],
    [
      'unknown tool',
      callText('browse', { url: 'x' }),
      /^Error: unknown tool 'browse'\. Available tools: search\.$/,
      { call: -0.05 },
    ],
    [
      'missing argument',
      callText('search', {}),
      /^Error: invalid tool arguments for 'search': missing required property 'query'/,
      { call: -0.05 },
    ],
    [
      'wrong-typed argument',
      callText('search', { query: 3 }),
      /^Error: invalid tool arguments for 'search': query: expected string, got integer/,
      { call: -0.05 },
    ],
    ['extra argument', callText('search', { query: 'x', k: 3 }), /unexpected property 'k'/, { call: -0.05 }],
    [
      'unclosed tag',
      '<tool_call>{"name": "search", "arguments": {"query": "x"}}',
      /unclosed <tool_call>/,
      { format: -0.1 },
    ],
    ['nested tags', '<tool_call><tool_call></tool_call></tool_call>', /nested/, { format: -0.1 }],
    ['empty text', '', /the response is empty/, { format: -0.1 }],
    ['huge text', 'a'.repeat(30_000), /too long \(30000 characters; the limit is 20000\)/, { format: -0.1 }],
    [
      'answer and call',
      `${callText('search', { query: 'x' })}<answer>x</answer>`,
      /not both/,
      { format: -0.1 },
    ],
  ];
  it.each(cases)('%s', async (_label, action, message, penalty) => {
    const env = makeEnv();
    const step = await env.step(action);
    expect(step.done).toBe(false);
    expect(step.observation.messages).toHaveLength(1);
    expect(step.observation.messages[0].content).toMatch(message);
    expect(step.reward.format).toBe(penalty.format ?? 0);
    expect(step.reward.call).toBe(penalty.call ?? 0);
    expect(step.reward.total).toBeCloseTo((penalty.format ?? 0) + (penalty.call ?? 0), 12);
    expect(env.snapshot().toolCalls).toBe(0);
  });

  it('a tool that throws becomes an error observation', async () => {
    const env = makeEnv([search(), broken]);
    const step = await env.step(callText('broken', {}));
    expect(step.observation.messages[0].content).toBe("Error: tool 'broken' failed: disk on fire");
    expect(step.info.calls[0].status).toBe('tool_error');
    expect(step.reward.call).toBe(-0.05);
  });

  it('cuts a long tool response to maxObservationChars', async () => {
    const env = makeEnv([echo], { maxObservationChars: 10 });
    const step = await env.step(callText('echo', { text: 'abcdefghijkl' }));
    expect(step.observation.messages[0].content).toBe('abcdefghi…');
  });
});

describe('ToolEnv limits', () => {
  it('runs at most maxCallsPerTurn calls (default 1) and refuses the rest', async () => {
    const env = makeEnv([search(), echo]);
    const two = `${callText('echo', { text: 'a' })}\n${renderToolCall('echo', { text: 'b' })}\n${renderToolCall('echo', { text: 'c' })}`;
    const step = await env.step(two);
    expect(step.observation.messages.map((m) => m.content)).toEqual([
      'a',
      'Error: at most 1 tool call(s) per turn; 2 extra call(s) ignored.',
    ]);
    expect(step.info.calls.map((c) => c.status)).toEqual(['executed', 'refused', 'refused']);
    expect(step.reward.format).toBe(-0.1);
    expect(step.info.wellFormed).toBe(false);
    // Two responses in one user turn, each in its own block.
    expect(step.observation.text).toBe(
      '<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\n' +
        'Error: at most 1 tool call(s) per turn; 2 extra call(s) ignored.\n</tool_response><|im_end|>\n',
    );
  });

  it('maxCallsPerTurn is configurable', async () => {
    const env = makeEnv([echo], { maxCallsPerTurn: 2 });
    const step = await env.step(
      `${renderToolCall('echo', { text: 'a' })}${renderToolCall('echo', { text: 'b', times: 2 })}`,
    );
    expect(step.observation.messages.map((m) => m.content)).toEqual(['a', 'bb']);
    expect(step.reward.format).toBe(0);
    expect(env.snapshot().toolCalls).toBe(2);
  });

  it('stops at maxTurns', async () => {
    const env = makeEnv([echo], { maxTurns: 2 });
    expect((await env.step(callText('echo', { text: 'a' }))).done).toBe(false);
    const last = await env.step(callText('echo', { text: 'b' }));
    expect(last).toMatchObject({ done: true, doneReason: 'max_turns' });
    expect(last.observation.continuation).toBe('');
    expect(last.outcome?.formatValid).toBe(false);
  });

  it('ends when a call is attempted with the tool-call budget used up', async () => {
    const env = makeEnv([echo], { maxToolCalls: 1 });
    expect((await env.step(callText('echo', { text: 'a' }))).done).toBe(false);
    const over = await env.step(callText('echo', { text: 'b' }));
    expect(over).toMatchObject({ done: true, doneReason: 'tool_budget' });
    expect(over.info.calls[0].status).toBe('budget');
    expect(over.reward.call).toBe(-0.05);
    expect(env.snapshot().toolCalls).toBe(1);
  });

  it('ends when the context budget is exceeded (characters, or tokens reported by the engine)', async () => {
    const env = makeEnv([echo], { maxContextChars: 600 });
    const step = await env.step(callText('echo', { text: 'x', times: 1 }, 'y'.repeat(400)));
    expect(step).toMatchObject({ done: true, doneReason: 'context_budget' });
    const env2 = makeEnv([echo], { maxContextTokens: 100 });
    expect((await env2.step(callText('echo', { text: 'x' }), { contextTokens: 99 })).done).toBe(false);
    expect(await env2.step(callText('echo', { text: 'x' }), { contextTokens: 101 })).toMatchObject({
      done: true,
      doneReason: 'context_budget',
    });
  });

  it('rejects unusable configurations with a clear error', () => {
    expect(() => new ToolEnv(TASK, [])).toThrow(/at least one tool/);
    expect(() => new ToolEnv(TASK, [echo], { maxTurns: 0 })).toThrow(/maxTurns/);
    expect(() => new ToolEnv(TASK, [echo, echo])).toThrow(/already registered/);
  });

  it('process reward weights are configurable', async () => {
    const env = makeEnv([search()], { process: { goldRetrieval: 1, invalidFormat: -2 } });
    expect((await env.step(callText('search', { query: 'Glass Tide' }))).reward.retrieval).toBe(1);
    expect((await env.step('<tool_call>')).reward.format).toBe(-2);
  });
});

const FRAGMENTS = [
  '<tool_call>',
  '</tool_call>',
  '<answer>',
  '</answer>',
  '<think>',
  '</think>',
  '{"name": "echo", "arguments": {"text": "a"}}',
  '{"name": "search", "arguments": {"query": "Glass Tide"}}',
  '{"name": "nope", "arguments": {}}',
  '{"name": "echo", "arguments": {"text": 1}}',
  '{',
  '}',
  '"',
  '\n',
  'x',
];

describe('ToolEnv fuzz', () => {
  it('never throws, always observes, and never runs more than maxCallsPerTurn calls per turn', async () => {
    const action = fc.oneof(
      fc.string({ maxLength: 200 }),
      fc.array(fc.constantFrom(...FRAGMENTS), { maxLength: 30 }).map((p) => p.join('')),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.array(action, { minLength: 1, maxLength: 6 }),
        fc.integer({ min: 1, max: 3 }),
        async (actions, maxCalls) => {
          const env = makeEnv([search(), echo], { maxCallsPerTurn: maxCalls, maxTurns: 4 });
          for (const a of actions) {
            const before = env.snapshot().toolCalls;
            const step = await env.step(a);
            const executed = step.info.calls.filter((c) => c.status === 'executed').length;
            expect(executed).toBeLessThanOrEqual(maxCalls);
            expect(env.snapshot().toolCalls - before).toBeLessThanOrEqual(maxCalls);
            expect(Number.isFinite(step.reward.total)).toBe(true);
            if (!step.done) {
              // A turn that does not end the episode always gets something to read.
              expect(step.observation.messages.length).toBeGreaterThan(0);
              expect(step.observation.continuation.startsWith('\n<|im_start|>user\n<tool_response>\n')).toBe(
                true,
              );
            } else {
              expect(step.outcome).toBeDefined();
              break;
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
