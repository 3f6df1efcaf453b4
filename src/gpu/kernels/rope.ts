// Thin wrapper over src/shaders/rope.wgsl: rotary position embedding, HF Qwen2 convention
// (rotate_half pairs (i, i + hd/2), inv_freq[i] = theta^(-2i/hd), angle = f32(pos) * inv_freq in f32).
//
// Shapes: x [.., heads * headDim] (N = x.size / (heads * headDim) token rows), pos [N] u32.
//   rope(x, pos, opts) -> rotated x (a new tensor, `out`, or x itself with inPlace)
//   ropeBackward(dy, pos, opts) -> dx: the inverse rotation (RoPE is orthogonal: its transpose)
//   ropeQK(q, k, pos, opts): both q [N, nH*hd] and k [N, nKv*hd] (two dispatches)
// Padding rows need no mask: a zero row rotates to exactly zero, whatever its position.
//
// Precision (see the shader): the angle is HF's f32 angle bit for bit (positions < 2^24); cos/sin
// of it are within ~2e-7 absolute of the float64 values for angles below ~2e5 rad (positions up to
// ~2e5 at inv_freq[0] = 1). Against a float64 evaluation of the same f32 angle, |y - ref| stays
// below 1.7e-7 for inputs in [-1, 1] (measured on lavapipe and SwiftShader up to position 2.1e5;
// the tests allow 5e-7). Against the *exact* real angle pos * theta^(-2i/hd), HF's f32 rounding
// itself moves the angle by up to ~|angle| * 2^-24 * (3 + ln theta) (a few 1e-3 rad at position 32k):
// that is the reference convention and is reproduced, not corrected.

import ropeWgsl from '../../shaders/rope.wgsl?raw';
import type { Gpu } from '../runtime.ts';
import type { Tensor } from '../tensor.ts';
import { assertDistinct, expectDType, gridFor, outputFor, shapeOf } from './launch.ts';

const NAME = 'rope.wgsl';

/**
 * pi/2 split for the shader's Cody-Waite reduction: c1..c4 are consecutive 7-bit windows of pi/2's
 * binary expansion (so k * c_i is exact in f32 for k < 2^17), c5 is the rest rounded to f32.
 * c1 + c2 + c3 + c4 + c5 = pi/2 to about 2^-58.
 */
export const PIO2_SPLIT = [
  1.5625, 0.0081787109375, 0.00011730194091796875, 3.129243850708008e-7, 9.920936294705029e-10,
];

/**
 * HF's inv_freq in float32: 1 / (theta ** (arange(0, hd, 2).float() / hd)) with every step rounded
 * to f32 as torch does (the exponent 2i/hd, the power, the reciprocal).
 */
export function ropeInvFreq(headDim: number, theta: number): Float32Array {
  const half = headDim / 2;
  const inv = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    const exponent = Math.fround((2 * i) / headDim);
    inv[i] = Math.fround(1 / Math.fround(Math.fround(theta) ** exponent));
  }
  return inv;
}

const invFreqCache = new WeakMap<Gpu, Map<string, Tensor>>();

/** The inv_freq table on the GPU, uploaded once per (headDim, theta) and kept for the Gpu's life. */
function invFreqTensor(gpu: Gpu, headDim: number, theta: number): Tensor {
  let cache = invFreqCache.get(gpu);
  if (!cache) {
    cache = new Map();
    invFreqCache.set(gpu, cache);
  }
  const key = `${headDim}:${theta}`;
  let t = cache.get(key);
  if (!t || t.released) {
    t = gpu.upload(ropeInvFreq(headDim, theta), [headDim / 2], 'f32', `rope.invFreq(${key})`);
    cache.set(key, t);
  }
  return t;
}

export interface RopeOptions {
  /** Head dimension (even). */
  headDim: number;
  /** rope_theta from the config (1e6 for Qwen2.5/Qwen3, 1e4 for older models). */
  theta: number;
  /** Rotate x in place (x is returned). */
  inPlace?: boolean;
  /** Write the result here (not with inPlace). */
  out?: Tensor;
  label?: string;
}

function check(op: string, x: Tensor, pos: Tensor, o: RopeOptions): { N: number; heads: number } {
  expectDType(op, 'x', x, 'f32');
  expectDType(op, 'pos', pos, 'u32');
  const { headDim, theta } = o;
  if (!Number.isInteger(headDim) || headDim < 2 || headDim % 2 !== 0) {
    throw new Error(`${op}: headDim must be a positive even integer, got ${headDim}`);
  }
  if (!(theta > 1) || !Number.isFinite(theta))
    throw new Error(`${op}: theta must be a finite number > 1, got ${theta}`);
  const last = x.shape.at(-1) ?? 0;
  if (x.shape.length < 2 || last % headDim !== 0 || last === 0) {
    throw new Error(`${op}: x ${shapeOf(x)} must be [N, heads * ${headDim}]`);
  }
  const N = x.size / last;
  if (pos.size !== N)
    throw new Error(`${op}: pos ${shapeOf(pos)} must hold one position per row of x ${shapeOf(x)} (${N})`);
  if (o.inPlace && o.out) throw new Error(`${op}: pass either inPlace or out, not both`);
  return { N, heads: last / headDim };
}

function apply(gpu: Gpu, op: string, x: Tensor, pos: Tensor, o: RopeOptions, sign: 1 | -1): Tensor {
  const { N, heads } = check(op, x, pos, o);
  const half = o.headDim / 2;
  const count = N * heads * half;
  const inv = invFreqTensor(gpu, o.headDim, o.theta);
  const params = gpu.uniform('uuufffffff', [count, heads, half, sign, ...PIO2_SPLIT, 2 / Math.PI]);
  const cost = 40 * count;
  if (o.inPlace) {
    if (count > 0) {
      const kernel = gpu.kernel({ name: NAME, code: ropeWgsl, entryPoint: 'rope_inplace' });
      gpu.dispatch(kernel, [x, pos, inv, params], gridFor(gpu, count), cost);
    }
    return x;
  }
  const y = outputFor(gpu, op, o.out, x.shape, o.label ?? `${op}.out`);
  assertDistinct(op, y, x, 'x (use inPlace)');
  assertDistinct(op, y, pos, 'pos');
  if (count > 0) {
    const kernel = gpu.kernel({ name: NAME, code: ropeWgsl, entryPoint: 'rope' });
    gpu.dispatch(kernel, [x, y, pos, inv, params], gridFor(gpu, count), cost);
  }
  return y;
}

/** Rotates every head of x [N, heads * headDim] by its token's position. */
export function rope(gpu: Gpu, x: Tensor, pos: Tensor, options: RopeOptions): Tensor {
  return apply(gpu, 'rope', x, pos, options, 1);
}

/** Backward of rope: the inverse rotation of the gradient dy [N, heads * headDim]. */
export function ropeBackward(gpu: Gpu, dy: Tensor, pos: Tensor, options: RopeOptions): Tensor {
  return apply(gpu, 'ropeBackward', dy, pos, options, -1);
}

export interface RopeQKOptions {
  headDim: number;
  theta: number;
  inPlace?: boolean;
  /** Apply the inverse rotation (backward of q and k). */
  inverse?: boolean;
}

/** rope (or its backward) on q [N, nH*hd] and k [N, nKv*hd] with shared positions. */
export function ropeQK(
  gpu: Gpu,
  q: Tensor,
  k: Tensor,
  pos: Tensor,
  options: RopeQKOptions,
): { q: Tensor; k: Tensor } {
  if (q.buffer === k.buffer) throw new Error('ropeQK: q and k must be different tensors');
  const f = options.inverse ? ropeBackward : rope;
  const o = { headDim: options.headDim, theta: options.theta, inPlace: options.inPlace };
  // Check both before touching either, so a bad k cannot leave q rotated in place.
  check('ropeQK', q, pos, o);
  check('ropeQK', k, pos, o);
  return { q: f(gpu, q, pos, { ...o, label: 'rope.q' }), k: f(gpu, k, pos, { ...o, label: 'rope.k' }) };
}
