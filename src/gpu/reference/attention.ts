// Plain CPU reference for attention.wgsl in float64: masked causal grouped-query softmax attention,
// forward and analytic backward. Used by the kernel tests (and a finite-difference check of its own
// backward). Materialises each row of probabilities, which a reference may do.
//
// Shapes (N = batch * T tokens, row-major): q [N, nH*hd], k/v [N, nKv*hd], seg [N] u32,
// o [N, nH*hd], lse [N, nH]. Query i attends key j iff both are in the same batch row, j <= i and
// seg[j] == seg[i] != 0. Padding queries (seg 0) have o = 0, lse = 0 and pass no gradient.

export interface AttentionRefDims {
  batch: number;
  nHeads: number;
  nKvHeads: number;
  headDim: number;
  /** Softmax scale; default 1/sqrt(headDim). */
  scale?: number;
}

export interface AttentionRefForward {
  o: Float64Array;
  lse: Float64Array;
}

export interface AttentionRefGrads {
  dq: Float64Array;
  dk: Float64Array;
  dv: Float64Array;
}

interface Resolved {
  N: number;
  T: number;
  nH: number;
  nKv: number;
  hd: number;
  group: number;
  scale: number;
}

function resolve(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  seg: ArrayLike<number>,
  d: AttentionRefDims,
): Resolved {
  const N = seg.length;
  const { batch, nHeads: nH, nKvHeads: nKv, headDim: hd } = d;
  if (N % batch !== 0) throw new Error(`attentionRef: ${N} tokens do not split into ${batch} rows`);
  if (nH % nKv !== 0) throw new Error(`attentionRef: nHeads ${nH} is not a multiple of nKvHeads ${nKv}`);
  if (q.length !== N * nH * hd)
    throw new Error(`attentionRef: q has ${q.length} values, want ${N * nH * hd}`);
  if (k.length !== N * nKv * hd)
    throw new Error(`attentionRef: k has ${k.length} values, want ${N * nKv * hd}`);
  if (v.length !== k.length) throw new Error(`attentionRef: v has ${v.length} values, want ${k.length}`);
  const r: Resolved = { N, T: N / batch, nH, nKv, hd, group: nH / nKv, scale: d.scale ?? 1 / Math.sqrt(hd) };
  return r;
}

/** The keys query i may attend (ascending), per the segment rule; empty for a padding query. */
export function allowedKeys(seg: ArrayLike<number>, T: number, i: number): number[] {
  const keys: number[] = [];
  if (seg[i] === 0) return keys;
  const rowStart = Math.floor(i / T) * T;
  for (let j = rowStart; j <= i; j++) if (seg[j] === seg[i]) keys.push(j);
  return keys;
}

/** Softmax probabilities of query i, head h over `keys`, and their logsumexp. */
function probabilities(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  r: Resolved,
  i: number,
  h: number,
  keys: number[],
): { p: Float64Array; lse: number } {
  const { nH, nKv, hd, group, scale } = r;
  const kvh = Math.floor(h / group);
  const s = new Float64Array(keys.length);
  let max = Number.NEGATIVE_INFINITY;
  keys.forEach((j, n) => {
    let dot = 0;
    for (let d = 0; d < hd; d++) dot += q[(i * nH + h) * hd + d] * k[(j * nKv + kvh) * hd + d];
    s[n] = scale * dot;
    max = Math.max(max, s[n]);
  });
  let sum = 0;
  for (let n = 0; n < s.length; n++) sum += Math.exp(s[n] - max);
  const p = s.map((x) => Math.exp(x - max) / sum);
  return { p, lse: max + Math.log(sum) };
}

export function attentionForwardRef(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  seg: ArrayLike<number>,
  dims: AttentionRefDims,
): AttentionRefForward {
  const r = resolve(q, k, v, seg, dims);
  const { N, T, nH, nKv, hd, group } = r;
  const o = new Float64Array(N * nH * hd);
  const lse = new Float64Array(N * nH);
  for (let i = 0; i < N; i++) {
    const keys = allowedKeys(seg, T, i);
    if (keys.length === 0) continue;
    for (let h = 0; h < nH; h++) {
      const kvh = Math.floor(h / group);
      const { p, lse: l } = probabilities(q, k, r, i, h, keys);
      lse[i * nH + h] = l;
      keys.forEach((j, n) => {
        for (let d = 0; d < hd; d++) o[(i * nH + h) * hd + d] += p[n] * v[(j * nKv + kvh) * hd + d];
      });
    }
  }
  return { o, lse };
}

/**
 * Analytic gradients of sum(o * dO) with respect to q, k and v:
 *   dV[j] += P[i,j] dO[i];  dP[i,j] = dO[i]·V[j];  dS = P (dP - Σ_j P dP);
 *   dQ[i] += scale dS[i,j] K[j];  dK[j] += scale dS[i,j] Q[i]   (summed over the heads sharing a kv head)
 */
export function attentionBackwardRef(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  seg: ArrayLike<number>,
  dO: ArrayLike<number>,
  dims: AttentionRefDims,
): AttentionRefGrads {
  const r = resolve(q, k, v, seg, dims);
  const { N, T, nH, nKv, hd, group, scale } = r;
  if (dO.length !== q.length) throw new Error(`attentionRef: dO has ${dO.length} values, want ${q.length}`);
  const dq = new Float64Array(N * nH * hd);
  const dk = new Float64Array(N * nKv * hd);
  const dv = new Float64Array(N * nKv * hd);
  for (let i = 0; i < N; i++) {
    const keys = allowedKeys(seg, T, i);
    if (keys.length === 0) continue;
    for (let h = 0; h < nH; h++) {
      const kvh = Math.floor(h / group);
      const qb = (i * nH + h) * hd;
      const { p } = probabilities(q, k, r, i, h, keys);
      const dp = keys.map((j) => {
        let dot = 0;
        for (let d = 0; d < hd; d++) dot += dO[qb + d] * v[(j * nKv + kvh) * hd + d];
        return dot;
      });
      let D = 0;
      keys.forEach((_, n) => {
        D += p[n] * dp[n];
      });
      keys.forEach((j, n) => {
        const kb = (j * nKv + kvh) * hd;
        const ds = p[n] * (dp[n] - D);
        for (let d = 0; d < hd; d++) {
          dv[kb + d] += p[n] * dO[qb + d];
          dq[qb + d] += scale * ds * k[kb + d];
          dk[kb + d] += scale * ds * q[qb + d];
        }
      });
    }
  }
  return { dq, dk, dv };
}
