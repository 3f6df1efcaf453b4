// A training run's configuration: plain JSON (configs/*.json), every key with a working default,
// validated with errors that name the bad key. One config drives `npm run train`, the tests and the
// browser lab alike.
//
//   { "name": "grpo", "seed": 1,
//     "model":     { "path": "public/models/qwen-tiny" },
//     "task":      { "kind": "synthetic", "preset": "compact", ... },
//     "algorithm": { "name": "grpo", ... },          // grpo | drgrpo | ppo | reinforce++ |
//                                                   // reinforce++-baseline | rloo | sft
//     "rollout":   { "questionsPerStep": 4, "samplesPerQuestion": 4, ... },
//     "actor":     { "lr": 1e-5, "lossAggMode": "token-mean", ... },
//     "critic":    { "lr": 1e-5, ... },              // PPO only
//     "reward":    { "processWeight": 0, "klInReward": 0, ... },
//     "ablation":  { "lossMask": true, "advantageMask": true, "whitenOver": "advantage-mask" },
//     "sft":       { "lr": 1e-3, "batchSize": 16, ... },
//     "train":     { "steps": 40, "evalEvery": 10, ... } }

import { LORA_MODULES, type LoraModule } from '../agent/model/lora.ts';
import type { TaskPresetName } from '../env/presets.ts';
import { KL_KINDS, type KlKind, LOSS_AGG_MODES, type LossAggMode } from './core-algos.ts';

export type AlgorithmName =
  | 'grpo'
  | 'drgrpo'
  | 'ppo'
  | 'reinforce++'
  | 'reinforce++-baseline'
  | 'rloo'
  | 'sft';
export const ALGORITHMS: readonly AlgorithmName[] = [
  'grpo',
  'drgrpo',
  'ppo',
  'reinforce++',
  'reinforce++-baseline',
  'rloo',
  'sft',
];

export interface TrainConfig {
  /** Run name (the default output folder is runs/<name>). */
  name: string;
  /** Seeds everything random: question order, sampling, evaluation. */
  seed: number;
  model: {
    /** HF-layout checkpoint folder (config.json, model.safetensors, tokenizer files). */
    path: string;
    /**
     * What the actor trains: full fine-tuning (rank 0), or LoRA adapters of this rank on `modules`
     * with the base frozen; the KL reference is then the base with the adapters off (no second copy).
     */
    lora: { rank: number; alpha: number; modules: LoraModule[] };
    /** Recompute each layer's activations in backward instead of keeping them (less memory, ~1 more forward). */
    recomputeActivations: boolean;
    /**
     * Storage of the frozen base matrices of a LoRA run: 'f32', 'f16', 'bf16', or 'auto' (f16 where
     * the adapter has shader-f16, else bf16). Half precision halves their bytes; the kernels widen
     * them to f32, and the KL reference (the base with adapters off) reads the same rounded weights.
     * Full fine-tuning trains every weight in f32, so it needs 'f32'.
     */
    frozenWeights: 'f32' | 'f16' | 'bf16' | 'auto';
  };
  task: {
    kind: 'synthetic';
    /** Prompt, search and oracle style (src/env/presets.ts). */
    preset: TaskPresetName;
    /** Seed of the synthetic world and questions (independent of the run's seed). */
    seed: number;
    trainSize: number;
    testSize: number;
    /** Allowed gold-passage counts per question. */
    hops: number[];
    /** Question types (empty = all). */
    types: string[];
    /** Search over the split's whole world ('pooled') or each question's own passages. */
    corpus: 'pooled' | 'question';
    /**
     * Where RL's questions come from. Empty (the default): the training split of the world of `seed`.
     * Otherwise the training splits of these seeds' worlds (trainSize questions shared out evenly), each
     * searched over its own world. With many worlds no name recurs often enough to be recalled, so
     * reward comes only from reading the question and the passages, as on the held-out world.
     */
    trainWorldSeeds: number[];
  };
  algorithm: {
    name: AlgorithmName;
    /** Discount and GAE lambda (PPO, REINFORCE++). */
    gamma: number;
    lam: number;
    /**
     * DAPO's group filter without re-sampling (core-algos groupsWithScoreSpread): the update trains
     * only the groups whose episode rewards differ; a step where none do makes no update. Every
     * estimator but PPO's, one mini-batch, G ≥ 2. For GRPO, Dr.GRPO and RLOO a dropped group's
     * advantage would be 0 anyway; for REINFORCE++ and REINFORCE++-baseline the filter changes the
     * batch that the baseline and the whitening see, as in verl's DAPO recipe, which filters before
     * any estimator.
     */
    filterGroups: boolean;
    /**
     * Mixed-policy GRPO (LUFFY, Yan et al. 2025, arXiv 2504.14945): each question's group also gets the
     * oracle's trace of it (src/rl/sft.ts buildSftTraces; traces the oracle gets wrong are left out),
     * scored by the same ToolEnv and rewards, and the group's advantages are taken over its sampled and
     * oracle members together. The oracle's tokens are trained like sampled ones, with ratio 1 (their
     * "old" log-probs are the update's own; one update per step), so their gradient is A · ∇log p;
     * LUFFY's policy shaping of off-policy tokens is not applied. Uses the oracle's demonstrations
     * during RL: an SFT-RL hybrid, not plain GRPO. Group estimators (GRPO, Dr.GRPO, RLOO,
     * REINFORCE++-baseline), one update per step.
     */
    oracleTraces: boolean;
  };
  rollout: {
    questionsPerStep: number;
    /** G: samples per question (group estimators need ≥ 2). */
    samplesPerQuestion: number;
    maxTurns: number;
    maxToolCalls: number;
    maxNewTokensPerTurn: number;
    /** Prompt included. */
    maxTotalTokens: number;
    temperature: number;
    topP: number;
    topK: number;
  };
  actor: {
    lr: number;
    weightDecay: number;
    betas: [number, number];
    maxGradNorm: number;
    clipRatioLow: number;
    clipRatioHigh: number;
    /** Dual-clip constant (applies where A < 0). */
    clipRatioC: number;
    lossAggMode: LossAggMode;
    /** 'vanilla' (PPO clip + dual clip), 'gspo' (sequence-level ratio), 'cispo' (clipped-IS REINFORCE). */
    policyLoss: 'vanilla' | 'gspo' | 'cispo';
    entropyCoef: number;
    /** KL-to-reference as a loss term (0 = off). */
    klLossCoef: number;
    klLossKind: KlKind;
    /** Passes over each rollout batch, and mini-batches (optimizer steps) per pass. */
    ppoEpochs: number;
    miniBatches: number;
  };
  critic: {
    lr: number;
    clipRangeValue: number;
    maxGradNorm: number;
    /** Steps 1..N train the critic alone, the actor frozen (verl's trainer.critic_warmup = N + 1). */
    warmupSteps: number;
  };
  reward: {
    /** Weight of the ToolEnv's process rewards (placed on each turn's last policy token). */
    processWeight: number;
    /** KL-to-reference in the reward (0 = off): r − β·k per policy token. */
    klInRewardCoef: number;
    klInRewardKind: KlKind;
    /** Outcome metric: 'f1' | 'em' (format gates it, src/env/reward.ts). */
    outcomeMetric: 'f1' | 'em';
    /**
     * The outcome is −1 + formatWeight · f + (well formed ? answerWeight · metric : 0), f the format
     * score in [0, 1] (src/env/reward.ts). Defaults 1 and 1: a malformed episode can cost as much as a
     * right answer earns; a larger answerWeight makes the answer count for more than the format.
     */
    formatWeight: number;
    answerWeight: number;
  };
  /** Switches for the paper's ablation: train without the loss mask / the advantage mask. */
  ablation: {
    lossMask: boolean;
    advantageMask: boolean;
    /**
     * PPO (GAE) only: the tokens whose mean and variance whiten the advantages. "advantage-mask" (the
     * default, verl's and Agent-R1's code): the estimator's mask, so without the advantage mask every
     * response token, most of them environment tokens with small advantages, which scales the policy's
     * advantages up (`npm run probe:adv-mask` measures by how much). "policy": the policy's sampled tokens
     * in either arm, so that the advantage-mask ablation changes only GAE's recursion and the critic.
     */
    whitenOver: 'advantage-mask' | 'policy';
  };
  sft: {
    lr: number;
    /** Episodes per optimizer step. */
    batchSize: number;
    /** Oracle traces to train on (from the train split). */
    traces: number;
    /** Worlds the traces come from: the task's train split, then worlds of seeds task.seed + 1, ... */
    worlds: number;
    /**
     * Weight of the cross-entropy on the environment's tokens (tool responses and the template's glue),
     * the policy's tokens weighing 1. 0 = imitation only. Above 0 the warm start is also a language
     * model of the passages, whose names repeat the query's: more tokens that teach copying.
     */
    contextWeight: number;
    /**
     * Copy-drill rows per step (0 = off; src/rl/sft.ts): a random span of `copySpan` of the traces'
     * tokens repeated `copyRepeats` times, the loss on the repeats at weight `copyWeight` beside the
     * traces' mean loss. Teaches the copying (induction) a pretrained model brings and qwen-tiny lacks.
     */
    copyRows: number;
    copySpan: number;
    copyRepeats: number;
    copyWeight: number;
    /**
     * Input noise (0 = off; src/rl/sft.ts): the probability that a policy token of a trace is replaced,
     * in the input only, by the token before it or a random token of the trace, the targets unchanged.
     * Teaches going on after a wrong token, which teacher forcing never shows.
     */
    inputNoise: number;
  };
  train: {
    steps: number;
    /** Evaluate on the held-out split every N steps (0 = only at the start and end). */
    evalEvery: number;
    /** Held-out questions per evaluation (greedy). */
    evalSize: number;
    /** Checkpoint every N steps (0 = only at the end). */
    checkpointEvery: number;
    /** Trajectories written per step (samples/step-XXXX.json). */
    saveTrajectories: number;
    /**
     * Write each RL step's per-token arrays (arrays/step-XXXX.json: masks, rewards, the critic's values,
     * the advantages; src/rl/step-arrays.ts), for offline analysis such as `npm run probe:adv-mask`.
     * About 5 MB a step at 256 × 1,024 tokens.
     */
    saveArrays: boolean;
    /** Stop after this many minutes of wall time (0 = no limit); the last step finishes first. */
    maxMinutes: number;
    /**
     * Refuse to start when the memory planner (src/agent/model/memory-plan.ts) predicts a larger peak
     * of GPU memory, in MiB (0 = no budget).
     */
    memoryBudgetMiB: number;
    /**
     * Rows per forward/backward of an update (gradient accumulation): each optimizer step's rows (an
     * actor mini-batch, the critic's batch, an SFT batch) run in micro-batches of this many rows (the
     * last one may be smaller) before one AdamW step; the loss is normalised by the whole update's
     * tokens/rows, so the update is the same. 0 = auto: the largest micro-batch the memory planner fits
     * in memoryBudgetMiB, or the whole mini-batch without a budget.
     */
    microBatchRows: number;
    /** Learning-rate warm-up steps (linear from 0). */
    warmupSteps: number;
  };
}

export const DEFAULT_CONFIG: TrainConfig = {
  name: 'run',
  seed: 1,
  model: {
    path: 'public/models/qwen-tiny',
    lora: { rank: 0, alpha: 16, modules: [...LORA_MODULES] },
    recomputeActivations: false,
    frozenWeights: 'f32',
  },
  task: {
    kind: 'synthetic',
    preset: 'compact',
    seed: 1,
    trainSize: 400,
    testSize: 100,
    hops: [2],
    types: [],
    corpus: 'pooled',
    trainWorldSeeds: [],
  },
  algorithm: { name: 'grpo', gamma: 1, lam: 1, filterGroups: false, oracleTraces: false },
  rollout: {
    questionsPerStep: 4,
    samplesPerQuestion: 4,
    maxTurns: 4,
    maxToolCalls: 4,
    maxNewTokensPerTurn: 64,
    maxTotalTokens: 1024,
    temperature: 1,
    topP: 1,
    topK: 0,
  },
  actor: {
    lr: 1e-4,
    weightDecay: 0,
    betas: [0.9, 0.999],
    maxGradNorm: 1,
    clipRatioLow: 0.2,
    clipRatioHigh: 0.2,
    clipRatioC: 3,
    lossAggMode: 'token-mean',
    policyLoss: 'vanilla',
    entropyCoef: 0,
    klLossCoef: 0,
    klLossKind: 'k3',
    ppoEpochs: 1,
    miniBatches: 1,
  },
  critic: { lr: 1e-4, clipRangeValue: 0.5, maxGradNorm: 1, warmupSteps: 0 },
  reward: {
    processWeight: 0,
    klInRewardCoef: 0,
    klInRewardKind: 'k1',
    outcomeMetric: 'f1',
    formatWeight: 1,
    answerWeight: 1,
  },
  ablation: { lossMask: true, advantageMask: true, whitenOver: 'advantage-mask' },
  sft: {
    lr: 2e-3,
    batchSize: 16,
    traces: 400,
    worlds: 1,
    contextWeight: 0,
    copyRows: 0,
    copySpan: 32,
    copyRepeats: 4,
    copyWeight: 1,
    inputNoise: 0,
  },
  train: {
    steps: 20,
    evalEvery: 10,
    evalSize: 50,
    checkpointEvery: 10,
    saveTrajectories: 4,
    saveArrays: false,
    maxMinutes: 0,
    memoryBudgetMiB: 0,
    microBatchRows: 0,
    warmupSteps: 0,
  },
};

export class ConfigError extends Error {
  constructor(
    readonly key: string,
    message: string,
  ) {
    super(`config: ${key === '' ? '' : `"${key}" `}${message}`);
    this.name = 'ConfigError';
  }
}

type Check = (value: unknown, key: string) => void;

const num =
  (
    min = Number.NEGATIVE_INFINITY,
    max = Number.POSITIVE_INFINITY,
    opts: { int?: boolean; minOpen?: boolean } = {},
  ): Check =>
  (v, key) => {
    if (typeof v !== 'number' || !Number.isFinite(v))
      throw new ConfigError(key, `must be a number, got ${show(v)}`);
    if (opts.int && !Number.isInteger(v)) throw new ConfigError(key, `must be an integer, got ${v}`);
    if (opts.minOpen ? !(v > min) : v < min)
      throw new ConfigError(key, `must be ${opts.minOpen ? '>' : '>='} ${min}, got ${v}`);
    if (v > max) throw new ConfigError(key, `must be <= ${max}, got ${v}`);
  };
const int = (min = 0, max = Number.POSITIVE_INFINITY): Check => num(min, max, { int: true });
const positive: Check = num(0, Number.POSITIVE_INFINITY, { minOpen: true });
const oneOf =
  (values: readonly string[]): Check =>
  (v, key) => {
    if (typeof v !== 'string' || !values.includes(v))
      throw new ConfigError(key, `must be one of ${values.map((x) => `"${x}"`).join(', ')}, got ${show(v)}`);
  };
const str: Check = (v, key) => {
  if (typeof v !== 'string' || v === '')
    throw new ConfigError(key, `must be a non-empty string, got ${show(v)}`);
};
const bool: Check = (v, key) => {
  if (typeof v !== 'boolean') throw new ConfigError(key, `must be true or false, got ${show(v)}`);
};
const arrayOf =
  (item: Check, minLength = 0): Check =>
  (v, key) => {
    if (!Array.isArray(v)) throw new ConfigError(key, `must be an array, got ${show(v)}`);
    if (v.length < minLength) throw new ConfigError(key, `needs at least ${minLength} entries`);
    for (let i = 0; i < v.length; i++) item(v[i], `${key}[${i}]`);
  };
const betas: Check = (v, key) => {
  arrayOf(num(0, 0.999999), 2)(v, key);
  if ((v as unknown[]).length !== 2) throw new ConfigError(key, 'must be [beta1, beta2]');
};

/** The checks of every leaf key; the shape of DEFAULT_CONFIG is the schema. */
const CHECKS: Record<string, Check> = {
  name: (v, key) => {
    str(v, key);
    if (!/^[\w.-]+$/.test(v as string))
      throw new ConfigError(key, `may hold only letters, digits, '.', '_' and '-', got ${show(v)}`);
  },
  seed: int(0, 2 ** 31),
  'model.path': str,
  'model.lora.rank': int(0),
  'model.lora.alpha': positive,
  'model.lora.modules': arrayOf(oneOf([...LORA_MODULES]), 1),
  'model.recomputeActivations': bool,
  'model.frozenWeights': oneOf(['f32', 'f16', 'bf16', 'auto']),
  'task.kind': oneOf(['synthetic']),
  'task.preset': oneOf(['default', 'compact']),
  'task.seed': int(0, 2 ** 31),
  'task.trainSize': int(1),
  'task.testSize': int(1),
  'task.hops': arrayOf(int(2, 4), 1),
  'task.types': arrayOf(oneOf(['compositional', 'bridge', 'comparison', 'bridge_comparison', 'yesno'])),
  'task.corpus': oneOf(['pooled', 'question']),
  'task.trainWorldSeeds': arrayOf(int(0, 2 ** 31)),
  'algorithm.name': oneOf(ALGORITHMS),
  'algorithm.gamma': num(0, 1),
  'algorithm.lam': num(0, 1),
  'algorithm.filterGroups': bool,
  'algorithm.oracleTraces': bool,
  'rollout.questionsPerStep': int(1),
  'rollout.samplesPerQuestion': int(1),
  'rollout.maxTurns': int(1),
  'rollout.maxToolCalls': int(1),
  'rollout.maxNewTokensPerTurn': int(1),
  'rollout.maxTotalTokens': int(16),
  'rollout.temperature': num(0),
  'rollout.topP': num(0, 1, { minOpen: true }),
  'rollout.topK': int(0),
  'actor.lr': num(0),
  'actor.weightDecay': num(0),
  'actor.betas': betas,
  'actor.maxGradNorm': positive,
  'actor.clipRatioLow': num(0, 1),
  'actor.clipRatioHigh': num(0),
  'actor.clipRatioC': num(1, Number.POSITIVE_INFINITY, { minOpen: true }),
  'actor.lossAggMode': oneOf(LOSS_AGG_MODES),
  'actor.policyLoss': oneOf(['vanilla', 'gspo', 'cispo']),
  'actor.entropyCoef': num(),
  'actor.klLossCoef': num(0),
  'actor.klLossKind': oneOf(KL_KINDS),
  'actor.ppoEpochs': int(1),
  'actor.miniBatches': int(1),
  'critic.lr': num(0),
  'critic.clipRangeValue': positive,
  'critic.maxGradNorm': positive,
  'critic.warmupSteps': int(0),
  'reward.processWeight': num(),
  'reward.klInRewardCoef': num(0),
  'reward.klInRewardKind': oneOf(KL_KINDS),
  'reward.outcomeMetric': oneOf(['f1', 'em']),
  'reward.formatWeight': num(0, 10),
  'reward.answerWeight': num(0, 10),
  'ablation.lossMask': bool,
  'ablation.advantageMask': bool,
  'ablation.whitenOver': oneOf(['advantage-mask', 'policy']),
  'sft.lr': num(0),
  'sft.batchSize': int(1),
  'sft.traces': int(1),
  'sft.worlds': int(1, 4096),
  'sft.contextWeight': num(0, 1),
  'sft.copyRows': int(0),
  'sft.copySpan': int(2, 512),
  'sft.copyRepeats': int(2, 16),
  'sft.copyWeight': num(0),
  'sft.inputNoise': num(0, 0.95),
  'train.steps': int(0),
  'train.evalEvery': int(0),
  'train.evalSize': int(0),
  'train.checkpointEvery': int(0),
  'train.saveTrajectories': int(0),
  'train.saveArrays': bool,
  'train.maxMinutes': num(0),
  'train.memoryBudgetMiB': num(0),
  'train.microBatchRows': int(0),
  'train.warmupSteps': int(0),
};

function show(v: unknown): string {
  const s = JSON.stringify(v);
  return s === undefined ? String(v) : s.length > 60 ? `${s.slice(0, 57)}...` : s;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Deep-merges `overrides` onto the defaults, refusing keys the schema does not have. */
function merge(
  defaults: Record<string, unknown>,
  overrides: Record<string, unknown>,
  prefix: string,
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...defaults };
  for (const [k, v] of Object.entries(overrides)) {
    const key = prefix === '' ? k : `${prefix}.${k}`;
    if (!(k in defaults)) {
      const known = Object.keys(defaults).join(', ');
      throw new ConfigError(
        key,
        `is not a known key${prefix === '' ? '' : ` of "${prefix}"`} (known: ${known})`,
      );
    }
    const d = defaults[k];
    if (isPlainObject(d)) {
      if (!isPlainObject(v)) throw new ConfigError(key, `must be an object, got ${show(v)}`);
      out[k] = merge(d, v, key);
    } else {
      out[k] = v;
    }
  }
  return out;
}

function checkLeaves(value: Record<string, unknown>, prefix: string): void {
  for (const [k, v] of Object.entries(value)) {
    const key = prefix === '' ? k : `${prefix}.${k}`;
    const check = CHECKS[key];
    if (check) check(v, key);
    else if (isPlainObject(v)) checkLeaves(v, key);
    else throw new ConfigError(key, 'has no validation rule (internal error)');
  }
}

/** Validates a parsed JSON config (partial: missing keys take the defaults) and returns the full one. */
export function resolveConfig(raw: unknown): TrainConfig {
  if (!isPlainObject(raw)) throw new ConfigError('', `must be a JSON object, got ${show(raw)}`);
  const merged = merge(
    DEFAULT_CONFIG as unknown as Record<string, unknown>,
    raw,
    '',
  ) as unknown as TrainConfig;
  checkLeaves(merged as unknown as Record<string, unknown>, '');
  const c = merged;
  const groupMethods: AlgorithmName[] = ['grpo', 'drgrpo', 'rloo', 'reinforce++-baseline'];
  if (groupMethods.includes(c.algorithm.name) && c.rollout.samplesPerQuestion < 2) {
    throw new ConfigError(
      'rollout.samplesPerQuestion',
      `must be >= 2 for ${c.algorithm.name} (a group of one has no baseline), got ${c.rollout.samplesPerQuestion}`,
    );
  }
  if (c.sft.worlds > c.sft.traces) {
    throw new ConfigError(
      'sft.worlds',
      `is ${c.sft.worlds}, more worlds than sft.traces (${c.sft.traces}): at least one each`,
    );
  }
  const seeds = c.task.trainWorldSeeds;
  if (new Set(seeds).size !== seeds.length) {
    throw new ConfigError('task.trainWorldSeeds', `repeats a seed: ${JSON.stringify(seeds)}`);
  }
  if (seeds.length > c.task.trainSize) {
    throw new ConfigError(
      'task.trainWorldSeeds',
      `has ${seeds.length} worlds for task.trainSize ${c.task.trainSize} questions (at least one each)`,
    );
  }
  if (c.model.frozenWeights !== 'f32' && c.model.lora.rank === 0) {
    throw new ConfigError(
      'model.frozenWeights',
      `"${c.model.frozenWeights}" needs LoRA (model.lora.rank > 0): full fine-tuning trains every weight in f32`,
    );
  }
  if (c.algorithm.filterGroups) {
    const filterable: AlgorithmName[] = ['grpo', 'drgrpo', 'rloo', 'reinforce++', 'reinforce++-baseline'];
    if (!filterable.includes(c.algorithm.name))
      throw new ConfigError(
        'algorithm.filterGroups',
        `works with ${filterable.join(', ')}, not ${c.algorithm.name}` +
          (c.algorithm.name === 'ppo'
            ? " (PPO's critic learns from every episode, equal-reward groups too)"
            : ''),
      );
    if (c.rollout.samplesPerQuestion < 2)
      throw new ConfigError(
        'algorithm.filterGroups',
        `needs rollout.samplesPerQuestion >= 2 (a group of one has no spread, so no step would train), got ${c.rollout.samplesPerQuestion}`,
      );
    if (c.reward.klInRewardCoef > 0)
      throw new ConfigError(
        'algorithm.filterGroups',
        `filters on the episodes' rewards before the KL to the reference is known: not with reward.klInRewardCoef > 0 (got ${c.reward.klInRewardCoef})`,
      );
    if (c.actor.miniBatches !== 1)
      throw new ConfigError(
        'algorithm.filterGroups',
        `needs actor.miniBatches 1 (the kept rows vary from step to step), got ${c.actor.miniBatches}`,
      );
  }
  if (c.algorithm.oracleTraces) {
    const grouped: AlgorithmName[] = ['grpo', 'drgrpo', 'rloo', 'reinforce++-baseline'];
    if (!grouped.includes(c.algorithm.name))
      throw new ConfigError(
        'algorithm.oracleTraces',
        `works with the group estimators ${grouped.join(', ')}, not ${c.algorithm.name} (the oracle's trace joins its question's group)`,
      );
    if (c.actor.ppoEpochs * c.actor.miniBatches !== 1)
      throw new ConfigError(
        'algorithm.oracleTraces',
        `needs one update per step (actor.ppoEpochs 1, actor.miniBatches 1): the oracle's tokens have no sampling log-probs, so their ratio is 1 only at the first update; got ${c.actor.ppoEpochs} × ${c.actor.miniBatches}`,
      );
  }
  if (c.ablation.whitenOver !== 'advantage-mask' && c.algorithm.name !== 'ppo')
    throw new ConfigError(
      'ablation.whitenOver',
      `"${c.ablation.whitenOver}" applies to PPO's GAE only, not ${c.algorithm.name} (leave it "advantage-mask")`,
    );
  const rows = c.rollout.questionsPerStep * c.rollout.samplesPerQuestion;
  if (rows % c.actor.miniBatches !== 0) {
    throw new ConfigError(
      'actor.miniBatches',
      `must divide the ${rows} episodes of a step (questionsPerStep × samplesPerQuestion), got ${c.actor.miniBatches}`,
    );
  }
  if (c.rollout.maxNewTokensPerTurn >= c.rollout.maxTotalTokens) {
    throw new ConfigError(
      'rollout.maxNewTokensPerTurn',
      `must be below rollout.maxTotalTokens (${c.rollout.maxTotalTokens})`,
    );
  }
  return structuredClone(c);
}

/** Parses config text (a file's contents), naming the file in JSON syntax errors. */
export function parseConfigText(text: string, file = 'config'): TrainConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text.replace(/^\uFEFF/, ''));
  } catch (e) {
    throw new ConfigError('', `${file} is not valid JSON: ${(e as Error).message}`);
  }
  try {
    return resolveConfig(raw);
  } catch (e) {
    if (e instanceof ConfigError)
      throw new ConfigError(e.key, `${e.message.replace(/^config: /, '')} (in ${file})`);
    throw e;
  }
}
