// The GPU memory a training step will need, predicted from the config before anything is allocated.
// Counted the way QwenGpuModel allocates (f32, 4 bytes per float; frozen base matrices of a LoRA
// run 2 bytes with model.frozenWeights f16 / bf16):
//
//   persistent   policy weights (+ LoRA adapters), the KL reference (a second copy, or none with
//                LoRA), AdamW's two moments per trained value, PPO's critic
//   forward      per token and layer: x, h, x1, h2 [D]; q, o [H·hd]; k, v [KV·hd]; Qwen3's q/k before
//                their norm; g, u, a [F]; the norms' rstd and attention's lse; LoRA's t [r] per module.
//                With recomputation only each layer's input [D] is kept. Per token after the trunk:
//                the final stream and norm [2D], ids/seg/pos, attention's segment spans [2], targets,
//                the head's log-prob/entropy/lse.
//   backward     gradients of the trained values (+ scratch gradients of frozen norms), then the
//                larger of two moments: the LM head's (its own gradient only, a [rows, vocab chunk]
//                logits block and dh [N, D]) and the last layer's (all gradients, dx [N, D] and dg,
//                du, da [N, F]; with recomputation also the layer's activations, rebuilt from its input)
//   rollout      the KV cache of the batch: layers × rows × length × 2 × KV × hd, and the logits
//
// tests/agent/memory-plan.test.ts checks the forward/backward prediction against peaks measured on
// the adapter (within 10%).

import { formatBytes } from '../../gpu/errors.ts';
import type { ModelConfig } from './config.ts';
import type { LoraConfig } from './lora.ts';
import { parameterCount } from './weights.ts';

const F32 = 4;
// A half-precision base is converted on the CPU and uploaded as half (QwenGpuModel's frozenDtype):
// no f32 copy of it ever exists on the GPU.
/** tokenLogprob's default vocabulary chunk (src/gpu/kernels/logprob.ts). */
const VOCAB_CHUNK = 4096;
const LOGITS_BUDGET_BYTES = 64 * 1024 * 1024;

export interface MemoryPlanInput {
  config: ModelConfig;
  /** Sequences per forward/backward (rows) and their padded length. */
  rows: number;
  tokens: number;
  /** Share of positions the LM head trains on (RL: the policy's tokens); below 0.75 the head is compact. */
  headShare?: number;
  lora?: LoraConfig | null;
  recompute?: boolean;
  /** Storage of the frozen base matrices under LoRA (QwenGpuModel.storeFrozenAs); f32 by default. */
  frozenWeights?: 'f32' | 'f16' | 'bf16' | 'auto';
  /** A frozen copy as KL reference (full fine-tuning of an RL run); LoRA never needs one. */
  reference?: boolean;
  /** AdamW moments for the trained values. */
  optimizer?: boolean;
  /** PPO's critic: a second trunk with its gradients, moments and activations. */
  critic?: boolean;
  /** Rollout: rows decoding together and the cache length (0: no rollout phase). */
  rolloutRows?: number;
  rolloutLength?: number;
}

export interface MemoryPlan {
  weights: number;
  reference: number;
  optimizer: number;
  critic: number;
  activations: number;
  gradients: number;
  /** The backward's scratch on top of all gradients at its peak (negative when the peak is the head's). */
  backwardTransient: number;
  rollout: number;
  /** Forward + backward of one batch: weights, activations, gradients and the backward's scratch. */
  updatePeak: number;
  /** The step's peak: persistent memory plus the larger of the update and the rollout. */
  peak: number;
  /**
   * The largest single tensor a forward/backward of the batch binds to one kernel: an activation
   * [N, max(F, H·hd, D)] or the head's logits block. Weight matrices and embedding tables are chunked
   * by their kernels, activations are not, so this must fit the adapter's maxStorageBufferBindingSize.
   */
  largestBinding: number;
}

/**
 * The widest per-token activation of a forward, in floats: max(F, H·hd, KV·hd, D). An [N, widest]
 * tensor must fit one storage binding (activations are not chunked; weights are), which bounds both a
 * training micro-batch (largestBinding below) and the new tokens of one cached forward
 * (QwenGpuModel.maxTokensPerForward).
 */
export function widestActivation(c: ModelConfig): number {
  return Math.max(c.intermediateSize, c.numHeads * c.headDim, c.numKvHeads * c.headDim, c.hiddenSize);
}

/** Floats kept per token per layer by the training forward (without recomputation). */
export function activationFloatsPerTokenLayer(c: ModelConfig, lora: LoraConfig | null = null): number {
  const D = c.hiddenSize;
  const qDim = c.numHeads * c.headDim;
  const kvDim = c.numKvHeads * c.headDim;
  const qk = c.qkNorm ? qDim + kvDim + c.numHeads + c.numKvHeads : 0;
  const loraT = lora ? lora.rank * lora.modules.length : 0;
  return 4 * D + 2 + qk + 2 * qDim + 2 * kvDim + c.numHeads + 3 * c.intermediateSize + loraT;
}

function loraParameterCount(c: ModelConfig, lora: LoraConfig): number {
  const D = c.hiddenSize;
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const F = c.intermediateSize;
  const dims: Record<string, [number, number]> = {
    q_proj: [q, D],
    k_proj: [kv, D],
    v_proj: [kv, D],
    o_proj: [D, q],
    gate_proj: [F, D],
    up_proj: [F, D],
    down_proj: [D, F],
  };
  return c.numLayers * lora.modules.reduce((n, m) => n + lora.rank * (dims[m][0] + dims[m][1]), 0);
}

/** Bias values (Qwen2's q/k/v biases; o_proj's where attention_bias says so). */
function biasValues(c: ModelConfig): number {
  const qkv = c.qkvBias ? (c.numHeads + 2 * c.numKvHeads) * c.headDim : 0;
  return c.numLayers * (qkv + (c.oBias ? c.hiddenSize : 0));
}

export function planTrainingMemory(input: MemoryPlanInput): MemoryPlan {
  const c = input.config;
  const lora = input.lora ?? null;
  const N = input.rows * input.tokens;
  const D = c.hiddenSize;
  const F = c.intermediateSize;
  const V = c.vocabSize;
  const P = parameterCount(c);
  const loraP = lora ? loraParameterCount(c, lora) : 0;
  const trained = lora ? loraP : P;
  const normValues = c.numLayers * (2 * D + (c.qkNorm ? 2 * c.headDim : 0)) + D;

  // Half-precision base (LoRA only): the matrices take 2 bytes; norms and biases stay f32.
  const halfBase = lora && (input.frozenWeights ?? 'f32') !== 'f32';
  const matrixValues = P - normValues - biasValues(c);
  const weights = (P + loraP) * F32 - (halfBase ? matrixValues * 2 : 0);
  const reference = input.reference && !lora ? P * F32 : 0;
  const optimizer = input.optimizer ? 2 * trained * F32 : 0;

  const perLayer = activationFloatsPerTokenLayer(c, lora) * N * F32;
  const headRows = (input.headShare ?? 1) <= 0.75 ? Math.ceil(N * (input.headShare ?? 1)) : N;
  const compactHead = headRows < N ? headRows * (D + 5) * F32 : 0;
  const trunkTail = N * (2 * D + 10) * F32 + compactHead;
  const activations = (input.recompute ? c.numLayers * N * D * F32 : c.numLayers * perLayer) + trunkTail;

  const gradients = (lora ? loraP + normValues : P) * F32;
  const chunk = Math.min(
    V,
    VOCAB_CHUNK,
    Math.max(1, Math.floor(LOGITS_BUDGET_BYTES / (F32 * Math.max(1, headRows)))),
  );
  const headTransient = headRows * chunk * F32 + N * D * F32;
  const layerTransient = N * (D + 3 * F) * F32 + (input.recompute ? perLayer - N * D * F32 : 0);
  // Gradients are created as backward reaches them: the head's step has only the LM head's gradient
  // (frozen under LoRA), the layers' steps end with all of them.
  const headGradient = lora ? 0 : V * D * F32;
  const backwardTransient = Math.max(headTransient + headGradient - gradients, layerTransient);
  const largestBinding = Math.max(N * widestActivation(c) * F32, headRows * chunk * F32);
  const updatePeak = weights + activations + gradients + backwardTransient;

  // PPO's critic: its own trunk, gradients and moments; its update runs after the actor's.
  const critic = input.critic ? P * F32 * (input.optimizer ? 3 : 2) : 0;
  const rollout =
    input.rolloutRows && input.rolloutLength
      ? c.numLayers * input.rolloutRows * input.rolloutLength * 2 * c.numKvHeads * c.headDim * F32 +
        input.rolloutRows * (input.rolloutLength + V) * F32
      : 0;
  const persistent = reference + optimizer + critic;
  const peak = persistent + Math.max(updatePeak, weights + rollout);
  return {
    weights,
    reference,
    optimizer,
    critic,
    activations,
    gradients,
    backwardTransient,
    rollout,
    updatePeak,
    peak,
    largestBinding,
  };
}

/** One line for people: the peak and what it is made of. */
export function describeMemoryPlan(plan: MemoryPlan): string {
  const parts = [
    ['weights', plan.weights],
    ['reference', plan.reference],
    ['optimizer', plan.optimizer],
    ['critic', plan.critic],
    ['activations', plan.activations],
    ['gradients', plan.gradients],
    ['backward scratch', plan.backwardTransient],
  ]
    .filter(([, b]) => (b as number) > 0)
    .map(([n, b]) => `${n} ${formatBytes(b as number)}`);
  return `about ${formatBytes(plan.peak)} at the peak (${parts.join(', ')})`;
}
