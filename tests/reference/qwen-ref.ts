// Reference forward pass of the Qwen2 / Qwen3 decoder in plain TypeScript, Float64 arithmetic.
//
// This is the oracle the GPU model is tested against, so it follows transformers'
// modeling_qwen2.py / modeling_qwen3.py step by step, and is written for clarity, not speed:
//
//   x = embed_tokens[ids]                                           [T, H]
//   for each layer:
//     h = RMSNorm(x) * input_layernorm                              [T, H]
//     q = h Wq^T (+bq)  -> [T, nh, D];  k, v = h Wk^T (+bk), h Wv^T (+bv)  -> [T, nkv, D]
//     Qwen3: q, k = RMSNorm over D per head * q_norm / k_norm       (before RoPE)
//     q, k = RoPE(q, k, position)                                   rotate_half: halves [0, D/2), [D/2, D)
//     per query head h, kv head g = floor(h / (nh / nkv))           (repeat_kv)
//       scores[t, s] = q[t] . k[s] / sqrt(D), for s <= t with mask[s] = 1; softmax over s
//       attn[t] = sum_s p[t, s] v[s]
//     x = x + concat_heads(attn) Wo^T (+bo)
//     h = RMSNorm(x) * post_attention_layernorm
//     x = x + down( silu(gate(h)) * up(h) )
//   logits = RMSNorm(x) * norm  @ lm_head^T    (lm_head = embed_tokens when tied)     [T, V]
//
// Differences from PyTorch are only in rounding: HF computes in the weights' dtype (RMSNorm and
// softmax upcast to float32), we compute everything in float64, so GPU results must match to a
// tolerance, not bit for bit. One float32 step is kept on purpose (ropeAngles: 'f32', the default):
// HF computes RoPE's inv_freq and angle = position * inv_freq in float32, and at positions in the
// thousands that rounding moves the angle by ~1e-4 rad, more than a kernel tolerance; the GPU kernel
// follows HF there, so the oracle does too. 'exact' gives the real-number angles.
//
// Padding: a sequence's attention mask (1 = real token, 0 = padding) removes padded keys. Queries at
// padded positions have no key left to attend to; their outputs are undefined in HF (eager gives a
// uniform average, SDPA something else) and must never be used. Here their attention output is 0.

import type { ModelConfig } from '../../src/agent/model/config.ts';

export type Weights = ReadonlyMap<string, { data: ArrayLike<number> }>;

export type RopeAngles = 'f32' | 'exact';

export interface ForwardOptions {
  /** 1 = attend to this token, 0 = padding. Default: all ones. */
  attentionMask?: readonly number[];
  /** RoPE position of each token. Default: 0..T-1 (what HF uses when no position_ids are given). */
  positions?: readonly number[];
  /** RoPE angles as HF computes them in float32 (default), or exact. */
  ropeAngles?: RopeAngles;
}

export interface ForwardResult {
  /** [T, V] row-major logits. */
  logits: Float64Array;
  /** Residual stream after the embedding ([T, H]) and after each layer ([T, H] each). */
  hidden: Float64Array[];
  /** Final hidden state after model.norm, [T, H]. */
  normed: Float64Array;
}

function weight(weights: Weights, name: string): ArrayLike<number> {
  const t = weights.get(name);
  if (t === undefined) throw new Error(`reference forward: missing tensor '${name}'`);
  return t.data;
}

/** y[o] = sum_i W[o, i] x[i] + b[o] for a [out, in] weight (nn.Linear). x: [T, in] -> [T, out]. */
export function linear(
  x: Float64Array,
  T: number,
  inDim: number,
  w: ArrayLike<number>,
  outDim: number,
  bias: ArrayLike<number> | null,
): Float64Array {
  const y = new Float64Array(T * outDim);
  for (let t = 0; t < T; t++) {
    for (let o = 0; o < outDim; o++) {
      let acc = bias === null ? 0 : bias[o];
      for (let i = 0; i < inDim; i++) acc += w[o * inDim + i] * x[t * inDim + i];
      y[t * outDim + o] = acc;
    }
  }
  return y;
}

/** RMSNorm over the last dimension of size `dim`: x / sqrt(mean(x^2) + eps) * weight. */
export function rmsNorm(x: Float64Array, dim: number, w: ArrayLike<number>, eps: number): Float64Array {
  const y = new Float64Array(x.length);
  for (let row = 0; row < x.length / dim; row++) {
    let sumSq = 0;
    for (let i = 0; i < dim; i++) sumSq += x[row * dim + i] ** 2;
    const inv = 1 / Math.sqrt(sumSq / dim + eps);
    for (let i = 0; i < dim; i++) y[row * dim + i] = x[row * dim + i] * inv * w[i];
  }
  return y;
}

/**
 * RoPE inverse frequencies theta^(-2i/D), i < D/2. 'f32' replicates transformers'
 *   inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
 * in float32, each step rounded to float32.
 */
export function ropeInvFreq(D: number, theta: number, angles: RopeAngles = 'f32'): Float64Array {
  const out = new Float64Array(D / 2);
  for (let i = 0; i < D / 2; i++) {
    if (angles === 'exact') out[i] = theta ** (-(2 * i) / D);
    else out[i] = Math.fround(1 / Math.fround(Math.fround(theta) ** Math.fround((2 * i) / D)));
  }
  return out;
}

/**
 * Rotate one head vector (D values from `offset`) in place for RoPE at `position`, HF convention:
 *   angle[i]     = position * inv_freq[i]   (rounded to float32 in 'f32' mode, as HF's f32 matmul does)
 *   out[i]       = x[i] cos(angle[i]) - x[i + D/2] sin(angle[i])
 *   out[i + D/2] = x[i + D/2] cos(angle[i]) + x[i] sin(angle[i])
 * (x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1]; NOT the interleaved-pairs form).
 */
export function applyRope(
  x: Float64Array,
  offset: number,
  D: number,
  position: number,
  theta: number,
  angles: RopeAngles = 'f32',
): void {
  const invFreq = ropeInvFreq(D, theta, angles);
  const half = D / 2;
  for (let i = 0; i < half; i++) {
    const angle =
      angles === 'exact' ? position * invFreq[i] : Math.fround(Math.fround(position) * invFreq[i]);
    const cos = Math.cos(angle);
    const sin = Math.sin(angle);
    const a = x[offset + i];
    const b = x[offset + i + half];
    x[offset + i] = a * cos - b * sin;
    x[offset + i + half] = b * cos + a * sin;
  }
}

export function silu(v: number): number {
  return v / (1 + Math.exp(-v));
}

/** Forward one sequence of token ids; returns logits for every position. */
export function qwenForward(
  config: ModelConfig,
  weights: Weights,
  tokens: readonly number[],
  options: ForwardOptions = {},
): ForwardResult {
  const {
    hiddenSize: H,
    intermediateSize: I,
    numHeads: nh,
    numKvHeads: nkv,
    headDim: D,
    vocabSize: V,
  } = config;
  const T = tokens.length;
  const mask = options.attentionMask ?? tokens.map(() => 1);
  const positions = options.positions ?? tokens.map((_, t) => t);
  if (mask.length !== T || positions.length !== T)
    throw new Error('reference forward: mask/positions length != T');
  const ropeAngles = options.ropeAngles ?? 'f32';
  const eps = config.rmsNormEps;
  const groupSize = nh / nkv; // query heads per kv head
  const scale = 1 / Math.sqrt(D);

  // Embedding lookup: x[t] = embed_tokens[tokens[t]].
  const embed = weight(weights, 'model.embed_tokens.weight');
  let x = new Float64Array(T * H);
  for (let t = 0; t < T; t++) {
    const id = tokens[t];
    if (!Number.isInteger(id) || id < 0 || id >= V)
      throw new Error(`reference forward: token ${id} out of range`);
    for (let i = 0; i < H; i++) x[t * H + i] = embed[id * H + i];
  }
  const hidden = [x.slice()];

  for (let l = 0; l < config.numLayers; l++) {
    const p = `model.layers.${l}`;
    const w = (n: string) => weight(weights, `${p}.${n}`);
    const b = (n: string, has: boolean) => (has ? weight(weights, `${p}.${n}`) : null);

    // ---- self-attention block
    const h = rmsNorm(x, H, w('input_layernorm.weight'), eps);
    const q = linear(
      h,
      T,
      H,
      w('self_attn.q_proj.weight'),
      nh * D,
      b('self_attn.q_proj.bias', config.qkvBias),
    ); // [T, nh*D]
    const k = linear(
      h,
      T,
      H,
      w('self_attn.k_proj.weight'),
      nkv * D,
      b('self_attn.k_proj.bias', config.qkvBias),
    ); // [T, nkv*D]
    const v = linear(
      h,
      T,
      H,
      w('self_attn.v_proj.weight'),
      nkv * D,
      b('self_attn.v_proj.bias', config.qkvBias),
    ); // [T, nkv*D]
    let qh = q;
    let kh = k;
    if (config.qkNorm) {
      // Qwen3: RMSNorm over each head's D values (rows of D in the [T, heads*D] layout).
      qh = rmsNorm(q, D, w('self_attn.q_norm.weight'), eps);
      kh = rmsNorm(k, D, w('self_attn.k_norm.weight'), eps);
    }
    for (let t = 0; t < T; t++) {
      const pos = positions[t];
      for (let head = 0; head < nh; head++)
        applyRope(qh, (t * nh + head) * D, D, pos, config.ropeTheta, ropeAngles);
      for (let g = 0; g < nkv; g++) applyRope(kh, (t * nkv + g) * D, D, pos, config.ropeTheta, ropeAngles);
    }

    const attn = new Float64Array(T * nh * D); // [T, nh*D], heads concatenated as HF's reshape does
    const scores = new Float64Array(T);
    for (let head = 0; head < nh; head++) {
      const g = Math.floor(head / groupSize);
      for (let t = 0; t < T; t++) {
        // Causal + padding mask: key s is visible to query t iff s <= t and mask[s] = 1.
        let max = Number.NEGATIVE_INFINITY;
        for (let s = 0; s <= t; s++) {
          if (mask[s] === 0) continue;
          let dot = 0;
          for (let d = 0; d < D; d++) dot += qh[(t * nh + head) * D + d] * kh[(s * nkv + g) * D + d];
          scores[s] = dot * scale;
          if (scores[s] > max) max = scores[s];
        }
        if (max === Number.NEGATIVE_INFINITY) continue; // no visible key (padded query): output 0
        let sum = 0;
        for (let s = 0; s <= t; s++) if (mask[s] !== 0) sum += Math.exp(scores[s] - max);
        for (let s = 0; s <= t; s++) {
          if (mask[s] === 0) continue;
          const pr = Math.exp(scores[s] - max) / sum;
          for (let d = 0; d < D; d++) attn[(t * nh + head) * D + d] += pr * v[(s * nkv + g) * D + d];
        }
      }
    }
    const o = linear(
      attn,
      T,
      nh * D,
      w('self_attn.o_proj.weight'),
      H,
      b('self_attn.o_proj.bias', config.oBias),
    );
    const afterAttn = new Float64Array(T * H);
    for (let i = 0; i < T * H; i++) afterAttn[i] = x[i] + o[i];

    // ---- MLP block: down(silu(gate(h)) * up(h))
    const h2 = rmsNorm(afterAttn, H, w('post_attention_layernorm.weight'), eps);
    const gate = linear(h2, T, H, w('mlp.gate_proj.weight'), I, null);
    const up = linear(h2, T, H, w('mlp.up_proj.weight'), I, null);
    const act = new Float64Array(T * I);
    for (let i = 0; i < T * I; i++) act[i] = silu(gate[i]) * up[i];
    const down = linear(act, T, I, w('mlp.down_proj.weight'), H, null);
    x = new Float64Array(T * H);
    for (let i = 0; i < T * H; i++) x[i] = afterAttn[i] + down[i];
    hidden.push(x.slice());
  }

  const normed = rmsNorm(x, H, weight(weights, 'model.norm.weight'), eps);
  const head = weight(weights, config.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight');
  const logits = linear(normed, T, H, head, V, null);
  return { logits, hidden, normed };
}

/**
 * Position ids for a left-padded sequence as transformers' generate() computes them:
 * cumsum(mask) - 1, with padded positions set to 1. Real tokens get 0, 1, 2, ...
 */
export function positionsFromMask(mask: readonly number[]): number[] {
  let count = 0;
  return mask.map((m) => {
    count += m;
    return m === 0 ? 1 : count - 1;
  });
}

/** Forward a batch of equally long, possibly left-padded sequences (each independently, as HF does). */
export function qwenForwardBatch(
  config: ModelConfig,
  weights: Weights,
  batch: { inputIds: readonly (readonly number[])[]; attentionMask?: readonly (readonly number[])[] },
): ForwardResult[] {
  return batch.inputIds.map((tokens, b) => {
    const attentionMask = batch.attentionMask?.[b];
    const positions = attentionMask ? positionsFromMask(attentionMask) : undefined;
    return qwenForward(config, weights, tokens, { attentionMask, positions });
  });
}

// ---------------------------------------------------------------------------------------------
// Log-probabilities

/** log softmax of one row, computed stably: x - max - log(sum(exp(x - max))). */
export function logSoftmax(row: ArrayLike<number>): Float64Array {
  let max = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < row.length; i++) if (row[i] > max) max = row[i];
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i] - max);
  const logSum = max + Math.log(sum);
  const out = new Float64Array(row.length);
  for (let i = 0; i < row.length; i++) out[i] = row[i] - logSum;
  return out;
}

/** Row t of a [T, V] logits matrix. */
export function logitsRow(logits: Float64Array, V: number, t: number): Float64Array {
  return logits.subarray(t * V, (t + 1) * V);
}

/**
 * log p(targets[t] | tokens <= t) for each t: the per-token log-probabilities a policy-gradient loss
 * uses. `targets[t]` is usually tokens[t + 1]; pass targets.length <= T.
 */
export function tokenLogProbs(logits: Float64Array, V: number, targets: readonly number[]): Float64Array {
  const out = new Float64Array(targets.length);
  for (let t = 0; t < targets.length; t++) out[t] = logSoftmax(logitsRow(logits, V, t))[targets[t]];
  return out;
}

/** Mean next-token NLL over every position of the sequences, in f64 (for finite differences). */
export function referenceLoss(
  config: ModelConfig,
  weights: Weights,
  seqs: readonly (readonly number[])[],
): number {
  let total = 0;
  let count = 0;
  const V = config.vocabSize;
  for (const seq of seqs) {
    const { logits } = qwenForward(config, weights, seq);
    for (let i = 0; i + 1 < seq.length; i++) {
      let max = Number.NEGATIVE_INFINITY;
      for (let j = 0; j < V; j++) max = Math.max(max, logits[i * V + j]);
      let sum = 0;
      for (let j = 0; j < V; j++) sum += Math.exp(logits[i * V + j] - max);
      total -= logits[i * V + seq[i + 1]] - max - Math.log(sum);
      count++;
    }
  }
  return total / count;
}
