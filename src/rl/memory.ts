// The memory planner applied to a run's config (pure: the trainer refuses with it before allocating,
// the lab's Model screen shows it before training starts).
import type { ModelConfig } from '../agent/model/config.ts';
import { type MemoryPlan, planTrainingMemory } from '../agent/model/memory-plan.ts';
import type { TrainConfig } from './config.ts';

/**
 * The planner's prediction for a run of `config` on a model of `model`'s shape: every episode of a
 * step (or an SFT batch) padded to rollout.maxTotalTokens, the LM head over every position: an upper
 * bound of the update's peak, and the rollout's cache.
 */
export function trainingMemoryPlan(model: ModelConfig, config: TrainConfig): MemoryPlan {
  const sft = config.algorithm.name === 'sft';
  const rows = sft
    ? config.sft.batchSize
    : config.rollout.questionsPerStep * config.rollout.samplesPerQuestion;
  const l = config.model.lora;
  return planTrainingMemory({
    config: model,
    rows,
    tokens: config.rollout.maxTotalTokens,
    lora: l.rank > 0 ? { rank: l.rank, alpha: l.alpha, modules: [...l.modules] } : null,
    recompute: config.model.recomputeActivations,
    reference: !sft,
    optimizer: true,
    critic: config.algorithm.name === 'ppo',
    rolloutRows: sft ? 0 : rows,
    rolloutLength: config.rollout.maxTotalTokens,
  });
}
