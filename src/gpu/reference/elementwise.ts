// Plain CPU references for elementwise.wgsl, in float64: SwiGLU forward and analytic backward,
// add/axpy, bias forward and backward. Used by tests (GPU vs reference, and finite differences on
// the reference itself).

function sigmoid(x: number): number {
  return x >= 0 ? 1 / (1 + Math.exp(-x)) : Math.exp(x) / (1 + Math.exp(x));
}

/** h = silu(g) * u, elementwise. */
export function swigluRef(g: ArrayLike<number>, u: ArrayLike<number>): Float64Array {
  const h = new Float64Array(g.length);
  for (let i = 0; i < g.length; i++) h[i] = g[i] * sigmoid(g[i]) * u[i];
  return h;
}

/** dg = dh * u * (s + g s (1 - s)), du = dh * g s, with s = sigmoid(g). */
export function swigluBackwardRef(
  dh: ArrayLike<number>,
  g: ArrayLike<number>,
  u: ArrayLike<number>,
): { dg: Float64Array; du: Float64Array } {
  const dg = new Float64Array(g.length);
  const du = new Float64Array(g.length);
  for (let i = 0; i < g.length; i++) {
    const s = sigmoid(g[i]);
    dg[i] = dh[i] * u[i] * (s + g[i] * s * (1 - s));
    du[i] = dh[i] * g[i] * s;
  }
  return { dg, du };
}

/** Packs [N, F] g and u into [N, 2F] rows [g | u] (the layout of a fused gate_up projection). */
export function packRows(g: ArrayLike<number>, u: ArrayLike<number>, N: number, F: number): Float64Array {
  const out = new Float64Array(N * 2 * F);
  for (let r = 0; r < N; r++) {
    for (let c = 0; c < F; c++) {
      out[r * 2 * F + c] = g[r * F + c];
      out[r * 2 * F + F + c] = u[r * F + c];
    }
  }
  return out;
}

/** y = a + alpha * b. */
export function addRef(a: ArrayLike<number>, b: ArrayLike<number>, alpha = 1): Float64Array {
  const y = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) y[i] = a[i] + alpha * b[i];
  return y;
}

/** y[r, :] + b for rows with seg[r] != 0 (or all rows without seg); padding rows are 0. */
export function biasAddRef(
  y: ArrayLike<number>,
  b: ArrayLike<number>,
  rows: number,
  cols: number,
  seg?: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    const pad = seg !== undefined && seg[r] === 0;
    for (let c = 0; c < cols; c++) out[r * cols + c] = pad ? 0 : y[r * cols + c] + b[c];
  }
  return out;
}

/** db[c] = Σ_r dy[r, c] over rows with seg[r] != 0 (or all rows without seg). */
export function biasBackwardRef(
  dy: ArrayLike<number>,
  rows: number,
  cols: number,
  seg?: ArrayLike<number>,
): Float64Array {
  const db = new Float64Array(cols);
  for (let r = 0; r < rows; r++) {
    if (seg !== undefined && seg[r] === 0) continue;
    for (let c = 0; c < cols; c++) db[c] += dy[r * cols + c];
  }
  return db;
}
