// Helpers for the linear layer y[N, out] = x[N, in] · Wᵀ + b. The products themselves run on
// matmul.wgsl; this file holds the small elementwise pieces around them:
//  - bias_add      y += b, broadcast over rows (forward)
//  - bias_grad     db = (db +) Σ_rows dY, one invocation per column, rows summed in order: a
//                  deterministic reduction without atomics or workgroup barriers
//  - scatter_cols  y[:, c0 : c0+C] = tmp (+ b[c0 : c0+C])   (forward, W chunked into row blocks)
//  - gather_cols   tmp = dY[:, c0 : c0+C]                     (backward, W chunked into row blocks)
// The chunked path exists because a weight bigger than maxStorageBufferBindingSize (the LM head:
// 151,936 × 896 f32 = 544 MB) can only be bound a row block at a time; the block's output columns
// are strided in y, and matmul writes dense [M, N], so the block goes through a dense temporary.
//
// Elementwise entry points use a 1-D index flattened over a 2-D grid (x then y) so that more than
// 65535 workgroups' worth of elements fit the per-dimension dispatch limit.
// Each entry point binds a contiguous 0..n-1 range (pipelines use layout 'auto'); variables that
// share a binding number belong to different entry points.

struct Params {
  rows: u32,       // N
  cols: u32,       // columns of y / dY (out)
  chunkCols: u32,  // columns in this block (chunked path)
  c0: u32,         // first column of this block in y / dY
  accumulate: u32, // bias_grad: 1 = db += Σ, 0 = db = Σ
}

override HAS_BIAS: bool = true;

fn flat_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return gid.y * (nwg.x * 64u) + gid.x;
}

// ---------------------------------------------------------------- bias_add
// y: [rows, cols] (in place), b: [cols]

@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<storage, read> bias: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64, 1, 1)
fn bias_add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i >= p.rows * p.cols) { return; }
  y[i] = y[i] + bias[i % p.cols];
}

// ---------------------------------------------------------------- bias_grad
// dy: [rows, cols], db: [cols]. One invocation per column; neighbouring invocations read
// neighbouring addresses of each row, so loads coalesce on a GPU.

@group(0) @binding(0) var<storage, read> dy: array<f32>;
@group(0) @binding(1) var<storage, read_write> db: array<f32>;

@compute @workgroup_size(64, 1, 1)
fn bias_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let j = flat_index(gid, nwg);
  if (j >= p.cols) { return; }
  var acc = 0.0;
  for (var n = 0u; n < p.rows; n++) {
    acc += dy[n * p.cols + j];
  }
  if (p.accumulate != 0u) { acc += db[j]; }
  db[j] = acc;
}

// ---------------------------------------------------------------- scatter_cols
// tmp: [rows, chunkCols] -> y[:, c0 : c0+chunkCols] of [rows, cols], adding b[c0 + j] if HAS_BIAS
// (without a bias the wrapper binds tmp again at binding 2; it is never read).

@group(0) @binding(0) var<storage, read> tmp_in: array<f32>;
@group(0) @binding(1) var<storage, read_write> y_out: array<f32>;
@group(0) @binding(2) var<storage, read> bias_in: array<f32>;
@group(0) @binding(3) var<uniform> ps: Params;

@compute @workgroup_size(64, 1, 1)
fn scatter_cols(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i >= ps.rows * ps.chunkCols) { return; }
  let n = i / ps.chunkCols;
  let j = i % ps.chunkCols;
  var v = tmp_in[i];
  if (HAS_BIAS) { v += bias_in[ps.c0 + j]; }
  y_out[n * ps.cols + ps.c0 + j] = v;
}

// ---------------------------------------------------------------- gather_cols
// dy[:, c0 : c0+chunkCols] of [rows, cols] -> tmp: [rows, chunkCols]

@group(0) @binding(0) var<storage, read> dy_in: array<f32>;
@group(0) @binding(1) var<storage, read_write> tmp_out: array<f32>;
@group(0) @binding(2) var<uniform> pg: Params;

@compute @workgroup_size(64, 1, 1)
fn gather_cols(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_index(gid, nwg);
  if (i >= pg.rows * pg.chunkCols) { return; }
  let n = i / pg.chunkCols;
  let j = i % pg.chunkCols;
  tmp_out[i] = dy_in[n * pg.cols + pg.c0 + j];
}
