// Base Tool Call with the real GPU model and tokenizer: a random tiny Qwen3 (real vocabulary) plays
// synthetic multi-hop episodes through the ToolEnv. Its text is noise, but every step of the loop is
// real: chat template with tools, prefill, sampling, stop tokens, decoding, parsing, rewards.
import { describe, expect, it } from 'vitest';
import { readQwenTokenizerFiles } from '../../src/agent/model/node-fs.ts';
import { QwenGpuModel } from '../../src/agent/model/qwen-gpu.ts';
import { tinyCheckpoint, tinySpec } from '../../src/agent/model/tiny-checkpoints.ts';
import { modelGenerateTurn } from '../../src/agent/policy/model-turn.ts';
import { QwenTokenizer } from '../../src/agent/tokenizer/qwen-tokenizer.ts';
import { evaluate } from '../../src/env/evaluate.ts';
import { createBaseToolCallPolicy } from '../../src/env/policies/base-tool-call.ts';
import { generateSyntheticDataset } from '../../src/env/tasks/synthetic.ts';
import { pooledSearchTools } from '../../src/env/tools/search.ts';
import { getTestGpu } from '../helpers/gpu.ts';

describe('Base Tool Call with the GPU model', () => {
  it('plays ToolEnv episodes end to end; each turn is the decoded greedy continuation of the rendered prompt', async () => {
    const gpu = await getTestGpu();
    const { config, tensors } = tinyCheckpoint(tinySpec('tiny-qwen3'));
    const model = new QwenGpuModel(gpu, config, tensors);
    const tokenizer = QwenTokenizer.fromFiles(await readQwenTokenizerFiles());
    const turns: Array<{ prompt: number[]; sampled: number[] }> = [];
    const generate = modelGenerateTurn(model, tokenizer, {
      maxNewTokens: 6,
      temperature: 0,
      onTurn: (prompt, sampled) => turns.push({ prompt: [...prompt], sampled: [...sampled] }),
    });
    const data = generateSyntheticDataset({ seed: 3, trainSize: 0, testSize: 2 });
    const report = await evaluate(createBaseToolCallPolicy(generate), data.test.tasks, {
      tools: pooledSearchTools(data.test.corpus),
      env: { maxTurns: 2 },
    });
    expect(report.n).toBe(2);
    expect(turns.length).toBeGreaterThanOrEqual(2);
    const first = tokenizer.decode(turns[0].prompt);
    expect(first).toContain('# Tools');
    expect(first).toContain('"name": "search"');
    expect(first).toContain(data.test.tasks[0].question);
    expect(first.endsWith('<|im_start|>assistant\n')).toBe(true);
    // The assistant message the env recorded is exactly the decoded sampled tokens (minus a stop token).
    const episode = report.episodes[0];
    const assistant = episode.messages.find((m) => m.role === 'assistant')!;
    const stopIds = new Set([tokenizer.specialId('imEnd'), tokenizer.specialId('endOfText')]);
    const body = turns[0].sampled.filter((id, i) => !(i === turns[0].sampled.length - 1 && stopIds.has(id)));
    expect(assistant.content).toBe(tokenizer.decode(body));
    // Greedy: an independent generate of the same prompt gives the same tokens.
    const again = await model.generate([turns[0].prompt], {
      maxNewTokens: 6,
      temperature: 0,
      stopTokenIds: [...stopIds],
    });
    expect(again.tokens[0]).toEqual(turns[0].sampled);
    // A random model does not produce the format: the env scores it, never throws.
    expect(report.formatErrorRate).toBeGreaterThanOrEqual(0);
    expect(report.formatErrorRate).toBeLessThanOrEqual(1);
    for (const e of report.episodes)
      expect(['answered', 'no_tool_call', 'max_turns', 'budget']).toContain(e.doneReason);
    model.release();
  });
});
