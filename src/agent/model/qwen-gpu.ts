// The Qwen2 / Qwen3 causal LM on the GPU: forward, backward and KV-cache decoding, composed from the
// WGSL kernels in src/shaders. Reads top to bottom like the HF modeling file:
//
//   x = embed(ids)                                                    [N, D]   N = B*T tokens
//   for each layer:
//     h   = rmsnorm(x) ; q, k, v = h·Wqᵀ+bq, h·Wkᵀ+bk, h·Wvᵀ+bv     [N, nH*hd], [N, nKv*hd]
//     (Qwen3) q, k = per-head rmsnorm(q), rmsnorm(k)
//     q, k = rope(q, k, pos) ; o = attention(q, k, v, seg)           causal, GQA, segment mask
//     x  = x + o·Woᵀ
//     h2 = rmsnorm(x) ; x = x + down(silu(gate(h2)) * up(h2))
//   hf = rmsnorm(x) ; logprob(target), entropy = lm_head(hf)          chunked over the vocabulary
//
// Sequences are described per token (TokenBatch): ids, a segment id (0 = padding; attention stays
// within a segment of a batch row) and a position for RoPE, so left/right padding and packing work.
// Every forward keeps what its backward needs in a ForwardActivations object; backward() walks the
// layers in reverse, with each op's backward right under the matching forward step.

import {
  attentionBackward,
  attentionDecode,
  attentionForward,
  createKvCache,
  decodeBlocked,
  defaultDkvVariant,
  type KvCache,
  kvCacheAppend,
  kvQueryBlocks,
  kvSlots,
  type Segments,
  uploadSegments,
} from '../../gpu/kernels/attention.ts';
import { decodeQueryBlock } from '../../gpu/kernels/attention-blocked.ts';
import { add, addInPlace, scaleInPlace, swiglu, swigluBackward } from '../../gpu/kernels/elementwise.ts';
import { embedding, embeddingBackward } from '../../gpu/kernels/embedding.ts';
import type { WeightDType } from '../../gpu/kernels/half.ts';
import { linear, linearBackward } from '../../gpu/kernels/linear.ts';
import { type TokenLogprobResult, tokenLogprob, tokenLogprobBackward } from '../../gpu/kernels/logprob.ts';
import { rmsnorm, rmsnormBackward } from '../../gpu/kernels/rmsnorm.ts';
import { ropeQK } from '../../gpu/kernels/rope.ts';
import { sampleTokens } from '../../gpu/kernels/sampling.ts';
import type { Gpu } from '../../gpu/runtime.ts';
import type { Bindable, Tensor } from '../../gpu/tensor.ts';
import type { ModelConfig } from './config.ts';
import { decodeBf16, decodeF16, encodeBf16, encodeF16 } from './dtype.ts';
import { type LoraConfig, loraScale, loraTensors } from './lora.ts';
import { widestActivation } from './memory-plan.ts';
import { NOT_PACKED, type PackedRows, packRows } from './packing.ts';
import { expectedTensors } from './weights.ts';

// ------------------------------------------------------------------------------------ batches

/** B rows of T tokens, flattened row-major (N = B*T). */
export interface TokenBatch {
  B: number;
  T: number;
  ids: Uint32Array;
  /** 0 = padding; tokens attend only within their own non-zero segment of the same row. */
  seg: Uint32Array;
  /** RoPE position per token. */
  pos: Uint32Array;
}

/** Packs sequences into a padded batch: positions count real tokens from 0; pads get seg 0. */
export function packBatch(
  sequences: ReadonlyArray<ArrayLike<number>>,
  options: { padSide?: 'left' | 'right'; padId?: number; T?: number } = {},
): TokenBatch {
  const { padSide = 'right', padId = 0 } = options;
  const B = sequences.length;
  if (B === 0) throw new Error('packBatch: no sequences');
  const longest = Math.max(...sequences.map((s) => s.length));
  const T = options.T ?? longest;
  if (T < longest) throw new Error(`packBatch: T = ${T} is shorter than the longest sequence (${longest})`);
  const ids = new Uint32Array(B * T).fill(padId);
  const seg = new Uint32Array(B * T);
  const pos = new Uint32Array(B * T);
  sequences.forEach((s, b) => {
    const start = padSide === 'left' ? T - s.length : 0;
    for (let i = 0; i < s.length; i++) {
      const id = s[i];
      if (!Number.isInteger(id) || id < 0)
        throw new Error(`packBatch: sequence ${b} has a bad token id ${id} at ${i}`);
      ids[b * T + start + i] = id;
      seg[b * T + start + i] = 1;
      pos[b * T + start + i] = i;
    }
  });
  return { B, T, ids, seg, pos };
}

// ------------------------------------------------------------------------------------ the model

interface LayerActivations {
  x: Tensor; // layer input (residual stream)              [N, D]
  h: Tensor; // rmsnorm(x)                                   [N, D]
  rstd1: Tensor; //                                          [N]
  qPre: Tensor | null; // q before Qwen3's q_norm            [N, nH*hd]
  kPre: Tensor | null;
  rstdQ: Tensor | null; //                                   [N*nH]
  rstdK: Tensor | null;
  q: Tensor; // after q_norm and RoPE                        [N, nH*hd]
  k: Tensor; //                                              [N, nKv*hd]
  v: Tensor; //                                              [N, nKv*hd]
  o: Tensor; // attention output                             [N, nH*hd]
  lse: Tensor; //                                            [N, nH]
  x1: Tensor; // x + attn                                    [N, D]
  h2: Tensor; // rmsnorm(x1)                                 [N, D]
  rstd2: Tensor;
  g: Tensor; // gate(h2)                                     [N, F]
  u: Tensor; // up(h2)                                       [N, F]
  a: Tensor; // silu(g) * u                                  [N, F]
  /** LoRA: (alpha/r)·x·Aᵀ per adapted module (q_proj, ..., down_proj)   [N, r] */
  lora: Map<string, Tensor>;
}

/** A batch's inputs on the GPU (uploadBatch). */
interface UploadedBatch {
  ids: Tensor;
  /** segments.seg, for the embedding. */
  seg: Tensor;
  segments: Segments;
  pos: Tensor;
}

/** What backwardHidden() needs from forwardHidden(): the batch and per-layer activations. */
export interface HiddenActivations {
  batch: TokenBatch;
  seg: Tensor;
  /** The batch's segments as attention reads them (seg, and each token's span: attention.ts). */
  segments: Segments;
  pos: Tensor;
  ids: Tensor;
  /** Each layer's activations; null where recomputation keeps only the layer's input. */
  layers: (LayerActivations | null)[];
  /** With recomputation: each layer's input (the residual stream), until its backward. */
  inputs: (Tensor | null)[];
  xFinal: Tensor; // residual stream after the last layer    [N, D]
  hFinal: Tensor; // final rmsnorm                            [N, D]
  rstdFinal: Tensor;
  release(): void;
}

/** What backward() needs from a forward: the trunk's activations and the head's stats. */
export interface ForwardActivations extends HiddenActivations {
  targets: Tensor; // [N], or [M] with a compact head
  head: TokenLogprobResult; // logprob, entropy, lse          [N] (0 on inactive rows)
  /** When the head ran on the M active rows only: their positions and the head's own results. */
  /**
   * When the head ran on the M active tokens only: their indices in the caller's [B, T] layout
   * (rows, rowsT), their slots in the trunk's (hRows: the same unless the trunk ran packed), and the
   * head's own results.
   */
  compact: {
    rows: Uint32Array;
    rowsT: Tensor;
    hRows: Uint32Array;
    h: Tensor;
    head: TokenLogprobResult;
  } | null;
}

/** The head runs on the active rows alone when they are at most this share of all rows. */
const COMPACT_HEAD_SHARE = 0.75;

/** A training forward packs its rows when the packed batch has at most this share of the slots. */
const PACK_SHARE = 0.9;
/**
 * Where dK/dV runs in query chunks (real GPUs), packed rows hold at most this many times the batch's
 * T: sequences longer than half of T (most agent episodes of a batch) can then share a row, while
 * the chunks, at most 16 per row, stay short enough to split each key's loop.
 */
const PACK_ROW_FACTOR = 2;

/** out [N] with out[rows[k]] = x[k] and 0 elsewhere (x [M]); rows distinct. */
export function scatterRows(gpu: Gpu, x: Tensor, rows: Uint32Array, N: number, label: string): Tensor {
  const col = gpu.empty([x.size, 1], 'f32', `${label}.col`);
  gpu.copy(x, col);
  const out = gpu.zeros([N, 1], 'f32', label);
  embeddingBackward(gpu, col, out, rows);
  col.release();
  const flat = gpu.empty([N], 'f32', label);
  gpu.copy(out, flat);
  out.release();
  return flat;
}

/** out [M] = x[rows] (x [N]). */
export function gatherRows(gpu: Gpu, x: Tensor, rowsT: Tensor): Tensor {
  const table = gpu.empty([x.size, 1], 'f32', 'gather.table');
  gpu.copy(x, table);
  const picked = embedding(gpu, table, rowsT, { label: 'gather.rows' });
  table.release();
  const flat = gpu.empty([rowsT.size], 'f32', 'gather.out');
  gpu.copy(picked, flat);
  picked.release();
  return flat;
}

export interface GenerateOptions {
  maxNewTokens: number;
  /** 0 = greedy. */
  temperature?: number;
  topK?: number;
  topP?: number;
  seed?: number;
  /** Generation of a row stops after any of these token ids (it is kept in the output). */
  stopTokenIds?: readonly number[];
  /** Called with each row's new tokens after every step; return true to stop that row (stop strings). */
  shouldStop?: (row: number, newTokens: readonly number[]) => boolean;
  /** Pad id written for finished rows. */
  padId?: number;
  /** Rows to sample (default all); the others are done from the first step (finish 'inactive'). */
  active?: readonly boolean[];
  /** Per-row cap on new tokens (<= maxNewTokens applies too); a row reaching it finishes 'length'. */
  maxNewTokensPerRow?: readonly number[];
  /** Decode steps between readbacks (default: the session's stepsPerReadback). Same result either way. */
  stepsPerReadback?: number;
  /**
   * Row b draws its randomness as row streamOffset + b (default 0): a batch split over several
   * sessions gives each row a stream of its own.
   */
  streamOffset?: number;
}

export interface GenerateResult {
  /** New tokens per row (prompt excluded), including the stop token when one ended the row. */
  tokens: number[][];
  /** Log-probability of each sampled token under the temperature-scaled distribution. */
  logprobs: number[][];
  /** Why each row ended. */
  finish: Array<'stop' | 'length' | 'callback' | 'inactive'>;
}

/** The f16 / bf16 bit patterns nearest to `values` (round to nearest even: dtype.ts). */
function halfBits(values: Float32Array, dtype: 'f16' | 'bf16'): Uint16Array {
  const bytes = dtype === 'f16' ? encodeF16(values) : encodeBf16(values);
  return new Uint16Array(bytes.buffer, bytes.byteOffset, values.length);
}

export class QwenGpuModel {
  readonly gpu: Gpu;
  readonly config: ModelConfig;
  /** HF name -> weight tensor (f32; frozen matrices f16/bf16 after storeFrozenAs). */
  readonly params = new Map<string, Tensor>();
  /** HF name -> gradient (same shape), accumulated by backward() until zeroGrad(). */
  readonly grads = new Map<string, Tensor>();
  /** Names whose weights are not trained (their gradients are not computed where avoidable). */
  readonly frozen = new Set<string>();
  /** LoRA adapters (lora.ts): their A/B tensors live in params under PEFT's names; the base is frozen. */
  lora: { config: LoraConfig; scale: number; modules: Set<string> } | null = null;
  /** false: the adapters are bypassed (the base model: the KL reference without a second copy). */
  adaptersEnabled = true;
  /**
   * Activation recomputation: the training forward keeps only each layer's input and backward runs
   * the layer's forward again before its backward. Same gradients (bit for bit), activation memory of
   * one layer instead of all of them, about one more forward of compute.
   */
  recomputeActivations = false;
  /**
   * Storage of the frozen matrices (projections, embedding, LM head): 'f32', or half precision
   * after storeFrozenAs(). Norm weights, biases and LoRA adapters always stay f32.
   */
  frozenDtype: WeightDType = 'f32';

  /**
   * `options.frozenDtype` uploads every matrix (projections, embedding, LM head) in half precision,
   * converted on the CPU (no f32 copy on the GPU), and freezes them: such a model trains only LoRA
   * adapters (addLora) or nothing. Norm weights and biases stay f32. See storeFrozenAs.
   */
  constructor(
    gpu: Gpu,
    config: ModelConfig,
    weights: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>,
    options: { frozenDtype?: 'f16' | 'bf16' } = {},
  ) {
    this.gpu = gpu;
    this.config = config;
    const half = options.frozenDtype;
    for (const { name, shape } of expectedTensors(config)) {
      const w = weights.get(name);
      if (!w) throw new Error(`QwenGpuModel: weight "${name}" is missing`);
      const n = shape.reduce((a, b) => a * b, 1);
      if (w.data.length !== n) {
        throw new Error(
          `QwenGpuModel: weight "${name}" has ${w.data.length} values, the config needs [${shape.join(', ')}]`,
        );
      }
      if (half && shape.length === 2) {
        this.params.set(name, gpu.upload(halfBits(w.data, half), shape, half, name));
        this.frozen.add(name);
      } else {
        this.params.set(name, gpu.upload(w.data, shape, 'f32', name));
      }
    }
    if (half) this.frozenDtype = half;
  }

  private p(name: string): Tensor {
    const t = this.params.get(name);
    if (!t) throw new Error(`QwenGpuModel: no parameter "${name}"`);
    return t;
  }

  private bias(name: string): Tensor | null {
    return this.params.get(name) ?? null;
  }

  /**
   * Adds LoRA adapters (A/B as given, e.g. initLoraWeights or a PEFT file) and freezes every base
   * weight: from now on only the adapters are trainable.
   */
  addLora(
    config: LoraConfig,
    tensors: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>,
  ): void {
    if (this.lora) throw new Error('QwenGpuModel: the model already has LoRA adapters');
    const list = loraTensors(this.config, config);
    for (const t of list)
      for (const [name, shape] of [
        [t.a, t.aShape],
        [t.b, t.bShape],
      ] as const) {
        const w = tensors.get(name);
        if (!w || w.data.length !== shape[0] * shape[1])
          throw new Error(`QwenGpuModel: LoRA tensor "${name}" is missing or not [${shape.join(', ')}]`);
      }
    for (const { name } of expectedTensors(this.config)) this.frozen.add(name);
    for (const t of list) {
      this.params.set(t.a, this.gpu.upload(tensors.get(t.a)!.data, t.aShape, 'f32', t.a));
      this.params.set(t.b, this.gpu.upload(tensors.get(t.b)!.data, t.bShape, 'f32', t.b));
    }
    this.lora = { config, scale: loraScale(config), modules: new Set(list.map((t) => t.module)) };
  }

  /**
   * y = x·Wᵀ + b, plus the adapter's (alpha/r)·(x·Aᵀ)·Bᵀ when `module` has one and adapters are on.
   * Returns t = (alpha/r)·x·Aᵀ for the backward (null without an adapter).
   */
  private proj(x: Tensor, module: string): { y: Tensor; t: Tensor | null } {
    const y = linear(this.gpu, x, this.p(`${module}.weight`), this.bias(`${module}.bias`));
    if (!this.lora || !this.adaptersEnabled || !this.lora.modules.has(module)) return { y, t: null };
    const t = linear(this.gpu, x, this.p(`${module}.lora_A.weight`));
    scaleInPlace(this.gpu, t, this.lora.scale);
    const d = linear(this.gpu, t, this.p(`${module}.lora_B.weight`));
    addInPlace(this.gpu, y, d);
    d.release();
    return { y, t };
  }

  /**
   * Stores every frozen matrix (after addLora: all base projections, the embedding and the LM head)
   * in half precision: half their bytes, read and widened to f32 by the kernels (half.ts), so the
   * forward computes in f32 on the rounded weights. Rounding is to nearest even (dtype.ts); a bf16
   * checkpoint's weights (Qwen's release format) are stored without loss. The KL reference of a
   * LoRA run is this same model with adapters off, so reference and policy see the same weights.
   */
  async storeFrozenAs(dtype: 'f16' | 'bf16'): Promise<void> {
    if (this.frozenDtype !== 'f32')
      throw new Error(`QwenGpuModel: frozen weights are already ${this.frozenDtype}`);
    const names = [...this.frozen].filter((n) => this.params.get(n)?.shape.length === 2);
    if (names.length === 0)
      throw new Error('QwenGpuModel: no frozen weights to store in half precision (add LoRA first)');
    for (const name of names) {
      const t = this.params.get(name)!;
      const half = this.gpu.upload(halfBits(await this.gpu.readF32(t), dtype), t.shape, dtype, name);
      t.release();
      this.params.set(name, half);
    }
    this.frozenDtype = dtype;
  }

  /** The LM head matrix [V, D]: lm_head.weight, or the embedding when tied. */
  get lmHead(): Tensor {
    return this.config.tieWordEmbeddings ? this.p('model.embed_tokens.weight') : this.p('lm_head.weight');
  }

  private get lmHeadName(): string {
    return this.config.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight';
  }

  /** Gradient tensors, created (zeroed) on first use. */
  grad(name: string): Tensor {
    let g = this.grads.get(name);
    if (!g) {
      g = this.gpu.zeros(this.p(name).shape, 'f32', `grad:${name}`);
      this.grads.set(name, g);
    }
    return g;
  }

  zeroGrad(): void {
    for (const g of this.grads.values()) this.gpu.fill0(g);
  }

  /** Gradients of the trained parameters (frozen ones may hold scratch gradients backward needed). */
  trainableGrads(): Map<string, Tensor> {
    const out = new Map<string, Tensor>();
    for (const name of this.trainableParams().keys()) out.set(name, this.grad(name));
    return out;
  }

  /** Parameters that are trained (not frozen), for the optimizer. */
  trainableParams(): Map<string, Tensor> {
    const out = new Map<string, Tensor>();
    for (const [name, t] of this.params) if (!this.frozen.has(name)) out.set(name, t);
    return out;
  }

  private uploadBatch(batch: TokenBatch): UploadedBatch {
    const N = batch.B * batch.T;
    if (batch.ids.length !== N || batch.seg.length !== N || batch.pos.length !== N) {
      throw new Error(`TokenBatch: ids/seg/pos must each hold B*T = ${N} values`);
    }
    const V = this.config.vocabSize;
    for (let i = 0; i < N; i++) {
      if (batch.seg[i] !== 0 && batch.ids[i] >= V) {
        throw new Error(`TokenBatch: token id ${batch.ids[i]} at ${i} is outside the vocabulary (${V} rows)`);
      }
    }
    const gpu = this.gpu;
    const segments = uploadSegments(gpu, batch.seg, batch.B);
    return {
      ids: gpu.upload(batch.ids, [N], 'u32', 'batch.ids'),
      seg: segments.seg,
      segments,
      pos: gpu.upload(batch.pos, [N], 'u32', 'batch.pos'),
    };
  }

  // ---------------------------------------------------------------------------- one layer

  /** Attention block and MLP block of layer `l`, from residual stream x. Returns the activations. */
  layerForward(l: number, x: Tensor, seg: Tensor | Segments, pos: Tensor, B: number): LayerActivations {
    const { gpu, config: c } = this;
    const pre = `model.layers.${l}.`;
    const { y: h, rstd: rstd1 } = rmsnorm(gpu, x, this.p(`${pre}input_layernorm.weight`), {
      eps: c.rmsNormEps,
    });
    const lora = new Map<string, Tensor>();
    const proj = (x: Tensor, name: string): Tensor => {
      const { y, t } = this.proj(x, `${pre}${name}`);
      if (t) lora.set(name, t);
      return y;
    };
    let q = proj(h, 'self_attn.q_proj');
    let k = proj(h, 'self_attn.k_proj');
    const v = proj(h, 'self_attn.v_proj');
    let qPre: Tensor | null = null;
    let kPre: Tensor | null = null;
    let rstdQ: Tensor | null = null;
    let rstdK: Tensor | null = null;
    if (c.qkNorm) {
      qPre = q;
      kPre = k;
      ({ y: q, rstd: rstdQ } = rmsnorm(gpu, qPre, this.p(`${pre}self_attn.q_norm.weight`), {
        eps: c.rmsNormEps,
        heads: c.numHeads,
      }));
      ({ y: k, rstd: rstdK } = rmsnorm(gpu, kPre, this.p(`${pre}self_attn.k_norm.weight`), {
        eps: c.rmsNormEps,
        heads: c.numKvHeads,
      }));
    }
    ropeQK(gpu, q, k, pos, { headDim: c.headDim, theta: c.ropeTheta, inPlace: true });
    const dims = { batch: B, nHeads: c.numHeads, nKvHeads: c.numKvHeads, headDim: c.headDim };
    const { o, lse } = attentionForward(gpu, q, k, v, seg, dims);
    const attnOut = proj(o, 'self_attn.o_proj');
    const x1 = add(gpu, x, attnOut);
    attnOut.release();
    const { y: h2, rstd: rstd2 } = rmsnorm(gpu, x1, this.p(`${pre}post_attention_layernorm.weight`), {
      eps: c.rmsNormEps,
    });
    const g = proj(h2, 'mlp.gate_proj');
    const u = proj(h2, 'mlp.up_proj');
    const a = swiglu(gpu, g, u);
    return { x, h, rstd1, qPre, kPre, rstdQ, rstdK, q, k, v, o, lse, x1, h2, rstd2, g, u, a, lora };
  }

  /** x_out = x1 + down(a): the layer's output (separate so the forward can free activations early). */
  layerOutput(l: number, act: LayerActivations): Tensor {
    const { y: m, t } = this.proj(act.a, `model.layers.${l}.mlp.down_proj`);
    if (t) act.lora.set('mlp.down_proj', t);
    const out = add(this.gpu, act.x1, m);
    m.release();
    return out;
  }

  /**
   * Backward of layer l. dx is dLoss/d(layer output) on entry and is overwritten in place with
   * dLoss/d(layer input). Parameter gradients accumulate into this.grads.
   */
  layerBackward(
    l: number,
    act: LayerActivations,
    dx: Tensor,
    seg: Tensor | Segments,
    pos: Tensor,
    B: number,
  ): void {
    const { gpu, config: c } = this;
    const pre = `model.layers.${l}.`;
    // dX of one projection (and dW, db unless frozen); with a LoRA adapter also
    //   dB += dyᵀ·t,  dt = (alpha/r)·dy·B,  dA += dtᵀ·x,  dX += dt·A      (t = (alpha/r)·x·Aᵀ, kept)
    const lin = (dy: Tensor, x: Tensor, name: string, dxOut: Tensor | undefined, accumulateDx: boolean) => {
      const module = `${pre}${name}`;
      const wName = `${module}.weight`;
      const bName = `${module}.bias`;
      const hasBias = this.params.has(bName);
      const trainW = !this.frozen.has(wName);
      const dX = linearBackward(gpu, dy, x, this.p(wName), {
        dx: dxOut,
        accumulateDx,
        computeDw: trainW,
        dW: trainW ? this.grad(wName) : undefined,
        db: hasBias && trainW ? this.grad(bName) : undefined,
        bias: hasBias,
        accumulate: true,
      }).dx!;
      const t = act.lora.get(name);
      if (t && this.lora) {
        const dt = linearBackward(gpu, dy, t, this.p(`${module}.lora_B.weight`), {
          dW: this.grad(`${module}.lora_B.weight`),
          accumulate: true,
        }).dx!;
        scaleInPlace(gpu, dt, this.lora.scale);
        linearBackward(gpu, dt, x, this.p(`${module}.lora_A.weight`), {
          dx: dX,
          accumulateDx: true,
          dW: this.grad(`${module}.lora_A.weight`),
          accumulate: true,
        });
        dt.release();
      }
      return dX;
    };
    // MLP block: x_out = x1 + down(silu(g) * u), g = gate(h2), u = up(h2), h2 = rmsnorm(x1).
    const da = lin(dx, act.a, 'mlp.down_proj', undefined, false);
    const { dg, du } = swigluBackward(gpu, da, act.g, act.u);
    da.release();
    const dh2 = lin(dg, act.h2, 'mlp.gate_proj', undefined, false);
    lin(du, act.h2, 'mlp.up_proj', dh2, true);
    dg.release();
    du.release();
    // dx (= d x_out) also flows straight through the residual into d x1.
    rmsnormBackward(gpu, dh2, act.x1, this.p(`${pre}post_attention_layernorm.weight`), act.rstd2, {
      dx,
      accumulateDx: true,
      dw: this.grad(`${pre}post_attention_layernorm.weight`),
      accumulateDw: true,
    });
    dh2.release();
    // Attention block: x1 = x + o_proj(attention(rope(q), rope(k), v)).
    const dO = lin(dx, act.o, 'self_attn.o_proj', undefined, false);
    const dims = { batch: B, nHeads: c.numHeads, nKvHeads: c.numKvHeads, headDim: c.headDim };
    const { dq, dk, dv } = attentionBackward(gpu, act.q, act.k, act.v, seg, act.o, act.lse, dO, dims);
    dO.release();
    ropeQK(gpu, dq, dk, pos, { headDim: c.headDim, theta: c.ropeTheta, inPlace: true, inverse: true });
    let dqPre = dq;
    let dkPre = dk;
    if (c.qkNorm) {
      dqPre = rmsnormBackward(gpu, dq, act.qPre!, this.p(`${pre}self_attn.q_norm.weight`), act.rstdQ!, {
        heads: c.numHeads,
        dw: this.grad(`${pre}self_attn.q_norm.weight`),
        accumulateDw: true,
      }).dx;
      dkPre = rmsnormBackward(gpu, dk, act.kPre!, this.p(`${pre}self_attn.k_norm.weight`), act.rstdK!, {
        heads: c.numKvHeads,
        dw: this.grad(`${pre}self_attn.k_norm.weight`),
        accumulateDw: true,
      }).dx;
      dq.release();
      dk.release();
    }
    const dh = lin(dqPre, act.h, 'self_attn.q_proj', undefined, false);
    lin(dkPre, act.h, 'self_attn.k_proj', dh, true);
    lin(dv, act.h, 'self_attn.v_proj', dh, true);
    dqPre.release();
    dkPre.release();
    dv.release();
    rmsnormBackward(gpu, dh, act.x, this.p(`${pre}input_layernorm.weight`), act.rstd1, {
      dx,
      accumulateDx: true,
      dw: this.grad(`${pre}input_layernorm.weight`),
      accumulateDw: true,
    });
    dh.release();
  }

  // ---------------------------------------------------------------------------- whole model

  /** Final hidden states (after the last norm) of a batch, no activations kept: for inference. */
  private hiddenStates(batch: TokenBatch, t: UploadedBatch): Tensor {
    let x = embedding(this.gpu, this.p('model.embed_tokens.weight'), t.ids, { seg: t.seg });
    for (let l = 0; l < this.config.numLayers; l++) {
      const act = this.layerForward(l, x, t.segments, t.pos, batch.B);
      const next = this.layerOutput(l, act);
      releaseLayer(act); // releases x too
      x = next;
    }
    const { y, rstd } = rmsnorm(this.gpu, x, this.p('model.norm.weight'), { eps: this.config.rmsNormEps });
    x.release();
    rstd.release();
    return y;
  }

  /** Full logits [N, V] (tests and small vocabularies only: training never materialises them). */
  async logits(batch: TokenBatch): Promise<Float32Array> {
    const t = this.uploadBatch(batch);
    const h = this.hiddenStates(batch, t);
    const out = linear(this.gpu, h, this.lmHead);
    const data = await this.gpu.readF32(out);
    for (const x of [h, out, t.ids, t.seg, t.segments.spans, t.pos]) x.release();
    return data;
  }

  /**
   * Training forward up to the final norm, keeping activations for backwardHidden(): the trunk that
   * the LM head (forward) and a value head (src/rl/critic.ts) sit on.
   */
  forwardHidden(batch: TokenBatch): HiddenActivations {
    const gpu = this.gpu;
    const t = this.uploadBatch(batch);
    let x = embedding(gpu, this.p('model.embed_tokens.weight'), t.ids, { seg: t.seg });
    const layers: (LayerActivations | null)[] = [];
    const inputs: (Tensor | null)[] = [];
    const recompute = this.recomputeActivations;
    for (let l = 0; l < this.config.numLayers; l++) {
      const act = this.layerForward(l, x, t.segments, t.pos, batch.B);
      const next = this.layerOutput(l, act);
      if (recompute) {
        inputs.push(act.x);
        releaseLayer({ ...act, x: null });
        layers.push(null);
      } else {
        inputs.push(null);
        layers.push(act);
      }
      x = next;
    }
    const { y: hFinal, rstd: rstdFinal } = rmsnorm(gpu, x, this.p('model.norm.weight'), {
      eps: this.config.rmsNormEps,
    });
    return {
      batch,
      ...t,
      layers,
      inputs,
      xFinal: x,
      hFinal,
      rstdFinal,
      release() {
        for (const act of layers) if (act) releaseLayer(act);
        for (const z of inputs) z?.release();
        for (const z of [x, hFinal, rstdFinal, t.ids, t.seg, t.segments.spans, t.pos]) z.release();
      },
    };
  }

  /**
   * The longest packed row of a training forward over a batch of T slots per row: CPU adapters loop
   * over each key's span whatever the row (one row holds everything: no padding at all); real GPUs
   * split dK/dV into chunks of the row, which long rows would make too coarse.
   */
  private packCapacity(T: number): number {
    return defaultDkvVariant(this.gpu) === 'chunks' ? PACK_ROW_FACTOR * T : Number.POSITIVE_INFINITY;
  }

  /**
   * The packing a training forward over `batch` uses (packing.ts), or null for the padded batch:
   * packed when every token in `rows` (flat [B, T] indices whose outputs are needed) has a packed slot
   * and the packed batch saves a tenth of the slots; `pack` forces it either way.
   */
  packingFor(batch: TokenBatch, rows: readonly number[], pack?: boolean): PackedRows | null {
    if (pack === false || rows.length === 0) return null;
    const packed = packRows(batch, this.packCapacity(batch.T));
    if (!rows.every((i) => packed.packedIndex[i] !== NOT_PACKED)) return null;
    return pack === true || packed.batch.B * packed.batch.T <= PACK_SHARE * batch.B * batch.T ? packed : null;
  }

  /**
   * Training forward: log-probabilities of `targets` (usually the next token) and entropies per
   * token, keeping activations for backward(). mask[i] = 0 marks tokens whose loss is not needed.
   * `temperature` scales the logits as the sampler did (log-probs of softmax(logits / T)).
   */
  forward(
    batch: TokenBatch,
    targets: Uint32Array,
    mask?: Uint32Array,
    options: { temperature?: number; pack?: boolean } = {},
  ): ForwardActivations {
    const gpu = this.gpu;
    const N = batch.B * batch.T;
    if (targets.length !== N) throw new Error(`forward: ${targets.length} targets for ${N} tokens`);
    const active = mask ?? batch.seg.map((s) => (s === 0 ? 0 : 1));
    if (active.length !== N) throw new Error(`forward: ${active.length} mask values for ${N} tokens`);
    const rows: number[] = [];
    for (let i = 0; i < N; i++) if (active[i] !== 0) rows.push(i);
    // Ragged rows (agent episodes padded to the longest) run packed when that saves a tenth of the
    // trunk's slots (options.pack forces it either way): packing.ts. Attention loops over each
    // token's own sequence (its segment span), so a packed row costs what its sequences would cost
    // alone. The head then runs on the active tokens, read from their packed slots, and its results
    // land in the caller's [B, T] layout as always.
    const packed = this.packingFor(batch, rows, options.pack);
    const trunk = this.forwardHidden(packed ? packed.batch : batch);
    // The LM head is a third of a small model's step and RL trains only the policy's tokens (a
    // fifth of an agent episode): when few rows are active, gather them, run the head on those
    // alone, and scatter the results back. Row results do not depend on which other rows are there.
    if (rows.length > 0 && (packed || rows.length <= COMPACT_HEAD_SHARE * N)) {
      const rowIds = Uint32Array.from(rows);
      const rowsT = gpu.upload(rowIds, [rows.length], 'u32', 'head.rows');
      const hRows = packed ? Uint32Array.from(rows, (i) => packed.packedIndex[i]) : rowIds;
      const hRowsT = packed ? gpu.upload(hRows, [rows.length], 'u32', 'head.hRows') : rowsT;
      const hActive = embedding(gpu, trunk.hFinal, hRowsT, { label: 'head.h' });
      if (hRowsT !== rowsT) hRowsT.release();
      const targetsT = gpu.upload(
        Uint32Array.from(rows, (i) => targets[i]),
        [rows.length],
        'u32',
        'targets',
      );
      const compactHead = tokenLogprob(gpu, hActive, this.lmHead, targetsT, {
        temperature: options.temperature,
      });
      const expand = (t: Tensor, label: string) => scatterRows(gpu, t, rowIds, N, label);
      const head: TokenLogprobResult = {
        ...compactHead,
        logprob: expand(compactHead.logprob, 'head.logprob'),
        entropy: expand(compactHead.entropy, 'head.entropy'),
        lse: expand(compactHead.lse, 'head.lse'),
        mask: null,
        release() {
          for (const t of [head.logprob, head.entropy, head.lse]) t.release();
        },
      };
      return {
        ...trunk,
        targets: targetsT,
        head,
        compact: { rows: rowIds, rowsT, hRows, h: hActive, head: compactHead },
        release() {
          trunk.release();
          targetsT.release();
          head.release();
          compactHead.release();
          rowsT.release();
          hActive.release();
        },
      };
    }
    const targetsT = gpu.upload(targets, [N], 'u32', 'targets');
    const maskT = gpu.upload(active, [N], 'u32', 'mask');
    const head = tokenLogprob(gpu, trunk.hFinal, this.lmHead, targetsT, {
      mask: maskT,
      temperature: options.temperature,
    });
    return {
      ...trunk,
      targets: targetsT,
      head,
      compact: null,
      release() {
        trunk.release();
        targetsT.release();
        maskT.release();
        head.release();
      },
    };
  }

  /**
   * Backpropagates dLoss/dlogprob (gLogprob [N]) and optionally dLoss/dentropy (gEntropy [N]) through
   * the activations of a forward(), adding every parameter's gradient into this.grads.
   */
  backward(fwd: ForwardActivations, gLogprob: Tensor | null, gEntropy: Tensor | null = null): void {
    const gpu = this.gpu;
    const headName = this.lmHeadName;
    // A frozen head (LoRA) gets no gradient tensor at all: [V, D] is the model's largest.
    const trainHead = !this.frozen.has(headName);
    const headOptions = {
      dW: trainHead ? this.grad(headName) : undefined,
      accumulateDw: trainHead,
      computeDw: trainHead,
    };
    if (fwd.compact) {
      // Gather the active rows' gradients, back through the head on those rows, scatter dh.
      const { rowsT, hRows, h, head } = fwd.compact;
      const gather = (g: Tensor | null) => (g ? gatherRows(gpu, g, rowsT) : null);
      const gLp = gather(gLogprob);
      const gEnt = gather(gEntropy);
      const { dh } = tokenLogprobBackward(gpu, h, this.lmHead, fwd.targets, head, {
        gLogprob: gLp ?? undefined,
        gEntropy: gEnt ?? undefined,
        ...headOptions,
      });
      gLp?.release();
      gEnt?.release();
      const dhFinal = gpu.zeros(fwd.hFinal.shape, 'f32', 'head.dhFinal');
      embeddingBackward(gpu, dh!, dhFinal, hRows);
      dh!.release();
      this.backwardHidden(fwd, dhFinal);
      dhFinal.release();
      return;
    }
    const { dh: dhFinal } = tokenLogprobBackward(gpu, fwd.hFinal, this.lmHead, fwd.targets, fwd.head, {
      gLogprob: gLogprob ?? undefined,
      gEntropy: gEntropy ?? undefined,
      ...headOptions,
    });
    this.backwardHidden(fwd, dhFinal!);
    dhFinal!.release();
  }

  /**
   * Backpropagates dLoss/d(final normed hidden state) (dhFinal [N, D]) through the trunk, adding
   * every parameter's gradient into this.grads. dhFinal is read, not consumed.
   */
  backwardHidden(fwd: HiddenActivations, dhFinal: Tensor): void {
    const gpu = this.gpu;
    const { B } = fwd.batch;
    const { dx } = rmsnormBackward(gpu, dhFinal, fwd.xFinal, this.p('model.norm.weight'), fwd.rstdFinal, {
      dw: this.grad('model.norm.weight'),
      accumulateDw: true,
    });
    for (let l = this.config.numLayers - 1; l >= 0; l--) {
      const kept = fwd.layers[l];
      if (kept) {
        this.layerBackward(l, kept, dx, fwd.segments, fwd.pos, B);
        continue;
      }
      // Recompute: the layer's forward again from its input (layerOutput too: it keeps down_proj's
      // LoRA branch), then its backward, then free all of it, the input included.
      const act = this.layerForward(l, fwd.inputs[l]!, fwd.segments, fwd.pos, B);
      this.layerOutput(l, act).release();
      this.layerBackward(l, act, dx, fwd.segments, fwd.pos, B);
      releaseLayer(act);
      fwd.inputs[l] = null;
    }
    // Frozen tensors are not stepped by the optimizer; the embedding and LM head (the largest) also
    // skip their gradient computation. Other frozen weights still get gradients (dX needs the pass).
    if (!this.frozen.has('model.embed_tokens.weight')) {
      embeddingBackward(gpu, dx, this.grad('model.embed_tokens.weight'), fwd.batch.ids, {
        seg: fwd.batch.seg,
      });
    }
    dx.release();
  }

  // ---------------------------------------------------------------------------- generation

  /**
   * Samples continuations of `prompts` with a KV cache: one prefill over the (left-padded) prompts,
   * then one token per row per step. Stops a row at a stop token id, at maxNewTokens, or when
   * shouldStop says so. Randomness is counter-based (seed, step, row): same seed, same tokens.
   */
  async generate(
    prompts: ReadonlyArray<ArrayLike<number>>,
    options: GenerateOptions,
  ): Promise<GenerateResult> {
    const session = this.startSession(
      prompts.length,
      Math.max(...prompts.map((p) => p.length)) + options.maxNewTokens,
    );
    try {
      session.append(prompts);
      return await session.sample(options);
    } finally {
      session.release();
    }
  }

  /** A KV-cache session for multi-turn rollouts: append tokens (prompt, tool responses), sample turns. */
  startSession(batch: number, maxLen: number): GenerationSession {
    return new GenerationSession(this, batch, maxLen);
  }

  /**
   * The most rows one GenerationSession of maxLen slots per row may hold: each layer's K and V cache
   * ([rows, maxLen, kvHeads · headDim] f32) is one storage binding, within the adapter's limit.
   */
  maxSessionRows(maxLen: number): number {
    const c = this.config;
    const rowBytes = maxLen * c.numKvHeads * c.headDim * 4;
    return Math.floor(this.gpu.limits.maxStorageBufferBindingSize / rowBytes);
  }

  /**
   * Forward of a packed, ragged block of new tokens through the cache; returns next-token logits
   * [B, V]. Row b adds count[b] tokens (0 = nothing: a finished row costs no work) at cache slots
   * start[b] .. start[b] + count[b] - 1; ids and pos hold them row after row. Each row's logits are
   * those of its last new token (rows with no new token get zero logits: nothing to predict from).
   */
  forwardCached(
    session: GenerationSession,
    ids: Uint32Array | Tensor,
    pos: Uint32Array,
    start: readonly number[],
    count: readonly number[],
  ): Tensor {
    const last = this.gpu.zeros([session.batch, this.config.hiddenSize], 'f32', 'gen.last');
    this.forwardCachedHidden(session, ids, pos, start, count, last);
    return this.nextTokenLogits(last);
  }

  /**
   * The most new tokens one forward may hold so that every activation ([N, max(F, H·hd, D)]) fits
   * one storage binding: GenerationSession.append splits a larger block (many rows' tool responses,
   * a large model's prompts) into forwards of at most this many tokens.
   */
  maxTokensPerForward(): number {
    const bytesPerToken = widestActivation(this.config) * 4;
    return Math.max(1, Math.floor(this.gpu.limits.maxStorageBufferBindingSize / bytesPerToken));
  }

  /** Final norm and LM head of the rows' last hidden states [B, D] (released here): logits [B, V]. */
  nextTokenLogits(last: Tensor): Tensor {
    const { gpu, config: c } = this;
    const { y: hf, rstd } = rmsnorm(gpu, last, this.p('model.norm.weight'), { eps: c.rmsNormEps });
    last.release();
    rstd.release();
    const logits = linear(gpu, hf, this.lmHead);
    hf.release();
    return logits;
  }

  /**
   * The trunk of forwardCached: writes each row's last new hidden state into `last` [B, D] (rows
   * with no new token keep what `last` holds), so consecutive blocks of one append can share it.
   * `ids` is a CPU array, or a u32 tensor already on the GPU (a decode step's sampled ids, which then
   * never travel to the CPU and back).
   */
  forwardCachedHidden(
    session: GenerationSession,
    ids: Uint32Array | Tensor,
    pos: Uint32Array,
    start: readonly number[],
    count: readonly number[],
    last: Tensor,
  ): void {
    const { gpu, config: c } = this;
    const B = session.batch;
    const onGpu = !(ids instanceof Uint32Array);
    const N = onGpu ? ids.size : ids.length;
    if (onGpu && ids.dtype !== 'u32')
      throw new Error(`forwardCached: ids must be u32, got ${ids.toString()}`);
    if (pos.length !== N) throw new Error(`forwardCached: ${N} ids and ${pos.length} positions`);
    const idsT = onGpu ? ids : gpu.upload(ids, [N], 'u32', 'gen.ids');
    // Every new token is real (no padding): segment 1, the cache's one sequence per row.
    const segT = gpu.upload(new Uint32Array(N).fill(1), [N], 'u32', 'gen.seg');
    const posT = gpu.upload(pos, [N], 'u32', 'gen.pos');
    // Uploaded once per step and shared by every layer's cache append and attention.
    const slotsT = kvSlots(gpu, session.caches[0], start, count);
    // A CPU adapter's blocked kernel takes a row's new tokens (prefill, tool results) in blocks that
    // share each k/v load; one token per row (a decode step) needs no block list.
    const group = c.numHeads / c.numKvHeads;
    const queryBlock = decodeBlocked(gpu, c.headDim, group) ? decodeQueryBlock(c.headDim, group) : 1;
    const queryBlocks =
      queryBlock > 1 && count.some((n) => n > 1) ? kvQueryBlocks(gpu, count, queryBlock) : undefined;
    const x = embedding(gpu, this.p('model.embed_tokens.weight'), idsT);
    const proj = (input: Tensor, module: string): Tensor => {
      const { y, t } = this.proj(input, module);
      t?.release();
      return y;
    };
    for (let l = 0; l < c.numLayers; l++) {
      const pre = `model.layers.${l}.`;
      const cache = session.caches[l];
      const { y: h, rstd } = rmsnorm(gpu, x, this.p(`${pre}input_layernorm.weight`), { eps: c.rmsNormEps });
      rstd.release();
      let q = proj(h, `${pre}self_attn.q_proj`);
      let k = proj(h, `${pre}self_attn.k_proj`);
      const v = proj(h, `${pre}self_attn.v_proj`);
      h.release();
      if (c.qkNorm) {
        const qn = rmsnorm(gpu, q, this.p(`${pre}self_attn.q_norm.weight`), {
          eps: c.rmsNormEps,
          heads: c.numHeads,
        });
        const kn = rmsnorm(gpu, k, this.p(`${pre}self_attn.k_norm.weight`), {
          eps: c.rmsNormEps,
          heads: c.numKvHeads,
        });
        for (const z of [q, k, qn.rstd, kn.rstd]) z.release();
        q = qn.y;
        k = kn.y;
      }
      ropeQK(gpu, q, k, posT, { headDim: c.headDim, theta: c.ropeTheta, inPlace: true });
      kvCacheAppend(gpu, cache, k, v, segT, slotsT);
      const { o, lse } = attentionDecode(gpu, q, cache, slotsT, { nHeads: c.numHeads, queryBlocks });
      for (const z of [q, k, v, lse]) z.release();
      const attnOut = proj(o, `${pre}self_attn.o_proj`);
      o.release();
      addInPlace(gpu, x, attnOut);
      attnOut.release();
      const { y: h2, rstd: rstd2 } = rmsnorm(gpu, x, this.p(`${pre}post_attention_layernorm.weight`), {
        eps: c.rmsNormEps,
      });
      rstd2.release();
      const g = proj(h2, `${pre}mlp.gate_proj`);
      const u = proj(h2, `${pre}mlp.up_proj`);
      h2.release();
      const a = swiglu(gpu, g, u);
      g.release();
      u.release();
      const m = proj(a, `${pre}mlp.down_proj`);
      a.release();
      addInPlace(gpu, x, m);
      m.release();
    }
    // Only each row's last new token feeds the next sample.
    const rowBytes = c.hiddenSize * 4;
    for (let b = 0, end = 0; b < B; b++) {
      end += count[b];
      if (count[b] === 0) continue;
      const src: Bindable = { tensor: x, offset: (end - 1) * rowBytes, size: rowBytes };
      gpu.copy(src, { tensor: last, offset: b * rowBytes, size: rowBytes });
    }
    x.release();
    for (const z of [onGpu ? undefined : idsT, segT, posT, slotsT, queryBlocks?.starts]) z?.release();
  }

  /** Reads the base model's weights back (for saving; without LoRA adapters: see exportAdapter). */
  async exportWeights(): Promise<Map<string, { shape: number[]; data: Float32Array }>> {
    return this.readParams(expectedTensors(this.config).map((t) => t.name));
  }

  /** Reads the LoRA adapters' A/B tensors back (PEFT names without the base_model.model. prefix). */
  async exportAdapter(): Promise<Map<string, { shape: number[]; data: Float32Array }>> {
    if (!this.lora) throw new Error('QwenGpuModel: the model has no LoRA adapters');
    return this.readParams(loraTensors(this.config, this.lora.config).flatMap((t) => [t.a, t.b]));
  }

  private async readParams(names: string[]): Promise<Map<string, { shape: number[]; data: Float32Array }>> {
    const tensors = names.map((n) => this.params.get(n)!);
    const data = await this.gpu.readMany(tensors);
    // Half-precision matrices widen exactly to the f32 values the kernels compute with.
    const widen = (t: Tensor, d: (typeof data)[number]): Float32Array => {
      if (t.dtype === 'f32') return d as Float32Array;
      const bytes = new Uint8Array(d.buffer, d.byteOffset, t.size * 2);
      return t.dtype === 'f16' ? decodeF16(bytes) : decodeBf16(bytes);
    };
    return new Map(
      names.map((n, i) => [n, { shape: [...tensors[i].shape], data: widen(tensors[i], data[i]) }]),
    );
  }

  release(): void {
    for (const t of this.params.values()) t.release();
    for (const t of this.grads.values()) t.release();
    this.params.clear();
    this.grads.clear();
  }
}

function releaseLayer(a: Omit<LayerActivations, 'x'> & { x: Tensor | null }): void {
  for (const t of [
    a.x,
    a.h,
    a.rstd1,
    a.qPre,
    a.kPre,
    a.rstdQ,
    a.rstdK,
    a.q,
    a.k,
    a.v,
    a.o,
    a.lse,
    a.x1,
    a.h2,
    a.rstd2,
    a.g,
    a.u,
    a.a,
    ...a.lora.values(),
  ]) {
    t?.release();
  }
}

/**
 * Decode steps between readbacks: a real GPU waits on the CPU round trip of every step otherwise; a CPU
 * adapter computes, rather than waits, and would pay for the steps of rows that stopped in a block.
 */
export function defaultStepsPerReadback(gpu: Gpu): number {
  return gpu.report.kind === 'gpu' ? 8 : 1;
}

/**
 * A batch of rows with a KV cache per layer, for multi-turn rollouts: append a prompt, sample a
 * turn, append the tool responses, sample again... without ever recomputing the prefix.
 *
 * Each row keeps its own length: an append writes row b's new tokens at slots
 * realLength[b] .. realLength[b] + n_b - 1, followed by Tq - n_b padding slots (segment 0, which
 * attention ignores) that the row's next append overwrites. So a row's slots are its real tokens
 * plus at most one block of padding: a row that appends nothing (a finished episode) uses no slots,
 * and the cache is sized by the longest row, not by the sum of every append's longest row. The
 * capacity rule: every row needs realLength[b] + Tq <= maxLen for each append of Tq slots.
 * RoPE positions count each row's real tokens. The last sampled token of a turn is not yet in the
 * cache; the next append writes it first.
 */
export class GenerationSession {
  readonly model: QwenGpuModel;
  readonly batch: number;
  readonly maxLen: number;
  readonly caches: KvCache[];
  /** Real tokens per row in the cache (the next RoPE position and the next free slot). */
  readonly realLength: number[];
  private step = 0;
  /** Next-token logits [B, V] after the last append; null before the first. */
  private logits: Tensor | null = null;
  /** Tokens sampled last but not yet in the cache. */
  private tail: number[][];

  /** New tokens per forward of an append (model.maxTokensPerForward(); tests set less). */
  maxTokensPerForward: number;
  /** Decode steps sample() runs between readbacks (defaultStepsPerReadback of the adapter). */
  stepsPerReadback: number;

  constructor(model: QwenGpuModel, batch: number, maxLen: number) {
    const c = model.config;
    if (!Number.isInteger(batch) || batch < 1) throw new Error(`generation batch must be >= 1, got ${batch}`);
    if (maxLen > c.maxPositionEmbeddings) {
      throw new Error(
        `generation length ${maxLen} exceeds max_position_embeddings ${c.maxPositionEmbeddings}`,
      );
    }
    const most = model.maxSessionRows(maxLen);
    if (batch > most) {
      const mib = (batch * maxLen * c.numKvHeads * c.headDim * 4) / 2 ** 20;
      throw new Error(
        `generation batch ${batch} × ${maxLen} slots needs a ${mib.toFixed(1)} MiB K/V cache per layer, over this adapter's storage binding limit: at most ${most} rows (split the batch over several sessions)`,
      );
    }
    this.model = model;
    this.batch = batch;
    this.maxLen = maxLen;
    const seg = model.gpu.zeros([batch, maxLen], 'u32', 'kvcache.seg'); // shared by all layers
    this.caches = Array.from({ length: c.numLayers }, () =>
      createKvCache(model.gpu, { batch, maxLen, nKvHeads: c.numKvHeads, headDim: c.headDim }, seg),
    );
    this.realLength = new Array(batch).fill(0);
    this.tail = Array.from({ length: batch }, () => []);
    this.maxTokensPerForward = model.maxTokensPerForward();
    this.stepsPerReadback = defaultStepsPerReadback(model.gpu);
  }

  /** Slots holding real tokens, per row. */
  rowLengths(): number[] {
    return [...this.realLength];
  }

  /** Free slots of the fullest row. */
  get remaining(): number {
    return this.maxLen - Math.max(...this.realLength);
  }

  /**
   * Appends tokens to every row (a prompt, a tool response; [] for a row with nothing new) and
   * computes the next-token logits. A row that appends nothing keeps no valid next-token logits:
   * only sample rows that are finished (inactive) or just appended. When every row appends
   * nothing (and no sampled token is pending), nothing runs.
   */
  append(tokens: ReadonlyArray<ArrayLike<number>>): void {
    if (tokens.length !== this.batch)
      throw new Error(`append: ${tokens.length} rows for a session of ${this.batch}`);
    const rows = tokens.map((t, b) => [...this.tail[b], ...Array.from(t)]);
    const vocab = this.model.config.vocabSize;
    for (let b = 0; b < rows.length; b++) {
      for (let i = 0; i < rows[b].length; i++) {
        const id = rows[b][i];
        if (!Number.isInteger(id) || id < 0 || id >= vocab) {
          throw new Error(`append: row ${b} token ${i} = ${id} is outside the vocabulary (${vocab})`);
        }
      }
    }
    const count = rows.map((t) => t.length);
    const N = count.reduce((a, n) => a + n, 0);
    if (N === 0) return;
    for (let b = 0; b < this.batch; b++) {
      if (this.realLength[b] + count[b] > this.maxLen) {
        throw new Error(
          `append: row ${b} holds ${this.realLength[b]} tokens; ${count[b]} more exceed the session's maxLen ${this.maxLen}`,
        );
      }
    }
    this.tail = Array.from({ length: this.batch }, () => []);
    // Packed row after row, no padding: a row with nothing new costs no work.
    const ids = new Uint32Array(N);
    const pos = new Uint32Array(N);
    const start = [...this.realLength];
    const rowBegin: number[] = []; // where each row's tokens start in the packed block
    let i = 0;
    rows.forEach((row, b) => {
      rowBegin.push(i);
      for (let t = 0; t < row.length; t++, i++) {
        ids[i] = row[t];
        pos[i] = start[b] + t;
      }
      this.realLength[b] += row.length;
    });
    this.logits?.release();
    this.logits = null;
    const cap = this.maxTokensPerForward;
    if (N <= cap) {
      this.logits = this.model.forwardCached(this, ids, pos, start, count);
      return;
    }
    // Too many tokens for one forward's activations to fit a binding: consecutive blocks of the
    // packed tokens, in order, so a row cut in two sees its first part in the cache.
    const last = this.model.gpu.zeros([this.batch, this.model.config.hiddenSize], 'f32', 'gen.last');
    for (let i0 = 0; i0 < N; i0 += cap) {
      const i1 = Math.min(N, i0 + cap);
      const partStart = start.map((s, b) => s + Math.min(count[b], Math.max(0, i0 - rowBegin[b])));
      const partCount = count.map((n, b) =>
        Math.max(0, Math.min(i1, rowBegin[b] + n) - Math.max(i0, rowBegin[b])),
      );
      this.model.forwardCachedHidden(
        this,
        ids.subarray(i0, i1),
        pos.subarray(i0, i1),
        partStart,
        partCount,
        last,
      );
    }
    this.logits = this.model.nextTokenLogits(last);
  }

  /**
   * Makes each row of `to` a copy of row `from`: its cache slots, length, pending tail and
   * next-token logits. The G samples of one question share a prompt: it is prefilled once, in one
   * row, and copied (buffer copies, no forward). `from` must have logits (it appended last).
   */
  copyRow(from: number, to: readonly number[]): void {
    const B = this.batch;
    const bad = [from, ...to].find((b) => !Number.isInteger(b) || b < 0 || b >= B);
    if (bad !== undefined) throw new Error(`copyRow: row ${bad} is outside the session's ${B} rows`);
    if (!this.logits) throw new Error('copyRow: append tokens first');
    const gpu = this.model.gpu;
    const n = this.realLength[from];
    const targets = to.filter((b) => b !== from);
    // WebGPU copies never have the same buffer on both sides: through a scratch buffer.
    const spread = (t: Tensor, rowBytes: number, bytes: number) => {
      if (bytes === 0) return;
      const scratch = gpu.empty([bytes / 4], 'u32', 'gen.copyRow');
      gpu.copy({ tensor: t, offset: from * rowBytes, size: bytes }, scratch);
      for (const b of targets) gpu.copy(scratch, { tensor: t, offset: b * rowBytes, size: bytes });
      scratch.release();
    };
    for (const cache of this.caches) {
      const slot = cache.nKvHeads * cache.headDim * 4;
      spread(cache.k, this.maxLen * slot, n * slot);
      spread(cache.v, this.maxLen * slot, n * slot);
    }
    spread(this.caches[0].seg, this.maxLen * 4, n * 4); // shared by every layer
    const logitRow = this.model.config.vocabSize * 4;
    spread(this.logits, logitRow, logitRow);
    for (const b of targets) {
      this.realLength[b] = n;
      this.tail[b] = [...this.tail[from]];
    }
  }

  /** The current next-token logits [B, V] (for tests and for showing the model's top choices). */
  async readLogits(): Promise<Float32Array> {
    if (!this.logits) throw new Error('readLogits: append tokens first');
    return this.model.gpu.readF32(this.logits);
  }

  /**
   * Samples one turn per row (until a stop token, shouldStop, or maxNewTokens). Rows with
   * active[b] false are done from the first step: no tokens, finish 'inactive'; when no row is
   * active nothing runs.
   *
   * Decode steps run in blocks of `stepsPerReadback`: within a block each step's sampled ids stay
   * on the GPU and are the next step's input, and the CPU reads the whole block back at once, then
   * applies the stop rules step by step. A real GPU's decode step is a few milliseconds of work behind
   * a round trip to the CPU; a block pays that round trip once. The result (tokens, log-probs, the
   * cache, the RNG counter) is that of reading back every step: each row's computation depends on
   * its own tokens only, and a row that stops inside a block decodes on to the block's end, its
   * extra tokens dropped and its length set back, so their cache slots lie past it and are
   * overwritten by its next append. That costs a CPU adapter real work, hence one step there. On
   * CPU adapters the two are bit-identical (tested); on a real GPU the matmul variant follows the
   * rows in a step (gemv for at most 4), so a row's logits may differ in their last bits, as they
   * already do between steps with more or fewer other rows still decoding.
   */
  async sample(options: GenerateOptions): Promise<GenerateResult> {
    const gpu = this.model.gpu;
    const { maxNewTokens, temperature = 1, topK = 0, topP = 1, seed = 0, padId = 0, active } = options;
    if (!this.logits) throw new Error('sample: append a prompt first');
    if (active !== undefined && active.length !== this.batch) {
      throw new Error(`sample: active has ${active.length} entries for a session of ${this.batch} rows`);
    }
    const block = options.stepsPerReadback ?? this.stepsPerReadback;
    if (!Number.isInteger(block) || block < 1) {
      throw new Error(`sample: stepsPerReadback must be an integer >= 1, got ${block}`);
    }
    const streamOffset = options.streamOffset ?? 0;
    if (!Number.isInteger(streamOffset) || streamOffset < 0 || streamOffset + this.batch > 0xffffffff) {
      throw new Error(`sample: streamOffset must be an integer >= 0, got ${streamOffset}`);
    }
    const isActive = (b: number) => active === undefined || active[b];
    const perRow = options.maxNewTokensPerRow;
    if (perRow !== undefined) {
      if (perRow.length !== this.batch)
        throw new Error(`sample: maxNewTokensPerRow has ${perRow.length} entries for ${this.batch} rows`);
      perRow.forEach((n, b) => {
        if (!Number.isInteger(n) || n < 0)
          throw new Error(`sample: maxNewTokensPerRow[${b}] = ${n} is not an integer >= 0`);
      });
    }
    const rowMax = (b: number) => (isActive(b) ? Math.min(maxNewTokens, perRow?.[b] ?? maxNewTokens) : 0);
    for (let b = 0; b < this.batch; b++) {
      // Slots row b may fill in this call: its pending tail, then each sampled token while another
      // row goes on (the last step's tokens wait in the tail for the next append). Appends are
      // packed: a finished row takes no slots.
      const m = rowMax(b);
      const need = this.realLength[b] + this.tail[b].length + Math.min(m, maxNewTokens - 1);
      if (need > this.maxLen) {
        throw new Error(
          `sample: ${m} new tokens do not fit row ${b}'s ${this.maxLen - this.realLength[b]} free cache slots`,
        );
      }
    }
    const stop = new Set(options.stopTokenIds ?? []);
    const vocab = this.model.config.vocabSize;
    const tokens: number[][] = Array.from({ length: this.batch }, () => []);
    const logprobs: number[][] = Array.from({ length: this.batch }, () => []);
    const finish: GenerateResult['finish'] = Array.from({ length: this.batch }, (_, b) =>
      isActive(b) ? 'length' : 'inactive',
    );
    const done = Array.from({ length: this.batch }, (_, b) => rowMax(b) === 0);
    let s = 0; // steps sampled (and kept) so far
    while (s < maxNewTokens && done.some((d) => !d)) {
      // The previous block's last tokens (and any token left pending before this call) go in first.
      if (this.tail.some((t) => t.length > 0)) this.append(this.tail.map(() => []));
      const rows = done.flatMap((d, b) => (d ? [] : [b]));
      // Steps in this block: no more than any row still needs, and every row in the block appends
      // one token per step after the first, even one that has stopped: it needs the slots.
      const room = Math.min(...rows.map((b) => this.maxLen - this.realLength[b]));
      const wanted = Math.max(...rows.map((b) => rowMax(b) - tokens[b].length));
      const k = Math.max(1, Math.min(block, maxNewTokens - s, wanted, room + 1));
      const firstStep = this.step;
      const lengthBefore = [...this.realLength];
      const doneT = gpu.upload(
        Uint32Array.from(done, (d) => (d ? 1 : 0)),
        [this.batch],
        'u32',
        'gen.done',
      );
      // Row b's stream defaults to b itself: only an offset needs the tensor.
      const streamsT =
        streamOffset === 0
          ? undefined
          : gpu.upload(
              Uint32Array.from(done, (_, b) => streamOffset + b),
              [this.batch],
              'u32',
              'gen.streams',
            );
      const stepIds: Tensor[] = [];
      const stepLps: Tensor[] = [];
      let read: Array<Float32Array | Uint16Array | Uint32Array | Int32Array>;
      try {
        for (let j = 0; j < k; j++) {
          if (j > 0) this.appendSampled(stepIds[j - 1], rows);
          const r = sampleTokens(gpu, this.logits!, {
            temperature: temperature === 0 ? 1 : temperature,
            greedy: temperature === 0,
            topK,
            topP,
            seed,
            step: this.step++,
            done: doneT,
            streams: streamsT,
            padId,
            vocabSize: vocab,
          });
          stepIds.push(r.ids);
          stepLps.push(r.logprobs);
        }
        read = await gpu.readMany([...stepIds, ...stepLps]);
      } finally {
        for (const t of [...stepIds, ...stepLps, doneT, streamsT]) t?.release();
      }
      // The stop rules, step by step, as if each step had been read back on its own.
      let last = -1; // the block's last step that sampled a kept token
      const lastActive = new Array<number>(this.batch).fill(-1);
      for (let j = 0; j < k && s < maxNewTokens && done.some((d) => !d); j++, s++) {
        last = j;
        const ids = read[j];
        const lps = read[k + j];
        for (const b of rows) {
          if (done[b]) continue;
          const id = ids[b];
          tokens[b].push(id);
          logprobs[b].push(lps[b]);
          lastActive[b] = j;
          if (stop.has(id)) {
            done[b] = true;
            finish[b] = 'stop';
          } else if (options.shouldStop?.(b, tokens[b])) {
            done[b] = true;
            finish[b] = 'callback';
          } else if (tokens[b].length >= rowMax(b)) {
            done[b] = true;
          }
        }
      }
      // Each row keeps the tokens of its steps before `last` in the cache; the tokens of step `last`
      // wait in the tail (the next block, or the next append, writes them first).
      this.step = firstStep + last + 1;
      for (const b of rows) {
        const kept = Math.min(lastActive[b] + 1, last);
        for (let j = 0; j < kept; j++) {
          const id = read[j][b];
          if (id >= vocab) {
            throw new Error(
              `sample: row ${b} sampled id ${id} (outside the vocabulary of ${vocab}): its logits are not finite`,
            );
          }
        }
        this.realLength[b] = lengthBefore[b] + kept;
        this.tail[b] = lastActive[b] === last ? [read[last][b]] : [];
      }
    }
    return { tokens, logprobs, finish };
  }

  /**
   * One decode step's append inside a block: row rows[i] adds the id the sampler wrote at ids[rows[i]]
   * ([B] u32 on the GPU), gathered into a packed block by buffer copies (one per run of rows).
   */
  private appendSampled(ids: Tensor, rows: readonly number[]): void {
    const gpu = this.model.gpu;
    const start = [...this.realLength];
    const count = new Array<number>(this.batch).fill(0);
    for (const b of rows) count[b] = 1;
    const pos = Uint32Array.from(rows, (b) => this.realLength[b]);
    let packed = ids;
    if (rows.length < this.batch) {
      packed = gpu.empty([rows.length], 'u32', 'gen.blockIds');
      for (let i = 0; i < rows.length; ) {
        let j = i + 1;
        while (j < rows.length && rows[j] === rows[j - 1] + 1) j++;
        const size = (j - i) * 4;
        gpu.copy({ tensor: ids, offset: rows[i] * 4, size }, { tensor: packed, offset: i * 4, size });
        i = j;
      }
    }
    for (const b of rows) this.realLength[b] += 1;
    this.logits?.release();
    this.logits = this.model.forwardCached(this, packed, pos, start, count);
    if (packed !== ids) packed.release();
  }

  release(): void {
    this.logits?.release();
    this.logits = null;
    for (const c of this.caches) {
      c.k.release();
      c.v.release();
    }
    this.caches[0]?.seg.release();
  }
}
