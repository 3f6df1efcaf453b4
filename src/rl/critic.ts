// PPO's critic: a Qwen trunk with a scalar value head, as verl's critic (AutoModelForTokenClassification
// with one label). It does NOT share the actor's backbone: it is its own copy of the warm-start
// weights, trained by its own AdamW on the clipped value loss, so value gradients never disturb the
// policy. Costs one more forward/backward of the trunk per step (PPO only).
//
//   h = trunk(ids)                  [N, D]   final-normed hidden states (QwenGpuModel.forwardHidden)
//   v = h · wᵀ + b                  [N]      w = score.weight [1, D], b = score.bias [1]
//
// backward(gValue [N]): dW, db and dh = gValue ⊗ w, then the trunk's backward from dh.
// The value head starts at zero (values 0 everywhere), so early advantages are the plain returns.
// Ragged rows run packed as the policy's forward runs them (QwenGpuModel.packingFor): the trunk on the
// packed batch, the head on the real tokens' hidden states gathered from their packed slots, the
// values scattered back to [B, T] (0 on padding, which no loss reads).

import type { ModelConfig } from '../agent/model/config.ts';
import {
  gatherRows,
  type HiddenActivations,
  QwenGpuModel,
  scatterRows,
  type TokenBatch,
} from '../agent/model/qwen-gpu.ts';
import { embedding, embeddingBackward } from '../gpu/kernels/embedding.ts';
import { linear, linearBackward } from '../gpu/kernels/linear.ts';
import type { Gpu } from '../gpu/runtime.ts';
import type { Tensor } from '../gpu/tensor.ts';

export const VALUE_HEAD_WEIGHT = 'score.weight';
export const VALUE_HEAD_BIAS = 'score.bias';

export interface ValueForward {
  /** Predicted values per token, [N] (the caller's batch, B × T). */
  values: Tensor;
  act: HiddenActivations;
  /** Packed: the real tokens' flat indices in the caller's batch, their packed slots, their hidden states. */
  packed: { rowsT: Tensor; hRows: Uint32Array; h: Tensor } | null;
  release(): void;
}

export class ValueModel {
  readonly gpu: Gpu;
  readonly trunk: QwenGpuModel;
  readonly headWeight: Tensor;
  readonly headBias: Tensor;
  readonly headWeightGrad: Tensor;
  readonly headBiasGrad: Tensor;

  constructor(
    gpu: Gpu,
    config: ModelConfig,
    weights: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>,
  ) {
    this.gpu = gpu;
    this.trunk = new QwenGpuModel(gpu, config, weights);
    const D = config.hiddenSize;
    const w = weights.get(VALUE_HEAD_WEIGHT);
    const b = weights.get(VALUE_HEAD_BIAS);
    if (w && w.data.length !== D) throw new Error(`ValueModel: ${VALUE_HEAD_WEIGHT} must hold ${D} values`);
    if (b && b.data.length !== 1) throw new Error(`ValueModel: ${VALUE_HEAD_BIAS} must hold 1 value`);
    this.headWeight = w
      ? gpu.upload(w.data, [1, D], 'f32', VALUE_HEAD_WEIGHT)
      : gpu.zeros([1, D], 'f32', VALUE_HEAD_WEIGHT);
    this.headBias = b
      ? gpu.upload(b.data, [1], 'f32', VALUE_HEAD_BIAS)
      : gpu.zeros([1], 'f32', VALUE_HEAD_BIAS);
    this.headWeightGrad = gpu.zeros([1, D], 'f32', `grad:${VALUE_HEAD_WEIGHT}`);
    this.headBiasGrad = gpu.zeros([1], 'f32', `grad:${VALUE_HEAD_BIAS}`);
  }

  /** Every trained tensor by name (trunk + head), for the optimizer. */
  params(): Map<string, Tensor> {
    const out = this.trunk.trainableParams();
    out.set(VALUE_HEAD_WEIGHT, this.headWeight);
    out.set(VALUE_HEAD_BIAS, this.headBias);
    return out;
  }

  /** Gradients by the same names (created on first backward for the trunk). */
  grads(): Map<string, Tensor> {
    const out = new Map<string, Tensor>();
    for (const name of this.trunk.trainableParams().keys()) out.set(name, this.trunk.grad(name));
    out.set(VALUE_HEAD_WEIGHT, this.headWeightGrad);
    out.set(VALUE_HEAD_BIAS, this.headBiasGrad);
    return out;
  }

  zeroGrad(): void {
    this.trunk.zeroGrad();
    this.gpu.fill0(this.headWeightGrad);
    this.gpu.fill0(this.headBiasGrad);
  }

  /** Values of every token of `batch`; `pack` forces packing on or off (default: when it pays). */
  forward(batch: TokenBatch, options: { pack?: boolean } = {}): ValueForward {
    const gpu = this.gpu;
    const N = batch.B * batch.T;
    const rows: number[] = [];
    for (let i = 0; i < N; i++) if (batch.seg[i] !== 0) rows.push(i);
    const packing = this.trunk.packingFor(batch, rows, options.pack);
    const act = this.trunk.forwardHidden(packing ? packing.batch : batch);
    const values = gpu.empty([N], 'f32', 'value.values');
    if (!packing) {
      const v2 = linear(gpu, act.hFinal, this.headWeight, this.headBias, { label: 'value.v' }); // [N, 1]
      gpu.copy(v2, values);
      v2.release();
      return {
        values,
        act,
        packed: null,
        release() {
          values.release();
          act.release();
        },
      };
    }
    values.release();
    const rowIds = Uint32Array.from(rows);
    const hRows = Uint32Array.from(rows, (i) => packing.packedIndex[i]);
    const hRowsT = gpu.upload(hRows, [rows.length], 'u32', 'value.hRows');
    const h = embedding(gpu, act.hFinal, hRowsT, { label: 'value.h' }); // [n, D] gathered
    hRowsT.release();
    const v2 = linear(gpu, h, this.headWeight, this.headBias, { label: 'value.v' }); // [n, 1]
    const v = gpu.empty([rows.length], 'f32', 'value.vReal');
    gpu.copy(v2, v);
    v2.release();
    const scattered = scatterRows(gpu, v, rowIds, N, 'value.values');
    v.release();
    const rowsT = gpu.upload(rowIds, [rows.length], 'u32', 'value.rows');
    return {
      values: scattered,
      act,
      packed: { rowsT, hRows, h },
      release() {
        for (const t of [scattered, rowsT, h]) t.release();
        act.release();
      },
    };
  }

  /** Adds dLoss/dθ for dLoss/dv = gValue [N] (the forward's batch; 0 on padding) into the gradients. */
  backward(fwd: ValueForward, gValue: Tensor): void {
    const gpu = this.gpu;
    const N = fwd.values.size;
    if (gValue.size !== N)
      throw new Error(`ValueModel.backward: gValue has ${gValue.size} values for ${N} tokens`);
    const head = (g: Tensor, h: Tensor): Tensor => {
      const dy = gpu.empty([g.size, 1], 'f32', 'value.dy');
      gpu.copy(g, dy);
      const { dx } = linearBackward(gpu, dy, h, this.headWeight, {
        dW: this.headWeightGrad,
        db: this.headBiasGrad,
        bias: true,
        accumulate: true,
      });
      dy.release();
      return dx!;
    };
    if (!fwd.packed) {
      const dx = head(gValue, fwd.act.hFinal);
      this.trunk.backwardHidden(fwd.act, dx);
      dx.release();
      return;
    }
    // The real tokens' gradients, back through the head on their hidden states, then scattered to
    // their packed slots (padding slots get none: packing dropped them).
    const { rowsT, hRows, h } = fwd.packed;
    const g = gatherRows(gpu, gValue, rowsT);
    const dh = head(g, h);
    g.release();
    const dhFinal = gpu.zeros(fwd.act.hFinal.shape, 'f32', 'value.dhFinal');
    embeddingBackward(gpu, dh, dhFinal, hRows);
    dh.release();
    this.trunk.backwardHidden(fwd.act, dhFinal);
    dhFinal.release();
  }

  /** Reads every weight back (trunk in HF names, plus the value head). */
  async exportWeights(): Promise<Map<string, { shape: number[]; data: Float32Array }>> {
    const out = await this.trunk.exportWeights();
    const [w, b] = await this.gpu.readMany([this.headWeight, this.headBias]);
    out.set(VALUE_HEAD_WEIGHT, { shape: [...this.headWeight.shape], data: w as Float32Array });
    out.set(VALUE_HEAD_BIAS, { shape: [1], data: b as Float32Array });
    return out;
  }

  release(): void {
    this.trunk.release();
    for (const t of [this.headWeight, this.headBias, this.headWeightGrad, this.headBiasGrad]) t.release();
  }
}
