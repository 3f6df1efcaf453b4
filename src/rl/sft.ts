// Supervised warm start: the oracle's episodes as token sequences with the same structure and masks as
// RL trajectories, for masked cross-entropy in the same trainer (Trainer with algorithm "sft").
//
// A trace is built the way a rollout builds a trajectory, piece by piece, so the masks come from each
// piece's source and never from matching strings in the rendered text:
//   prompt   the chat template's rendering of the initial messages with the tools and the generation
//            prompt                                                              source 'prompt'
//   turn k   the oracle's action text, then <|im_end|>                           source 'policy'
//   reply k  the ToolEnv's continuation (tool responses + the template's glue)   source 'env'
// Data stays text: the question (inside encodeChat) and the tool responses (continuationPieces) are
// encoded without special ids, whatever tags they spell.
// decode(ids) equals the template's rendering of the final conversation (tested).

import type { QwenTokenizer } from '../agent/tokenizer/qwen-tokenizer.ts';
import type { Policy } from '../env/policies/policy.ts';
import type { QaTask } from '../env/tasks/schema.ts';
import { ToolEnv, type ToolEnvOptions } from '../env/tool-env.ts';
import type { TaskTools } from '../env/tools/search.ts';
import type { ChatMessage, ToolSpec } from '../env/types.ts';
import type { TrainableEpisode } from './batch.ts';
import type { TokenSource } from './rollout.ts';

export interface SftTrace extends TrainableEpisode {
  taskId: string;
  /** The final conversation (the env's history) and the tools it was offered. */
  messages: ChatMessage[];
  tools: ToolSpec[];
  /** The oracle's outcome: traces that fail are kept out (see buildSftTraces). */
  em: number;
}

export interface SftTraceOptions {
  tokenizer: QwenTokenizer;
  tasks: readonly QaTask[];
  toolsFor: TaskTools;
  env: ToolEnvOptions;
  oracle: Policy;
  /** Keep only episodes the oracle answered exactly (default true): the warm start imitates successes. */
  successesOnly?: boolean;
}

export async function buildSftTraces(options: SftTraceOptions): Promise<SftTrace[]> {
  const { tokenizer, tasks, toolsFor, oracle, successesOnly = true } = options;
  const imEnd = tokenizer.specialId('imEnd');
  const out: SftTrace[] = [];
  for (const task of tasks) {
    const env = new ToolEnv(task, toolsFor(task), options.env);
    let state = env.reset();
    const tools = env.toolSpecs;
    const ids: number[] = [];
    const sources: TokenSource[] = [];
    const push = (piece: readonly number[], source: TokenSource) => {
      for (const id of piece) {
        ids.push(id);
        sources.push(source);
      }
    };
    push(tokenizer.encodeChat(state.messages, { tools, addGenerationPrompt: true }), 'prompt');
    let em = 0;
    let messages = state.messages;
    for (;;) {
      const action = await oracle.act(state, tools);
      push([...tokenizer.encode(action), imEnd], 'policy');
      const step = await env.step(action);
      if (step.done) {
        em = step.outcome?.em ?? 0;
        messages = env.snapshot().messages;
        break;
      }
      push(tokenizer.encodePieces(step.observation.continuationPieces), 'env');
      state = env.snapshot();
    }
    if (successesOnly && em !== 1) continue;
    out.push({
      taskId: task.id,
      messages,
      tools,
      em,
      ids,
      sources,
      logprobs: new Float32Array(ids.length),
      group: out.length,
      outcome: 0,
      process: [],
    });
  }
  return out;
}
