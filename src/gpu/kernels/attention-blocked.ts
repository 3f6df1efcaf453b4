// Query-blocked, unrolled attention kernels for CPU adapters (lavapipe, SwiftShader): the WGSL is
// generated here for one head size and one block size, and attention.ts dispatches it in place of
// the generic loops of src/shaders/attention.wgsl. Same bindings, same masking rule, same sums in the
// same order; only the work per invocation differs.
//
// The training kernels (not the decode one) read each token's segment span (binding 12) and loop
// over those slots alone, as the generic ones do.
//
// Why generated: a CPU adapter runs invocations as SIMD lanes, and in the generic kernels each lane
// keeps its rows (q, the accumulators) in private arrays indexed by a runtime loop counter. Measured
// on lavapipe (qwen-tiny's attention, hd 32, 4 rows × 700 tokens), those arrays live in memory and
// a key's k and v rows are gathered once per query: about 700 cycles per (query, key, head). Here
// every row is a named vec4 variable (registers and plain spills, no indexed arrays), and one
// invocation owns a block of consecutive queries (or keys, for dK/dV) that share each k/v (or q/dO)
// row it loads. At that shape (`npm run bench:attention`): forward 2.7×, backward 3.8× faster with
// blocks of 4; the same code unblocked is no faster than the loops, and vec4-wide private arrays
// of a block are 2-4× slower. The price is compile time, which grows with block × head size
// (lavapipe, hd 32, block 4: about 10 s for the forward, 60 s for dQ + dK/dV, once per machine with
// Mesa's disk cache; SwiftShader: a few seconds), so blocks are sized to a fixed number of vec4s.
//
// Real GPUs keep the generic kernels: there registers per thread limit occupancy, and the dK/dV
// 'chunks' variant is what fills the machine (attention.ts, DkvVariant).
//
// Work split (B batch rows of T tokens; blocks never cross a batch row):
//   attn_fwd_blocked     one invocation per (block of `block` queries, head): o, lse
//   attn_bwd_dq_blocked  one invocation per (block of queries, head): dq, and D = dO·o per query
//   attn_bwd_dkv_blocked one invocation per (block of `block` keys, kv head): dk, dv, summing the
//                        later queries of every query head that shares the kv head, in a fixed order
//   attn_decode_blocked  one invocation per (block of a cache row's new tokens, kv head), with the
//                        kv head's query heads: o, lse (decode steps: blocks of one token)

/** Blocks are sized so that block × head dim / 4 is this many vec4s: 4 at hd 32, 8 at hd 16. */
const BLOCK_VEC4S = 32;
const MAX_BLOCK = 8;

/**
 * The block size for a head dimension on a CPU adapter: the same for the forward, dQ and dK/dV, or
 * 1 (the generic kernels) where a block of one would be all that fits.
 */
export function attentionBlock(headDim: number): number {
  return Math.max(1, Math.min(MAX_BLOCK, Math.floor(BLOCK_VEC4S / (headDim / 4))));
}

/**
 * KV-cache decoding on a CPU adapter: queries per block of a row's new tokens, each with every query
 * head of its kv head (the group shares each k/v load), or 0 where the group alone is over the
 * register budget (the generic kernel then).
 */
export function decodeQueryBlock(headDim: number, group: number): number {
  const items = Math.floor(BLOCK_VEC4S / (headDim / 4));
  return group > items ? 0 : Math.min(MAX_BLOCK, Math.floor(items / group));
}

export type BlockedEntry =
  | 'attn_fwd_blocked'
  | 'attn_bwd_dq_blocked'
  | 'attn_bwd_dkv_blocked'
  | 'attn_decode_blocked';

/** n lines (or terms) from f(0..n-1), joined. */
function each(n: number, f: (i: number) => string, sep = '\n'): string {
  return Array.from({ length: n }, (_, i) => f(i)).join(sep);
}

/** hsum(a0 * b0 + a1 * b1 + ...): a dot product over hd4 named vec4s, in the generic kernels' order. */
function dot(hd4: number, a: (d: number) => string, b: (d: number) => string): string {
  return `hsum(${each(hd4, (d) => `${a(d)} * ${b(d)}`, ' + ')})`;
}

// The Params uniform of attention.wgsl (same layout: the wrapper writes one for both kernel sets).
const HEADER = `
struct Params {
  nQ: u32,
  Tq: u32,
  S: u32,
  nH: u32,
  nKv: u32,
  scale: f32,
  hd4: u32,
  chunk: u32,
}
@group(0) @binding(6) var<uniform> p: Params;
const NEG_BIG = -1.0e30;

fn hsum(x: vec4<f32>) -> f32 {
  return (x.x + x.y) + (x.z + x.w);
}
`;

// The block an invocation owns: x (split over z past 65535 workgroups) counts blocks of BLOCK
// consecutive slots, row after row; y is the head (kv head for dK/dV). Sets b, t0 (first slot of
// the block) and rowBase, or returns past the last row.
function blockIndex(block: number): string {
  return `
  let blk = (wid.z * nwg.x + wid.x) * 64u + lid.x;
  let blocksPerRow = (p.Tq + ${block - 1}u) / ${block}u;
  let b = blk / blocksPerRow;
  if (b * p.Tq >= p.nQ) { return; }
  let t0 = (blk - b * blocksPerRow) * ${block}u;
  let rowBase = b * p.S;`;
}

// Item r of the block: slot t0 + r if inside the row (has_r), its token index (clamped inside the
// row so loads stay in bounds) and its segment id (0 when outside: it then matches no key).
function blockItem(r: number, seg: string): string {
  return `
  let has${r} = t0 + ${r}u < p.Tq;
  let i${r} = rowBase + min(t0 + ${r}u, p.Tq - 1u);
  let seg${r} = select(0u, ${seg}[i${r}], has${r});`;
}

const ENTRY_ARGS = `
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,`;

// Each token's segment span (attention.wgsl's header): the training kernels' loop bounds.
const SPANS = '@group(0) @binding(12) var<storage, read> spans: array<vec2<u32>>;';

/**
 * The first key slot a block of queries needs: the smallest span start of its items (a block may
 * straddle two sequences of a packed row).
 */
function firstKey(R: number): string {
  return `  var jStart = t0;
${each(R, (r) => `  if (has${r}) { jStart = min(jStart, spans[i${r}].x); }`)}`;
}

// The forward's bindings (attn_fwd_blocked; attn_decode_blocked adds slots and block starts).
const FORWARD_BINDINGS = `@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> seg: array<u32>;
@group(0) @binding(4) var<storage, read_write> o: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;`;

// The inputs of both backward kernels (each adds D, and o / dq or dk / dv, at bindings 7-9).
const BACKWARD_INPUTS = `${SPANS}
@group(0) @binding(0) var<storage, read> bq: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> bk: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> bv: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bseg: array<u32>;
@group(0) @binding(4) var<storage, read> blse: array<f32>;
@group(0) @binding(5) var<storage, read> bdo: array<vec4<f32>>;`;

/** Query x's registers (its q row at qb_x, scaled), accumulators, running max and sum. */
function queryRegisters(x: string, hd4: number): string {
  return `${each(hd4, (d) => `  let q${x}_${d} = q[qb${x} + ${d}u] * p.scale;`)}
${each(hd4, (d) => `  var acc${x}_${d} = vec4<f32>(0.0);`)}
  var m${x} = NEG_BIG;
  var l${x} = 0.0;`;
}

/** Key j's rows k0.., v0.. (at kb), loaded once for every item of the block. */
function keyRows(hd4: number, k: string, v: string): string {
  return `${each(hd4, (d) => `    let k${d} = ${k}[kb + ${d}u];`)}
${each(hd4, (d) => `    let v${d} = ${v}[kb + ${d}u];`)}`;
}

/** One key of query x's online softmax, where `allowed`: the max grows lazily, as in attention.wgsl. */
function onlineSoftmaxStep(x: string, hd4: number, allowed: string): string {
  return `    if (${allowed}) {
      let s = ${dot(
        hd4,
        (d) => `q${x}_${d}`,
        (d) => `k${d}`,
      )};
      if (s > m${x}) {
        let c = exp(m${x} - s);
        l${x} *= c;
${each(hd4, (d) => `        acc${x}_${d} *= c;`)}
        m${x} = s;
      }
      let e = exp(s - m${x});
      l${x} += e;
${each(hd4, (d) => `      acc${x}_${d} += e * v${d};`)}
    }`;
}

/** Query x's o row and its lse (at `lseAt`) if it exists (`has`); a padding query (seg 0) gets 0. */
function writeQuery(x: string, hd4: number, has: string, seg: string, lseAt: string): string {
  return `  if (${has}) {
    let inv = select(0.0, 1.0 / l${x}, ${seg} != 0u);
${each(hd4, (d) => `    o[qb${x} + ${d}u] = acc${x}_${d} * inv;`)}
    lse[${lseAt}] = select(0.0, m${x} + log(l${x}), ${seg} != 0u);
  }`;
}

/** The forward: online softmax per query of the block, one k/v row load per key for the block. */
function forwardWgsl(hd4: number, block: number): string {
  const R = block;
  return `${HEADER}
${FORWARD_BINDINGS}
${SPANS}

@compute @workgroup_size(64, 1, 1)
fn attn_fwd_blocked(${ENTRY_ARGS}
) {${blockIndex(block)}
  let h = wid.y;
  let kvStride = p.nKv * ${hd4}u;
  let kvOff = (h / (p.nH / p.nKv)) * ${hd4}u;
${each(
  R,
  (r) => `${blockItem(r, 'seg')}
  let qb${r} = (i${r} * p.nH + h) * ${hd4}u;
${queryRegisters(`${r}`, hd4)}`,
)}
  let tEnd = min(t0 + ${block}u, p.Tq);
${firstKey(R)}
  for (var j = jStart; j < tEnd; j++) {
    let sj = seg[rowBase + j];
    if (sj == 0u) { continue; }
    let kb = (rowBase + j) * kvStride + kvOff;
${keyRows(hd4, 'k', 'v')}
${each(R, (r) => onlineSoftmaxStep(`${r}`, hd4, `seg${r} == sj && j <= t0 + ${r}u`))}
  }
${each(R, (r) => writeQuery(`${r}`, hd4, `has${r}`, `seg${r}`, `i${r} * p.nH + h`))}
}
`;
}

/** dQ and D: per query of the block, the scores recomputed from lse against one k/v load per key. */
function dqWgsl(hd4: number, block: number): string {
  const R = block;
  return `${HEADER}
${BACKWARD_INPUTS}
@group(0) @binding(7) var<storage, read_write> bD: array<f32>;
@group(0) @binding(8) var<storage, read> bo: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> bdq: array<vec4<f32>>;

@compute @workgroup_size(64, 1, 1)
fn attn_bwd_dq_blocked(${ENTRY_ARGS}
) {${blockIndex(block)}
  let h = wid.y;
  let kvStride = p.nKv * ${hd4}u;
  let kvOff = (h / (p.nH / p.nKv)) * ${hd4}u;
${each(
  R,
  (r) => `${blockItem(r, 'bseg')}
  let qb${r} = (i${r} * p.nH + h) * ${hd4}u;
${each(hd4, (d) => `  let q${r}_${d} = bq[qb${r} + ${d}u] * p.scale;`)}
${each(hd4, (d) => `  let do${r}_${d} = bdo[qb${r} + ${d}u];`)}
${each(hd4, (d) => `  var acc${r}_${d} = vec4<f32>(0.0);`)}
  let D${r} = select(0.0, ${dot(
    hd4,
    (d) => `do${r}_${d}`,
    (d) => `bo[qb${r} + ${d}u]`,
  )}, seg${r} != 0u);
  let L${r} = blse[i${r} * p.nH + h];
  if (has${r}) { bD[i${r} * p.nH + h] = D${r}; }`,
)}
  let tEnd = min(t0 + ${block}u, p.Tq);
${firstKey(R)}
  for (var j = jStart; j < tEnd; j++) {
    let sj = bseg[rowBase + j];
    if (sj == 0u) { continue; }
    let kb = (rowBase + j) * kvStride + kvOff;
${keyRows(hd4, 'bk', 'bv')}
${each(
  R,
  (r) => `    if (seg${r} == sj && j <= t0 + ${r}u) {
      let ds = exp(${dot(
        hd4,
        (d) => `q${r}_${d}`,
        (d) => `k${d}`,
      )} - L${r}) * (${dot(
        hd4,
        (d) => `do${r}_${d}`,
        (d) => `v${d}`,
      )} - D${r});
${each(hd4, (d) => `      acc${r}_${d} += ds * k${d};`)}
    }`,
)}
  }
${each(
  R,
  (r) => `  if (has${r}) {
${each(hd4, (d) => `    bdq[qb${r} + ${d}u] = acc${r}_${d} * p.scale;`)}
  }`,
)}
}
`;
}

/** dK and dV: per key of the block, every later query of the row and of each head of its kv group. */
function dkvWgsl(hd4: number, block: number): string {
  const R = block;
  return `${HEADER}
${BACKWARD_INPUTS}
@group(0) @binding(7) var<storage, read> bD: array<f32>;
@group(0) @binding(8) var<storage, read_write> bdk: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> bdv: array<vec4<f32>>;

@compute @workgroup_size(64, 1, 1)
fn attn_bwd_dkv_blocked(${ENTRY_ARGS}
) {${blockIndex(block)}
  let g = wid.y;
  let group = p.nH / p.nKv;
${each(
  R,
  (r) => `${blockItem(r, 'bseg')}
  let kvb${r} = (i${r} * p.nKv + g) * ${hd4}u;
${each(hd4, (d) => `  let k${r}_${d} = bk[kvb${r} + ${d}u] * p.scale;`)}
${each(hd4, (d) => `  let v${r}_${d} = bv[kvb${r} + ${d}u];`)}
${each(hd4, (d) => `  var dk${r}_${d} = vec4<f32>(0.0);`)}
${each(hd4, (d) => `  var dv${r}_${d} = vec4<f32>(0.0);`)}`,
)}
  var tStop = t0;
${each(R, (r) => `  if (has${r}) { tStop = max(tStop, spans[i${r}].y); }`)}
  for (var t = t0; t < tStop; t++) {
    let i = rowBase + t;
    let si = bseg[i];
    if (si == 0u) { continue; }
    for (var hh = 0u; hh < group; hh++) {
      let h = g * group + hh;
      let qb = (i * p.nH + h) * ${hd4}u;
${each(hd4, (d) => `      let q${d} = bq[qb + ${d}u];`)}
${each(hd4, (d) => `      let do${d} = bdo[qb + ${d}u];`)}
      let L = blse[i * p.nH + h];
      let Di = bD[i * p.nH + h];
${each(
  R,
  (r) => `      if (seg${r} == si && t0 + ${r}u <= t) {
        let pij = exp(${dot(
          hd4,
          (d) => `q${d}`,
          (d) => `k${r}_${d}`,
        )} - L);
        let ds = pij * (${dot(
          hd4,
          (d) => `do${d}`,
          (d) => `v${r}_${d}`,
        )} - Di);
${each(hd4, (d) => `        dv${r}_${d} += pij * do${d};`)}
${each(hd4, (d) => `        dk${r}_${d} += ds * q${d};`)}
      }`,
)}
    }
  }
${each(
  R,
  (r) => `  if (has${r}) {
${each(hd4, (d) => `    bdk[kvb${r} + ${d}u] = dk${r}_${d} * p.scale;`)}
${each(hd4, (d) => `    bdv[kvb${r} + ${d}u] = dv${r}_${d};`)}
  }`,
)}
}
`;
}

/**
 * KV-cache decoding: one invocation per (block of up to `block` consecutive new tokens of one cache
 * row, kv head), with the `group` query heads that share the kv head. With block 1 every new token
 * is a block (decode steps: one token per row); with more, starts[] lists each block's first token
 * (kvQueryBlocks: blocks never cross a row). A token belongs to the block if it is at the next slot
 * of the same row, so a short last block simply has fewer.
 */
function decodeWgsl(hd4: number, block: number, group: number): string {
  const items: Array<[number, number]> = [];
  for (let r = 0; r < block; r++) for (let hh = 0; hh < group; hh++) items.push([r, hh]);
  const id = ([r, hh]: [number, number]) => `${r}_${hh}`;
  return `${HEADER}
${FORWARD_BINDINGS}
@group(0) @binding(7) var<storage, read> slots: array<u32>;
${block > 1 ? '@group(0) @binding(8) var<storage, read> starts: array<u32>;' : ''}

@compute @workgroup_size(64, 1, 1)
fn attn_decode_blocked(${ENTRY_ARGS}
) {
  let blk = (wid.z * nwg.x + wid.x) * 64u + lid.x;
${
  block > 1
    ? `  if (blk >= arrayLength(&starts)) { return; }
  let first = starts[blk];`
    : `  if (blk >= p.nQ) { return; }
  let first = blk;`
}
  let g = wid.y;
  let at0 = slots[first];
  let b = at0 / p.S;
  let slot0 = at0 - b * p.S;
  let rowBase = b * p.S;
  let kvStride = p.nKv * ${hd4}u;
  let kvOff = g * ${hd4}u;
  let lastSeg = arrayLength(&seg) - 1u;
${each(
  block,
  (r) => `
  let i${r} = min(first + ${r}u, p.nQ - 1u);
  let has${r} = first + ${r}u < p.nQ && slots[i${r}] == at0 + ${r}u && slot0 + ${r}u < p.S;
  let seg${r} = select(0u, seg[min(at0 + ${r}u, lastSeg)], has${r});`,
)}
${each(items.length, (n) => {
  const [r, hh] = items[n];
  const x = id(items[n]);
  return `  let qb${x} = (i${r} * p.nH + g * ${group}u + ${hh}u) * ${hd4}u;
${queryRegisters(x, hd4)}`;
})}
  let jEnd = min(slot0 + ${block}u, p.S);
  for (var j = 0u; j < jEnd; j++) {
    let sj = seg[rowBase + j];
    if (sj == 0u) { continue; }
    let kb = (rowBase + j) * kvStride + kvOff;
${keyRows(hd4, 'k', 'v')}
${each(items.length, (n) => onlineSoftmaxStep(id(items[n]), hd4, `seg${items[n][0]} == sj && j <= slot0 + ${items[n][0]}u`))}
  }
${each(items.length, (n) => {
  const [r, hh] = items[n];
  return writeQuery(id(items[n]), hd4, `has${r}`, `seg${r}`, `i${r} * p.nH + g * ${group}u + ${hh}u`);
})}
}
`;
}

/**
 * The WGSL of one blocked entry point for head dim 4·hd4 and `block` items per invocation (for
 * attn_decode_blocked, `block` new tokens × `group` query heads).
 */
export function blockedAttentionWgsl(entry: BlockedEntry, hd4: number, block: number, group = 1): string {
  // Generated once per shape: the wrapper asks on every dispatch (decode steps, every layer).
  const key = `${entry}:${hd4}:${block}:${group}`;
  let code = generated.get(key);
  if (code === undefined) {
    code = generate(entry, hd4, block, group);
    generated.set(key, code);
  }
  return code;
}

const generated = new Map<string, string>();

function generate(entry: BlockedEntry, hd4: number, block: number, group: number): string {
  for (const [name, x] of [
    ['hd4', hd4],
    ['block', block],
    ['group', group],
  ] as const) {
    if (!Number.isInteger(x) || x < 1)
      throw new Error(`blockedAttentionWgsl: ${name} must be a positive integer, got ${x}`);
  }
  if (entry === 'attn_fwd_blocked') return forwardWgsl(hd4, block);
  if (entry === 'attn_bwd_dq_blocked') return dqWgsl(hd4, block);
  if (entry === 'attn_bwd_dkv_blocked') return dkvWgsl(hd4, block);
  return decodeWgsl(hd4, block, group);
}
