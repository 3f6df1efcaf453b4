// Token embedding lookup and its backward, deterministic without float atomics.
//
//   embedding_fwd   out[n, :] = E[ids[n], :]             ids [N] u32, E [V, D], out [N, D]
//                   padding (seg[n] == 0): out[n, :] = 0 exactly
//                   ids[n] >= V (not padding): out[n, :] = NaN, so a bad id poisons the loss
//                   instead of silently reading another row
//   embedding_bwd   dE[id, :] += Σ_{n : ids[n] == id, seg[n] != 0} dOut[n, :]   for touched ids only
//
// A table bigger than maxStorageBufferBindingSize (Qwen: 151,936 x 896 f32 = 544 MB) is bound one
// row block ("chunk", rows [v0, v1)) at a time; the wrapper dispatches once per chunk.
//
// The backward takes a plan built on the CPU from the token ids (known there at train time): the
// non-padding positions sorted by (id, position), as
//   plan = [ uniqueIds (U) | offsets (U + 1) | positions (M) ]       (u32)
// unique id u owns positions[offsets[u] .. offsets[u + 1]). One invocation per (unique id, column)
// sums its rows in position order and adds the total to dE once: repeated tokens are summed in a
// fixed order (deterministic), rows of dE that no token touches are never read or written, and
// the work is O(N * D), not O(V * D). The caller zeroes dE once per step (or lets the tied LM head
// write it first); this kernel only accumulates.
// Each entry point binds a contiguous 0..n-1 range (pipelines use layout 'auto').

const WG = 64u;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>) -> u32 {
  return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

struct FwdParams {
  N: u32,
  D: u32,
  v0: u32,      // first table row in this chunk
  v1: u32,      // one past the last
  vocab: u32,   // V
  hasSeg: u32,
  first: u32,   // 1 for the first chunk: it writes padding zeros and out-of-range NaN rows
  nanBits: u32, // 0x7fc00000 from the uniform: a NaN constant expression would not compile
}

@group(0) @binding(0) var<storage, read> f_ids: array<u32>;
@group(0) @binding(1) var<storage, read> f_seg: array<u32>;
@group(0) @binding(2) var<storage, read> f_table: array<f32>; // rows [v0, v1) of E
// The table is read only through load_table: src/gpu/kernels/half.ts rewrites both lines for f16 /
// bf16 tables (frozen weights).
fn load_table(i: u32) -> f32 { return f_table[i]; }
@group(0) @binding(3) var<storage, read_write> f_out: array<f32>;
@group(0) @binding(4) var<uniform> fp: FwdParams;

// ids [N], seg [N], E[v0:v1, :] -> out [N, D]; one invocation per output element.
@compute @workgroup_size(64, 1, 1)
fn embedding_fwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flat_index(wid, nwg, lid);
  if (i >= fp.N * fp.D) { return; }
  let n = i / fp.D;
  let j = i - n * fp.D;
  if (fp.hasSeg != 0u && f_seg[n] == 0u) {
    if (fp.first != 0u) { f_out[i] = 0.0; }
    return;
  }
  let id = f_ids[n];
  if (id >= fp.vocab) {
    if (fp.first != 0u) { f_out[i] = bitcast<f32>(fp.nanBits); }
    return;
  }
  if (id < fp.v0 || id >= fp.v1) { return; } // another chunk's row
  f_out[i] = load_table((id - fp.v0) * fp.D + j);
}

struct BwdParams {
  D: u32,
  u0: u32,        // unique ids [u0, u1) fall in this chunk
  u1: u32,
  v0: u32,        // first table row of the chunk bound as dE
  offsets: u32,   // where offsets start in plan (= U)
  positions: u32, // where positions start in plan (= 2U + 1)
}

@group(0) @binding(0) var<storage, read> b_dout: array<f32>;
@group(0) @binding(1) var<storage, read> b_plan: array<u32>;
@group(0) @binding(2) var<storage, read_write> b_dtable: array<f32>; // rows [v0, ..) of dE
@group(0) @binding(3) var<uniform> bp: BwdParams;

// dOut [N, D], plan -> dE[uniqueIds[u], :] += Σ dOut[positions of u, :] for u in [u0, u1).
@compute @workgroup_size(64, 1, 1)
fn embedding_bwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_id) lid: vec3<u32>) {
  let t = flat_index(wid, nwg, lid);
  if (t >= (bp.u1 - bp.u0) * bp.D) { return; }
  let u = bp.u0 + t / bp.D;
  let j = t % bp.D;
  let id = b_plan[u];
  let start = b_plan[bp.offsets + u];
  let end = b_plan[bp.offsets + u + 1u];
  var acc = 0.0;
  for (var k = start; k < end; k++) {
    acc += b_dout[b_plan[bp.positions + k] * bp.D + j];
  }
  let o = (id - bp.v0) * bp.D + j;
  b_dtable[o] = b_dtable[o] + acc;
}
