// The Float64 reference forward (tests/reference/qwen-ref.ts) checked for internal consistency:
// properties the HF model has by construction, each of which a specific mistake would break
// (padding, causality, tying, RoPE convention and relativity, GQA head mapping, per-head q/k norm),
// plus a one-token forward recomputed independently.

import { describe, expect, it } from 'vitest';
import type { ModelConfig } from '../../src/agent/model/config.ts';
import { tinyCheckpoint, tinySpec } from '../../src/agent/model/tiny-checkpoints.ts';
import {
  applyRope,
  logitsRow,
  logSoftmax,
  qwenForward,
  qwenForwardBatch,
  rmsNorm,
  ropeInvFreq,
  silu,
  tokenLogProbs,
  type Weights,
} from '../reference/qwen-ref.ts';
import { maxAbsDiff } from './helpers.ts';

const QWEN2 = tinyCheckpoint(tinySpec('tiny-qwen2-v512')); // untied, q/k/v bias, head_dim 16
const QWEN3 = tinyCheckpoint(tinySpec('tiny-qwen3-v512')); // q/k norm, head_dim 32 (4 x 32 != 64)
const QWEN2_TIED = tinyCheckpoint(tinySpec('tiny-qwen2-tied-v512'));
const MODELS = [
  ['qwen2', QWEN2],
  ['qwen3', QWEN3],
] as const;

const TOKENS = [5, 17, 300, 42, 7, 511, 0];
const V = 512;

/** Copy of a weight map with some tensors replaced. */
function withWeights(weights: Weights, replace: Record<string, Float32Array>): Weights {
  const out = new Map<string, { data: ArrayLike<number> }>(weights);
  for (const [name, data] of Object.entries(replace)) out.set(name, { data });
  return out;
}

const rows = (logits: Float64Array, from: number, to: number) => logits.subarray(from * V, to * V);

describe('RoPE', () => {
  it('is the identity at position 0', () => {
    const x = Float64Array.from({ length: 32 }, (_, i) => Math.sin(i + 1));
    const y = x.slice();
    applyRope(y, 0, 32, 0, 1e6);
    expect([...y]).toEqual([...x]);
  });

  it('rotates the pair (i, i + D/2), not neighbouring pairs (HF rotate_half)', () => {
    // D = 4, theta = 10000: angles at position 1 are [1, 1/100].
    const x = new Float64Array([1, 0, 0, 0]);
    applyRope(x, 0, 4, 1, 10000, 'exact');
    expect(x[0]).toBeCloseTo(Math.cos(1), 15);
    expect(x[1]).toBe(0);
    expect(x[2]).toBeCloseTo(Math.sin(1), 15);
    expect(x[3]).toBe(0);
    const y = new Float64Array([0, 1, 0, 0]);
    applyRope(y, 0, 4, 1, 10000, 'exact');
    expect([y[0], y[2]]).toEqual([0, 0]);
    expect(y[1]).toBeCloseTo(Math.cos(0.01), 15);
    expect(y[3]).toBeCloseTo(Math.sin(0.01), 15);
  });

  it('float32 mode computes inv_freq as torch does in float32', () => {
    const f32 = ropeInvFreq(64, 1e6);
    const exact = ropeInvFreq(64, 1e6, 'exact');
    expect(f32[0]).toBe(1);
    for (let i = 0; i < 32; i++) {
      expect(Math.fround(f32[i])).toBe(f32[i]); // a float32 value
      expect(Math.abs(f32[i] / exact[i] - 1)).toBeLessThan(2 ** -21); // within a few float32 ulps
    }
    // At position 20000 the float32 angle is visibly off the exact one (why the default is 'f32').
    const at = (angles: 'f32' | 'exact') => {
      const x = new Float64Array(64);
      x[1] = 1;
      applyRope(x, 0, 64, 20000, 1e6, angles);
      return x[1];
    };
    expect(Math.abs(at('f32') - at('exact'))).toBeGreaterThan(1e-6);
  });

  it('makes q.k depend only on the distance between positions', () => {
    const q = Float64Array.from({ length: 16 }, (_, i) => Math.cos(3 * i));
    const k = Float64Array.from({ length: 16 }, (_, i) => Math.sin(5 * i + 1));
    const dotAt = (m: number, n: number) => {
      const a = q.slice();
      const b = k.slice();
      applyRope(a, 0, 16, m, 1e4, 'exact');
      applyRope(b, 0, 16, n, 1e4, 'exact');
      return a.reduce((s, v, i) => s + v * b[i], 0);
    };
    expect(dotAt(7, 5)).toBeCloseTo(dotAt(2, 0), 12);
    expect(dotAt(100, 97)).toBeCloseTo(dotAt(3, 0), 11);
    expect(Math.abs(dotAt(7, 5) - dotAt(7, 4))).toBeGreaterThan(1e-3);
  });
});

describe('log-softmax helpers', () => {
  it('normalises, is shift invariant and stable for large logits', () => {
    const row = [1000, 1001, 999.5, -3];
    const lp = logSoftmax(row);
    expect(lp.reduce((s, v) => s + Math.exp(v), 0)).toBeCloseTo(1, 12);
    const shifted = logSoftmax(row.map((v) => v - 1000));
    expect(maxAbsDiff(lp, shifted)).toBeLessThan(1e-12);
    expect(lp[1]).toBeCloseTo(-Math.log(1 + Math.exp(-1) + Math.exp(-1.5) + Math.exp(-1004)), 12);
  });

  it('tokenLogProbs picks each target from its row', () => {
    const { logits } = qwenForward(QWEN2.config, QWEN2.tensors, TOKENS);
    const targets = TOKENS.slice(1);
    const lp = tokenLogProbs(logits, V, targets);
    targets.forEach((target, t) => {
      expect(lp[t]).toBe(logSoftmax(logitsRow(logits, V, t))[target]);
    });
  });
});

describe.each(MODELS)('%s reference forward', (_name, model) => {
  const { config, tensors } = model;

  it('produces finite [T, V] logits and one hidden state per layer', () => {
    const out = qwenForward(config, tensors, TOKENS);
    expect(out.logits.length).toBe(TOKENS.length * V);
    expect(out.logits.every(Number.isFinite)).toBe(true);
    expect(out.hidden.length).toBe(config.numLayers + 1);
    // Not degenerate: the next-token distribution is far from uniform.
    const lp = logSoftmax(logitsRow(out.logits, V, 0));
    expect(Math.max(...lp) - Math.min(...lp)).toBeGreaterThan(1);
  });

  it('left padding with an attention mask and positions from the mask equals the unpadded result', () => {
    const plain = qwenForward(config, tensors, TOKENS).logits;
    const [padded] = qwenForwardBatch(config, tensors, {
      inputIds: [[99, 99, 99, ...TOKENS]],
      attentionMask: [[0, 0, 0, ...TOKENS.map(() => 1)]],
    });
    expect(maxAbsDiff(rows(padded.logits, 3, 3 + TOKENS.length), plain)).toBeLessThan(1e-12);
  });

  it('right padding does not change earlier positions', () => {
    const plain = qwenForward(config, tensors, TOKENS).logits;
    const [padded] = qwenForwardBatch(config, tensors, {
      inputIds: [[...TOKENS, 3, 3]],
      attentionMask: [[...TOKENS.map(() => 1), 0, 0]],
    });
    expect(maxAbsDiff(rows(padded.logits, 0, TOKENS.length), plain)).toBe(0);
  });

  it('is causal: changing token 3 leaves positions 0..2 unchanged and changes 3..', () => {
    const a = qwenForward(config, tensors, TOKENS).logits;
    const changed = TOKENS.slice();
    changed[3] = 123;
    const b = qwenForward(config, tensors, changed).logits;
    expect(maxAbsDiff(rows(a, 0, 3), rows(b, 0, 3))).toBe(0);
    for (let t = 3; t < TOKENS.length; t++)
      expect(maxAbsDiff(rows(a, t, t + 1), rows(b, t, t + 1))).toBeGreaterThan(1e-6);
  });

  it('shifting every position by a constant changes nothing (RoPE is relative)', () => {
    const exact = { ropeAngles: 'exact' } as const; // float32 angles are only relative up to rounding
    const a = qwenForward(config, tensors, TOKENS, exact).logits;
    const b = qwenForward(config, tensors, TOKENS, {
      ...exact,
      positions: TOKENS.map((_, t) => t + 11),
    }).logits;
    expect(maxAbsDiff(a, b)).toBeLessThan(1e-9);
    // ...while changing relative positions does change the output.
    const c = qwenForward(config, tensors, TOKENS, {
      ...exact,
      positions: TOKENS.map((_, t) => 2 * t),
    }).logits;
    expect(maxAbsDiff(a, c)).toBeGreaterThan(1e-4);
    // HF's float32 angles stay within float32 rounding of the exact ones at small positions.
    expect(maxAbsDiff(a, qwenForward(config, tensors, TOKENS).logits)).toBeLessThan(1e-5);
  });

  it('GQA: query head h reads kv head floor(h / (heads / kv_heads)) (repeat_kv)', () => {
    // Expand k/v projections to one kv head per query head by duplicating kv head g for query heads
    // 2g and 2g + 1; a model without grouping must then give the same logits.
    const { numHeads, numKvHeads, headDim: D, hiddenSize: H } = config;
    const group = numHeads / numKvHeads;
    const replace: Record<string, Float32Array> = {};
    for (let l = 0; l < config.numLayers; l++) {
      for (const proj of ['k_proj', 'v_proj']) {
        const w = tensors.get(`model.layers.${l}.self_attn.${proj}.weight`)!.data;
        const wide = new Float32Array(numHeads * D * H);
        for (let h = 0; h < numHeads; h++)
          wide.set(w.subarray(Math.floor(h / group) * D * H, (Math.floor(h / group) + 1) * D * H), h * D * H);
        replace[`model.layers.${l}.self_attn.${proj}.weight`] = wide;
        if (config.qkvBias) {
          const b = tensors.get(`model.layers.${l}.self_attn.${proj}.bias`)!.data;
          const wideB = new Float32Array(numHeads * D);
          for (let h = 0; h < numHeads; h++)
            wideB.set(b.subarray(Math.floor(h / group) * D, (Math.floor(h / group) + 1) * D), h * D);
          replace[`model.layers.${l}.self_attn.${proj}.bias`] = wideB;
        }
      }
    }
    const mha: ModelConfig = { ...config, numKvHeads: numHeads };
    const a = qwenForward(config, tensors, TOKENS).logits;
    const b = qwenForward(mha, withWeights(tensors, replace), TOKENS).logits;
    expect(maxAbsDiff(a, b)).toBeLessThan(1e-12);
  });

  it('single token: matches a forward recomputed by hand (attention over one key returns v)', () => {
    const token = 42;
    const { hiddenSize: H, intermediateSize: I, numHeads, numKvHeads, headDim: D } = config;
    const w = (n: string) => tensors.get(n)!.data;
    const matvec = (m: ArrayLike<number>, x: number[], rowsOut: number, bias?: ArrayLike<number>) =>
      Array.from({ length: rowsOut }, (_, o) =>
        x.reduce((s, xi, i) => s + m[o * x.length + i] * xi, bias ? bias[o] : 0),
      );
    const norm = (x: number[], g: ArrayLike<number>) => {
      const r = 1 / Math.sqrt(x.reduce((s, v) => s + v * v, 0) / x.length + config.rmsNormEps);
      return x.map((v, i) => v * r * g[i]);
    };
    let x = Array.from(w('model.embed_tokens.weight').subarray(token * H, (token + 1) * H));
    for (let l = 0; l < config.numLayers; l++) {
      const p = `model.layers.${l}`;
      const h = norm(x, w(`${p}.input_layernorm.weight`));
      const v = matvec(
        w(`${p}.self_attn.v_proj.weight`),
        h,
        numKvHeads * D,
        config.qkvBias ? w(`${p}.self_attn.v_proj.bias`) : undefined,
      );
      const attn = Array.from(
        { length: numHeads * D },
        (_, j) => v[Math.floor(Math.floor(j / D) / (numHeads / numKvHeads)) * D + (j % D)],
      );
      const o = matvec(w(`${p}.self_attn.o_proj.weight`), attn, H);
      x = x.map((xi, i) => xi + o[i]);
      const h2 = norm(x, w(`${p}.post_attention_layernorm.weight`));
      const gate = matvec(w(`${p}.mlp.gate_proj.weight`), h2, I);
      const up = matvec(w(`${p}.mlp.up_proj.weight`), h2, I);
      const down = matvec(
        w(`${p}.mlp.down_proj.weight`),
        gate.map((g, i) => (g / (1 + Math.exp(-g))) * up[i]),
        H,
      );
      x = x.map((xi, i) => xi + down[i]);
    }
    const head = w(config.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight');
    const expected = matvec(head, norm(x, w('model.norm.weight')), V);
    expect(maxAbsDiff(qwenForward(config, tensors, [token]).logits, expected)).toBeLessThan(1e-12);
  });
});

describe('architecture details', () => {
  it('tied and untied heads agree when lm_head equals the embedding', () => {
    const { config, tensors } = QWEN2_TIED;
    const untied: ModelConfig = { ...config, tieWordEmbeddings: false };
    const weights = withWeights(tensors, {
      'lm_head.weight': Float32Array.from(tensors.get('model.embed_tokens.weight')!.data),
    });
    const a = qwenForward(config, tensors, TOKENS).logits;
    const b = qwenForward(untied, weights, TOKENS).logits;
    expect(maxAbsDiff(a, b)).toBe(0);
    // And a different lm_head does change them (the untied path really reads lm_head.weight).
    const other = withWeights(tensors, {
      'lm_head.weight': Float32Array.from(tensors.get('model.embed_tokens.weight')!.data, (v) => -v),
    });
    expect(maxAbsDiff(a, qwenForward(untied, other, TOKENS).logits)).toBeGreaterThan(1e-3);
  });

  it("Qwen3 q/k norm is per head and before RoPE: scaling one head's q rows changes nothing", () => {
    // RMSNorm over each head's D values cancels any per-head scale of q_proj (up to eps); a norm over
    // the whole q vector, or no norm (Qwen2), would not.
    const scaleHeads = (model: typeof QWEN3, factors: number[]) => {
      const { config, tensors } = model;
      const replace: Record<string, Float32Array> = {};
      for (let l = 0; l < config.numLayers; l++) {
        const name = `model.layers.${l}.self_attn.q_proj.weight`;
        const w = Float32Array.from(tensors.get(name)!.data);
        const rowsPerHead = config.headDim * config.hiddenSize;
        factors.forEach((f, head) => {
          for (let i = head * rowsPerHead; i < (head + 1) * rowsPerHead; i++) w[i] *= f;
        });
        replace[name] = w;
        if (config.qkvBias) {
          const bName = `model.layers.${l}.self_attn.q_proj.bias`;
          const b = Float32Array.from(tensors.get(bName)!.data);
          factors.forEach((f, head) => {
            for (let i = head * config.headDim; i < (head + 1) * config.headDim; i++) b[i] *= f;
          });
          replace[bName] = b;
        }
      }
      return qwenForward(model.config, withWeights(tensors, replace), TOKENS).logits;
    };
    const factors = [4, 0.5, 1, 2];
    const q3 = qwenForward(QWEN3.config, QWEN3.tensors, TOKENS).logits;
    expect(maxAbsDiff(q3, scaleHeads(QWEN3, factors))).toBeLessThan(1e-4);
    const q2 = qwenForward(QWEN2.config, QWEN2.tensors, TOKENS).logits;
    expect(maxAbsDiff(q2, scaleHeads(QWEN2, factors))).toBeGreaterThan(1e-2);
  });

  it('RMSNorm and SiLU basics', () => {
    const y = rmsNorm(new Float64Array([3, 4]), 2, [1, 2], 0);
    expect(y[0]).toBeCloseTo(3 / Math.sqrt(12.5), 15);
    expect(y[1]).toBeCloseTo((2 * 4) / Math.sqrt(12.5), 15);
    expect(silu(0)).toBe(0);
    expect(silu(20)).toBeCloseTo(20, 6);
  });
});
