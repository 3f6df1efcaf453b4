// Ragged RL batches for the GPU-vs-CPU-twin tests of the RL kernels (tests/gpu/advantage.test.ts,
// tests/gpu/policy-loss.test.ts). B rows padded to T positions, flattened row-major (N = B*T).
//
// The mask cycles through the shapes that break estimators: an all-zero row, a one-token response,
// a multi-turn row (policy turn, environment zeros, policy turn, ..., padding), a full row, and
// random turn layouts. Rows are assigned to groups of sizes 1..5 (ids shuffled and not contiguous);
// one group of several rows has identical scores (binary fractions, so its mean is exact).
// Rewards sit only on policy tokens: a random token-level part plus an outcome reward in
// {−1, 0, 0.5, 1} on the row's last policy token. Every array is float32, so the GPU and the float64
// twin read the same numbers.

/** mulberry32: deterministic uniform [0, 1). */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface RlBatch {
  B: number;
  T: number;
  mask: Float32Array;
  /** u32 group id per row. */
  index: Uint32Array;
  /** Token-level rewards (random part + outcome on the last policy token). */
  tokenRewards: Float32Array;
  /** Outcome-only rewards: just the reward on the last policy token. */
  outcomeRewards: Float32Array;
  /** Rows of the group whose scores are all equal. */
  equalGroupRows: number[];
}

function rowMask(kind: number, T: number, next: () => number): number[] {
  const m = new Array<number>(T).fill(0);
  if (T === 0) return m;
  if (kind === 0) return m; // all-zero row (e.g. an episode cut before the first policy token)
  if (kind === 1) {
    m[Math.floor(next() * T)] = 1; // one-token response
    return m;
  }
  if (kind === 3) return m.fill(1);
  // Multi-turn: alternating policy turns and environment (tool output) zeros, then padding.
  let t = kind === 2 ? 0 : Math.floor(next() * 3);
  while (t < T) {
    const turn = 1 + Math.floor(next() * Math.max(1, T / 4));
    for (let k = 0; k < turn && t < T; k++) m[t++] = 1;
    t += 1 + Math.floor(next() * Math.max(1, T / 6)); // environment tokens
    if (next() < 0.25) break; // padding to the end
  }
  return m;
}

export function makeRlBatch(B: number, T: number, seed: number): RlBatch {
  const next = rng(seed);
  const N = B * T;
  // Groups of sizes 1..5 in a shuffled row order, with non-contiguous ids.
  const index = new Uint32Array(B);
  const order = Array.from({ length: B }, (_, b) => b);
  for (let i = B - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const sizes = [1, 4, 3, 5, 2, 4, 1, 4];
  const groups: number[][] = [];
  for (let p = 0, g = 0; p < B; g++) {
    const rows = order.slice(p, p + sizes[g % sizes.length]);
    groups.push(rows);
    for (const b of rows) index[b] = 1000 + 37 * g;
    p += rows.length;
  }
  const equalGroupRows = groups.find((rows) => rows.length >= 3) ?? [];
  const mask = new Float32Array(N);
  for (let b = 0; b < B; b++) {
    const kind = equalGroupRows.includes(b) ? 3 : b % 7;
    mask.set(rowMask(kind, T, next), b * T);
  }
  const tokenRewards = new Float32Array(N);
  const outcomeRewards = new Float32Array(N);
  const outcomes = [-1, 0, 0.5, 1];
  for (let b = 0; b < B; b++) {
    let last = -1;
    for (let t = 0; t < T; t++) {
      const i = b * T + t;
      if (mask[i] !== 1) continue;
      last = i;
      tokenRewards[i] = next() < 0.3 ? next() * 0.2 - 0.1 : 0;
    }
    if (last < 0) continue;
    const outcome = equalGroupRows.includes(b) ? 0.5 : outcomes[Math.floor(next() * outcomes.length)];
    outcomeRewards[last] = outcome;
    tokenRewards[last] = equalGroupRows.includes(b) ? 0.5 : tokenRewards[last] + outcome;
  }
  // The equal group's token rewards are outcome-only, so their scores are exactly 0.5 everywhere.
  for (const b of equalGroupRows)
    for (let t = 0; t < T; t++) if (tokenRewards[b * T + t] !== 0.5) tokenRewards[b * T + t] = 0;
  return { B, T, mask, index, tokenRewards, outcomeRewards, equalGroupRows };
}

/** uniform(lo, hi) float32 values. */
export function uniformArray(n: number, seed: number, lo: number, hi: number): Float32Array {
  const next = rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + (hi - lo) * next();
  return out;
}

/** max_i |x − y| / max(1, |y|): for quantities of order one (advantages, losses, metrics). */
export function unitRelativeError(x: ArrayLike<number>, y: ArrayLike<number>): number {
  if (x.length !== y.length) throw new Error(`length mismatch: ${x.length} vs ${y.length}`);
  let worst = 0;
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i]) || !Number.isFinite(y[i])) return Number.POSITIVE_INFINITY;
    worst = Math.max(worst, Math.abs(x[i] - y[i]) / Math.max(1, Math.abs(y[i])));
  }
  return worst;
}

/**
 * max_i |x − y| / max(m_i, 1e-3·max_j m_j) with m = |y| unless given: relative error for small
 * quantities such as gradients (of order 1/tokens), where a unit floor would hide everything. Exact
 * zeros in y must be matched to within 1e-3 of the largest magnitude times the tolerance. Pass m
 * when y is a sum of terms that can cancel: f32 rounding scales with the terms, not with the sum.
 */
export function scaledRelativeError(
  x: ArrayLike<number>,
  y: ArrayLike<number>,
  magnitude?: ArrayLike<number>,
): number {
  if (x.length !== y.length) throw new Error(`length mismatch: ${x.length} vs ${y.length}`);
  const m = magnitude ?? Array.from(y, Math.abs);
  let scale = 0;
  for (let i = 0; i < m.length; i++) scale = Math.max(scale, m[i]);
  const floor = Math.max(1e-3 * scale, 1e-30);
  let worst = 0;
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i]) || !Number.isFinite(y[i])) return Number.POSITIVE_INFINITY;
    worst = Math.max(worst, Math.abs(x[i] - y[i]) / Math.max(m[i], floor));
  }
  return worst;
}

/**
 * An outMask as the loss-mask ablation makes one: per row, every position from its first policy token
 * to two past its last (environment tokens between turns and a cut turn's trailing glue), and the first
 * two positions of a row with no policy token (an episode cut before its first policy token).
 */
export function responseOutMask(batch: RlBatch): Float32Array {
  const { B, T, mask } = batch;
  const out = new Float32Array(B * T);
  for (let b = 0; b < B; b++) {
    let first = -1;
    let last = -1;
    for (let t = 0; t < T; t++)
      if (mask[b * T + t] === 1) {
        if (first < 0) first = t;
        last = t;
      }
    const [lo, hi] = first < 0 ? [0, Math.min(T, 2) - 1] : [first, Math.min(T - 1, last + 2)];
    for (let t = lo; t <= hi; t++) out[b * T + t] = 1;
  }
  return out;
}
