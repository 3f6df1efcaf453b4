// Random Qwen-architecture models of any shape for benchmarks (weights uniform ±0.02, norms 1).
import { type ModelConfig, parseModelConfig } from '../src/agent/model/config.ts';
import { packBatch, type QwenGpuModel } from '../src/agent/model/qwen-gpu.ts';
import { expectedTensors } from '../src/agent/model/weights.ts';
import { AdamW } from '../src/gpu/kernels/optimizer.ts';
import type { Gpu } from '../src/gpu/runtime.ts';

export interface ModelShape {
  name: string;
  arch?: 'qwen2' | 'qwen3';
  vocab: number;
  hidden: number;
  intermediate: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim?: number;
  tied?: boolean;
}

/** Qwen2.5-0.5B's published shape (config.json of Qwen/Qwen2.5-0.5B-Instruct). */
export const QWEN25_05B: ModelShape = {
  name: 'Qwen2.5-0.5B-shaped',
  vocab: 151936,
  hidden: 896,
  intermediate: 4864,
  layers: 24,
  heads: 14,
  kvHeads: 2,
  tied: true,
};

/** The bundled tiny model's shape (scripts/make-tiny-checkpoints.ts) with the real vocabulary. */
export const TINY: ModelShape = {
  name: 'tiny (D64, 2 layers, V151936)',
  vocab: 151936,
  hidden: 64,
  intermediate: 128,
  layers: 2,
  heads: 4,
  kvHeads: 2,
};

export function shapeConfig(s: ModelShape): ModelConfig {
  const raw: Record<string, unknown> = {
    architectures: [s.arch === 'qwen3' ? 'Qwen3ForCausalLM' : 'Qwen2ForCausalLM'],
    model_type: s.arch ?? 'qwen2',
    vocab_size: s.vocab,
    hidden_size: s.hidden,
    intermediate_size: s.intermediate,
    num_hidden_layers: s.layers,
    num_attention_heads: s.heads,
    num_key_value_heads: s.kvHeads,
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    max_position_embeddings: 32768,
    tie_word_embeddings: s.tied ?? false,
    torch_dtype: 'float32',
  };
  if (s.headDim) raw.head_dim = s.headDim;
  return parseModelConfig(raw, `${s.name}/config.json`);
}

export function randomWeights(
  config: ModelConfig,
  seed = 1,
): Map<string, { shape: number[]; data: Float32Array }> {
  let state = seed >>> 0;
  const out = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const { name, shape } of expectedTensors(config)) {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    if (name.endsWith('norm.weight')) data.fill(1);
    else {
      for (let i = 0; i < data.length; i++) {
        state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
        data[i] = (state / 2 ** 32 - 0.5) * 0.04;
      }
    }
    out.set(name, { shape, data });
  }
  return out;
}

/** Median of `reps` timed runs after `warmup` untimed ones. */
export async function median(run: () => Promise<void>, reps: number, warmup = 1): Promise<number> {
  for (let i = 0; i < warmup; i++) await run();
  const times: number[] = [];
  for (let r = 0; r < reps; r++) {
    const t0 = performance.now();
    await run();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)];
}

/** Deterministic token ids for benchmarks (a hash of position and seed). */
export function benchIds(n: number, seed: number, vocab: number): number[] {
  return Array.from({ length: n }, (_, i) => (i * 2654435761 + seed * 97) % vocab);
}

/**
 * A next-token training step on B rows of T benchmark ids: forward, backward, AdamW, then a sync.
 * `run` does one step; `release` frees the optimizer state and the loss gradient.
 */
export function benchTrainStep(gpu: Gpu, model: QwenGpuModel, B: number, T: number, lr = 1e-4) {
  const vocab = model.config.vocabSize;
  const batch = packBatch(
    Array.from({ length: B }, (_, b) => benchIds(T, b, vocab)),
    { padSide: 'right' },
  );
  const N = B * T;
  const targets = new Uint32Array(N);
  const mask = new Uint32Array(N);
  for (let i = 0; i < N; i++)
    if ((i + 1) % T !== 0) {
      targets[i] = batch.ids[i + 1];
      mask[i] = 1;
    }
  const gLp = gpu.upload(
    Float32Array.from(mask, (m) => (m ? -1 / N : 0)),
    [N],
  );
  const opt = new AdamW(gpu, model.trainableParams(), { lr, maxGradNorm: 1 });
  return {
    run: async () => {
      model.zeroGrad();
      const fwd = model.forward(batch, targets, mask);
      model.backward(fwd, gLp);
      opt.step(model.grads);
      fwd.release();
      await gpu.sync();
    },
    release: () => {
      opt.release();
      gLp.release();
    },
  };
}
