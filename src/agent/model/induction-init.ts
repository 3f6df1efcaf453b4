// An induction circuit written into a freshly initialised Qwen3 checkpoint: a stand-in for the
// pretraining a real Qwen has and this CPU cannot afford.
//
// Why: the synthetic task's answers and search queries are invented names the episode has already
// spelled (in the question or a passage). Continuing such a name is copying, which transformers do
// with induction heads: a previous-token head (layer 0) writes "the token before me" into each
// position, and an induction head (layer 1) at position i attends to the position j whose previous
// token equals token i and copies token j. Trained from HF's random init on this CPU, qwen-tiny never
// formed them (the copy probe and the copy drill's three runs: docs/results.md), so every name it
// wrote was a guess. Written in by hand, the circuit copies from the first step; SFT and RL then
// learn when to copy and what to copy.
//
// The residual stream of width D is split (c = ⌊(D−1)/2⌋; D = 128 gives c = 63):
//   [0, c)        content: token t's embedding is u_t ~ N(0, embedStd²) here (the tied LM head reads
//                 it back, so a copied u_t raises t's logit)
//   c             a constant: embedStd·constant in every embedding, the source of the layer-0 heads'
//                 position-only queries and keys
//   [c+1, 2c+1)   previous token: layer 0 writes u of the token before each position here
//   [2c+1, D)     zero in the embeddings
// Layer 0 (previous-token heads): q and k read only the constant, so after q/k-RMSNorm they are
//   the same vectors at every position, and RoPE alone sets the score: with k = (1, 0) and q =
//   (cos θ, −sin θ) in the rotated pair of frequency θ, q·k at distance d is cos((d − 1)θ), largest
//   at d = 1. Summed over the `prevPairs` fastest pairs (θ = 1, 0.56, 0.32, 0.18 at rope_theta 1e4,
//   head_dim 32) the peak at d = 1 is unique; norm weights prevGain sharpen it (≥ 0.98 of the
//   attention on the previous token). kv head g carries content slice g; its first query head writes
//   it into the previous-token slice g.
// Layer 1 (induction heads): the first query head of kv head g compares a random projection R_g of
//   the current token's content slice g with the same projection of the previous-token slice g of
//   every key, in the `matchPairs` slowest RoPE pairs only (rotation by the distance barely moves
//   them: θ ≤ 1e-3 for pairs 12..15 at rope_theta 1e4), and copies the key position's content slice
//   back into the content dims with gain copyGain.
// Pointer heads (optional, `pointerLayers`): in each listed layer ≥ 2 the first query head of kv head g
//   gets the induction heads' value/output map (copy content slice g into the content dims, gain
//   pointerGain) and keeps HF's random q/k. Where it looks is left to learning: the induction head
//   can only continue a name, while choosing which name starts (the question's first name, the one a
//   passage just gave) needs attention that depends on the context. With HF's random value/output
//   maps such a head gets no useful gradient until both its output map and its attention agree (the
//   plateau the copy drill never left); with the copy map in place, every SFT step that wants a name's
//   first token pushes its q/k towards the position that holds it.
// Everything else (the other query heads, the other layers, every MLP, the other norms) keeps HF's init.
// Measured at init (`npm run bench:copy`, 36 held-out oracle traces): the answer tokens that continue
// a name already in the context get mean p 0.605, against 0.000 with HF's init (docs/results.md).
//
// Deterministic and engine-independent like the rest of the init: only +, −, ×, ÷ and sqrt (IEEE
// exact), cos/sin by their Taylor series, RoPE frequencies by square-root chains (so head_dim must
// be a power of two), random numbers from mulberry32.

import type { ModelConfig } from './config.ts';
import { hash32, mulberry32 } from './tiny-checkpoints.ts';

export interface InductionInitOptions {
  /** Std of the content part of the embeddings (HF's init: 0.02 everywhere). */
  embedStd: number;
  /** The constant dimension's value, in units of embedStd. */
  constant: number;
  /** Layer-0 q/k norm weights: the previous-token heads' sharpness. */
  prevGain: number;
  /** Number of fastest RoPE pairs the previous-token heads use. */
  prevPairs: number;
  /** Layer-0 o_proj gain writing the previous token's content. */
  prevOut: number;
  /** Layer-1 q/k norm weights: the induction heads' sharpness. */
  matchGain: number;
  /** Number of slowest RoPE pairs the induction heads match in. */
  matchPairs: number;
  /** Layer-1 o_proj gain writing the copied token's content. */
  copyGain: number;
  /** Layers (≥ 2) that get pointer heads: copy value/output maps, learned attention. */
  pointerLayers: readonly number[];
  /** o_proj gain of the pointer heads. */
  pointerGain: number;
  seed: number;
  /** Std of the fresh init's embedding draws, rescaled to embedStd (HF's initializer_range). */
  initStd: number;
}

export const INDUCTION_INIT_DEFAULTS: Readonly<InductionInitOptions> = Object.freeze({
  embedStd: 0.3,
  constant: 1,
  prevGain: 3,
  prevPairs: 4,
  prevOut: 1,
  matchGain: 3,
  matchPairs: 4,
  copyGain: 3,
  pointerLayers: [],
  pointerGain: 1,
  seed: 1,
  initStd: 0.02,
});

type Tensors = Map<string, { shape: number[]; data: Float32Array }>;

/** cos and sin of |x| ≤ 2 by their Taylor series: the same bits on every JS engine. */
export function taylorCosSin(x: number): [number, number] {
  if (!(Math.abs(x) <= 2)) throw new Error(`taylorCosSin: |x| must be ≤ 2, got ${x}`);
  let c = 0;
  let s = 0;
  let term = 1; // x^n / n!
  for (let n = 0; n < 40; n++) {
    if (n % 4 === 0) c += term;
    else if (n % 4 === 1) s += term;
    else if (n % 4 === 2) c -= term;
    else s -= term;
    term = (term * x) / (n + 1);
  }
  return [c, s];
}

/**
 * RoPE's inverse frequencies theta^(−2p/hd), p < hd/2, by square roots only: r = theta^(−2/hd) is
 * theta's (hd/2)-th root inverted, taken as log2(hd/2) square roots; θ_p = r^p.
 */
export function ropeFrequenciesExact(theta: number, headDim: number): number[] {
  const half = headDim / 2;
  if (!Number.isInteger(Math.log2(half)) || half < 1) {
    throw new Error(`induction init: head_dim must be a power of two, got ${headDim}`);
  }
  let root = theta;
  for (let k = half; k > 1; k /= 2) root = Math.sqrt(root);
  const r = 1 / root;
  const out = [1];
  for (let p = 1; p < half; p++) out.push(out[p - 1] * r);
  return out;
}

function normal(rand: () => number): number {
  let sum = 0;
  for (let k = 0; k < 12; k++) sum += rand();
  return sum - 6;
}

/** The layout the circuit uses (see the header); exported for tests. */
export function inductionLayout(config: ModelConfig): {
  content: number;
  constantDim: number;
  prevStart: number;
  slice: number;
  qPerKv: number;
} {
  const content = Math.floor((config.hiddenSize - 1) / 2);
  const slice = Math.ceil(content / config.numKvHeads);
  return {
    content,
    constantDim: content,
    prevStart: content + 1,
    slice,
    qPerKv: config.numHeads / config.numKvHeads,
  };
}

/**
 * Writes the circuit into `tensors` (a fresh HF-style init of `config`, changed in place) and returns
 * them. Needs Qwen3's q/k norms, tied embeddings, ≥ 2 layers, a power-of-two head_dim and content
 * slices no wider than a head.
 */
export function plantInductionCircuit(
  config: ModelConfig,
  tensors: Tensors,
  options: Partial<InductionInitOptions> = {},
): Tensors {
  const o = { ...INDUCTION_INIT_DEFAULTS, ...options };
  const { hiddenSize: D, headDim: hd, numHeads, numKvHeads, vocabSize: V } = config;
  const half = hd / 2;
  if (!config.qkNorm) throw new Error('induction init: needs Qwen3 q/k norms (qk_norm)');
  if (!config.tieWordEmbeddings) throw new Error('induction init: needs tied embeddings');
  if (config.numLayers < 2) throw new Error('induction init: needs at least 2 layers');
  const { content: c, constantDim, prevStart, slice, qPerKv } = inductionLayout(config);
  if (slice > hd) throw new Error(`induction init: content slice ${slice} is wider than head_dim ${hd}`);
  if (o.prevPairs + o.matchPairs > half)
    throw new Error('induction init: prevPairs + matchPairs > head_dim / 2');
  for (const layer of o.pointerLayers) {
    if (!Number.isInteger(layer) || layer < 2 || layer >= config.numLayers)
      throw new Error(
        `induction init: pointer layer ${layer} must be an integer in [2, ${config.numLayers})`,
      );
  }
  const get = (name: string): Float32Array => {
    const t = tensors.get(name);
    if (!t) throw new Error(`induction init: missing tensor ${name}`);
    return t.data;
  };
  const freqs = ropeFrequenciesExact(config.ropeTheta, hd);
  const sliceStart = (g: number): number => g * slice;
  const sliceWidth = (g: number): number => Math.max(0, Math.min(slice, c - g * slice));

  // Embeddings: content ~ N(0, embedStd²) from the init's own draws (rescaled), the constant, zeros.
  const embed = get('model.embed_tokens.weight');
  const rescale = o.embedStd / o.initStd;
  for (let t = 0; t < V; t++) {
    const row = t * D;
    for (let d = 0; d < D; d++) {
      if (d < c) embed[row + d] *= rescale;
      else embed[row + d] = d === constantDim ? o.embedStd * o.constant : 0;
    }
  }

  /** Layer `layer`'s attention projections, zeroed, with its q/k norm weights set to `gain`. */
  const clearedAttention = (layer: number, gain: number): Float32Array[] => {
    const prefix = `model.layers.${layer}.self_attn`;
    get(`${prefix}.q_norm.weight`).fill(gain);
    get(`${prefix}.k_norm.weight`).fill(gain);
    return ['q', 'k', 'v', 'o'].map((m) => get(`${prefix}.${m}_proj.weight`).fill(0));
  };

  // Layer 0: previous-token heads.
  const [q0, k0, v0, o0] = clearedAttention(0, o.prevGain);
  for (let p = 0; p < o.prevPairs; p++) {
    const [cos, sin] = taylorCosSin(freqs[p]);
    for (let h = 0; h < numHeads; h++) {
      q0[(h * hd + p) * D + constantDim] = cos;
      q0[(h * hd + p + half) * D + constantDim] = -sin;
    }
    for (let g = 0; g < numKvHeads; g++) k0[(g * hd + p) * D + constantDim] = 1;
  }
  const qDim = numHeads * hd;
  for (let g = 0; g < numKvHeads; g++) {
    const head = g * qPerKv;
    for (let d = 0; d < sliceWidth(g); d++) {
      v0[(g * hd + d) * D + sliceStart(g) + d] = 1;
      o0[(prevStart + sliceStart(g) + d) * qDim + head * hd + d] = o.prevOut;
    }
  }

  // Layer 1: induction heads matching in the slowest pairs.
  const [q1, k1, v1, o1] = clearedAttention(1, o.matchGain);
  const matchDims: number[] = [];
  for (let p = half - o.matchPairs; p < half; p++) matchDims.push(p, p + half);
  for (let g = 0; g < numKvHeads; g++) {
    const head = g * qPerKv;
    const width = sliceWidth(g);
    const rand = mulberry32(hash32(`${o.seed}:induction:${g}`));
    for (const dim of matchDims) {
      for (let j = 0; j < width; j++) {
        const r = normal(rand) / Math.sqrt(width);
        q1[(head * hd + dim) * D + sliceStart(g) + j] = r;
        k1[(g * hd + dim) * D + prevStart + sliceStart(g) + j] = r;
      }
    }
    for (let d = 0; d < width; d++) {
      v1[(g * hd + d) * D + sliceStart(g) + d] = 1;
      o1[(sliceStart(g) + d) * qDim + head * hd + d] = o.copyGain;
    }
  }

  // Pointer layers: copy value/output maps, HF's random q/k (see the header).
  for (const layer of o.pointerLayers) {
    const prefix = `model.layers.${layer}.self_attn`;
    const v = get(`${prefix}.v_proj.weight`);
    const out = get(`${prefix}.o_proj.weight`);
    for (let g = 0; g < numKvHeads; g++) {
      const head = g * qPerKv;
      v.fill(0, g * hd * D, (g + 1) * hd * D);
      for (let row = 0; row < D; row++) out.fill(0, row * qDim + head * hd, row * qDim + (head + 1) * hd);
      for (let d = 0; d < sliceWidth(g); d++) {
        v[(g * hd + d) * D + sliceStart(g) + d] = 1;
        out[(sliceStart(g) + d) * qDim + head * hd + d] = o.pointerGain;
      }
    }
  }
  return tensors;
}
