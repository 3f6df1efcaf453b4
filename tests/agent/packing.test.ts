// packRows (src/agent/model/packing.ts): which token goes to which slot, with its id, position and a
// segment id that keeps it apart from the other rows of its bin. The GPU side (same results packed
// and padded) is in qwen-gpu.test.ts.
import { describe, expect, it } from 'vitest';
import { NOT_PACKED, packRows } from '../../src/agent/model/packing.ts';
import { packBatch, type TokenBatch } from '../../src/agent/model/qwen-gpu.ts';

/** For every original token: (id, pos, segment) in the packed batch, and which packed row it lands in. */
function moved(original: TokenBatch) {
  const { batch, packedIndex } = packRows(original);
  const out: Array<{ i: number; p: number; row: number }> = [];
  for (let i = 0; i < packedIndex.length; i++) {
    const p = packedIndex[i];
    if (p === NOT_PACKED) {
      expect(original.seg[i], `token ${i} was dropped`).toBe(0);
      continue;
    }
    expect(batch.ids[p]).toBe(original.ids[i]);
    expect(batch.pos[p]).toBe(original.pos[i]);
    expect(batch.seg[p] === 0).toBe(original.seg[i] === 0);
    out.push({ i, p, row: Math.floor(p / batch.T) });
  }
  return { batch, packedIndex, out };
}

const seq = (n: number, base: number) => Array.from({ length: n }, (_, k) => base + k);

describe('packRows', () => {
  it('packs right-padded rows first fit, longest first: ids and positions kept, padding dropped', () => {
    const original = packBatch([seq(3, 100), seq(6, 200), seq(2, 300), seq(4, 400)], { padSide: 'right' });
    const { batch, out } = moved(original);
    // 6 | 4 + 2 | 3: 3 rows of 6 slots instead of 4
    expect([batch.B, batch.T]).toEqual([3, 6]);
    expect(Array.from(batch.ids)).toEqual([
      200, 201, 202, 203, 204, 205, 400, 401, 402, 403, 300, 301, 100, 101, 102, 0, 0, 0,
    ]);
    expect(Array.from(batch.pos)).toEqual([0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1, 0, 1, 2, 0, 0, 0]);
    expect(Array.from(batch.seg)).toEqual([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 1, 1, 1, 0, 0, 0]);
    expect(out.length).toBe(15);
  });

  it('with an unbounded capacity, one row holding every token and nothing else', () => {
    const original = packBatch([seq(3, 100), seq(6, 200), seq(2, 300)], { padSide: 'right' });
    const { batch, packedIndex } = packRows(original, Number.POSITIVE_INFINITY);
    expect([batch.B, batch.T]).toEqual([1, 11]);
    expect(Array.from(batch.ids)).toEqual([200, 201, 202, 203, 204, 205, 100, 101, 102, 300, 301]);
    expect(Array.from(batch.seg)).toEqual([1, 1, 1, 1, 1, 1, 2, 2, 2, 3, 3]);
    expect(Array.from(packedIndex.filter((p) => p !== NOT_PACKED)).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 11 }, (_, i) => i),
    );
  });

  it('keeps left padding out, and a row with no token at all', () => {
    const original = packBatch([seq(2, 10), seq(5, 20), [], seq(3, 30)], { padSide: 'left' });
    const { batch, packedIndex } = moved(original);
    expect([batch.B, batch.T]).toEqual([2, 5]); // 5 | 3 + 2
    for (let t = 0; t < 5; t++) expect(packedIndex[2 * 5 + t]).toBe(NOT_PACKED);
  });

  it('tokens of different rows in one bin never share a segment; several segments of a row stay apart', () => {
    // Row 0 holds two segments (1 and 2) with a padding slot between them; row 1 one segment.
    const original: TokenBatch = {
      B: 2,
      T: 8,
      ids: Uint32Array.from([5, 6, 0, 7, 8, 0, 0, 0, 9, 9, 9, 0, 0, 0, 0, 0]),
      seg: Uint32Array.from([1, 1, 0, 2, 2, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0]),
      pos: Uint32Array.from([0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0]),
    };
    const { batch, out } = moved(original);
    expect([batch.B, batch.T]).toEqual([1, 8]); // the span of 5 (gap included) + 3
    expect(Array.from(batch.seg)).toEqual([1, 1, 0, 2, 2, 3, 3, 3]);
    // same original segment ⇔ same packed segment, for every pair of tokens
    for (const a of out)
      for (const b of out) {
        const sameBefore =
          Math.floor(a.i / 8) === Math.floor(b.i / 8) &&
          original.seg[a.i] === original.seg[b.i] &&
          original.seg[a.i] !== 0;
        const sameAfter = a.row === b.row && batch.seg[a.p] === batch.seg[b.p] && batch.seg[a.p] !== 0;
        expect(sameAfter).toBe(sameBefore);
      }
  });

  it('a row longer than the capacity is an error; an all-padding batch packs to one empty row', () => {
    const original = packBatch([seq(6, 1), seq(2, 9)], { padSide: 'right' });
    expect(() => packRows(original, 4)).toThrow(/6 tokens, over 4/);
    const empty = packRows({
      B: 2,
      T: 3,
      ids: new Uint32Array(6),
      seg: new Uint32Array(6),
      pos: new Uint32Array(6),
    });
    expect([empty.batch.B, empty.batch.T]).toEqual([1, 1]);
    expect(empty.packedIndex.every((p) => p === NOT_PACKED)).toBe(true);
  });
});
