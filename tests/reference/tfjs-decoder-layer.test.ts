// The tfjs decoder-layer oracle against a plain float64 implementation written here, loop by loop,
// independently of both tfjs and our kernels. Forward: max |tf - ref| / max(1, |ref|) <= 1e-4.
// Gradients (tfjs autodiff) vs central finite differences of the float64 loss: every entry of dx and
// six entries of every parameter, |tf - fd| <= 1e-3 · max|grad of that tensor| + 1e-3 · |fd|.
import { afterAll, describe, expect, it } from 'vitest';
import type { ModelConfig } from '../../src/agent/model/config.ts';
import { randomArray } from '../helpers/gpu.ts';
import { positionsFromMask, qwenForward } from './qwen-ref.ts';
import {
  DECODER_PARAM_NAMES,
  type DecoderLayerConfig,
  type DecoderLayerParams,
  type DecoderParamName,
  decoderLayerGradsTf,
  decoderLayerTf,
  decoderParamShapes,
  initTf,
  timeDecoderLayerTf,
} from './tfjs-decoder-layer.ts';

const B = 2;
const T = 5;
const D = 32;
const nH = 4;
const nKv = 2;
const hd = 8;
const F = 48;
const N = B * T;
// Row 0 packs two sequences; row 1 is left-padded (positions restart at the first real token).
const SEG = new Uint32Array([1, 1, 1, 2, 2, 0, 0, 1, 1, 1]);
const POS = new Uint32Array([0, 1, 2, 0, 1, 0, 0, 0, 1, 2]);
const PAD_ROWS = [5, 6];

function cfgOf(extra: Partial<DecoderLayerConfig> = {}): DecoderLayerConfig {
  return { T, seg: SEG, pos: POS, nH, nKv, hd, eps: 1e-6, theta: 10000, ...extra };
}

function makeParams(qwen3: boolean, seed: number): DecoderLayerParams {
  const shapes = decoderParamShapes(D, F, nH, nKv, hd);
  const p: Partial<Record<DecoderParamName, Float32Array>> = {};
  DECODER_PARAM_NAMES.forEach((name, k) => {
    if (qwen3 && (name === 'qB' || name === 'kB' || name === 'vB')) return;
    if (!qwen3 && (name === 'qNorm' || name === 'kNorm')) return;
    const n = shapes[name].reduce((a, b) => a * b, 1);
    const r = randomArray(n, seed * 100 + k);
    if (name.endsWith('Norm')) p[name] = r.map((v) => 1 + 0.2 * v);
    else if (name.endsWith('B')) p[name] = r.map((v) => 0.3 * v);
    else p[name] = r.map((v) => v * (1.5 / Math.sqrt(shapes[name][1])));
  });
  return p as DecoderLayerParams;
}

// ------------------------------------------------------------------------------ float64 reference

type P64 = Partial<Record<DecoderParamName, Float64Array>>;

function to64(p: DecoderLayerParams): P64 {
  const out: P64 = {};
  for (const n of DECODER_PARAM_NAMES) if (p[n]) out[n] = Float64Array.from(p[n]!);
  return out;
}

function rmsRows(v: Float64Array, rows: number, width: number, w: Float64Array, eps: number): Float64Array {
  const out = new Float64Array(rows * width);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let i = 0; i < width; i++) ss += v[r * width + i] ** 2;
    const inv = 1 / Math.sqrt(ss / width + eps);
    for (let i = 0; i < width; i++) out[r * width + i] = v[r * width + i] * inv * w[i];
  }
  return out;
}

function linear(
  a: Float64Array,
  rows: number,
  inDim: number,
  W: Float64Array,
  outDim: number,
  b?: Float64Array,
) {
  const y = new Float64Array(rows * outDim);
  for (let n = 0; n < rows; n++)
    for (let o = 0; o < outDim; o++) {
      let s = b ? b[o] : 0;
      for (let i = 0; i < inDim; i++) s += a[n * inDim + i] * W[o * inDim + i];
      y[n * outDim + o] = s;
    }
  return y;
}

/** In place: rotate each head of each token by its position (HF rotate_half). */
function ropeInPlace(v: Float64Array, heads: number, cfg: DecoderLayerConfig): void {
  const half = hd / 2;
  for (let n = 0; n < N; n++)
    for (let h = 0; h < heads; h++)
      for (let i = 0; i < half; i++) {
        const a = cfg.pos[n] / cfg.theta ** ((2 * i) / hd);
        const c = Math.cos(a);
        const s = Math.sin(a);
        const o = (n * heads + h) * hd;
        const x1 = v[o + i];
        const x2 = v[o + i + half];
        v[o + i] = x1 * c - x2 * s;
        v[o + i + half] = x2 * c + x1 * s;
      }
}

function layerRef(p: P64, x: Float64Array, cfg: DecoderLayerConfig): Float64Array {
  const h = rmsRows(x, N, D, p.inputNorm!, cfg.eps);
  let q: Float64Array = linear(h, N, D, p.qW!, nH * hd, p.qB);
  let k: Float64Array = linear(h, N, D, p.kW!, nKv * hd, p.kB);
  const v = linear(h, N, D, p.vW!, nKv * hd, p.vB);
  if (cfg.qkNorm) {
    q = rmsRows(q, N * nH, hd, p.qNorm!, cfg.eps);
    k = rmsRows(k, N * nKv, hd, p.kNorm!, cfg.eps);
  }
  ropeInPlace(q, nH, cfg);
  ropeInPlace(k, nKv, cfg);
  const attn = new Float64Array(N * nH * hd);
  const group = nH / nKv;
  for (let i = 0; i < N; i++) {
    if (cfg.seg[i] === 0) continue; // padding query: 0
    for (let hh = 0; hh < nH; hh++) {
      const kv = Math.floor(hh / group);
      const keys: number[] = [];
      const scores: number[] = [];
      for (let j = 0; j < N; j++) {
        // Written out here, not imported, so a wrong mask in the oracle cannot hide.
        const sameRow = Math.floor(i / T) === Math.floor(j / T);
        if (!(sameRow && j <= i && cfg.seg[j] === cfg.seg[i])) continue;
        let s = 0;
        for (let e = 0; e < hd; e++) s += q[(i * nH + hh) * hd + e] * k[(j * nKv + kv) * hd + e];
        keys.push(j);
        scores.push(s / Math.sqrt(hd));
      }
      const m = Math.max(...scores);
      const w = scores.map((s) => Math.exp(s - m));
      const z = w.reduce((a, b) => a + b, 0);
      keys.forEach((j, t) => {
        for (let e = 0; e < hd; e++) attn[(i * nH + hh) * hd + e] += (w[t] / z) * v[(j * nKv + kv) * hd + e];
      });
    }
  }
  const o = linear(attn, N, nH * hd, p.oW!, D);
  const x1 = x.map((xv, i) => xv + o[i]);
  const h2 = rmsRows(x1, N, D, p.postNorm!, cfg.eps);
  const gate = linear(h2, N, D, p.gateW!, F);
  const up = linear(h2, N, D, p.upW!, F);
  const act = gate.map((g, i) => (g / (1 + Math.exp(-g))) * up[i]);
  const down = linear(act, N, F, p.downW!, D);
  const out = x1.map((xv, i) => xv + down[i]);
  if (cfg.zeroPadRows) for (let n = 0; n < N; n++) if (cfg.seg[n] === 0) out.fill(0, n * D, (n + 1) * D);
  return out;
}

function lossRef(p: P64, x: Float64Array, cfg: DecoderLayerConfig, R: Float32Array): number {
  const out = layerRef(p, x, cfg);
  let s = 0;
  for (let i = 0; i < out.length; i++) s += out[i] * R[i];
  return s;
}

function maxRel(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < want.length; i++) {
    if (!Number.isFinite(got[i])) return Number.POSITIVE_INFINITY;
    worst = Math.max(worst, Math.abs(got[i] - want[i]) / Math.max(1, Math.abs(want[i])));
  }
  return worst;
}

/** Central difference of the float64 loss in one entry of one array (restored afterwards). */
function fd(arr: Float64Array, idx: number, f: () => number): number {
  const old = arr[idx];
  const step = 1e-5 * Math.max(1, Math.abs(old));
  arr[idx] = old + step;
  const up = f();
  arr[idx] = old - step;
  const down = f();
  arr[idx] = old;
  return (up - down) / (2 * step);
}

function checkGrad(got: Float32Array, idx: number[], fdOf: (i: number) => number, what: string): void {
  let scale = 0;
  for (const g of got) {
    expect(Number.isFinite(g), `${what}: non-finite gradient`).toBe(true);
    scale = Math.max(scale, Math.abs(g));
  }
  for (const i of idx) {
    const want = fdOf(i);
    const err = Math.abs(got[i] - want);
    expect(err, `${what}[${i}]: tfjs ${got[i]}, finite difference ${want}`).toBeLessThanOrEqual(
      1e-3 * scale + 1e-3 * Math.abs(want),
    );
  }
}

// ------------------------------------------------------------------------------------------ tests

afterAll(async () => {
  const { tf } = await initTf();
  tf.disposeVariables();
  tf.engine().reset(); // releases the tfjs backend (and its Dawn device)
});

describe('tfjs decoder layer oracle', () => {
  it('runs on the webgpu backend of our adapter (or cpu when asked)', async () => {
    const h = await initTf();
    console.log(`[tfjs] backend ${h.backend} on ${h.adapter}`);
    expect(h.backend).toBe(process.env.AGENT_R1_TFJS_BACKEND === 'cpu' ? 'cpu' : 'webgpu');
  });

  for (const qwen3 of [false, true]) {
    const name = qwen3 ? 'Qwen3 (q/k norm, no biases)' : 'Qwen2 (q/k/v biases)';
    it(`${name}: forward matches float64 (packed row + left-padded row)`, async () => {
      const params = makeParams(qwen3, qwen3 ? 2 : 1);
      const x = randomArray(N * D, 77);
      const cfg = cfgOf({ qkNorm: qwen3 });
      const got = await decoderLayerTf(params, x, cfg);
      const want = layerRef(to64(params), Float64Array.from(x), cfg);
      expect(maxRel(got, want)).toBeLessThanOrEqual(1e-4);
      // Attention is 0 at padding rows: their output is x + MLP(RMSNorm(x)), finite.
      const zeroed = await decoderLayerTf(params, x, { ...cfg, zeroPadRows: true });
      for (const r of PAD_ROWS) {
        expect(Array.from(zeroed.subarray(r * D, (r + 1) * D)).every((v) => v === 0)).toBe(true);
      }
      const want0 = layerRef(to64(params), Float64Array.from(x), { ...cfg, zeroPadRows: true });
      expect(maxRel(zeroed, want0)).toBeLessThanOrEqual(1e-4);
    });

    it(`${name}: gradients match finite differences of the float64 loss`, async () => {
      const params = makeParams(qwen3, qwen3 ? 4 : 3);
      const x = randomArray(N * D, 78);
      const R = randomArray(N * D, 79);
      const cfg = cfgOf({ qkNorm: qwen3 });
      const g = await decoderLayerGradsTf(params, x, cfg, R);
      const p64 = to64(params);
      const x64 = Float64Array.from(x);
      const f = () => lossRef(p64, x64, cfg, R);
      expect(Math.abs(g.loss - f()) / Math.max(1, Math.abs(f()))).toBeLessThan(1e-4);
      expect(maxRel(g.out, layerRef(p64, x64, cfg))).toBeLessThanOrEqual(1e-4);
      // Every entry of dx, padding rows included (they reach the loss through the residual + MLP).
      checkGrad(
        g.dx,
        Array.from({ length: N * D }, (_, i) => i),
        (i) => fd(x64, i, f),
        'dx',
      );
      const names = Object.keys(p64) as DecoderParamName[];
      expect(Object.keys(g.dParams).sort()).toEqual([...names].sort());
      for (const n of names) {
        const len = p64[n]!.length;
        const idx = [
          0,
          len - 1,
          ...Array.from({ length: 4 }, (_, t) => Math.floor(((t + 1) * len * 0.61) % len)),
        ];
        checkGrad(g.dParams[n]!, idx, (i) => fd(p64[n]!, i, f), `d${n}`);
      }
    });
  }

  // The plain-TS model reference (another implementation of the same layer, per sequence, attention
  // mask instead of segment ids): one layer, embeddings = our x rows, hidden[1] = the layer output.
  for (const qwen3 of [false, true]) {
    it(`agrees with qwen-ref.ts layer 0 (${qwen3 ? 'Qwen3' : 'Qwen2'}, left padding)`, async () => {
      const params = makeParams(qwen3, qwen3 ? 9 : 8);
      const x = randomArray(N * D, 90);
      const masks = [
        [1, 1, 1, 1, 1],
        [0, 0, 1, 1, 1],
      ];
      const pos = masks.flatMap((m) => positionsFromMask(m));
      const seg = masks.flat();
      const cfg = cfgOf({ seg, pos, qkNorm: qwen3, theta: 1e6 });
      const got = await decoderLayerTf(params, x, cfg);
      const config: ModelConfig = {
        architecture: qwen3 ? 'Qwen3ForCausalLM' : 'Qwen2ForCausalLM',
        modelType: qwen3 ? 'qwen3' : 'qwen2',
        vocabSize: N,
        hiddenSize: D,
        intermediateSize: F,
        numLayers: 1,
        numHeads: nH,
        numKvHeads: nKv,
        headDim: hd,
        rmsNormEps: 1e-6,
        ropeTheta: 1e6,
        maxPositionEmbeddings: 64,
        tieWordEmbeddings: true,
        qkvBias: !qwen3,
        oBias: false,
        qkNorm: qwen3,
        torchDtype: null,
        bosTokenId: null,
        eosTokenIds: [],
        raw: {},
      };
      const L = 'model.layers.0';
      const hf: Record<string, ArrayLike<number> | undefined> = {
        'model.embed_tokens.weight': x,
        'model.norm.weight': new Float32Array(D).fill(1),
        [`${L}.input_layernorm.weight`]: params.inputNorm,
        [`${L}.self_attn.q_proj.weight`]: params.qW,
        [`${L}.self_attn.q_proj.bias`]: params.qB,
        [`${L}.self_attn.k_proj.weight`]: params.kW,
        [`${L}.self_attn.k_proj.bias`]: params.kB,
        [`${L}.self_attn.v_proj.weight`]: params.vW,
        [`${L}.self_attn.v_proj.bias`]: params.vB,
        [`${L}.self_attn.o_proj.weight`]: params.oW,
        [`${L}.self_attn.q_norm.weight`]: params.qNorm,
        [`${L}.self_attn.k_norm.weight`]: params.kNorm,
        [`${L}.post_attention_layernorm.weight`]: params.postNorm,
        [`${L}.mlp.gate_proj.weight`]: params.gateW,
        [`${L}.mlp.up_proj.weight`]: params.upW,
        [`${L}.mlp.down_proj.weight`]: params.downW,
      };
      const weights = new Map(
        Object.entries(hf)
          .filter((e): e is [string, ArrayLike<number>] => e[1] !== undefined)
          .map(([k, v]) => [k, { data: v }]),
      );
      masks.forEach((mask, b) => {
        const tokens = Array.from({ length: T }, (_, t) => b * T + t); // embedding row = x row
        const ref = qwenForward(config, weights, tokens, {
          attentionMask: mask,
          positions: positionsFromMask(mask),
        }).hidden[1];
        expect(maxRel(got.subarray(b * T * D, (b + 1) * T * D), ref), `row ${b}`).toBeLessThanOrEqual(1e-4);
      });
    });
  }

  it('zeroPadRows: no gradient flows into padding rows', async () => {
    const params = makeParams(false, 5);
    const x = randomArray(N * D, 80);
    const R = randomArray(N * D, 81);
    const g = await decoderLayerGradsTf(params, x, cfgOf({ zeroPadRows: true }), R);
    for (const r of PAD_ROWS) {
      expect(Array.from(g.dx.subarray(r * D, (r + 1) * D)).every((v) => v === 0)).toBe(true);
    }
    expect(g.dx.some((v) => v !== 0)).toBe(true);
  });

  it('rejects inconsistent shapes and configs with clear errors', async () => {
    const params = makeParams(false, 6);
    const x = randomArray(N * D, 82);
    await expect(decoderLayerTf(params, x.subarray(1), cfgOf())).rejects.toThrow(/not \[N, 32\]/);
    await expect(decoderLayerTf(params, x, cfgOf({ nKv: 3 }))).rejects.toThrow(/multiple of nKv/);
    await expect(decoderLayerTf(params, x, cfgOf({ T: 3 }))).rejects.toThrow(/multiple of T/);
    await expect(decoderLayerTf({ ...params, kB: new Float32Array(3) }, x, cfgOf())).rejects.toThrow(
      /params.kB has 3 elements/,
    );
    await expect(decoderLayerTf(params, x, cfgOf({ qkNorm: true }))).rejects.toThrow(/qkNorm needs/);
    await expect(decoderLayerTf(params, x, cfgOf({ seg: SEG.subarray(1) }))).rejects.toThrow(/seg/);
  });

  it('timing helper reports a median over the runs', async () => {
    const params = makeParams(false, 7);
    const x = randomArray(N * D, 83);
    const t = await timeDecoderLayerTf(params, x, cfgOf(), { warmup: 1, runs: 3 });
    expect(t.runsMs).toHaveLength(3);
    expect(t.runsMs.every((ms) => Number.isFinite(ms) && ms > 0)).toBe(true);
    expect(t.medianMs).toBe([...t.runsMs].sort((a, b) => a - b)[1]);
    console.log(`[tfjs] fwd+bwd B=${B} T=${T} D=${D}: median ${t.medianMs.toFixed(1)} ms on ${t.backend}`);
  });
});
