// Plain CPU reference for embedding.wgsl, in float64: lookup and its backward (a scatter-add of
// output-gradient rows into the table gradient, repeated tokens summed). Padding positions
// (seg[n] == 0) output 0 and contribute nothing; an out-of-range id outputs a NaN row.

export function embeddingRef(
  table: ArrayLike<number>,
  ids: ArrayLike<number>,
  V: number,
  D: number,
  seg?: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(ids.length * D);
  for (let n = 0; n < ids.length; n++) {
    for (let j = 0; j < D; j++) {
      if (seg !== undefined && seg[n] === 0) out[n * D + j] = 0;
      else if (ids[n] >= V) out[n * D + j] = Number.NaN;
      else out[n * D + j] = table[ids[n] * D + j];
    }
  }
  return out;
}

/** dTable [V, D] = Σ over non-padding positions n of dOut[n, :] into row ids[n]. */
export function embeddingBackwardRef(
  dOut: ArrayLike<number>,
  ids: ArrayLike<number>,
  V: number,
  D: number,
  seg?: ArrayLike<number>,
): Float64Array {
  const dTable = new Float64Array(V * D);
  for (let n = 0; n < ids.length; n++) {
    if (seg !== undefined && seg[n] === 0) continue;
    if (ids[n] >= V) throw new Error(`embeddingBackwardRef: id ${ids[n]} at ${n} outside vocab ${V}`);
    for (let j = 0; j < D; j++) dTable[ids[n] * D + j] += dOut[n * D + j];
  }
  return dTable;
}
