// Frozen weights in half precision: stored as f16 or bf16 (half the bytes of f32), read by the
// kernels and widened to f32, so every product and sum still runs in f32.
//
// A shader that reads a weight operand declares it in its f32 form, one binding and one loader:
//   @group(0) @binding(1) var<storage, read> B: array<f32>;
//   fn load_b(i: u32) -> f32 { return B[i]; }
// and reads it only through the loader. `weightShader` rewrites those two lines for a half operand:
//   f16, adapter with shader-f16   `enable f16;`, array<f16>, widened by f32()
//   f16, adapter without it        array<u32> of packed pairs, unpack2x16float (core WGSL)
//   bf16 (any adapter)             array<u32> of packed pairs; a bf16 is the top half of an f32
// In a packed array element i is the low 16 bits of word i/2 when i is even (little-endian bytes),
// so a bound block must start at an even element: true for every block we bind, since blocks start
// at 256-byte-aligned offsets.
//
// Which half format: bf16 keeps f32's exponent range and is the dtype Qwen's checkpoints ship in
// (storing them as bf16 is lossless); f16 has 3 more mantissa bits but overflows past 65,504.

import type { Gpu } from '../runtime.ts';
import type { Bindable, DType } from '../tensor.ts';

export type WeightDType = 'f32' | 'f16' | 'bf16';

export function isWeightDType(d: DType): d is WeightDType {
  return d === 'f32' || d === 'f16' || d === 'bf16';
}

/** The dtype a binding holds: a tensor's or a view's tensor's; raw buffers are taken as f32. */
export function bindingDType(b: Bindable): DType {
  if ('tensor' in b) return b.tensor.dtype;
  if ('dtype' in b) return b.dtype;
  return 'f32';
}

/** Bytes per element of a weight dtype. */
export function weightBytes(d: WeightDType): number {
  return d === 'f32' ? 4 : 2;
}

let preferNativeF16 = true;

/**
 * Tests: false makes f16 weights use the packed-word path even where the adapter has shader-f16,
 * so both paths run on one adapter. Returns the previous setting.
 */
export function setPreferNativeF16(value: boolean): boolean {
  const old = preferNativeF16;
  preferNativeF16 = value;
  return old;
}

// Per shader source (the same string object each call, so its hash is cached), per variant.
const rewritten = new Map<string, Map<string, string>>();

/**
 * `code` with the weight binding `name` (read through `loader`) switched to `dtype`. The f32 form
 * must appear exactly as documented above; anything else is a programming error and throws.
 */
export function weightShader(
  gpu: Gpu,
  code: string,
  dtype: WeightDType,
  name: string,
  loader: string,
): string {
  if (dtype === 'f32') return code;
  const native = dtype === 'f16' && gpu.hasF16 && preferNativeF16;
  const mode = dtype === 'bf16' ? 'bf16' : native ? 'f16' : 'f16-packed';
  let variants = rewritten.get(code);
  if (!variants) {
    variants = new Map();
    rewritten.set(code, variants);
  }
  const key = `${mode}:${name}:${loader}`;
  const hit = variants.get(key);
  if (hit) return hit;
  const decl = new RegExp(`var<storage, read> ${name}: array<f32>;`);
  const load = `fn ${loader}(i: u32) -> f32 { return ${name}[i]; }`;
  if (!decl.test(code) || !code.includes(load)) {
    throw new Error(`weightShader: the shader has no f32 weight binding "${name}" read through ${loader}()`);
  }
  let out: string;
  if (mode === 'f16') {
    out = `enable f16;\n${code
      .replace(decl, `var<storage, read> ${name}: array<f16>;`)
      .replace(load, `fn ${loader}(i: u32) -> f32 { return f32(${name}[i]); }`)}`;
  } else {
    const widen =
      mode === 'bf16'
        ? `let w = ${name}[i >> 1u]; return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));`
        : `return unpack2x16float(${name}[i >> 1u])[i & 1u];`;
    out = code
      .replace(decl, `var<storage, read> ${name}: array<u32>;`)
      .replace(load, `fn ${loader}(i: u32) -> f32 { ${widen} }`);
  }
  variants.set(key, out);
  return out;
}
