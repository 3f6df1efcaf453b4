// LM head fused with the loss: per-token log-probabilities of given targets and the entropy of the
// next-token distribution, without ever holding [N, V] logits. The vocabulary is walked in chunks
// of C rows of W; matmul.wgsl computes each chunk's logits [N, C] = h · W_chunkᵀ and these kernels
// fold them into small running statistics, then turn the statistics into the outputs.
//
// Per token n, with scaled logits l_j = logit_j / T (T the temperature), running over chunks:
//   m  = max_j l_j                      (running max: exp never overflows, logits ~ ±80 are fine)
//   s  = Σ_j exp(l_j - m)
//   a  = Σ_j exp(l_j - m) · (l_j - m)   (Σ p·logit, kept relative to m so entropy does not cancel)
//   t  = l_target                       (picked up by the chunk that holds the target)
// When m grows to m', old sums rescale by r = exp(m - m'):  s' = s·r,  a' = (a + s·(m - m'))·r.
// Then  lse = m + log s,  logprob = t - lse,  entropy = -Σ p log p = log s - a / s.
//
// Backward, per chunk (logits recomputed by matmul), with p = exp(l - lse), H the entropy:
//   dl_j = gLp·(onehot_j - p_j) + gEnt·(-p_j·(log p_j + H)),  dlogit_j = dl_j / T
// then dh += dlogits · W_chunk and dW_chunk (+)= dlogitsᵀ · h (matmul NN / TN, in the wrapper).
//
// Rows whose mask is 0 (padding, non-policy tokens) produce logprob = entropy = lse = 0 and zero
// gradient. The mask is bound as u32 words: MASK_F32 reads them as f32 weights (0 = inactive);
// otherwise any nonzero u32 (a segment id) is active. Without a mask (HAS_MASK = false) the
// wrapper binds the targets buffer in its place; it is never read.
// A live row whose target is >= V gets logprob = NaN (from a runtime bitcast of p.nanBits), so a
// bad target is loud instead of a plausible number.
//
// Entry points:
//   fold_rows      one invocation per row, serial over the chunk: no barriers (CPU adapters)
//   fold_wg        one 64-wide workgroup per row, tree reductions in workgroup memory (GPUs)
//   finalize       stats -> logprob, entropy, lse
//   dlogits        in place: chunk logits -> dLoss/dlogits, one invocation per element
//   ce_loss        loss = -Σ w·logprob / Σ w over rows (one workgroup, fixed-order tree: deterministic)
//   ce_grad        gLp[n] = -scale·w_n / Σ w

struct Params {
  rows: u32,      // N
  chunkCols: u32, // Cc: vocab entries in this chunk (the last chunk may be partial)
  v0: u32,        // first vocab id of this chunk
  first: u32,     // 1 on the first chunk: start the statistics instead of merging into them
  vocab: u32,     // V
  nanBits: u32,   // 0x7fc00000, bitcast at run time (a NaN literal is not allowed in WGSL)
  invT: f32,      // 1 / temperature
  scale: f32,     // ce_grad: upstream gradient of the loss
}

override HAS_MASK: bool = false;
override MASK_F32: bool = false;
override HAS_GLP: bool = true;
override HAS_GENT: bool = true;

const NEG_MAX = -3.4e38; // below any real logit; exp(NEG_MAX - m) is 0

// ---------------------------------------------------------------- fold (forward, per chunk)
// logits: [rows, chunkCols] raw (unscaled) chunk logits; stats: [rows, 4] = (m, s, a, t)

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> stats: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> targets: array<u32>;
@group(0) @binding(3) var<storage, read> mask: array<u32>;
@group(0) @binding(4) var<uniform> p: Params;

fn is_active(n: u32) -> bool {
  if (!HAS_MASK) { return true; }
  let w = mask[n];
  if (MASK_F32) { return bitcast<f32>(w) != 0.0; }
  return w != 0u;
}

/// Merges one chunk's (max cm, Σ e^(l-cm), Σ e^(l-cm)(l-cm)) into row n's running stats.
fn merge(n: u32, cm: f32, cs: f32, ca: f32, tNew: f32, hasT: bool) {
  var m = cm;
  var s = cs;
  var a = ca;
  var t = tNew;
  if (p.first == 0u) {
    let old = stats[n];
    m = max(old.x, cm);
    let rOld = exp(old.x - m);
    let rNew = exp(cm - m);
    s = old.y * rOld + cs * rNew;
    a = (old.z + old.y * (old.x - m)) * rOld + (ca + cs * (cm - m)) * rNew;
    if (!hasT) { t = old.w; }
  }
  stats[n] = vec4<f32>(m, s, a, t);
}

/// The scaled target logit if this chunk holds the target of row n.
fn target_in_chunk(n: u32, base: u32) -> vec2<f32> {
  let tgt = targets[n];
  if (tgt >= p.v0 && tgt - p.v0 < p.chunkCols) {
    return vec2<f32>(logits[base + tgt - p.v0] * p.invT, 1.0);
  }
  return vec2<f32>(0.0, 0.0);
}

@compute @workgroup_size(64, 1, 1)
fn fold_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let n = gid.y * (nwg.x * 64u) + gid.x;
  if (n >= p.rows || !is_active(n)) { return; }
  let base = n * p.chunkCols;
  // Two passes over the row (it stays in cache): the chunk max, then the sums relative to it.
  var cm = NEG_MAX;
  for (var j = 0u; j < p.chunkCols; j++) {
    cm = max(cm, logits[base + j] * p.invT);
  }
  var cs = 0.0;
  var ca = 0.0;
  for (var j = 0u; j < p.chunkCols; j++) {
    let d = logits[base + j] * p.invT - cm;
    let e = exp(d);
    cs += e;
    ca += e * d;
  }
  let t = target_in_chunk(n, base);
  merge(n, cm, cs, ca, t.x, t.y != 0.0);
}

var<workgroup> redA: array<f32, 64>;
var<workgroup> redB: array<f32, 64>;

@compute @workgroup_size(64, 1, 1)
fn fold_wg(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) li: u32,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  // No early return before the barriers: every invocation reaches every barrier; rows past the
  // end read row 0 (valid memory) and skip the store.
  let row = wid.y * nwg.x + wid.x;
  let valid = row < p.rows;
  let n = select(0u, row, valid);
  let base = n * p.chunkCols;
  var lm = NEG_MAX;
  for (var j = li; j < p.chunkCols; j += 64u) {
    lm = max(lm, logits[base + j] * p.invT);
  }
  redA[li] = lm;
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (li < w) { redA[li] = max(redA[li], redA[li + w]); }
    workgroupBarrier();
  }
  let cm = redA[0];
  var ls = 0.0;
  var la = 0.0;
  for (var j = li; j < p.chunkCols; j += 64u) {
    let d = logits[base + j] * p.invT - cm;
    let e = exp(d);
    ls += e;
    la += e * d;
  }
  workgroupBarrier(); // everyone has read redA[0]
  redA[li] = ls;
  redB[li] = la;
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (li < w) {
      redA[li] += redA[li + w];
      redB[li] += redB[li + w];
    }
    workgroupBarrier();
  }
  if (li == 0u && valid && is_active(n)) {
    let t = target_in_chunk(n, base);
    merge(n, cm, redA[0], redB[0], t.x, t.y != 0.0);
  }
}

// ---------------------------------------------------------------- finalize
// stats: [rows, 4] -> logprob, entropy, lse: [rows]

@group(0) @binding(0) var<storage, read> fstats: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> ftargets: array<u32>;
@group(0) @binding(2) var<storage, read> fmask: array<u32>;
@group(0) @binding(3) var<storage, read_write> out_logprob: array<f32>;
@group(0) @binding(4) var<storage, read_write> out_entropy: array<f32>;
@group(0) @binding(5) var<storage, read_write> out_lse: array<f32>;
@group(0) @binding(6) var<uniform> pf: Params;

@compute @workgroup_size(64, 1, 1)
fn finalize(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let n = gid.y * (nwg.x * 64u) + gid.x;
  if (n >= pf.rows) { return; }
  var live = true;
  if (HAS_MASK) {
    let w = fmask[n];
    live = select(w != 0u, bitcast<f32>(w) != 0.0, MASK_F32);
  }
  if (!live) {
    out_logprob[n] = 0.0;
    out_entropy[n] = 0.0;
    out_lse[n] = 0.0;
    return;
  }
  let st = fstats[n];
  let logS = log(st.y);
  let lse = st.x + logS;
  var lp = st.w - lse;
  if (ftargets[n] >= pf.vocab) { lp = bitcast<f32>(pf.nanBits); }
  out_logprob[n] = lp;
  // Mathematically >= 0; rounding can leave a tiny negative when one token takes all the mass.
  out_entropy[n] = max(logS - st.z / st.y, 0.0);
  out_lse[n] = lse;
}

// ---------------------------------------------------------------- dlogits (backward, per chunk)
// dl: [rows, chunkCols] in: raw chunk logits, out: dLoss/dlogits (raw, i.e. already divided by T)
// lse, ent, gLp, gEnt: [rows]

@group(0) @binding(0) var<storage, read_write> dl: array<f32>;
@group(0) @binding(1) var<storage, read> btargets: array<u32>;
@group(0) @binding(2) var<storage, read> bmask: array<u32>;
@group(0) @binding(3) var<storage, read> blse: array<f32>;
@group(0) @binding(4) var<storage, read> bent: array<f32>;
@group(0) @binding(5) var<storage, read> gLp: array<f32>;
@group(0) @binding(6) var<storage, read> gEnt: array<f32>;
@group(0) @binding(7) var<uniform> pb: Params;

@compute @workgroup_size(64, 1, 1)
fn dlogits(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.y * (nwg.x * 64u) + gid.x;
  if (i >= pb.rows * pb.chunkCols) { return; }
  let n = i / pb.chunkCols;
  let j = i % pb.chunkCols;
  var live = true;
  if (HAS_MASK) {
    let w = bmask[n];
    live = select(w != 0u, bitcast<f32>(w) != 0.0, MASK_F32);
  }
  var gl = 0.0;
  var ge = 0.0;
  if (HAS_GLP) { gl = gLp[n]; }
  if (HAS_GENT) { ge = gEnt[n]; }
  // Branch instead of multiplying by 0: a zero weight must give exactly 0 whatever the logits hold.
  if (!live || (gl == 0.0 && ge == 0.0)) {
    dl[i] = 0.0;
    return;
  }
  let logp = dl[i] * pb.invT - blse[n];
  let prob = exp(logp);
  let onehot = select(0.0, 1.0, btargets[n] == pb.v0 + j);
  var g = gl * (onehot - prob);
  if (ge != 0.0) { g -= ge * prob * (logp + bent[n]); }
  dl[i] = g * pb.invT;
}

// ---------------------------------------------------------------- cross-entropy
// ce_loss:  lp, w: [rows] -> loss[0] = -Σ w·lp / Σ w (0 if Σ w = 0), wsum[0] = Σ w
// ce_grad:  w: [rows], wsum: [1] -> gLp[n] = -scale·w_n / Σ w
// w is bound as u32 words: nonzero u32 = weight 1, or f32 weights (MASK_F32). Inactive rows hold
// lp = 0 (finalize), and their weight is 0 anyway.

@group(0) @binding(0) var<storage, read> ce_lp: array<f32>;
@group(0) @binding(1) var<storage, read> ce_w: array<u32>;
@group(0) @binding(2) var<storage, read_write> ce_loss_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> ce_wsum_out: array<f32>;
@group(0) @binding(4) var<uniform> pc: Params;

fn ce_weight(n: u32) -> f32 {
  let w = ce_w[n];
  if (MASK_F32) { return bitcast<f32>(w); }
  return select(0.0, 1.0, w != 0u);
}

@compute @workgroup_size(64, 1, 1)
fn ce_loss(@builtin(local_invocation_index) li: u32) {
  // Each invocation sums a fixed stride of rows, then a fixed tree: the same order every run.
  var sl = 0.0;
  var sw = 0.0;
  for (var n = li; n < pc.rows; n += 64u) {
    let w = ce_weight(n);
    if (w != 0.0) {
      sl += w * ce_lp[n];
      sw += w;
    }
  }
  redA[li] = sl;
  redB[li] = sw;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (li < s) {
      redA[li] += redA[li + s];
      redB[li] += redB[li + s];
    }
    workgroupBarrier();
  }
  if (li == 0u) {
    let total = redB[0];
    var loss = 0.0;
    if (total != 0.0) { loss = -redA[0] / total; }
    ce_loss_out[0] = loss;
    ce_wsum_out[0] = total;
  }
}

@group(0) @binding(0) var<storage, read> cg_w: array<u32>;
@group(0) @binding(1) var<storage, read> cg_wsum: array<f32>;
@group(0) @binding(2) var<storage, read_write> cg_out: array<f32>;
@group(0) @binding(3) var<uniform> pcg: Params;

@compute @workgroup_size(64, 1, 1)
fn ce_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let n = gid.y * (nwg.x * 64u) + gid.x;
  if (n >= pcg.rows) { return; }
  let w = cg_w[n];
  var wt = select(0.0, 1.0, w != 0u);
  if (MASK_F32) { wt = bitcast<f32>(w); }
  let total = cg_wsum[0];
  var g = 0.0;
  if (total != 0.0 && wt != 0.0) { g = -pcg.scale * wt / total; }
  cg_out[n] = g;
}
