// Plain CPU reference for rmsnorm.wgsl, in float64: forward and analytic backward of
//   y[r, j] = x[r, j] / sqrt(mean_k x[r, k]² + eps) * w[j]
// over `rows` rows of length `dim` (for Qwen3's per-head q/k norm: rows = N * heads, dim = headDim).

export interface RmsnormRefArgs {
  rows: number;
  dim: number;
  eps: number;
}

export function rmsnormRef(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  { rows, dim, eps }: RmsnormRefArgs,
): { y: Float64Array; rstd: Float64Array } {
  const y = new Float64Array(rows * dim);
  const rstd = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let j = 0; j < dim; j++) ss += x[r * dim + j] * x[r * dim + j];
    const s = 1 / Math.sqrt(ss / dim + eps);
    rstd[r] = s;
    for (let j = 0; j < dim; j++) y[r * dim + j] = x[r * dim + j] * s * w[j];
  }
  return { y, rstd };
}

/**
 * With g = dy * w and xhat = x * rstd:
 *   dx[r, j] = rstd[r] * (g[r, j] - xhat[r, j] * mean_k(g[r, k] * xhat[r, k]))
 *   dw[j]    = Σ_r dy[r, j] * xhat[r, j]
 */
export function rmsnormBackwardRef(
  dy: ArrayLike<number>,
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  args: RmsnormRefArgs,
): { dx: Float64Array; dw: Float64Array } {
  const { rows, dim } = args;
  const { rstd } = rmsnormRef(x, w, args);
  const dx = new Float64Array(rows * dim);
  const dw = new Float64Array(dim);
  for (let r = 0; r < rows; r++) {
    const s = rstd[r];
    let mean = 0;
    for (let j = 0; j < dim; j++) mean += dy[r * dim + j] * w[j] * x[r * dim + j] * s;
    mean /= dim;
    for (let j = 0; j < dim; j++) {
      const i = r * dim + j;
      const xhat = x[i] * s;
      dx[i] = s * (dy[i] * w[j] - xhat * mean);
      dw[j] += dy[i] * xhat;
    }
  }
  return { dx, dw };
}
