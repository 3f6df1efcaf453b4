// F16 / BF16 <-> F32 conversions: hand-picked bit patterns (zeros, subnormals, limits, inf, NaN),
// exhaustive round trips over all 65,536 patterns, and rounding checked against an independent
// nearest-value search.

import { describe, expect, it } from 'vitest';
import {
  bf16BitsToF32Bits,
  decodeBf16,
  decodeF16,
  decodeF32,
  encodeBf16,
  encodeF16,
  encodeF32,
  f16BitsToF32Bits,
  f16ToF32,
  f32BitsToBf16Bits,
  f32BitsToF16Bits,
  f32ToF16,
} from '../../src/agent/model/dtype.ts';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const f32FromBits = (bits: number) => {
  u32[0] = bits;
  return f32[0];
};
const hex = (n: number) => `0x${n.toString(16)}`;

describe('F16 -> F32', () => {
  it.each([
    ['+0', 0x0000, 0x00000000],
    ['-0', 0x8000, 0x80000000],
    ['smallest subnormal 2^-24', 0x0001, 0x33800000],
    ['-2^-24', 0x8001, 0xb3800000],
    ['subnormal 2^-15', 0x0200, 0x38000000],
    ['largest subnormal 1023 * 2^-24', 0x03ff, 0x387fc000],
    ['smallest normal 2^-14', 0x0400, 0x38800000],
    ['1', 0x3c00, 0x3f800000],
    ['1 + 2^-10', 0x3c01, 0x3f802000],
    ['-2', 0xc000, 0xc0000000],
    ['max 65504', 0x7bff, 0x477fe000],
    ['+inf', 0x7c00, 0x7f800000],
    ['-inf', 0xfc00, 0xff800000],
    ['quiet NaN', 0x7e00, 0x7fc00000],
    ['signalling NaN keeps its payload', 0x7c01, 0x7f802000],
    ['negative NaN with payload', 0xfe3f, 0xffc7e000],
  ])('%s', (_what, h, expected) => {
    expect(hex(f16BitsToF32Bits(h))).toBe(hex(expected));
  });

  it('gives the value sign * 2^(e-15) * (1 + m/1024), or m * 2^-24 for subnormals, for every pattern', () => {
    for (let h = 0; h < 0x10000; h++) {
      const sign = h & 0x8000 ? -1 : 1;
      const e = (h >> 10) & 0x1f;
      const m = h & 0x3ff;
      const got = f32FromBits(f16BitsToF32Bits(h));
      if (e === 0x1f) {
        expect(m === 0 ? got === sign * Infinity : Number.isNaN(got)).toBe(true);
        continue;
      }
      const expected = e === 0 ? sign * m * 2 ** -24 : sign * 2 ** (e - 15) * (1 + m / 1024);
      expect(Object.is(got, expected)).toBe(true); // Object.is tells -0 from +0
    }
  });
});

describe('F32 -> F16 rounds to nearest, ties to even', () => {
  it.each([
    [1, 0x3c00],
    [1 + 2 ** -11, 0x3c00], // halfway between 1 and 1+2^-10: the even one is 1
    [1 + 3 * 2 ** -11, 0x3c02], // halfway between 1+2^-10 (odd) and 1+2^-9 (even)
    [1 + 2 ** -11 + 2 ** -20, 0x3c01], // just above halfway rounds up
    [65504, 0x7bff],
    [65519.99, 0x7bff],
    [65520, 0x7c00], // halfway between 65504 (odd mantissa) and 65536: goes to even, which is inf
    [1e6, 0x7c00],
    [-1e6, 0xfc00],
    [2 ** -24, 0x0001],
    [2 ** -25, 0x0000], // halfway between 0 and 2^-24: even is 0
    [2 ** -25 * (1 + 2 ** -23), 0x0001], // just above halfway
    [3 * 2 ** -25, 0x0002], // halfway between 1 and 2 (x 2^-24): even is 2
    [2 ** -14 - 2 ** -25, 0x0400], // halfway between largest subnormal and smallest normal
    [1e-10, 0x0000],
    [-1e-10, 0x8000],
    [-0, 0x8000],
    [Infinity, 0x7c00],
    [-Infinity, 0xfc00],
  ])('%d', (v, expected) => {
    expect(hex(f32ToF16(v))).toBe(hex(expected));
  });

  it('keeps NaN a NaN, with its top payload bits', () => {
    expect(hex(f32BitsToF16Bits(0x7fc00000))).toBe('0x7e00');
    expect(hex(f32BitsToF16Bits(0x7f800001))).toBe('0x7e00'); // payload only in dropped bits: quieted
    expect(hex(f32BitsToF16Bits(0xff802000))).toBe('0xfc01');
  });

  it('round-trips all 65,536 half patterns through float32 unchanged (NaN payloads included)', () => {
    for (let h = 0; h < 0x10000; h++) {
      const back = f32BitsToF16Bits(f16BitsToF32Bits(h));
      if (back !== h) throw new Error(`${hex(h)} -> ${hex(back)}`);
    }
  });

  it('agrees with a nearest-value search over all finite halves on random floats', () => {
    // Independent oracle: all non-negative finite half values in increasing order; find neighbours by
    // binary search, take the nearer, on a tie the one with an even bit pattern.
    const halves: number[] = [];
    for (let h = 0; h < 0x7c00; h++) halves.push(f16ToF32(h));
    const nearest = (v: number): number => {
      const a = Math.abs(v);
      if (a >= 65520) return 0x7c00;
      let lo = 0;
      let hi = halves.length - 1;
      while (hi - lo > 1) {
        const mid = (lo + hi) >> 1;
        if (halves[mid] <= a) lo = mid;
        else hi = mid;
      }
      const dLo = a - halves[lo];
      const dHi = halves[hi] - a;
      return dLo < dHi || (dLo === dHi && lo % 2 === 0) ? lo : hi;
    };
    let seed = 12345;
    for (let i = 0; i < 20000; i++) {
      seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
      const v = Math.fround((seed / 2 ** 32 - 0.5) * 2 ** ((i % 40) - 28)); // magnitudes 2^-29 .. 2^11
      const expected = (v < 0 || Object.is(v, -0) ? 0x8000 : 0) | nearest(v);
      if (f32ToF16(v) !== expected)
        throw new Error(`${v}: got ${hex(f32ToF16(v))}, expected ${hex(expected)}`);
    }
  });
});

describe('BF16', () => {
  it('widens by appending 16 zero bits', () => {
    expect(hex(bf16BitsToF32Bits(0x3f80))).toBe('0x3f800000');
    expect(hex(bf16BitsToF32Bits(0x8000))).toBe('0x80000000');
    expect(hex(bf16BitsToF32Bits(0x0001))).toBe('0x10000'); // a float32 subnormal
    expect(hex(bf16BitsToF32Bits(0xff80))).toBe('0xff800000');
    expect(hex(bf16BitsToF32Bits(0x7f81))).toBe('0x7f810000'); // signalling NaN kept
  });

  it.each([
    ['1', 0x3f800000, 0x3f80],
    ['1 + 2^-8: halfway, even is 1', 0x3f808000, 0x3f80],
    ['1 + 3 * 2^-8: halfway, even is 1 + 2^-6', 0x3f818000, 0x3f82],
    ['just above halfway', 0x3f808001, 0x3f81],
    ['below halfway under max', 0x7f7f7fff, 0x7f7f],
    ['halfway from the largest bf16 (odd) rounds to inf', 0x7f7f8000, 0x7f80],
    ['FLT_MAX rounds to inf', 0x7f7fffff, 0x7f80],
    ['smallest f32 subnormal rounds to 0', 0x00000001, 0x0000],
    ['subnormal tie to even', 0x00018000, 0x0002],
    ['-0', 0x80000000, 0x8000],
    ['inf', 0x7f800000, 0x7f80],
    ['quiet NaN', 0x7fc00000, 0x7fc0],
    ['NaN with payload only in dropped bits stays NaN', 0x7f800001, 0x7fc0],
    ['negative NaN with payload', 0xffa00000, 0xffa0],
  ])('%s', (_what, x, expected) => {
    expect(hex(f32BitsToBf16Bits(x))).toBe(hex(expected));
  });

  it('round-trips all 65,536 bfloat16 patterns through float32 unchanged', () => {
    for (let b = 0; b < 0x10000; b++) {
      const back = f32BitsToBf16Bits(bf16BitsToF32Bits(b));
      if (back !== b) throw new Error(`${hex(b)} -> ${hex(back)}`);
    }
  });

  it('picks the nearer of the two neighbouring bfloat16 values (ties to even) on random floats', () => {
    let seed = 99;
    for (let i = 0; i < 20000; i++) {
      seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
      const x = seed & 0x7f7fffff; // positive finite
      const lo = x >>> 16;
      const a = f32FromBits(x);
      const dLo = a - f32FromBits(lo << 16);
      // The neighbour above the largest finite bfloat16 is 2^128 for rounding purposes (IEEE 754).
      const dHi = (lo + 1 === 0x7f80 ? 2 ** 128 : f32FromBits((lo + 1) << 16)) - a;
      const expected = dLo < dHi || (dLo === dHi && lo % 2 === 0) ? lo : lo + 1;
      if (f32BitsToBf16Bits(x) !== expected) throw new Error(`${hex(x)}: got ${hex(f32BitsToBf16Bits(x))}`);
    }
  });
});

describe('array conversions', () => {
  it('decode little-endian F16/BF16 bytes and keep NaN payloads bit-exact', () => {
    const f16 = decodeF16(new Uint8Array([0x00, 0x3c, 0x01, 0x7c, 0x00, 0x80, 0x01, 0x00]));
    expect([...new Uint32Array(f16.buffer)].map(hex)).toEqual([
      '0x3f800000',
      '0x7f802000',
      '0x80000000',
      '0x33800000',
    ]);
    const bf16 = decodeBf16(new Uint8Array([0x80, 0x3f, 0x81, 0x7f, 0x00, 0x80]));
    expect([...new Uint32Array(bf16.buffer)].map(hex)).toEqual(['0x3f800000', '0x7f810000', '0x80000000']);
  });

  it('encode -> decode is the identity on values already in the dtype, bit for bit', () => {
    const bits = new Uint32Array([0x3f800000, 0x7f810000, 0xff800000, 0x80000000, 0x00010000, 0x7fc00000]);
    const values = new Float32Array(bits.buffer);
    expect([...new Uint32Array(decodeBf16(encodeBf16(values)).buffer)]).toEqual([...bits]);
    const halfBits = new Uint32Array([0x3f800000, 0x7f802000, 0x33800000, 0x80000000, 0x477fe000]);
    const halfValues = new Float32Array(halfBits.buffer);
    expect([...new Uint32Array(decodeF16(encodeF16(halfValues)).buffer)]).toEqual([...halfBits]);
  });

  it('F32 bytes: decode views aligned input without copying, copies unaligned input', () => {
    const values = new Float32Array([1.5, -2, Number.NaN, 3e-42]);
    const bytes = encodeF32(values);
    expect([...bytes.subarray(0, 4)]).toEqual([0x00, 0x00, 0xc0, 0x3f]); // 1.5 little-endian
    const view = decodeF32(bytes);
    expect(view.buffer).toBe(bytes.buffer);
    expect([...new Uint32Array(view.buffer)]).toEqual([...new Uint32Array(values.buffer)]);
    const shifted = new Uint8Array(bytes.length + 1);
    shifted.set(bytes, 1);
    const copy = decodeF32(shifted.subarray(1));
    expect(copy.buffer).not.toBe(shifted.buffer);
    expect([...new Uint32Array(copy.buffer)]).toEqual([...new Uint32Array(values.buffer)]);
  });
});
