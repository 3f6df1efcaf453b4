// The independent oracle: one Qwen2 (optionally Qwen3) decoder layer written with @tensorflow/tfjs,
// forward and (through tfjs autodiff) backward. It shares no code with our WGSL kernels, so it checks
// their composite, and it is the performance twin for the benchmark (tfjs on the same Dawn adapter).
//
//   h   = RMSNorm(x) · inputNorm
//   q,k,v = h·Wqᵀ + bq, h·Wkᵀ + bk, h·Wvᵀ + bv          (Qwen2 biases; optional: Qwen3 has none)
//   [Qwen3: q, k = per-head RMSNorm(q)·qNorm, RMSNorm(k)·kNorm, over hd, before RoPE]
//   q,k = RoPE (HF rotate_half: x·cos + [-x2, x1]·sin, inv_freq_i = θ^(-2i/hd), per-token positions)
//   a   = softmax(q·kᵀ/√hd + mask) · v, GQA (query head h uses kv head h / (nH/nKv)); query i sees key j
//         of the same batch row iff j <= i and seg[j] == seg[i] != 0; padding query rows give a = 0
//   x1  = x + a·Woᵀ                                      (o_proj has no bias)
//   out = x1 + down(silu(gate(h2)) * up(h2)),  h2 = RMSNorm(x1) · postNorm
// Activations are [N, D] row-major with N = B*T; weights are HF layout [out, in]. Every input and
// output is a plain Float32Array.
//
// Padding rows: attention outputs 0 there (the spec); the rest of the layer is row-wise, so a padding
// row's output is x + MLP(RMSNorm(x)) — what a composite of row-wise kernels computes. With
// `zeroPadRows: true` the layer output is multiplied by the row mask (0 at padding rows, and no
// gradient flows from them).
//
// Backend: tfjs-backend-webgpu reads navigator.gpu when it is imported, so in Node we first take the
// Dawn GPU object chosen by src/gpu/device.ts (same adapter as our runtime: real GPU, else lavapipe,
// else SwiftShader; AGENT_R1_ADAPTER overrides), expose it as navigator.gpu, then import tfjs. If the
// webgpu backend fails we fall back to tfjs's cpu backend and say so in the log.
// AGENT_R1_TFJS_BACKEND=cpu|webgpu|auto picks the backend (default auto).

import type * as TfTypes from '@tensorflow/tfjs';
import { type AdapterPreference, acquireDevice } from '../../src/gpu/device.ts';

export type Tf = typeof TfTypes;
type T = TfTypes.Tensor;

export type TfBackendChoice = 'auto' | 'webgpu' | 'cpu';

export interface TfHandle {
  tf: Tf;
  backend: 'webgpu' | 'cpu';
  /** Which adapter the webgpu backend runs on, or why it is not used. */
  adapter: string;
}

const isNode = typeof process !== 'undefined' && !!process.versions?.node && typeof window === 'undefined';

let handle: Promise<TfHandle> | null = null;

/**
 * Loads tfjs once and selects its backend. Later calls return the same handle (the options of the
 * first call win).
 */
export function initTf(
  options: { backend?: TfBackendChoice; adapter?: AdapterPreference } = {},
): Promise<TfHandle> {
  handle ??= loadTf(options);
  return handle;
}

async function loadTf(options: {
  backend?: TfBackendChoice;
  adapter?: AdapterPreference;
}): Promise<TfHandle> {
  const fromEnv = isNode ? (process.env.AGENT_R1_TFJS_BACKEND as TfBackendChoice | undefined) : undefined;
  const choice = options.backend ?? fromEnv ?? 'auto';
  if (!['auto', 'webgpu', 'cpu'].includes(choice))
    throw new Error(`tfjs backend "${choice}" is not one of auto, webgpu, cpu`);
  let adapter = 'none (cpu backend requested)';
  let webgpuError: unknown = null;
  if (choice !== 'cpu') {
    try {
      adapter = await exposeNavigatorGpu(options.adapter);
    } catch (e) {
      webgpuError = e;
    }
  }
  // The umbrella package registers the gradients and the cpu backend; the webgpu backend registers
  // itself on import when navigator.gpu exists.
  const tf = (await import('@tensorflow/tfjs')) as Tf;
  if (choice !== 'cpu' && !webgpuError) {
    try {
      await import('@tensorflow/tfjs-backend-webgpu');
      // Small ops would otherwise run on the CPU backend: keep everything on the GPU (performance twin).
      tf.env().set('WEBGPU_CPU_FORWARD', false);
      if (await tf.setBackend('webgpu')) {
        await tf.ready();
        watchDevice(tf);
        return { tf, backend: 'webgpu', adapter };
      }
      webgpuError = new Error('tf.setBackend("webgpu") returned false');
    } catch (e) {
      webgpuError = e;
    }
  }
  if (choice === 'webgpu')
    throw new Error(`tfjs webgpu backend unavailable: ${String(webgpuError)}`, { cause: webgpuError });
  if (webgpuError) {
    console.warn(
      `[tfjs] webgpu backend failed (${String(webgpuError)}); falling back to the tfjs cpu backend (slow, float32 on the CPU)`,
    );
    adapter = `none (webgpu failed: ${String(webgpuError)})`;
  }
  if (!(await tf.setBackend('cpu'))) throw new Error('tfjs: neither webgpu nor cpu backend could start');
  await tf.ready();
  return { tf, backend: 'cpu', adapter };
}

// tfjs does not surface WebGPU validation errors (a bad pipeline silently yields garbage), so the
// oracle listens on its device and every entry point below throws if anything was reported.
const gpuErrors: string[] = [];

function watchDevice(tf: Tf): void {
  const device = (tf.backend() as unknown as { device?: GPUDevice }).device;
  device?.addEventListener('uncapturederror', (event) => {
    gpuErrors.push((event as GPUUncapturedErrorEvent).error.message);
  });
}

async function assertNoGpuErrors(what: string): Promise<void> {
  await new Promise((r) => setTimeout(r, 0)); // let queued error events arrive
  if (gpuErrors.length > 0) {
    const messages = gpuErrors.splice(0);
    throw new Error(
      `tfjs webgpu reported ${messages.length} GPU error(s) during ${what}:\n${messages.join('\n')}`,
    );
  }
}

/** Node: the Dawn GPU object of the adapter our runtime would pick, as navigator.gpu. Browser: as is. */
async function exposeNavigatorGpu(preference?: AdapterPreference): Promise<string> {
  const g = globalThis as { navigator?: { gpu?: GPU } };
  if (!isNode) {
    if (!g.navigator?.gpu) throw new Error('navigator.gpu is missing');
    return 'navigator.gpu';
  }
  // acquireDevice creates the Dawn instance with the same ICD choice as Gpu.create(); tfjs asks that
  // instance for an adapter and makes its own device, so ours is not needed.
  const acquired = await acquireDevice({ adapter: preference });
  acquired.device.destroy();
  if (!g.navigator) {
    Object.defineProperty(globalThis, 'navigator', {
      value: { gpu: acquired.gpu },
      configurable: true,
      writable: true,
    });
  } else if (g.navigator.gpu !== acquired.gpu) {
    Object.defineProperty(g.navigator, 'gpu', { value: acquired.gpu, configurable: true, writable: true });
  }
  const r = acquired.report;
  return `${r.kind}: ${r.description || r.device} (${r.source})`;
}

// ------------------------------------------------------------------------------------------ layer

/** Parameter names, in a fixed order (gradients come back under the same names). */
export const DECODER_PARAM_NAMES = [
  'inputNorm',
  'qW',
  'qB',
  'kW',
  'kB',
  'vW',
  'vB',
  'oW',
  'postNorm',
  'gateW',
  'upW',
  'downW',
  'qNorm',
  'kNorm',
] as const;
export type DecoderParamName = (typeof DECODER_PARAM_NAMES)[number];

/** HF layout: linear weights [out, in]; norms [D] (qNorm/kNorm [hd]). Biases optional (Qwen3 has none). */
export interface DecoderLayerParams {
  inputNorm: Float32Array; // [D]
  qW: Float32Array; // [nH*hd, D]
  qB?: Float32Array; // [nH*hd]
  kW: Float32Array; // [nKv*hd, D]
  kB?: Float32Array; // [nKv*hd]
  vW: Float32Array; // [nKv*hd, D]
  vB?: Float32Array; // [nKv*hd]
  oW: Float32Array; // [D, nH*hd]
  postNorm: Float32Array; // [D]
  gateW: Float32Array; // [F, D]
  upW: Float32Array; // [F, D]
  downW: Float32Array; // [D, F]
  qNorm?: Float32Array; // [hd], Qwen3 only (qkNorm: true)
  kNorm?: Float32Array; // [hd], Qwen3 only (qkNorm: true)
}

export interface DecoderLayerConfig {
  /** Padded sequence length; x has N = B*T rows. */
  T: number;
  /** Segment id per token [N]: 0 = padding; attention stays within equal non-zero ids of a row. */
  seg: ArrayLike<number>;
  /** Position per token [N], for RoPE. */
  pos: ArrayLike<number>;
  nH: number;
  nKv: number;
  hd: number;
  /** RMSNorm epsilon (Qwen2: 1e-6). */
  eps: number;
  /** RoPE base (Qwen2: 1e6). */
  theta: number;
  /** Qwen3 per-head q/k RMSNorm (needs params.qNorm and params.kNorm). Default false. */
  qkNorm?: boolean;
  /** Multiply the layer output by the row mask (padding rows exactly 0). Default false. */
  zeroPadRows?: boolean;
}

export interface DecoderDims {
  N: number;
  B: number;
  T: number;
  D: number;
  F: number;
  nH: number;
  nKv: number;
  hd: number;
}

/** Expected element count of each parameter, for building random parameters. */
export function decoderParamShapes(
  D: number,
  F: number,
  nH: number,
  nKv: number,
  hd: number,
): Record<DecoderParamName, number[]> {
  return {
    inputNorm: [D],
    qW: [nH * hd, D],
    qB: [nH * hd],
    kW: [nKv * hd, D],
    kB: [nKv * hd],
    vW: [nKv * hd, D],
    vB: [nKv * hd],
    oW: [D, nH * hd],
    postNorm: [D],
    gateW: [F, D],
    upW: [F, D],
    downW: [D, F],
    qNorm: [hd],
    kNorm: [hd],
  };
}

/** Checks every size against the config; returns the dimensions. Throws naming the bad input. */
export function checkDecoderInputs(
  params: DecoderLayerParams,
  x: ArrayLike<number>,
  cfg: DecoderLayerConfig,
): DecoderDims {
  const { T, nH, nKv, hd } = cfg;
  for (const [k, v] of Object.entries({ T, nH, nKv, hd }))
    if (!(Number.isInteger(v) && v > 0))
      throw new Error(`decoderLayer: ${k} must be a positive integer, got ${v}`);
  if (nH % nKv !== 0) throw new Error(`decoderLayer: nH (${nH}) must be a multiple of nKv (${nKv})`);
  if (hd % 2 !== 0) throw new Error(`decoderLayer: hd (${hd}) must be even for RoPE`);
  if (!(cfg.eps > 0)) throw new Error(`decoderLayer: eps must be > 0, got ${cfg.eps}`);
  if (!(cfg.theta > 0)) throw new Error(`decoderLayer: theta must be > 0, got ${cfg.theta}`);
  if (!params.inputNorm) throw new Error('decoderLayer: params.inputNorm is missing');
  const D = params.inputNorm.length;
  if (!params.gateW) throw new Error('decoderLayer: params.gateW is missing');
  const F = params.gateW.length / D;
  if (!Number.isInteger(F) || F === 0)
    throw new Error(`decoderLayer: gateW has ${params.gateW.length} elements, not a multiple of D = ${D}`);
  if (x.length % D !== 0) throw new Error(`decoderLayer: x has ${x.length} elements, not [N, ${D}]`);
  const N = x.length / D;
  if (N % T !== 0) throw new Error(`decoderLayer: N = ${N} rows is not a multiple of T = ${T}`);
  if (cfg.seg.length !== N || cfg.pos.length !== N)
    throw new Error(
      `decoderLayer: seg (${cfg.seg.length}) and pos (${cfg.pos.length}) must have N = ${N} entries`,
    );
  const shapes = decoderParamShapes(D, F, nH, nKv, hd);
  const optional = new Set<DecoderParamName>(['qB', 'kB', 'vB', 'qNorm', 'kNorm']);
  for (const name of DECODER_PARAM_NAMES) {
    const p = params[name];
    const want = shapes[name].reduce((a, b) => a * b, 1);
    if (!p) {
      if (!optional.has(name)) throw new Error(`decoderLayer: params.${name} is missing`);
      continue;
    }
    if (p.length !== want)
      throw new Error(
        `decoderLayer: params.${name} has ${p.length} elements, expected [${shapes[name].join(', ')}] = ${want}`,
      );
  }
  const hasQk = !!params.qNorm || !!params.kNorm;
  if (cfg.qkNorm && !(params.qNorm && params.kNorm))
    throw new Error('decoderLayer: qkNorm needs params.qNorm and params.kNorm');
  if (!cfg.qkNorm && hasQk)
    throw new Error('decoderLayer: params.qNorm/kNorm given but qkNorm is off (set qkNorm: true for Qwen3)');
  return { N, B: N / T, T, D, F, nH, nKv, hd };
}

/** RoPE tables [N, hd] (HF: emb = cat(freqs, freqs)), in float64 then rounded. */
export function ropeTables(
  pos: ArrayLike<number>,
  hd: number,
  theta: number,
): { cos: Float32Array; sin: Float32Array } {
  const N = pos.length;
  const half = hd / 2;
  const cos = new Float32Array(N * hd);
  const sin = new Float32Array(N * hd);
  for (let n = 0; n < N; n++) {
    for (let i = 0; i < half; i++) {
      const a = pos[n] * theta ** ((-2 * i) / hd);
      cos[n * hd + i] = cos[n * hd + i + half] = Math.cos(a);
      sin[n * hd + i] = sin[n * hd + i + half] = Math.sin(a);
    }
  }
  return { cos, sin };
}

/** Whether query token i may attend to key token j (flattened indices, same rule as the kernels). */
export function attends(seg: ArrayLike<number>, T: number, i: number, j: number): boolean {
  return Math.floor(i / T) === Math.floor(j / T) && j <= i && seg[i] !== 0 && seg[j] === seg[i];
}

interface Consts {
  cos: T; // [N, 1, hd]
  sin: T; // [N, 1, hd]
  maskAdd: T; // [B, 1, T, T]: 0 or -1e9
  queryValid: T; // [B, 1, T, 1]: 1 or 0
  rowValid: T; // [N, 1]
}

function makeConsts(tf: Tf, d: DecoderDims, cfg: DecoderLayerConfig): Consts {
  const { N, B, T, hd } = d;
  const { cos, sin } = ropeTables(cfg.pos, hd, cfg.theta);
  const mask = new Float32Array(B * T * T);
  const qv = new Float32Array(N);
  for (let b = 0; b < B; b++)
    for (let i = 0; i < T; i++) {
      qv[b * T + i] = cfg.seg[b * T + i] !== 0 ? 1 : 0;
      for (let j = 0; j < T; j++)
        mask[(b * T + i) * T + j] = attends(cfg.seg, T, b * T + i, b * T + j) ? 0 : -1e9;
    }
  return {
    cos: tf.tensor3d(cos, [N, 1, hd]),
    sin: tf.tensor3d(sin, [N, 1, hd]),
    maskAdd: tf.tensor4d(mask, [B, 1, T, T]),
    queryValid: tf.tensor4d(qv, [B, 1, T, 1]),
    rowValid: tf.tensor2d(qv, [N, 1]),
  };
}

function disposeConsts(c: Consts): void {
  for (const t of Object.values(c)) t.dispose();
}

/** The layer as a tfjs graph. `p` holds tensors of the parameters present; x is [N, D]. */
function layerGraph(
  tf: Tf,
  p: Partial<Record<DecoderParamName, T>>,
  x: T,
  c: Consts,
  d: DecoderDims,
  cfg: DecoderLayerConfig,
): T {
  const { N, B, T: Tn, nH, nKv, hd } = d;
  const g = nH / nKv;
  const half = hd / 2;
  const rms = (v: T, w: T): T =>
    tf.mul(tf.mul(v, tf.rsqrt(tf.add(tf.mean(tf.square(v), -1, true), cfg.eps))), w);
  const linear = (v: T, w: T, b?: T): T => {
    const y = tf.matMul(v as TfTypes.Tensor2D, w as TfTypes.Tensor2D, false, true);
    return b ? tf.add(y, b) : y;
  };
  const rope = (v: T, heads: number): T => {
    // v: [N, heads*hd] -> [N, heads, hd]; rotate_half(v) = cat(-v2, v1)
    const v3 = tf.reshape(v, [N, heads, hd]);
    const v1 = tf.slice(v3, [0, 0, 0], [N, heads, half]);
    const v2 = tf.slice(v3, [0, 0, half], [N, heads, half]);
    const rot = tf.concat([tf.neg(v2), v1], 2);
    return tf.add(tf.mul(v3, c.cos), tf.mul(rot, c.sin));
  };

  const h = rms(x, p.inputNorm!);
  let q: T = linear(h, p.qW!, p.qB);
  let k: T = linear(h, p.kW!, p.kB);
  const v = linear(h, p.vW!, p.vB);
  if (cfg.qkNorm) {
    q = rms(tf.reshape(q, [N, nH, hd]), p.qNorm!);
    k = rms(tf.reshape(k, [N, nKv, hd]), p.kNorm!);
  }
  const q3 = rope(q, nH); // [N, nH, hd]
  const k3 = rope(k, nKv); // [N, nKv, hd]
  // [B, heads, T, hd]. GQA without copying k/v: query heads kv*g .. kv*g+g-1 are adjacent, so
  // [B, nH, T, hd] reshapes to [B, nKv, g*T, hd] and batched matmuls pair them with kv head kv.
  const qh = tf.reshape(tf.transpose(tf.reshape(q3, [B, Tn, nH, hd]), [0, 2, 1, 3]), [B, nKv, g * Tn, hd]);
  const kh = tf.transpose(tf.reshape(k3, [B, Tn, nKv, hd]), [0, 2, 1, 3]);
  const vh = tf.transpose(tf.reshape(v, [B, Tn, nKv, hd]), [0, 2, 1, 3]);
  const scores = tf.reshape(
    tf.mul(tf.matMul(qh as TfTypes.Tensor4D, kh as TfTypes.Tensor4D, false, true), 1 / Math.sqrt(hd)),
    [B, nH, Tn, Tn],
  );
  // Fully masked (padding) query rows softmax to a harmless uniform row, then are zeroed.
  const probs = tf.mul(tf.softmax(tf.add(scores, c.maskAdd)), c.queryValid);
  const ctx = tf.matMul(tf.reshape(probs, [B, nKv, g * Tn, Tn]) as TfTypes.Tensor4D, vh as TfTypes.Tensor4D);
  const attn = tf.reshape(tf.transpose(tf.reshape(ctx, [B, nH, Tn, hd]), [0, 2, 1, 3]), [N, nH * hd]);
  const x1 = tf.add(x, linear(attn, p.oW!));
  const h2 = rms(x1, p.postNorm!);
  const gate = linear(h2, p.gateW!);
  const up = linear(h2, p.upW!);
  const act = tf.mul(tf.mul(gate, tf.sigmoid(gate)), up);
  let out = tf.add(x1, linear(act, p.downW!));
  if (cfg.zeroPadRows) out = tf.mul(out, c.rowValid);
  return out;
}

interface Prepared {
  tf: Tf;
  d: DecoderDims;
  names: DecoderParamName[];
  paramTensors: T[];
  x: T;
  consts: Consts;
  graph: (xT: T, ps: T[]) => T;
  dispose: () => void;
}

async function prepare(
  params: DecoderLayerParams,
  x: Float32Array,
  cfg: DecoderLayerConfig,
): Promise<Prepared> {
  const d = checkDecoderInputs(params, x, cfg);
  const { tf } = await initTf();
  const shapes = decoderParamShapes(d.D, d.F, d.nH, d.nKv, d.hd);
  const names = DECODER_PARAM_NAMES.filter((n) => params[n] !== undefined);
  const paramTensors = names.map((n) => tf.tensor(params[n]!, shapes[n]));
  const xT = tf.tensor2d(x, [d.N, d.D]);
  const consts = makeConsts(tf, d, cfg);
  const graph = (xIn: T, ps: T[]): T => {
    const p: Partial<Record<DecoderParamName, T>> = {};
    names.forEach((n, i) => {
      p[n] = ps[i];
    });
    return layerGraph(tf, p, xIn, consts, d, cfg);
  };
  return {
    tf,
    d,
    names,
    paramTensors,
    x: xT,
    consts,
    graph,
    dispose: () => {
      for (const t of paramTensors) t.dispose();
      xT.dispose();
      disposeConsts(consts);
    },
  };
}

/** Forward pass of one decoder layer: x [N, D] -> out [N, D]. */
export async function decoderLayerTf(
  params: DecoderLayerParams,
  x: Float32Array,
  cfg: DecoderLayerConfig,
): Promise<Float32Array> {
  const pr = await prepare(params, x, cfg);
  try {
    const out = pr.tf.tidy(() => pr.graph(pr.x, pr.paramTensors));
    const data = (await out.data()) as Float32Array;
    out.dispose();
    await assertNoGpuErrors('decoderLayerTf');
    return data;
  } finally {
    pr.dispose();
  }
}

export interface DecoderLayerGrads {
  /** Layer output [N, D]. */
  out: Float32Array;
  /** loss = Σ out · R. */
  loss: number;
  /** ∂loss/∂x [N, D]. */
  dx: Float32Array;
  /** ∂loss/∂param for every parameter present, same names and layouts as the parameters. */
  dParams: Partial<Record<DecoderParamName, Float32Array>>;
}

/** Forward, and gradients of loss = Σ out · R (R [N, D] fixed) w.r.t. x and every parameter. */
export async function decoderLayerGradsTf(
  params: DecoderLayerParams,
  x: Float32Array,
  cfg: DecoderLayerConfig,
  R: Float32Array,
): Promise<DecoderLayerGrads> {
  if (R.length !== x.length)
    throw new Error(`decoderLayerGradsTf: R has ${R.length} elements, x has ${x.length}`);
  const pr = await prepare(params, x, cfg);
  const { tf } = pr;
  const rT = tf.tensor2d(R, [pr.d.N, pr.d.D]);
  try {
    const [out, loss, ...grads] = tf.tidy(() => {
      const outT = pr.graph(pr.x, pr.paramTensors);
      const lossOf = (...inputs: T[]): T => tf.sum(tf.mul(pr.graph(inputs[0], inputs.slice(1)), rT));
      const gs = tf.grads(lossOf)([pr.x, ...pr.paramTensors]);
      return [outT, tf.sum(tf.mul(outT, rT)), ...gs];
    });
    const data = (await Promise.all([out, loss, ...grads].map((t) => t.data()))) as Float32Array[];
    for (const t of [out, loss, ...grads]) t.dispose();
    await assertNoGpuErrors('decoderLayerGradsTf');
    const dParams: Partial<Record<DecoderParamName, Float32Array>> = {};
    pr.names.forEach((n, i) => {
      dParams[n] = data[3 + i];
    });
    return { out: data[0], loss: data[1][0], dx: data[2], dParams };
  } finally {
    rT.dispose();
    pr.dispose();
  }
}

export interface DecoderLayerTiming {
  backend: 'webgpu' | 'cpu';
  adapter: string;
  /** Median wall time of one forward (+ backward) pass, ms, including the final sync. */
  medianMs: number;
  runsMs: number[];
}

/**
 * Wall time of forward+backward (or forward only) on the current tfjs backend: median of `runs` after
 * `warmup` runs. Parameters and inputs are uploaded once; each run ends by reading back one scalar
 * that depends on every gradient, so the time covers all GPU work.
 */
export async function timeDecoderLayerTf(
  params: DecoderLayerParams,
  x: Float32Array,
  cfg: DecoderLayerConfig,
  options: { warmup?: number; runs?: number; backward?: boolean; R?: Float32Array } = {},
): Promise<DecoderLayerTiming> {
  const { warmup = 2, runs = 5, backward = true } = options;
  if (!(Number.isInteger(runs) && runs >= 1))
    throw new Error(`timeDecoderLayerTf: runs must be >= 1, got ${runs}`);
  const pr = await prepare(params, x, cfg);
  const h = await initTf();
  const { tf } = pr;
  const R = options.R ?? Float32Array.from({ length: x.length }, (_, i) => Math.sin(i * 12.9898) * 0.5);
  const rT = tf.tensor2d(R, [pr.d.N, pr.d.D]);
  const once = async (): Promise<number> => {
    const t0 = performance.now();
    const s = tf.tidy(() => {
      if (!backward) return tf.sum(pr.graph(pr.x, pr.paramTensors));
      const lossOf = (...inputs: T[]): T => tf.sum(tf.mul(pr.graph(inputs[0], inputs.slice(1)), rT));
      const gs = tf.grads(lossOf)([pr.x, ...pr.paramTensors]);
      // Pairwise adds: addN of 15 tensors exceeds the 8 storage buffers per stage tfjs asks for.
      return gs.map((g) => tf.sum(g)).reduce((a, b) => tf.add(a, b));
    });
    await s.data();
    const ms = performance.now() - t0;
    s.dispose();
    await assertNoGpuErrors('timeDecoderLayerTf');
    return ms;
  };
  try {
    for (let i = 0; i < warmup; i++) await once();
    const runsMs: number[] = [];
    for (let i = 0; i < runs; i++) runsMs.push(await once());
    const sorted = [...runsMs].sort((a, b) => a - b);
    const mid = sorted.length >> 1;
    const medianMs = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    return { backend: h.backend, adapter: h.adapter, medianMs, runsMs };
  } finally {
    rT.dispose();
    pr.dispose();
  }
}

/** The HF tensor name (after `model.layers.{i}.`) of each oracle parameter. */
export const HF_LAYER_NAMES: Record<DecoderParamName, string> = {
  inputNorm: 'input_layernorm.weight',
  qW: 'self_attn.q_proj.weight',
  qB: 'self_attn.q_proj.bias',
  kW: 'self_attn.k_proj.weight',
  kB: 'self_attn.k_proj.bias',
  vW: 'self_attn.v_proj.weight',
  vB: 'self_attn.v_proj.bias',
  oW: 'self_attn.o_proj.weight',
  postNorm: 'post_attention_layernorm.weight',
  gateW: 'mlp.gate_proj.weight',
  upW: 'mlp.up_proj.weight',
  downW: 'mlp.down_proj.weight',
  qNorm: 'self_attn.q_norm.weight',
  kNorm: 'self_attn.k_norm.weight',
};

/** Layer `layer`'s parameters from HF-named weights (absent optional tensors stay undefined). */
export function hfLayerParams(
  weights: ReadonlyMap<string, { data: Float32Array }>,
  layer: number,
): DecoderLayerParams {
  const get = (name: DecoderParamName) => weights.get(`model.layers.${layer}.${HF_LAYER_NAMES[name]}`)?.data;
  const required = (name: DecoderParamName) => {
    const t = get(name);
    if (!t) throw new Error(`hfLayerParams: model.layers.${layer}.${HF_LAYER_NAMES[name]} is missing`);
    return t;
  };
  return {
    inputNorm: required('inputNorm'),
    qW: required('qW'),
    qB: get('qB'),
    kW: required('kW'),
    kB: get('kB'),
    vW: required('vW'),
    vB: get('vB'),
    oW: required('oW'),
    postNorm: required('postNorm'),
    gateW: required('gateW'),
    upW: required('upW'),
    downW: required('downW'),
    qNorm: get('qNorm'),
    kNorm: get('kNorm'),
  };
}
