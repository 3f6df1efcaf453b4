// SFT input noise (src/rl/sft.ts): only policy positions change, each to the token before it or a token
// of the same trace, at about the drawn rate; draws repeat from the RNG; rate 0 changes nothing.
import { describe, expect, it } from 'vitest';
import { createRng } from '../../src/env/rng.ts';
import type { TokenSource } from '../../src/rl/rollout.ts';
import { inputNoiseRng, noisyInputIds } from '../../src/rl/sft.ts';

function trace(n: number): { ids: number[]; sources: TokenSource[] } {
  // prompt 20, then turns of 30 policy tokens and 15 environment tokens
  const ids: number[] = [];
  const sources: TokenSource[] = [];
  for (let i = 0; i < n; i++) {
    ids.push(100 + ((i * 37) % 500));
    sources.push(i < 20 ? 'prompt' : (i - 20) % 45 < 30 ? 'policy' : 'env');
  }
  return { ids, sources };
}

describe('noisyInputIds', () => {
  it('replaces only policy tokens, by the previous token or one of the trace, near the rate', () => {
    const { ids, sources } = trace(2000);
    const { ids: out, replaced } = noisyInputIds(ids, sources, 0.2, createRng(7));
    expect(out).toHaveLength(ids.length);
    const policy = sources.filter((s) => s === 'policy').length;
    expect(replaced.length / policy).toBeGreaterThan(0.15);
    expect(replaced.length / policy).toBeLessThan(0.25);
    const set = new Set(replaced);
    let repeats = 0;
    for (let j = 0; j < ids.length; j++) {
      if (!set.has(j)) {
        expect(out[j]).toBe(ids[j]);
        continue;
      }
      expect(sources[j]).toBe('policy');
      expect(ids).toContain(out[j]);
      if (out[j] === ids[j - 1]) repeats++;
    }
    // about half are repeats of the token before (the loops' start)
    expect(repeats / replaced.length).toBeGreaterThan(0.35);
    expect(repeats / replaced.length).toBeLessThan(0.65);
    // the input is a copy: the trace itself is untouched
    expect(ids).toEqual(trace(2000).ids);
  });

  it('rate 0 changes nothing; the same seed and step draw the same; another step draws otherwise', () => {
    const { ids, sources } = trace(500);
    expect(noisyInputIds(ids, sources, 0, createRng(1))).toEqual({ ids, replaced: [] });
    const a = noisyInputIds(ids, sources, 0.1, inputNoiseRng(3, 5));
    const b = noisyInputIds(ids, sources, 0.1, inputNoiseRng(3, 5));
    const c = noisyInputIds(ids, sources, 0.1, inputNoiseRng(3, 6));
    expect(a).toEqual(b);
    expect(c.replaced).not.toEqual(a.replaced);
  });

  it('refuses a rate outside [0, 1)', () => {
    const { ids, sources } = trace(10);
    expect(() => noisyInputIds(ids, sources, 1, createRng(1))).toThrow(/rate/);
    expect(() => noisyInputIds(ids, sources, -0.1, createRng(1))).toThrow(/rate/);
  });
});
