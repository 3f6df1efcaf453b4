// RMSNorm with a learned scale, forward and backward (HF Qwen2RMSNorm, all in f32):
//   rstd[r] = 1 / sqrt(mean_j x[r, j]² + eps)
//   y[r, j] = x[r, j] * rstd[r] * w[j]
// backward, with g = dy * w and xhat = x * rstd:
//   dx[r, j] = rstd[r] * (g[r, j] - xhat[r, j] * mean_k(g[r, k] * xhat[r, k]))
//   dw[j]    = Σ_r dy[r, j] * xhat[r, j]
// x, y, dy, dx: [rows, dim] row-major; w, dw: [dim]; rstd: [rows] (written by the forward, read by
// the backward). Qwen3's per-head q/k norm is the same op on a [N, H*hd] tensor viewed as
// [N*H, hd] (rows = N*H, dim = hd): head h of token n is row n*H + h, contiguous in memory.
// A zero row (padding) gives y = 0 and, with dy = 0 there, dx = 0 and no dw contribution.
//
// Two variants of the row kernels, chosen per adapter by the TS wrapper:
//  - *_row: one invocation per row loops over the row; no workgroup memory, no barriers. Best on CPU
//    adapters (lavapipe, SwiftShader), where barriers and workgroup memory are slow.
//  - *_wg: one 64-invocation workgroup per row, strided partial sums reduced through workgroup
//    memory; the usual shape for real GPUs (coalesced loads, rows spread over many cores).
// dw is a column reduction over rows, deterministic without atomics: rmsnorm_dw sums a chunk of
// rows per (chunk, column) invocation; with more than one chunk, rmsnorm_dw_reduce sums the chunks.
// Both are barrier-free and read adjacent columns from adjacent invocations.
// Each entry point binds a contiguous 0..n-1 range (pipelines use layout 'auto').

const WG = 64u;

struct Params {
  rows: u32,
  dim: u32,
  eps: f32,
  accumulate: u32, // backward: 1 = dx += result, 0 = dx = result (old dx never read)
}

fn row_of(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return wid.y * nwg.x + wid.x;
}

// ---------------------------------------------------------------- forward

@group(0) @binding(0) var<storage, read> f_x: array<f32>;
@group(0) @binding(1) var<storage, read> f_w: array<f32>;
@group(0) @binding(2) var<storage, read_write> f_y: array<f32>;
@group(0) @binding(3) var<storage, read_write> f_rstd: array<f32>;
@group(0) @binding(4) var<uniform> fp: Params;

// x [rows, dim], w [dim] -> y [rows, dim], rstd [rows]; one invocation per row.
@compute @workgroup_size(64, 1, 1)
fn rmsnorm_fwd_row(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_id) lid: vec3<u32>) {
  let r = row_of(wid, nwg) * WG + lid.x;
  if (r >= fp.rows) { return; }
  let base = r * fp.dim;
  var ss = 0.0;
  for (var j = 0u; j < fp.dim; j++) {
    let v = f_x[base + j];
    ss += v * v;
  }
  let rstd = 1.0 / sqrt(ss / f32(fp.dim) + fp.eps);
  f_rstd[r] = rstd;
  for (var j = 0u; j < fp.dim; j++) {
    f_y[base + j] = f_x[base + j] * rstd * f_w[j];
  }
}

var<workgroup> partial: array<f32, 64>;

// Tree sum of the 64 per-invocation partials; every invocation gets the total.
fn workgroup_sum(li: u32, v: f32) -> f32 {
  partial[li] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s = s / 2u) {
    if (li < s) { partial[li] += partial[li + s]; }
    workgroupBarrier();
  }
  let total = partial[0];
  workgroupBarrier(); // partial is reused by the next call
  return total;
}

// Same contract as rmsnorm_fwd_row; one 64-invocation workgroup per row.
@compute @workgroup_size(64, 1, 1)
fn rmsnorm_fwd_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) li: u32) {
  let r = row_of(wid, nwg);
  if (r >= fp.rows) { return; } // uniform: r depends on the workgroup id only
  let base = r * fp.dim;
  var ss = 0.0;
  for (var j = li; j < fp.dim; j += WG) {
    let v = f_x[base + j];
    ss += v * v;
  }
  let total = workgroup_sum(li, ss);
  let rstd = 1.0 / sqrt(total / f32(fp.dim) + fp.eps);
  if (li == 0u) { f_rstd[r] = rstd; }
  for (var j = li; j < fp.dim; j += WG) {
    f_y[base + j] = f_x[base + j] * rstd * f_w[j];
  }
}

// ---------------------------------------------------------------- backward: dx

@group(0) @binding(0) var<storage, read> b_dy: array<f32>;
@group(0) @binding(1) var<storage, read> b_x: array<f32>;
@group(0) @binding(2) var<storage, read> b_w: array<f32>;
@group(0) @binding(3) var<storage, read> b_rstd: array<f32>;
@group(0) @binding(4) var<storage, read_write> b_dx: array<f32>;
@group(0) @binding(5) var<uniform> bp: Params;

fn store_dx(i: u32, v: f32) {
  if (bp.accumulate != 0u) {
    b_dx[i] = b_dx[i] + v;
  } else {
    b_dx[i] = v;
  }
}

// dy, x [rows, dim], w [dim], rstd [rows] -> dx [rows, dim]; one invocation per row.
// dx = rstd * (dy*w - x * rstd² * mean(dy*w*x)), i.e. the formula above with xhat expanded.
@compute @workgroup_size(64, 1, 1)
fn rmsnorm_bwd_row(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_id) lid: vec3<u32>) {
  let r = row_of(wid, nwg) * WG + lid.x;
  if (r >= bp.rows) { return; }
  let base = r * bp.dim;
  let rstd = b_rstd[r];
  var dot = 0.0;
  for (var j = 0u; j < bp.dim; j++) {
    dot += b_dy[base + j] * b_w[j] * b_x[base + j];
  }
  let c = rstd * rstd * dot / f32(bp.dim);
  for (var j = 0u; j < bp.dim; j++) {
    let i = base + j;
    store_dx(i, rstd * (b_dy[i] * b_w[j] - b_x[i] * c));
  }
}

// Same contract as rmsnorm_bwd_row; one 64-invocation workgroup per row.
@compute @workgroup_size(64, 1, 1)
fn rmsnorm_bwd_wg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) li: u32) {
  let r = row_of(wid, nwg);
  if (r >= bp.rows) { return; }
  let base = r * bp.dim;
  let rstd = b_rstd[r];
  var dot = 0.0;
  for (var j = li; j < bp.dim; j += WG) {
    dot += b_dy[base + j] * b_w[j] * b_x[base + j];
  }
  let c = rstd * rstd * workgroup_sum(li, dot) / f32(bp.dim);
  for (var j = li; j < bp.dim; j += WG) {
    let i = base + j;
    store_dx(i, rstd * (b_dy[i] * b_w[j] - b_x[i] * c));
  }
}

// ---------------------------------------------------------------- backward: dw

struct DwParams {
  rows: u32,
  dim: u32,
  rowsPerChunk: u32,
  accumulate: u32, // 1 = dst += Σ, 0 = dst = Σ
}

@group(0) @binding(0) var<storage, read> w_dy: array<f32>;
@group(0) @binding(1) var<storage, read> w_x: array<f32>;
@group(0) @binding(2) var<storage, read> w_rstd: array<f32>;
@group(0) @binding(3) var<storage, read_write> w_dst: array<f32>;
@group(0) @binding(4) var<uniform> wp: DwParams;

// dy, x [rows, dim], rstd [rows] -> dst [ceil(rows / rowsPerChunk), dim]:
//   dst[c, j] (+)= Σ_{r in chunk c} dy[r, j] * x[r, j] * rstd[r]   (rows in order: deterministic)
// With one chunk, dst is dw itself.
@compute @workgroup_size(64, 1, 1)
fn rmsnorm_dw(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = row_of(wid, nwg) * WG + lid.x;
  let nChunks = (wp.rows + wp.rowsPerChunk - 1u) / wp.rowsPerChunk;
  if (i >= nChunks * wp.dim) { return; }
  let chunk = i / wp.dim;
  let j = i - chunk * wp.dim;
  let r0 = chunk * wp.rowsPerChunk;
  let r1 = min(r0 + wp.rowsPerChunk, wp.rows);
  var acc = 0.0;
  for (var r = r0; r < r1; r++) {
    let k = r * wp.dim + j;
    acc += w_dy[k] * w_x[k] * w_rstd[r];
  }
  if (wp.accumulate != 0u) { acc += w_dst[i]; }
  w_dst[i] = acc;
}

@group(0) @binding(0) var<storage, read> rd_partial: array<f32>;
@group(0) @binding(1) var<storage, read_write> rd_dw: array<f32>;
@group(0) @binding(2) var<uniform> rdp: DwParams;

// partial [chunks, dim] -> dw [dim] (+)= Σ_c partial[c, :]   (rows = chunks here)
@compute @workgroup_size(64, 1, 1)
fn rmsnorm_dw_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_id) lid: vec3<u32>) {
  let j = row_of(wid, nwg) * WG + lid.x;
  if (j >= rdp.dim) { return; }
  var acc = 0.0;
  for (var c = 0u; c < rdp.rows; c++) {
    acc += rd_partial[c * rdp.dim + j];
  }
  if (rdp.accumulate != 0u) { acc += rd_dw[j]; }
  rd_dw[j] = acc;
}
