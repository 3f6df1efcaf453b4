// Gradient accumulation over micro-batches (train.microBatchRows) and the planner that picks them
// (src/rl/memory.ts): an update in micro-batches gives the same weights and metrics as one pass over
// the mini-batch (GRPO with several epochs and mini-batches, PPO with its critic and uneven micro-
// batches, SFT), the planner picks the largest micro-batch under the budget or refuses before
// allocating, and a step's measured peak falls with the micro-batch.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Checkpoint, loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { directorySource } from '../../src/agent/model/node-fs.ts';
import { POLICY_STAT } from '../../src/gpu/kernels/policy-loss.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { parseConfigText, type TrainConfig } from '../../src/rl/config.ts';
import { pickMicroBatchRows, trainingMemoryPlan, updateRows } from '../../src/rl/memory.ts';
import {
  lossDenominators,
  mergePolicyStats,
  microBatchRanges,
  type StepMetrics,
  Trainer,
} from '../../src/rl/trainer.ts';
import { getTestGpu } from '../helpers/gpu.ts';

let gpu: Gpu;
let initial: Checkpoint;
const MiB = 2 ** 20;

function microConfig(edit: (c: TrainConfig) => void = () => {}): TrainConfig {
  const c = parseConfigText(readFileSync('configs/micro.json', 'utf8'), 'configs/micro.json');
  edit(c);
  return c;
}

type Weights = Map<string, { shape: number[]; data: Float32Array }>;

/**
 * max |a − b| over every tensor, and the largest |Δ| the update made in `a` (from `before`). With
 * `nearZero` (per tensor, 1 where the last update's gradient was within ADAM_NEAR_ZERO of zero in both
 * runs) those elements are left out of `diff` and counted in `skipped`: see the tolerances below.
 */
function weightDiff(
  a: Weights,
  b: Weights,
  before: ReadonlyMap<string, { data: Float32Array }>,
  nearZero?: ReadonlyMap<string, Uint8Array>,
) {
  let diff = 0;
  let moved = 0;
  let skipped = 0;
  for (const [name, w] of a) {
    const o = b.get(name)!.data;
    const init = before.get(name)?.data;
    const skip = nearZero?.get(name);
    for (let i = 0; i < w.data.length; i++) {
      if (init) moved = Math.max(moved, Math.abs(w.data[i] - init[i]));
      if (skip?.[i]) skipped++;
      else diff = Math.max(diff, Math.abs(w.data[i] - o[i]));
    }
  }
  return { diff, moved, skipped };
}

/** The largest relative difference of two metric lines (numbers; wall-clock keys left out). */
function metricDiff(a: StepMetrics, b: StepMetrics): { key: string; rel: number } {
  expect(Object.keys(b).sort()).toEqual(Object.keys(a).sort());
  let worst = { key: '', rel: 0 };
  for (const [k, v] of Object.entries(a)) {
    if (k.startsWith('time/') || k.startsWith('perf/')) continue;
    const w = b[k];
    if (typeof v !== 'number' || typeof w !== 'number') {
      expect(w, k).toBe(v);
      continue;
    }
    const rel = Math.abs(v - w) / Math.max(1e-3, Math.abs(v), Math.abs(w));
    if (rel > worst.rel) worst = { key: k, rel };
  }
  return worst;
}

beforeAll(async () => {
  gpu = await getTestGpu();
  initial = await loadCheckpoint(directorySource('public/models/qwen-tiny'), { requireTokenizer: true });
});

describe('micro-batches', () => {
  const trainers: Trainer[] = [];
  afterAll(() => {
    for (const t of trainers) t.release();
  });
  async function make(config: TrainConfig) {
    const t = await Trainer.create(gpu, config, initial);
    trainers.push(t);
    return t;
  }
  function drop(t: Trainer) {
    t.release();
    trainers.splice(trainers.indexOf(t), 1);
  }

  /** One step with the whole mini-batch per pass and one with `microBatchRows`; both from the same start. */
  async function compare(edit: (c: TrainConfig) => void, microBatchRows: number) {
    const whole = await make(microConfig(edit));
    const micro = await make(
      microConfig((c) => {
        edit(c);
        c.train.microBatchRows = microBatchRows;
      }),
    );
    expect(whole.microBatch.rows).toBe(updateRows(whole.config));
    expect(micro.microBatch.rows).toBe(microBatchRows);
    const criticBefore = whole.critic ? await whole.critic.exportWeights() : null;
    const mw = await whole.trainStep();
    const mm = await micro.trainStep();
    // The gradients of the last update stay in place after the optimizer step: compare them too (a
    // first AdamW step is about lr·sign(g), blind to a wrong scale of the gradient).
    const gradDiff = async (a: Map<string, Tensor>, b: Map<string, Tensor>) => {
      let diff = 0;
      let max = 0;
      const nearZero = new Map<string, Uint8Array>();
      for (const [name, t] of a) {
        const [x, y] = (await gpu.readMany([t, b.get(name)!])) as Float32Array[];
        const near = new Uint8Array(x.length);
        for (let i = 0; i < x.length; i++) {
          diff = Math.max(diff, Math.abs(x[i] - y[i]));
          max = Math.max(max, Math.abs(x[i]));
          near[i] = Math.max(Math.abs(x[i]), Math.abs(y[i])) < ADAM_NEAR_ZERO ? 1 : 0;
        }
        nearZero.set(name, near);
      }
      return { diff, max, nearZero };
    };
    const grads = (t: Trainer) =>
      new Map([...t.policy.trainableParams().keys()].map((n) => [n, t.policy.grad(n)]));
    const grad = await gradDiff(grads(whole), grads(micro));
    const criticGrad =
      whole.critic && micro.critic ? await gradDiff(whole.critic.grads(), micro.critic.grads()) : null;
    // One update (SFT): its gradients decide which weights AdamW's ε dominates. Several (GRPO's epochs
    // and mini-batches): the last update's gradients say nothing of the earlier ones, so compare all.
    const policy = weightDiff(
      await whole.policy.exportWeights(),
      await micro.policy.exportWeights(),
      initial.tensors,
      whole.config.algorithm.name === 'sft' ? grad.nearZero : undefined,
    );
    const critic =
      whole.critic && micro.critic
        ? weightDiff(await whole.critic.exportWeights(), await micro.critic.exportWeights(), criticBefore!)
        : null;
    const metrics = metricDiff(mw, mm);
    drop(whole);
    drop(micro);
    return { policy, critic, metrics, mw, mm, grad, criticGrad };
  }

  function report(name: string, r: Awaited<ReturnType<typeof compare>>) {
    const e = (x: number) => x.toExponential(2);
    console.log(
      `[micro-batch] ${name}: policy max |Δw| ${e(r.policy.diff)} (the update moved weights by up to ${e(r.policy.moved)}` +
        (r.policy.skipped ? `; ${r.policy.skipped} weights with |g| < ${e(ADAM_NEAR_ZERO)} left out)` : ')') +
        (r.critic ? `, critic ${e(r.critic.diff)} (moved ${e(r.critic.moved)})` : '') +
        (r.criticGrad ? `; critic gradients max |Δ| ${e(r.criticGrad.diff)} of ${e(r.criticGrad.max)}` : '') +
        `; last update's gradients max |Δ| ${e(r.grad.diff)} of max |g| ${e(r.grad.max)}; worst metric ${r.metrics.key} (relative ${e(r.metrics.rel)})`,
    );
  }

  // fp32 sums run in another order (per micro-batch, then across them), so gradients, weights and
  // metrics agree to rounding, not bit for bit. Measured on lavapipe (the console lines): gradients
  // within 6e-5 of max |g| (GRPO's second epoch starts from weights already apart by rounding), 1e-6
  // for PPO and SFT; metrics within 5e-5 relative. AdamW's first step is lr·g/(|g| + ε) (ε = 1e-8):
  // where |g| is near ε, a rounding difference of g is a difference of the update of up to lr itself
  // (SFT on the spaced oracle traces: 6.6 % of lr, from such weights). So SFT's single update leaves
  // out the weights whose gradient is below ADAM_NEAR_ZERO = 100 ε in both runs (there a rounding of
  // 1e-9 moves the update by at most lr·1e-9·ε/|g|² = 1e-3 lr); the multi-update GRPO and PPO cases
  // compare every weight. Weights are held to 5 % of lr, gradients to 1e-3 of their largest value,
  // which any wrong normalisation of a micro-batch breaks (Adam's first step alone is blind to scale).
  const ADAM_NEAR_ZERO = 1e-6;
  const LR = 1e-3;
  const WEIGHT_TOL = 0.05 * LR;
  const GRAD_TOL = 1e-3; // of max |g|
  const METRIC_TOL = 1e-3; // relative (absolute below 1e-3)
  function expectSame(r: Awaited<ReturnType<typeof compare>>) {
    expect(r.policy.moved).toBeGreaterThan(0.5 * LR);
    expect(r.policy.diff).toBeLessThan(WEIGHT_TOL);
    expect(r.grad.diff).toBeLessThan(GRAD_TOL * r.grad.max);
    expect(r.metrics.rel, r.metrics.key).toBeLessThan(METRIC_TOL);
  }

  it('GRPO, 2 epochs × 2 mini-batches, micro-batches of 1 row: the same weights and metrics', async () => {
    const r = await compare((c) => {
      c.actor.lr = LR;
      c.actor.ppoEpochs = 2;
      c.actor.miniBatches = 2;
      c.actor.entropyCoef = 0.01;
      c.actor.klLossCoef = 0.01;
    }, 1);
    report('GRPO', r);
    expectSame(r);
    // the second epoch sees moved weights: clipping and approx-KL are not trivially 0
    expect(r.mw['actor/ppo_kl'] as number).not.toBe(0);
  }, 400_000);

  it('PPO with its critic, uneven micro-batches (3 + 1 rows), seq-mean-token-mean, in-reward KL: the same', async () => {
    const r = await compare((c) => {
      c.algorithm.name = 'ppo';
      c.actor.lr = LR;
      c.critic.lr = LR;
      c.actor.lossAggMode = 'seq-mean-token-mean';
      c.reward.klInRewardCoef = 0.01;
      c.actor.entropyCoef = 0.01;
    }, 3);
    report('PPO', r);
    expectSame(r);
    expect(r.critic!.moved).toBeGreaterThan(0.5 * LR);
    expect(r.critic!.diff).toBeLessThan(WEIGHT_TOL);
    expect(r.criticGrad!.diff).toBeLessThan(GRAD_TOL * r.criticGrad!.max);
    expect(r.mm['critic/vf_loss'] as number).toBeGreaterThan(0);
    // one update, old log-probs its own: ratio 1 in every micro-batch
    expect(r.mm['actor/ppo_kl']).toBe(0);
  }, 400_000);

  it('SFT (context weight 0.5), micro-batches of 1 row: the same weights and metrics', async () => {
    const r = await compare((c) => {
      c.algorithm.name = 'sft';
      c.sft.contextWeight = 0.5;
      c.sft.lr = LR;
    }, 1);
    report('SFT', r);
    expectSame(r);
  }, 400_000);

  it('SFT with the copy drill, micro-batches of 1 row: the same weights, gradients and metrics', async () => {
    // 6 drill rows of 256 tokens: with one trace row per micro-batch the drill runs in several chunks
    const r = await compare((c) => {
      c.algorithm.name = 'sft';
      c.sft.copyRows = 6;
      c.sft.copySpan = 64;
      c.sft.copyRepeats = 4;
      c.sft.lr = LR;
    }, 1);
    report('SFT copy drill', r);
    expectSame(r);
    expect(r.mm['sft/copy_loss'] as number).toBeGreaterThan(0);
  }, 400_000);

  it("a step's measured peak falls with the micro-batch and stays under the planner's bound", async () => {
    const peaks: number[] = [];
    for (const rows of [0, 1]) {
      gpu.resetPeakMemory();
      const base = gpu.stats.liveBytes;
      const t = await make(microConfig((c) => (c.train.microBatchRows = rows)));
      await t.trainStep();
      const peak = gpu.stats.peakLiveBytes - base;
      const plan = trainingMemoryPlan(initial.config, t.config);
      console.log(
        `[micro-batch] GRPO step, micro-batch ${t.microBatch.rows} of ${t.microBatch.updateRows} rows: measured peak ${(peak / MiB).toFixed(1)} MiB, planned ${(plan.peak / MiB).toFixed(1)} MiB`,
      );
      expect(peak).toBeLessThan(plan.peak);
      peaks.push(peak);
      drop(t);
    }
    expect(peaks[1]).toBeLessThan(0.75 * peaks[0]);
  }, 400_000);

  it('refuses before allocating when one row does not fit; an explicit micro-batch over the budget is named', async () => {
    const config = microConfig();
    const one = trainingMemoryPlan(initial.config, config, 1).peak;
    const before = gpu.stats.liveBytes;
    await expect(
      Trainer.create(
        gpu,
        microConfig((c) => (c.train.memoryBudgetMiB = (0.99 * one) / MiB)),
        initial,
      ),
    ).rejects.toThrow(
      /memory planner predicts about [\d.]+ [KMG]i?B at the peak .* with micro-batches of 1 of the 4 rows per update, over train\.memoryBudgetMiB .* even with one row per micro-batch: .*rollout\.maxTotalTokens.*model\.lora\.rank/,
    );
    const two = trainingMemoryPlan(initial.config, config, 2).peak;
    await expect(
      Trainer.create(
        gpu,
        microConfig((c) => {
          c.train.memoryBudgetMiB = (0.99 * two) / MiB;
          c.train.microBatchRows = 2;
        }),
        initial,
      ),
    ).rejects.toThrow(/lower train\.microBatchRows/);
    expect(gpu.stats.liveBytes).toBe(before);
    // the same budget with the planner's choice: one row per micro-batch
    const t = await make(microConfig((c) => (c.train.memoryBudgetMiB = (0.99 * two) / MiB)));
    expect(t.microBatch.rows).toBe(1);
    drop(t);
  });

  it("keeps every activation within the adapter's binding limit; an explicit micro-batch over it is named", async () => {
    // 32 × 8 episodes of up to 1,024 tokens: 384 MiB per MLP activation in one pass, over the 128 MiB
    // that lavapipe and SwiftShader bind (a GpuLimitError in the first forward before the planner knew)
    const big = (microBatchRows: number) =>
      microConfig((c) => {
        c.rollout.questionsPerStep = 32;
        c.rollout.samplesPerQuestion = 8;
        c.rollout.maxTotalTokens = 1024;
        c.train.memoryBudgetMiB = 0;
        c.train.microBatchRows = microBatchRows;
      });
    const limit = gpu.limits.maxStorageBufferBindingSize;
    const bindingAt = (rows: number) => trainingMemoryPlan(initial.config, big(0), rows).largestBinding;
    const t = await make(big(0));
    const rows = t.microBatch.rows;
    drop(t);
    expect(bindingAt(rows)).toBeLessThanOrEqual(limit);
    if (rows < 256) expect(bindingAt(rows + 1)).toBeGreaterThan(limit);
    if (bindingAt(256) <= limit) return; // an adapter that binds it all: nothing to refuse
    expect(rows).toBeLessThan(256);
    const before = gpu.stats.liveBytes;
    await expect(Trainer.create(gpu, big(rows + 1), initial)).rejects.toThrow(
      /binds a [\d.]+ MiB tensor, over this adapter's maxStorageBufferBindingSize \([\d.]+ MiB\): lower train\.microBatchRows/,
    );
    expect(gpu.stats.liveBytes).toBe(before);
  });
});

describe('micro-batch planner (pure)', () => {
  it('picks the largest micro-batch under the budget, the whole update without one', () => {
    // 4 questions × 2 samples in 2 mini-batches: 4 rows per update
    const config = microConfig((c) => {
      c.rollout.questionsPerStep = 4;
      c.actor.miniBatches = 2;
    });
    const m = initial.config;
    expect(updateRows(config)).toBe(4);
    const peaks = [1, 2, 3, 4].map((r) => trainingMemoryPlan(m, config, r).peak);
    for (let r = 1; r < 4; r++) expect(peaks[r]).toBeGreaterThan(peaks[r - 1]);
    // activations scale with the micro-batch, the rollout cache holds every row of the step
    const p1 = trainingMemoryPlan(m, config, 1);
    const p4 = trainingMemoryPlan(m, config, 4);
    expect(p4.activations).toBeCloseTo(4 * p1.activations, 0);
    expect(p1.rollout).toBe(p4.rollout);
    expect(p1.rollout).toBe(
      trainingMemoryPlan(
        m,
        microConfig((c) => (c.rollout.questionsPerStep = 4)),
        1,
      ).rollout,
    );

    expect(pickMicroBatchRows(m, config, 0).rows).toBe(4);
    expect(pickMicroBatchRows(m, config, 0).fits).toBe(true);
    expect(trainingMemoryPlan(m, config).peak).toBe(peaks[3]);
    for (let r = 1; r <= 4; r++) {
      expect(pickMicroBatchRows(m, config, peaks[r - 1]).rows, `budget = plan(${r})`).toBe(r);
      if (r < 4)
        expect(pickMicroBatchRows(m, config, peaks[r] - 1).rows, `just under plan(${r + 1})`).toBe(r);
    }
    const none = pickMicroBatchRows(m, config, peaks[0] - 1);
    expect(none.fits).toBe(false);
    expect(none.rows).toBe(1);
    // the config's budget in MiB, and an explicit size (capped at the update's rows)
    const budgeted = microConfig((c) => {
      c.rollout.questionsPerStep = 4;
      c.actor.miniBatches = 2;
      c.train.memoryBudgetMiB = peaks[2] / MiB;
    });
    expect(pickMicroBatchRows(m, budgeted).rows).toBe(3);
    expect(trainingMemoryPlan(m, budgeted).peak).toBe(peaks[2]);
    // the adapter's binding limit caps the micro-batch like the budget (pure: a given limit)
    // (at this size the largest is the LM head's logits block, [rows × tokens, vocab], under 64 MiB)
    const binding = [1, 2, 3, 4].map((r) => trainingMemoryPlan(m, config, r).largestBinding);
    expect(binding[2]).toBe(3 * config.rollout.maxTotalTokens * m.vocabSize * 4);
    expect(pickMicroBatchRows(m, config, 0, binding[2]).rows).toBe(3);
    expect(pickMicroBatchRows(m, config, 0, binding[2] - 1).rows).toBe(2);
    expect(pickMicroBatchRows(m, config, peaks[1], binding[2]).rows).toBe(2);
    const tooNarrow = pickMicroBatchRows(m, config, 0, binding[0] - 1);
    expect([tooNarrow.rows, tooNarrow.fits, tooNarrow.fitsBinding]).toEqual([1, false, false]);
    const explicit = microConfig((c) => (c.train.microBatchRows = 9));
    expect(pickMicroBatchRows(m, explicit).rows).toBe(4);
    expect(pickMicroBatchRows(m, explicit).auto).toBe(false);
    // SFT: the batch is the update
    const sft = microConfig((c) => {
      c.algorithm.name = 'sft';
      c.sft.batchSize = 6;
    });
    expect(pickMicroBatchRows(m, sft).rows).toBe(6);
    expect(trainingMemoryPlan(m, sft, 2).rollout).toBe(0);
  });

  it('micro-batch ranges, denominators and the stats merge', () => {
    expect(microBatchRanges(0, 4, 4)).toEqual([[0, 4]]);
    expect(microBatchRanges(2, 7, 2)).toEqual([
      [2, 4],
      [4, 6],
      [6, 7],
    ]);
    expect(microBatchRanges(0, 3, 8)).toEqual([[0, 3]]);
    // 3 rows of T = 4: 2, 0 and 3 active tokens
    const mask = Float32Array.from([1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1]);
    expect(lossDenominators(mask, 4, 0, 3)).toEqual({ tokens: 5, rows: 2 });
    expect(lossDenominators(mask, 4, 1, 2)).toEqual({ tokens: 0, rows: 0 });
    const S = POLICY_STAT;
    const stats = (loss: number, clip: number, tokens: number, rows: number) => {
      const s = new Float32Array(S.size);
      s[S.loss] = loss;
      s[S.pgLoss] = loss;
      s[S.clipfrac] = clip;
      s[S.ppoKl] = clip / 2;
      s[S.activeTokens] = tokens;
      s[S.activeRows] = rows;
      s[S.tokensDenominator] = 5;
      s[S.rowsDenominator] = 2;
      return s;
    };
    const merged = mergePolicyStats([stats(0.5, 0.5, 2, 1), stats(0, 0, 0, 0), stats(0.25, 1 / 3, 3, 1)]);
    expect(merged[S.loss]).toBeCloseTo(0.75, 6);
    expect(merged[S.clipfrac]).toBeCloseTo((0.5 * 2 + 1) / 5, 6);
    expect(merged[S.ppoKl]).toBeCloseTo((0.25 * 2 + 0.5) / 5, 6);
    expect(merged[S.activeTokens]).toBe(5);
    expect(merged[S.activeRows]).toBe(2);
    expect(merged[S.tokensDenominator]).toBe(5);
  });
});
