// Ragged rows packed into fewer, fuller rows for a training forward. A batch of agent episodes is
// right-padded to its longest one, so a quarter of its [B, T] grid can be padding that every matmul
// and norm still pays for. Packing moves each row's real tokens (its span from the first to the last
// non-padding token) into bins of `capacity` slots, first fit in decreasing length: the trunk runs
// on [B', T'] with fewer slots, and every token keeps its position (RoPE) and, relabelled so no two
// rows of a bin share one, its segment id (attention stays within a segment, and loops over its
// span only: attention.ts). What a token computes does not change, only which slot it sits in.
// QwenGpuModel.forward packs everything into one row on CPU adapters and into rows of up to 2T on
// real GPUs (see packCapacity there).
//
//   original [B, T] ──packRows──▶ packed [B', T'] ; packedIndex[i] = the slot of original token i

import type { TokenBatch } from './qwen-gpu.ts';

/** packedIndex of a token that is not carried over (padding outside its row's span). */
export const NOT_PACKED = 0xffffffff;

export interface PackedRows {
  batch: TokenBatch;
  /** [B·T] for each original token, its index in the packed batch (NOT_PACKED for dropped padding). */
  packedIndex: Uint32Array;
}

/**
 * Packs `batch`'s rows into bins of `capacity` slots (default: the batch's T, so every row fits;
 * Infinity: one bin).
 * A row keeps its span whole (padding inside it included, as padding); rows without a real token
 * are dropped. Bins fill first fit, longest span first; T' is the fullest bin's fill.
 */
export function packRows(batch: TokenBatch, capacity = batch.T): PackedRows {
  const { B, T, ids, seg, pos } = batch;
  const spans: Array<{ row: number; first: number; length: number }> = [];
  for (let b = 0; b < B; b++) {
    let first = -1;
    let last = -1;
    for (let t = 0; t < T; t++) {
      if (seg[b * T + t] === 0) continue;
      if (first < 0) first = t;
      last = t;
    }
    if (first >= 0) spans.push({ row: b, first, length: last - first + 1 });
  }
  if (spans.some((s) => s.length > capacity))
    throw new Error(
      `packRows: a row holds ${Math.max(...spans.map((s) => s.length))} tokens, over ${capacity}`,
    );
  // Stable: equal lengths keep row order, so the packing is a function of the batch alone.
  const order = [...spans].sort((a, b) => b.length - a.length || a.row - b.row);
  const bins: Array<{
    fill: number;
    maxSeg: number;
    items: Array<{ span: (typeof spans)[0]; at: number; segBase: number }>;
  }> = [];
  for (const span of order) {
    let bin = bins.find((x) => x.fill + span.length <= capacity);
    if (!bin) {
      bin = { fill: 0, maxSeg: 0, items: [] };
      bins.push(bin);
    }
    let rowMaxSeg = 0;
    for (let t = span.first; t < span.first + span.length; t++)
      rowMaxSeg = Math.max(rowMaxSeg, seg[span.row * T + t]);
    bin.items.push({ span, at: bin.fill, segBase: bin.maxSeg });
    bin.fill += span.length;
    bin.maxSeg += rowMaxSeg;
  }
  const packedB = Math.max(1, bins.length);
  const packedT = Math.max(1, ...bins.map((x) => x.fill));
  const N = packedB * packedT;
  const out: TokenBatch = {
    B: packedB,
    T: packedT,
    ids: new Uint32Array(N),
    seg: new Uint32Array(N),
    pos: new Uint32Array(N),
  };
  const packedIndex = new Uint32Array(B * T).fill(NOT_PACKED);
  bins.forEach((bin, pb) => {
    for (const { span, at, segBase } of bin.items) {
      for (let k = 0; k < span.length; k++) {
        const i = span.row * T + span.first + k;
        const p = pb * packedT + at + k;
        out.ids[p] = ids[i];
        out.seg[p] = seg[i] === 0 ? 0 : seg[i] + segBase;
        out.pos[p] = pos[i];
        packedIndex[i] = p;
      }
    }
  });
  return { batch: out, packedIndex };
}
