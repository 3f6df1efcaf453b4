/**
 * Seeded pseudo-random numbers for reproducible worlds and fuzz-free determinism.
 *
 * mulberry32 is tiny, fast and good enough for data generation (not for cryptography). Every generator in
 * src/env takes a `Rng` instead of calling Math.random, so a seed reproduces a world exactly in the
 * browser, in a worker and in Node.
 */

/** A seeded source of uniform floats in [0, 1) plus the helpers data generation needs. */
export interface Rng {
  /** Uniform float in [0, 1). */
  next(): number;
  /** Uniform integer in [min, max] (both inclusive). */
  int(min: number, max: number): number;
  /** One element of a non-empty array. */
  pick<T>(items: readonly T[]): T;
  /** True with probability p. */
  chance(p: number): boolean;
  /** A shuffled copy (Fisher–Yates). */
  shuffle<T>(items: readonly T[]): T[];
  /** A child generator whose stream is independent of later draws from this one. */
  fork(label: string): Rng;
}

/** Hashes a string to a 32-bit unsigned integer (FNV-1a); used to derive child seeds from labels. */
export function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * A 53-bit string hash (cyrb53) as 14 hex digits. Used for content-derived passage ids, where 32 bits
 * would risk collisions across tens of thousands of passages.
 */
export function hash53Hex(text: string, seed = 0): string {
  let h1 = 0xdeadbeef ^ seed;
  let h2 = 0x41c6ce57 ^ seed;
  for (let i = 0; i < text.length; i++) {
    const ch = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ ch, 2654435761);
    h2 = Math.imul(h2 ^ ch, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  const value = 4294967296 * (2097151 & h2) + (h1 >>> 0);
  return value.toString(16).padStart(14, '0');
}

/** Creates a mulberry32 generator from a 32-bit seed. */
export function createRng(seed: number): Rng {
  let state = seed >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const rng: Rng = {
    next,
    int(min, max) {
      if (!Number.isFinite(min) || !Number.isFinite(max) || max < min) {
        throw new RangeError(`rng.int: invalid range [${min}, ${max}]`);
      }
      return min + Math.floor(next() * (Math.floor(max) - Math.ceil(min) + 1));
    },
    pick(items) {
      if (items.length === 0) throw new RangeError('rng.pick: empty array');
      return items[Math.floor(next() * items.length)];
    },
    chance(p) {
      return next() < p;
    },
    shuffle(items) {
      const out = items.slice();
      for (let i = out.length - 1; i > 0; i--) {
        const j = Math.floor(next() * (i + 1));
        [out[i], out[j]] = [out[j], out[i]];
      }
      return out;
    },
    fork(label) {
      // Mix one draw from this stream with the label so sibling forks differ and stay reproducible.
      return createRng((hash32(label) ^ Math.floor(next() * 4294967296)) >>> 0);
    },
  };
  return rng;
}
