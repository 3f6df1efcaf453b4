import { describe, expect, it } from 'vitest';
import { truncateText } from '../../src/env/json.ts';
import { createRng, hash32, hash53Hex } from '../../src/env/rng.ts';

describe('seeded rng', () => {
  it('reproduces its stream from the seed', () => {
    const a = createRng(42);
    const b = createRng(42);
    const xs = Array.from({ length: 5 }, () => a.next());
    expect(Array.from({ length: 5 }, () => b.next())).toEqual(xs);
    expect(xs.every((x) => x >= 0 && x < 1)).toBe(true);
    expect(createRng(43).next()).not.toBe(xs[0]);
  });

  it('int covers its inclusive range uniformly enough; pick, chance, shuffle', () => {
    const rng = createRng(1);
    const counts = [0, 0, 0];
    for (let i = 0; i < 3000; i++) counts[rng.int(0, 2)]++;
    for (const c of counts) expect(c).toBeGreaterThan(900);
    expect(() => rng.int(3, 1)).toThrow(/invalid range/);
    expect(() => rng.pick([])).toThrow(/empty/);
    expect(rng.chance(0)).toBe(false);
    expect(rng.chance(1)).toBe(true);
    const items = [1, 2, 3, 4, 5, 6];
    const shuffled = rng.shuffle(items);
    expect([...shuffled].sort()).toEqual(items);
    expect(items).toEqual([1, 2, 3, 4, 5, 6]); // the input is not mutated
  });

  it('forks are reproducible and differ by label', () => {
    expect(createRng(7).fork('a').next()).toBe(createRng(7).fork('a').next());
    expect(createRng(7).fork('a').next()).not.toBe(createRng(7).fork('b').next());
  });

  it('hashes are stable', () => {
    expect(hash32('abc')).toBe(0x1a47e90b); // FNV-1a reference value
    expect(hash53Hex('abc')).toMatch(/^[0-9a-f]{14}$/);
    expect(hash53Hex('abc')).not.toBe(hash53Hex('abd'));
  });
});

describe('truncateText', () => {
  it('cuts with an ellipsis within the limit', () => {
    expect(truncateText('abcdef', 4)).toBe('abc…');
    expect(truncateText('abc', 4)).toBe('abc');
    expect(truncateText('abc', 1)).toBe('…');
    expect(truncateText('abc', 0)).toBe('');
  });
});
