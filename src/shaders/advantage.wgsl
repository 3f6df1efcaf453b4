// RL advantage estimators on the GPU (CPU twin in float64: src/rl/core-algos.ts).
//
// Layout: B response rows padded to T positions, flattened row-major, N = B*T. Per-token arrays
// (rewards, values, mask, logprobs, outputs) are f32 [N]; mask is 0/1 (any nonzero counts as 1);
// index (group id per row) is u32 [B].
//
//   gae_rows          one invocation per row, backwards: GAE with the multi-turn skip (at mask = 0,
//                     nextValue and lastGaeLam carry over unchanged). adv = raw GAE where mask ≠ 0,
//                     the carried lastGaeLam (the next masked token's, verl's) where only out ≠ 0,
//                     else 0; ret = adv + v where mask ≠ 0, else 0.
//   discounted_rows   one invocation per row, backwards: REINFORCE++ return over policy tokens only
//                     (Agent-R1's compaction: no reset at mask = 0, gamma advances per policy token).
//                     ret = the return (carried through mask = 0) where out ≠ 0, else 0.
//
// `out` is the set of positions that receive an advantage: the mask, plus the positions the loss
// reads outside it (the loss-mask ablation's environment tokens); callers pass the mask itself when
// the two agree. The statistics (GAE's recursion, whitening) run over the mask alone.
//   row_scores        one invocation per row: score[b] = Σ_t rewards[b, t] (all positions; rewards
//                     only ever sit on policy tokens).
//   group_scores      one invocation per row: its group's statistics over rows with the same index,
//                     scanned in row order (O(B²) with B ≤ a few hundred; deterministic):
//                       MODE 0 GRPO      (s − μ) / (σ_unbiased + eps)   group of one: μ = 0, σ = 1
//                       MODE 1 Dr.GRPO / REINFORCE++-baseline   s − μ    group of one: μ = 0
//                       MODE 2 RLOO      s − (Σ_g − s)/(G − 1)           group of one: s
//   broadcast_rows    per token: out[i] = rowValue[row(i)] where its mask (the caller's out) ≠ 0, else 0.
//   whiten_partial    per chunk of CHUNK tokens: (n_c, Σ_c x, M2_c = Σ_c (x − mean_c)²) over mask ≠ 0.
//   whiten_finalize   one invocation: Chan's combination of the chunks in chunk order →
//                     stats = [mean, scale = rsqrt(var_unbiased + 1e-8), n, var]; n ≤ 1 → mean = scale = 0
//                     (whitening returns zeros instead of failing: the lab's choice, see the notes).
//   whiten_apply      per token: out[i] = (x[i] − mean)·scale where its mask (the caller's out) ≠ 0, else 0.
//   kl_reward         per token: out[i] = rewards[i] − beta·k(logprob, ref)·mask (k1, k2, k3).
//
// Two-pass whitening on chunk partials instead of a workgroup tree: no barriers (slow on lavapipe
// and SwiftShader) and no float atomics; the sum order depends only on CHUNK, so results are
// bitwise reproducible. Chunk-local centring keeps the variance accurate when |mean| ≫ std.
// 1-D entry points use the [x, y] grid of 64-wide workgroups of src/gpu/kernels/launch.ts.
// Variables sharing a binding number belong to different entry points (layout 'auto').

const WG = 64u;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>) -> u32 {
  return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

// ---------------------------------------------------------------- GAE and discounted returns

struct RowParams {
  B: u32,
  T: u32,
  gamma: f32,
  lam: f32,
}

@group(0) @binding(0) var<storage, read> ga_rewards: array<f32>;
@group(0) @binding(1) var<storage, read> ga_values: array<f32>;
@group(0) @binding(2) var<storage, read> ga_mask: array<f32>;
@group(0) @binding(3) var<storage, read> ga_out: array<f32>;
@group(0) @binding(4) var<storage, read_write> ga_adv: array<f32>;
@group(0) @binding(5) var<storage, read_write> ga_ret: array<f32>;
@group(0) @binding(6) var<uniform> gap: RowParams;

@compute @workgroup_size(64, 1, 1)
fn gae_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
  let b = flat_index(wid, nwg, lid);
  if (b >= gap.B) { return; }
  let base = b * gap.T;
  var nextValue = 0.0;
  var lastGaeLam = 0.0;
  for (var t = gap.T; t > 0u; t--) {
    let i = base + t - 1u;
    let masked = ga_mask[i] != 0.0;
    if (masked) {
      let v = ga_values[i];
      let delta = ga_rewards[i] + gap.gamma * nextValue - v;
      lastGaeLam = delta + gap.gamma * gap.lam * lastGaeLam;
      nextValue = v;
      ga_ret[i] = lastGaeLam + v;
    } else {
      ga_ret[i] = 0.0;
    }
    ga_adv[i] = select(0.0, lastGaeLam, masked || ga_out[i] != 0.0);
  }
}

@group(0) @binding(0) var<storage, read> dr_rewards: array<f32>;
@group(0) @binding(1) var<storage, read> dr_mask: array<f32>;
@group(0) @binding(2) var<storage, read> dr_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> dr_ret: array<f32>;
@group(0) @binding(4) var<uniform> drp: RowParams;

@compute @workgroup_size(64, 1, 1)
fn discounted_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_id) lid: vec3<u32>) {
  let b = flat_index(wid, nwg, lid);
  if (b >= drp.B) { return; }
  let base = b * drp.T;
  var running = 0.0;
  for (var t = drp.T; t > 0u; t--) {
    let i = base + t - 1u;
    let masked = dr_mask[i] != 0.0;
    if (masked) {
      running = dr_rewards[i] + drp.gamma * running;
    }
    dr_ret[i] = select(0.0, running, masked || dr_out[i] != 0.0);
  }
}

// ---------------------------------------------------------------- outcome scores and group baselines

struct GroupParams {
  B: u32,
  T: u32,
  epsilon: f32, // GRPO: added to the std
  pad: u32,
}

@group(0) @binding(0) var<storage, read> rs_rewards: array<f32>;
@group(0) @binding(1) var<storage, read_write> rs_score: array<f32>;
@group(0) @binding(2) var<uniform> rsp: GroupParams;

@compute @workgroup_size(64, 1, 1)
fn row_scores(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
  let b = flat_index(wid, nwg, lid);
  if (b >= rsp.B) { return; }
  let base = b * rsp.T;
  var s = 0.0;
  for (var t = 0u; t < rsp.T; t++) { s += rs_rewards[base + t]; }
  rs_score[b] = s;
}

// 0 GRPO, 1 Dr.GRPO / REINFORCE++-baseline (score − group mean), 2 RLOO.
override MODE: u32 = 0u;

@group(0) @binding(0) var<storage, read> gs_score: array<f32>;
@group(0) @binding(1) var<storage, read> gs_index: array<u32>;
@group(0) @binding(2) var<storage, read_write> gs_out: array<f32>;
@group(0) @binding(3) var<uniform> gsp: GroupParams;

@compute @workgroup_size(64, 1, 1)
fn group_scores(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>) {
  let b = flat_index(wid, nwg, lid);
  if (b >= gsp.B) { return; }
  let g = gs_index[b];
  var count = 0.0;
  var sum = 0.0;
  for (var j = 0u; j < gsp.B; j++) {
    if (gs_index[j] == g) {
      count += 1.0;
      sum += gs_score[j];
    }
  }
  let s = gs_score[b];
  if (count < 2.0) {
    // A group of one: mean 0 and std 1 (verl), so every mode keeps the score (GRPO: s / (1 + eps)).
    gs_out[b] = select(s, s / (1.0 + gsp.epsilon), MODE == 0u);
    return;
  }
  // Deviations are formed before the one division: WGSL's f32 division may be off by 2.5 ULP (an
  // H100 gave s − (sum − s)/(n − 1) = −1.5e-8 for equal scores), while (n − 1)·s − (sum − s) and
  // n·s − sum are exactly 0 for equal binary-fraction scores, fused or not, and 0 / x is 0.
  if (MODE == 2u) {
    // s − leave-one-out mean.
    gs_out[b] = ((count - 1.0) * s - (sum - s)) / (count - 1.0);
    return;
  }
  let mean = sum / count;
  if (MODE == 1u) {
    gs_out[b] = (count * s - sum) / count;
  } else {
    var m2 = 0.0;
    for (var j = 0u; j < gsp.B; j++) {
      if (gs_index[j] == g) {
        let d = gs_score[j] - mean;
        m2 += d * d;
      }
    }
    gs_out[b] = ((count * s - sum) / count) / (sqrt(m2 / (count - 1.0)) + gsp.epsilon);
  }
}

struct BroadcastParams {
  N: u32,
  T: u32,
}

@group(0) @binding(0) var<storage, read> bc_row: array<f32>;
@group(0) @binding(1) var<storage, read> bc_mask: array<f32>;
@group(0) @binding(2) var<storage, read_write> bc_out: array<f32>;
@group(0) @binding(3) var<uniform> bcp: BroadcastParams;

@compute @workgroup_size(64, 1, 1)
fn broadcast_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  if (i >= bcp.N) { return; }
  bc_out[i] = select(0.0, bc_row[i / bcp.T], bc_mask[i] != 0.0);
}

// ---------------------------------------------------------------- masked whitening

const CHUNK = 256u;

struct WhitenParams {
  N: u32,
  chunks: u32,
}

// partial: [chunks, 3] = (n_c, Σ_c x, M2_c).
@group(0) @binding(0) var<storage, read> wp_x: array<f32>;
@group(0) @binding(1) var<storage, read> wp_mask: array<f32>;
@group(0) @binding(2) var<storage, read_write> wp_partial: array<f32>;
@group(0) @binding(3) var<uniform> wpp: WhitenParams;

@compute @workgroup_size(64, 1, 1)
fn whiten_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_id) lid: vec3<u32>) {
  let c = flat_index(wid, nwg, lid);
  if (c >= wpp.chunks) { return; }
  let i0 = c * CHUNK;
  let i1 = min(i0 + CHUNK, wpp.N);
  var n = 0.0;
  var s = 0.0;
  for (var i = i0; i < i1; i++) {
    if (wp_mask[i] != 0.0) {
      n += 1.0;
      s += wp_x[i];
    }
  }
  var m2 = 0.0;
  if (n > 0.0) {
    let mean = s / n;
    for (var i = i0; i < i1; i++) {
      if (wp_mask[i] != 0.0) {
        let d = wp_x[i] - mean;
        m2 += d * d;
      }
    }
  }
  wp_partial[3u * c] = n;
  wp_partial[3u * c + 1u] = s;
  wp_partial[3u * c + 2u] = m2;
}

// stats: [4] = (mean, scale, n, var).
@group(0) @binding(0) var<storage, read> wf_partial: array<f32>;
@group(0) @binding(1) var<storage, read_write> wf_stats: array<f32>;
@group(0) @binding(2) var<uniform> wfp: WhitenParams;

@compute @workgroup_size(1, 1, 1)
fn whiten_finalize() {
  var n = 0.0;
  var s = 0.0;
  for (var c = 0u; c < wfp.chunks; c++) {
    n += wf_partial[3u * c];
    s += wf_partial[3u * c + 1u];
  }
  if (n < 2.0) {
    wf_stats[0] = 0.0;
    wf_stats[1] = 0.0;
    wf_stats[2] = n;
    wf_stats[3] = 0.0;
    return;
  }
  let mean = s / n;
  var m2 = 0.0;
  for (var c = 0u; c < wfp.chunks; c++) {
    let nc = wf_partial[3u * c];
    if (nc > 0.0) {
      let d = wf_partial[3u * c + 1u] / nc - mean;
      m2 += wf_partial[3u * c + 2u] + nc * d * d;
    }
  }
  let variance = m2 / (n - 1.0);
  wf_stats[0] = mean;
  // 1 / sqrt rather than inverseSqrt: WGSL only promises 2 ulp for inverseSqrt.
  wf_stats[1] = 1.0 / sqrt(variance + 1e-8);
  wf_stats[2] = n;
  wf_stats[3] = variance;
}

@group(0) @binding(0) var<storage, read> wa_x: array<f32>;
@group(0) @binding(1) var<storage, read> wa_mask: array<f32>;
@group(0) @binding(2) var<storage, read> wa_stats: array<f32>;
@group(0) @binding(3) var<storage, read_write> wa_out: array<f32>;
@group(0) @binding(4) var<uniform> wap: WhitenParams;

@compute @workgroup_size(64, 1, 1)
fn whiten_apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  if (i >= wap.N) { return; }
  wa_out[i] = select(0.0, (wa_x[i] - wa_stats[0]) * wa_stats[1], wa_mask[i] != 0.0);
}

// ---------------------------------------------------------------- KL penalty in the reward

// k(logprob, ref), KIND 0 k1 = lp − ref, 1 k2 = ½(lp − ref)², 2 k3 (verl's low_var_kl):
// x = clamp(ref − lp, ±20), k3 = clamp(exp(x) − x − 1, ±10). exp(x) − x − 1 cancels badly in f32
// for small |x| (x = 1e-3 loses a third of its digits), so |x| < 0.125 takes its Taylor series.
fn expm1_minus_x(x: f32) -> f32 {
  if (abs(x) < 0.125) {
    // x²/2 + x³/6 + ... + x⁸/40320: truncation below 1e-9 relative at |x| = 0.125.
    let p = 1.0 / 2.0 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0 + x * (1.0 / 720.0
      + x * (1.0 / 5040.0 + x * (1.0 / 40320.0))))));
    return x * x * p;
  }
  return exp(x) - x - 1.0;
}

fn kl_value(lp: f32, refLp: f32, kind: u32) -> f32 {
  if (kind == 0u) { return lp - refLp; }
  if (kind == 1u) {
    let d = lp - refLp;
    return 0.5 * d * d;
  }
  let x = clamp(refLp - lp, -20.0, 20.0);
  return clamp(expm1_minus_x(x), -10.0, 10.0);
}

struct KlRewardParams {
  N: u32,
  kind: u32,
  beta: f32,
}

@group(0) @binding(0) var<storage, read> kr_rewards: array<f32>;
@group(0) @binding(1) var<storage, read> kr_logprob: array<f32>;
@group(0) @binding(2) var<storage, read> kr_ref: array<f32>;
@group(0) @binding(3) var<storage, read> kr_mask: array<f32>;
@group(0) @binding(4) var<storage, read_write> kr_out: array<f32>;
@group(0) @binding(5) var<uniform> krp: KlRewardParams;

@compute @workgroup_size(64, 1, 1)
fn kl_reward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  if (i >= krp.N) { return; }
  let r = kr_rewards[i];
  kr_out[i] = select(r, r - krp.beta * kl_value(kr_logprob[i], kr_ref[i], krp.kind), kr_mask[i] != 0.0);
}
