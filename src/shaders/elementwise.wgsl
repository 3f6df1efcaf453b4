// Pointwise ops of the decoder block, forward and backward, plus the deterministic column sum.
//
//   swiglu_fwd         h = silu(g) * u                                 g, u: [N, F], or packed [N, 2F]
//   swiglu_bwd         dg = dh * u * silu'(g),  du = dh * silu(g)      separate dg, du
//   swiglu_bwd_packed  same, dg and du written into one packed [N, 2F] buffer (g | u halves)
//   add                y = a + alpha * b                               residual add (alpha = 1)
//   axpy               y += alpha * x                                  in-place accumulate
//   scale              y *= alpha                                      in place
//   bias_add           y[r, :] += b  (and y[r, :] = 0 where seg[r] == 0)   y: [R, C], b: [C]
//   colsum             dst[c, j] (+)= Σ_{r in chunk c, seg[r] != 0} src[r, j]   (bias backward)
//
// Every entry point is barrier-free and uses a 1-D index flattened over an [x, y] grid of 64-wide
// workgroups (see src/gpu/kernels/launch.ts): a dispatch dimension may not exceed 65535.
// Each entry point binds a contiguous 0..n-1 range (pipelines use layout 'auto'); variables that
// share a binding number belong to different entry points.
// Outputs are written without reading their old value unless the op accumulates, so NaN garbage
// in a pooled output buffer can never leak into a result.

const WG = 64u;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>) -> u32 {
  return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

// ---------------------------------------------------------------- SwiGLU

// Dense g, u: index directly. Packed [N, 2F]: row/column from an integer division, which CPU
// adapters pay dearly for (a vector u32 division is scalarised), hence a pipeline constant.
override PACKED: bool = false;

struct SwigluParams {
  count: u32,   // N * F
  F: u32,       // columns of h
  gStride: u32, // packed layout only: row stride of g (2F)
  gOff: u32,    // column offset of g in its rows (0)
  uStride: u32, // 2F
  uOff: u32,    // F
}

// sigmoid without overflow: exp only ever sees a non-positive argument, so it stays in (0, 1]
// and never becomes inf (WGSL leaves exp overflow implementation-defined).
fn sigmoid(x: f32) -> f32 {
  let e = exp(-abs(x));
  let s = 1.0 / (1.0 + e);
  return select(e * s, s, x >= 0.0);
}

// h = silu(g) * u, silu(g) = g * sigmoid(g).
// dh/dg = u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  dh/du = silu(g).
fn swiglu_grads(dh: f32, g: f32, u: f32) -> vec2<f32> {
  let s = sigmoid(g);
  let dsilu = s * (1.0 + g * (1.0 - s));
  return vec2<f32>(dh * u * dsilu, dh * g * s);
}

// swiglu_fwd: g, u dense [N, F] (PACKED = false) or the two halves of one packed [N, 2F] buffer
// bound twice read-only (PACKED = true, strides and offsets from the uniform); h: [N, F] dense.
@group(0) @binding(0) var<storage, read> sw_g: array<f32>;
@group(0) @binding(1) var<storage, read> sw_u: array<f32>;
@group(0) @binding(2) var<storage, read_write> sw_h: array<f32>;
@group(0) @binding(3) var<uniform> sp: SwigluParams;

@compute @workgroup_size(64, 1, 1)
fn swiglu_fwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  if (i >= sp.count) { return; }
  var gi = i;
  var ui = i;
  if (PACKED) {
    let r = i / sp.F;
    let c = i - r * sp.F;
    gi = r * sp.gStride + sp.gOff + c;
    ui = r * sp.uStride + sp.uOff + c;
  }
  let g = sw_g[gi];
  sw_h[i] = g * sigmoid(g) * sw_u[ui];
}

// swiglu_bwd: dh, g, u, dg, du all dense [N, F] (the packed layout has its own entry point).
@group(0) @binding(0) var<storage, read> sb_dh: array<f32>;
@group(0) @binding(1) var<storage, read> sb_g: array<f32>;
@group(0) @binding(2) var<storage, read> sb_u: array<f32>;
@group(0) @binding(3) var<storage, read_write> sb_dg: array<f32>;
@group(0) @binding(4) var<storage, read_write> sb_du: array<f32>;
@group(0) @binding(5) var<uniform> sbp: SwigluParams;

@compute @workgroup_size(64, 1, 1)
fn swiglu_bwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  if (i >= sbp.count) { return; }
  let d = swiglu_grads(sb_dh[i], sb_g[i], sb_u[i]);
  sb_dg[i] = d.x;
  sb_du[i] = d.y;
}

// swiglu_bwd_packed: gu: [N, 2F] = [g | u] per row (a fused gate_up projection), dgu: [N, 2F] the
// same layout, so dX = dgu · W_gate_upᵀ is one matmul. One writable binding: WebGPU forbids binding
// one buffer twice when either binding is writable.
@group(0) @binding(0) var<storage, read> sk_dh: array<f32>;
@group(0) @binding(1) var<storage, read> sk_gu: array<f32>;
@group(0) @binding(2) var<storage, read_write> sk_dgu: array<f32>;
@group(0) @binding(3) var<uniform> skp: SwigluParams;

@compute @workgroup_size(64, 1, 1)
fn swiglu_bwd_packed(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  if (i >= skp.count) { return; }
  let r = i / skp.F;
  let c = i - r * skp.F;
  let gi = r * skp.gStride + skp.gOff + c;
  let ui = r * skp.uStride + skp.uOff + c;
  let d = swiglu_grads(sk_dh[i], sk_gu[gi], sk_gu[ui]);
  sk_dgu[gi] = d.x;
  sk_dgu[ui] = d.y;
}

// ---------------------------------------------------------------- add, axpy, scale

struct AxpyParams {
  count: u32,
  alpha: f32,
}

// add: y = a + alpha * b, all [count]. y must be a third buffer (use axpy for in place).
@group(0) @binding(0) var<storage, read> ad_a: array<f32>;
@group(0) @binding(1) var<storage, read> ad_b: array<f32>;
@group(0) @binding(2) var<storage, read_write> ad_y: array<f32>;
@group(0) @binding(3) var<uniform> adp: AxpyParams;

@compute @workgroup_size(64, 1, 1)
fn add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  if (i >= adp.count) { return; }
  ad_y[i] = ad_a[i] + adp.alpha * ad_b[i];
}

// axpy: y += alpha * x, both [count] (residual accumulate, gradient accumulate).
@group(0) @binding(0) var<storage, read_write> ax_y: array<f32>;
@group(0) @binding(1) var<storage, read> ax_x: array<f32>;
@group(0) @binding(2) var<uniform> axp: AxpyParams;

@compute @workgroup_size(64, 1, 1)
fn axpy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  if (i >= axp.count) { return; }
  ax_y[i] = ax_y[i] + axp.alpha * ax_x[i];
}

// scale: y *= alpha, [count].
@group(0) @binding(0) var<storage, read_write> sc_y: array<f32>;
@group(0) @binding(1) var<uniform> scp: AxpyParams;

@compute @workgroup_size(64, 1, 1)
fn scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  if (i >= scp.count) { return; }
  sc_y[i] = sc_y[i] * scp.alpha;
}

// ---------------------------------------------------------------- bias

struct BiasParams {
  rows: u32,
  cols: u32,
  hasSeg: u32, // 1: rows with seg[r] == 0 are padding
}

// bias_add: y: [rows, cols] in place, b: [cols], seg: [rows] u32 (read only when hasSeg).
// Padding rows are SET to 0 rather than biased, so q/k/v at padding stay exactly 0 (matmul of a zero
// row is zero; the bias is what would make them non-zero) and the rest of the block keeps them 0.
@group(0) @binding(0) var<storage, read_write> ba_y: array<f32>;
@group(0) @binding(1) var<storage, read> ba_b: array<f32>;
@group(0) @binding(2) var<storage, read> ba_seg: array<u32>;
@group(0) @binding(3) var<uniform> bap: BiasParams;

@compute @workgroup_size(64, 1, 1)
fn bias_add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  if (i >= bap.rows * bap.cols) { return; }
  let r = i / bap.cols;
  let c = i - r * bap.cols;
  if (bap.hasSeg != 0u && ba_seg[r] == 0u) {
    ba_y[i] = 0.0;
  } else {
    ba_y[i] = ba_y[i] + ba_b[c];
  }
}

struct ColsumParams {
  rows: u32,
  cols: u32,
  rowsPerChunk: u32,
  hasSeg: u32,     // skip rows with seg[r] == 0
  accumulate: u32, // 1: dst += Σ, 0: dst = Σ (old dst never read)
}

// colsum: src: [rows, cols], seg: [rows], dst: [ceil(rows / rowsPerChunk), cols].
// One invocation per (chunk, column) sums its chunk's rows in order: deterministic, no atomics, no
// barriers; adjacent invocations read adjacent columns (coalesced). The bias gradient is one pass
// (rowsPerChunk = rows) on CPU adapters, or two on GPUs: partial sums per row chunk, then a colsum
// of the partials; the result depends only on the chunk size, never on scheduling.
@group(0) @binding(0) var<storage, read> cs_src: array<f32>;
@group(0) @binding(1) var<storage, read> cs_seg: array<u32>;
@group(0) @binding(2) var<storage, read_write> cs_dst: array<f32>;
@group(0) @binding(3) var<uniform> csp: ColsumParams;

@compute @workgroup_size(64, 1, 1)
fn colsum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  let nChunks = (csp.rows + csp.rowsPerChunk - 1u) / csp.rowsPerChunk;
  if (i >= nChunks * csp.cols) { return; }
  let chunk = i / csp.cols;
  let c = i - chunk * csp.cols;
  let r0 = chunk * csp.rowsPerChunk;
  let r1 = min(r0 + csp.rowsPerChunk, csp.rows);
  var acc = 0.0;
  for (var r = r0; r < r1; r++) {
    if (csp.hasSeg != 0u && cs_seg[r] == 0u) { continue; }
    acc += cs_src[r * csp.cols + c];
  }
  if (csp.accumulate != 0u) { acc += cs_dst[i]; }
  cs_dst[i] = acc;
}
