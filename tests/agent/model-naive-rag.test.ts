// Naive RAG with the model as the reader: the prompt (one user message: instruction, passages, question;
// no tools), the answer taken from the model's turn, and the whole loop through the ToolEnv, first with a
// scripted stand-in for the model, then with the real GPU model and tokenizer (a random tiny Qwen3).
import { describe, expect, it } from 'vitest';
import { readQwenTokenizerFiles } from '../../src/agent/model/node-fs.ts';
import { QwenGpuModel } from '../../src/agent/model/qwen-gpu.ts';
import { tinyCheckpoint, tinySpec } from '../../src/agent/model/tiny-checkpoints.ts';
import {
  answerFromTurn,
  type ModelReaderTurn,
  modelPassageReader,
  NAIVE_RAG_INSTRUCTION,
  naiveRagMessages,
} from '../../src/agent/policy/model-naive-rag.ts';
import { modelGenerateTurn } from '../../src/agent/policy/model-turn.ts';
import { QwenTokenizer } from '../../src/agent/tokenizer/qwen-tokenizer.ts';
import { evaluate } from '../../src/env/evaluate.ts';
import { parseTurn } from '../../src/env/parse.ts';
import { createNaiveRagPolicy } from '../../src/env/policies/naive-rag.ts';
import { UNKNOWN_ANSWER } from '../../src/env/policies/oracle.ts';
import { generateSyntheticDataset } from '../../src/env/tasks/synthetic.ts';
import { pooledSearchTools } from '../../src/env/tools/search.ts';
import type { ChatMessage, ToolSpec } from '../../src/env/types.ts';
import { getTestGpu } from '../helpers/gpu.ts';

const DATA = generateSyntheticDataset({ seed: 5, trainSize: 0, testSize: 4 });

describe('naiveRagMessages', () => {
  it('is one user message: the instruction, the passages, then the question', () => {
    const retrieved = '1. Alpha: Alpha is a town.\n2. Beta: Beta is a river.';
    const messages = naiveRagMessages('Where is Alpha?', retrieved);
    expect(messages).toEqual([
      {
        role: 'user',
        content: `${NAIVE_RAG_INSTRUCTION}\n\nPassages:\n${retrieved}\n\nQuestion: Where is Alpha?`,
      },
    ]);
    const text = messages[0].content;
    expect(text.indexOf('2. Beta')).toBeLessThan(text.indexOf('Question: Where is Alpha?'));
    expect(text.endsWith('Question: Where is Alpha?')).toBe(true);
  });

  it('says so when nothing was retrieved', () => {
    expect(naiveRagMessages('Q?', '  \n')[0].content).toContain('Passages:\n(no passages were retrieved)\n');
  });
});

describe('answerFromTurn', () => {
  it.each([
    ['<think>\nThe passage says Paris.\n</think>\n\n<answer> Paris </answer>', 'Paris'],
    ['<answer>New\nYork</answer><|im_end|>', 'New York'],
    ['Paris', 'Paris'],
    ['  Paris.\n\n', 'Paris.'],
    ['<think>\nhmm\n</think>\n\nIt is Paris.<|im_end|>', 'It is Paris.'],
    // Truncated or malformed tags: the text without any tag, so the env's <answer> wrapper stays valid.
    ['<answer>Paris', 'Paris'],
    ['<think>\nreasoning that never ends', ''],
    ['Paris <tool_call>{"name": "search"}</tool_call>', 'Paris {"name": "search"}'],
    ['<answer></answer>', ''],
    ['', ''],
  ])('%j → %j', (turn, answer) => {
    expect(answerFromTurn(turn)).toBe(answer);
  });
});

describe('Naive RAG with a model reader', () => {
  it('searches once, shows the model the search response then the question without tools, and scores its answer', async () => {
    const calls: { messages: readonly ChatMessage[]; tools: readonly ToolSpec[] }[] = [];
    const reads: ModelReaderTurn[] = [];
    // A stand-in model: answers the first task right (inside <answer>), the second as bare text.
    const generate = async (messages: readonly ChatMessage[], tools: readonly ToolSpec[]) => {
      calls.push({ messages, tools });
      const task = DATA.test.tasks[calls.length - 1];
      return calls.length === 1
        ? `<think>\nfound it\n</think>\n\n<answer>${task.answers[0]}</answer>`
        : 'no idea at all';
    };
    const tasks = DATA.test.tasks.slice(0, 2);
    const policy = createNaiveRagPolicy(
      modelPassageReader(generate, (r) => reads.push(r)),
      'naive-rag(test)',
    );
    const report = await evaluate(policy, tasks, { tools: pooledSearchTools(DATA.test.corpus) });
    expect(report.policy).toBe('naive-rag(test)');
    expect(calls).toHaveLength(2);
    for (const [i, episode] of report.episodes.entries()) {
      expect(episode).toMatchObject({ turns: 2, toolCalls: 1, doneReason: 'answer' });
      const call = parseTurn(episode.messages[2].content).toolCalls[0];
      expect(call).toMatchObject({ name: 'search', arguments: { query: tasks[i].question } });
      const searchResponse = episode.messages[3];
      expect(searchResponse.role).toBe('tool');
      expect(calls[i].tools).toEqual([]);
      expect(calls[i].messages).toEqual(naiveRagMessages(tasks[i].question, searchResponse.content));
      expect(reads[i].messages).toEqual(calls[i].messages);
    }
    expect(report.episodes.map((e) => e.prediction)).toEqual([tasks[0].answers[0], 'no idea at all']);
    expect(report.episodes.map((e) => e.em)).toEqual([1, 0]);
    expect(report.formatErrorRate).toBe(0);
  });

  it('answers "unanswerable" when the model gives nothing usable', async () => {
    const policy = createNaiveRagPolicy(modelPassageReader(async () => '<think>\nstill thinking'));
    const report = await evaluate(policy, DATA.test.tasks.slice(0, 1), {
      tools: pooledSearchTools(DATA.test.corpus),
    });
    expect(report.policy).toBe('naive-rag');
    expect(report.episodes[0].prediction).toBe(UNKNOWN_ANSWER);
  });

  it('with the GPU model: the rendered prompt offers no tools and holds passages then question; the prediction is the parsed greedy turn', async () => {
    const gpu = await getTestGpu();
    const { config, tensors } = tinyCheckpoint(tinySpec('tiny-qwen3'));
    const model = new QwenGpuModel(gpu, config, tensors);
    const tokenizer = QwenTokenizer.fromFiles(await readQwenTokenizerFiles());
    const prompts: number[][] = [];
    const reads: ModelReaderTurn[] = [];
    const generate = modelGenerateTurn(model, tokenizer, {
      maxNewTokens: 6,
      temperature: 0,
      onTurn: (prompt) => prompts.push([...prompt]),
    });
    const task = DATA.test.tasks[0];
    const policy = createNaiveRagPolicy(modelPassageReader(generate, (r) => reads.push(r)));
    const report = await evaluate(policy, [task], { tools: pooledSearchTools(DATA.test.corpus) });
    model.release();
    expect(prompts).toHaveLength(1);
    const text = tokenizer.decode(prompts[0]);
    const retrieved = report.episodes[0].messages[3].content;
    expect(text).not.toContain('# Tools');
    expect(text).not.toContain('<|im_start|>system');
    expect(text.startsWith('<|im_start|>user\n')).toBe(true);
    expect(text.endsWith('<|im_start|>assistant\n')).toBe(true);
    const firstPassage = retrieved.split('\n')[0];
    expect(text.indexOf(firstPassage)).toBeGreaterThan(0);
    expect(text.indexOf(firstPassage)).toBeLessThan(text.indexOf(`Question: ${task.question}`));
    expect(reads[0].answer).toBe(answerFromTurn(reads[0].turn));
    expect(report.episodes[0].prediction).toBe(reads[0].answer || UNKNOWN_ANSWER);
  });
});
