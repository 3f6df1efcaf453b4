// model.frozenWeights: a LoRA run whose frozen base is stored in half precision. The invariants of
// the first update hold (the KL reference is the same half base with adapters off, and the sampler
// and trainer read the same weights), the base stays half and unchanged, the saved merged checkpoint
// is the policy, resume = uninterrupted; the config refuses half precision for full fine-tuning.
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Checkpoint, loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { decodeBf16, encodeBf16 } from '../../src/agent/model/dtype.ts';
import { directorySource } from '../../src/agent/model/node-fs.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import { ConfigError, parseConfigText, resolveConfig, type TrainConfig } from '../../src/rl/config.ts';
import { memoryStorage } from '../../src/rl/storage.ts';
import { type StepMetrics, Trainer } from '../../src/rl/trainer.ts';
import { getTestGpu } from '../helpers/gpu.ts';
import { loadSavedCheckpoint, logitGap } from '../helpers/saved-checkpoint.ts';

let gpu: Gpu;
let initial: Checkpoint;

beforeAll(async () => {
  gpu = await getTestGpu();
  initial = await loadCheckpoint(directorySource('public/models/qwen-tiny'), { requireTokenizer: true });
});

function timeless(m: StepMetrics): StepMetrics {
  return Object.fromEntries(
    Object.entries(m).filter(([k]) => !k.startsWith('time/') && !k.startsWith('perf/')),
  );
}

describe('half-precision frozen base (model.frozenWeights)', () => {
  it('bf16 base under LoRA: first update ratio 1 and KL 0, base half and unchanged, merged checkpoint = policy, resume = uninterrupted', async () => {
    const config: TrainConfig = parseConfigText(readFileSync('configs/micro.json', 'utf8'));
    config.model.lora = { rank: 4, alpha: 8, modules: ['q_proj', 'v_proj', 'up_proj', 'down_proj'] };
    config.model.frozenWeights = 'bf16';
    config.actor.entropyCoef = 0.01;
    config.actor.lr = 1e-2;
    config.train.evalSize = 0;
    const storage = memoryStorage();
    const t = await Trainer.create(gpu, config, initial, { storage });
    expect(t.policy.frozenDtype).toBe('bf16');
    expect(t.policy.params.get('model.layers.0.mlp.down_proj.weight')!.dtype).toBe('bf16');
    const m1 = await t.trainStep();
    expect(m1['actor/kl_ref_k3']).toBe(0);
    expect(m1['actor/ppo_kl']).toBe(0);
    expect(Math.abs(m1['rollout/mismatch_kl_k3'] as number)).toBeLessThan(1e-6);
    expect(m1['train/skipped_updates']).toBe(0);
    // The base is the bf16-rounded initial weights, untouched by the update.
    const base = await t.policy.exportWeights();
    const up = 'model.layers.1.mlp.up_proj.weight';
    expect(base.get(up)!.data).toEqual(decodeBf16(encodeBf16(initial.tensors.get(up)!.data)));
    expect(base.get('model.norm.weight')!.data).toEqual(initial.tensors.get('model.norm.weight')!.data);

    await t.saveCheckpoint();
    // The merged checkpoint (widened base + adapters) is the policy.
    expect(
      await logitGap(gpu, t.policy, await loadSavedCheckpoint(storage, 'checkpoints/step-000001')),
    ).toBeLessThan(1e-4);

    const m2 = await t.trainStep();
    expect(m2['actor/kl_ref_k3'] as number).toBeGreaterThan(0);
    const resumed = await Trainer.create(gpu, config, initial, { storage, resume: true });
    expect(resumed.policy.frozenDtype).toBe('bf16');
    expect(timeless(await resumed.trainStep())).toEqual(timeless(m2));
    t.release();
    resumed.release();
  }, 400_000);

  it('the config refuses half precision without LoRA, naming the key', () => {
    expect(() => resolveConfig({ model: { frozenWeights: 'f16' } })).toThrow(ConfigError);
    expect(() => resolveConfig({ model: { frozenWeights: 'f16' } })).toThrow(/model\.frozenWeights.*LoRA/);
    expect(() => resolveConfig({ model: { frozenWeights: 'f8', lora: { rank: 4 } } })).toThrow(
      /model\.frozenWeights/,
    );
    expect(resolveConfig({ model: { frozenWeights: 'auto', lora: { rank: 4 } } }).model.frozenWeights).toBe(
      'auto',
    );
  });
});
