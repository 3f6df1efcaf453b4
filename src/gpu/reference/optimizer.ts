// Plain CPU reference for optimizer.wgsl, in float64: torch.nn.utils.clip_grad_norm_ and
// torch.optim.AdamW (single-tensor path, amsgrad = False, maximize = False). An optimizer has no
// backward pass; the reference is the update rule itself, written the way torch writes it.

/** Global L2 norm of a list of gradients and torch's clip coefficient. */
export interface GradNormRef {
  sumSq: number;
  norm: number;
  /** min(1, maxNorm / (norm + 1e-6)); 1 without maxNorm; 0 when not finite (the step is skipped). */
  clipScale: number;
  nonFinite: boolean;
  perTensorSumSq: number[];
}

export function gradNormRef(grads: ReadonlyArray<ArrayLike<number>>, maxNorm?: number): GradNormRef {
  const perTensorSumSq = grads.map((g) => {
    let s = 0;
    for (let i = 0; i < g.length; i++) s += g[i] * g[i];
    return s;
  });
  const sumSq = perTensorSumSq.reduce((a, b) => a + b, 0);
  const norm = Math.sqrt(sumSq);
  const nonFinite = !Number.isFinite(sumSq);
  let clipScale = 1;
  if (nonFinite) clipScale = 0;
  else if (maxNorm !== undefined && maxNorm !== Number.POSITIVE_INFINITY)
    clipScale = Math.min(1, maxNorm / (norm + 1e-6));
  return { sumSq, norm, clipScale, nonFinite, perTensorSumSq };
}

export interface AdamWRefHyper {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
}

/**
 * One AdamW step at step count t (1-based), in place on float64 state:
 *   g = grad * gradScale
 *   p ← p − lr·wd·p
 *   m ← β1 m + (1−β1) g,   v ← β2 v + (1−β2) g²
 *   p ← p − (lr / (1−β1^t)) · m / (sqrt(v) / sqrt(1−β2^t) + eps)
 * which is torch's  p − lr · m̂ / (sqrt(v̂) + eps)  with eps added after the bias correction.
 */
export function adamwStepRef(
  p: Float64Array,
  grad: ArrayLike<number>,
  m: Float64Array,
  v: Float64Array,
  h: AdamWRefHyper,
  t: number,
  gradScale = 1,
): void {
  if (grad.length !== p.length || m.length !== p.length || v.length !== p.length)
    throw new Error(
      `adamwStepRef: sizes differ (p ${p.length}, grad ${grad.length}, m ${m.length}, v ${v.length})`,
    );
  const bc1 = 1 - h.beta1 ** t;
  const bc2 = 1 - h.beta2 ** t;
  const stepSize = h.lr / bc1;
  const sqrtBc2 = Math.sqrt(bc2);
  for (let i = 0; i < p.length; i++) {
    const g = grad[i] * gradScale;
    p[i] *= 1 - h.lr * h.weightDecay;
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
    const denom = Math.sqrt(v[i]) / sqrtBc2 + h.eps;
    p[i] -= (stepSize * m[i]) / denom;
  }
}
