// A tensor is a GPU storage buffer plus a shape and a dtype. Buffers come from the runtime's pool,
// so `release()` hands the buffer back for reuse instead of destroying it.

// f16 and bf16 tensors hold raw 16-bit patterns (Uint16Array on the CPU); kernels that read them as
// frozen weights widen to f32 (src/gpu/kernels/half.ts).
export type DType = 'f32' | 'f16' | 'bf16' | 'u32' | 'i32';

export const DTYPE_BYTES: Record<DType, number> = { f32: 4, f16: 2, bf16: 2, u32: 4, i32: 4 };

export type TypedArrayFor<D extends DType> = D extends 'f32'
  ? Float32Array
  : D extends 'f16' | 'bf16'
    ? Uint16Array // raw 16-bit patterns; see src/agent/model/dtype.ts for the conversions
    : D extends 'u32'
      ? Uint32Array
      : Int32Array;

export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) throw new Error(`invalid tensor shape [${shape.join(', ')}]`);
    n *= d;
  }
  return n;
}

/** Byte size rounded up to 4: WebGPU buffer sizes and copies must be multiples of 4. */
export function byteSizeOf(shape: readonly number[], dtype: DType): number {
  return Math.ceil((numel(shape) * DTYPE_BYTES[dtype]) / 4) * 4;
}

export interface TensorOwner {
  releaseBuffer(buffer: GPUBuffer): void;
}

export class Tensor {
  readonly shape: readonly number[];
  readonly dtype: DType;
  readonly size: number;
  readonly byteSize: number;
  readonly label: string;
  private _buffer: GPUBuffer | null;
  private readonly owner: TensorOwner;

  constructor(owner: TensorOwner, buffer: GPUBuffer, shape: readonly number[], dtype: DType, label = '') {
    this.owner = owner;
    this._buffer = buffer;
    this.shape = [...shape];
    this.dtype = dtype;
    this.size = numel(shape);
    this.byteSize = byteSizeOf(shape, dtype);
    this.label = label;
  }

  get buffer(): GPUBuffer {
    if (!this._buffer)
      throw new Error(`tensor "${this.label}" [${this.shape.join(', ')}] used after release()`);
    return this._buffer;
  }

  get released(): boolean {
    return this._buffer === null;
  }

  /** Returns the buffer to the pool. Safe with work in flight: pooled reuse is queue-ordered. */
  release(): void {
    if (!this._buffer) return;
    this.owner.releaseBuffer(this._buffer);
    this._buffer = null;
  }

  /** A tensor that shares this buffer with another shape of the same element count. */
  view(shape: readonly number[]): TensorView {
    if (numel(shape) !== this.size) {
      throw new Error(
        `cannot view [${this.shape.join(', ')}] as [${shape.join(', ')}]: element counts differ`,
      );
    }
    return { tensor: this, offset: 0, size: this.byteSize, shape };
  }

  toString(): string {
    return `Tensor(${this.label || 'unnamed'}, [${this.shape.join(', ')}], ${this.dtype})`;
  }
}

/** A byte range of a tensor, for binding a slice (e.g. one vocabulary chunk of the LM head). */
export interface TensorView {
  tensor: Tensor;
  offset: number;
  size: number;
  shape?: readonly number[];
}

export type Bindable = Tensor | TensorView | GPUBuffer;
