// Token sampling for generation (rollouts): greedy, temperature, top-k and top-p, on the GPU.
// One workgroup per row; the caller reads back only the few bytes of ids and logprobs.
//
//   logits:   [B, V] f32 (row stride V; only columns < vocab are considered), bound as raw u32 bits
//   done:     [B] u32, nonzero = row already finished            (used when FLAG_DONE)
//   streams:  [B] u32, RNG stream of each row (default: the row)  (used when FLAG_STREAMS)
//   ids:      [B] u32, the sampled token
//   logprobs: [B] f32, log softmax(logits / T)[token] over the full (unfiltered) distribution;
//             T = 1 for greedy
//   entropy:  [B] f32, entropy of softmax(logits / T), same T      (written when FLAG_ENTROPY)
//
// Done rows: ids = padId, logprob = 0, entropy = 0. Rows holding a NaN or +inf logit, or no finite
// logit at all: ids = 0xffffffff, logprob = entropy = NaN (the caller checks; a shader cannot throw).
// -inf logits are masked out: weight 0, never sampled, not counted by top-k.
//
// Algorithm per row (every "pass" is one strided sweep of the row plus one workgroup reduction):
//  1. max logit, its lowest index (greedy: ties go to the lowest id), count of finite logits, and
//     a NaN/+inf flag;
//  2. Z = Σ exp(s_i), S = Σ exp(s_i)·s_i with s_i = (x_i - max) / T: log Z gives the logprob,
//     log Z - S/Z the entropy;
//  3. top-k (0 < k < #finite): the k-th largest logit by a search over the logits' order-preserving
//     u32 keys. Each pass counts keys >= mid and also returns the smallest key >= mid and the
//     largest key < mid, so the interval [lo, hi] always snaps to keys that occur in the row: at
//     most 32 passes, usually far fewer. Keep every logit >= that value (ties at the threshold are
//     all kept, so more than k tokens can survive);
//  4. top-p (p < 1): the same search, now on probability mass: the largest threshold t >= the top-k
//     threshold with mass(x >= t) >= p · mass(x >= top-k threshold). Ties at t are all kept. This
//     is "the smallest set of most likely tokens whose mass reaches p" of the usual definition,
//     applied after top-k (top-k first, then top-p on the renormalised top-k set, as in HF);
//  5. inverse CDF in token-id order: u in [0, 1) from a counter-based hash of (seed, step, stream),
//     r = u · W with W the kept mass; the token is the smallest id j with Σ_{kept i <= j} w_i > r.
//     Each invocation sums its contiguous chunk of ids, invocation 0 scans the chunk sums and walks
//     the one chunk that contains r, repeating the chunk's own additions in the same order, so the
//     walk is guaranteed to end inside the chunk.
//
// Why a search and not a sort: 151,936 values per row would need a multi-pass GPU sort; ~20-40
// sweeps of the row with a reduction each are simpler and cheap next to the LM-head matmul.
// Why keys: comparing integer keys is exact and immune to fast-math NaN/inf assumptions, and makes
// the top-k set a pure function of the order of the logits, identical to the CPU reference.
// Barriers: a reduction costs log2(WG) + 2 barrier rounds; the wrapper picks WG = 16 on CPU
// adapters, 256 on GPUs, 4 for tiny vocabularies (any power of two <= 256 works). All stages go
// through a single reduce() call site (a small state machine in sample_main), which keeps
// lavapipe's compile time at ~2 s instead of over a minute.
//
// RNG: u = (h >> 8) / 2^24 with h = pcg(pcg(pcg(pcg(seed) ^ step) ^ stream)), identical in
// src/gpu/reference/sampling.ts (samplingUniform). The CPU reference applies the same definitions
// in float64, so GPU and CPU pick the same token for the same u except when r lies within float32
// rounding of a CDF step, or a top-p candidate's mass lies that close to its target.

struct Params {
  rows: u32,        // rows in this dispatch
  rowBase: u32,     // global index of this dispatch's first row (large inputs are chunked)
  gridX: u32,       // workgroups along x; rows are spread over x and y
  stride: u32,      // V, elements per row
  vocab: u32,       // columns considered, <= stride
  logitOffset: u32, // element offset of row `rowBase` inside the bound logits range
  topK: u32,        // 0 = off (also off when >= the number of finite logits)
  greedy: u32,      // 1 = argmax
  topP: f32,        // 1 = off
  temperature: f32, // > 0 when sampling
  seed: u32,
  step: u32,
  padId: u32,
  flags: u32,       // FLAG_DONE | FLAG_STREAMS | FLAG_ENTROPY
  halfWG: u32,      // WG / 2 as a runtime value: an unrolled tree costs a barrier site per level
}

@group(0) @binding(0) var<storage, read> logits: array<u32>;
@group(0) @binding(1) var<storage, read> done: array<u32>;
@group(0) @binding(2) var<storage, read> streams: array<u32>;
@group(0) @binding(3) var<storage, read_write> ids: array<u32>;
// f32 outputs are written as bits: a NaN constant cannot be spelled in WGSL.
@group(0) @binding(4) var<storage, read_write> logprobs: array<u32>;
@group(0) @binding(5) var<storage, read_write> entropy: array<u32>;
@group(0) @binding(6) var<uniform> p: Params;

override WG: u32 = 16u; // a power of two, <= MAX_WG
const MAX_WG = 256u;
const BLOCK = 32u; // f32 sums add blocks of 32 terms, so rounding error grows with V/32, not V

const FLAG_DONE = 1u;
const FLAG_STREAMS = 2u;
const FLAG_ENTROPY = 4u;
const INVALID_TOKEN = 0xffffffffu;
const EXP_MASK = 0x7f800000u;
const NEG_INF_BITS = 0xff800000u;
const KEY_MIN_FINITE = 0x00800000u; // key of -FLT_MAX; every finite logit has key >= this
const NAN_BITS = 0x7fc00000u;

// Everything a pass reduces, combined field by field (unused fields cost a few ALU ops per level).
struct Red {
  cnt: u32,    // sum
  minKey: u32, // min
  maxKey: u32, // max, with
  maxIdx: u32, //   the lowest index among ties
  bad: u32,    // or
  s0: f32,     // sum
  s1: f32,     // sum
}

var<workgroup> red: array<Red, MAX_WG>;
var<workgroup> bcast: Red;
var<workgroup> partials: array<f32, MAX_WG>;

fn red_identity() -> Red {
  return Red(0u, 0xffffffffu, 0u, 0xffffffffu, 0u, 0.0, 0.0);
}

fn red_combine(a: Red, b: Red) -> Red {
  var r = a;
  r.cnt = a.cnt + b.cnt;
  r.minKey = min(a.minKey, b.minKey);
  if (b.maxKey > a.maxKey || (b.maxKey == a.maxKey && b.maxIdx < a.maxIdx)) {
    r.maxKey = b.maxKey;
    r.maxIdx = b.maxIdx;
  }
  r.bad = a.bad | b.bad;
  r.s0 = a.s0 + b.s0;
  r.s1 = a.s1 + b.s1;
  return r;
}

// Tree reduction in a fixed order (deterministic, no float atomics). The result is returned to
// every invocation through workgroupUniformLoad, so loops may branch on it around barriers. Its
// trailing barrier also makes `red` free for the next pass. The loop bound comes from the uniform
// buffer so the compiler keeps one barrier site instead of unrolling log2(WG) of them (lavapipe
// turns every barrier site into a coroutine suspend point; compile time grows fast with them).
fn reduce(v: Red, lid: u32) -> Red {
  red[lid] = v;
  workgroupBarrier();
  for (var s = p.halfWG; s > 0u; s >>= 1u) {
    if (lid < s) {
      red[lid] = red_combine(red[lid], red[lid + s]);
    }
    if (s > 1u) {
      workgroupBarrier();
    }
  }
  if (lid == 0u) {
    bcast = red[0];
  }
  return workgroupUniformLoad(&bcast);
}

// Order-preserving map from f32 bits to u32: a < b as floats iff key(a) < key(b). -0 maps to +0 so
// that equal values are equal keys, as on the CPU.
fn key_of(bits: u32) -> u32 {
  if (bits == 0x80000000u) {
    return 0x80000000u;
  }
  if ((bits & 0x80000000u) != 0u) {
    return ~bits;
  }
  return bits | 0x80000000u;
}

fn is_finite_bits(bits: u32) -> bool {
  return (bits & EXP_MASK) != EXP_MASK;
}

// Unnormalised probability of a finite logit under temperature T.
fn weight(bits: u32, m: f32, t: f32) -> f32 {
  return exp((bitcast<f32>(bits) - m) / t);
}

// PCG hash (Jarzynski & Olano, "Hash Functions for GPU Rendering", 2020): a bijection on u32.
fn pcg(v: u32) -> u32 {
  let s = v * 747796405u + 2891336453u;
  let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
  return (w >> 22u) ^ w;
}

// Counter-based uniform in [0, 1) with 24 bits, exact in f32 and f64. Mirrored by the reference.
fn uniform01(seed: u32, step: u32, stream: u32) -> f32 {
  let h = pcg(pcg(pcg(pcg(seed) ^ step) ^ stream));
  return f32(h >> 8u) * (1.0 / 16777216.0);
}

// Sweep for the threshold searches: counts finite logits with key >= mid (and sums their weight
// when `mass`), and finds the smallest key >= mid and the largest key in [lo, mid) (0 if none).
fn sweep_search(base: u32, mid: u32, lo: u32, mass: bool, m: f32, t: f32, lid: u32) -> Red {
  var acc = red_identity();
  var bsum = 0.0;
  var inBlock = 0u;
  for (var i = lid; i < p.vocab; i += WG) {
    let bits = logits[base + i];
    if (is_finite_bits(bits)) {
      let k = key_of(bits);
      if (k >= mid) {
        acc.cnt += 1u;
        acc.minKey = min(acc.minKey, k);
        if (mass) {
          bsum += weight(bits, m, t);
          inBlock += 1u;
          if (inBlock == BLOCK) {
            acc.s0 += bsum;
            bsum = 0.0;
            inBlock = 0u;
          }
        }
      } else if (k >= lo) {
        acc.maxKey = max(acc.maxKey, k);
      }
    }
  }
  acc.s0 += bsum;
  return acc;
}

// Kept mass of one invocation's contiguous chunk [c0, c1), in blocks of BLOCK ids. The walk in
// walk_chunk repeats exactly these additions.
fn chunk_mass(base: u32, c0: u32, c1: u32, thr: u32, m: f32, t: f32) -> f32 {
  var total = 0.0;
  var bsum = 0.0;
  for (var i = c0; i < c1; i++) {
    let bits = logits[base + i];
    if (is_finite_bits(bits) && key_of(bits) >= thr) {
      bsum += weight(bits, m, t);
    }
    if ((i - c0) % BLOCK == BLOCK - 1u) {
      total += bsum;
      bsum = 0.0;
    }
  }
  return total + bsum;
}

// The first kept id of chunk [c0, c1) at which prefix + (running chunk mass) > goal. When `found`,
// the last such sum is bit-identical to prefix + chunk_mass(...) > goal, so the walk ends inside the
// chunk; otherwise (rounding put goal at the very end of the CDF) the last kept id with weight.
fn walk_chunk(base: u32, c0: u32, c1: u32, thr: u32, m: f32, t: f32, prefix: f32, goal: f32, found: bool) -> u32 {
  var total = 0.0;
  var bsum = 0.0;
  var lastPositive = INVALID_TOKEN;
  for (var i = c0; i < c1; i++) {
    let bits = logits[base + i];
    if (is_finite_bits(bits) && key_of(bits) >= thr) {
      let w = weight(bits, m, t);
      bsum += w;
      if (w > 0.0) {
        lastPositive = i;
        if (found && prefix + (total + bsum) > goal) {
          return i;
        }
      }
    }
    if ((i - c0) % BLOCK == BLOCK - 1u) {
      total += bsum;
      bsum = 0.0;
    }
  }
  return lastPositive;
}

fn write_row(row: u32, token: u32, lp: u32, ent: u32) {
  ids[row] = token;
  logprobs[row] = lp;
  if ((p.flags & FLAG_ENTROPY) != 0u) {
    entropy[row] = ent;
  }
}

// Stages of the per-row state machine. Every stage is one sweep and one reduction, through a single
// call site of reduce(): on lavapipe each barrier is a coroutine suspend point, and a shader with
// dozens of them (one reduction inlined per stage) took over a minute to compile.
const ST_MAX = 0u;    // max, argmax, finite count, NaN/+inf flag
const ST_SUM = 1u;    // Z and S
const ST_TOPK = 2u;   // one step of the top-k search
const ST_KEPT = 3u;   // mass of the top-k set
const ST_TOPP = 4u;   // one step of the top-p search
const ST_CHUNKS = 5u; // contiguous chunk masses, then the inverse-CDF walk

// One workgroup per row: rows = gridX * y + x.
@compute @workgroup_size(WG)
fn sample_main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let local = wid.y * p.gridX + wid.x;
  if (local >= p.rows) {
    return;
  }
  let row = p.rowBase + local;
  let base = p.logitOffset + local * p.stride;

  if ((p.flags & FLAG_DONE) != 0u && done[row] != 0u) {
    if (lid == 0u) {
      write_row(row, p.padId, 0u, 0u); // bits of +0.0
    }
    return;
  }

  let greedy = p.greedy != 0u;
  let t = select(p.temperature, 1.0, greedy);
  let chunk = (p.vocab + WG - 1u) / WG;
  var stage = ST_MAX;
  var nFinite = 0u;
  var maxKey = 0u;
  var argmax = 0u;
  var m = 0.0;
  var z = 0.0;
  var logZ = 0.0;
  var ent = 0.0;
  var lo = 0u;
  var hi = 0u;
  var thr = KEY_MIN_FINITE; // keep every finite logit
  var massTarget = 0.0;
  loop {
    // Searches end without a sweep once [lo, hi] has closed.
    if (stage == ST_TOPK && lo >= hi) {
      thr = lo;
      stage = select(ST_CHUNKS, ST_KEPT, p.topP < 1.0);
    }
    if (stage == ST_TOPP && lo >= hi) {
      thr = lo;
      stage = ST_CHUNKS;
    }

    var acc = red_identity();
    var mid = 0u;
    switch stage {
      case ST_MAX: {
        // The strided sweep visits ids in increasing order per invocation, so '>' keeps the lowest
        // id of a tie; red_combine keeps the lowest across invocations.
        for (var i = lid; i < p.vocab; i += WG) {
          let bits = logits[base + i];
          if (is_finite_bits(bits)) {
            let k = key_of(bits);
            acc.cnt += 1u;
            if (k > acc.maxKey) {
              acc.maxKey = k;
              acc.maxIdx = i;
            }
          } else if (bits != NEG_INF_BITS) {
            acc.bad = 1u;
          }
        }
      }
      case ST_SUM: {
        var bz = 0.0;
        var bs = 0.0;
        var inBlock = 0u;
        for (var i = lid; i < p.vocab; i += WG) {
          let bits = logits[base + i];
          if (is_finite_bits(bits)) {
            let s = (bitcast<f32>(bits) - m) / t;
            let w = exp(s);
            bz += w;
            bs += w * s;
            inBlock += 1u;
            if (inBlock == BLOCK) {
              acc.s0 += bz;
              acc.s1 += bs;
              bz = 0.0;
              bs = 0.0;
              inBlock = 0u;
            }
          }
        }
        acc.s0 += bz;
        acc.s1 += bs;
      }
      case ST_TOPK, ST_TOPP: {
        mid = lo + (hi - lo + 1u) / 2u; // in (lo, hi]
        acc = sweep_search(base, mid, lo, stage == ST_TOPP, m, t, lid);
      }
      case ST_KEPT: {
        acc = sweep_search(base, thr, thr, true, m, t, lid);
      }
      default: { // ST_CHUNKS
        let c0 = min(lid * chunk, p.vocab);
        let c1 = min(c0 + chunk, p.vocab);
        partials[lid] = chunk_mass(base, c0, c1, thr, m, t);
      }
    }

    let r = reduce(acc, lid); // the only barriers of the shader

    switch stage {
      case ST_MAX: {
        if (r.bad != 0u || r.cnt == 0u) {
          if (lid == 0u) {
            write_row(row, INVALID_TOKEN, NAN_BITS, NAN_BITS);
          }
          return;
        }
        nFinite = r.cnt;
        maxKey = r.maxKey;
        argmax = r.maxIdx;
        m = bitcast<f32>(logits[base + argmax]);
        stage = ST_SUM;
      }
      case ST_SUM: {
        z = r.s0;
        logZ = log(z);
        ent = logZ - r.s1 / z;
        if (greedy) {
          if (lid == 0u) {
            write_row(row, argmax, bitcast<u32>(-logZ), bitcast<u32>(ent)); // s(argmax) = 0
          }
          return;
        }
        hi = maxKey;
        if (p.topK > 0u && p.topK < nFinite) {
          stage = ST_TOPK; // the largest key K with count(key >= K) >= k
          lo = KEY_MIN_FINITE; // count(key >= lo) = nFinite >= k
        } else if (p.topP < 1.0) {
          stage = ST_TOPP; // the largest key K with mass(key >= K) >= topP * z
          lo = thr;
          massTarget = p.topP * z;
        } else {
          stage = ST_CHUNKS;
        }
      }
      case ST_TOPK: {
        if (r.cnt >= p.topK) {
          lo = r.minKey; // same set as mid: no key lies in [mid, minKey)
          if (r.cnt == p.topK) {
            hi = lo; // exactly k at or above lo: no larger key qualifies
          }
        } else {
          hi = r.maxKey; // < mid; below lo (0) when nothing lies in [lo, mid): then lo is the answer
        }
      }
      case ST_KEPT: {
        stage = ST_TOPP; // the largest key K >= thr with mass(key >= K) >= topP * mass(key >= thr)
        massTarget = p.topP * r.s0;
        lo = thr;
        hi = maxKey;
      }
      case ST_TOPP: {
        if (r.s0 >= massTarget) {
          lo = r.minKey;
        } else {
          hi = r.maxKey;
        }
      }
      default: { // ST_CHUNKS: invocation 0 scans the chunk masses and walks one chunk.
        if (lid == 0u) {
          var stream = row;
          if ((p.flags & FLAG_STREAMS) != 0u) {
            stream = streams[row];
          }
          let u = uniform01(p.seed, p.step, stream);
          var total = 0.0;
          for (var c = 0u; c < WG; c++) {
            total += partials[c];
          }
          let goal = u * total;
          var pick = argmax / chunk; // a chunk with mass (w(argmax) = 1); replaced below
          var found = false;
          var pickPrefix = 0.0;
          var prefix = 0.0;
          for (var c = 0u; c < WG; c++) {
            let pc = partials[c];
            let next = prefix + pc;
            if (pc > 0.0) {
              pick = c;
              pickPrefix = prefix;
              if (next > goal) {
                found = true;
                break;
              }
            }
            prefix = next;
          }
          let c0 = pick * chunk;
          var token = walk_chunk(base, c0, min(c0 + chunk, p.vocab), thr, m, t, pickPrefix, goal, found);
          if (token == INVALID_TOKEN) {
            token = argmax; // unreachable: the picked chunk has mass
          }
          let lp = (bitcast<f32>(logits[base + token]) - m) / t - logZ;
          write_row(row, token, bitcast<u32>(lp), bitcast<u32>(ent));
        }
        return;
      }
    }
  }
}
