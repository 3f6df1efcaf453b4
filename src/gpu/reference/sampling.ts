// Plain CPU reference for sampling.wgsl, in float64. Same RNG, same definitions:
//
//  - u = samplingUniform(seed, step, stream): a 24-bit uniform in [0, 1), bit-identical to the GPU's;
//  - greedy: argmax, ties → lowest id; logprob and entropy under T = 1;
//  - weights w_i = exp((x_i - max) / T) over finite logits (-inf masked out);
//  - top-k (0 < k < #finite): keep x_i >= the k-th largest value (ties at the threshold all kept);
//  - top-p (p < 1): among the top-k survivors sorted by value, descending, the first value v at which
//    the cumulative weight reaches p · (top-k weight); keep x_i >= v (ties all kept);
//  - draw: r = u · W (W = kept weight); the token is the smallest kept id j, scanning ids in
//    increasing order, whose cumulative kept weight exceeds r (if rounding leaves none, the last
//    kept id with nonzero weight);
//  - logprob = log softmax(x / T)[token] over the full distribution; entropy of softmax(x / T).
//
// GPU and CPU therefore pick the same token for the same u, except when r lies within float32
// rounding (~1e-6 relative) of a CDF boundary, or the top-p mass of a candidate threshold lies that
// close to its target: the GPU sums weights in float32 in a different order.

export const INVALID_TOKEN_REF = 0xffffffff;

/** PCG hash (Jarzynski & Olano 2020), a bijection on u32; identical to pcg() in sampling.wgsl. */
export function pcgHash(v: number): number {
  const s = (Math.imul(v >>> 0, 747796405) + 2891336453) >>> 0;
  const w = Math.imul(((s >>> ((s >>> 28) + 4)) ^ s) >>> 0, 277803737) >>> 0;
  return ((w >>> 22) ^ w) >>> 0;
}

/** The uniform in [0, 1) (24 bits) that row stream `stream` draws at (seed, step). */
export function samplingUniform(seed: number, step: number, stream: number): number {
  const h = pcgHash(pcgHash((pcgHash(pcgHash(seed) ^ step) ^ stream) >>> 0));
  return (h >>> 8) / 16777216;
}

/** The scalar options, shared with the GPU's SampleOptions. */
export interface SamplingParams {
  temperature: number;
  greedy?: boolean;
  topK?: number;
  topP?: number;
  seed: number;
  step: number;
  padId?: number;
  vocabSize?: number;
}

export interface SampleRefOptions extends SamplingParams {
  done?: ArrayLike<number>;
  streams?: ArrayLike<number>;
}

export interface SampleRowResult {
  token: number;
  logprob: number;
  entropy: number;
  /** The filtered, renormalised distribution the token was drawn from (ids ascending); empty for greedy. */
  keptIds: number[];
  keptProbs: number[];
}

export interface SampleRefResult {
  ids: Uint32Array;
  logprobs: Float64Array;
  entropy: Float64Array;
  /** The uniform each row drew (NaN for greedy and done rows). */
  u: Float64Array;
}

/**
 * Samples one row given its uniform `u`. Exposed so tests can ask what a nearby u (or topP) picks
 * when explaining a boundary disagreement.
 */
export function sampleRowRef(
  row: ArrayLike<number>,
  u: number,
  opts: { temperature: number; greedy?: boolean; topK?: number; topP?: number },
): SampleRowResult {
  const { topK = 0, topP = 1 } = opts;
  const greedy = opts.greedy === true || opts.temperature === 0;
  const T = greedy ? 1 : opts.temperature;
  const n = row.length;
  let nFinite = 0;
  let argmax = -1;
  for (let i = 0; i < n; i++) {
    const x = row[i];
    if (Number.isNaN(x) || x === Number.POSITIVE_INFINITY) {
      return {
        token: INVALID_TOKEN_REF,
        logprob: Number.NaN,
        entropy: Number.NaN,
        keptIds: [],
        keptProbs: [],
      };
    }
    if (x === Number.NEGATIVE_INFINITY) continue;
    nFinite++;
    if (argmax < 0 || x > row[argmax]) argmax = i;
  }
  if (nFinite === 0) {
    return { token: INVALID_TOKEN_REF, logprob: Number.NaN, entropy: Number.NaN, keptIds: [], keptProbs: [] };
  }
  const m = row[argmax];
  const w = new Float64Array(n);
  let Z = 0;
  let S = 0;
  for (let i = 0; i < n; i++) {
    if (!Number.isFinite(row[i])) continue;
    const s = (row[i] - m) / T;
    w[i] = Math.exp(s);
    Z += w[i];
    S += w[i] * s;
  }
  const logZ = Math.log(Z);
  const entropy = logZ - S / Z;
  const logprobOf = (i: number) => (row[i] - m) / T - logZ;
  if (greedy) return { token: argmax, logprob: logprobOf(argmax), entropy, keptIds: [], keptProbs: [] };

  // Finite ids by value, descending.
  const order: number[] = [];
  for (let i = 0; i < n; i++) if (Number.isFinite(row[i])) order.push(i);
  order.sort((a, b) => row[b] - row[a] || a - b);
  let threshold = Number.NEGATIVE_INFINITY; // keep every finite logit
  if (topK > 0 && topK < nFinite) threshold = row[order[topK - 1]];
  if (topP < 1) {
    let keptMass = 0;
    for (const i of order) if (row[i] >= threshold) keptMass += w[i];
    const target = topP * keptMass;
    let cum = 0;
    for (const i of order) {
      if (row[i] < threshold) break;
      cum += w[i];
      if (cum >= target) {
        threshold = row[i];
        break;
      }
    }
  }

  const keptIds: number[] = [];
  let W = 0;
  for (let i = 0; i < n; i++) {
    if (Number.isFinite(row[i]) && row[i] >= threshold) {
      keptIds.push(i);
      W += w[i];
    }
  }
  const r = u * W;
  let cum = 0;
  let token = -1;
  let lastPositive = -1;
  for (const i of keptIds) {
    cum += w[i];
    if (w[i] > 0) {
      lastPositive = i;
      if (cum > r) {
        token = i;
        break;
      }
    }
  }
  if (token < 0) token = lastPositive;
  return { token, logprob: logprobOf(token), entropy, keptIds, keptProbs: keptIds.map((i) => w[i] / W) };
}

/** Reference for sampleTokens on logits [B, V] (row-major). */
export function sampleRef(
  logits: ArrayLike<number>,
  B: number,
  V: number,
  opts: SampleRefOptions,
): SampleRefResult {
  if (logits.length !== B * V) throw new Error(`sampleRef: ${logits.length} logits for [${B}, ${V}]`);
  const vocab = opts.vocabSize ?? V;
  const greedy = opts.greedy === true || opts.temperature === 0;
  const ids = new Uint32Array(B);
  const logprobs = new Float64Array(B);
  const entropy = new Float64Array(B);
  const u = new Float64Array(B).fill(Number.NaN);
  const rowView = new Float64Array(vocab);
  for (let b = 0; b < B; b++) {
    if (opts.done && opts.done[b] !== 0) {
      ids[b] = opts.padId ?? 0;
      continue;
    }
    for (let i = 0; i < vocab; i++) rowView[i] = logits[b * V + i];
    if (!greedy) u[b] = samplingUniform(opts.seed, opts.step, opts.streams ? opts.streams[b] : b);
    const r = sampleRowRef(rowView, greedy ? 0 : u[b], opts);
    ids[b] = r.token;
    logprobs[b] = r.logprob;
    entropy[b] = r.entropy;
  }
  return { ids, logprobs, entropy, u };
}
