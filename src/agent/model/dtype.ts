// Exact conversions between IEEE half (F16), bfloat16 (BF16) and float32 (F32).
//
// Everything here works on bit patterns (numbers holding u16 / u32 bits), never on JS numbers that
// happen to be NaN: a NaN passing through a JS `number` may lose its payload, and we want
// F16 -> F32 -> F16 and BF16 -> F32 -> BF16 to give back every one of the 65,536 patterns unchanged.
//
// Widening (F16/BF16 -> F32) is exact: every half and bfloat16 value, subnormals included, is a
// float32 value. Narrowing (F32 -> F16/BF16) rounds to nearest, ties to even, as PyTorch's `.half()`
// and `.bfloat16()` do; overflow goes to +-inf. One deliberate difference: PyTorch turns every NaN
// into the canonical 0x7FC0 when narrowing to bfloat16, we keep the top payload bits (re-saving a
// loaded file must be bit-exact).

// ---------------------------------------------------------------------------------------------
// Half precision: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.

/** float32 bits of the half-precision value with bits `h` (exact). */
export function f16BitsToF32Bits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exp = (h >>> 10) & 0x1f;
  let mant = h & 0x3ff;
  if (exp === 0) {
    if (mant === 0) return sign >>> 0; // +-0
    // Subnormal half: mant * 2^-24. Shift the leading 1 up to the implicit-bit position (bit 10),
    // lowering the exponent once per shift; float32 represents the result as a normal number.
    let e = 113; // 127 - 15 + 1: the exponent a half subnormal would have with its top bit at bit 10
    while ((mant & 0x400) === 0) {
      mant <<= 1;
      e--;
    }
    return (sign | (e << 23) | ((mant & 0x3ff) << 13)) >>> 0;
  }
  if (exp === 0x1f) return (sign | 0x7f800000 | (mant << 13)) >>> 0; // inf, or NaN with its payload
  return (sign | ((exp + 112) << 23) | (mant << 13)) >>> 0; // rebias 15 -> 127
}

/** Half-precision bits nearest to the float32 with bits `x` (round to nearest, ties to even). */
export function f32BitsToF16Bits(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  const mant = x & 0x7fffff;
  if (exp === 0xff) {
    if (mant === 0) return sign | 0x7c00; // +-inf
    const payload = mant >>> 13; // keep the top 10 payload bits; if they are all 0, stay a (quiet) NaN
    return sign | 0x7c00 | (payload === 0 ? 0x200 : payload);
  }
  const halfExp = exp - 112; // the half's biased exponent if the value were a normal half
  if (halfExp >= 0x1f) return sign | 0x7c00; // >= 2^16: beyond every half, rounds to inf
  if (halfExp <= 0) {
    // The result is a half subnormal (or zero): mant_half = value / 2^-24, rounded.
    if (halfExp < -10) return sign; // value < 2^-25: rounds to zero (2^-25 itself is a tie -> even 0)
    const significand = mant | 0x800000; // 24 bits with the implicit 1
    const shift = 14 - halfExp; // 14..24
    let half = significand >>> shift;
    const rem = significand & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rem > halfway || (rem === halfway && (half & 1) === 1)) half++; // may carry into 0x400 = min normal
    return sign | half;
  }
  let half = (halfExp << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1) === 1)) half++; // a carry may roll over to inf: correct
  return sign | half;
}

// ---------------------------------------------------------------------------------------------
// bfloat16: the top 16 bits of a float32 (1 sign, 8 exponent, 7 mantissa bits).

/** float32 bits of the bfloat16 value with bits `b` (exact). */
export function bf16BitsToF32Bits(b: number): number {
  return (b << 16) >>> 0;
}

/** bfloat16 bits nearest to the float32 with bits `x` (round to nearest, ties to even). */
export function f32BitsToBf16Bits(x: number): number {
  if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff) !== 0) {
    const top = x >>> 16;
    return (top & 0x7f) === 0 ? top | 0x40 : top; // NaN whose payload lived only in the low bits: quiet it
  }
  const roundingBias = 0x7fff + ((x >>> 16) & 1);
  return ((x >>> 0) + roundingBias) >>> 16; // the sum stays below 2^32 for every non-NaN x
}

// ---------------------------------------------------------------------------------------------
// Scalar helpers on JS numbers (no NaN-payload guarantees; fine for ordinary values).

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

/** The value of half-precision bits `h` as a JS number. */
export function f16ToF32(h: number): number {
  scratchU32[0] = f16BitsToF32Bits(h);
  return scratchF32[0];
}

/** Half-precision bits nearest to `value` (after first rounding it to float32, as a Float32Array would). */
export function f32ToF16(value: number): number {
  scratchF32[0] = value;
  return f32BitsToF16Bits(scratchU32[0]);
}

export function bf16ToF32(b: number): number {
  scratchU32[0] = bf16BitsToF32Bits(b);
  return scratchF32[0];
}

export function f32ToBf16(value: number): number {
  scratchF32[0] = value;
  return f32BitsToBf16Bits(scratchU32[0]);
}

// ---------------------------------------------------------------------------------------------
// Array conversions. Input bytes are little-endian as stored in safetensors files. The output
// Float32Array is written through a Uint32Array view of the same memory, so bit patterns (NaN
// payloads included) land unchanged whatever the host byte order.

/** Every half pattern's float32 bits, built on first use: one lookup per element instead of branches. */
let f16Table: Uint32Array | null = null;
function f16ToF32Table(): Uint32Array {
  if (f16Table === null) {
    f16Table = new Uint32Array(65536);
    for (let h = 0; h < 65536; h++) f16Table[h] = f16BitsToF32Bits(h);
  }
  return f16Table;
}

/** Decode little-endian F16 bytes (length 2n) into n float32 values. */
export function decodeF16(bytes: Uint8Array): Float32Array {
  const n = bytes.length >>> 1;
  const out = new Float32Array(n);
  const outBits = new Uint32Array(out.buffer);
  const table = f16ToF32Table();
  for (let i = 0; i < n; i++) outBits[i] = table[bytes[2 * i] | (bytes[2 * i + 1] << 8)];
  return out;
}

/** Decode little-endian BF16 bytes (length 2n) into n float32 values. */
export function decodeBf16(bytes: Uint8Array): Float32Array {
  const n = bytes.length >>> 1;
  const out = new Float32Array(n);
  const outBits = new Uint32Array(out.buffer);
  for (let i = 0; i < n; i++) outBits[i] = ((bytes[2 * i] << 16) | (bytes[2 * i + 1] << 24)) >>> 0;
  return out;
}

export const HOST_IS_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * Decode little-endian F32 bytes. On little-endian hosts (all WebGPU platforms) an aligned input is
 * returned as a view of the same memory, no copy; otherwise the bytes are copied.
 */
export function decodeF32(bytes: Uint8Array): Float32Array {
  const n = bytes.length >>> 2;
  if (HOST_IS_LITTLE_ENDIAN) {
    if (bytes.byteOffset % 4 === 0) return new Float32Array(bytes.buffer, bytes.byteOffset, n);
    return new Float32Array(bytes.slice().buffer, 0, n);
  }
  const out = new Float32Array(n);
  const outBits = new Uint32Array(out.buffer);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < n; i++) outBits[i] = view.getUint32(4 * i, true);
  return out;
}

/** Encode float32 values as little-endian F32 bytes (always a fresh buffer). */
export function encodeF32(values: Float32Array): Uint8Array {
  const out = new Uint8Array(values.length * 4);
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  const view = new DataView(out.buffer);
  for (let i = 0; i < values.length; i++) view.setUint32(4 * i, bits[i], true);
  return out;
}

/** Encode float32 values as little-endian F16 bytes, rounding to nearest even. */
export function encodeF16(values: Float32Array): Uint8Array {
  const out = new Uint8Array(values.length * 2);
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = 0; i < values.length; i++) {
    const h = f32BitsToF16Bits(bits[i]);
    out[2 * i] = h & 0xff;
    out[2 * i + 1] = h >>> 8;
  }
  return out;
}

/** Encode float32 values as little-endian BF16 bytes, rounding to nearest even. */
export function encodeBf16(values: Float32Array): Uint8Array {
  const out = new Uint8Array(values.length * 2);
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = 0; i < values.length; i++) {
    const b = f32BitsToBf16Bits(bits[i]);
    out[2 * i] = b & 0xff;
    out[2 * i + 1] = b >>> 8;
  }
  return out;
}
