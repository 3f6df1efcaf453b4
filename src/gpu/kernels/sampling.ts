// Thin wrapper over src/shaders/sampling.wgsl: token sampling for generation, on the GPU.
//
// Shapes:
//   logits:   [B, V] f32 (a Tensor, or a TensorView with a 2-d `shape`)
//   done:     [B] u32, optional; nonzero rows output `padId` with logprob 0 (and entropy 0)
//   streams:  [B] u32, optional; the RNG stream of each row (default: the row index)
//   → ids [B] u32, logprobs [B] f32, entropy [B] f32 (only when asked for)
//
// Semantics (mirrored exactly by src/gpu/reference/sampling.ts; see the .wgsl header for details):
//   - greedy (temperature 0 or greedy: true): argmax, ties → lowest id; logprob under T = 1;
//   - otherwise p ∝ exp(logits / T); top-k keeps logits >= the k-th largest (ties at the threshold all
//     kept), then top-p keeps the smallest most-likely set with mass >= topP of the top-k mass (ties
//     kept); the token is drawn by inverse CDF over the kept set in token-id order with
//     u = samplingUniform(seed, step, stream) in [0, 1): the smallest id j whose cumulative kept
//     weight exceeds u · (kept weight);
//   - logprob = log softmax(logits / T)[token] over the FULL distribution (not the filtered one);
//   - entropy = entropy of softmax(logits / T), full distribution;
//   - -inf logits are masked out; a row with NaN / +inf, or no finite logit, outputs
//     SAMPLE_INVALID_TOKEN and NaN logprob (a shader cannot throw: check ids after readback).
//
// Randomness is counter-based: the uniform a row draws depends only on (seed, step, stream), never
// on the batch composition or the row's position. On one adapter and workgroup size the outputs are
// bitwise reproducible (fixed-order reductions, no atomics); across adapters the u is identical and
// the token differs only when u lands within float32 rounding of a CDF or top-p boundary. Pass
// `streams` (e.g. a per-sequence id) when rows can be reordered or compacted between decode steps.

import samplingWgsl from '../../shaders/sampling.wgsl?raw';
import type { Gpu } from '../runtime.ts';
import type { Tensor, TensorView } from '../tensor.ts';

/** Token id written for rows whose logits hold a NaN or +inf, or no finite value. */
export const SAMPLE_INVALID_TOKEN = 0xffffffff;

export interface SampleOptions {
  /** Softmax temperature; 0 means greedy (argmax). */
  temperature: number;
  /** Force greedy decoding regardless of temperature. */
  greedy?: boolean;
  /** Keep the k largest logits (ties at the threshold all kept); 0 = off. Default 0. */
  topK?: number;
  /** Nucleus: keep the smallest most-likely set reaching this mass, in (0, 1]; 1 = off. Default 1. */
  topP?: number;
  /** u32 seed of the whole generation. */
  seed: number;
  /** u32 decode step, so each step draws fresh randomness. */
  step: number;
  /** u32 [B]: nonzero = row already finished. Requires padId. */
  done?: Tensor;
  /** Token written for done rows (pad or eos id). */
  padId?: number;
  /** u32 [B]: the RNG stream of each row (e.g. a sequence id). Default: the row index. */
  streams?: Tensor;
  /** Only columns < vocabSize are considered (the LM head may be padded past the tokenizer). Default V. */
  vocabSize?: number;
  /** Also compute the entropy of the temperature-scaled distribution. Default false. */
  entropy?: boolean;
  /** Write into these tensors instead of allocating (ids u32 [B], logprobs f32 [B], entropy f32 [B]). */
  out?: { ids?: Tensor; logprobs?: Tensor; entropy?: Tensor };
  /** Invocations per row (power of two <= 256). Default: chosen per adapter and V. */
  workgroupSize?: number;
  /** Split dispatches so that no logits binding exceeds this many bytes (default: the adapter limit). */
  maxBindingBytes?: number;
}

export interface SampleResult {
  ids: Tensor;
  logprobs: Tensor;
  entropy: Tensor | null;
}

const isU32 = (x: number) => Number.isInteger(x) && x >= 0 && x <= 0xffffffff;

/**
 * Default invocations per row. Measured on the CPU adapters: 16 matches 64 at V = 151,936 (the row
 * sweeps dominate) and beats it 1.3-2.5x at V ~ 1.5k, where barriers dominate (SwiftShader most);
 * tiny vocabularies get 4 (SwiftShader runs 4 invocations per SIMD and was ~3x slower with 1).
 * Real GPUs get 256. Few distinct values, since each is a separate pipeline to compile.
 */
export function defaultSamplingWorkgroupSize(gpu: Gpu, vocab: number): number {
  if (vocab <= 64) return 4;
  return gpu.report.kind === 'gpu' ? 256 : 16;
}

/** Samples one token per row of `logits` [B, V]; everything stays on the GPU. */
export function sampleTokens(gpu: Gpu, logits: Tensor | TensorView, options: SampleOptions): SampleResult {
  const tensor = 'tensor' in logits ? logits.tensor : logits;
  const shape = logits.shape;
  const viewOffset = 'tensor' in logits ? logits.offset : 0;
  if (shape?.length !== 2) {
    throw new Error(`sampleTokens: logits must be [B, V], got [${shape?.join(', ') ?? 'no shape'}]`);
  }
  if (tensor.dtype !== 'f32') throw new Error(`sampleTokens: logits must be f32, got ${tensor.dtype}`);
  const [B, V] = shape;
  if (V < 1) throw new Error(`sampleTokens: logits [${B}, ${V}] has no vocabulary`);
  const bytesNeeded = B * V * 4;
  const viewSize = 'tensor' in logits ? logits.size : tensor.byteSize;
  if (bytesNeeded > viewSize || viewOffset + viewSize > tensor.byteSize) {
    throw new Error(
      `sampleTokens: logits view [${B}, ${V}] needs ${bytesNeeded} bytes, the binding holds ${viewSize} (${tensor.toString()})`,
    );
  }

  const { temperature, topK = 0, topP = 1, seed, step } = options;
  if (!Number.isFinite(temperature) || temperature < 0) {
    throw new Error(`sampleTokens: temperature must be finite and >= 0, got ${temperature}`);
  }
  const greedy = options.greedy === true || temperature === 0;
  if (!Number.isInteger(topK) || topK < 0) {
    throw new Error(`sampleTokens: topK must be an integer >= 0, got ${topK}`);
  }
  if (!(topP > 0 && topP <= 1)) throw new Error(`sampleTokens: topP must be in (0, 1], got ${topP}`);
  if (!isU32(seed)) throw new Error(`sampleTokens: seed must be a u32, got ${seed}`);
  if (!isU32(step)) throw new Error(`sampleTokens: step must be a u32, got ${step}`);
  const vocab = options.vocabSize ?? V;
  if (!Number.isInteger(vocab) || vocab < 1 || vocab > V) {
    throw new Error(`sampleTokens: vocabSize ${options.vocabSize} must be an integer in [1, ${V}]`);
  }
  const checkRowTensor = (t: Tensor | undefined, name: string, dtype: 'u32' | 'f32') => {
    if (!t) return;
    if (t.dtype !== dtype || t.size !== B) {
      throw new Error(
        `sampleTokens: ${name} must be ${dtype} [${B}] for logits [${B}, ${V}], got ${t.dtype} [${t.shape.join(', ')}]`,
      );
    }
  };
  checkRowTensor(options.done, 'done', 'u32');
  checkRowTensor(options.streams, 'streams', 'u32');
  if (options.done && options.padId === undefined) {
    throw new Error('sampleTokens: a done mask needs padId (the token written for finished rows)');
  }
  const padId = options.padId ?? 0;
  if (!isU32(padId)) throw new Error(`sampleTokens: padId must be a u32, got ${padId}`);
  const wg = options.workgroupSize ?? defaultSamplingWorkgroupSize(gpu, vocab);
  if (!Number.isInteger(wg) || wg < 1 || wg > 256 || (wg & (wg - 1)) !== 0) {
    throw new Error(`sampleTokens: workgroupSize must be a power of two in [1, 256], got ${wg}`);
  }

  const out = options.out ?? {};
  checkRowTensor(out.ids, 'out.ids', 'u32');
  checkRowTensor(out.logprobs, 'out.logprobs', 'f32');
  checkRowTensor(out.entropy, 'out.entropy', 'f32');
  for (const o of [out.ids, out.logprobs, out.entropy]) {
    if (o && (o === tensor || o === options.done || o === options.streams)) {
      throw new Error(`sampleTokens: output ${o.toString()} is also an input; WebGPU cannot bind it twice`);
    }
  }
  const wantEntropy = options.entropy === true || out.entropy !== undefined;
  const ids = out.ids ?? gpu.empty([B], 'u32', 'sample.ids');
  const logprobs = out.logprobs ?? gpu.empty([B], 'f32', 'sample.logprobs');
  const entropy = wantEntropy ? (out.entropy ?? gpu.empty([B], 'f32', 'sample.entropy')) : null;
  if (B === 0) return { ids, logprobs, entropy };

  const dummies = dummyTensors(gpu);
  const kernel = gpu.kernel({
    name: 'sampling.wgsl',
    code: samplingWgsl,
    entryPoint: 'sample_main',
    constants: { WG: wg },
  });
  const flags = (options.done ? 1 : 0) | (options.streams ? 2 : 0) | (entropy ? 4 : 0);

  // Chunk rows so that one logits binding stays under the adapter limit; a chunk's binding starts at
  // an aligned byte offset at or below its first row, the remainder goes in as an element offset.
  const align = gpu.limits.minStorageBufferOffsetAlignment;
  const maxBinding = Math.min(
    options.maxBindingBytes ?? gpu.limits.maxStorageBufferBindingSize,
    gpu.limits.maxStorageBufferBindingSize,
  );
  const rowBytes = V * 4;
  const rowsPerChunk = Math.floor((maxBinding - align) / rowBytes);
  if (rowsPerChunk < 1) {
    throw new Error(
      `sampleTokens: one row of logits (${rowBytes} bytes) does not fit a ${maxBinding}-byte storage binding`,
    );
  }
  const maxGrid = gpu.limits.maxComputeWorkgroupsPerDimension;
  for (let r0 = 0; r0 < B; r0 += rowsPerChunk) {
    const rows = Math.min(rowsPerChunk, B - r0);
    const start = viewOffset + r0 * rowBytes;
    const aligned = Math.floor(start / align) * align;
    const size = start - aligned + rows * rowBytes;
    const gridX = Math.min(rows, maxGrid);
    const gridY = Math.ceil(rows / gridX);
    const params = gpu.uniform('uuuuuuuuffuuuuu', [
      rows,
      r0,
      gridX,
      V,
      vocab,
      (start - aligned) / 4,
      topK,
      greedy ? 1 : 0,
      topP,
      greedy ? 1 : temperature,
      seed,
      step,
      padId,
      flags,
      wg >> 1,
    ]);
    const passes = greedy ? 2 : 3 + (topK > 0 ? 24 : 0) + (topP < 1 ? 24 : 0);
    gpu.dispatch(
      kernel,
      [
        { tensor, offset: aligned, size },
        options.done ?? dummies.read,
        options.streams ?? dummies.read,
        ids,
        logprobs,
        entropy ?? dummies.write,
        params,
      ],
      [gridX, gridY],
      rows * vocab * passes * 4,
    );
  }
  return { ids, logprobs, entropy };
}

// Placeholders bound where an optional input or output is absent (its flag keeps it unread/unwritten).
const dummyCache = new WeakMap<Gpu, { read: Tensor; write: Tensor }>();
function dummyTensors(gpu: Gpu): { read: Tensor; write: Tensor } {
  let d = dummyCache.get(gpu);
  if (!d) {
    d = {
      read: gpu.zeros([4], 'u32', 'sample.unused-in'),
      write: gpu.zeros([4], 'f32', 'sample.unused-out'),
    };
    dummyCache.set(gpu, d);
  }
  return d;
}
