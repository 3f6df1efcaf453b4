// Plain CPU reference for matmul.wgsl, in float64 accumulation. Used by the kernel tests and by
// the in-page self-check. C = alpha * op(A) · op(B) + beta * C, one batch.

export interface MatmulRefArgs {
  M: number;
  N: number;
  K: number;
  transA?: boolean;
  transB?: boolean;
  alpha?: number;
  beta?: number;
  c?: Float32Array;
}

export function matmulRef(a: ArrayLike<number>, b: ArrayLike<number>, args: MatmulRefArgs): Float32Array {
  const { M, N, K, transA = false, transB = false, alpha = 1, beta = 0 } = args;
  const out = new Float32Array(M * N);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let acc = 0;
      for (let k = 0; k < K; k++) {
        const av = transA ? a[k * M + m] : a[m * K + k];
        const bv = transB ? b[n * K + k] : b[k * N + n];
        acc += av * bv;
      }
      const prev = beta !== 0 && args.c ? beta * args.c[m * N + n] : 0;
      out[m * N + n] = alpha * acc + prev;
    }
  }
  return out;
}

/** Largest |x - y| / max(1, |y|) over all elements; NaN anywhere gives Infinity. */
export function maxRelativeError(x: ArrayLike<number>, y: ArrayLike<number>): number {
  if (x.length !== y.length) throw new Error(`length mismatch: ${x.length} vs ${y.length}`);
  let worst = 0;
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i]) || !Number.isFinite(y[i])) return Number.POSITIVE_INFINITY;
    const e = Math.abs(x[i] - y[i]) / Math.max(1, Math.abs(y[i]));
    if (e > worst) worst = e;
  }
  return worst;
}
