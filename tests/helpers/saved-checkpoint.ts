// Reading back a checkpoint a run saved (HF layout in RunStorage) and comparing it with the policy.
import { type Checkpoint, loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { packBatch, QwenGpuModel } from '../../src/agent/model/qwen-gpu.ts';
import { memorySource } from '../../src/agent/model/sources.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import type { RunStorage } from '../../src/rl/storage.ts';

/** The HF checkpoint saved under `dir` (config, weights, tokenizer). */
export async function loadSavedCheckpoint(storage: RunStorage, dir: string): Promise<Checkpoint> {
  const names = ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'];
  const files = new Map(
    await Promise.all(names.map(async (n) => [n, (await storage.read(`${dir}/${n}`))!] as const)),
  );
  return loadCheckpoint(memorySource(files));
}

/** Largest |Δ logit| between `policy` and a fresh model of `saved` on a short probe sequence. */
export async function logitGap(gpu: Gpu, policy: QwenGpuModel, saved: Checkpoint): Promise<number> {
  const model = new QwenGpuModel(gpu, saved.config, saved.tensors);
  const probe = packBatch([[1, 2, 3, 4, 5, 6, 7, 8]]);
  const a = await policy.logits(probe);
  const b = await model.logits(probe);
  model.release();
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}
