// Optimizer kernels: the global gradient norm (with clipping and non-finite detection) and a fused
// AdamW step. Driven by src/gpu/kernels/optimizer.ts; CPU reference in src/gpu/reference/optimizer.ts.
//
// Grad-norm state buffer (f32), written by these kernels and read by adamw_step, never by the CPU
// during a training step (the norm is read back lazily, for logging):
//   [0] sumSq      Σ over all tensors of Σ g²
//   [1] norm       sqrt(sumSq)                      (inf / NaN when the gradients are not finite)
//   [2] clipScale  min(1, maxNorm / (norm + 1e-6)), 1 without clipping, 0 when not finite
//   [3] nonFinite  1.0 when sumSq is inf or NaN (some gradient is inf/NaN, or Σ g² overflowed), else 0.0
//   [4] maxNorm    the clipping threshold used (0 = no clipping)
//   [5..7]         reserved (0)
//   [8 + k]        Σ g² of gradient tensor k (per-tensor norms for logging come for free)
//
// The sum of squares is deterministic: every partial sum has a fixed owner and a fixed summation
// order, stages run as ordered dispatches, and there are no float atomics. Same inputs, same bits.
//
// Reduction of one tensor (n values) into its slot, in stages; each stage sums fixed blocks:
//   stage 1 reads the gradient (SQUARE = true: sums g²), later stages read partials (SQUARE = false),
//   the last stage writes a single value into state[8 + k].
// Two variants, chosen per adapter by the TS wrapper:
//  - lanes (CPU adapters: lavapipe, SwiftShader, where workgroup barriers and workgroup memory are
//    slow): no barriers, no workgroup memory. A workgroup of 64 owns a block of 64*LANE_ITEMS values;
//    invocation l sums the values block + l + 64*k (k < LANE_ITEMS, coalesced across invocations) and
//    writes its own partial, so a stage shrinks the data 64x. The last stage (<= 4096 values) is one
//    invocation summing serially (reduce_serial), cheaper than another dispatch on a CPU.
//  - tree (real GPUs): a workgroup of 256 sums TREE_ITEMS strided values per invocation, then a
//    barrier tree in workgroup memory gives one partial per workgroup; a stage shrinks the data 4096x
//    and the last stage is the same entry point with one workgroup.
// Large problems use a 2D grid: the linear workgroup index is wid.y * num_workgroups.x + wid.x and
// workgroups past `groups` (the last row's tail) return at once.

const LANES: u32 = 64u;
const LANE_ITEMS: u32 = 64u;
const TREE_WG: u32 = 256u;
const TREE_ITEMS: u32 = 16u;
const HEADER: u32 = 8u;

// Stage 1 squares the gradient; later stages add partial sums as they are.
override SQUARE: bool = true;

struct ReduceParams {
  n: u32,       // values to read from src
  dstOff: u32,  // element offset of this stage's first output in dst
  groups: u32,  // workgroups that do work (the 2D grid may have a few more)
  _pad: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<uniform> rp: ReduceParams;

fn term(i: u32) -> f32 {
  let x = src[i];
  if (SQUARE) { return x * x; }
  return x;
}

// src: [n]  ->  dst[dstOff + w*64 + l] for w < groups = ceil(n / 4096), l < 64 (zeros past n)
@compute @workgroup_size(64, 1, 1)
fn reduce_lanes(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) l: u32,
) {
  let w = wid.y * nwg.x + wid.x;
  if (w >= rp.groups) { return; }
  let base = w * LANES * LANE_ITEMS + l;
  var acc = 0.0;
  for (var k = 0u; k < LANE_ITEMS; k++) {
    let i = base + k * LANES;
    if (i < rp.n) { acc += term(i); }
  }
  dst[rp.dstOff + w * LANES + l] = acc;
}

// src: [n] (n small)  ->  dst[dstOff] = Σ src[i] (or Σ src[i]²), in index order. One invocation.
@compute @workgroup_size(1, 1, 1)
fn reduce_serial() {
  var acc = 0.0;
  for (var i = 0u; i < rp.n; i++) { acc += term(i); }
  dst[rp.dstOff] = acc;
}

var<workgroup> partial: array<f32, TREE_WG>;

// src: [n]  ->  dst[dstOff + w] for w < groups = ceil(n / 4096)
@compute @workgroup_size(256, 1, 1)
fn reduce_tree(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) l: u32,
) {
  // Uniform per workgroup, so returning before the barriers below is allowed.
  let w = wid.y * nwg.x + wid.x;
  if (w >= rp.groups) { return; }
  let base = w * TREE_WG * TREE_ITEMS + l;
  var acc = 0.0;
  for (var k = 0u; k < TREE_ITEMS; k++) {
    let i = base + k * TREE_WG;
    if (i < rp.n) { acc += term(i); }
  }
  partial[l] = acc;
  workgroupBarrier();
  for (var s = TREE_WG / 2u; s > 0u; s >>= 1u) {
    if (l < s) { partial[l] += partial[l + s]; }
    workgroupBarrier();
  }
  if (l == 0u) { dst[rp.dstOff + w] = partial[0]; }
}

struct FinalizeParams {
  count: u32,    // gradient tensors, i.e. per-tensor slots after the header
  clip: u32,     // 1: clip to maxNorm; 0: clipScale = 1
  maxNorm: f32,
  _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> normState: array<f32>;
@group(0) @binding(1) var<uniform> fp: FinalizeParams;

// normState: [8 + count]; reads the per-tensor slots, writes the header. One invocation: `count` is
// the number of parameter tensors (hundreds at most), and a fixed order keeps the result deterministic.
@compute @workgroup_size(1, 1, 1)
fn grad_norm_finalize() {
  var s = 0.0;
  for (var k = 0u; k < fp.count; k++) { s += normState[HEADER + k]; }
  // WGSL lets compilers assume floats are finite, so isinf/isnan-style comparisons may be folded
  // away. The exponent bits cannot be: all ones means inf or NaN. Squares are >= 0, so an inf or a
  // NaN anywhere in the gradients (or an overflowing Σ g²) ends up here.
  let nonFinite = (bitcast<u32>(s) & 0x7f800000u) == 0x7f800000u;
  var norm = s;  // keeps the inf / NaN bits when not finite
  var scale = 1.0;
  if (!nonFinite) {
    norm = sqrt(s);
    if (fp.clip != 0u) { scale = min(1.0, fp.maxNorm / (norm + 1e-6)); }
  } else {
    scale = 0.0;
  }
  normState[0] = s;
  normState[1] = norm;
  normState[2] = scale;
  normState[3] = select(0.0, 1.0, nonFinite);
  normState[4] = select(0.0, fp.maxNorm, fp.clip != 0u);
  normState[5] = 0.0;
  normState[6] = 0.0;
  normState[7] = 0.0;
}

// ---------------------------------------------------------------------------------------------------
// Fused AdamW step, torch.optim.AdamW semantics (decoupled weight decay, bias correction, eps added
// to sqrt(v̂)), one dispatch per parameter tensor (or per binding-sized chunk of a huge one):
//   g  = grad * clipScale                       clipScale = gstate[2]
//   p  = p * (1 - lr*wd)
//   m  = β1 m + (1-β1) g
//   v  = β2 v + (1-β2) g²
//   p  = p - (lr / (1-β1^t)) * m / (sqrt(v) / sqrt(1-β2^t) + eps)
// If gstate[3] (nonFinite) is set, the step is skipped: p, m and v are left exactly as they were.
// Per-step scalars live in a small storage tensor `hyper` ([params, 8], one row per parameter,
// rewritten once per step from the CPU, where bias corrections are computed in float64), so the
// uniform holds only static values and stays cached across steps.
//   hyper row: [β1, 1-β1, β2, 1-β2, eps, 1 - lr*wd, lr/(1-β1^t), 1/sqrt(1-β2^t)]

struct AdamParams {
  n: u32,       // elements in this dispatch (one tensor, or one chunk of it)
  groups: u32,  // workgroups that do work
  row: u32,     // this parameter's row in `hyper`
  _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> P: array<f32>;
@group(0) @binding(1) var<storage, read> G: array<f32>;
@group(0) @binding(2) var<storage, read_write> M: array<f32>;
@group(0) @binding(3) var<storage, read_write> V: array<f32>;
@group(0) @binding(4) var<storage, read> gstate: array<f32>;
@group(0) @binding(5) var<storage, read> hyper: array<f32>;
@group(0) @binding(6) var<uniform> ap: AdamParams;

// P, G, M, V: [n] (same element range of four same-sized tensors); gstate: [>= 4]; hyper: [rows, 8]
@compute @workgroup_size(64, 1, 1)
fn adamw_step(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) l: u32,
) {
  let w = wid.y * nwg.x + wid.x;
  let i = w * 64u + l;
  if (w >= ap.groups || i >= ap.n) { return; }
  if (gstate[3] != 0.0) { return; }  // non-finite gradients: skip the whole step
  let h = ap.row * 8u;
  let g = G[i] * gstate[2];
  let m = hyper[h] * M[i] + hyper[h + 1u] * g;
  let v = hyper[h + 2u] * V[i] + hyper[h + 3u] * (g * g);
  M[i] = m;
  V[i] = v;
  let denom = sqrt(v) * hyper[h + 7u] + hyper[h + 4u];
  P[i] = P[i] * hyper[h + 5u] - hyper[h + 6u] * (m / denom);
}
