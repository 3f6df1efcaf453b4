import { describe, expect, it } from 'vitest';
import { renderQwen3Chat } from '../../src/env/chat-format.ts';
import { episodeToSftExample, evaluate, summarise } from '../../src/env/evaluate.ts';
import { parseTurn } from '../../src/env/parse.ts';
import { createBaseToolCallPolicy } from '../../src/env/policies/base-tool-call.ts';
import { createNaiveRagPolicy } from '../../src/env/policies/naive-rag.ts';
import { createOraclePolicy, UNKNOWN_ANSWER } from '../../src/env/policies/oracle.ts';
import { ContextFullError } from '../../src/env/policies/policy.ts';
import type { Passage } from '../../src/env/retrieval/bm25.ts';
import { generateSyntheticDataset } from '../../src/env/tasks/synthetic.ts';
import { ToolEnv } from '../../src/env/tool-env.ts';
import { perQuestionSearchTools, pooledSearchTools } from '../../src/env/tools/search.ts';
import type { ChatMessage, ToolSpec } from '../../src/env/types.ts';

// The lab's default task with its default knobs; the test split is what the headline figures use.
const DATA = generateSyntheticDataset({ seed: 1, trainSize: 50, testSize: 100 });
const TEST = DATA.test;

describe('oracle policy', () => {
  it('reaches ≥ 95% EM on the synthetic test split by searching the pooled corpus', async () => {
    const report = await evaluate(createOraclePolicy(), TEST.tasks, {
      tools: pooledSearchTools(TEST.corpus),
    });
    console.log(
      `oracle on synthetic test (${report.n} questions, ${TEST.corpus.length} passages): EM ${report.em.toFixed(3)}, ` +
        `F1 ${report.f1.toFixed(3)}, turns ${report.meanTurns.toFixed(2)}, tool calls ${report.meanToolCalls.toFixed(2)}`,
    );
    expect(report.em).toBeGreaterThanOrEqual(0.95);
    expect(report.formatErrorRate).toBe(0);
    expect(report.turnFormatErrorRate).toBe(0);
    // It has to search: at least two calls per question, three for 3-hop.
    expect(report.meanToolCalls).toBeGreaterThanOrEqual(2);
    for (const e of report.episodes) expect(e.toolCalls).toBeGreaterThanOrEqual(2);
    for (const e of report.episodes.filter(
      (x) => TEST.tasks.find((t) => t.id === x.taskId)?.meta?.hops === 3,
    )) {
      expect(e.toolCalls).toBeGreaterThanOrEqual(3);
    }
    expect(report.meanOutcome).toBeGreaterThanOrEqual(0.95);
  });

  it('also solves the distractor setting (each question with its own 10-ish passages)', async () => {
    const report = await evaluate(createOraclePolicy(), TEST.tasks.slice(0, 40), {
      tools: perQuestionSearchTools(),
    });
    expect(report.em).toBeGreaterThanOrEqual(0.95);
  });

  it('writes warm-start traces in the exact chat format', async () => {
    const report = await evaluate(createOraclePolicy(), TEST.tasks.slice(0, 10), {
      tools: pooledSearchTools(TEST.corpus),
    });
    for (const episode of report.episodes) {
      const turns = episode.messages.filter((m) => m.role === 'assistant').map((m) => m.content);
      for (const [i, text] of turns.entries()) {
        expect(text).toMatch(/^<think>\n[^\n][\s\S]*[^\n]\n<\/think>\n\n/);
        const parsed = parseTurn(text);
        expect(parsed.kind).toBe(i === turns.length - 1 ? 'answer' : 'tool_calls');
        if (parsed.kind === 'tool_calls') {
          expect(text).toMatch(
            /<tool_call>\n\{"name": "search", "arguments": \{"query": "[^"]+"\}\}\n<\/tool_call>$/,
          );
        }
      }
      const sft = episodeToSftExample(episode);
      expect(sft.text).toBe(renderQwen3Chat(episode.messages, { tools: episode.tools }));
      expect(sft.text.startsWith('<|im_start|>system\n')).toBe(true);
      expect(sft.text).toContain('<tool_response>');
      expect(sft.text.endsWith('</answer><|im_end|>\n')).toBe(true);
    }
  });

  it('answers from what the search returns, not from the hidden world', async () => {
    const task = TEST.tasks.find((t) => t.meta?.template === 'creator_birthplace')!;
    const truth = task.answers[0];
    // Rewrite the world: in the corpus the search sees, the creator was born somewhere else.
    const forged = TEST.corpus.map(
      (p): Passage => ({ ...p, text: p.text.split(truth).join('Nowhereville') }),
    );
    const report = await evaluate(createOraclePolicy(), [task], { tools: pooledSearchTools(forged) });
    expect(report.episodes[0].prediction).toBe('Nowhereville');
    expect(report.em).toBe(0);
  });

  it('gives up cleanly when the corpus lacks the facts, or the question is not synthetic', async () => {
    const unrelated: Passage[] = [{ id: 'x', title: 'Paris', text: 'Paris is the capital of France.' }];
    const report = await evaluate(createOraclePolicy(), TEST.tasks.slice(0, 3), {
      tools: pooledSearchTools(unrelated),
    });
    expect(report.episodes.map((e) => e.prediction)).toEqual([
      UNKNOWN_ANSWER,
      UNKNOWN_ANSWER,
      UNKNOWN_ANSWER,
    ]);
    expect(report.formatErrorRate).toBe(0);
    const foreign = { ...TEST.tasks[0], id: 'f', question: 'Who painted the Mona Lisa?' };
    const r2 = await evaluate(createOraclePolicy(), [foreign], { tools: pooledSearchTools(TEST.corpus) });
    expect(r2.episodes[0]).toMatchObject({ prediction: UNKNOWN_ANSWER, turns: 1, toolCalls: 0 });
  });
});

describe('naive RAG policy', () => {
  it('retrieves once with the question; its EM on the synthetic test split is far below the oracle', async () => {
    const report = await evaluate(createNaiveRagPolicy(), TEST.tasks, {
      tools: pooledSearchTools(TEST.corpus),
    });
    const byType = Object.entries(report.byType)
      .map(([type, m]) => `${type} ${m.em.toFixed(2)}`)
      .join(', ');
    console.log(
      `naive RAG on synthetic test: EM ${report.em.toFixed(3)}, F1 ${report.f1.toFixed(3)} (${byType})`,
    );
    for (const e of report.episodes) {
      expect(e).toMatchObject({ turns: 2, toolCalls: 1 });
      const call = parseTurn(e.messages[2].content).toolCalls[0];
      expect(call).toMatchObject({ name: 'search', arguments: { query: e.question } });
    }
    expect(report.em).toBeGreaterThan(0.1); // comparisons name both entities, so one search can suffice
    expect(report.em).toBeLessThan(0.7);
    expect(report.byType.compositional.em).toBeLessThan(0.3);
  });

  it('accepts a model-backed reader', async () => {
    const seen: string[] = [];
    const policy = createNaiveRagPolicy(async (question, retrieved) => {
      seen.push(retrieved);
      return question.length > 0 ? 'forty-two' : '';
    }, 'rag-fake-model');
    const report = await evaluate(policy, TEST.tasks.slice(0, 2), { tools: pooledSearchTools(TEST.corpus) });
    expect(report.policy).toBe('rag-fake-model');
    expect(report.episodes.map((e) => e.prediction)).toEqual(['forty-two', 'forty-two']);
    expect(seen[0]).toMatch(/^1\. /);
  });
});

describe('base tool-call policy (model adapter)', () => {
  it('passes the chat and the tool specs to the model and plays its turns', async () => {
    const calls: { messages: readonly ChatMessage[]; tools: readonly ToolSpec[] }[] = [];
    const task = TEST.tasks[0];
    const script = [
      '<think>\nsearch\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>',
      `<think>\nok\n</think>\n\n<answer>${task.answers[0]}</answer>`,
    ];
    const policy = createBaseToolCallPolicy(async (messages, tools) => {
      calls.push({ messages, tools });
      return script[calls.length - 1];
    });
    const report = await evaluate(policy, [task], { tools: pooledSearchTools(TEST.corpus) });
    expect(report).toMatchObject({ policy: 'base-tool-call', em: 1, meanTurns: 2, meanToolCalls: 1 });
    expect(calls[0].tools[0].function.name).toBe('search');
    expect(calls[0].messages.map((m) => m.role)).toEqual(['system', 'user']);
    expect(calls[1].messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool']);
  });

  it('an untrained model that rambles: format errors are counted, turns capped', async () => {
    const policy = createBaseToolCallPolicy(async () => 'Sure! <tool_call>{"name": search}</tool_call>');
    const report = await evaluate(policy, TEST.tasks.slice(0, 3), {
      tools: pooledSearchTools(TEST.corpus),
      env: { maxTurns: 4 },
    });
    expect(report).toMatchObject({
      em: 0,
      meanTurns: 4,
      meanToolCalls: 0,
      formatErrorRate: 1,
      turnFormatErrorRate: 1,
    });
    expect(report.meanOutcome).toBe(-1);
    expect(report.meanProcessReward).toBeCloseTo(-0.4, 12);
    expect(report.episodes[0].doneReason).toBe('max_turns');
  });
});

describe('summarise', () => {
  it('averages per episode and per type; empty input gives zeros', async () => {
    const report = await evaluate(createOraclePolicy(), TEST.tasks.slice(0, 12), {
      tools: pooledSearchTools(TEST.corpus),
    });
    const [a, b] = report.episodes;
    const wrong = { ...b, em: 0, f1: 0.5, subEm: 0, turns: 5, toolCalls: 4, formatErrorTurns: 2 };
    wrong.outcome = { ...b.outcome, formatValid: false, outcome: -0.25 };
    const s = summarise('mix', [a, wrong]);
    expect(s).toMatchObject({ policy: 'mix', n: 2, em: 0.5, f1: 0.75, subEm: 0.5 });
    expect(s.meanTurns).toBe((a.turns + 5) / 2);
    expect(s.meanToolCalls).toBe((a.toolCalls + 4) / 2);
    expect(s.formatErrorRate).toBe(0.5);
    expect(s.turnFormatErrorRate).toBe(2 / (a.turns + 5));
    expect(s.meanOutcome).toBe((a.outcome.outcome - 0.25) / 2);
    const types = new Set([a.type, b.type]);
    expect(Object.keys(s.byType).sort()).toEqual([...types].sort());
    expect(summarise('none', [])).toMatchObject({
      n: 0,
      em: 0,
      meanTurns: 0,
      formatErrorRate: 0,
      turnFormatErrorRate: 0,
    });
  });
});

describe('a policy whose context window is full', () => {
  it('ends that episode as context_budget, scored on the turns so far; the evaluation goes on', async () => {
    const tasks = TEST.tasks.slice(0, 2);
    let calls = 0;
    const policy = {
      name: 'fills-up',
      async act() {
        calls++;
        // First episode: one search, then the window is full. Second episode: full at once.
        if (calls === 1) {
          return '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>';
        }
        throw new ContextFullError(2051, 2048);
      },
    };
    const report = await evaluate(policy, tasks, { tools: pooledSearchTools(TEST.corpus) });
    expect(report.episodes.map((e) => [e.doneReason, e.turns, e.toolCalls, e.em])).toEqual([
      ['context_budget', 1, 1, 0],
      ['context_budget', 0, 0, 0],
    ]);
    expect(report.episodes[0].messages.at(-1)?.role).toBe('tool');
  });

  it('any other exception from the policy still aborts the evaluation', async () => {
    const policy = {
      name: 'broken',
      async act(): Promise<string> {
        throw new Error('device lost');
      },
    };
    await expect(
      evaluate(policy, TEST.tasks.slice(0, 1), { tools: pooledSearchTools(TEST.corpus) }),
    ).rejects.toThrow('device lost');
  });
});

describe('ToolEnv.stop', () => {
  it('ends the episode once, with the reason and an outcome; a second stop is refused', () => {
    const env = new ToolEnv(TEST.tasks[0], pooledSearchTools(TEST.corpus)(TEST.tasks[0]));
    env.reset();
    const outcome = env.stop('context_budget');
    expect(outcome.em).toBe(0);
    expect(env.snapshot()).toMatchObject({ done: true, doneReason: 'context_budget' });
    expect(() => env.stop('context_budget')).toThrow(/already done/);
  });
});
