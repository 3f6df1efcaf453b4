// Plain CPU reference for the linear layer (kernels/linear.ts), float64 throughout.
//   y[N, out] = x[N, in] · Wᵀ + b        W in HF layout [out, in]
//   dX = dY · W,   dW = dYᵀ · x,   db = Σ_rows dY

export interface LinearRefDims {
  N: number;
  inFeatures: number;
  outFeatures: number;
}

export function linearRef(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  b: ArrayLike<number> | null,
  dims: LinearRefDims,
): Float64Array {
  const { N, inFeatures: I, outFeatures: O } = dims;
  const y = new Float64Array(N * O);
  for (let n = 0; n < N; n++) {
    for (let o = 0; o < O; o++) {
      let acc = b ? b[o] : 0;
      for (let i = 0; i < I; i++) acc += x[n * I + i] * w[o * I + i];
      y[n * O + o] = acc;
    }
  }
  return y;
}

export interface LinearRefGrads {
  dx: Float64Array;
  dw: Float64Array;
  db: Float64Array;
}

/** Analytic gradients of y = x·Wᵀ + b for upstream dY. */
export function linearBackwardRef(
  dy: ArrayLike<number>,
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  dims: LinearRefDims,
): LinearRefGrads {
  const { N, inFeatures: I, outFeatures: O } = dims;
  const dx = new Float64Array(N * I);
  const dw = new Float64Array(O * I);
  const db = new Float64Array(O);
  for (let n = 0; n < N; n++) {
    for (let o = 0; o < O; o++) {
      const g = dy[n * O + o];
      db[o] += g;
      for (let i = 0; i < I; i++) {
        dx[n * I + i] += g * w[o * I + i];
        dw[o * I + i] += g * x[n * I + i];
      }
    }
  }
  return { dx, dw, db };
}
