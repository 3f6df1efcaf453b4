// The memory planner (src/agent/model/memory-plan.ts) against peaks measured on the adapter: a
// forward and backward of QwenGpuModel (weights, activations, gradients, the backward's scratch), for
// full fine-tuning and LoRA, with and without recomputation, with the full and the compact LM head.
import { describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import type { ModelConfig } from '../../src/agent/model/config.ts';
import { initLoraWeights, LORA_MODULES, type LoraConfig } from '../../src/agent/model/lora.ts';
import { describeMemoryPlan, planTrainingMemory } from '../../src/agent/model/memory-plan.ts';
import { directorySource } from '../../src/agent/model/node-fs.ts';
import { packBatch, QwenGpuModel } from '../../src/agent/model/qwen-gpu.ts';
import { tinyCheckpoint, tinySpec } from '../../src/agent/model/tiny-checkpoints.ts';
import { getTestGpu } from '../helpers/gpu.ts';

type Weights = Map<string, { shape: number[]; data: Float32Array }>;

async function measuredPeak(
  config: ModelConfig,
  weights: Weights,
  s: {
    rows: number;
    tokens: number;
    lora: LoraConfig | null;
    recompute: boolean;
    share: number;
    frozen: 'f32' | 'f16' | 'bf16';
  },
): Promise<{ peak: number; largest: number }> {
  const gpu = await getTestGpu();
  const base = gpu.stats.liveBytes;
  gpu.resetPeakMemory();
  const model = new QwenGpuModel(gpu, config, weights);
  if (s.lora) model.addLora(s.lora, initLoraWeights(config, s.lora, 1));
  if (s.frozen !== 'f32') {
    // The conversion's transient (the f32 weights, planned separately) is not the update's peak.
    await model.storeFrozenAs(s.frozen);
    gpu.resetPeakMemory();
  }
  model.recomputeActivations = s.recompute;
  const seqs = Array.from({ length: s.rows }, (_, b) =>
    Array.from({ length: s.tokens }, (_, i) => (i * 7 + b) % config.vocabSize),
  );
  const N = s.rows * s.tokens;
  const mask = Uint32Array.from({ length: N }, (_, i) => (i % 10 < s.share * 10 ? 1 : 0));
  gpu.resetLargestBuffer(); // the weights' tensors are bound in chunks by their kernels
  const fwd = model.forward(packBatch(seqs), new Uint32Array(N).fill(1), mask);
  const g = gpu.upload(new Float32Array(N).fill(1 / N), [N]);
  model.backward(fwd, g);
  const peak = gpu.stats.peakLiveBytes - base;
  const largest = gpu.stats.largestBuffer;
  fwd.release();
  g.release();
  model.release();
  return { peak, largest };
}

describe('memory planner', () => {
  const lora: LoraConfig = { rank: 8, alpha: 16, modules: [...LORA_MODULES] };
  it('predicts the peak of a forward and backward within 10% (qwen-tiny and a Qwen3 with 512 rows)', async () => {
    const qwenTiny = await loadCheckpoint(directorySource('public/models/qwen-tiny'));
    const small = tinyCheckpoint(tinySpec('tiny-qwen3-v512'));
    const cases = [];
    for (const [ck, rows, tokens] of [
      [qwenTiny, 8, 256],
      [qwenTiny, 2, 128],
      [small, 4, 192],
    ] as const)
      for (const withLora of [false, true])
        for (const recompute of [false, true])
          for (const share of [1, 0.2])
            for (const frozen of withLora ? (['f32', 'bf16'] as const) : (['f32'] as const))
              cases.push({ ck, rows, tokens, lora: withLora ? lora : null, recompute, share, frozen });
    const report: string[] = [];
    const largestRatios: number[] = [];
    for (const s of cases) {
      const weights = s.ck.tensors as unknown as Weights;
      const { peak: measured, largest } = await measuredPeak(s.ck.config, weights, s);
      const plan = planTrainingMemory({
        config: s.ck.config,
        rows: s.rows,
        tokens: s.tokens,
        headShare: s.share,
        lora: s.lora,
        recompute: s.recompute,
        frozenWeights: s.frozen,
      });
      const ratio = plan.updatePeak / measured;
      report.push(
        `${s.ck.config.hiddenSize}/${s.rows}x${s.tokens}${s.lora ? ' lora' : ''}${s.frozen !== 'f32' ? ` ${s.frozen}` : ''}${s.recompute ? ' recompute' : ''} head ${s.share}: ${ratio.toFixed(3)}`,
      );
      expect(ratio, report.at(-1)).toBeGreaterThan(0.9);
      expect(ratio, report.at(-1)).toBeLessThan(1.1);
      // every activation the forward/backward allocated fits the binding the planner sizes micro-batches
      // by; tensors shaped like a weight (its gradient) are bound in chunks, as the weights are
      const largestWeight = Math.max(...[...weights.values()].map((w) => w.data.length * 4));
      expect(largest, `${report.at(-1)}: largest tensor`).toBeLessThanOrEqual(
        Math.max(plan.largestBinding, largestWeight),
      );
      largestRatios.push(largest / plan.largestBinding);
    }
    console.log(
      `[memory plan] largest tensor / planned largest binding: ${largestRatios.map((r) => r.toFixed(2)).join(' ')}`,
    );
    console.log(`[memory plan] predicted / measured: ${report.join('; ')}`);
  }, 300_000);

  it('counts the step: a reference copy and AdamW moments for full fine-tuning, neither for LoRA; the rollout cache', () => {
    const { config } = tinyCheckpoint(tinySpec('tiny-qwen3-v512'));
    const full = planTrainingMemory({ config, rows: 16, tokens: 512, reference: true, optimizer: true });
    const adapted = planTrainingMemory({
      config,
      rows: 16,
      tokens: 512,
      reference: true,
      optimizer: true,
      lora,
    });
    expect(full.reference).toBe(full.weights);
    expect(adapted.reference).toBe(0);
    expect(adapted.optimizer).toBeLessThan(full.optimizer / 4);
    const withRollout = planTrainingMemory({
      config,
      rows: 16,
      tokens: 512,
      rolloutRows: 16,
      rolloutLength: 512,
    });
    expect(withRollout.rollout).toBe(2 * 16 * 512 * 2 * 2 * 32 * 4 + 16 * (512 + 512) * 4);
    expect(describeMemoryPlan(full)).toMatch(/^about [\d.]+ [KMG]i?B at the peak \(weights/);
  });
});
