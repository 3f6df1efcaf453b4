// The trainer: rollouts → rewards → advantages → update, one step at a time, in Node (scripts/train.ts)
// and in the browser's worker alike. One step function (Trainer.step) serves the CLI, the tests and the
// benchmarks; it runs either an RL step (GRPO, Dr.GRPO, PPO, REINFORCE++, REINFORCE++-baseline, RLOO)
// or a supervised warm-start step (SFT on the oracle's traces, src/rl/sft.ts).
//
// One RL step, in order (phases are timed and reported):
//   rollout    questionsPerStep tasks × G samples decode together (src/rl/rollout.ts); each
//              trajectory keeps the exact ids, their sources and the sampler's log-probs
//   batch      trajectories → [B, T] arrays: targets, loss / advantage masks, token rewards (batch.ts)
//   reference  the frozen initial model's log-probs (KL to reference: metric, loss or reward)
//   values     the critic's values (PPO only)
//   update     advantages once over the whole batch on the GPU (advantage.wgsl); then for each epoch
//              and mini-batch: per micro-batch (train.microBatchRows rows) a forward (log-probs and
//              entropies of the current policy; with one update per step these are also the "old"
//              ones), the actor loss and its gradient normalised by the whole mini-batch
//              (policy-loss.wgsl's globals) and a backward adding into the gradients; then one grad
//              norm and one AdamW step; a step whose loss or grad norm is not finite is skipped with
//              weights and optimizer state untouched
//   critic     the clipped value loss and the critic's update (PPO only), in the same micro-batches
//   metrics    one readback of the loss stats and per-token arrays; reward, EM, F1, KL, entropy,
//              clip fractions, approx-KL, mismatch KL, grad norm, lengths, turns, tool calls, times
//
// Everything random derives from (config.seed, step): the questions of a step, the sampler's seed.
// With the weights and the optimizer state restored bit for bit, a resumed run repeats the metrics of
// an uninterrupted one.

import { type Checkpoint, saveCheckpoint } from '../agent/model/checkpoint.ts';
import {
  initLoraWeights,
  type LoraConfig,
  loadPeftAdapter,
  mergeLora,
  PEFT_CONFIG_FILE,
  PEFT_WEIGHTS_FILE,
  savePeftAdapter,
} from '../agent/model/lora.ts';
import { describeMemoryPlan } from '../agent/model/memory-plan.ts';
import { packBatch, QwenGpuModel } from '../agent/model/qwen-gpu.ts';
import { parseSafetensors, serializeSafetensors, tensorToFloat32 } from '../agent/model/safetensors.ts';
import { QwenTokenizer } from '../agent/tokenizer/qwen-tokenizer.ts';
import { createOraclePolicy } from '../env/policies/oracle.ts';
import type { Policy } from '../env/policies/policy.ts';
import { TASK_PRESETS } from '../env/presets.ts';
import { normalizeAnswer } from '../env/reward.ts';
import { createRng, hash32 } from '../env/rng.ts';
import type { QaTask } from '../env/tasks/schema.ts';
import {
  generateSyntheticDataset,
  type SyntheticDataset,
  type SyntheticQuestionType,
} from '../env/tasks/synthetic.ts';
import type { ToolEnvOptions } from '../env/tool-env.ts';
import { corpusSearchTools, type TaskTools } from '../env/tools/search.ts';
import { formatBytes } from '../gpu/errors.ts';
import { advantage } from '../gpu/kernels/advantage.ts';
import { AdamW, gradNorm, readGradNorm } from '../gpu/kernels/optimizer.ts';
import { POLICY_STAT, policyLoss, VALUE_STAT, valueLoss } from '../gpu/kernels/policy-loss.ts';
import type { Gpu } from '../gpu/runtime.ts';
import type { Tensor } from '../gpu/tensor.ts';
import { buildTrainingBatch, sliceRows, type TrainableEpisode, type TrainingBatch } from './batch.ts';
import type { TrainConfig } from './config.ts';
import { groupsWithScoreSpread } from './core-algos.ts';
import { ValueModel } from './critic.ts';
import {
  type EpisodeEvidence,
  type EvidenceSummary,
  episodeEvidence,
  summarizeEvidence,
} from './evidence.ts';
import { describeMicroBatch, MiB, type MicroBatchChoice, pickMicroBatchRows } from './memory.ts';
import { type RolloutEvent, runRollouts, type Trajectory } from './rollout.ts';
import {
  buildSftTraces,
  copyDrillBatch,
  copyDrillRng,
  inputNoiseRng,
  noisyInputIds,
  type SftTrace,
  traceTokenPool,
} from './sft.ts';
import { type RunStorage, readText } from './storage.ts';

/** One line of metrics.jsonl: flat numeric keys (and a few strings). */
export type StepMetrics = Record<string, number | string>;

export type TrainerPhase =
  | 'rollout'
  | 'reference'
  | 'values'
  | 'update'
  | 'critic'
  | 'evaluate'
  | 'checkpoint';

export interface TrainerHooks {
  /** Called when a phase starts (progress display). */
  onPhase?: (phase: TrainerPhase, step: number) => void;
  /** Rollout events of the training step (the browser's live view). */
  onRolloutEvent?: (event: RolloutEvent) => void;
  /** The step's training batch, before the update reads it (token inspector; tests inject faults here). */
  onBatch?: (batch: TrainingBatch) => void;
  /** After an RL step's update: the per-position arrays it read back (the browser's token inspector). */
  onUpdateArrays?: (arrays: UpdateArrays) => void;
}

/**
 * Per-position arrays of an RL step, [B, T] row-major like the batch (position i scores token i + 1):
 * the first epoch's log-probs (each row's first forward), the reference's log-probs and the advantages.
 */
export interface UpdateArrays {
  batch: TrainingBatch;
  logprob: Float32Array;
  ref: Float32Array;
  advantages: Float32Array;
  /** PPO's critic values before the step's update (what GAE read); null without a critic. */
  values: Float32Array | null;
}

export interface EvalResult {
  em: number;
  f1: number;
  reward: number;
  turns: number;
  toolCalls: number;
  formatValid: number;
  /** Share of the policy's turns cut at maxNewTokensPerTurn (mostly repetition loops). */
  truncatedTurns: number;
  n: number;
  /** EM and F1 per question type (the task's `type`; 'untyped' where it has none). */
  byType: Record<string, { n: number; em: number; f1: number }>;
  /**
   * The most frequent normalised answer and its share of the episodes (no answer counts as ""). A
   * policy that answers "no" to every question shows as { answer: "no", share: ≈ 1 }.
   */
  modalAnswer: { answer: string; share: number };
  /** Share of the episodes by outcome: right, no answer, wrong with none / some / all of the supporting passages found (evidence.ts). */
  byOutcome: EvidenceSummary['byOutcome'];
  /** Mean share of the supporting passages an episode's searches returned. */
  supportingRecall: number;
  /** One per trajectory, in the same order. */
  evidence: EpisodeEvidence[];
  trajectories: Trajectory[];
}

/** How Trainer.evaluate decodes: greedy, one episode per question, unless told otherwise. */
export interface EvalSampling {
  /** Episodes per question (a group, as in training). Default 1. */
  samplesPerQuestion?: number;
  /** 0 = greedy (the default); > 0 samples with the config's topP / topK. */
  temperature?: number;
  /** u32 seed of the batch. Default 0. */
  seed?: number;
}

const STATE_FILE = 'trainer-state.json';
/** With LoRA, a checkpoint's PEFT adapter files live in this subfolder. */
const ADAPTER_DIR = 'adapter';

/** A trajectory as the batch builder sees it: its process rewards already weighted (reward.processWeight). */
export function trajectoryEpisode(t: Trajectory, processWeight: number): TrainableEpisode {
  return {
    ids: t.ids,
    sources: t.sources,
    logprobs: t.logprobs,
    group: t.group,
    outcome: t.outcome?.outcome ?? 0,
    process:
      processWeight === 0
        ? []
        : t.processRewards.map((p) => ({ tokenIndex: p.tokenIndex, reward: processWeight * p.total })),
  };
}

/**
 * The training split of the synthetic world of `seed` (task's hops and types): `size` questions and the
 * search over that world's passages (or each question's own, with task.corpus 'question').
 */
export function trainWorld(
  t: TrainConfig['task'],
  seed: number,
  size: number,
): { tasks: QaTask[]; tools: TaskTools } {
  const search = TASK_PRESETS[t.preset].search;
  const world = generateSyntheticDataset({
    seed,
    trainSize: size,
    testSize: 1,
    hops: t.hops,
    ...(t.types.length > 0 ? { types: t.types as SyntheticQuestionType[] } : {}),
  });
  return {
    tasks: world.train.tasks.slice(0, size),
    tools: corpusSearchTools(t.corpus, world.train.corpus, search),
  };
}

/**
 * The training splits of several synthetic worlds as one question set (task.trainWorldSeeds):
 * task.trainSize questions shared out evenly, ids prefixed with the world's seed (each world numbers
 * its questions from 0), and each question searched over its own world (trainWorld).
 */
export function trainWorlds(
  t: TrainConfig['task'],
  seeds: readonly number[],
): { tasks: QaTask[]; tools: TaskTools } {
  const perWorld = Math.ceil(t.trainSize / seeds.length);
  const tasks: QaTask[] = [];
  const toolsById = new Map<string, TaskTools>();
  for (const seed of seeds) {
    const size = Math.min(perWorld, t.trainSize - tasks.length);
    if (size <= 0) break;
    const world = trainWorld(t, seed, size);
    for (const task of world.tasks) {
      const id = `s${seed}-${task.id}`;
      tasks.push({ ...task, id });
      toolsById.set(id, world.tools);
    }
  }
  return {
    tasks,
    tools: (task) => {
      const tools = toolsById.get(task.id);
      if (!tools) throw new Error(`trainWorlds: ${task.id} is not one of these worlds' questions`);
      return tools(task);
    },
  };
}

/** Episode reward as the trainer pays it: outcome plus weighted process rewards. */
export function episodeReward(t: Trajectory, processWeight: number): number {
  return (t.outcome?.outcome ?? 0) + processWeight * t.processRewards.reduce((s, p) => s + p.total, 0);
}

export { trainingMemoryPlan } from './memory.ts';

export class Trainer {
  readonly gpu: Gpu;
  readonly config: TrainConfig;
  readonly tokenizer: QwenTokenizer;
  readonly policy: QwenGpuModel;
  /** The frozen initial model: KL to reference. null with LoRA: the policy with its adapters off is. */
  readonly reference: QwenGpuModel | null;
  readonly critic: ValueModel | null;
  readonly actorOpt: AdamW;
  readonly criticOpt: AdamW | null;
  readonly dataset: SyntheticDataset;
  readonly initial: Checkpoint;
  readonly storage: RunStorage | null;
  /**
   * Rows per forward/backward (train.microBatchRows, or the planner's choice): each optimizer step
   * accumulates gradients over micro-batches of this many rows.
   */
  readonly microBatch: MicroBatchChoice;
  /** Steps completed. */
  step = 0;
  /** Steps whose update was skipped (non-finite loss or gradient). */
  skippedSteps = 0;
  /** The last RL step's trajectories (for samples/ and the UI). */
  lastTrajectories: Trajectory[] = [];
  /** The search tools of the train and test splits. */
  readonly trainTools: TaskTools;
  readonly testTools: TaskTools;
  /** RL's questions and their tools: the train split, or the worlds of task.trainWorldSeeds. */
  readonly rlTasks: QaTask[];
  readonly rlTools: TaskTools;
  private sftTraces: SftTrace[] | null = null;
  /** algorithm.oracleTraces' oracle (made on first use). */
  private oracle: Policy | null = null;
  /** The copy drill's token pool: the distinct ids of sftTraces. */
  private copyPool: number[] | null = null;

  private constructor(gpu: Gpu, config: TrainConfig, initial: Checkpoint, storage: RunStorage | null) {
    this.gpu = gpu;
    this.config = config;
    this.initial = initial;
    this.storage = storage;
    this.microBatch = pickTrainerMicroBatch(gpu, initial, config);
    this.tokenizer = QwenTokenizer.fromFiles(initial.tokenizerFiles);
    const weights = new Map([...initial.tensors].map(([k, t]) => [k, { shape: t.shape, data: t.data }]));
    // A LoRA run may keep its frozen base in half precision (model.frozenWeights), uploaded as such.
    const fw = config.model.frozenWeights;
    const frozenDtype =
      config.model.lora.rank > 0 && fw !== 'f32'
        ? fw === 'auto'
          ? gpu.hasF16
            ? 'f16'
            : 'bf16'
          : fw
        : undefined;
    this.policy = new QwenGpuModel(gpu, initial.config, weights, { frozenDtype });
    this.policy.recomputeActivations = config.model.recomputeActivations;
    const lora = this.loraConfig;
    if (lora) {
      this.policy.addLora(lora, initLoraWeights(initial.config, lora, hash32(`${config.seed}:lora`)));
      this.reference = null;
    } else {
      this.reference = new QwenGpuModel(gpu, initial.config, weights);
    }
    const a = config.actor;
    const rl = config.algorithm.name !== 'sft';
    this.actorOpt = new AdamW(gpu, this.policy.trainableParams(), {
      lr: rl ? a.lr : config.sft.lr,
      betas: a.betas,
      weightDecay: a.weightDecay,
    });
    if (config.algorithm.name === 'ppo') {
      this.critic = new ValueModel(gpu, initial.config, weights);
      this.criticOpt = new AdamW(gpu, this.critic.params(), {
        lr: config.critic.lr,
        betas: a.betas,
        weightDecay: a.weightDecay,
      });
    } else {
      this.critic = null;
      this.criticOpt = null;
    }
    const t = config.task;
    this.dataset = generateSyntheticDataset({
      seed: t.seed,
      trainSize: t.trainSize,
      testSize: t.testSize,
      hops: t.hops,
      ...(t.types.length > 0 ? { types: t.types as SyntheticQuestionType[] } : {}),
    });
    const search = TASK_PRESETS[t.preset].search;
    this.trainTools = corpusSearchTools(t.corpus, this.dataset.train.corpus, search);
    this.testTools = corpusSearchTools(t.corpus, this.dataset.test.corpus, search);
    if (t.trainWorldSeeds.length === 0) {
      this.rlTasks = this.dataset.train.tasks;
      this.rlTools = this.trainTools;
    } else {
      const worlds = trainWorlds(t, t.trainWorldSeeds);
      this.rlTasks = worlds.tasks;
      this.rlTools = worlds.tools;
    }
  }

  /**
   * A trainer from the initial checkpoint (also the KL reference). With `storage` holding an earlier
   * run of the same config, resume=true continues from its last checkpoint.
   */
  static async create(
    gpu: Gpu,
    config: TrainConfig,
    initial: Checkpoint,
    options: { storage?: RunStorage; resume?: boolean } = {},
  ): Promise<Trainer> {
    if (initial.tokenizerFiles.size === 0)
      throw new Error(`the model at ${config.model.path} has no tokenizer files`);
    const choice = pickTrainerMicroBatch(gpu, initial, config);
    if (!choice.fitsBinding) {
      throw new Error(
        `one forward of ${describeMicroBatch(choice)} at rollout.maxTotalTokens ${config.rollout.maxTotalTokens} ` +
          `binds a ${formatBytes(choice.plan.largestBinding)} tensor, over this adapter's ` +
          `maxStorageBufferBindingSize (${formatBytes(choice.bindingLimit)}): ` +
          (choice.auto ? '' : 'lower train.microBatchRows (0 picks the largest micro-batch that fits) or ') +
          'lower rollout.maxTotalTokens',
      );
    }
    if (!choice.fits) {
      const rolloutBound =
        choice.plan.rollout > 0 && choice.plan.weights + choice.plan.rollout >= choice.plan.updatePeak;
      const fixes = [
        ...(choice.auto ? [] : ['lower train.microBatchRows (0 picks the largest micro-batch that fits)']),
        ...(rolloutBound || choice.rows === 1
          ? ['lower rollout.questionsPerStep × rollout.samplesPerQuestion']
          : []),
        'lower rollout.maxTotalTokens',
        'train LoRA adapters (model.lora.rank)',
        ...(config.model.recomputeActivations ? [] : ['set model.recomputeActivations']),
        'or raise train.memoryBudgetMiB',
      ];
      throw new Error(
        `the memory planner predicts ${describeMemoryPlan(choice.plan)} with ${describeMicroBatch(choice)}, ` +
          `over train.memoryBudgetMiB (${config.train.memoryBudgetMiB} MiB)` +
          `${choice.auto ? ' even with one row per micro-batch' : ''}: ${fixes.join(', ')}`,
      );
    }
    const trainer = new Trainer(gpu, config, initial, options.storage ?? null);
    if (options.resume) {
      if (!options.storage) throw new Error('resume needs the run folder');
      await trainer.restoreLatest();
    }
    return trainer;
  }

  /** The tool environment settings of the config's task. */
  envOptions(): ToolEnvOptions {
    const c = this.config;
    return {
      maxTurns: c.rollout.maxTurns,
      maxToolCalls: c.rollout.maxToolCalls,
      systemPrompt: TASK_PRESETS[c.task.preset].systemPrompt,
      outcome: {
        metric: c.reward.outcomeMetric,
        formatWeight: c.reward.formatWeight,
        answerWeight: c.reward.answerWeight,
      },
    };
  }

  /** The questions of a step: an epoch-wise shuffle of rlTasks, seeded by (seed, epoch). */
  questionsFor(step: number, count: number): QaTask[] {
    const tasks = this.rlTasks;
    const out: QaTask[] = [];
    for (let k = 0; k < count; k++) {
      const flat = (step - 1) * count + k;
      const epoch = Math.floor(flat / tasks.length);
      const order = createRng(hash32(`${this.config.seed}:epoch:${epoch}`)).shuffle(tasks.map((_, i) => i));
      out.push(tasks[order[flat % tasks.length]]);
    }
    return out;
  }

  /**
   * algorithm.oracleTraces: the oracle's trace of each question (src/rl/sft.ts), an episode of that
   * question's group scored with the rewards a rollout pays. Traces the oracle gets wrong are left out
   * (buildSftTraces), and so are traces longer than rollout.maxTotalTokens, which no sampled episode can
   * be and the step's memory plan does not cover.
   */
  private async oracleEpisodes(questions: readonly QaTask[]): Promise<{
    rows: Array<{ episode: TrainableEpisode; reward: number; oracle: true }>;
    tooLong: number;
  }> {
    const c = this.config;
    const pw = c.reward.processWeight;
    this.oracle ??= createOraclePolicy({ style: TASK_PRESETS[c.task.preset].oracleStyle });
    const rows: Array<{ episode: TrainableEpisode; reward: number; oracle: true }> = [];
    let tooLong = 0;
    for (const [group, task] of questions.entries()) {
      const [trace] = await buildSftTraces({
        tokenizer: this.tokenizer,
        tasks: [task],
        toolsFor: this.rlTools,
        env: this.envOptions(),
        oracle: this.oracle,
      });
      if (!trace) continue;
      if (trace.ids.length > c.rollout.maxTotalTokens) {
        tooLong++;
        continue;
      }
      const process = trace.process.map((p) => ({ tokenIndex: p.tokenIndex, reward: pw * p.reward }));
      rows.push({
        // logprobs: no sampler's; the update's own stand in (ratio 1), and the metrics skip these rows
        episode: { ...trace, group, process: pw === 0 ? [] : process },
        reward: trace.outcome + process.reduce((sum, p) => sum + p.reward, 0),
        oracle: true,
      });
    }
    return { rows, tooLong };
  }

  private lrAt(step: number, base: number): number {
    const w = this.config.train.warmupSteps;
    return w > 0 && step <= w ? (base * step) / w : base;
  }

  /** The actor's rate: 0 in the critic's warm-up, then its schedule counts the actor's own updates
   *  (as verl's, whose actor scheduler steps only when the actor does). */
  private actorLrAt(step: number): number {
    if (this.inCriticWarmup(step)) return 0;
    return this.lrAt(step - (this.critic ? this.config.critic.warmupSteps : 0), this.config.actor.lr);
  }

  /** PPO's critic warm-up (critic.warmupSteps): steps 1..N train the critic alone. */
  private inCriticWarmup(step: number): boolean {
    return this.critic !== null && step <= this.config.critic.warmupSteps;
  }

  /** One training step (RL or SFT by the config's algorithm); returns its metrics line. */
  async trainStep(hooks: TrainerHooks = {}): Promise<StepMetrics> {
    this.gpu.resetPeakMemory();
    const metrics = await (this.config.algorithm.name === 'sft' ? this.sftStep(hooks) : this.rlStep(hooks));
    // GPU memory: the step's peak of live tensors; then the pool gives back the buffers this step did
    // not need (sizes of earlier steps and evaluations), and what the process still holds (live
    // tensors plus the pool's free buffers).
    const stats = this.gpu.stats;
    metrics['perf/gpu_peak_live_mib'] = stats.peakLiveBytes / MiB;
    metrics['perf/gpu_pool_trimmed_mib'] = this.gpu.trimPoolToRecentUse() / MiB;
    const held = this.gpu.stats;
    metrics['perf/gpu_held_mib'] = (held.liveBytes + held.pooledBytes) / MiB;
    return metrics;
  }

  // ------------------------------------------------------------------------------------ RL

  private async rlStep(hooks: TrainerHooks): Promise<StepMetrics> {
    const c = this.config;
    const gpu = this.gpu;
    const step = this.step + 1;
    const times: Record<string, number> = {};
    const gpuBefore = gpu.stats;
    let mark = performance.now();
    const lap = (name: string) => {
      const now = performance.now();
      times[name] = (times[name] ?? 0) + (now - mark) / 1000;
      mark = now;
    };

    // rollout
    hooks.onPhase?.('rollout', step);
    const questions = this.questionsFor(step, c.rollout.questionsPerStep);
    const ro = await runRollouts({
      model: this.policy,
      tokenizer: this.tokenizer,
      tasks: questions,
      samplesPerTask: c.rollout.samplesPerQuestion,
      toolsFor: this.rlTools,
      env: this.envOptions(),
      maxNewTokensPerTurn: c.rollout.maxNewTokensPerTurn,
      maxTotalTokens: c.rollout.maxTotalTokens,
      temperature: c.rollout.temperature,
      topP: c.rollout.topP,
      topK: c.rollout.topK,
      seed: hash32(`${c.seed}:rollout:${step}`),
      onEvent: hooks.onRolloutEvent,
    });
    const trajectories = ro.trajectories;
    this.lastTrajectories = trajectories;
    lap('rollout');

    // The step's episodes: the sampled ones, then (algorithm.oracleTraces) the oracle's trace of each
    // question, in its question's group; rows keep this order in the batch.
    const pw = c.reward.processWeight;
    const sampled = trajectories.map((t) => ({
      episode: trajectoryEpisode(t, pw),
      reward: episodeReward(t, pw),
      oracle: false,
    }));
    const oracleRows = c.algorithm.oracleTraces ? await this.oracleEpisodes(questions) : null;
    if (oracleRows) lap('oracle');
    const episodes = [...sampled, ...(oracleRows?.rows ?? [])];
    // DAPO's group filter (algorithm.filterGroups): only groups whose rewards differ are trained. When
    // none do, the batch keeps every row for the metrics' forward and the step makes no update.
    let trained = episodes;
    let noUpdate = false;
    if (c.algorithm.filterGroups) {
      const keep = groupsWithScoreSpread(
        episodes.map((e) => e.reward),
        episodes.map((e) => e.episode.group),
      );
      trained = episodes.filter((_, i) => keep[i]);
      noUpdate = trained.length === 0;
      if (noUpdate) trained = episodes;
    }
    const batch = buildTrainingBatch(
      trained.map((e) => e.episode),
      // processWeight: 1, as trajectoryEpisode has weighted them (the filter above pays them alike).
      { lossMask: c.ablation.lossMask, advantageMask: c.ablation.advantageMask, processWeight: 1 },
    );
    hooks.onBatch?.(batch);
    const { B, T } = batch;
    const N = B * T;
    // Every forward and backward of the step runs in micro-batches (train.microBatchRows): the rows
    // [m0, m1) of `ranges`, mini-batch by mini-batch, so no pass holds more rows than the planner fitted.
    const rowsPer = B / c.actor.miniBatches;
    const miniBatches = Array.from({ length: c.actor.miniBatches }, (_, mb) =>
      microBatchRanges(mb * rowsPer, (mb + 1) * rowsPer, this.microBatch.rows),
    );
    const ranges = miniBatches.flat();

    // reference log-probs (always: KL to the reference is reported every step)
    hooks.onPhase?.('reference', step);
    const trainMaskU32 = Uint32Array.from(batch.lossMask, (m, i) =>
      m > 0 || batch.policyMask[i] > 0 ? 1 : 0,
    );
    const refLogprob = this.referenceLogprobs(batch, trainMaskU32, ranges);
    // GPU work is recorded lazily: without a wait here the reference's GPU time would be counted in the
    // update, the next phase that reads back (time/reference_s read 0 s at every step).
    await gpu.sync();
    lap('reference');

    // old values (PPO)
    let oldValues: Tensor | null = null;
    if (this.critic) {
      hooks.onPhase?.('values', step);
      const critic = this.critic;
      oldValues = this.perToken(batch, ranges, 'ppo.oldValues', (sub) => {
        const vf = critic.forward(sub.tokens);
        return { out: vf.values, release: () => vf.release() };
      });
      await gpu.sync();
      lap('values');
    }

    // update
    hooks.onPhase?.('update', step);
    const single = c.actor.ppoEpochs * c.actor.miniBatches === 1;
    const klInReward = c.reward.klInRewardCoef > 0;
    const temperature = c.rollout.temperature > 0 ? c.rollout.temperature : 1;
    // The "old" log-probs, which are also the metrics' (mismatch KL, KL to the reference), with the
    // entropies: the policy before this step's first optimizer step. With one update per step they
    // are the update forward's own (detached), filled micro-batch by micro-batch, so the first update
    // has ratio 1 exactly; with several updates (or when the in-reward KL needs all of them before the
    // first micro-batch's loss) a forward first: the update's forwards of mini-batch 2 onwards see
    // moved weights.
    // PPO's critic warm-up (critic.warmupSteps): steps 1..N train the critic alone on the frozen
    // policy's rollouts, so that GAE reads learned values when the actor starts. verl's
    // trainer.critic_warmup = k updates the actor from its global step k on (counted from 1): k − 1 steps.
    const actorUpdates = !noUpdate && !this.inCriticWarmup(step);
    const ownOld = single && (!klInReward || ranges.length === 1) && actorUpdates;
    const oldLogprob = gpu.empty([N], 'f32', 'batch.oldLogprob');
    const oldEntropy = gpu.empty([N], 'f32', 'batch.oldEntropy');
    const keepOld = (fwd: { head: { logprob: Tensor; entropy: Tensor } }, m0: number, rows: number) => {
      const at = { offset: m0 * T * 4, size: rows * T * 4 };
      gpu.copy(fwd.head.logprob, { tensor: oldLogprob, ...at }); // detached
      gpu.copy(fwd.head.entropy, { tensor: oldEntropy, ...at });
    };
    if (!ownOld)
      this.eachMicroBatch(batch, ranges, (sub, m0) => {
        const fwd = this.policy.forward(sub.tokens, sub.targets, rowsOfArray(trainMaskU32, sub, m0), {
          temperature,
        });
        keepOld(fwd, m0, sub.B);
        fwd.release();
      });
    const lossMaskT = gpu.upload(batch.lossMask, [N], 'f32', 'batch.lossMask');
    const advMaskT = gpu.upload(batch.advMask, [N], 'f32', 'batch.advMask');
    const rewardsT = gpu.upload(batch.rewards, [N], 'f32', 'batch.rewards');
    const indexT = gpu.upload(batch.index, [B], 'u32', 'batch.index');
    // ablation.whitenOver "policy": GAE's advantages whitened over the policy's tokens, whatever its mask
    const whitenMaskT =
      c.ablation.whitenOver === 'policy'
        ? gpu.upload(batch.policyMask, [N], 'f32', 'batch.policyMask')
        : null;
    // Advantages need every row (group statistics, GAE over whole rows): computed once, before the first
    // loss; only the in-reward KL of a one-pass update waits for that pass's own log-probs.
    let advantages: Tensor | null = null;
    let returns: Tensor | null = null;
    const computeAdvantages = () =>
      ({ advantages, returns } = this.computeAdvantages(batch, {
        rewardsT,
        advMaskT,
        lossMaskT,
        indexT,
        whitenMaskT,
        oldLogprob,
        refLogprob,
        values: oldValues,
      }));
    if (!(ownOld && klInReward)) computeAdvantages();
    const actorStats: Float32Array[] = [];
    let gradNormValue = 0;
    let skipped = 0;
    for (let epoch = 0; epoch < (actorUpdates ? c.actor.ppoEpochs : 0); epoch++) {
      for (let mb = 0; mb < c.actor.miniBatches; mb++) {
        // Micro-batches add up to the mini-batch: the loss of each is normalised by the mini-batch's
        // active tokens and rows (policy-loss.wgsl's globals), so the accumulated gradient is the same.
        const globals = {
          ...lossDenominators(batch.lossMask, T, mb * rowsPer, (mb + 1) * rowsPer),
          maxLen: batch.maxResponseLength,
        };
        this.policy.zeroGrad();
        const stats = this.eachMicroBatch(batch, miniBatches[mb], (sub, m0) => {
          const fwd = this.policy.forward(sub.tokens, sub.targets, rowsOfArray(trainMaskU32, sub, m0), {
            temperature,
          });
          if (ownOld) keepOld(fwd, m0, sub.B);
          if (advantages === null) computeAdvantages();
          const view = this.rowView(batch, sub, m0);
          const loss = policyLoss(gpu, {
            logprob: fwd.head.logprob,
            oldLogprob: view(oldLogprob),
            advantages: view(advantages!),
            mask: view(lossMaskT),
            entropy: c.actor.entropyCoef !== 0 ? fwd.head.entropy : null,
            refLogprob: c.actor.klLossCoef !== 0 ? view(refLogprob) : null,
            B: sub.B,
            T,
            clipRatioLow: c.actor.clipRatioLow,
            clipRatioHigh: c.actor.clipRatioHigh,
            clipRatioC: c.actor.clipRatioC,
            mode: c.actor.lossAggMode,
            policyLossMode: c.actor.policyLoss,
            globals,
            entropyCoef: c.actor.entropyCoef,
            klCoef: c.actor.klLossCoef,
            klKind: c.actor.klLossKind,
          });
          this.policy.backward(fwd, loss.gLogprob, loss.gEntropy);
          fwd.release();
          loss.gLogprob.release();
          loss.gEntropy?.release();
          view.release();
          return loss.stats;
        });
        const grads = [...this.policy.trainableParams().keys()].map((n) => this.policy.grad(n));
        const norm = gradNorm(gpu, grads, { maxNorm: c.actor.maxGradNorm });
        const [statsArr, normInfo] = await Promise.all([
          this.readStats(stats, mergePolicyStats),
          readGradNorm(gpu, norm),
        ]);
        actorStats.push(statsArr);
        gradNormValue = normInfo.norm;
        if (!Number.isFinite(statsArr[0]) || normInfo.nonFinite || !Number.isFinite(normInfo.norm)) {
          skipped++;
        } else {
          this.actorOpt.step(this.policy.trainableGrads(), {
            gradNorm: norm,
            lr: this.actorLrAt(step),
          });
        }
        norm.release();
      }
    }
    lap('update');

    // critic: the actor's epochs × mini-batches, as verl's critic (its ppo_epochs and mini-batch size
    // default to the actor's). With one update per step its values equal the old ones and the value
    // clip (critic.clipRangeValue) cannot act; from the second update on it bounds the move.
    const valueStatsAll: Float32Array[] = [];
    if (this.critic && this.criticOpt && oldValues && returns) {
      hooks.onPhase?.('critic', step);
      const critic = this.critic;
      for (let epoch = 0; epoch < c.actor.ppoEpochs; epoch++) {
        for (let mb = 0; mb < c.actor.miniBatches; mb++) {
          const globals = {
            ...lossDenominators(batch.advMask, T, mb * rowsPer, (mb + 1) * rowsPer),
            maxLen: batch.maxResponseLength,
          };
          critic.zeroGrad();
          const stats = this.eachMicroBatch(batch, miniBatches[mb], (sub, m0) => {
            const vf = critic.forward(sub.tokens);
            const view = this.rowView(batch, sub, m0);
            const vl = valueLoss(gpu, {
              vpreds: vf.values,
              oldValues: view(oldValues!),
              returns: view(returns!),
              mask: view(advMaskT),
              B: sub.B,
              T,
              clipRangeValue: c.critic.clipRangeValue,
              mode: c.actor.lossAggMode,
              globals,
            });
            critic.backward(vf, vl.gValue);
            vf.release();
            vl.gValue.release();
            view.release();
            return vl.stats;
          });
          const grads = [...critic.grads().values()];
          const norm = gradNorm(gpu, grads, { maxNorm: c.critic.maxGradNorm });
          const [s, info] = await Promise.all([
            this.readStats(stats, mergeValueStats),
            readGradNorm(gpu, norm),
          ]);
          valueStatsAll.push(s);
          if (Number.isFinite(s[0]) && !info.nonFinite)
            this.criticOpt.step(critic.grads(), { gradNorm: norm, lr: this.lrAt(step, c.critic.lr) });
          else skipped++;
          norm.release();
        }
      }
      lap('critic');
    }

    // metrics: one more readback of the per-token arrays
    const [refArr, advArr, oldLogprobArr, oldEntropyArr, valuesArr] = (await gpu.readMany([
      refLogprob,
      advantages!,
      oldLogprob,
      oldEntropy,
      // the critic's values only for a hook that reads them (one more [B, T] readback)
      ...(oldValues && hooks.onUpdateArrays ? [oldValues] : []),
    ])) as Float32Array[];
    hooks.onUpdateArrays?.({
      batch,
      logprob: oldLogprobArr,
      ref: refArr,
      advantages: advArr,
      values: valuesArr ?? null,
    });
    for (const t of [
      refLogprob,
      oldLogprob,
      lossMaskT,
      advMaskT,
      rewardsT,
      indexT,
      whitenMaskT,
      advantages,
      returns,
      oldValues,
      oldEntropy,
    ] as (Tensor | null)[])
      t?.release();
    this.step = step;
    if (skipped > 0) this.skippedSteps++;
    const metrics = this.rlMetrics(step, questions, trajectories, batch, {
      logprob: oldLogprobArr,
      entropy: oldEntropyArr,
      ref: refArr,
      adv: advArr,
      actorStats,
      valueStats: valueStatsAll,
      gradNorm: gradNormValue,
      skipped,
      trainedGroups: c.algorithm.filterGroups
        ? new Set(noUpdate ? [] : trained.map((e) => e.episode.group)).size
        : null,
      oracleRow: trained.map((e) => e.oracle),
      oracle: oracleRows && { built: oracleRows.rows.length, tooLong: oracleRows.tooLong },
    });
    lap('metrics');
    const totalTime = Object.values(times).reduce((a, b) => a + b, 0);
    for (const [k, v] of Object.entries(times)) metrics[`time/${k}_s`] = v;
    metrics['time/step_s'] = totalTime;
    metrics['perf/rollout_tokens_per_s'] = ro.stats.policyTokens / Math.max(1e-9, times.rollout);
    metrics['perf/train_tokens_per_s'] = (N * c.actor.ppoEpochs) / Math.max(1e-9, times.update);
    metrics['train/real_tokens'] = batch.tokens.seg.reduce((n, s) => n + (s === 0 ? 0 : 1), 0);
    // How the step waited for the GPU: in Node each wait first sleeps through the predicted GPU time
    // (runtime.ts); a wait that finds the work done on waking slept too long.
    const gpuAfter = gpu.stats;
    metrics['perf/gpu_readbacks'] = gpuAfter.readbacks - gpuBefore.readbacks;
    metrics['perf/gpu_slept_waits'] = gpuAfter.sleptWaits - gpuBefore.sleptWaits;
    metrics['perf/gpu_overslept_waits'] = gpuAfter.oversleptWaits - gpuBefore.oversleptWaits;
    metrics['perf/gpu_sleep_s'] = (gpuAfter.sleptMs - gpuBefore.sleptMs) / 1000;
    return metrics;
  }

  /** Rows [start, start + n) of a per-token tensor, copied to its own tensor (mini-batches). */
  private rowsOf(t: Tensor, start: number, n: number): Tensor {
    const out = this.gpu.empty([n], t.dtype, `${t.label}.rows`);
    this.gpu.copy({ tensor: t, offset: start * 4, size: n * 4 }, out);
    return out;
  }

  /**
   * One pass per micro-batch [m0, m1) of `ranges`, in order, on rows [m0, m1) of `batch` (the batch
   * itself when a range covers it all); returns what each pass returned. An update's passes each run a
   * forward and a backward that adds into the gradients, between one zeroGrad and one optimizer step
   * (gradient accumulation); forward-only passes fill per-token tensors (perToken).
   */
  private eachMicroBatch<R>(
    batch: TrainingBatch,
    ranges: ReadonlyArray<readonly [number, number]>,
    pass: (sub: TrainingBatch, m0: number) => R,
  ): R[] {
    return ranges.map(([m0, m1]) => pass(m0 === 0 && m1 === batch.B ? batch : sliceRows(batch, m0, m1), m0));
  }

  /**
   * The step's per-token tensors (oldLogprob, advantages, masks, ...) cut to one micro-batch's rows, as
   * its loss reads them: the tensor itself when the micro-batch is the whole batch, else a copy of
   * its rows; release() frees the copies.
   */
  private rowView(batch: TrainingBatch, sub: TrainingBatch, m0: number) {
    const copies: Tensor[] = [];
    const view = (t: Tensor): Tensor => {
      if (sub.B === batch.B) return t;
      const out = this.rowsOf(t, m0 * batch.T, sub.B * batch.T);
      copies.push(out);
      return out;
    };
    return Object.assign(view, {
      release: () => {
        for (const t of copies) t.release();
      },
    });
  }

  /** A per-token f32 [N] tensor of the whole batch, assembled from a forward-only pass per micro-batch. */
  private perToken(
    batch: TrainingBatch,
    ranges: ReadonlyArray<readonly [number, number]>,
    label: string,
    pass: (sub: TrainingBatch, m0: number) => { out: Tensor; release(): void },
  ): Tensor {
    const { B, T } = batch;
    const out = this.gpu.empty([B * T], 'f32', label);
    this.eachMicroBatch(batch, ranges, (sub, m0) => {
      const r = pass(sub, m0);
      this.gpu.copy(r.out, { tensor: out, offset: m0 * T * 4, size: sub.B * T * 4 });
      r.release();
    });
    return out;
  }

  /** Reads the stats tensors of an update's micro-batches, releases them and merges them into one. */
  private async readStats(
    parts: Tensor[],
    merge: (parts: Float32Array[]) => Float32Array,
  ): Promise<Float32Array> {
    const arrays = (await this.gpu.readMany(parts)) as Float32Array[];
    for (const t of parts) t.release();
    return merge(arrays);
  }

  /** The LoRA settings when the actor trains adapters (model.lora.rank > 0), else null. */
  get loraConfig(): LoraConfig | null {
    const l = this.config.model.lora;
    return l.rank > 0 ? { rank: l.rank, alpha: l.alpha, modules: [...l.modules] } : null;
  }

  /** Log-probs under the KL reference: the frozen copy, or (LoRA) the policy with its adapters off. */
  private referenceLogprobs(
    batch: TrainingBatch,
    mask: Uint32Array,
    ranges: ReadonlyArray<readonly [number, number]>,
  ): Tensor {
    if (this.reference) return this.logprobsOnly(this.reference, batch, mask, ranges);
    this.policy.adaptersEnabled = false;
    try {
      return this.logprobsOnly(this.policy, batch, mask, ranges);
    } finally {
      this.policy.adaptersEnabled = true;
    }
  }

  /** Log-probs of a batch's targets under `model`, [N], one micro-batch of `ranges` at a time. */
  private logprobsOnly(
    model: QwenGpuModel,
    batch: TrainingBatch,
    mask: Uint32Array,
    ranges: ReadonlyArray<readonly [number, number]>,
  ): Tensor {
    const temperature = this.config.rollout.temperature > 0 ? this.config.rollout.temperature : 1;
    return this.perToken(batch, ranges, 'logprobs', (sub, m0) => {
      const fwd = model.forward(sub.tokens, sub.targets, rowsOfArray(mask, sub, m0), { temperature });
      return { out: fwd.head.logprob, release: () => fwd.release() };
    });
  }

  /**
   * Token rewards (with the optional KL penalty) → advantages and returns, on the GPU. The estimator runs
   * over the advantage mask; every position the loss reads gets an advantage too, so without the loss
   * mask the environment's tokens are trained with their episode's (GRPO, RLOO, REINFORCE++-baseline)
   * or the next policy token's (GAE, REINFORCE++) advantage, as in verl, where one mask serves both.
   */
  private computeAdvantages(
    batch: TrainingBatch,
    t: {
      rewardsT: Tensor;
      advMaskT: Tensor;
      lossMaskT: Tensor;
      indexT: Tensor;
      whitenMaskT: Tensor | null;
      oldLogprob: Tensor;
      refLogprob: Tensor;
      values: Tensor | null;
    },
  ): { advantages: Tensor; returns: Tensor } {
    const c = this.config;
    const estimator = c.algorithm.name;
    if (estimator === 'sft') throw new Error('SFT has no advantages');
    return advantage(this.gpu, {
      estimator,
      tokenRewards: t.rewardsT,
      mask: t.advMaskT,
      // mask ∪ loss mask, which the kernels' outMask must be: one mask contains the other (the loss
      // mask without the advantage-mask ablation, the advantage mask with it).
      outMask: c.ablation.advantageMask ? t.lossMaskT : t.advMaskT,
      index: t.indexT,
      values: t.values,
      B: batch.B,
      T: batch.T,
      gamma: c.algorithm.gamma,
      lam: c.algorithm.lam,
      whitenMask: t.whitenMaskT ?? undefined,
      // verl's in-reward KL: r − β·k(old, ref) on the advantage mask's tokens, before any estimator.
      klInReward:
        c.reward.klInRewardCoef > 0
          ? {
              logprob: t.oldLogprob,
              refLogprob: t.refLogprob,
              beta: c.reward.klInRewardCoef,
              kind: c.reward.klInRewardKind,
            }
          : null,
    });
  }

  private rlMetrics(
    step: number,
    questions: readonly QaTask[],
    trajectories: Trajectory[],
    batch: TrainingBatch,
    a: {
      logprob: Float32Array;
      entropy: Float32Array;
      ref: Float32Array;
      adv: Float32Array;
      actorStats: Float32Array[];
      valueStats: Float32Array[];
      gradNorm: number;
      skipped: number;
      /** Groups the update trained (algorithm.filterGroups), null without the filter. */
      trainedGroups: number | null;
      /** Per batch row: the oracle's trace (algorithm.oracleTraces) rather than a sampled episode. */
      oracleRow: readonly boolean[];
      /** algorithm.oracleTraces: traces built this step, and those left out as too long; else null. */
      oracle: { built: number; tooLong: number } | null;
    },
  ): StepMetrics {
    const c = this.config;
    const m: StepMetrics = { step, algorithm: c.algorithm.name };
    const rewards = trajectories.map((t) => episodeReward(t, c.reward.processWeight));
    Object.assign(m, summary('reward', rewards));
    m['episode/em'] = mean(trajectories.map((t) => t.outcome?.em ?? 0));
    m['episode/f1'] = mean(trajectories.map((t) => t.outcome?.f1 ?? 0));
    m['episode/format_valid'] = mean(trajectories.map((t) => (t.outcome?.formatValid ? 1 : 0)));
    m['episode/turns'] = mean(trajectories.map((t) => t.turns));
    m['episode/tool_calls'] = mean(trajectories.map((t) => t.toolCalls));
    // A trajectory's group is its question's index in the step's list.
    m['episode/supporting_recall'] = summarizeEvidence(
      trajectories.map((t) => episodeEvidence(t, questions[t.group].supportingIds)),
    ).supportingRecall;
    m['episode/truncated_turns'] = truncatedTurnShare(trajectories);
    m['episode/response_length'] = mean(
      trajectories.map((t) => t.sources.reduce((n, src) => n + (src === 'policy' ? 1 : 0), 0)),
    );
    m['episode/length'] = mean(trajectories.map((t) => t.ids.length));
    for (const t of trajectories) {
      const key = `done/${t.doneReason}`;
      m[key] = ((m[key] as number | undefined) ?? 0) + 1 / trajectories.length;
    }
    // Per-token statistics over the policy's own sampled tokens (not the oracle's rows).
    let n = 0;
    let kl = 0;
    let k3 = 0;
    let ent = 0;
    let mis1 = 0;
    let mis3 = 0;
    let misMax = 0;
    let oracleN = 0;
    let oracleLogprob = 0;
    for (let i = 0; i < batch.policyMask.length; i++) {
      if (batch.policyMask[i] === 0) continue;
      if (a.oracleRow[Math.floor(i / batch.T)]) {
        oracleN++;
        oracleLogprob += a.logprob[i];
        continue;
      }
      n++;
      const d = a.logprob[i] - a.ref[i];
      kl += d;
      k3 += Math.exp(-d) + d - 1;
      ent += a.entropy[i];
      const s = batch.oldLogprob[i] - a.logprob[i];
      mis1 += s;
      mis3 += Math.exp(-s) + s - 1;
      misMax = Math.max(misMax, Math.abs(s));
    }
    const per = (x: number) => (n > 0 ? x / n : 0);
    m['actor/kl_ref_k1'] = per(kl);
    m['actor/kl_ref_k3'] = per(k3);
    m['actor/entropy'] = per(ent);
    m['rollout/mismatch_kl_k1'] = per(mis1);
    m['rollout/mismatch_kl_k3'] = per(mis3);
    m['rollout/mismatch_max_abs'] = misMax;
    let advN = 0;
    let advSum = 0;
    for (let i = 0; i < a.adv.length; i++)
      if (batch.advMask[i] > 0) {
        advN++;
        advSum += a.adv[i];
      }
    m['actor/advantage_mean'] = advN > 0 ? advSum / advN : 0;
    // Means over the step's optimizer updates (epochs × mini-batches), as verl reduces its per-update
    // metrics; the gradient norm is the last update's. No actor statistics when the group filter left
    // nothing to train, or in the critic's warm-up (no loss was computed).
    if (a.actorStats.length > 0) {
      const over = (k: number) => mean(a.actorStats.map((s) => s[k]));
      m['actor/pg_loss'] = over(POLICY_STAT.pgLoss);
      m['actor/loss'] = over(POLICY_STAT.loss);
      m['actor/pg_clipfrac'] = over(POLICY_STAT.clipfrac);
      m['actor/pg_clipfrac_lower'] = over(POLICY_STAT.clipfracLower);
      m['actor/ppo_kl'] = over(POLICY_STAT.ppoKl);
      m['actor/grad_norm'] = a.gradNorm;
    }
    m['actor/lr'] = this.actorLrAt(step);
    const oracleRows = a.oracleRow.filter(Boolean).length;
    if (a.trainedGroups !== null) {
      m['train/trained_groups'] = a.trainedGroups / new Set(trajectories.map((t) => t.group)).size;
      // the sampled episodes trained, as a share of those sampled
      m['train/trained_rows'] = a.trainedGroups === 0 ? 0 : (batch.B - oracleRows) / trajectories.length;
    }
    if (a.oracle) {
      const q = questions.length;
      m['oracle/traces'] = a.oracle.built / q;
      m['oracle/too_long'] = a.oracle.tooLong / q;
      m['oracle/trained_rows'] = a.trainedGroups === 0 ? 0 : oracleRows / q;
      // how likely the policy finds the oracle's tokens (mean log-prob per token, before the update)
      m['oracle/logprob_mean'] = oracleN > 0 ? oracleLogprob / oracleN : 0;
    }
    if (a.valueStats.length > 0) {
      m['critic/vf_loss'] = mean(a.valueStats.map((s) => s[VALUE_STAT.loss]));
      m['critic/vf_clipfrac'] = mean(a.valueStats.map((s) => s[VALUE_STAT.clipfrac]));
    }
    if (this.critic) m['train/critic_warmup'] = this.inCriticWarmup(step) ? 1 : 0;
    m['train/skipped_updates'] = a.skipped;
    m['train/skipped_steps_total'] = this.skippedSteps;
    return m;
  }

  // ------------------------------------------------------------------------------------ SFT

  private async sftStep(hooks: TrainerHooks): Promise<StepMetrics> {
    const c = this.config;
    const gpu = this.gpu;
    const step = this.step + 1;
    hooks.onPhase?.('update', step);
    const t0 = performance.now();
    if (!this.sftTraces) {
      // Traces from the train splits of `sft.worlds` worlds (task seeds seed, seed + 1, ...): with one
      // world a small model memorises its names instead of learning to copy them from the question and
      // the passages, and fails on the held-out world.
      const t = c.task;
      const perWorld = Math.ceil(c.sft.traces / c.sft.worlds);
      const oracle = createOraclePolicy({ style: TASK_PRESETS[t.preset].oracleStyle });
      const traces: SftTrace[] = [];
      for (let w = 0; w < c.sft.worlds; w++) {
        const world =
          w === 0
            ? { tasks: this.dataset.train.tasks.slice(0, perWorld), tools: this.trainTools }
            : trainWorld(t, t.seed + w, perWorld);
        traces.push(
          ...(await buildSftTraces({
            tokenizer: this.tokenizer,
            tasks: world.tasks,
            toolsFor: world.tools,
            env: this.envOptions(),
            oracle,
          })),
        );
      }
      this.sftTraces = traces;
    }
    const traces = this.sftTraces;
    const picked: SftTrace[] = [];
    const bs = c.sft.batchSize;
    for (let k = 0; k < bs; k++) {
      const flat = (step - 1) * bs + k;
      const epoch = Math.floor(flat / traces.length);
      const order = createRng(hash32(`${c.seed}:sft:${epoch}`)).shuffle(traces.map((_, i) => i));
      picked.push(traces[order[flat % traces.length]]);
    }
    // lossMask false marks every response position (policy and environment); policyMask the policy's.
    const batch = buildTrainingBatch(picked, { lossMask: false });
    const N = batch.B * batch.T;
    // Input noise: wrong policy tokens in the inputs only; the targets stay the traces' (src/rl/sft.ts).
    let noised = 0;
    if (c.sft.inputNoise > 0) {
      const rng = inputNoiseRng(c.seed, step);
      picked.forEach((trace, b) => {
        const { ids, replaced } = noisyInputIds(trace.ids, trace.sources, c.sft.inputNoise, rng);
        for (const j of replaced) batch.tokens.ids[b * batch.T + j] = ids[j];
        noised += replaced.length;
      });
    }
    const wCtx = c.sft.contextWeight;
    const weight = Float32Array.from(batch.lossMask, (m, i) =>
      batch.policyMask[i] > 0 ? 1 : m > 0 ? wCtx : 0,
    );
    const maskU32 = Uint32Array.from(weight, (w) => (w > 0 ? 1 : 0));
    const totalWeight = weight.reduce((s, w) => s + w, 0);
    // d loss / d logprob of the weighted mean cross-entropy over the whole batch: each micro-batch's
    // rows take their part of it, so the accumulated gradient is the whole batch's.
    const g = gpu.upload(
      Float32Array.from(weight, (w) => -w / totalWeight),
      [N],
      'f32',
      'sft.gLogprob',
    );
    const lpT = gpu.empty([N], 'f32', 'sft.logprob');
    this.policy.zeroGrad();
    this.eachMicroBatch(batch, microBatchRanges(0, batch.B, this.microBatch.rows), (sub, m0) => {
      const fwd = this.policy.forward(sub.tokens, sub.targets, rowsOfArray(maskU32, sub, m0));
      const view = this.rowView(batch, sub, m0);
      this.policy.backward(fwd, view(g));
      gpu.copy(fwd.head.logprob, { tensor: lpT, offset: m0 * batch.T * 4, size: sub.B * batch.T * 4 });
      fwd.release();
      view.release();
    });
    const drill = c.sft.copyRows > 0 ? this.copyDrillPass(step, batch.T) : null;
    const grads = [...this.policy.trainableParams().keys()].map((n) => this.policy.grad(n));
    const norm = gradNorm(gpu, grads, { maxNorm: c.actor.maxGradNorm });
    const [lp, info, drillStats] = await Promise.all([
      gpu.readF32(lpT),
      readGradNorm(gpu, norm),
      drill ? drill.read() : null,
    ]);
    lpT.release();
    g.release();
    // sft/loss stays the policy tokens' mean NLL whatever contextWeight is, so runs compare.
    let nll = 0;
    let correct = 0;
    let count = 0;
    let ctxNll = 0;
    let ctxCount = 0;
    for (let i = 0; i < N; i++) {
      if (batch.policyMask[i] > 0) {
        nll -= lp[i];
        count++;
        if (lp[i] > Math.log(0.5)) correct++;
      } else if (maskU32[i]) {
        ctxNll -= lp[i];
        ctxCount++;
      }
    }
    const loss = nll / count;
    let skipped = 0;
    if (!Number.isFinite(loss) || info.nonFinite) {
      skipped = 1;
      this.skippedSteps++;
    } else {
      this.actorOpt.step(this.policy.trainableGrads(), { gradNorm: norm, lr: this.lrAt(step, c.sft.lr) });
    }
    norm.release();
    this.step = step;
    const seconds = (performance.now() - t0) / 1000;
    return {
      step,
      algorithm: 'sft',
      'sft/loss': loss,
      'sft/p_gt_half': correct / count,
      'sft/tokens': count,
      ...(c.sft.inputNoise > 0 ? { 'sft/noised_inputs': noised } : {}),
      ...(ctxCount > 0 ? { 'sft/context_loss': ctxNll / ctxCount } : {}),
      ...(drillStats ? { 'sft/copy_loss': drillStats.loss, 'sft/copy_p_gt_half': drillStats.pGtHalf } : {}),
      'actor/grad_norm': info.norm,
      'actor/lr': this.lrAt(step, c.sft.lr),
      'train/skipped_updates': skipped,
      'train/skipped_steps_total': this.skippedSteps,
      'time/update_s': seconds,
      'time/step_s': seconds,
      'perf/train_tokens_per_s': N / seconds,
    };
  }

  /**
   * The copy drill's forward and backward (src/rl/sft.ts), adding `sft.copyWeight` × its mean loss to
   * the step's gradients; its rows drawn from (seed, step), so a resumed run draws the same. Rows go in
   * micro-batches of no more tokens than the traces' micro-batches, which the memory plan covers.
   */
  private copyDrillPass(
    step: number,
    traceT: number,
  ): { read(): Promise<{ loss: number; pGtHalf: number }> } {
    const c = this.config.sft;
    const gpu = this.gpu;
    this.copyPool ??= traceTokenPool(this.sftTraces ?? []);
    const d = copyDrillBatch(
      this.copyPool,
      c.copyRows,
      c.copySpan,
      c.copyRepeats,
      copyDrillRng(this.config.seed, step),
    );
    const T = c.copySpan * c.copyRepeats;
    const rowsPer = Math.max(1, Math.floor((this.microBatch.rows * traceT) / T));
    const lpT = gpu.empty([c.copyRows * T], 'f32', 'sft.copyLogprob');
    for (const [r0, r1] of microBatchRanges(0, c.copyRows, rowsPer)) {
      const n = (r1 - r0) * T;
      const mask = d.mask.subarray(r0 * T, r1 * T);
      const fwd = this.policy.forward(
        packBatch(d.sequences.slice(r0, r1)),
        d.targets.subarray(r0 * T, r1 * T),
        mask,
      );
      const g = gpu.upload(
        Float32Array.from(mask, (m) => (m ? -c.copyWeight / d.count : 0)),
        [n],
        'f32',
        'sft.copyGLogprob',
      );
      this.policy.backward(fwd, g);
      gpu.copy(fwd.head.logprob, { tensor: lpT, offset: r0 * T * 4, size: n * 4 });
      fwd.release();
      g.release();
    }
    return {
      read: async () => {
        const lpAll = await gpu.readF32(lpT);
        lpT.release();
        let nll = 0;
        let hits = 0;
        for (let i = 0; i < lpAll.length; i++) {
          if (!d.mask[i]) continue;
          nll -= lpAll[i];
          if (lpAll[i] > Math.log(0.5)) hits++;
        }
        return { loss: nll / d.count, pGtHalf: hits / d.count };
      },
    };
  }

  // ------------------------------------------------------------------------------------ evaluation

  /**
   * Episodes on the first `n` questions of the held-out (test) split or of the training world: greedy,
   * one each, unless `sampling` asks for groups at a temperature (bench/pass-at-k.ts).
   */
  async evaluate(
    n = this.config.train.evalSize,
    split: 'test' | 'train' = 'test',
    sampling: EvalSampling = {},
  ): Promise<EvalResult> {
    const c = this.config;
    const tasks = (split === 'test' ? this.dataset.test.tasks : this.dataset.train.tasks).slice(0, n);
    const ro = await runRollouts({
      model: this.policy,
      tokenizer: this.tokenizer,
      tasks,
      samplesPerTask: sampling.samplesPerQuestion ?? 1,
      toolsFor: split === 'test' ? this.testTools : this.trainTools,
      env: this.envOptions(),
      maxNewTokensPerTurn: c.rollout.maxNewTokensPerTurn,
      maxTotalTokens: c.rollout.maxTotalTokens,
      temperature: sampling.temperature ?? 0,
      ...((sampling.temperature ?? 0) > 0 ? { topP: c.rollout.topP, topK: c.rollout.topK } : {}),
      seed: sampling.seed ?? 0,
    });
    const t = ro.trajectories;
    const supportOf = new Map(tasks.map((task) => [task.id, task.supportingIds]));
    const evidence = t.map((x) => episodeEvidence(x, supportOf.get(x.taskId) ?? []));
    const { byOutcome, supportingRecall } = summarizeEvidence(evidence);
    return {
      n: t.length,
      em: mean(t.map((x) => x.outcome?.em ?? 0)),
      f1: mean(t.map((x) => x.outcome?.f1 ?? 0)),
      reward: mean(t.map((x) => episodeReward(x, c.reward.processWeight))),
      turns: mean(t.map((x) => x.turns)),
      toolCalls: mean(t.map((x) => x.toolCalls)),
      formatValid: mean(t.map((x) => (x.outcome?.formatValid ? 1 : 0))),
      truncatedTurns: truncatedTurnShare(t),
      byType: scoresByType(tasks, t),
      modalAnswer: modalAnswer(t),
      byOutcome,
      supportingRecall,
      evidence,
      trajectories: t,
    };
  }

  // ------------------------------------------------------------------------------------ checkpoints

  /** The policy as HF-layout files (config, generation config, weights, tokenizer). */
  /** The policy's current weights with the initial checkpoint's config, generation config and tokenizer. */
  async policyCheckpoint(): Promise<{
    config: Checkpoint['config'];
    generationConfig: Checkpoint['generationConfig'];
    tensors: Map<string, { shape: number[]; data: Float32Array }>;
    tokenizerFiles: Checkpoint['tokenizerFiles'];
  }> {
    const { config, generationConfig, tokenizerFiles } = this.initial;
    const base = await this.policy.exportWeights();
    const lora = this.loraConfig;
    const tensors = lora ? mergeLora(config, base, await this.policy.exportAdapter(), lora) : base;
    return { config, generationConfig, tensors, tokenizerFiles };
  }

  /**
   * The policy as HF files (LoRA merged into the weights), and with LoRA also PEFT's adapter files
   * under adapter/ (kept apart: transformers reads a folder holding adapter_config.json as an adapter).
   */
  async policyFiles(): Promise<Map<string, Uint8Array>> {
    const files = saveCheckpoint({ ...(await this.policyCheckpoint()), dtype: 'F32' });
    const lora = this.loraConfig;
    if (lora) {
      const adapter = savePeftAdapter({
        config: this.initial.config,
        lora,
        tensors: await this.policy.exportAdapter(),
        baseModel: this.config.model.path,
      });
      for (const [name, bytes] of adapter) files.set(`${ADAPTER_DIR}/${name}`, bytes);
    }
    return files;
  }

  /** Writes checkpoints/step-XXXXXX/: the policy in HF layout, optimizer state, critic, trainer state. */
  async saveCheckpoint(): Promise<string> {
    if (!this.storage) throw new Error('saveCheckpoint: the trainer has no run storage');
    const dir = `checkpoints/step-${String(this.step).padStart(6, '0')}`;
    for (const [name, bytes] of await this.policyFiles()) await this.storage.write(`${dir}/${name}`, bytes);
    await this.storage.write(`${dir}/optimizer.safetensors`, await optimizerBytes(this.actorOpt));
    const state: Record<string, unknown> = {
      step: this.step,
      skippedSteps: this.skippedSteps,
      algorithm: this.config.algorithm.name,
      optimizerSteps: Object.fromEntries(this.actorOpt.parameters.map((p) => [p.name, p.step])),
    };
    if (this.critic && this.criticOpt) {
      const w = await this.critic.exportWeights();
      await this.storage.write(
        `${dir}/critic.safetensors`,
        serializeSafetensors(
          new Map(
            [...w].map(([k, t]) => [
              k,
              { dtype: 'F32', shape: t.shape, data: new Uint8Array(t.data.buffer.slice(0)) },
            ]),
          ),
        ),
      );
      await this.storage.write(`${dir}/critic-optimizer.safetensors`, await optimizerBytes(this.criticOpt));
      state.criticOptimizerSteps = Object.fromEntries(this.criticOpt.parameters.map((p) => [p.name, p.step]));
    }
    await this.storage.write(`${dir}/${STATE_FILE}`, `${JSON.stringify(state, null, 2)}\n`);
    return dir;
  }

  /** Step numbers of the checkpoints in the run folder, ascending. */
  async checkpointSteps(): Promise<number[]> {
    if (!this.storage) return [];
    const names = await this.storage.list('checkpoints');
    const steps: number[] = [];
    for (const n of names) {
      const m = /^step-(\d+)$/.exec(n);
      if (m && (await this.storage.read(`checkpoints/${n}/${STATE_FILE}`)) !== null) steps.push(Number(m[1]));
    }
    return steps.sort((a, b) => a - b);
  }

  private async restoreLatest(): Promise<void> {
    const storage = this.storage!;
    const steps = await this.checkpointSteps();
    if (steps.length === 0) return;
    const dir = `checkpoints/step-${String(steps.at(-1)).padStart(6, '0')}`;
    const state = JSON.parse((await readText(storage, `${dir}/${STATE_FILE}`))!) as {
      step: number;
      skippedSteps: number;
      algorithm: string;
      optimizerSteps: Record<string, number>;
      criticOptimizerSteps?: Record<string, number>;
    };
    if (state.algorithm !== this.config.algorithm.name)
      throw new Error(
        `resume: ${storage.description}/${dir} was written by ${state.algorithm}, the config says ${this.config.algorithm.name}`,
      );
    const lora = this.loraConfig;
    if (lora) {
      // The base stays the initial checkpoint; only the adapters were trained.
      const files = new Map<string, Uint8Array>();
      for (const name of [PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE]) {
        const bytes = await storage.read(`${dir}/${ADAPTER_DIR}/${name}`);
        if (bytes) files.set(name, bytes);
      }
      const adapter = loadPeftAdapter(this.initial.config, files);
      if (adapter.lora.rank !== lora.rank || adapter.lora.alpha !== lora.alpha)
        throw new Error(
          `resume: ${storage.description}/${dir} holds a rank-${adapter.lora.rank} adapter, the config says rank ${lora.rank}`,
        );
      for (const [name, t] of adapter.tensors) this.gpu.write(this.policy.params.get(name)!, t.data);
    } else {
      const weights = parseSafetensors(
        (await storage.read(`${dir}/model.safetensors`))!,
        `${dir}/model.safetensors`,
      );
      for (const [name, t] of this.policy.params) this.gpu.write(t, tensorToFloat32(weights, name));
    }
    this.actorOpt.loadState(
      await readOptimizer(storage, `${dir}/optimizer.safetensors`, state.optimizerSteps),
    );
    if (this.critic && this.criticOpt) {
      const cw = parseSafetensors(
        (await storage.read(`${dir}/critic.safetensors`))!,
        `${dir}/critic.safetensors`,
      );
      for (const [name, t] of this.critic.params()) this.gpu.write(t, tensorToFloat32(cw, name));
      this.criticOpt.loadState(
        await readOptimizer(storage, `${dir}/critic-optimizer.safetensors`, state.criticOptimizerSteps ?? {}),
      );
    }
    this.step = state.step;
    this.skippedSteps = state.skippedSteps;
  }

  release(): void {
    this.actorOpt.release();
    this.criticOpt?.release();
    this.policy.release();
    this.reference?.release();
    this.critic?.release();
  }
}

async function optimizerBytes(opt: AdamW): Promise<Uint8Array> {
  const state = await opt.state();
  const tensors = new Map<string, { dtype: 'F32'; shape: number[]; data: Uint8Array }>();
  for (const [name, e] of Object.entries(state.params)) {
    tensors.set(`m/${name}`, {
      dtype: 'F32',
      shape: [e.m.length],
      data: new Uint8Array(e.m.buffer.slice(0)),
    });
    tensors.set(`v/${name}`, {
      dtype: 'F32',
      shape: [e.v.length],
      data: new Uint8Array(e.v.buffer.slice(0)),
    });
  }
  return serializeSafetensors(tensors);
}

async function readOptimizer(storage: RunStorage, path: string, steps: Record<string, number>) {
  const bytes = await storage.read(path);
  if (!bytes) throw new Error(`resume: ${path} is missing`);
  const file = parseSafetensors(bytes, path);
  const params: Record<string, { step: number; m: Float32Array; v: Float32Array }> = {};
  for (const [name, step] of Object.entries(steps)) {
    if (step === 0) continue;
    params[name] = { step, m: tensorToFloat32(file, `m/${name}`), v: tensorToFloat32(file, `v/${name}`) };
  }
  return { version: 1 as const, params };
}

/** The run's micro-batch on this adapter: the memory budget and the adapter's binding limit. */
function pickTrainerMicroBatch(gpu: Gpu, initial: Checkpoint, config: TrainConfig): MicroBatchChoice {
  return pickMicroBatchRows(initial.config, config, undefined, gpu.limits.maxStorageBufferBindingSize);
}

/**
 * Row ranges [m0, m1) covering rows [r0, r1) in micro-batches of `size` rows, the last one smaller
 * when `size` does not divide the rows.
 */
export function microBatchRanges(r0: number, r1: number, size: number): Array<[number, number]> {
  const step = Math.max(1, Math.floor(size));
  const out: Array<[number, number]> = [];
  for (let m = r0; m < r1; m += step) out.push([m, Math.min(m + step, r1)]);
  return out;
}

/**
 * The whole update's denominators for policy-loss.wgsl's globals: the active (mask ≠ 0) tokens and
 * the rows holding any, of rows [r0, r1) of a [B, T] mask.
 */
export function lossDenominators(
  mask: ArrayLike<number>,
  T: number,
  r0: number,
  r1: number,
): { tokens: number; rows: number } {
  let tokens = 0;
  let rows = 0;
  for (let b = r0; b < r1; b++) {
    let n = 0;
    for (let i = b * T; i < (b + 1) * T; i++) if (mask[i] !== 0) n++;
    tokens += n;
    if (n > 0) rows++;
  }
  return { tokens, rows };
}

/** Rows [m0, m0 + sub.B) of a per-token array of the whole batch. */
function rowsOfArray<A extends Uint32Array | Float32Array>(a: A, sub: TrainingBatch, m0: number): A {
  return a.subarray(m0 * sub.T, (m0 + sub.B) * sub.T) as A;
}

/**
 * Merges the stats of one update's micro-batches into the stats of one pass over all its rows: the
 * aggregated terms add up (each micro-batch's is normalised by the whole update's denominators),
 * the masked means are weighted by each micro-batch's active tokens, the counts add up and the
 * denominators are the update's.
 */
function mergeStats(
  parts: Float32Array[],
  slots: { sums: readonly number[]; means: readonly number[]; tokens: number; rows: number },
): Float32Array {
  if (parts.length === 1) return parts[0];
  const out = Float32Array.from(parts[0]);
  const tokens = parts.reduce((n, p) => n + p[slots.tokens], 0);
  for (const k of [...slots.sums, slots.tokens, slots.rows]) out[k] = parts.reduce((x, p) => x + p[k], 0);
  for (const k of slots.means)
    out[k] = tokens > 0 ? parts.reduce((x, p) => x + p[k] * p[slots.tokens], 0) / tokens : 0;
  return out;
}

/** mergeStats for the actor's stats (POLICY_STAT). */
export function mergePolicyStats(parts: Float32Array[]): Float32Array {
  const S = POLICY_STAT;
  return mergeStats(parts, {
    sums: [S.loss, S.pgLoss, S.entropy, S.klLoss],
    means: [S.clipfrac, S.clipfracLower, S.ppoKl],
    tokens: S.activeTokens,
    rows: S.activeRows,
  });
}

/** mergeStats for the critic's stats (VALUE_STAT). */
export function mergeValueStats(parts: Float32Array[]): Float32Array {
  const S = VALUE_STAT;
  return mergeStats(parts, {
    sums: [S.loss],
    means: [S.clipfrac, S.vpredMean],
    tokens: S.activeTokens,
    rows: S.activeRows,
  });
}

export function mean(xs: readonly number[]): number {
  return xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length;
}

/**
 * The share of the policy's turns that ran out of new tokens before <|im_end|>. In the small models'
 * greedy episodes these are almost all repetition loops (`ju ju ju …`), so it is their measure.
 */
export function truncatedTurnShare(trajectories: readonly Trajectory[]): number {
  let turns = 0;
  let cut = 0;
  for (const t of trajectories)
    for (const r of t.turnRecords) {
      turns++;
      if (r.end === 'length') cut++;
    }
  return turns === 0 ? 0 : cut / turns;
}

/** EM and F1 of the trajectories grouped by their task's `type`, in order of first appearance. */
export function scoresByType(
  tasks: readonly QaTask[],
  trajectories: readonly Trajectory[],
): Record<string, { n: number; em: number; f1: number }> {
  const typeOf = new Map(tasks.map((task) => [task.id, task.type ?? 'untyped']));
  const byType: Record<string, { n: number; em: number; f1: number }> = {};
  for (const t of trajectories) {
    const type = typeOf.get(t.taskId) ?? 'untyped';
    if (!byType[type]) byType[type] = { n: 0, em: 0, f1: 0 };
    const s = byType[type];
    s.n++;
    s.em += t.outcome?.em ?? 0;
    s.f1 += t.outcome?.f1 ?? 0;
  }
  for (const s of Object.values(byType)) {
    s.em /= s.n;
    s.f1 /= s.n;
  }
  return byType;
}

/**
 * The most frequent answer (normalised as EM normalises it; no answer counts as "") and its share. It
 * tells a policy that reads the passages from one that learned a single answer that the reward pays
 * on some question type (a tiny model's GRPO learns to answer "no": right on half the yes/no questions).
 */
export function modalAnswer(trajectories: readonly Trajectory[]): { answer: string; share: number } {
  const counts = new Map<string, number>();
  for (const t of trajectories) {
    const a = t.prediction === null ? '' : normalizeAnswer(t.prediction);
    counts.set(a, (counts.get(a) ?? 0) + 1);
  }
  let best = { answer: '', count: 0 };
  for (const [answer, count] of counts) if (count > best.count) best = { answer, count };
  return { answer: best.answer, share: best.count === 0 ? 0 : best.count / trajectories.length };
}

function summary(prefix: string, xs: readonly number[]): Record<string, number> {
  const mu = mean(xs);
  const sd = xs.length > 1 ? Math.sqrt(xs.reduce((a, x) => a + (x - mu) ** 2, 0) / (xs.length - 1)) : 0;
  return {
    [`${prefix}/mean`]: mu,
    [`${prefix}/std`]: sd,
    [`${prefix}/min`]: xs.length ? Math.min(...xs) : 0,
    [`${prefix}/max`]: xs.length ? Math.max(...xs) : 0,
  };
}
