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
import { createRng, hash32, type Rng } from '../env/rng.ts';
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

// The trace's `outcome` and `process` are the rewards the ToolEnv paid the oracle, unweighted (a
// rollout's trajectory records the same): SFT ignores them; mixed-policy GRPO (the trainer's
// algorithm.oracleTraces) scores the trace as one more member of its question's group.

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
    let outcome = 0;
    const process: Array<{ tokenIndex: number; reward: number }> = [];
    let messages = state.messages;
    for (;;) {
      const action = await oracle.act(state, tools);
      push([...tokenizer.encode(action), imEnd], 'policy');
      const step = await env.step(action);
      // on the turn's last policy token (its <|im_end|>), as a rollout places it
      process.push({ tokenIndex: ids.length - 1, reward: step.reward.total });
      if (step.done) {
        em = step.outcome?.em ?? 0;
        outcome = step.outcome?.outcome ?? 0;
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
      outcome,
      process,
    });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Copy drill: the pretraining qwen-tiny never had.
//
// A pretrained Qwen copies spans from its context (induction heads) long before any agent training.
// qwen-tiny starts from random weights, and imitation alone did not teach it: after 586 SFT steps,
// teacher-forced on an oracle trace, it gave ~0 probability to finishing a name it had written ten
// tokens earlier (docs/results.md). Copying the question's and the passages' names is what multi-hop
// search needs. A drill row holds one random span of the traces' own token ids, of a random length
// up to `span`, written `repeats` times with random tokens of random length between; the loss is on the
// tokens of the later copies that continue the copy (their first token follows random filler, so it is
// not predictable). The lengths vary per row so that no fixed offset finds the earlier copy: only
// looking up the current token earlier in the row and reading what followed it (induction) helps.
// (A first version repeated spans of exactly `span` tokens back to back; the model learned to read
// the token `span` back, which does not transfer to the task: docs/results.md.)
//
//   row    = s | f_1 | s | f_2 | s …   (s: L tokens, 2 ≤ L ≤ span; f_k: 1 to span tokens), cut at T
//   T      = span · repeats; target = row shifted by one
//   mask   = 1 where the target is s_1 … s_{L−1} of a copy after the first

export interface CopyDrillBatch {
  /** Rows of equal length span · repeats. */
  sequences: number[][];
  /** [rows · T] next-token targets (0 on the last position). */
  targets: Uint32Array;
  /** [rows · T] 1 where the target continues a repeated copy of the row's span. */
  mask: Uint32Array;
  /** Number of 1s in mask. */
  count: number;
}

/** `rows` drill rows from `pool` (token ids, duplicates allowed), drawn with `rng`. */
export function copyDrillBatch(
  pool: readonly number[],
  rows: number,
  span: number,
  repeats: number,
  rng: Rng,
): CopyDrillBatch {
  if (pool.length === 0) throw new Error('copy drill: no tokens to draw from');
  if (span < 2) throw new Error(`copy drill: span must be >= 2, got ${span}`);
  const T = span * repeats;
  const sequences: number[][] = [];
  const targets = new Uint32Array(rows * T);
  const mask = new Uint32Array(rows * T);
  let count = 0;
  const draw = (n: number) => Array.from({ length: n }, () => rng.pick(pool));
  for (let r = 0; r < rows; r++) {
    const once = draw(rng.int(2, span));
    const row: number[] = [...once];
    const copied: boolean[] = once.map(() => false);
    while (row.length < T) {
      const filler = draw(rng.int(1, span));
      row.push(...filler);
      copied.push(...filler.map(() => false));
      row.push(...once);
      copied.push(...once.map((_, k) => k > 0));
    }
    row.length = T;
    sequences.push(row);
    for (let t = 0; t < T - 1; t++) {
      targets[r * T + t] = row[t + 1];
      if (copied[t + 1]) {
        mask[r * T + t] = 1;
        count++;
      }
    }
  }
  return { sequences, targets, mask, count };
}

/** The drill's draws at an optimizer step: from (run seed, step) alone, so a resumed run draws the same. */
export function copyDrillRng(seed: number, step: number): Rng {
  return createRng(hash32(`${seed}:copy-drill:${step}`));
}

/** The distinct token ids of the traces, in first-seen order: the drill's pool. */
export function traceTokenPool(traces: readonly TrainableEpisode[]): number[] {
  const seen = new Set<number>();
  for (const t of traces) for (const id of t.ids) seen.add(id);
  return [...seen];
}

// ---------------------------------------------------------------------------------------------------
// Input noise: teacher forcing with some of the policy's own tokens wrong (exposure bias).
//
// Teacher forcing only ever shows the model a correct prefix. Decoding freely, one wrong token puts it
// where training never went, and the warm starts fell into loops there: after writing a name's piece
// twice (`Wenju` → `ju ju`), the induction heads find the piece followed by itself and repeat it
// forever (docs/results.md). With input noise a policy token of the traces is, with probability `rate`,
// replaced in the *input*: half the time by the token before it (a repeat, the loops' start),
// otherwise by a random token of the same trace (either may happen to equal the token; `replaced`
// counts the draws, as `sft/noised_inputs` does). The targets stay the oracle's tokens, so the
// position that reads the wrong token learns to go on with the trace, and no position is trained to
// produce a wrong token (the one before it still predicts the right token from a clean prefix).
//
//   input  = s with s[j] → s[j−1] or a random s[k], for policy positions j ≥ 1 drawn at `rate`
//   target = s shifted by one (unchanged)

/** `ids` with some policy tokens replaced as above; `replaced` lists the positions drawn. */
export function noisyInputIds(
  ids: readonly number[],
  sources: readonly TokenSource[],
  rate: number,
  rng: Rng,
): { ids: number[]; replaced: number[] } {
  if (!(rate >= 0 && rate < 1)) throw new Error(`input noise: rate must be in [0, 1), got ${rate}`);
  const out = [...ids];
  const replaced: number[] = [];
  if (rate === 0) return { ids: out, replaced };
  for (let j = 1; j < ids.length; j++) {
    if (sources[j] !== 'policy' || rng.next() >= rate) continue;
    out[j] = rng.next() < 0.5 ? ids[j - 1] : ids[rng.int(0, ids.length - 1)];
    replaced.push(j);
  }
  return { ids: out, replaced };
}

/** The input noise's draws at an optimizer step: from (run seed, step) alone, so a resumed run draws the same. */
export function inputNoiseRng(seed: number, step: number): Rng {
  return createRng(hash32(`${seed}:input-noise:${step}`));
}
