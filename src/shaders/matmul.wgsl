// Batched fp32 matmul:  C[b] = alpha * op(A[b]) · op(B[b]) + beta * C[b]
//   op(A): [M, K]   A stored [M, K] (TRANS_A = false) or [K, M] (TRANS_A = true)
//   op(B): [K, N]   B stored [K, N] (TRANS_B = false) or [N, K] (TRANS_B = true)
//   C:     [M, N]   row-major; batch b at offsets b*strideA, b*strideB, b*strideC (elements)
// A backward pass needs all three layouts: forward x·Wᵀ (NT), dX = dY·W (NN), dW = dYᵀ·x (TN).
// beta is 0 (overwrite) or 1 (accumulate, e.g. gradients over micro-batches); with beta = 0 the
// old C is never read, so garbage or NaN in a pooled buffer cannot leak in.
//
// Three entry points, chosen by the TS wrapper (per adapter, and by M):
//  - matmul_regblock: each invocation owns a 4x4 block of C, reads A and B straight from storage,
//    no workgroup memory, no barriers. Fastest on CPU adapters (lavapipe, SwiftShader), where
//    barriers and workgroup memory are expensive.
//    With REG_ROWS = 8 ('regblock8': an 8x4 block) the CPU adapters' choice when M > 8.
//  - matmul_tiled: 64x64 tiles of C per workgroup, 16-deep K slices staged in workgroup memory,
//    each invocation owns a 4x4 block. The usual shape for real GPUs.
//  - matmul_tiled128: 128x128 tiles, 8-deep K slices staged as vec4 in workgroup memory, each
//    invocation owns an 8x8 block (two 4-row by two 4-column groups, 64 apart, so a row of C is
//    written by 16 neighbouring invocations). 64 FMAs per 4 vec4 workgroup loads, against 16 per 8
//    scalar loads in matmul_tiled: 24-27 TFLOP/s on an H100 from 2048³ (docs/benchmarks.md; a first
//    version with dynamically indexed accumulators and scalar staging ran at 1.3-2). Needs enough
//    128x128 tiles to fill the GPU (the wrapper decides).
//  - matmul_skinny: M <= 4 (a decode step's LM head and projections): one invocation per output
//    column owns all ROWS rows, so no work goes to clamped duplicate rows (regblock at M = 1 did 4x
//    the FMAs and loads).
//  - matmul_gemv: M <= 4 with B stored [N, K] (x·Wᵀ) on real GPUs: 64 invocations share an output
//    column and read its row of B side by side; skinny's one-invocation-per-column has the 32 lanes
//    of a warp read 32 rows K floats apart.
// B may hold frozen weights in half precision: it is read only through load_b, which
// src/gpu/kernels/half.ts rewrites for f16 / bf16 storage (the products stay f32).
// Out-of-range rows/columns are clamped on load (valid memory, result discarded on store) so the
// inner loops have no branches; any M, N, K works, not only tile multiples.

struct Params {
  M: u32,
  N: u32,
  K: u32,
  batch: u32,
  strideA: u32,
  strideB: u32,
  strideC: u32,
  alpha: f32,
  beta: f32,
}

@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
fn load_b(i: u32) -> f32 { return B[i]; }
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

override TRANS_A: bool = false;
override TRANS_B: bool = false;
override ROWS: u32 = 4u; // matmul_skinny: rows per invocation (1, 2 or 4)
override REG_ROWS: u32 = 4u; // matmul_regblock: rows per invocation, 4 or 8 ('regblock8')

fn a_index(base: u32, m: u32, k: u32) -> u32 {
  if (TRANS_A) { return base + k * p.M + m; }
  return base + m * p.K + k;
}

fn b_index(base: u32, k: u32, n: u32) -> u32 {
  if (TRANS_B) { return base + n * p.K + k; }
  return base + k * p.N + n;
}

fn store(base: u32, m: u32, n: u32, acc: f32) {
  if (m < p.M && n < p.N) {
    let i = base + m * p.N + n;
    var v = p.alpha * acc;
    if (p.beta != 0.0) { v += p.beta * C[i]; }
    C[i] = v;
  }
}

// matmul_regblock: each invocation owns a REG_ROWS x 4 block of C. With 8 rows (the 'regblock8'
// variant: 32 FMAs per 12 loads instead of 16 per 8) the extra rows are written out under a branch
// on the pipeline constant, which the compiler folds away at 4; each entry's K sum runs in the same
// order either way, so both give the same bits.
@compute @workgroup_size(8, 8, 1)
fn matmul_regblock(@builtin(global_invocation_id) gid: vec3<u32>) {
  let b = gid.z;
  let m0 = gid.y * REG_ROWS;
  let n0 = gid.x * 4u;
  if (m0 >= p.M || n0 >= p.N) { return; }
  let wide = REG_ROWS == 8u;
  let baseA = b * p.strideA;
  let baseB = b * p.strideB;
  let mLast = p.M - 1u;
  let nLast = p.N - 1u;
  let r0 = m0; let r1 = min(m0 + 1u, mLast); let r2 = min(m0 + 2u, mLast); let r3 = min(m0 + 3u, mLast);
  let r4 = min(m0 + 4u, mLast); let r5 = min(m0 + 5u, mLast); let r6 = min(m0 + 6u, mLast); let r7 = min(m0 + 7u, mLast);
  let c0 = n0; let c1 = min(n0 + 1u, nLast); let c2 = min(n0 + 2u, nLast); let c3 = min(n0 + 3u, nLast);
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  var acc4 = vec4<f32>(0.0);
  var acc5 = vec4<f32>(0.0);
  var acc6 = vec4<f32>(0.0);
  var acc7 = vec4<f32>(0.0);
  for (var k = 0u; k < p.K; k++) {
    let a = vec4<f32>(A[a_index(baseA, r0, k)], A[a_index(baseA, r1, k)], A[a_index(baseA, r2, k)], A[a_index(baseA, r3, k)]);
    let bv = vec4<f32>(load_b(b_index(baseB, k, c0)), load_b(b_index(baseB, k, c1)), load_b(b_index(baseB, k, c2)), load_b(b_index(baseB, k, c3)));
    acc0 += a.x * bv;
    acc1 += a.y * bv;
    acc2 += a.z * bv;
    acc3 += a.w * bv;
    if (wide) {
      let a2 = vec4<f32>(A[a_index(baseA, r4, k)], A[a_index(baseA, r5, k)], A[a_index(baseA, r6, k)], A[a_index(baseA, r7, k)]);
      acc4 += a2.x * bv;
      acc5 += a2.y * bv;
      acc6 += a2.z * bv;
      acc7 += a2.w * bv;
    }
  }
  let baseC = b * p.strideC;
  for (var j = 0u; j < 4u; j++) {
    store(baseC, m0, n0 + j, acc0[j]);
    store(baseC, m0 + 1u, n0 + j, acc1[j]);
    store(baseC, m0 + 2u, n0 + j, acc2[j]);
    store(baseC, m0 + 3u, n0 + j, acc3[j]);
    if (wide) {
      store(baseC, m0 + 4u, n0 + j, acc4[j]);
      store(baseC, m0 + 5u, n0 + j, acc5[j]);
      store(baseC, m0 + 6u, n0 + j, acc6[j]);
      store(baseC, m0 + 7u, n0 + j, acc7[j]);
    }
  }
}

const BM = 64u;
const BN = 64u;
const BK = 16u;
var<workgroup> tileA: array<f32, 1024>; // [BK][BM]
var<workgroup> tileB: array<f32, 1024>; // [BK][BN]

@compute @workgroup_size(16, 16, 1)
fn matmul_tiled(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(local_invocation_index) li: u32,
) {
  let b = wid.z;
  let baseA = b * p.strideA;
  let baseB = b * p.strideB;
  let rowTile = wid.y * BM;
  let colTile = wid.x * BN;
  let mLast = p.M - 1u;
  let nLast = p.N - 1u;
  var acc: array<vec4<f32>, 4>;
  for (var i = 0u; i < 4u; i++) { acc[i] = vec4<f32>(0.0); }
  for (var k0 = 0u; k0 < p.K; k0 += BK) {
    // 256 invocations stage 1024 values of each tile, 4 each. Out-of-range K reads as 0.
    for (var s = 0u; s < 4u; s++) {
      let e = li + s * 256u;
      let kk = e / BM;
      let mm = e % BM;
      let k = k0 + kk;
      var av = 0.0;
      var bv = 0.0;
      if (k < p.K) {
        av = A[a_index(baseA, min(rowTile + mm, mLast), k)];
        bv = load_b(b_index(baseB, k, min(colTile + mm, nLast)));
      }
      tileA[kk * BM + mm] = av;
      tileB[kk * BN + mm] = bv;
    }
    workgroupBarrier();
    for (var kk = 0u; kk < BK; kk++) {
      let a = vec4<f32>(tileA[kk * BM + lid.y * 4u], tileA[kk * BM + lid.y * 4u + 1u],
                        tileA[kk * BM + lid.y * 4u + 2u], tileA[kk * BM + lid.y * 4u + 3u]);
      let bv = vec4<f32>(tileB[kk * BN + lid.x * 4u], tileB[kk * BN + lid.x * 4u + 1u],
                         tileB[kk * BN + lid.x * 4u + 2u], tileB[kk * BN + lid.x * 4u + 3u]);
      acc[0] += a.x * bv;
      acc[1] += a.y * bv;
      acc[2] += a.z * bv;
      acc[3] += a.w * bv;
    }
    workgroupBarrier();
  }
  let baseC = b * p.strideC;
  let m0 = rowTile + lid.y * 4u;
  let n0 = colTile + lid.x * 4u;
  for (var i = 0u; i < 4u; i++) {
    for (var j = 0u; j < 4u; j++) {
      store(baseC, m0 + i, n0 + j, acc[i][j]);
    }
  }
}

const BM2 = 128u;
const BK2 = 8u;
var<workgroup> tileA2: array<vec4<f32>, 256>; // [BK2][BM2 / 4]
var<workgroup> tileB2: array<vec4<f32>, 256>; // [BK2][BN2 / 4]

fn store4(baseC: u32, m: u32, n0: u32, v: vec4<f32>) {
  store(baseC, m, n0, v.x);
  store(baseC, m, n0 + 1u, v.y);
  store(baseC, m, n0 + 2u, v.z);
  store(baseC, m, n0 + 3u, v.w);
}

// Accumulators are indexed only by constants (the loops over them are written out) so that they can
// stay in registers; each invocation stages one vec4 of each tile per K slice, whole.
@compute @workgroup_size(16, 16, 1)
fn matmul_tiled128(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(local_invocation_index) li: u32,
) {
  let b = wid.z;
  let baseA = b * p.strideA;
  let baseB = b * p.strideB;
  let rowTile = wid.y * BM2;
  let colTile = wid.x * BM2;
  let mLast = p.M - 1u;
  let nLast = p.N - 1u;
  // Staging: the vec4 of 4 consecutive rows (columns) at one k. Neighbouring invocations take
  // neighbouring k where A (B) is stored k-contiguous, else neighbouring rows (columns).
  var ak: u32;
  var am4: u32;
  if (TRANS_A) { am4 = li % 32u; ak = li / 32u; } else { ak = li % BK2; am4 = li / BK2; }
  var bk: u32;
  var bn4: u32;
  if (TRANS_B) { bk = li % BK2; bn4 = li / BK2; } else { bn4 = li % 32u; bk = li / 32u; }
  let am = rowTile + am4 * 4u;
  let bn = colTile + bn4 * 4u;
  // acc[2 * r + g]: row r of the invocation's 8 (r < 4: lid.y * 4 + r; else 64 + lid.y * 4 + r - 4),
  // columns lid.x * 4 .. + 3 (g = 0) or 64 + lid.x * 4 .. + 3 (g = 1).
  var acc: array<vec4<f32>, 16>;
  acc[0] = vec4<f32>(0.0); acc[1] = vec4<f32>(0.0); acc[2] = vec4<f32>(0.0); acc[3] = vec4<f32>(0.0);
  acc[4] = vec4<f32>(0.0); acc[5] = vec4<f32>(0.0); acc[6] = vec4<f32>(0.0); acc[7] = vec4<f32>(0.0);
  acc[8] = vec4<f32>(0.0); acc[9] = vec4<f32>(0.0); acc[10] = vec4<f32>(0.0); acc[11] = vec4<f32>(0.0);
  acc[12] = vec4<f32>(0.0); acc[13] = vec4<f32>(0.0); acc[14] = vec4<f32>(0.0); acc[15] = vec4<f32>(0.0);
  for (var k0 = 0u; k0 < p.K; k0 += BK2) {
    var av = vec4<f32>(0.0);
    if (k0 + ak < p.K) {
      av = vec4<f32>(A[a_index(baseA, min(am, mLast), k0 + ak)], A[a_index(baseA, min(am + 1u, mLast), k0 + ak)],
                     A[a_index(baseA, min(am + 2u, mLast), k0 + ak)], A[a_index(baseA, min(am + 3u, mLast), k0 + ak)]);
    }
    tileA2[ak * 32u + am4] = av;
    var bv = vec4<f32>(0.0);
    if (k0 + bk < p.K) {
      bv = vec4<f32>(load_b(b_index(baseB, k0 + bk, min(bn, nLast))), load_b(b_index(baseB, k0 + bk, min(bn + 1u, nLast))),
                     load_b(b_index(baseB, k0 + bk, min(bn + 2u, nLast))), load_b(b_index(baseB, k0 + bk, min(bn + 3u, nLast))));
    }
    tileB2[bk * 32u + bn4] = bv;
    workgroupBarrier();
    for (var kk = 0u; kk < BK2; kk++) {
      let a0 = tileA2[kk * 32u + lid.y];
      let a1 = tileA2[kk * 32u + 16u + lid.y];
      let b0 = tileB2[kk * 32u + lid.x];
      let b1 = tileB2[kk * 32u + 16u + lid.x];
      acc[0] += a0.x * b0; acc[1] += a0.x * b1;
      acc[2] += a0.y * b0; acc[3] += a0.y * b1;
      acc[4] += a0.z * b0; acc[5] += a0.z * b1;
      acc[6] += a0.w * b0; acc[7] += a0.w * b1;
      acc[8] += a1.x * b0; acc[9] += a1.x * b1;
      acc[10] += a1.y * b0; acc[11] += a1.y * b1;
      acc[12] += a1.z * b0; acc[13] += a1.z * b1;
      acc[14] += a1.w * b0; acc[15] += a1.w * b1;
    }
    workgroupBarrier();
  }
  let baseC = b * p.strideC;
  let m0 = rowTile + lid.y * 4u;
  let m1 = rowTile + 64u + lid.y * 4u;
  let n0 = colTile + lid.x * 4u;
  let n1 = colTile + 64u + lid.x * 4u;
  store4(baseC, m0, n0, acc[0]); store4(baseC, m0, n1, acc[1]);
  store4(baseC, m0 + 1u, n0, acc[2]); store4(baseC, m0 + 1u, n1, acc[3]);
  store4(baseC, m0 + 2u, n0, acc[4]); store4(baseC, m0 + 2u, n1, acc[5]);
  store4(baseC, m0 + 3u, n0, acc[6]); store4(baseC, m0 + 3u, n1, acc[7]);
  store4(baseC, m1, n0, acc[8]); store4(baseC, m1, n1, acc[9]);
  store4(baseC, m1 + 1u, n0, acc[10]); store4(baseC, m1 + 1u, n1, acc[11]);
  store4(baseC, m1 + 2u, n0, acc[12]); store4(baseC, m1 + 2u, n1, acc[13]);
  store4(baseC, m1 + 3u, n0, acc[14]); store4(baseC, m1 + 3u, n1, acc[15]);
}

@compute @workgroup_size(64, 1, 1)
fn matmul_skinny(@builtin(global_invocation_id) gid: vec3<u32>) {
  let b = gid.z;
  let n = gid.x;
  let m0 = gid.y * ROWS;
  if (n >= p.N || m0 >= p.M) { return; }
  let baseA = b * p.strideA;
  let baseB = b * p.strideB;
  var rows: array<u32, 4>;
  for (var i = 0u; i < ROWS; i++) { rows[i] = min(m0 + i, p.M - 1u); }
  var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
  for (var k = 0u; k < p.K; k++) {
    let bv = load_b(b_index(baseB, k, n));
    for (var i = 0u; i < ROWS; i++) {
      acc[i] += A[a_index(baseA, rows[i], k)] * bv;
    }
  }
  let baseC = b * p.strideC;
  for (var i = 0u; i < ROWS; i++) {
    store(baseC, m0 + i, n, acc[i]);
  }
}

// One workgroup per output column n (a 2-D grid of columns, z = batch): invocation t takes k = t,
// t + 64, ... for 4 rows of A at a time (a vec4, one lane per row), and a tree in workgroup memory adds
// the 64 partial sums in a fixed order. Any M works (row blocks of 4 in turn, re-reading B's column):
// the wrapper picks it for M <= 4, where that is one pass.
var<workgroup> gemvPart: array<vec4<f32>, 64>;

@compute @workgroup_size(64, 1, 1)
fn matmul_gemv(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
) {
  let n = wid.y * nwg.x + wid.x;
  let b = wid.z;
  let t = lid.x;
  let nn = min(n, p.N - 1u); // a workgroup past N computes a clamped column and stores nothing
  let baseA = b * p.strideA;
  let baseB = b * p.strideB;
  let baseC = b * p.strideC;
  let mLast = p.M - 1u;
  for (var m0 = 0u; m0 < p.M; m0 += 4u) {
    let r1 = min(m0 + 1u, mLast);
    let r2 = min(m0 + 2u, mLast);
    let r3 = min(m0 + 3u, mLast);
    var acc = vec4<f32>(0.0);
    for (var k = t; k < p.K; k += 64u) {
      let w = load_b(b_index(baseB, k, nn));
      acc += w * vec4<f32>(A[a_index(baseA, m0, k)], A[a_index(baseA, r1, k)], A[a_index(baseA, r2, k)],
                           A[a_index(baseA, r3, k)]);
    }
    gemvPart[t] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
      if (t < s) { gemvPart[t] += gemvPart[t + s]; }
      workgroupBarrier();
    }
    if (t == 0u) {
      let v = gemvPart[0];
      store(baseC, m0, n, v.x);
      store(baseC, m0 + 1u, n, v.y);
      store(baseC, m0 + 2u, n, v.z);
      store(baseC, m0 + 3u, n, v.w);
    }
    workgroupBarrier(); // gemvPart is rewritten by the next row block
  }
}
