// The actor and critic losses of PPO-family training, with the per-token gradients the model's
// backward consumes (CPU twin in float64: src/rl/core-algos.ts).
//
// Layout: B rows padded to T positions, flattened row-major, N = B*T; every per-token array is f32 [N];
// mask is 0/1 (any nonzero counts as 1). Three dispatches per loss:
//
//   row_counts       one invocation per row: rowN[b] = active tokens of row b.
//   actor_rows       one invocation per row, serial over its T tokens. Per token (mask ≠ 0):
//                      the policy-gradient term (POLICY: PPO clip with dual clip, GSPO or CISPO),
//                      entropy, KL(k1 | k2 | k3) → the token's loss terms; gLogprob =
//                      wpg_b·dpg/dlogprob + w_b·klCoef·dkl/dlogprob, gEntropy = −entropyCoef·w_b
//                      (0 at mask = 0), and the row's sums of the terms and of the metric indicators.
//                      wpg = w except for GSPO, whose pg term is always seq-mean-token-mean (verl)
//                      while entropy and KL keep the configured mode.
//   actor_finalize   one invocation: Σ_b w_b·rowSums → the aggregated losses, masked means → metrics.
//   value_rows       as actor_rows for the clipped value loss: gValue = 0.5·w_b·d max(l1, l2)/dv.
//   value_finalize   as actor_finalize.
//
// Aggregation (verl agg_loss, the lab's notes): every mode is Σ_b w_b·Σ_t loss[b, t]·mask[b, t] with
// a weight per row, so the gradient of the aggregated loss is w_b·dloss/dx at each active token:
//   MODE 0 token-mean               w = 1 / tokens
//   MODE 1 seq-mean-token-sum       w = 1 / rows
//   MODE 2 seq-mean-token-mean      w = 1 / (rows·n_b)              (0 for an empty row; verl's
//                                                                    n_b + 1e-8 is n_b in f32)
//   MODE 3 seq-mean-token-sum-norm  w = 1 / maxLen                  (Σ all / L, not divided by rows)
// tokens, rows = this batch's active tokens and non-empty rows unless the uniform carries global
// denominators (micro-batches of one step then sum to the whole batch's loss and gradient); a zero
// denominator gives loss 0 and gradient 0.
//
// PPO (verl compute_policy_loss_vanilla): x = clamp(lp − old, ±20), r = exp(x), L1 = −A·r,
// L2 = −A·clip(r, 1 − εlow, 1 + εhigh), pg = max(L1, L2); where A < 0 also pg = min(−A·c, pg).
// Gradient exactly as autograd gives it (and as the CPU twin computes it): clamps pass the gradient on
// their closed interval (torch.clamp); torch.maximum / torch.minimum split it half/half between
// exactly equal arguments. So a tie L1 == L2 (only inside the clip interval, or A = 0) gets the full
// unclipped gradient −A·r (both halves are equal), and the dual-clip tie −A·c == max(L1, L2) gets half.
// clipfrac counts L2 > L1, clipfracLower counts A < 0 and max(L1, L2) > −A·c (both strict),
// ppoKl = masked mean of −x; all three are masked means over this batch (never the globals).
// GSPO (verl compute_policy_loss_gspo) and CISPO (compute_policy_loss_cispo): see actor_rows;
// for them clipfrac counts the clipped tokens (GSPO: L2 > L1; CISPO: r outside [lo, hi]),
// clipfracLower is 0, and GSPO's ppoKl uses the unclamped log-ratio.
//
// Row-serial loops: B is at most a few hundred and T a few thousand, so the loss is O(N + B²) work
// (each row invocation re-sums the B row counts for the denominators), small next to the model; a
// row loop needs no barriers (slow on lavapipe and SwiftShader) and no float atomics, and sums run
// in a fixed order, so results are bitwise reproducible.

const WG = 64u;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>) -> u32 {
  return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

struct LossParams {
  B: u32,
  T: u32,
  mode: u32,           // aggregation MODE above
  klKind: u32,         // 0 k1, 1 k2, 2 k3
  hasEntropy: u32,     // entropy bound and used
  hasRef: u32,         // refLogprob bound and KL used
  useGlobalTokens: u32,
  useGlobalRows: u32,
  globalTokens: f32,
  globalRows: f32,
  maxLen: f32,         // L of seq-mean-token-sum-norm (T unless given)
  clipLow: f32,        // actor: εlow; critic: the value clip range
  clipHigh: f32,
  clipC: f32,
  entropyCoef: f32,
  klCoef: f32,
  pgMode: u32,         // aggregation of the policy-gradient term: `mode`, except GSPO's own
}

// ---------------------------------------------------------------- shared helpers

// Denominators of the aggregation: (tokens, rows, maxLen, localTokens, localRows), from rowN [B].
struct Denoms {
  tokens: f32,
  rows: f32,
  maxLen: f32,
  localTokens: f32,
  localRows: f32,
}

fn row_weight(mode: u32, d: Denoms, n: f32) -> f32 {
  if (n == 0.0) { return 0.0; }
  if (mode == 0u) { return select(0.0, 1.0 / d.tokens, d.tokens > 0.0); }
  if (mode == 1u) { return select(0.0, 1.0 / d.rows, d.rows > 0.0); }
  if (mode == 2u) { return select(0.0, 1.0 / (d.rows * n), d.rows > 0.0); }
  return select(0.0, 1.0 / d.maxLen, d.maxLen > 0.0);
}

// d max(a, b) / d a with torch.maximum's rule: 1, 0, or half at an exact tie (min(a, b) = −max(−a, −b):
// d min(a, b) / d b = max_share(a, b)).
fn max_share(a: f32, b: f32) -> f32 {
  if (a > b) { return 1.0; }
  if (a < b) { return 0.0; }
  return 0.5;
}

// e^x − x − 1 without the f32 cancellation at small |x| (Taylor series below 0.125).
fn expm1_minus_x(x: f32) -> f32 {
  if (abs(x) < 0.125) {
    let p = 1.0 / 2.0 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0 + x * (1.0 / 720.0
      + x * (1.0 / 5040.0 + x * (1.0 / 40320.0))))));
    return x * x * p;
  }
  return exp(x) - x - 1.0;
}

// (kl, dkl/dlogprob) of k1 = lp − ref, k2 = ½(lp − ref)², k3 = clamp(e^x − x − 1, ±10) with
// x = clamp(ref − lp, ±20): dk3/dlp = −(e^x − 1) inside both clamps, 0 outside (closed intervals).
fn kl_and_grad(lp: f32, refLp: f32, kind: u32) -> vec2<f32> {
  let d = lp - refLp;
  if (kind == 0u) { return vec2<f32>(d, 1.0); }
  if (kind == 1u) { return vec2<f32>(0.5 * d * d, d); }
  let raw = refLp - lp;
  let x = clamp(raw, -20.0, 20.0);
  let k = expm1_minus_x(x);
  let inside = abs(raw) <= 20.0 && k <= 10.0 && k >= -10.0;
  return vec2<f32>(clamp(k, -10.0, 10.0), select(0.0, -(k + x), inside));
}

// ---------------------------------------------------------------- row counts

@group(0) @binding(0) var<storage, read> rc_mask: array<f32>;
@group(0) @binding(1) var<storage, read_write> rc_rowN: array<f32>;
@group(0) @binding(2) var<uniform> rcp: LossParams;

@compute @workgroup_size(64, 1, 1)
fn row_counts(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
  let b = flat_index(wid, nwg, lid);
  if (b >= rcp.B) { return; }
  var n = 0.0;
  for (var t = 0u; t < rcp.T; t++) {
    n += select(0.0, 1.0, rc_mask[b * rcp.T + t] != 0.0);
  }
  rc_rowN[b] = n;
}

// ---------------------------------------------------------------- actor

const ACTOR_K = 6u; // row sums: pg, entropy, kl, clipped, dual-clipped, −x

@group(0) @binding(0) var<storage, read> ar_logprob: array<f32>;
@group(0) @binding(1) var<storage, read> ar_old: array<f32>;
@group(0) @binding(2) var<storage, read> ar_adv: array<f32>;
@group(0) @binding(3) var<storage, read> ar_mask: array<f32>;
@group(0) @binding(4) var<storage, read> ar_entropy: array<f32>;
@group(0) @binding(5) var<storage, read> ar_ref: array<f32>;
@group(0) @binding(6) var<storage, read> ar_rowN: array<f32>;
@group(0) @binding(7) var<storage, read_write> ar_gLogprob: array<f32>;
@group(0) @binding(8) var<storage, read_write> ar_gEntropy: array<f32>;
@group(0) @binding(9) var<storage, read_write> ar_rowSums: array<f32>;
@group(0) @binding(10) var<uniform> arp: LossParams;

fn actor_denoms() -> Denoms {
  var d: Denoms;
  d.localTokens = 0.0;
  d.localRows = 0.0;
  for (var b = 0u; b < arp.B; b++) {
    let n = ar_rowN[b];
    d.localTokens += n;
    d.localRows += select(0.0, 1.0, n > 0.0);
  }
  d.tokens = select(d.localTokens, arp.globalTokens, arp.useGlobalTokens != 0u);
  d.rows = select(d.localRows, arp.globalRows, arp.useGlobalRows != 0u);
  d.maxLen = arp.maxLen;
  return d;
}

// 0 vanilla PPO (dual clip), 1 GSPO, 2 CISPO: the policy-gradient term of actor_rows.
override POLICY: u32 = 0u;

@compute @workgroup_size(64, 1, 1)
fn actor_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
  let b = flat_index(wid, nwg, lid);
  if (b >= arp.B) { return; }
  let d = actor_denoms();
  let n = ar_rowN[b];
  let w = row_weight(arp.mode, d, n);
  let wPg = row_weight(arp.pgMode, d, n);
  let lo = 1.0 - arp.clipLow;
  let hi = 1.0 + arp.clipHigh;
  // GSPO: one ratio per row, s = exp(min(mean of the row's log-ratios, 10)) (no ±20 clamp), with
  // verl's stop-gradient construction giving d s_t / d logprob_t = s (0 above the clamp).
  var seqS = 0.0;
  var seqDS = 0.0;
  if (POLICY == 1u) {
    var sum = 0.0;
    for (var t = 0u; t < arp.T; t++) {
      let i = b * arp.T + t;
      if (ar_mask[i] != 0.0) { sum += ar_logprob[i] - ar_old[i]; }
    }
    let seqLogRatio = sum / max(n, 1.0);
    seqS = exp(min(seqLogRatio, 10.0));
    seqDS = select(0.0, seqS, seqLogRatio <= 10.0);
  }
  var sPg = 0.0;
  var sEnt = 0.0;
  var sKl = 0.0;
  var sClip = 0.0;
  var sLower = 0.0;
  var sNegX = 0.0;
  for (var t = 0u; t < arp.T; t++) {
    let i = b * arp.T + t;
    if (ar_mask[i] == 0.0) {
      ar_gLogprob[i] = 0.0;
      if (arp.hasEntropy != 0u) { ar_gEntropy[i] = 0.0; }
      continue;
    }
    let lp = ar_logprob[i];
    let a = ar_adv[i];
    let rawX = lp - ar_old[i];
    let x = clamp(rawX, -20.0, 20.0);
    var pg: f32;
    var dpg: f32;
    if (POLICY == 1u) {
      let l1 = -a * seqS;
      let l2 = -a * clamp(seqS, lo, hi);
      let dl2 = select(0.0, -a, seqS >= lo && seqS <= hi);
      pg = max(l1, l2);
      dpg = (max_share(l1, l2) * -a + max_share(l2, l1) * dl2) * seqDS;
      if (l2 > l1) { sClip += 1.0; }
      sNegX -= rawX;
    } else if (POLICY == 2u) {
      // CISPO: −sg(clip(r))·A·logprob, so the clipped tokens keep the gradient −clip(r)·A.
      let r = exp(x);
      let rc = clamp(r, lo, hi);
      pg = -rc * a * lp;
      dpg = -rc * a;
      if (r < lo || r > hi) { sClip += 1.0; }
      sNegX -= x;
    } else {
      let r = exp(x);
      let dr = select(0.0, r, abs(rawX) <= 20.0);
      let l1 = -a * r;
      let l2 = -a * clamp(r, lo, hi);
      let dl2 = select(0.0, -a, r >= lo && r <= hi); // d L2 / d r: clamp passes its closed interval
      pg = max(l1, l2);
      dpg = max_share(l1, l2) * -a + max_share(l2, l1) * dl2;
      if (l2 > l1) { sClip += 1.0; }
      if (a < 0.0) {
        let l3 = -a * arp.clipC; // constant: no gradient
        if (pg > l3) { sLower += 1.0; }
        dpg = max_share(l3, pg) * dpg;
        pg = min(l3, pg);
      }
      dpg *= dr;
      sNegX -= x;
    }
    sPg += pg;
    var g = wPg * dpg;
    if (arp.hasRef != 0u) {
      let kl = kl_and_grad(lp, ar_ref[i], arp.klKind);
      sKl += kl.x;
      g += w * arp.klCoef * kl.y;
    }
    ar_gLogprob[i] = g;
    if (arp.hasEntropy != 0u) {
      sEnt += ar_entropy[i];
      ar_gEntropy[i] = -arp.entropyCoef * w;
    }
  }
  let o = b * ACTOR_K;
  ar_rowSums[o] = sPg;
  ar_rowSums[o + 1u] = sEnt;
  ar_rowSums[o + 2u] = sKl;
  ar_rowSums[o + 3u] = sClip;
  ar_rowSums[o + 4u] = sLower;
  ar_rowSums[o + 5u] = sNegX;
}

// stats (f32, POLICY_STAT in src/gpu/kernels/policy-loss.ts):
//   0 loss = pg − entropyCoef·entropy + klCoef·kl   1 pg   2 entropy (aggregated)   3 kl (aggregated)
//   4 clipfrac   5 clipfracLower   6 ppoKl   7 active tokens   8 non-empty rows
//   9 tokens denominator used   10 rows denominator used
@group(0) @binding(0) var<storage, read> af_rowN: array<f32>;
@group(0) @binding(1) var<storage, read> af_rowSums: array<f32>;
@group(0) @binding(2) var<storage, read_write> af_stats: array<f32>;
@group(0) @binding(3) var<uniform> afp: LossParams;

@compute @workgroup_size(1, 1, 1)
fn actor_finalize() {
  var d: Denoms;
  d.localTokens = 0.0;
  d.localRows = 0.0;
  for (var b = 0u; b < afp.B; b++) {
    let n = af_rowN[b];
    d.localTokens += n;
    d.localRows += select(0.0, 1.0, n > 0.0);
  }
  d.tokens = select(d.localTokens, afp.globalTokens, afp.useGlobalTokens != 0u);
  d.rows = select(d.localRows, afp.globalRows, afp.useGlobalRows != 0u);
  d.maxLen = afp.maxLen;
  var pg = 0.0;
  var ent = 0.0;
  var kl = 0.0;
  var clip = 0.0;
  var lower = 0.0;
  var negX = 0.0;
  for (var b = 0u; b < afp.B; b++) {
    let w = row_weight(afp.mode, d, af_rowN[b]);
    let o = b * ACTOR_K;
    pg += row_weight(afp.pgMode, d, af_rowN[b]) * af_rowSums[o];
    ent += w * af_rowSums[o + 1u];
    kl += w * af_rowSums[o + 2u];
    clip += af_rowSums[o + 3u];
    lower += af_rowSums[o + 4u];
    negX += af_rowSums[o + 5u];
  }
  // verl's masked_mean: Σ / (Σ mask + 1e-8), so an empty batch reports 0.
  let denom = d.localTokens + 1e-8;
  var loss = pg;
  if (afp.hasEntropy != 0u) { loss -= afp.entropyCoef * ent; }
  if (afp.hasRef != 0u) { loss += afp.klCoef * kl; }
  af_stats[0] = loss;
  af_stats[1] = pg;
  af_stats[2] = ent;
  af_stats[3] = kl;
  af_stats[4] = clip / denom;
  af_stats[5] = lower / denom;
  af_stats[6] = negX / denom;
  af_stats[7] = d.localTokens;
  af_stats[8] = d.localRows;
  af_stats[9] = d.tokens;
  af_stats[10] = d.rows;
}

// ---------------------------------------------------------------- critic

// verl compute_value_loss: vc = clamp(v, old − c, old + c), l1 = (v − R)², l2 = (vc − R)²,
// loss = 0.5·agg(max(l1, l2)). Gradient 0.5·w·(share(l1)·2(v − R) + share(l2)·dl2/dv), torch's rules:
// the clamp passes its closed interval, a tie splits half/half (inside the interval both halves are
// 2(v − R); a tie outside it, vc − R = −(v − R), gets half of 2(v − R)).
const VALUE_K = 3u; // row sums: max(l1, l2), clipped, vpred

@group(0) @binding(0) var<storage, read> vr_vpreds: array<f32>;
@group(0) @binding(1) var<storage, read> vr_old: array<f32>;
@group(0) @binding(2) var<storage, read> vr_returns: array<f32>;
@group(0) @binding(3) var<storage, read> vr_mask: array<f32>;
@group(0) @binding(4) var<storage, read> vr_rowN: array<f32>;
@group(0) @binding(5) var<storage, read_write> vr_gValue: array<f32>;
@group(0) @binding(6) var<storage, read_write> vr_rowSums: array<f32>;
@group(0) @binding(7) var<uniform> vrp: LossParams;

fn value_denoms() -> Denoms {
  var d: Denoms;
  d.localTokens = 0.0;
  d.localRows = 0.0;
  for (var b = 0u; b < vrp.B; b++) {
    let n = vr_rowN[b];
    d.localTokens += n;
    d.localRows += select(0.0, 1.0, n > 0.0);
  }
  d.tokens = select(d.localTokens, vrp.globalTokens, vrp.useGlobalTokens != 0u);
  d.rows = select(d.localRows, vrp.globalRows, vrp.useGlobalRows != 0u);
  d.maxLen = vrp.maxLen;
  return d;
}

@compute @workgroup_size(64, 1, 1)
fn value_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
  let b = flat_index(wid, nwg, lid);
  if (b >= vrp.B) { return; }
  let w = row_weight(vrp.mode, value_denoms(), vr_rowN[b]);
  var sLoss = 0.0;
  var sClip = 0.0;
  var sV = 0.0;
  for (var t = 0u; t < vrp.T; t++) {
    let i = b * vrp.T + t;
    if (vr_mask[i] == 0.0) {
      vr_gValue[i] = 0.0;
      continue;
    }
    let v = vr_vpreds[i];
    let old = vr_old[i];
    let ret = vr_returns[i];
    let lo = old - vrp.clipLow;
    let hi = old + vrp.clipLow;
    let vc = clamp(v, lo, hi);
    let l1 = (v - ret) * (v - ret);
    let l2 = (vc - ret) * (vc - ret);
    let dl2 = select(0.0, 2.0 * (vc - ret), v >= lo && v <= hi);
    let dl = max_share(l1, l2) * 2.0 * (v - ret) + max_share(l2, l1) * dl2;
    sLoss += max(l1, l2);
    if (l2 > l1) { sClip += 1.0; }
    vr_gValue[i] = 0.5 * w * dl;
    sV += v;
  }
  let o = b * VALUE_K;
  vr_rowSums[o] = sLoss;
  vr_rowSums[o + 1u] = sClip;
  vr_rowSums[o + 2u] = sV;
}

// stats (f32, VALUE_STAT in src/gpu/kernels/policy-loss.ts):
//   0 loss = 0.5·agg(max(l1, l2))   1 clipfrac   2 vpred mean   3 active tokens   4 non-empty rows
//   5 tokens denominator used   6 rows denominator used
@group(0) @binding(0) var<storage, read> vf_rowN: array<f32>;
@group(0) @binding(1) var<storage, read> vf_rowSums: array<f32>;
@group(0) @binding(2) var<storage, read_write> vf_stats: array<f32>;
@group(0) @binding(3) var<uniform> vfp: LossParams;

@compute @workgroup_size(1, 1, 1)
fn value_finalize() {
  var d: Denoms;
  d.localTokens = 0.0;
  d.localRows = 0.0;
  for (var b = 0u; b < vfp.B; b++) {
    let n = vf_rowN[b];
    d.localTokens += n;
    d.localRows += select(0.0, 1.0, n > 0.0);
  }
  d.tokens = select(d.localTokens, vfp.globalTokens, vfp.useGlobalTokens != 0u);
  d.rows = select(d.localRows, vfp.globalRows, vfp.useGlobalRows != 0u);
  d.maxLen = vfp.maxLen;
  var loss = 0.0;
  var clip = 0.0;
  var v = 0.0;
  for (var b = 0u; b < vfp.B; b++) {
    let o = b * VALUE_K;
    loss += row_weight(vfp.mode, d, vf_rowN[b]) * vf_rowSums[o];
    clip += vf_rowSums[o + 1u];
    v += vf_rowSums[o + 2u];
  }
  let denom = d.localTokens + 1e-8;
  vf_stats[0] = 0.5 * loss;
  vf_stats[1] = clip / denom;
  vf_stats[2] = v / denom;
  vf_stats[3] = d.localTokens;
  vf_stats[4] = d.localRows;
  vf_stats[5] = d.tokens;
  vf_stats[6] = d.rows;
}
