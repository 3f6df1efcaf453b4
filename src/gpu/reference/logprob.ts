// Plain CPU reference for the fused LM head (kernels/logprob.ts), float64 throughout.
// With scaled logits l = h·Wᵀ / T per token n:
//   lse = log Σ_v exp(l_v),  logprob = l_target - lse,  entropy = -Σ_v p_v log p_v,  p = softmax(l)
// Gradients of L = Σ_n gLp_n·logprob_n + gEnt_n·entropy_n:
//   dL/dl_v = gLp·(onehot_v - p_v) + gEnt·(-p_v·(log p_v + entropy)),   dL/dlogit = dL/dl / T
//   dh = dlogit · W,   dW = dlogitᵀ · h
// Inactive rows (mask 0) give 0 outputs and no gradient; an active row whose target is >= V gives
// logprob NaN, like the kernel.

export interface LogprobRefDims {
  N: number;
  H: number;
  V: number;
  temperature?: number;
  /** Per-row weights or mask; 0 = inactive. */
  mask?: ArrayLike<number> | null;
}

export interface LogprobRefResult {
  logprob: Float64Array;
  entropy: Float64Array;
  lse: Float64Array;
}

function active(mask: ArrayLike<number> | null | undefined, n: number): boolean {
  return mask?.[n] !== 0;
}

/** The scaled logits of row n, [V]. */
function rowLogits(
  h: ArrayLike<number>,
  w: ArrayLike<number>,
  n: number,
  H: number,
  V: number,
  invT: number,
) {
  const l = new Float64Array(V);
  for (let v = 0; v < V; v++) {
    let acc = 0;
    for (let k = 0; k < H; k++) acc += h[n * H + k] * w[v * H + k];
    l[v] = acc * invT;
  }
  return l;
}

function logSumExp(l: Float64Array): number {
  let m = Number.NEGATIVE_INFINITY;
  for (const x of l) m = Math.max(m, x);
  let s = 0;
  for (const x of l) s += Math.exp(x - m);
  return m + Math.log(s);
}

export function tokenLogprobRef(
  h: ArrayLike<number>,
  w: ArrayLike<number>,
  targets: ArrayLike<number>,
  dims: LogprobRefDims,
): LogprobRefResult {
  const { N, H, V, temperature = 1, mask } = dims;
  const invT = 1 / temperature;
  const logprob = new Float64Array(N);
  const entropy = new Float64Array(N);
  const lse = new Float64Array(N);
  for (let n = 0; n < N; n++) {
    if (!active(mask, n)) continue;
    const l = rowLogits(h, w, n, H, V, invT);
    const z = logSumExp(l);
    let ent = 0;
    for (let v = 0; v < V; v++) {
      const lp = l[v] - z;
      ent -= Math.exp(lp) * lp;
    }
    const t = targets[n];
    logprob[n] = t < V ? l[t] - z : Number.NaN;
    entropy[n] = ent;
    lse[n] = z;
  }
  return { logprob, entropy, lse };
}

export interface LogprobRefGrads {
  dh: Float64Array;
  dw: Float64Array;
}

/** Analytic dL/dh and dL/dW for L = Σ_n gLp_n·logprob_n + gEnt_n·entropy_n. */
export function tokenLogprobBackwardRef(
  h: ArrayLike<number>,
  w: ArrayLike<number>,
  targets: ArrayLike<number>,
  gLogprob: ArrayLike<number> | null,
  gEntropy: ArrayLike<number> | null,
  dims: LogprobRefDims,
): LogprobRefGrads {
  const { N, H, V, temperature = 1, mask } = dims;
  const invT = 1 / temperature;
  const dh = new Float64Array(N * H);
  const dw = new Float64Array(V * H);
  for (let n = 0; n < N; n++) {
    const gl = gLogprob ? gLogprob[n] : 0;
    const ge = gEntropy ? gEntropy[n] : 0;
    if (!active(mask, n) || (gl === 0 && ge === 0)) continue;
    const l = rowLogits(h, w, n, H, V, invT);
    const z = logSumExp(l);
    let ent = 0;
    for (let v = 0; v < V; v++) ent -= Math.exp(l[v] - z) * (l[v] - z);
    for (let v = 0; v < V; v++) {
      const lp = l[v] - z;
      const p = Math.exp(lp);
      const onehot = targets[n] === v ? 1 : 0;
      const g = (gl * (onehot - p) - ge * p * (lp + ent)) * invT;
      if (g === 0) continue;
      for (let k = 0; k < H; k++) {
        dh[n * H + k] += g * w[v * H + k];
        dw[v * H + k] += g * h[n * H + k];
      }
    }
  }
  return { dh, dw };
}

/** loss = -Σ_n w_n·logprob_n / Σ_n w_n (0 when Σ w = 0). */
export function crossEntropyRef(
  h: ArrayLike<number>,
  w: ArrayLike<number>,
  targets: ArrayLike<number>,
  weights: ArrayLike<number>,
  dims: Omit<LogprobRefDims, 'mask'>,
): number {
  const { logprob } = tokenLogprobRef(h, w, targets, { ...dims, mask: weights });
  let sl = 0;
  let sw = 0;
  for (let n = 0; n < dims.N; n++) {
    if (weights[n] === 0) continue;
    sl += weights[n] * logprob[n];
    sw += weights[n];
  }
  return sw === 0 ? 0 : -sl / sw;
}

/** dh, dW of scale · crossEntropyRef. */
export function crossEntropyBackwardRef(
  h: ArrayLike<number>,
  w: ArrayLike<number>,
  targets: ArrayLike<number>,
  weights: ArrayLike<number>,
  dims: Omit<LogprobRefDims, 'mask'>,
  scale = 1,
): LogprobRefGrads {
  let sw = 0;
  for (let n = 0; n < dims.N; n++) sw += weights[n];
  const gLp = new Float64Array(dims.N);
  if (sw !== 0) for (let n = 0; n < dims.N; n++) gLp[n] = (-scale * weights[n]) / sw;
  return tokenLogprobBackwardRef(h, w, targets, gLp, null, { ...dims, mask: weights });
}
