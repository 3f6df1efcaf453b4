// Central finite differences, the independent check of every analytic backward (in float64, on the
// CPU references): d loss / d x[i] ≈ (loss(x + eps·e_i) - loss(x - eps·e_i)) / 2eps.

/** The numerical gradient of `loss()` w.r.t. each entry of `x`, which is perturbed in place and restored. */
export function numericGradient(
  x: { length: number; [i: number]: number },
  loss: () => number,
  eps = 1e-6,
): Float64Array {
  const grad = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const keep = x[i];
    x[i] = keep + eps;
    const up = loss();
    x[i] = keep - eps;
    const down = loss();
    x[i] = keep;
    grad[i] = (up - down) / (2 * eps);
  }
  return grad;
}
