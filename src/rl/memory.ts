// The memory planner applied to a run's config (pure: the trainer refuses with it before allocating,
// the lab's Model screen shows it before training starts), and the choice of the micro-batch: the
// rows one forward/backward of an update holds (train.microBatchRows; 0 = the largest that fits).
import type { ModelConfig } from '../agent/model/config.ts';
import { type MemoryPlan, planTrainingMemory } from '../agent/model/memory-plan.ts';
import type { TrainConfig } from './config.ts';

export const MiB = 1024 * 1024;

/** Episodes (rows) of a step: the rollout's questions × samples, or an SFT batch. */
export function stepRows(config: TrainConfig): number {
  return config.algorithm.name === 'sft'
    ? config.sft.batchSize
    : config.rollout.questionsPerStep * config.rollout.samplesPerQuestion;
}

/** Rows of one optimizer step of the actor: an SFT batch, or one of actor.miniBatches mini-batches. */
export function updateRows(config: TrainConfig): number {
  return config.algorithm.name === 'sft'
    ? config.sft.batchSize
    : Math.max(1, Math.floor(stepRows(config) / config.actor.miniBatches));
}

/**
 * The planner's prediction for a run of `config` on a model of `model`'s shape with forward/backward
 * passes of `microRows` rows: every episode padded to rollout.maxTotalTokens and the LM head over
 * every position (an upper bound of the update's peak); the rollout's cache holds all rows of the
 * step. Without `microRows`, the micro-batch pickMicroBatchRows chooses.
 */
export function trainingMemoryPlan(model: ModelConfig, config: TrainConfig, microRows?: number): MemoryPlan {
  if (microRows === undefined) return pickMicroBatchRows(model, config).plan;
  const sft = config.algorithm.name === 'sft';
  const rows = stepRows(config);
  const l = config.model.lora;
  return planTrainingMemory({
    config: model,
    rows: Math.max(1, Math.min(microRows, rows)),
    tokens: config.rollout.maxTotalTokens,
    lora: l.rank > 0 ? { rank: l.rank, alpha: l.alpha, modules: [...l.modules] } : null,
    recompute: config.model.recomputeActivations,
    frozenWeights: config.model.frozenWeights,
    reference: !sft,
    optimizer: true,
    critic: config.algorithm.name === 'ppo',
    rolloutRows: sft ? 0 : rows,
    rolloutLength: config.rollout.maxTotalTokens,
  });
}

export interface MicroBatchChoice {
  /** Rows per forward/backward (the last micro-batch of an update may hold fewer). */
  rows: number;
  /** Rows per optimizer step (an actor mini-batch or an SFT batch): rows < updateRows accumulates. */
  updateRows: number;
  /** The plan at `rows`. */
  plan: MemoryPlan;
  /** The budget in bytes (0 = none). */
  budget: number;
  /** Whether plan.peak fits the budget (always with no budget) and every tensor fits one binding. */
  fits: boolean;
  /** The adapter's maxStorageBufferBindingSize the choice respects (0 = not checked). */
  bindingLimit: number;
  /** Whether plan.largestBinding fits bindingLimit (always when it is 0). */
  fitsBinding: boolean;
  /** Whether `rows` was chosen by the planner (train.microBatchRows = 0) or set in the config. */
  auto: boolean;
}

/**
 * The micro-batch of a run: train.microBatchRows when set (capped at the update's rows), else the
 * largest number of rows whose planned peak fits `budgetBytes` (train.memoryBudgetMiB by default) and
 * whose largest activation fits `bindingLimitBytes` (the adapter's maxStorageBufferBindingSize, 0 =
 * unchecked; 128 MiB on lavapipe, SwiftShader and many laptops: 32 × 8 episodes of 1,024 tokens bind
 * 384 MiB at qwen-tiny's MLP), or the whole update when neither limits it. When not even one row
 * fits, `fits` is false and `rows` is 1. Pure: nothing is allocated.
 */
export function pickMicroBatchRows(
  model: ModelConfig,
  config: TrainConfig,
  budgetBytes = config.train.memoryBudgetMiB * MiB,
  bindingLimitBytes = 0,
): MicroBatchChoice {
  const whole = updateRows(config);
  const fitsBindingOf = (plan: MemoryPlan) =>
    bindingLimitBytes <= 0 || plan.largestBinding <= bindingLimitBytes;
  const fitsIn = (plan: MemoryPlan) => (budgetBytes <= 0 || plan.peak <= budgetBytes) && fitsBindingOf(plan);
  const at = (rows: number, auto: boolean): MicroBatchChoice => {
    const plan = trainingMemoryPlan(model, config, rows);
    const fitsBinding = fitsBindingOf(plan);
    return {
      rows,
      updateRows: whole,
      plan,
      budget: budgetBytes,
      fits: fitsIn(plan),
      bindingLimit: bindingLimitBytes,
      fitsBinding,
      auto,
    };
  };
  const set = config.train.microBatchRows;
  if (set > 0) return at(Math.min(set, whole), false);
  if (budgetBytes <= 0 && bindingLimitBytes <= 0) return at(whole, true);
  // The planned peak does not fall as rows grow: the largest fitting size by bisection.
  let lo = 1;
  let hi = whole;
  if (!fitsIn(trainingMemoryPlan(model, config, 1))) return at(1, true);
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (fitsIn(trainingMemoryPlan(model, config, mid))) lo = mid;
    else hi = mid - 1;
  }
  return at(lo, true);
}

/** A short phrase for people: "micro-batches of 2 of the 8 rows per update" or "8 rows per update". */
export function describeMicroBatch(choice: MicroBatchChoice): string {
  return choice.rows < choice.updateRows
    ? `micro-batches of ${choice.rows} of the ${choice.updateRows} rows per update`
    : `${choice.updateRows} row${choice.updateRows === 1 ? '' : 's'} per update in one pass`;
}
