// Copy probe: how well a policy copies the answer of an oracle trace from its context, teacher-forced.
//
// Every synthetic answer but yes/no is a name the episode has already seen: in the question
// (comparison) or in a passage (bridge, compositional). Its first token is a choice (which name); its
// other tokens only continue a name the context spells, which a model with induction heads gets
// nearly free. The probe reads the policy's log-prob of each answer token of the trace's last turn:
//   first   the token that starts the answer (may hold the tag's '>' as well, e.g. '>Or')
//   rest    the answer's other tokens: copying proper
// A model that never learned to copy scores p ≈ 0 on `rest` even for a name it wrote in its <think>
// ten tokens before (qwen-tiny after 586 SFT steps: docs/results.md).

import type { QwenGpuModel } from '../agent/model/qwen-gpu.ts';
import { packBatch } from '../agent/model/qwen-gpu.ts';
import type { QwenTokenizer } from '../agent/tokenizer/qwen-tokenizer.ts';
import { createOraclePolicy } from '../env/policies/oracle.ts';
import { TASK_PRESETS } from '../env/presets.ts';
import { generateSyntheticDataset } from '../env/tasks/synthetic.ts';
import { pooledSearchTools } from '../env/tools/search.ts';
import type { TrainableEpisode } from './batch.ts';
import { buildSftTraces, type SftTrace } from './sft.ts';

/**
 * The oracle's traces of the first `n` questions of the RL configs' held-out world (task seed 1,
 * 2 hops, compact preset) that are not yes/no questions: their answers copy nothing. With split
 * 'train', the same from the training world, whose names every warm start here saw in its SFT traces:
 * the gap between the two is what the model recalls rather than reads.
 */
export async function copyProbeTraces(
  tokenizer: QwenTokenizer,
  n: number,
  split: 'test' | 'train' = 'test',
): Promise<SftTrace[]> {
  const preset = TASK_PRESETS.compact;
  const dataset = generateSyntheticDataset({ seed: 1, trainSize: 1000, testSize: 100, hops: [2] });
  const set = dataset[split];
  return buildSftTraces({
    tokenizer,
    tasks: set.tasks.filter((t) => t.type !== 'yesno').slice(0, n),
    toolsFor: pooledSearchTools(set.corpus, preset.search),
    env: { maxTurns: 4, systemPrompt: preset.systemPrompt },
    oracle: createOraclePolicy({ style: preset.oracleStyle }),
  });
}

/**
 * The tokens (indices into `pieces`, the decoded tokens of one turn) that overlap the text between the
 * turn's last `<answer>` and the `</answer>` after it: [first, end), or null without a non-empty answer.
 */
export function answerTokenRange(pieces: readonly string[]): [number, number] | null {
  const text = pieces.join('');
  const open = text.lastIndexOf('<answer>');
  if (open < 0) return null;
  const from = open + '<answer>'.length;
  const to = text.indexOf('</answer>', from);
  if (to <= from) return null;
  let first = -1;
  let end = -1;
  let at = 0;
  for (let i = 0; i < pieces.length; i++) {
    const start = at;
    at += pieces[i].length;
    if (at > from && start < to) {
      if (first < 0) first = i;
      end = i + 1;
    }
  }
  return first < 0 ? null : [first, end];
}

export interface CopyProbeResult {
  traces: number;
  /** Mean probability of the answer's first token, and the share of those with p > ½. */
  firstP: number;
  firstGtHalf: number;
  /** The same over the answer's other tokens (and how many there were). */
  restP: number;
  restGtHalf: number;
  restTokens: number;
}

/** Teacher-forces each trace (one forward each) and scores its last turn's answer tokens. */
export async function copyProbe(
  model: QwenGpuModel,
  tokenizer: QwenTokenizer,
  traces: readonly TrainableEpisode[],
): Promise<CopyProbeResult> {
  const first: number[] = [];
  const rest: number[] = [];
  let used = 0;
  for (const trace of traces) {
    const { ids, sources } = trace;
    let end = ids.length - 1;
    while (end >= 0 && sources[end] !== 'policy') end--;
    let start = end;
    while (start > 0 && sources[start - 1] === 'policy') start--;
    if (end < 1) continue;
    const turn = ids.slice(start, end + 1);
    const range = answerTokenRange(turn.map((id) => tokenizer.decode([id])));
    if (!range) continue;
    const T = ids.length;
    const targets = new Uint32Array(T);
    const mask = new Uint32Array(T);
    for (let t = 0; t < T - 1; t++) targets[t] = ids[t + 1];
    // position t predicts token t + 1: the answer's token i of the turn is predicted at start + i − 1
    for (let i = range[0]; i < range[1]; i++) mask[start + i - 1] = 1;
    const fwd = model.forward(packBatch([ids]), targets, mask);
    const lp = await model.gpu.readF32(fwd.head.logprob);
    fwd.release();
    used++;
    for (let i = range[0]; i < range[1]; i++) {
      const p = Math.exp(lp[start + i - 1]);
      (i === range[0] ? first : rest).push(p);
    }
  }
  const mean = (x: number[]) => (x.length ? x.reduce((s, v) => s + v, 0) / x.length : 0);
  const gtHalf = (x: number[]) => mean(x.map((p) => (p > 0.5 ? 1 : 0)));
  return {
    traces: used,
    firstP: mean(first),
    firstGtHalf: gtHalf(first),
    restP: mean(rest),
    restGtHalf: gtHalf(rest),
    restTokens: rest.length,
  };
}
