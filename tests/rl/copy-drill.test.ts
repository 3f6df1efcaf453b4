// The SFT copy drill (src/rl/sft.ts): the loss mask covers only targets that copying predicts, no fixed
// offset predicts them, draws are reproducible from the RNG, and the pool is the traces' distinct ids.
import { describe, expect, it } from 'vitest';
import { createRng } from '../../src/env/rng.ts';
import { copyDrillBatch, traceTokenPool } from '../../src/rl/sft.ts';

describe('copyDrillBatch', () => {
  it('the masked targets continue an earlier copy: the same bigram occurred before in the row', () => {
    const pool = Array.from({ length: 300 }, (_, i) => i + 3);
    const span = 8;
    const repeats = 6;
    const d = copyDrillBatch(pool, 20, span, repeats, createRng(1));
    const T = span * repeats;
    expect(d.sequences).toHaveLength(20);
    expect(d.targets).toHaveLength(20 * T);
    let ones = 0;
    for (let r = 0; r < 20; r++) {
      const row = d.sequences[r];
      expect(row).toHaveLength(T);
      for (const id of row) expect(pool).toContain(id);
      let rowOnes = 0;
      for (let t = 0; t < T; t++) {
        const i = r * T + t;
        expect(d.targets[i]).toBe(t < T - 1 ? row[t + 1] : 0);
        if (!d.mask[i]) continue;
        rowOnes++;
        let before = false;
        for (let j = 0; j < t && !before; j++) before = row[j] === row[t] && row[j + 1] === row[t + 1];
        expect(before, `row ${r} position ${t}`).toBe(true);
      }
      // T ≥ span · repeats leaves room for at least one later copy of a span of ≥ 2 tokens
      expect(rowOnes).toBeGreaterThan(0);
      ones += rowOnes;
    }
    expect(d.count).toBe(ones);
  });

  it('no fixed offset finds the earlier copy (span lengths and gaps vary)', () => {
    const pool = Array.from({ length: 1000 }, (_, i) => i + 3);
    const span = 16;
    const d = copyDrillBatch(pool, 64, span, 4, createRng(2));
    const T = span * 4;
    let best = 0;
    for (let k = 1; k < T; k++) {
      let hit = 0;
      for (let r = 0; r < 64; r++) {
        const row = d.sequences[r];
        for (let t = k; t < T - 1; t++) if (d.mask[r * T + t] && row[t + 1] === row[t + 1 - k]) hit++;
      }
      best = Math.max(best, hit / d.count);
    }
    // with spans of exactly `span` back to back, offset `span` would find every copy
    expect(best).toBeLessThan(0.25);
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
