// The SFT copy drill (src/rl/sft.ts): rows are a span repeated, the loss mask covers exactly the
// repeated targets, draws are reproducible from the RNG, and the pool is the traces' distinct ids.
import { describe, expect, it } from 'vitest';
import { createRng } from '../../src/env/rng.ts';
import { copyDrillBatch, traceTokenPool } from '../../src/rl/sft.ts';

describe('copyDrillBatch', () => {
  it('each row is one span repeated; targets shift by one; the mask is 1 exactly on repeated targets', () => {
    const pool = [5, 6, 7, 8, 9, 10, 11];
    const span = 4;
    const repeats = 3;
    const d = copyDrillBatch(pool, 2, span, repeats, createRng(1));
    const T = span * repeats;
    expect(d.sequences).toHaveLength(2);
    expect(d.targets).toHaveLength(2 * T);
    let ones = 0;
    for (let r = 0; r < 2; r++) {
      const row = d.sequences[r];
      expect(row).toHaveLength(T);
      for (const id of row) expect(pool).toContain(id);
      for (let t = span; t < T; t++) expect(row[t]).toBe(row[t - span]);
      for (let t = 0; t < T; t++) {
        const i = r * T + t;
        const expected = t >= span - 1 && t < T - 1 ? 1 : 0;
        expect(d.mask[i], `row ${r} position ${t}`).toBe(expected);
        if (t < T - 1) expect(d.targets[i]).toBe(row[t + 1]);
        else expect(d.targets[i]).toBe(0);
        ones += d.mask[i];
      }
    }
    // (repeats − 1) · span targets per row lie in a repeat
    expect(d.count).toBe(2 * (repeats - 1) * span);
    expect(ones).toBe(d.count);
  });

  it('the same RNG seed draws the same rows; another seed draws others', () => {
    const pool = Array.from({ length: 500 }, (_, i) => i + 3);
    const a = copyDrillBatch(pool, 3, 16, 2, createRng(42));
    const b = copyDrillBatch(pool, 3, 16, 2, createRng(42));
    const c = copyDrillBatch(pool, 3, 16, 2, createRng(43));
    expect(b.sequences).toEqual(a.sequences);
    expect(c.sequences).not.toEqual(a.sequences);
  });

  it('refuses an empty pool', () => {
    expect(() => copyDrillBatch([], 1, 4, 2, createRng(1))).toThrow('copy drill: no tokens');
  });
});

describe('traceTokenPool', () => {
  it('is the distinct ids of the traces in first-seen order', () => {
    const ep = (ids: number[]) => ({ ids });
    expect(traceTokenPool([ep([4, 2, 4]), ep([9, 2, 1])] as never)).toEqual([4, 2, 9, 1]);
  });
});
