// Plain CPU reference for rope.wgsl (HF Qwen2 rotate_half convention), in float64 arithmetic:
//   y[i]        = x[i] cos(a) - x[i + hd/2] sin(a)
//   y[i + hd/2] = x[i + hd/2] cos(a) + x[i] sin(a)          (i < hd/2, per head, per token)
// and its backward, the inverse rotation (sin -> -sin) of the gradient.
//
// The angle a is chosen by `angles`:
//   'f32'   (default) HF's angle: inv_freq computed in float32 step by step like torch, then
//           fl32(f32(pos) * inv_freq). cos/sin of that f32 value are evaluated in float64. This is
//           what the GPU kernel must match.
//   'exact' the real angle pos * theta^(-2i/hd) in float64, to measure how far HF's convention is
//           from exact (documentation only; not a tolerance for the kernel).

export interface RopeRefArgs {
  heads: number;
  headDim: number;
  theta: number;
  /** Apply the inverse rotation (the backward). */
  inverse?: boolean;
  angles?: 'f32' | 'exact';
}

/** inv_freq as torch computes it in float32 (also written independently in kernels/rope.ts). */
export function ropeInvFreqRef(headDim: number, theta: number): Float64Array {
  const out = new Float64Array(headDim / 2);
  for (let i = 0; i < headDim / 2; i++) {
    const e = Math.fround((2 * i) / headDim); // arange(0, hd, 2).float() / hd
    const p = Math.fround(Math.fround(theta) ** e); // base ** e in f32
    out[i] = Math.fround(1 / p); // 1.0 / (...) in f32
  }
  return out;
}

export function ropeAngleRef(pos: number, i: number, args: RopeRefArgs): number {
  const { headDim, theta } = args;
  if (args.angles === 'exact') return pos * theta ** (-(2 * i) / headDim);
  return Math.fround(Math.fround(pos) * ropeInvFreqRef(headDim, theta)[i]);
}

export function ropeRef(x: ArrayLike<number>, pos: ArrayLike<number>, args: RopeRefArgs): Float64Array {
  const { heads, headDim } = args;
  const half = headDim / 2;
  const width = heads * headDim;
  const N = x.length / width;
  const sign = args.inverse ? -1 : 1;
  const y = new Float64Array(x.length);
  const inv = ropeInvFreqRef(headDim, args.theta);
  for (let n = 0; n < N; n++) {
    for (let i = 0; i < half; i++) {
      const a =
        args.angles === 'exact'
          ? pos[n] * args.theta ** (-(2 * i) / headDim)
          : Math.fround(Math.fround(pos[n]) * inv[i]);
      const c = Math.cos(a);
      const s = sign * Math.sin(a);
      for (let h = 0; h < heads; h++) {
        const j = n * width + h * headDim + i;
        const x1 = x[j];
        const x2 = x[j + half];
        y[j] = x1 * c - x2 * s;
        y[j + half] = x2 * c + x1 * s;
      }
    }
  }
  return y;
}

/** Backward: dx = Rᵀ dy, the inverse rotation. */
export function ropeBackwardRef(
  dy: ArrayLike<number>,
  pos: ArrayLike<number>,
  args: RopeRefArgs,
): Float64Array {
  return ropeRef(dy, pos, { ...args, inverse: !args.inverse });
}
