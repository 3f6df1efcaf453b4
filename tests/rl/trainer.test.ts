// The trainer end to end on the micro config (configs/micro.json: 2 questions × 2 samples, short turns)
// with the bundled qwen-tiny: the first update from the reference, every algorithm's step, a NaN step,
// resume = uninterrupted, SFT traces, and a two-step GRPO run through runTraining.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Checkpoint, loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { directorySource } from '../../src/agent/model/node-fs.ts';
import { packBatch, QwenGpuModel } from '../../src/agent/model/qwen-gpu.ts';
import { memorySource } from '../../src/agent/model/sources.ts';
import { renderQwen3Chat } from '../../src/env/chat-format.ts';
import { createOraclePolicy } from '../../src/env/policies/oracle.ts';
import { createRng, hash32 } from '../../src/env/rng.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import type { TrainingBatch } from '../../src/rl/batch.ts';
import { type AlgorithmName, parseConfigText, type TrainConfig } from '../../src/rl/config.ts';
import { computeGrpoOutcomeAdvantage, groupsWithScoreSpread } from '../../src/rl/core-algos.ts';
import { EPISODE_OUTCOMES } from '../../src/rl/evidence.ts';
import { runTraining } from '../../src/rl/run.ts';
import {
  buildSftTraces,
  copyDrillBatch,
  copyDrillRng,
  inputNoiseRng,
  noisyInputIds,
  type SftTrace,
  traceTokenPool,
} from '../../src/rl/sft.ts';
import { compareAdvantageMasks, parseStepArrays } from '../../src/rl/step-arrays.ts';
import { memoryStorage, readText } from '../../src/rl/storage.ts';
import {
  episodeReward,
  type StepMetrics,
  Trainer,
  trainingMemoryPlan,
  type UpdateArrays,
} from '../../src/rl/trainer.ts';
import { getTestGpu } from '../helpers/gpu.ts';
import { loadSavedCheckpoint, logitGap } from '../helpers/saved-checkpoint.ts';

let gpu: Gpu;
let initial: Checkpoint;

function microConfig(edit: (c: TrainConfig) => void = () => {}): TrainConfig {
  const c = parseConfigText(readFileSync('configs/micro.json', 'utf8'), 'configs/micro.json');
  edit(c);
  return c;
}

/** Metrics without wall-clock fields, for exact comparisons. */
function timeless(m: StepMetrics): StepMetrics {
  return Object.fromEntries(
    Object.entries(m).filter(([k]) => !k.startsWith('time/') && !k.startsWith('perf/')),
  );
}

/** GRPO's advantage of row b: the value on its policy positions (one per row). */
function rowAdvantage(batch: TrainingBatch, advantages: Float32Array, b: number): number {
  const { T } = batch;
  for (let j = 0; j < T; j++) if (batch.advMask[b * T + j] === 1) return advantages[b * T + j];
  return 0;
}

beforeAll(async () => {
  gpu = await getTestGpu();
  initial = await loadCheckpoint(directorySource('public/models/qwen-tiny'), { requireTokenizer: true });
});

describe('trainer', () => {
  const trainers: Trainer[] = [];
  afterAll(() => {
    for (const t of trainers) t.release();
  });
  async function make(config: TrainConfig, options: Parameters<typeof Trainer.create>[3] = {}) {
    const t = await Trainer.create(gpu, config, initial, options);
    trainers.push(t);
    return t;
  }

  it('task.trainWorldSeeds: RL questions come from those worlds, each searched over its own', async () => {
    const t = await make(
      microConfig((c) => {
        c.task.trainSize = 6;
        c.task.trainWorldSeeds = [7, 8];
      }),
    );
    expect(t.rlTasks.map((q) => q.id.split('-')[0])).toEqual(['s7', 's7', 's7', 's8', 's8', 's8']);
    await t.trainStep();
    const ids = new Set(t.rlTasks.map((q) => q.id));
    expect(t.lastTrajectories.length).toBe(4);
    for (const tr of t.lastTrajectories) expect(ids.has(tr.taskId), tr.taskId).toBe(true);
    // The gold passage of a seed-8 question is found by its own search tool, not by the train split's.
    const q = t.rlTasks[3];
    const gold = q.passages.find((p) => q.supportingIds.includes(p.id))!;
    const search = async (tools: unknown) =>
      (
        await (tools as { execute(a: object): Promise<{ content: string }> }[])[0].execute({
          query: gold.title,
        })
      ).content;
    expect(await search(t.rlTools(q))).toContain(gold.title);
    expect(await search(t.trainTools(q))).not.toContain(gold.title);
  });

  it('reward.formatWeight and reward.answerWeight reach the episodes’ outcome', async () => {
    const t = await make(
      microConfig((c) => {
        c.reward.formatWeight = 0.5;
        c.reward.answerWeight = 3;
      }),
    );
    expect(t.envOptions().outcome).toMatchObject({ metric: 'f1', formatWeight: 0.5, answerWeight: 3 });
    const r = await t.evaluate(2);
    for (const tr of r.trajectories) {
      const o = tr.outcome;
      expect(o.outcome).toBeCloseTo(-1 + 0.5 * o.formatScore + (o.formatValid ? 3 * o.f1 : 0), 12);
    }
  });

  it('first update from the reference: ratio 1, PPO-KL 0, KL to reference 0, mismatch KL ≈ 0', async () => {
    // A small entropy bonus guarantees the first update moves the weights even when every group's
    // rewards are equal (zero advantages), so the second step's KL to the reference must be > 0.
    const t = await make(microConfig((c) => (c.actor.entropyCoef = 0.01)));
    const m = await t.trainStep();
    expect(m['actor/kl_ref_k1']).toBe(0);
    expect(m['actor/kl_ref_k3']).toBe(0);
    expect(m['actor/ppo_kl']).toBe(0);
    expect(m['actor/pg_clipfrac']).toBe(0);
    expect(Math.abs(m['rollout/mismatch_kl_k3'] as number)).toBeLessThan(1e-6);
    expect(m['rollout/mismatch_max_abs'] as number).toBeLessThan(1e-3);
    expect(m['train/skipped_updates']).toBe(0);
    // The second step starts from updated weights: the policy has moved away from the reference.
    const m2 = await t.trainStep();
    expect(m2['actor/kl_ref_k3'] as number).toBeGreaterThan(0);
  });

  it('first step in 2 mini-batches × 2 epochs: KL to reference 0 and mismatch ≈ 0 from the pre-update forward, though later updates see moved weights', async () => {
    // The metrics' log-probs are the policy's before the step's first optimizer step, not the update
    // forwards', which from the second mini-batch on run on moved weights.
    const t = await make(
      microConfig((c) => {
        c.actor.miniBatches = 2;
        c.actor.ppoEpochs = 2;
        c.actor.lr = 0.01;
        c.actor.entropyCoef = 0.01;
      }),
    );
    const m = await t.trainStep();
    expect(m['actor/kl_ref_k1']).toBe(0);
    expect(m['actor/kl_ref_k3']).toBe(0);
    expect(Math.abs(m['rollout/mismatch_kl_k3'] as number)).toBeLessThan(1e-6);
    expect(m['rollout/mismatch_max_abs'] as number).toBeLessThan(1e-3);
    expect(m['actor/ppo_kl'] as number).not.toBe(0);
    const m2 = await t.trainStep();
    expect(m2['actor/kl_ref_k3'] as number).toBeGreaterThan(0);
  });

  it.each<AlgorithmName>(['drgrpo', 'ppo', 'reinforce++', 'reinforce++-baseline', 'rloo'])(
    '%s runs a finite step',
    async (name) => {
      const t = await make(
        microConfig((c) => {
          c.algorithm.name = name;
          c.algorithm.gamma = name === 'reinforce++' ? 0.99 : 1;
        }),
      );
      const m = await t.trainStep();
      for (const [k, v] of Object.entries(m))
        if (typeof v === 'number') expect(Number.isFinite(v), k).toBe(true);
      expect(m['train/skipped_updates']).toBe(0);
      if (name === 'ppo') expect(m['critic/vf_loss'] as number).toBeGreaterThan(0);
    },
  );

  it("PPO's value loss under seq-mean-token-sum-norm divides by the longest response, as the actor's does", async () => {
    // The same first step (same rollouts, the same untrained critic) under two aggregations: the value
    // loss is Σ/L for one and Σ/(tokens) for the other, so their ratio is tokens / L.
    const run = async (mode: 'token-mean' | 'seq-mean-token-sum-norm') => {
      const t = await make(
        microConfig((c) => {
          c.algorithm.name = 'ppo';
          c.actor.lossAggMode = mode;
        }),
      );
      let seen: TrainingBatch | null = null;
      const m = await t.trainStep({ onBatch: (b) => (seen = b) });
      return { vf: m['critic/vf_loss'] as number, batch: seen as unknown as TrainingBatch };
    };
    const a = await run('token-mean');
    const b = await run('seq-mean-token-sum-norm');
    const tokens = a.batch.advMask.reduce((s, x) => s + x, 0);
    expect(b.batch.maxResponseLength).toBeLessThan(b.batch.T);
    expect(b.vf / a.vf).toBeCloseTo(tokens / b.batch.maxResponseLength, 4);
  });

  it("PPO's critic updates once per actor update: the value clip cannot act in the first, bounds the second", async () => {
    // A tiny value clip and a large critic step: the second epoch's values move past old ± clip, so
    // its clip fraction is > 0; the first update's values are the old ones (clip fraction 0 exactly).
    const run = async (epochs: number) => {
      const t = await make(
        microConfig((c) => {
          c.algorithm.name = 'ppo';
          c.actor.ppoEpochs = epochs;
          c.critic.lr = 0.05;
          c.critic.clipRangeValue = 1e-4;
        }),
      );
      return t.trainStep();
    };
    const one = await run(1);
    expect(one['critic/vf_clipfrac']).toBe(0);
    const two = await run(2);
    // the mean over two updates, the first's 0 and the second's (0.10 measured: the clip fraction counts
    // the values the clip held back from their returns)
    expect(two['critic/vf_clipfrac'] as number).toBeGreaterThan(0.01);
    expect(two['critic/vf_loss'] as number).toBeGreaterThan(0);
  }, 400_000);

  it.each(['gspo', 'cispo'] as const)('GRPO with the %s policy loss runs a finite step', async (loss) => {
    const t = await make(microConfig((c) => (c.actor.policyLoss = loss)));
    const m = await t.trainStep();
    for (const [k, v] of Object.entries(m))
      if (typeof v === 'number') expect(Number.isFinite(v), k).toBe(true);
    expect(m['actor/ppo_kl']).toBe(0);
  });

  it.each(['grpo', 'reinforce++'] as const)(
    '%s with algorithm.filterGroups: the update trains exactly the groups whose rewards differ',
    async (algorithm) => {
      const t = await make(
        microConfig((c) => {
          c.algorithm.name = algorithm;
          c.algorithm.filterGroups = true;
          c.rollout.questionsPerStep = 4;
          c.reward.processWeight = 1; // search rewards: the micro turns are too short to answer
        }),
      );
      // The selection is a real one only on a step with groups of both kinds: the first such step of a
      // few is checked (which step that is depends on the bundled weights and the adapter's rounding).
      let seen: TrainingBatch | null = null;
      let m: StepMetrics = {};
      let trajectories = t.lastTrajectories;
      let kept = trajectories;
      for (let step = 1; ; step++) {
        m = await t.trainStep({ onBatch: (b) => (seen = b) });
        trajectories = t.lastTrajectories;
        const keep = groupsWithScoreSpread(
          trajectories.map((tr) => episodeReward(tr, t.config.reward.processWeight)),
          trajectories.map((tr) => tr.group),
        );
        kept = trajectories.filter((_, i) => keep[i]);
        if (kept.length > 0 && kept.length < trajectories.length) break;
        expect(step, 'no step of 4 had groups of both kinds').toBeLessThan(4);
      }
      const batch = seen as unknown as TrainingBatch;
      expect(batch.B).toBe(kept.length);
      expect([...batch.index]).toEqual(kept.map((tr) => tr.group));
      kept.forEach((tr, b) => {
        expect([...batch.tokens.ids.slice(b * batch.T, b * batch.T + tr.ids.length)]).toEqual(tr.ids);
      });
      expect(m['train/trained_groups']).toBe(new Set(kept.map((tr) => tr.group)).size / 4);
      expect(m['train/trained_rows']).toBe(kept.length / trajectories.length);
      expect(m['actor/pg_loss']).toBeTypeOf('number');
      // Metrics of the rollout still cover every episode.
      expect(m['reward/mean']).toBeCloseTo(
        trajectories.reduce((s, tr) => s + episodeReward(tr, t.config.reward.processWeight), 0) /
          trajectories.length,
        12,
      );
    },
  );

  it('algorithm.filterGroups: a step where every group’s rewards are equal makes no update', async () => {
    // Format and answer weights 0: every episode's reward is −1, so no group has a spread.
    const t = await make(
      microConfig((c) => {
        c.algorithm.filterGroups = true;
        c.reward.formatWeight = 0;
        c.reward.answerWeight = 0;
        c.reward.processWeight = 0;
      }),
    );
    const before = await t.policy.exportWeights();
    const m = await t.trainStep();
    expect(m['train/trained_groups']).toBe(0);
    expect(m['train/trained_rows']).toBe(0);
    expect(m['actor/pg_loss']).toBeUndefined();
    expect(m['actor/kl_ref_k3']).toBe(0);
    expect(Math.abs(m['rollout/mismatch_kl_k3'] as number)).toBeLessThan(1e-6);
    const after = await t.policy.exportWeights();
    for (const [name, w] of before) expect(after.get(name)!.data, name).toEqual(w.data);
    expect((await t.actorOpt.state()).params).toEqual({}); // never stepped: no moments at all
  });

  it('reward.processWeight weights the process rewards the update trains on, as the metrics and the filter do', async () => {
    const t = await make(
      microConfig((c) => {
        c.rollout.questionsPerStep = 4;
        c.reward.processWeight = 0.5;
      }),
    );
    // A real check needs a step with process rewards: the first of a few.
    for (let step = 1; ; step++) {
      let seen: TrainingBatch | null = null;
      await t.trainStep({ onBatch: (b) => (seen = b) });
      const batch = seen as unknown as TrainingBatch;
      const trajectories = t.lastTrajectories;
      expect(batch.B).toBe(trajectories.length);
      let withProcess = 0;
      trajectories.forEach((tr, b) => {
        let sum = 0;
        for (let j = 0; j < batch.T; j++) sum += batch.rewards[b * batch.T + j];
        expect(sum, `row ${b}`).toBeCloseTo(episodeReward(tr, 0.5), 5);
        if (tr.processRewards.some((p) => p.total !== 0)) withProcess++;
      });
      if (withProcess > 0) break;
      expect(step, 'no step of 4 had a process reward').toBeLessThan(4);
    }
  }, 400_000);

  it('ablation.lossMask false: environment tokens are trained with their episode’s (GRPO) or the next policy token’s (REINFORCE++) advantage', async () => {
    for (const name of ['grpo', 'reinforce++'] as const) {
      const t = await make(
        microConfig((c) => {
          c.algorithm.name = name;
          c.ablation.lossMask = false;
          c.rollout.questionsPerStep = 4;
          c.reward.processWeight = 1; // search rewards: the micro turns are too short to answer
        }),
      );
      // The check is a real one only on a step whose rewards differ: the first such step of a few.
      for (let step = 1; ; step++) {
        let seen: UpdateArrays | null = null;
        await t.trainStep({ onUpdateArrays: (a) => (seen = a) });
        const { batch, advantages } = seen as unknown as UpdateArrays;
        const { B, T } = batch;
        let envTrained = 0;
        // REINFORCE++ after a row's last policy token: the carried return is 0, whitened like the rest
        // (−μ/σ of the batch), the same at every such position.
        let trailing: number | null = null;
        for (let b = 0; b < B; b++) {
          let next: number | null = null; // the advantage of the row's next policy position (backwards scan)
          for (let j = T - 1; j >= 0; j--) {
            const i = b * T + j;
            if (batch.advMask[i] === 1) {
              expect(batch.policyMask[i]).toBe(1);
              next = advantages[i];
            } else if (batch.lossMask[i] === 1) {
              // An environment position the loss reads: the row's (GRPO) or the carried (REINFORCE++) value.
              if (name === 'grpo')
                expect(advantages[i], `row ${b} position ${j}`).toBe(rowAdvantage(batch, advantages, b));
              else if (next !== null) expect(advantages[i], `row ${b} position ${j}`).toBe(next);
              else {
                trailing ??= advantages[i];
                expect(advantages[i], `row ${b} position ${j} (trailing)`).toBe(trailing);
              }
              if (advantages[i] !== 0) envTrained++;
            } else expect(advantages[i]).toBe(0);
          }
        }
        if (envTrained > 0) break;
        expect(step, `${name}: no step of 4 trained an environment token`).toBeLessThan(4);
      }
    }
  }, 400_000);

  it('critic.warmupSteps: the first steps train the critic alone; the actor then starts from ratio 1 and KL 0', async () => {
    const t = await make(
      microConfig((c) => {
        c.algorithm.name = 'ppo';
        c.critic.warmupSteps = 1;
        c.actor.entropyCoef = 0.01; // the actor's first update moves the weights whatever the rewards
      }),
    );
    const steps = async (opt: { state(): Promise<{ params: Record<string, { step: number }> }> }) =>
      new Set(Object.values((await opt.state()).params).map((e) => e.step));
    const policy0 = await t.policy.exportWeights();
    const critic0 = await t.critic!.exportWeights();
    const m1 = await t.trainStep();
    expect(m1['train/critic_warmup']).toBe(1);
    expect(m1['actor/lr']).toBe(0);
    expect(m1['actor/pg_loss']).toBeUndefined();
    expect(m1['critic/vf_loss'] as number).toBeGreaterThan(0);
    expect(Math.abs(m1['rollout/mismatch_kl_k3'] as number)).toBeLessThan(1e-6);
    const policy1 = await t.policy.exportWeights();
    for (const [name, w] of policy0) expect(policy1.get(name)!.data, name).toEqual(w.data);
    expect(await steps(t.actorOpt)).toEqual(new Set()); // never stepped: no moments at all
    expect(await steps(t.criticOpt!)).toEqual(new Set([1]));
    const critic1 = await t.critic!.exportWeights();
    expect([...critic0].some(([name, w]) => !critic1.get(name)!.data.every((x, i) => x === w.data[i]))).toBe(
      true,
    );

    // Step 2: the actor's first update, from the reference's weights, at the full rate.
    const m2 = await t.trainStep();
    expect(m2['train/critic_warmup']).toBe(0);
    expect(m2['actor/lr']).toBe(t.config.actor.lr);
    expect(m2['actor/kl_ref_k3']).toBe(0);
    expect(m2['actor/ppo_kl']).toBe(0);
    expect(m2['actor/pg_clipfrac']).toBe(0);
    expect(await steps(t.actorOpt)).toEqual(new Set([1]));
    expect(await steps(t.criticOpt!)).toEqual(new Set([2]));
    const policy2 = await t.policy.exportWeights();
    expect([...policy0].some(([name, w]) => !policy2.get(name)!.data.every((x, i) => x === w.data[i]))).toBe(
      true,
    );
  });

  it.each([
    [true, 'advantage-mask'],
    [false, 'advantage-mask'],
    [false, 'policy'],
  ] as const)(
    "train.saveArrays (PPO, advantage mask %s, whitened over %s): arrays/step-*.json hold what GAE read and gave; the CPU twin of the run's arm reproduces the GPU advantages",
    async (advantageMask, whitenOver) => {
      const config = microConfig((c) => {
        c.algorithm.name = 'ppo';
        c.ablation.advantageMask = advantageMask;
        c.ablation.whitenOver = whitenOver;
        c.train.steps = 2;
        c.train.evalSize = 0;
        c.train.saveArrays = true;
        c.reward.processWeight = 1; // rewards beyond the outcome, so the advantages are not all equal
      });
      const storage = memoryStorage();
      const t = await make(config, { storage });
      const seen: UpdateArrays[] = [];
      await runTraining(t, storage, { onUpdateArrays: (a) => seen.push(a) });
      expect(seen.length).toBe(2); // the caller's own hook still runs
      expect(await storage.list('arrays')).toEqual(['step-000001.json', 'step-000002.json']);
      for (const [k, a] of seen.entries()) {
        const file = parseStepArrays((await readText(storage, `arrays/step-00000${k + 1}.json`))!);
        expect(file.step).toBe(k + 1);
        expect(file.rows.length).toBe(a.batch.B);
        // step 1: the value head starts at zero; step 2 reads the critic trained by step 1
        const values = a.values!;
        expect(values).not.toBeNull();
        expect(values.some((v) => v !== 0)).toBe(k === 1);
        const { T } = a.batch;
        file.rows.forEach((r, b) => {
          expect(r.policy).toBe(
            Array.from({ length: r.length }, (_, j) => (a.batch.policyMask[b * T + j] > 0 ? '1' : '0')).join(
              '',
            ),
          );
          for (let j = 0; j < r.length; j++) {
            expect(r.advantages[j]).toBe(a.advantages[b * T + j]);
            expect(r.values![j]).toBe(values[b * T + j]);
          }
        });
        const cmp = compareAdvantageMasks(file, { ...config.algorithm, whitenOver });
        expect(cmp.runArm).toBe(advantageMask ? 'masked' : 'unmasked');
        expect(cmp.hasValues).toBe(true);
        expect(cmp.gpuVsCpuMaxAbs).toBeLessThan(1e-4);
        expect(cmp.all.tokens).toBe(a.batch.policyMask.reduce((n, m) => n + m, 0));
        if (whitenOver === 'policy') {
          // whitened over the policy's tokens: mean 0 and variance 1 there, whatever GAE's mask
          const xs = Array.from(a.advantages).filter((_, i) => a.batch.policyMask[i] > 0);
          const mean = xs.reduce((x, y) => x + y, 0) / xs.length;
          expect(Math.abs(mean)).toBeLessThan(1e-5);
          expect(xs.reduce((v, x) => v + (x - mean) ** 2, 0) / (xs.length - 1)).toBeCloseTo(1, 4);
        }
      }
    },
    400_000,
  );

  it('skips a step whose loss is NaN: weights and optimizer state untouched, the skip counted', async () => {
    const t = await make(microConfig());
    await t.trainStep(); // the optimizer has state now
    const before = await t.policy.exportWeights();
    const optBefore = await t.actorOpt.state();
    const m = await t.trainStep({
      onBatch(batch) {
        batch.rewards[batch.rewards.findIndex((r, i) => batch.advMask[i] > 0 || r !== 0)] = Number.NaN;
      },
    });
    expect(m['train/skipped_updates']).toBe(1);
    expect(m['train/skipped_steps_total']).toBe(1);
    const after = await t.policy.exportWeights();
    for (const [name, w] of before) expect(after.get(name)!.data, name).toEqual(w.data);
    const optAfter = await t.actorOpt.state();
    for (const [name, e] of Object.entries(optBefore.params)) {
      expect(optAfter.params[name].step, name).toBe(e.step);
      expect(optAfter.params[name].m, name).toEqual(e.m);
      expect(optAfter.params[name].v, name).toEqual(e.v);
    }
    // and the next step trains again
    expect((await t.trainStep())['train/skipped_updates']).toBe(0);
  });

  it.each(['grpo', 'ppo', 'sft'] as const)(
    '%s: a resumed run gives the same metrics as an uninterrupted one',
    async (algorithm) => {
      const config = microConfig((c) => {
        c.algorithm.name = algorithm;
        if (algorithm === 'sft') {
          // as the 500-world SFT runs that results.md resumes: noised inputs and context targets
          // draw from the run's random state, and the rate is still warming up at the resume
          c.sft.inputNoise = 0.1;
          c.sft.contextWeight = 0.5;
          c.train.warmupSteps = 4;
        }
      });
      const straight = await make(config);
      const a1 = await straight.trainStep();
      const a2 = await straight.trainStep();

      const storage = memoryStorage();
      const first = await make(config, { storage });
      const b1 = await first.trainStep();
      await first.saveCheckpoint();
      const resumed = await make(config, { storage, resume: true });
      expect(resumed.step).toBe(1);
      const b2 = await resumed.trainStep();
      expect(timeless(b1)).toEqual(timeless(a1));
      expect(timeless(b2)).toEqual(timeless(a2));
      expect(timeless(a2)).not.toEqual(timeless(a1)); // the second step is not a replay of the first
    },
    400_000,
  );

  it('algorithm.oracleTraces: the oracle’s trace of each question joins its group after the sampled rows; GRPO’s advantage spans both; the per-token metrics skip it', async () => {
    const t = await make(
      microConfig((c) => {
        c.algorithm.oracleTraces = true;
        c.rollout.maxTotalTokens = 1024; // the oracle's traces are longer than the micro turns allow
        c.reward.processWeight = 0.5; // the traces' process rewards are weighted as the sampled ones'
      }),
    );
    let seen: UpdateArrays | null = null;
    const m = await t.trainStep({ onUpdateArrays: (a) => (seen = a) });
    const { batch, advantages } = seen as unknown as UpdateArrays;
    const trajectories = t.lastTrajectories;
    const questions = t.questionsFor(1, t.config.rollout.questionsPerStep);
    const traces: Array<{ trace: SftTrace; group: number }> = [];
    for (const [group, task] of questions.entries()) {
      const [trace] = await buildSftTraces({
        tokenizer: t.tokenizer,
        tasks: [task],
        toolsFor: t.rlTools,
        env: t.envOptions(),
        oracle: createOraclePolicy({ style: 'compact' }),
      });
      if (trace) traces.push({ trace, group });
    }
    // the oracle misses some micro questions (3 turns at most): those groups have no trace
    expect(traces.length).toBeGreaterThan(0);
    const n = trajectories.length;
    expect(batch.B).toBe(n + traces.length);
    const rowIds = (b: number, L: number) => [...batch.tokens.ids.slice(b * batch.T, b * batch.T + L)];
    trajectories.forEach((tr, b) => {
      expect(rowIds(b, tr.ids.length)).toEqual(tr.ids);
    });
    const rowReward = (b: number) =>
      batch.rewards.slice(b * batch.T, (b + 1) * batch.T).reduce((x, y) => x + y, 0);
    traces.forEach(({ trace, group }, k) => {
      const b = n + k;
      expect(rowIds(b, trace.ids.length)).toEqual(trace.ids);
      expect(batch.index[b]).toBe(group);
      // trained exactly on the oracle's turns (its actions and their <|im_end|>)
      for (let j = 1; j < trace.ids.length; j++)
        expect(batch.lossMask[b * batch.T + j - 1]).toBe(trace.sources[j] === 'policy' ? 1 : 0);
      expect(trace.em).toBe(1);
      const paid = trace.outcome + 0.5 * trace.process.reduce((x, p) => x + p.reward, 0);
      expect(rowReward(b)).toBeCloseTo(paid, 5);
    });
    // The group's advantage over its sampled and oracle members together (the CPU twin on the batch).
    const expected = computeGrpoOutcomeAdvantage({
      tokenRewards: batch.rewards,
      mask: batch.advMask,
      index: batch.index,
      B: batch.B,
      T: batch.T,
    }).advantages;
    for (let i = 0; i < expected.length; i++) expect(advantages[i]).toBeCloseTo(expected[i], 5);
    // An oracle row is in its group's statistics: its advantage differs from the sampled-only one.
    expect(Math.abs(rowAdvantage(batch, advantages, n))).toBeGreaterThan(0);
    expect(m['oracle/traces']).toBe(traces.length / questions.length);
    expect(m['oracle/too_long']).toBe(0);
    expect(m['oracle/logprob_mean'] as number).toBeLessThan(0);
    // First update: ratio 1 on every row; the mismatch KL reads the sampled rows only.
    expect(m['actor/ppo_kl']).toBe(0);
    expect(Math.abs(m['rollout/mismatch_kl_k3'] as number)).toBeLessThan(1e-6);
    expect(m['rollout/mismatch_max_abs'] as number).toBeLessThan(1e-3);
  }, 400_000);

  it('SFT traces: exact tokens, policy mask on the oracle turns, decoding = the template rendering', async () => {
    const t = await make(microConfig((c) => (c.algorithm.name = 'sft')));
    const traces = await buildSftTraces({
      tokenizer: t.tokenizer,
      tasks: t.dataset.train.tasks.slice(0, 3),
      toolsFor: t.trainTools,
      env: t.envOptions(),
      oracle: createOraclePolicy({ style: 'compact' }),
    });
    expect(traces.length).toBeGreaterThan(0);
    for (const tr of traces) {
      const text = t.tokenizer.decode([...tr.ids]);
      const policyText = t.tokenizer.decode(tr.ids.filter((_, i) => tr.sources[i] === 'policy'));
      expect(policyText).toContain('<tool_call>');
      expect(policyText).toContain('<answer>');
      expect(policyText).not.toContain('<tool_response>');
      expect(text.startsWith(t.tokenizer.decode(tr.ids.filter((_, i) => tr.sources[i] === 'prompt')))).toBe(
        true,
      );
      // the whole sequence is the template's rendering of the final conversation (which ends in '\n')
      expect(`${text}\n`).toBe(renderQwen3Chat(tr.messages, { tools: tr.tools }));
      // the rewards the env paid: the outcome of a right answer, a process reward per oracle turn, each
      // on that turn's <|im_end|>
      expect(tr.outcome).toBeGreaterThan(0);
      const turnEnds = tr.ids.flatMap((id, i) =>
        tr.sources[i] === 'policy' && id === t.tokenizer.specialId('imEnd') ? [i] : [],
      );
      expect(tr.process.map((p) => p.tokenIndex)).toEqual(turnEnds);
    }
    const m1 = await t.trainStep();
    expect(m1['sft/loss'] as number).toBeGreaterThan(0);
    expect(m1['train/skipped_updates']).toBe(0);
  });

  it('SFT contextWeight: the environment tokens join the loss; the policy-token loss is reported alike', async () => {
    const policyOnly = await make(microConfig((c) => (c.algorithm.name = 'sft')));
    const withContext = await make(
      microConfig((c) => {
        c.algorithm.name = 'sft';
        c.sft.contextWeight = 0.5;
      }),
    );
    const a = await policyOnly.trainStep();
    const b = await withContext.trainStep();
    // same traces, same weights before the update: the same policy-token loss
    expect(b['sft/loss'] as number).toBeCloseTo(a['sft/loss'] as number, 5);
    expect(a['sft/context_loss']).toBeUndefined();
    expect(b['sft/context_loss'] as number).toBeGreaterThan(0);
    // the gradient differs, so the updated weights do
    const wa = await policyOnly.policy.exportWeights();
    const wb = await withContext.policy.exportWeights();
    const name = 'model.embed_tokens.weight';
    expect(wb.get(name)!.data).not.toEqual(wa.get(name)!.data);
  });

  it("SFT copy drill: its loss is the repeats' mean NLL; its gradient adds to the traces' at copyWeight", async () => {
    const config = (rows: number, weight: number) =>
      microConfig((c) => {
        c.algorithm.name = 'sft';
        c.sft.copyRows = rows;
        c.sft.copySpan = 16;
        c.sft.copyRepeats = 3;
        c.sft.copyWeight = weight;
      });
    const runs = [await make(config(0, 1)), await make(config(3, 1)), await make(config(3, 2))];
    const metrics: StepMetrics[] = [];
    for (const t of runs) metrics.push(await t.trainStep());
    const [off, one, two] = metrics;
    // same traces and weights before the update: the same trace loss; the drill's loss is reported
    expect(one['sft/loss'] as number).toBeCloseTo(off['sft/loss'] as number, 5);
    expect(off['sft/copy_loss']).toBeUndefined();
    expect(two['sft/copy_loss'] as number).toBeCloseTo(one['sft/copy_loss'] as number, 5);

    // independently: the initial model's full logits on the rows the step drew
    const traces = (runs[1] as unknown as { sftTraces: SftTrace[] }).sftTraces;
    const d = copyDrillBatch(traceTokenPool(traces), 3, 16, 3, copyDrillRng(runs[1].config.seed, 1));
    const model = new QwenGpuModel(gpu, initial.config, initial.tensors);
    const V = initial.config.vocabSize;
    const logits = await model.logits(packBatch(d.sequences));
    model.release();
    let nll = 0;
    for (let i = 0; i < d.mask.length; i++) {
      if (!d.mask[i]) continue;
      const row = logits.subarray(i * V, (i + 1) * V);
      const max = row.reduce((m, x) => Math.max(m, x), -Infinity);
      const z = row.reduce((s, x) => s + Math.exp(x - max), 0);
      nll -= row[d.targets[i]] - max - Math.log(z);
    }
    expect(one['sft/copy_loss'] as number).toBeCloseTo(nll / d.count, 3);

    // gradients (kept after the optimizer step): g(w=2) − g(w=1) = g(w=1) − g(no drill) = the drill's
    const read = async (t: Trainer) =>
      (await gpu.readMany(
        [...t.policy.trainableParams().keys()].map((n) => t.policy.grad(n)),
      )) as Float32Array[];
    const [g0, g1, g2] = await Promise.all(runs.map(read));
    let diff = 0;
    let max = 0;
    for (let p = 0; p < g0.length; p++) {
      for (let i = 0; i < g0[p].length; i++) {
        const drill = g1[p][i] - g0[p][i];
        diff = Math.max(diff, Math.abs(g2[p][i] - g1[p][i] - drill));
        max = Math.max(max, Math.abs(drill));
      }
    }
    expect(max).toBeGreaterThan(0);
    expect(diff).toBeLessThan(1e-3 * max);
  });

  it("SFT input noise: the loss is the traces' NLL read through the noisy inputs, the targets unchanged", async () => {
    const config = (rate: number) =>
      microConfig((c) => {
        c.algorithm.name = 'sft';
        c.sft.inputNoise = rate;
      });
    const clean = await make(config(0));
    const noisy = await make(config(0.3));
    const a = await clean.trainStep();
    const b = await noisy.trainStep();
    expect(a['sft/noised_inputs']).toBeUndefined();
    expect(b['sft/noised_inputs'] as number).toBeGreaterThan(0);
    expect(b['sft/tokens']).toBe(a['sft/tokens']);

    // independently: the traces step 1 picks (epoch 0's shuffle), the noise drawn for step 1, the
    // initial model's logits on the noisy inputs, the NLL of the traces' own policy tokens
    const traces = (noisy as unknown as { sftTraces: SftTrace[] }).sftTraces;
    const seed = noisy.config.seed;
    const order = createRng(hash32(`${seed}:sft:0`)).shuffle(traces.map((_, i) => i));
    const picked = order.slice(0, noisy.config.sft.batchSize).map((i) => traces[i]);
    const rng = inputNoiseRng(seed, 1);
    const inputs = picked.map((t) => noisyInputIds(t.ids, t.sources, 0.3, rng).ids);
    let replaced = 0;
    picked.forEach((t, b) => {
      for (let j = 0; j < t.ids.length; j++) if (inputs[b][j] !== t.ids[j]) replaced++;
    });
    expect(replaced).toBeGreaterThan(0);
    const packed = packBatch(inputs);
    const model = new QwenGpuModel(gpu, initial.config, initial.tensors);
    const V = initial.config.vocabSize;
    const logits = await model.logits(packed);
    model.release();
    let nll = 0;
    let count = 0;
    picked.forEach((t, b) => {
      for (let j = 1; j < t.ids.length; j++) {
        if (t.sources[j] !== 'policy') continue;
        const row = logits.subarray((b * packed.T + j - 1) * V, (b * packed.T + j) * V);
        const max = row.reduce((m, x) => Math.max(m, x), -Infinity);
        const z = row.reduce((s, x) => s + Math.exp(x - max), 0);
        nll -= row[t.ids[j]] - max - Math.log(z);
        count++;
      }
    });
    expect(count).toBe(b['sft/tokens']);
    expect(b['sft/loss'] as number).toBeCloseTo(nll / count, 3);
    expect(Math.abs((b['sft/loss'] as number) - (a['sft/loss'] as number))).toBeGreaterThan(1e-3);
  });

  it('LoRA (rank 4): no second model; first update ratio 1 and KL 0; only the adapters move; checkpoints hold merged weights and PEFT files; resume = uninterrupted', async () => {
    const config = microConfig((c) => {
      c.model.lora = { rank: 4, alpha: 8, modules: ['q_proj', 'v_proj', 'up_proj', 'down_proj'] };
      c.actor.entropyCoef = 0.01;
      c.actor.lr = 1e-2;
      c.train.evalSize = 0;
    });
    const storage = memoryStorage();
    const t = await make(config, { storage });
    expect(t.reference).toBeNull();
    expect([...t.policy.trainableParams().keys()].every((n) => n.includes('.lora_'))).toBe(true);
    const m1 = await t.trainStep();
    expect(m1['actor/kl_ref_k3']).toBe(0);
    expect(m1['actor/ppo_kl']).toBe(0);
    expect(m1['train/skipped_updates']).toBe(0);
    const base = await t.policy.exportWeights();
    for (const [name, w] of base) expect(w.data, name).toEqual(initial.tensors.get(name)!.data);
    await t.saveCheckpoint();
    const files = await storage.list('checkpoints/step-000001');
    expect(files).toEqual(expect.arrayContaining(['model.safetensors', 'adapter']));
    expect(await storage.list('checkpoints/step-000001/adapter')).toEqual([
      'adapter_config.json',
      'adapter_model.safetensors',
    ]);
    // The merged checkpoint is the adapted policy: its logits equal the policy's.
    expect(
      await logitGap(gpu, t.policy, await loadSavedCheckpoint(storage, 'checkpoints/step-000001')),
    ).toBeLessThan(1e-4);
    const m2 = await t.trainStep();
    expect(m2['actor/kl_ref_k3'] as number).toBeGreaterThan(0);
    const resumed = await make(config, { storage, resume: true });
    expect(resumed.step).toBe(1);
    expect(timeless(await resumed.trainStep())).toEqual(timeless(m2));
  }, 400_000);

  it('refuses a run over train.memoryBudgetMiB before allocating anything, naming what to change', async () => {
    const before = gpu.stats.liveBytes;
    const config = microConfig((c) => (c.train.memoryBudgetMiB = 1));
    await expect(Trainer.create(gpu, config, initial)).rejects.toThrow(
      /memory planner predicts about [\d.]+ [KMG]i?B at the peak .*over train\.memoryBudgetMiB \(1 MiB\).*model\.lora\.rank/,
    );
    expect(gpu.stats.liveBytes).toBe(before);
    const plan = trainingMemoryPlan(initial.config, microConfig());
    const fits = microConfig((c) => (c.train.memoryBudgetMiB = Math.ceil(plan.peak / 2 ** 20)));
    const t = await make(fits);
    expect(t.step).toBe(0);
  });

  it('a two-step GRPO run end to end: metrics, samples, checkpoints in HF layout, resume continues', async () => {
    const config = microConfig();
    const storage = memoryStorage();
    const t = await make(config, { storage });
    const lines: StepMetrics[] = [];
    await runTraining(t, storage, { onMetrics: (m) => lines.push(m) });
    expect(t.step).toBe(2);
    const text = (await readText(storage, 'metrics.jsonl'))!;
    const parsed = text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as StepMetrics);
    expect(parsed).toEqual(lines);
    expect(parsed.filter((l) => 'reward/mean' in l).map((l) => l.step)).toEqual([1, 2]);
    expect(parsed.filter((l) => 'eval/em' in l).map((l) => l.step)).toEqual([0, 1, 2]);
    // GPU memory per step: the pool keeps no more than the buffers the step (and the evaluation
    // before it) had in use at once, which covers the step's peak of live tensors.
    for (const line of parsed.filter((l) => 'reward/mean' in l)) {
      const peak = line['perf/gpu_peak_live_mib'] as number;
      expect(peak).toBeGreaterThan(0);
      expect(line['perf/gpu_held_mib']).toBeGreaterThanOrEqual(peak);
      expect(line['perf/gpu_pool_trimmed_mib']).toBeGreaterThanOrEqual(0);
    }
    // Each step line gives the share of supporting passages its episodes' searches found.
    for (const line of parsed.filter((l) => 'reward/mean' in l)) {
      expect(line['episode/supporting_recall']).toBeGreaterThanOrEqual(0);
      expect(line['episode/supporting_recall']).toBeLessThanOrEqual(1);
    }
    // Each evaluation line breaks EM down by question type and gives the most frequent answer's share.
    for (const line of parsed.filter((l) => 'eval/em' in l)) {
      const typeKeys = Object.keys(line).filter((k) => k.startsWith('eval/em/'));
      expect(typeKeys.length).toBeGreaterThan(0);
      for (const k of typeKeys) expect(line[k]).toBeGreaterThanOrEqual(0);
      expect(line['eval/modal_answer_share']).toBeGreaterThan(0);
      // The outcomes (src/rl/evidence.ts) split every episode: their shares add up to 1; EM is the right share.
      const outcomeKeys = Object.keys(line).filter((k) => k.startsWith('eval/outcome/'));
      expect(outcomeKeys.sort()).toEqual(EPISODE_OUTCOMES.map((o) => `eval/outcome/${o}`).sort());
      expect(outcomeKeys.reduce((sum, k) => sum + (line[k] as number), 0)).toBeCloseTo(1, 12);
      expect(line['eval/outcome/right']).toBeCloseTo(line['eval/em'] as number, 12);
      expect(line['eval/supporting_recall']).toBeGreaterThanOrEqual(0);
      expect(line['eval/supporting_recall']).toBeLessThanOrEqual(1);
    }
    expect(await storage.list('checkpoints')).toEqual(['step-000001', 'step-000002']);
    const files = new Map<string, Uint8Array>();
    for (const name of await storage.list('checkpoints/step-000002'))
      files.set(name, (await storage.read(`checkpoints/step-000002/${name}`))!);
    const saved = await loadCheckpoint(memorySource(files), { requireTokenizer: true });
    const live = await t.policy.exportWeights();
    for (const [name, w] of live) expect(saved.tensors.get(name)!.data, name).toEqual(w.data);
    const samples = JSON.parse((await readText(storage, 'samples/step-000002.json'))!) as unknown[];
    expect(samples).toHaveLength(2);
  });

  it('a run stopped right after an evaluation step does not evaluate the same step again', async () => {
    const config = microConfig((c) => {
      c.train.steps = 5;
      c.train.evalEvery = 1;
      c.train.evalSize = 2;
      c.train.checkpointEvery = 0;
    });
    const storage = memoryStorage();
    const t = await make(config, { storage });
    await runTraining(t, storage, { shouldStop: () => t.step >= 1 });
    expect(t.step).toBe(1);
    const lines = (await readText(storage, 'metrics.jsonl'))!
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as StepMetrics);
    expect(lines.filter((l) => 'eval/em' in l).map((l) => l.step)).toEqual([0, 1]);
    expect(await storage.list('checkpoints')).toEqual(['step-000001']);
  });
});
