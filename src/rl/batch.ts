// From episodes to the arrays a training step consumes. Pure CPU, no GPU: tested on its own.
//
// An episode is a token sequence s[0..L) with a source per token (prompt / policy / env). The model
// reads s and predicts s[i+1] at position i, so every per-token quantity of token j lives at
// position i = j − 1 of a right-padded [B, T] grid (T = the longest episode):
//
//   ids[b, i]        = s[i]                      the input
//   targets[b, i]    = s[i+1]                    the token whose log-prob is trained (0 past the end)
//   lossMask[b, i]   = 1 iff s[i+1] was sampled by the policy (its <|im_end|> included)
//   advMask[b, i]    = the positions the advantage estimator runs over (= lossMask)
//   oldLogprob[b, i] = the sampler's log-prob of s[i+1] (0 where not sampled)
//   rewards[b, i]    = outcome on the episode's last policy position, each turn's process reward on
//                      that turn's last policy position (Agent-R1's placement)
//
// Masks come from each token's recorded source, never from the text. The ablation switches replace
// a mask by "every response position" (everything after the prompt, environment tokens included):
// without the loss mask the policy is also trained on the environment's tokens; without the
// advantage mask GAE and discounted returns step through environment tokens as if the policy had
// written them.

import { packBatch, type TokenBatch } from '../agent/model/qwen-gpu.ts';
import type { TokenSource } from './rollout.ts';

/** What the batch builder needs of an episode (a rollout Trajectory or an SFT trace). */
export interface TrainableEpisode {
  ids: readonly number[];
  sources: readonly TokenSource[];
  /** Sampling log-prob per token (0 where not sampled). */
  logprobs: ArrayLike<number>;
  /** Group id (the question) for group estimators. */
  group: number;
  /** Outcome reward, placed on the last policy token. */
  outcome: number;
  /** Process rewards: each on the token at `tokenIndex` (the turn's last policy token). */
  process: ReadonlyArray<{ tokenIndex: number; reward: number }>;
}

export interface BatchOptions {
  /** false: train on every response position (ablation). Default true. */
  lossMask?: boolean;
  /** false: run the advantage estimator over every response position (ablation). Default true. */
  advantageMask?: boolean;
  /** Weight of process rewards. Default 1. */
  processWeight?: number;
}

export interface TrainingBatch {
  B: number;
  T: number;
  tokens: TokenBatch;
  targets: Uint32Array;
  lossMask: Float32Array;
  advMask: Float32Array;
  /** Positions whose target the policy sampled, whatever the ablations (for metrics). */
  policyMask: Float32Array;
  oldLogprob: Float32Array;
  rewards: Float32Array;
  /** Group id per row. */
  index: Uint32Array;
  /** Policy tokens per row. */
  policyTokens: number[];
  /** Longest response (tokens after the prompt), for seq-mean-token-sum-norm. */
  maxResponseLength: number;
}

export function buildTrainingBatch(
  episodes: readonly TrainableEpisode[],
  options: BatchOptions = {},
): TrainingBatch {
  const { lossMask: useLossMask = true, advantageMask: useAdvMask = true, processWeight = 1 } = options;
  if (episodes.length === 0) throw new Error('buildTrainingBatch: no episodes');
  episodes.forEach((e, b) => {
    if (e.sources.length !== e.ids.length || e.logprobs.length !== e.ids.length)
      throw new Error(
        `buildTrainingBatch: episode ${b} has ${e.ids.length} ids, ${e.sources.length} sources, ${e.logprobs.length} log-probs`,
      );
  });
  const tokens = packBatch(
    episodes.map((e) => e.ids),
    { padSide: 'right' },
  );
  const { B, T } = tokens;
  const N = B * T;
  const targets = new Uint32Array(N);
  const lossMask = new Float32Array(N);
  const advMask = new Float32Array(N);
  const policyMask = new Float32Array(N);
  const oldLogprob = new Float32Array(N);
  const rewards = new Float32Array(N);
  const index = new Uint32Array(B);
  const policyTokens: number[] = [];
  let maxResponseLength = 0;
  episodes.forEach((e, b) => {
    index[b] = e.group;
    const L = e.ids.length;
    const firstResponse = e.sources.findIndex((s) => s !== 'prompt');
    if (firstResponse >= 0) maxResponseLength = Math.max(maxResponseLength, L - firstResponse);
    let lastPolicy = -1;
    let count = 0;
    for (let j = 1; j < L; j++) {
      const i = b * T + j - 1;
      targets[i] = e.ids[j];
      const isPolicy = e.sources[j] === 'policy';
      const isResponse = e.sources[j] !== 'prompt';
      if (isPolicy) {
        policyMask[i] = 1;
        oldLogprob[i] = e.logprobs[j];
        lastPolicy = j;
        count++;
      }
      lossMask[i] = (useLossMask ? isPolicy : isResponse) ? 1 : 0;
      advMask[i] = (useAdvMask ? isPolicy : isResponse) ? 1 : 0;
    }
    policyTokens.push(count);
    if (lastPolicy >= 0) rewards[b * T + lastPolicy - 1] += e.outcome;
    for (const p of e.process) {
      if (p.reward === 0) continue;
      if (!(p.tokenIndex >= 1 && p.tokenIndex < L) || e.sources[p.tokenIndex] !== 'policy')
        throw new Error(
          `buildTrainingBatch: episode ${b}: a process reward sits on token ${p.tokenIndex}, which is not a policy token`,
        );
      rewards[b * T + p.tokenIndex - 1] += processWeight * p.reward;
    }
  });
  return {
    B,
    T,
    tokens,
    targets,
    lossMask,
    advMask,
    policyMask,
    oldLogprob,
    rewards,
    index,
    policyTokens,
    maxResponseLength,
  };
}

/** Rows [r0, r1) of a batch, same T (a mini-batch). */
export function sliceRows(batch: TrainingBatch, r0: number, r1: number): TrainingBatch {
  const { T } = batch;
  const a = r0 * T;
  const z = r1 * T;
  return {
    B: r1 - r0,
    T,
    tokens: {
      B: r1 - r0,
      T,
      ids: batch.tokens.ids.slice(a, z),
      seg: batch.tokens.seg.slice(a, z),
      pos: batch.tokens.pos.slice(a, z),
    },
    targets: batch.targets.slice(a, z),
    lossMask: batch.lossMask.slice(a, z),
    advMask: batch.advMask.slice(a, z),
    policyMask: batch.policyMask.slice(a, z),
    oldLogprob: batch.oldLogprob.slice(a, z),
    rewards: batch.rewards.slice(a, z),
    index: batch.index.slice(r0, r1),
    policyTokens: batch.policyTokens.slice(r0, r1),
    maxResponseLength: batch.maxResponseLength,
  };
}
