// Small test helpers. vitest's deep equality walks typed arrays element by element with full
// generality, which takes seconds on a few hundred KB; these compare raw bytes instead, which is
// also stricter for floats (NaN payloads, -0 vs +0).

import { Buffer } from 'node:buffer';

const bytesOf = (v: ArrayBufferView) => Buffer.from(v.buffer, v.byteOffset, v.byteLength);

/** True when both views hold the same bytes (same bit patterns for typed arrays of one type). */
export function sameBytes(a: ArrayBufferView, b: ArrayBufferView): boolean {
  return a.byteLength === b.byteLength && bytesOf(a).equals(bytesOf(b));
}

/** Largest |a[i] - b[i]|. */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} != ${b.length}`);
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i] - b[i]));
  return max;
}

/** Next-token targets of a packed batch and the mask of positions that have one (not padding, not a row's last). */
export function nextTokenTargets(batch: {
  B: number;
  T: number;
  ids: ArrayLike<number>;
  seg: ArrayLike<number>;
}): {
  targets: Uint32Array;
  mask: Uint32Array;
  count: number;
  N: number;
} {
  const N = batch.B * batch.T;
  const targets = new Uint32Array(N);
  const mask = new Uint32Array(N);
  let count = 0;
  for (let i = 0; i < N; i++)
    if (batch.seg[i] && (i + 1) % batch.T !== 0 && batch.seg[i + 1]) {
      targets[i] = batch.ids[i + 1];
      mask[i] = 1;
      count++;
    }
  return { targets, mask, count, N };
}
