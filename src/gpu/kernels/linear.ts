// Linear layer on matmul.wgsl (+ src/shaders/linear.wgsl for the bias and the chunked path).
//
//   forward   y[N, out] = x[N, in] · Wᵀ + b       matmul NT
//   backward  dX[N, in]  = dY · W                  matmul NN
//             dW[out, in] (+)= dYᵀ · x             matmul TN (accumulate: add over micro-batches)
//             db[out]     (+)= Σ_rows dY           bias_grad (deterministic column sums)
//
// W uses the HF layout [out, in]; x may carry leading dims ([B, T, in]): every dim but the last is
// flattened into N rows. A W larger than the storage binding limit (the LM head / tied embedding:
// 151,936 × 896 f32 = 544 MB, over the 128 MiB default) is bound a row block at a time as a
// TensorView whose byte offset is a multiple of minStorageBufferOffsetAlignment; the block's output
// columns go through a dense [N, rows] temporary (scatter_cols / gather_cols in linear.wgsl).
// W may be f16 or bf16 (a frozen weight: half.ts); it then has no dW, and x, y, dY, dX stay f32.
// x, y and dY themselves must fit one binding each (true for activations; the runtime's dispatch
// raises a GpuLimitError naming the binding otherwise).

import linearWgsl from '../../shaders/linear.wgsl?raw';
import { formatBytes, GpuLimitError } from '../errors.ts';
import type { Gpu } from '../runtime.ts';
import type { Bindable, Tensor, TensorView } from '../tensor.ts';
import { bindingDType, isWeightDType, type WeightDType, weightBytes } from './half.ts';
import { type MatmulVariant, matmulInto } from './matmul.ts';

// ---------------------------------------------------------------- shared helpers

/** Byte size of a binding (Tensor, TensorView or raw buffer). */
function bindingBytes(b: Bindable): number {
  if ('tensor' in b) return b.size;
  if ('byteSize' in b) return b.byteSize;
  return b.size;
}

export interface MatmulViewDims {
  /** op(A) is [M, K], op(B) is [K, N], C is [M, N], all row-major and dense. */
  M: number;
  N: number;
  K: number;
  transA?: boolean;
  transB?: boolean;
  alpha?: number;
  /** C += alpha·op(A)·op(B) instead of C = alpha·op(A)·op(B). */
  accumulate?: boolean;
  variant?: MatmulVariant;
}

/**
 * One unbatched matmul.wgsl dispatch on arbitrary bindings (whole tensors or TensorViews), for
 * callers that work on row blocks of a larger tensor. Shares the pipeline with kernels/matmul.ts.
 * Shapes are given explicitly; each binding must hold at least what the shapes say.
 */
export function matmulViews(gpu: Gpu, a: Bindable, b: Bindable, c: Bindable, dims: MatmulViewDims): void {
  const { M, N, K, accumulate = false } = dims;
  const bType = bindingDType(b);
  const bBytes = isWeightDType(bType) ? weightBytes(bType) : 4;
  for (const [name, bind, bytes] of [
    ['a', a, M * K * 4],
    ['b', b, Math.ceil((K * N * bBytes) / 4) * 4],
    ['c', c, M * N * 4],
  ] as const) {
    if (bindingBytes(bind) < bytes) {
      throw new Error(
        `matmulViews: ${name} binding has ${bindingBytes(bind)} bytes, needs ${bytes} for M=${M} N=${N} K=${K}`,
      );
    }
  }
  if (M === 0 || N === 0) return;
  if (K === 0) {
    if (!accumulate) {
      if ('tensor' in c) gpu.fill0({ tensor: c.tensor, offset: c.offset, size: M * N * 4 });
      else if ('byteSize' in c) gpu.fill0(c);
      else throw new Error('matmulViews: K = 0 with a raw GPUBuffer output is not supported');
    }
    return;
  }
  matmulInto(gpu, a, b, c, dims);
}

/** A 2-D grid of 64-wide workgroups covering `count` invocations (flattened x then y). */
export function grid64(gpu: Gpu, count: number): [number, number] {
  const maxDim = gpu.limits.maxComputeWorkgroupsPerDimension;
  const groups = Math.ceil(count / 64);
  if (groups <= maxDim) return [groups, 1];
  const y = Math.ceil(groups / maxDim);
  if (y > maxDim) throw new GpuLimitError(`${count} invocations exceed a ${maxDim}² grid of workgroups`);
  return [Math.ceil(groups / y), y];
}

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}

/**
 * The smallest number of rows of `rowBytes` bytes whose byte size is a multiple of the adapter's
 * storage offset alignment: row blocks must start at multiples of this to be bindable as views.
 */
export function rowQuantum(gpu: Gpu, rowBytes: number): number {
  // The device's own limit is what validation enforces (the adapter may advertise less).
  const align = Math.max(
    gpu.limits.minStorageBufferOffsetAlignment,
    gpu.device.limits.minStorageBufferOffsetAlignment,
  );
  return align / gcd(rowBytes, align);
}

/** The binding-size limit to plan chunks against: the adapter's, or a smaller one for tests. */
export function effectiveBindingLimit(gpu: Gpu, maxBindingBytes?: number): number {
  const adapter = gpu.limits.maxStorageBufferBindingSize;
  if (maxBindingBytes === undefined) return adapter;
  if (!(maxBindingBytes > 0)) throw new Error(`maxBindingBytes must be positive, got ${maxBindingBytes}`);
  return Math.min(adapter, maxBindingBytes);
}

/**
 * A row block [r0, r0 + rows) of a row-major matrix with `cols` columns (f32, f16 or bf16), as a
 * view. A 16-bit block's byte size is rounded up to a whole word (bindings are word-sized); the
 * extra half-word is never read.
 */
export function rowBlock(t: Tensor, r0: number, rows: number, cols: number): TensorView {
  const bytes = t.dtype === 'f16' || t.dtype === 'bf16' ? 2 : 4;
  const offset = r0 * cols * bytes;
  const size = Math.min(Math.ceil((rows * cols * bytes) / 4) * 4, t.byteSize - offset);
  return { tensor: t, offset, size, shape: [rows, cols] };
}

function shapeStr(t: Tensor): string {
  return `[${t.shape.join(', ')}]`;
}

function kernelFor(gpu: Gpu, entryPoint: string, constants?: Record<string, number>) {
  return gpu.kernel({ name: 'linear.wgsl', code: linearWgsl, entryPoint, constants });
}

// ---------------------------------------------------------------- bias

/** y[N, cols] += b[cols] in place. */
export function biasAdd(gpu: Gpu, y: Tensor, b: Tensor): void {
  const cols = b.size;
  if (b.dtype !== 'f32' || y.dtype !== 'f32') throw new Error('biasAdd: f32 only');
  if (y.shape.at(-1) !== cols)
    throw new Error(`biasAdd: bias ${shapeStr(b)} does not match the last dim of y ${shapeStr(y)}`);
  const rows = y.size / Math.max(cols, 1);
  if (y.size === 0) return;
  const params = gpu.uniform('uuuuu', [rows, cols, 0, 0, 0]);
  gpu.dispatch(kernelFor(gpu, 'bias_add'), [y, b, params], grid64(gpu, y.size), y.size);
}

/** db[cols] = Σ_rows dy[rows, cols] (or db += … with accumulate); deterministic. */
export function biasGrad(gpu: Gpu, dy: Tensor, options: { out?: Tensor; accumulate?: boolean } = {}): Tensor {
  const cols = dy.shape.at(-1) ?? 0;
  const rows = cols === 0 ? 0 : dy.size / cols;
  let db = options.out;
  if (db) {
    if (db.size !== cols) throw new Error(`biasGrad: out ${shapeStr(db)} does not hold [${cols}]`);
  } else {
    if (options.accumulate) throw new Error('biasGrad: accumulate needs an existing `out` tensor');
    db = gpu.empty([cols], 'f32', 'linear.db');
  }
  if (cols === 0) return db;
  const params = gpu.uniform('uuuuu', [rows, cols, 0, 0, options.accumulate ? 1 : 0]);
  gpu.dispatch(kernelFor(gpu, 'bias_grad'), [dy, db, params], grid64(gpu, cols), dy.size);
  return db;
}

// ---------------------------------------------------------------- linear

export interface LinearOptions {
  /** Output tensor [.., out] (allocated from the pool if absent). */
  out?: Tensor;
  /**
   * Plan W's row blocks against this binding size instead of the adapter's
   * maxStorageBufferBindingSize (never above it). For tests of the chunked path.
   */
  maxBindingBytes?: number;
  variant?: MatmulVariant;
  label?: string;
}

interface LinearDims {
  N: number;
  inF: number;
  outF: number;
  wType: WeightDType;
}

function linearDims(fn: string, x: Tensor, w: Tensor): LinearDims {
  if (x.dtype !== 'f32' || !isWeightDType(w.dtype))
    throw new Error(`${fn}: x must be f32 and W f32, f16 or bf16, got x ${x.dtype}, W ${w.dtype}`);
  if (w.shape.length !== 2) throw new Error(`${fn}: W must be [out, in], got ${shapeStr(w)}`);
  if (x.shape.length < 1) throw new Error(`${fn}: x must be [.., in], got ${shapeStr(x)}`);
  const [outF, inF] = w.shape;
  if (x.shape.at(-1) !== inF) {
    throw new Error(
      `${fn}: x ${shapeStr(x)} has ${x.shape.at(-1)} features, W ${shapeStr(w)} expects ${inF}`,
    );
  }
  return {
    N: inF === 0 ? x.shape.slice(0, -1).reduce((a, b) => a * b, 1) : x.size / inF,
    inF,
    outF,
    wType: w.dtype as WeightDType,
  };
}

/**
 * Rows of W per block: the whole of W if it fits one binding, else the largest multiple of the
 * alignment quantum such that the block and the [N, rows] temporary each fit.
 */
function planRowBlocks(gpu: Gpu, d: LinearDims, maxBindingBytes?: number): number {
  const limit = effectiveBindingLimit(gpu, maxBindingBytes);
  const wb = weightBytes(d.wType);
  if (d.outF * d.inF * wb <= limit) return d.outF;
  const q = rowQuantum(gpu, d.inF * wb);
  const byW = Math.floor(limit / Math.max(1, d.inF * wb));
  const byTmp = Math.floor(limit / Math.max(1, d.N * 4));
  const rows = Math.floor(Math.min(byW, byTmp) / q) * q;
  if (rows < q) {
    throw new GpuLimitError(
      `linear: W [${d.outF}, ${d.inF}] (${formatBytes(d.outF * d.inF * wb)}) needs chunking, but no aligned ` +
        `block of ${q} rows fits the ${formatBytes(limit)} binding limit together with a [${d.N}, ${q}] temporary`,
    );
  }
  return rows;
}

/** y[.., out] = x[.., in] · Wᵀ (+ b). */
export function linear(
  gpu: Gpu,
  x: Tensor,
  w: Tensor,
  b?: Tensor | null,
  options: LinearOptions = {},
): Tensor {
  const d = linearDims('linear', x, w);
  const { N, inF, outF } = d;
  if (b && (b.dtype !== 'f32' || b.shape.length !== 1 || b.size !== outF)) {
    throw new Error(`linear: bias ${shapeStr(b)} (${b.dtype}) must be f32 [${outF}] for W ${shapeStr(w)}`);
  }
  const outShape = [...x.shape.slice(0, -1), outF];
  let y = options.out;
  if (y) {
    if (y.size !== N * outF)
      throw new Error(`linear: out ${shapeStr(y)} does not hold [${outShape.join(', ')}]`);
  } else {
    y = gpu.empty(outShape, 'f32', options.label ?? 'linear.y');
  }
  if (N === 0 || outF === 0) return y;
  const variant = options.variant;
  const rows = planRowBlocks(gpu, d, options.maxBindingBytes);
  if (rows >= outF) {
    matmulViews(gpu, x, w, y, { M: N, N: outF, K: inF, transB: true, variant });
    if (b) biasAdd(gpu, y, b);
    return y;
  }
  // Chunked: y[:, r0 : r0+R] = x · W[r0 : r0+R]ᵀ (+ b[r0 : r0+R]) through a dense temporary.
  const tmp = gpu.empty([N, rows], 'f32', 'linear.chunk');
  const scatter = kernelFor(gpu, 'scatter_cols', { HAS_BIAS: b ? 1 : 0 });
  for (let r0 = 0; r0 < outF; r0 += rows) {
    const R = Math.min(rows, outF - r0);
    matmulViews(gpu, x, rowBlock(w, r0, R, inF), tmp, { M: N, N: R, K: inF, transB: true, variant });
    const params = gpu.uniform('uuuuu', [N, outF, R, r0, 0]);
    gpu.dispatch(scatter, [tmp, y, b ?? tmp, params], grid64(gpu, N * R), N * R);
  }
  tmp.release();
  return y;
}

export interface LinearBackwardOptions {
  /** Where dX goes ([.., in], like x). Allocated if absent. */
  dx?: Tensor;
  /** dX += dY · W instead of dX = dY · W (e.g. a residual branch). Requires `dx`. */
  accumulateDx?: boolean;
  /** Skip dX (the layer's input needs no gradient). Default true. */
  computeDx?: boolean;
  /** Where dW goes ([out, in]). Allocated if absent. */
  dW?: Tensor;
  /** Skip dW and db (a frozen weight: only dX is wanted). Default true. */
  computeDw?: boolean;
  /** Where db goes ([out]). Allocated if absent and `bias` is true. */
  db?: Tensor;
  /** Compute db (the layer has a bias). Default: true if `db` is given, else false. */
  bias?: boolean;
  /** dW += … and db += … (gradient accumulation over micro-batches). Requires `dW` (and `db`). */
  accumulate?: boolean;
  maxBindingBytes?: number;
  variant?: MatmulVariant;
}

export interface LinearGrads {
  dx: Tensor | null;
  /** null when computeDw is false. */
  dW: Tensor | null;
  db: Tensor | null;
}

/** Gradients of y = x · Wᵀ + b given dY = dLoss/dy. */
export function linearBackward(
  gpu: Gpu,
  dy: Tensor,
  x: Tensor,
  w: Tensor,
  options: LinearBackwardOptions = {},
): LinearGrads {
  const d = linearDims('linearBackward', x, w);
  const { N, inF, outF } = d;
  const { accumulate = false, accumulateDx = false, computeDx = true, computeDw = true, variant } = options;
  const wantBias = computeDw && (options.bias ?? options.db !== undefined);
  if (computeDw && d.wType !== 'f32')
    throw new Error(
      `linearBackward: W ${shapeStr(w)} is ${d.wType} (a frozen weight): pass computeDw: false`,
    );
  if (dy.dtype !== 'f32' || dy.size !== N * outF || dy.shape.at(-1) !== outF) {
    throw new Error(
      `linearBackward: dY ${shapeStr(dy)} (${dy.dtype}) does not match y [${[...x.shape.slice(0, -1), outF].join(', ')}] of x ${shapeStr(x)} · W ${shapeStr(w)}ᵀ`,
    );
  }
  let dW: Tensor | null = null;
  if (computeDw) {
    dW = options.dW ?? null;
    if (dW) {
      if (dW.size !== outF * inF)
        throw new Error(`linearBackward: dW ${shapeStr(dW)} does not hold W ${shapeStr(w)}`);
    } else {
      if (accumulate) throw new Error('linearBackward: accumulate needs an existing `dW` tensor');
      dW = gpu.empty([outF, inF], 'f32', 'linear.dW');
    }
  }
  let dx: Tensor | null = null;
  if (computeDx) {
    dx = options.dx ?? null;
    if (dx) {
      if (dx.size !== N * inF)
        throw new Error(`linearBackward: dx ${shapeStr(dx)} does not hold x ${shapeStr(x)}`);
    } else {
      if (accumulateDx) throw new Error('linearBackward: accumulateDx needs an existing `dx` tensor');
      dx = gpu.empty(x.shape, 'f32', 'linear.dx');
    }
  }
  let db: Tensor | null = null;
  if (wantBias) {
    if (accumulate && !options.db)
      throw new Error('linearBackward: accumulate needs an existing `db` tensor');
    db = biasGrad(gpu, dy, { out: options.db, accumulate });
  }
  if (outF === 0 || inF === 0 || N === 0) {
    // Empty sums: gradients are zero (or unchanged when accumulating).
    if (dW && N === 0 && !accumulate && dW.size > 0) gpu.fill0(dW);
    if (outF === 0 && dx && !accumulateDx && dx.size > 0) gpu.fill0(dx);
    return { dx, dW, db };
  }
  const rows = planRowBlocks(gpu, d, options.maxBindingBytes);
  if (rows >= outF) {
    if (dx) matmulViews(gpu, dy, w, dx, { M: N, N: inF, K: outF, accumulate: accumulateDx, variant });
    if (dW) matmulViews(gpu, dy, x, dW, { M: outF, N: inF, K: N, transA: true, accumulate, variant });
    return { dx, dW, db };
  }
  // Chunked over W's rows: dY[:, r0 : r0+R] is gathered densely, then
  //   dX (+)= dY_blk · W_blk  (NN; K split over blocks, so every block after the first accumulates)
  //   dW_blk (+)= dY_blkᵀ · x (TN; the blocks of dW are disjoint)
  const tmp = gpu.empty([N, rows], 'f32', 'linear.chunk');
  const gather = kernelFor(gpu, 'gather_cols');
  for (let r0 = 0; r0 < outF; r0 += rows) {
    const R = Math.min(rows, outF - r0);
    const params = gpu.uniform('uuuuu', [N, outF, R, r0, 0]);
    gpu.dispatch(gather, [dy, tmp, params], grid64(gpu, N * R), N * R);
    const wBlk = rowBlock(w, r0, R, inF);
    if (dx) {
      matmulViews(gpu, tmp, wBlk, dx, { M: N, N: inF, K: R, accumulate: accumulateDx || r0 > 0, variant });
    }
    if (dW)
      matmulViews(gpu, tmp, x, rowBlock(dW, r0, R, inF), {
        M: R,
        N: inF,
        K: N,
        transA: true,
        accumulate,
        variant,
      });
  }
  tmp.release();
  return { dx, dW, db };
}
