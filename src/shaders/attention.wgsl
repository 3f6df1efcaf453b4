// Causal self-attention with grouped-query attention (Qwen2/Qwen3), forward, backward and KV-cache
// decoding, flash-attention style: scores are never materialised.
//
// Layout (row-major, N = B*T tokens, RoPE already applied by the caller; hd = head dim):
//   q   [N, nH*hd]     head h at columns h*hd..
//   k,v [N, nKv*hd]    query head h reads kv head h / (nH/nKv)
//   seg [N] u32        segment id per token, 0 = padding
//   o   [N, nH*hd]     output; exactly 0 at padding queries
//   lse [N, nH]        logsumexp of the scaled scores per (query, head); 0 at padding queries
// Query i may attend key j iff both are in the same batch row, j <= i and seg[j] == seg[i] != 0.
// That one rule covers causal masking, left/right padding and packed sequences.
//
// Memory: O(N·nH·hd) for q, k, v, o, dO, dq, dk, dv plus O(N·nH) for lse and D. No T² buffer:
// the forward keeps a running max / sum per (query, head) (online softmax) and the backward
// recomputes the probabilities from q, k and lse.
//
// Design for CPU adapters (lavapipe, SwiftShader), which also runs correctly on real GPUs:
// every invocation owns one output row (a (query, head) pair, or a (key, kv head) pair in dK/dV)
// and loops over the other side with register accumulators of hd floats. No workgroup memory, no
// barriers, no atomics: every sum is computed by a single invocation in a fixed order, so results
// are deterministic. Adjacent invocations own adjacent tokens of the same head, so they read the
// same k/v (or q/dO) row at the same time, which is what a SIMD-over-invocations CPU backend likes.
//
// Rows are handled as vec4s (hd must be a multiple of 4, at most MAX_HD4*4 = 128) and hd4 = hd/4
// is a runtime loop bound, not a pipeline constant: measured on lavapipe, a constant trip count
// lets LLVM fully unroll the small head sizes (hd 24/32: several seconds of shader compile per
// entry point) while the runtime-bounded vec4 loops compile in well under a second, serve every
// head size with one pipeline, and run as fast or faster (4 independent partial sums per dot).
//
// Keys are addressed by "slot" inside a batch row of S key slots: row b's keys are rows
// b*S .. b*S+S-1 of k/v/seg. Training uses S = T and query t of row b sits at slot t. KV-cache
// decoding (attn_decode) uses a cache of S = maxT slots per row and is told the cache row of each
// new token (slots[i] = b*S + slot): a uniform block of Tq tokens per row, or a packed ragged one
// where each row adds its own count (none for a finished row), so the same rule (keys at slots <=
// the query's slot with the query's segment id) gives exactly what full attention over the cache
// contents gives.

const MAX_HD4 = 32u;
// A score no real score goes below; exp(NEG_BIG - s) underflows to exactly 0.
const NEG_BIG = -1.0e30;

struct Params {
  nQ: u32,    // query rows (B*T for training, the N new tokens for decoding)
  Tq: u32,    // query rows per batch row (training; 0 for attn_decode and kv_append, which use slots)
  S: u32,     // key slots per batch row
  nH: u32,    // query heads
  nKv: u32,   // kv heads
  scale: f32, // softmax scale, 1/sqrt(hd) by default
  hd4: u32,   // head dim / 4
  chunk: u32, // attn_bwd_dkv_part: queries per chunk (0 elsewhere)
}

// Every entry point reads the same uniform at binding 6.
@group(0) @binding(6) var<uniform> p: Params;

// The row an invocation owns. x may be split over z when there are more than 65535 workgroups
// (row = (z * groupsX + x) * 64 + local x); y is the head.
fn row_index(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return (wid.z * nwg.x + wid.x) * 64u + lid.x;
}

fn hsum(x: vec4<f32>) -> f32 {
  return (x.x + x.y) + (x.z + x.w);
}

// ------------------------------------------------------------------------------------- forward
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> seg: array<u32>;
@group(0) @binding(4) var<storage, read_write> o: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
// attn_decode only: the cache row (b*S + slot) of each new token.
@group(0) @binding(7) var<storage, read> slots: array<u32>;

fn zero_output(i: u32, h: u32) {
  let qBase = (i * p.nH + h) * p.hd4;
  for (var d = 0u; d < p.hd4; d++) { o[qBase + d] = vec4<f32>(0.0); }
  lse[i * p.nH + h] = 0.0;
}

// Online softmax over the keys of query row i, head h, whose slot in batch row b is `slot`.
fn forward_row(i: u32, h: u32, b: u32, slot: u32) {
  let hd4 = p.hd4;
  let qBase = (i * p.nH + h) * hd4;
  let rowBase = b * p.S;
  let mySeg = seg[rowBase + slot];
  if (mySeg == 0u) {
    // Padding query: defined zeros, never garbage from a pooled buffer.
    zero_output(i, h);
    return;
  }
  let kvStride = p.nKv * hd4;
  let kvOff = (h / (p.nH / p.nKv)) * hd4;
  // The scale is folded into q once instead of multiplying every score.
  var qr: array<vec4<f32>, MAX_HD4>;
  var acc: array<vec4<f32>, MAX_HD4>;
  for (var d = 0u; d < hd4; d++) {
    qr[d] = q[qBase + d] * p.scale;
    acc[d] = vec4<f32>(0.0);
  }
  var m = NEG_BIG; // running max
  var l = 0.0;     // running sum of exp(s - m)
  for (var j = 0u; j <= slot; j++) {
    if (seg[rowBase + j] != mySeg) { continue; }
    let kb = (rowBase + j) * kvStride + kvOff;
    var s4 = vec4<f32>(0.0);
    for (var d = 0u; d < hd4; d++) { s4 += qr[d] * k[kb + d]; }
    let s = hsum(s4);
    // Rescale lazily, only when the max grows (a few times per row), instead of every key.
    if (s > m) {
      let c = exp(m - s);
      l *= c;
      for (var d = 0u; d < hd4; d++) { acc[d] *= c; }
      m = s;
    }
    let e = exp(s - m);
    l += e;
    for (var d = 0u; d < hd4; d++) { acc[d] += e * v[kb + d]; }
  }
  // The query always sees itself, so l >= 1 here.
  let inv = 1.0 / l;
  for (var d = 0u; d < hd4; d++) { o[qBase + d] = acc[d] * inv; }
  lse[i * p.nH + h] = m + log(l);
}

// Training / prefill forward. q, o: [N, nH*hd]; k, v: [N, nKv*hd]; seg: [N]; lse: [N, nH].
// S = Tq = T. Dispatch: x covers N rows (64 per workgroup, split over z past 65535), y = nH.
@compute @workgroup_size(64, 1, 1)
fn attn_fwd(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let i = row_index(wid, lid, nwg);
  if (i >= p.nQ) { return; }
  let b = i / p.Tq;
  forward_row(i, wid.y, b, i - b * p.Tq);
}

// KV-cache decoding. q, o: [N, nH*hd] (the N new tokens, already written into the cache by
// kv_append); k, v: the cache [B, S, nKv*hd]; seg: cache segment ids [B, S]; slots: [N] cache row
// b*S + slot of each new token; lse: [N, nH]. Its segment id is the cache's at that slot.
// Dispatch as attn_fwd over N rows.
@compute @workgroup_size(64, 1, 1)
fn attn_decode(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let i = row_index(wid, lid, nwg);
  if (i >= p.nQ) { return; }
  let at = slots[i];
  if (at >= arrayLength(&seg)) {
    // Unreachable through the TS wrapper, which validates the slots; keep the output defined anyway.
    zero_output(i, wid.y);
    return;
  }
  let b = at / p.S;
  forward_row(i, wid.y, b, at - b * p.S);
}

// -------------------------------------------------------------------------------------- backward
// With P = softmax(s), s = scale·q·kᵀ, O = P·V and upstream dO:
//   dV[j] = Σ_i P[i,j] dO[i]
//   dP[i,j] = dO[i]·V[j],  dS[i,j] = P[i,j] (dP[i,j] - D[i]),  D[i] = Σ_j P[i,j] dP[i,j] = dO[i]·O[i]
//   dQ[i] = scale Σ_j dS[i,j] K[j],   dK[j] = scale Σ_i dS[i,j] Q[i]
// P is recomputed as exp(s - lse). The bindings below are a separate set for the two backward
// entry points (an entry point's layout only contains what it uses; both use 0..9).

@group(0) @binding(0) var<storage, read> bq: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> bk: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> bv: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bseg: array<u32>;
@group(0) @binding(4) var<storage, read> blse: array<f32>;
@group(0) @binding(5) var<storage, read> bdo: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> bD: array<f32>;
// attn_bwd_dq: reads o (8), writes dq (9) and D (7).  attn_bwd_dkv: reads D, writes dk (8), dv (9).
@group(0) @binding(8) var<storage, read> bo: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> bdq: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> bdk: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> bdvo: array<vec4<f32>>;

// dQ, and D as a by-product (dK/dV needs D of every query, so it runs after this pass).
// q, o, dO, dq: [N, nH*hd]; k, v: [N, nKv*hd]; seg: [N]; lse, D: [N, nH].
// One invocation per (query i, head h), looping over its keys. Dispatch as attn_fwd.
@compute @workgroup_size(64, 1, 1)
fn attn_bwd_dq(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let i = row_index(wid, lid, nwg);
  if (i >= p.nQ) { return; }
  let h = wid.y;
  let hd4 = p.hd4;
  let b = i / p.Tq;
  let slot = i - b * p.Tq;
  let rowBase = b * p.S;
  let qBase = (i * p.nH + h) * hd4;
  let mySeg = bseg[i];
  if (mySeg == 0u) {
    // No gradient flows from or into a padding query.
    for (var d = 0u; d < hd4; d++) { bdq[qBase + d] = vec4<f32>(0.0); }
    bD[i * p.nH + h] = 0.0;
    return;
  }
  let kvStride = p.nKv * hd4;
  let kvOff = (h / (p.nH / p.nKv)) * hd4;
  var qr: array<vec4<f32>, MAX_HD4>;
  var dor: array<vec4<f32>, MAX_HD4>;
  var acc: array<vec4<f32>, MAX_HD4>;
  var dsum4 = vec4<f32>(0.0);
  for (var d = 0u; d < hd4; d++) {
    qr[d] = bq[qBase + d] * p.scale;
    dor[d] = bdo[qBase + d];
    dsum4 += dor[d] * bo[qBase + d];
    acc[d] = vec4<f32>(0.0);
  }
  let dsum = hsum(dsum4);
  bD[i * p.nH + h] = dsum;
  let L = blse[i * p.nH + h];
  for (var j = 0u; j <= slot; j++) {
    if (bseg[rowBase + j] != mySeg) { continue; }
    let kb = (rowBase + j) * kvStride + kvOff;
    var s4 = vec4<f32>(0.0);
    var dp4 = vec4<f32>(0.0);
    for (var d = 0u; d < hd4; d++) {
      s4 += qr[d] * bk[kb + d];
      dp4 += dor[d] * bv[kb + d];
    }
    let ds = exp(hsum(s4) - L) * (hsum(dp4) - dsum);
    for (var d = 0u; d < hd4; d++) { acc[d] += ds * bk[kb + d]; }
  }
  for (var d = 0u; d < hd4; d++) { bdq[qBase + d] = acc[d] * p.scale; }
}

// dK and dV. One invocation per (key j, kv head g), looping over the queries i >= j of its row
// and, for each, over the nH/nKv query heads that share kv head g: the GQA sum happens here, in a
// fixed order, with no atomics. k, v, dk, dv: [N, nKv*hd]; q, dO: [N, nH*hd]; lse, D: [N, nH].
// Dispatch: x covers N rows as attn_fwd, y = nKv.
@compute @workgroup_size(64, 1, 1)
fn attn_bwd_dkv(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let j = row_index(wid, lid, nwg);
  if (j >= p.nQ) { return; }
  let g = wid.y;
  let hd4 = p.hd4;
  let b = j / p.Tq;
  let rowEnd = b * p.S + p.Tq;
  let kvBase = (j * p.nKv + g) * hd4;
  let mySeg = bseg[j];
  if (mySeg == 0u) {
    for (var d = 0u; d < hd4; d++) {
      bdk[kvBase + d] = vec4<f32>(0.0);
      bdvo[kvBase + d] = vec4<f32>(0.0);
    }
    return;
  }
  let group = p.nH / p.nKv;
  let qStride = p.nH * hd4;
  var kr: array<vec4<f32>, MAX_HD4>;
  var vr: array<vec4<f32>, MAX_HD4>;
  var dk: array<vec4<f32>, MAX_HD4>;
  var dv: array<vec4<f32>, MAX_HD4>;
  for (var d = 0u; d < hd4; d++) {
    kr[d] = bk[kvBase + d] * p.scale; // scale folded into k: s = q·(scale k)
    vr[d] = bv[kvBase + d];
    dk[d] = vec4<f32>(0.0);
    dv[d] = vec4<f32>(0.0);
  }
  for (var i = j; i < rowEnd; i++) {
    if (bseg[i] != mySeg) { continue; }
    for (var hh = 0u; hh < group; hh++) {
      let h = g * group + hh;
      let qb = i * qStride + h * hd4;
      var s4 = vec4<f32>(0.0);
      var dp4 = vec4<f32>(0.0);
      for (var d = 0u; d < hd4; d++) {
        s4 += bq[qb + d] * kr[d];
        dp4 += bdo[qb + d] * vr[d];
      }
      let pij = exp(hsum(s4) - blse[i * p.nH + h]);
      let ds = pij * (hsum(dp4) - bD[i * p.nH + h]);
      for (var d = 0u; d < hd4; d++) {
        dv[d] += pij * bdo[qb + d];
        dk[d] += ds * bq[qb + d];
      }
    }
  }
  for (var d = 0u; d < hd4; d++) {
    bdk[kvBase + d] = dk[d] * p.scale;
    bdvo[kvBase + d] = dv[d];
  }
}

// dK and dV for real GPUs, in two dispatches. attn_bwd_dkv has N·nKv invocations, each looping over
// up to T queries × nH/nKv heads: 1,024 invocations for one 512-token sequence of Qwen2.5-0.5B, a
// few per SM of an H100, which then waits on the longest loop (measured there: the backward took 10x
// the forward). attn_bwd_dkv_part gives each (key j, query head h, query chunk c) an invocation that
// sums over the queries of chunk c (slots c·chunk .. (c+1)·chunk − 1, those >= j) into partials
// part[c][j][h] of pdk / pdv [nC, N, nH*hd]; attn_bwd_dkv_sum then adds, per (key, kv head), the
// chunks and the group's heads in a fixed order (deterministic, no atomics). Same rule for which
// queries count as attn_bwd_dkv; keys of padding rows get exactly 0.
// Dispatch: part: x covers N rows, y = nH * nC (h = y % nH, c = y / nH); sum: x covers N * hd4
// (j = row / hd4, vec4 column d = row % hd4), y = nKv.
@group(0) @binding(8) var<storage, read_write> pdk: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> pdv: array<vec4<f32>>;

@compute @workgroup_size(64, 1, 1)
fn attn_bwd_dkv_part(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let j = row_index(wid, lid, nwg);
  if (j >= p.nQ) { return; }
  let h = wid.y % p.nH;
  let c = wid.y / p.nH;
  let hd4 = p.hd4;
  let b = j / p.Tq;
  let slotJ = j - b * p.Tq;
  let outBase = ((c * p.nQ + j) * p.nH + h) * hd4;
  let lo = max(c * p.chunk, slotJ);
  let hi = min((c + 1u) * p.chunk, p.Tq);
  let mySeg = bseg[j];
  if (mySeg == 0u || lo >= hi) {
    for (var d = 0u; d < hd4; d++) {
      pdk[outBase + d] = vec4<f32>(0.0);
      pdv[outBase + d] = vec4<f32>(0.0);
    }
    return;
  }
  let g = h / (p.nH / p.nKv);
  let kvBase = (j * p.nKv + g) * hd4;
  var kr: array<vec4<f32>, MAX_HD4>;
  var vr: array<vec4<f32>, MAX_HD4>;
  var dk: array<vec4<f32>, MAX_HD4>;
  var dv: array<vec4<f32>, MAX_HD4>;
  for (var d = 0u; d < hd4; d++) {
    kr[d] = bk[kvBase + d] * p.scale;
    vr[d] = bv[kvBase + d];
    dk[d] = vec4<f32>(0.0);
    dv[d] = vec4<f32>(0.0);
  }
  for (var t = lo; t < hi; t++) {
    let i = b * p.Tq + t;
    if (bseg[i] != mySeg) { continue; }
    let qb = (i * p.nH + h) * hd4;
    var s4 = vec4<f32>(0.0);
    var dp4 = vec4<f32>(0.0);
    for (var d = 0u; d < hd4; d++) {
      s4 += bq[qb + d] * kr[d];
      dp4 += bdo[qb + d] * vr[d];
    }
    let pij = exp(hsum(s4) - blse[i * p.nH + h]);
    let ds = pij * (hsum(dp4) - bD[i * p.nH + h]);
    for (var d = 0u; d < hd4; d++) {
      dv[d] += pij * bdo[qb + d];
      dk[d] += ds * bq[qb + d];
    }
  }
  for (var d = 0u; d < hd4; d++) {
    pdk[outBase + d] = dk[d] * p.scale;
    pdv[outBase + d] = dv[d];
  }
}

@group(0) @binding(10) var<storage, read> spdk: array<vec4<f32>>;
@group(0) @binding(11) var<storage, read> spdv: array<vec4<f32>>;

@compute @workgroup_size(64, 1, 1)
fn attn_bwd_dkv_sum(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let r = row_index(wid, lid, nwg);
  if (r >= p.nQ * p.hd4) { return; }
  let j = r / p.hd4;
  let d = r % p.hd4;
  let g = wid.y;
  let group = p.nH / p.nKv;
  let nC = (p.Tq + p.chunk - 1u) / p.chunk;
  var dk = vec4<f32>(0.0);
  var dv = vec4<f32>(0.0);
  for (var c = 0u; c < nC; c++) {
    for (var hh = 0u; hh < group; hh++) {
      let at = ((c * p.nQ + j) * p.nH + g * group + hh) * p.hd4 + d;
      dk += spdk[at];
      dv += spdv[at];
    }
  }
  let outAt = (j * p.nKv + g) * p.hd4 + d;
  bdk[outAt] = dk;
  bdvo[outAt] = dv;
}

// ------------------------------------------------------------------------------ KV-cache append
// Writes the N new tokens into the cache: row i of kNew/vNew [N, nKv*hd] (and segNew [N]) goes to
// row slots[i] = b*S + slot of kCache/vCache [B*S, nKv*hd] (and cacheSeg [B*S]). A prefill is the
// same call with every token of the prompts.
// Dispatch: x covers the nKv*hd/4 vec4 columns (64 per workgroup), y covers the N rows (split
// over z past 65535).

@group(0) @binding(0) var<storage, read> kNew: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> vNew: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> segNew: array<u32>;
@group(0) @binding(3) var<storage, read_write> kCache: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> vCache: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> cacheSeg: array<u32>;
@group(0) @binding(7) var<storage, read> aSlots: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn kv_append(
  @builtin(global_invocation_id) gid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let i = gid.z * nwg.y + gid.y;
  let c = gid.x;
  let width = p.nKv * p.hd4;
  if (i >= p.nQ || c >= width) { return; }
  let slot = aSlots[i]; // row index in the cache
  if (slot >= arrayLength(&cacheSeg)) { return; } // rejected by the TS wrapper
  kCache[slot * width + c] = kNew[i * width + c];
  vCache[slot * width + c] = vNew[i * width + c];
  if (c == 0u) { cacheSeg[slot] = segNew[i]; }
}
