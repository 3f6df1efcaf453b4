// The GPU runtime: one object that owns the device and everything a training loop needs from it.
//
//  - a buffer pool: tensors are pooled storage buffers, so a training step allocates nothing new;
//  - kernels: WGSL compiled once into cached pipelines; bind groups and uniform buffers are cached
//    by content, so a repeated dispatch costs a few encoder calls;
//  - batching: dispatches are recorded into one open compute pass and submitted together, at the
//    next readback, sync(), explicit flush(), or every `maxDispatchesPerSubmit` dispatches;
//  - readback: few, explicit and batched (`readMany`), with a timeout;
//  - errors: compile, validation, out-of-memory and device loss become typed errors (errors.ts) that
//    surface at the next `sync()`/`read()` instead of being printed and forgotten.
//
// Ordering rule that makes pooling safe: queue.writeBuffer runs on the queue timeline *before* any
// not-yet-submitted commands, so every CPU write first flushes what is recorded. A released buffer
// reused by a later dispatch is then always ordered after the work that used it before.
//
// Dawn in Node busy-spins the JS thread while a submit or mapAsync is pending: its AsyncRunner
// re-queues a setImmediate tick that polls the device for as long as any operation is in flight. On
// a CPU adapter that spin steals a core from the adapter itself. So in Node a wait ('block', the
// default there) blocks the JS thread (Atomics.wait: no CPU, no event loop) and lets one event-loop
// turn run between blocks, in which Dawn's tick notices finished work: first until 80 % of the GPU
// time predicted from earlier waits (in blocks of at most 100 ms, so that Ctrl-C and timers still
// run), then in slices of 1 % of the time waited so far (0.05 to 1 ms).
// The earlier strategy, 'sleep', slept (setTimeout) through 85 % of the prediction and then spun.
// Measured on lavapipe, 2 cores (bench/wait.ts, three runs): 'block' is 1.3-1.8x faster than
// 'await' on every workload but 1-ms rounds, 1.16-1.32x faster than 'sleep' on qwen-tiny's decode
// and level with it on the train step (0.82-1.08x). Rates are learned per size of wait (cost
// buckets a factor of 4 wide), for the prediction and for the hang limit (waitLimitMs): a decode
// step's small kernels run at a fraction of the rate of a training step's large matmuls, and one
// rate for both made the first update after a rollout sleep 3x longer than the work. A wait of a size not seen
// yet is not predicted.

import {
  type AcquiredDevice,
  type AcquireOptions,
  type AdapterReport,
  acquireDevice,
  releaseDawnInstance,
} from './device.ts';
import {
  DeviceLostError,
  formatBytes,
  type GpuError,
  GpuLimitError,
  GpuOutOfMemoryError,
  GpuTimeoutError,
  GpuValidationError,
  ShaderCompileError,
} from './errors.ts';
import { type CpuProbe, hangTimer, nodeCpuProbe } from './hang-clock.ts';
import {
  type Bindable,
  byteSizeOf,
  DTYPE_BYTES,
  type DType,
  Tensor,
  type TensorView,
  type TypedArrayFor,
} from './tensor.ts';

export interface GpuOptions extends AcquireOptions {
  /**
   * How long a readback or sync may wait for GPU work, in ms, unless the work's predicted time is
   * longer (then WAIT_LIMIT_PREDICTIONS times that: a CPU adapter's update can take minutes).
   */
  timeoutMs?: number;
  /**
   * Lets the hang clock leave out time in which this process was starved of CPU (hang-clock.ts): a
   * CPU adapter's work runs on this process's threads. Default in Gpu.create: process.cpuUsage() and
   * the load average in Node, none in browsers; null: wall time only.
   */
  cpuProbe?: CpuProbe | null;
  /**
   * How a readback or sync waits for the GPU (see the header): 'await' the promise (Dawn in Node then
   * spins the JS thread), 'block' the thread in slices between Dawn's ticks (Node only), or 'sleep'
   * through most of a predicted time first. Default: AGENT_R1_WAIT in Node, else 'block' there and
   * 'await' elsewhere.
   */
  waitMode?: WaitMode;
  /** Submit automatically after this many recorded dispatches. */
  maxDispatchesPerSubmit?: number;
}

export interface KernelSpec {
  /** A name for messages, usually the .wgsl file name. */
  name: string;
  code: string;
  entryPoint?: string;
  /** Values for WGSL `override` constants. */
  constants?: Record<string, number>;
}

export interface Kernel {
  readonly id: number;
  readonly name: string;
  readonly entryPoint: string;
  readonly pipeline: GPUComputePipeline;
}

export interface GpuStats {
  liveBytes: number;
  peakLiveBytes: number;
  pooledBytes: number;
  buffersCreated: number;
  buffersReused: number;
  dispatches: number;
  submits: number;
  readbacks: number;
  kernels: number;
  /** Waits that slept or blocked the JS thread, and ('sleep' mode) how many found the work done on waking. */
  sleptWaits: number;
  oversleptWaits: number;
  /** Milliseconds during which the JS thread slept or blocked in waits (wall time: concurrent waits count once). */
  sleptMs: number;
  /** The largest tensor (bytes asked for) acquired since resetLargestBuffer(): what one binding may need. */
  largestBuffer: number;
}

type Workgroups = readonly [number, number?, number?];

export type WaitMode = 'await' | 'block' | 'sleep';
export const WAIT_MODES: readonly WaitMode[] = ['await', 'block', 'sleep'];

const isNode = typeof process !== 'undefined' && !!process.versions?.node && typeof window === 'undefined';
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const nextTurn = () => new Promise<void>((r) => setImmediate(r));
// Atomics.wait on a cell nobody notifies: a sleep that blocks the thread instead of yielding to the
// event loop (where Dawn's tick would spin).
let blockCell: Int32Array | null = null;

/**
 * The longest single block. Node runs signal handlers (Ctrl-C) and timers only between blocks, and
 * one update on lavapipe is minutes of GPU work behind one readback: a block of 80 % of that made a
 * second Ctrl-C wait minutes to quit. An event-loop turn every 100 ms costs one Dawn tick.
 */
export const MAX_BLOCK_MS = 100;

/**
 * Waits for `pending` with the JS thread blocked (Atomics.wait) between event-loop turns: each turn
 * runs Dawn's queued tick, which settles `pending` once the GPU is done. Where a rate for work of
 * this size is learned, the thread first blocks until 80 % of the predicted time (in blocks of at most
 * MAX_BLOCK_MS); then slices of 1 % of the time since `startedAt` (the first unsynced submit), 0.05 to
 * 1 ms, so a wait ends about 1 % late (Atomics.wait itself overshoots by about 0.1 ms on lavapipe's
 * machine). `overslept`: the work was done within the predicted part, so the wait's time says little
 * about the GPU's rate. Exported for its tests.
 */
export async function blockUntilSettled<T>(
  pending: Promise<T>,
  startedAt: number,
  predictedMs: number,
  counters: Pick<GpuStats, 'sleptWaits' | 'sleptMs'>,
): Promise<[result: T, overslept: boolean]> {
  let settled = false;
  const settle = () => {
    settled = true;
  };
  pending.then(settle, settle);
  blockCell ??= new Int32Array(new SharedArrayBuffer(4));
  await nextTurn();
  if (!settled) counters.sleptWaits++;
  const predictedEnd = startedAt + 0.8 * predictedMs;
  let overslept = false;
  while (!settled) {
    const untilPredicted = predictedEnd - performance.now();
    const long = untilPredicted > 1;
    const slice = long
      ? Math.min(untilPredicted, MAX_BLOCK_MS)
      : Math.min(1, Math.max(0.05, 0.01 * (performance.now() - startedAt)));
    const t0 = performance.now();
    Atomics.wait(blockCell, 0, 0, slice);
    counters.sleptMs += performance.now() - t0;
    await nextTurn();
    overslept = long && settled;
  }
  return [await pending, overslept];
}

/** Waits whose costs are within a factor of 4 share a learned rate. */
function costBucket(cost: number): number {
  return Math.floor(Math.log2(Math.max(cost, 1)) / 2);
}

/**
 * A wait counts as hung after timeoutMs or this many times the GPU time its cost predicts, whichever
 * is longer. A fixed limit alone failed a real run: one update of 256 episodes on lavapipe is over 5
 * minutes of GPU work behind a single readback. In Node, time in which this process was starved of
 * CPU does not count (hang-clock.ts): a run beside a higher-priority one failed after 20 steps.
 */
export const WAIT_LIMIT_PREDICTIONS = 10;

/** Pool buckets: powers of two up to 64 KiB, then 8 sizes per octave (at most 12.5% waste). */
export function poolBucketSize(bytes: number): number {
  const b = Math.max(256, Math.ceil(bytes / 4) * 4);
  const pow = 2 ** Math.ceil(Math.log2(b));
  if (pow <= 65536) return pow;
  const step = pow / 16;
  return Math.ceil(b / step) * step;
}

export class Gpu {
  readonly device: GPUDevice;
  readonly adapter: GPUAdapter;
  readonly report: AdapterReport;
  readonly hasF16: boolean;
  readonly hasSubgroups: boolean;
  readonly hasTimestamps: boolean;
  /** See GpuOptions.timeoutMs; may be changed between waits. */
  timeoutMs: number;
  /** See GpuOptions.cpuProbe: what tells the hang clock that this process was starved of CPU. */
  readonly cpuProbe: CpuProbe | null;
  /** The WebGPU entry object (navigator.gpu, or Dawn's in Node), e.g. for tfjs on the same adapter. */
  readonly api: GPU;
  /** See GpuOptions.waitMode; may be changed between waits (bench/wait.ts compares them on one device). */
  waitMode: WaitMode;
  private readonly maxDispatchesPerSubmit: number;

  private lostError: DeviceLostError | null = null;
  private readonly lostPromise: Promise<never>;
  private pendingErrors: Promise<GpuError | null>[] = [];
  private uncapturedError: GpuError | null = null;

  private readonly freeBuffers = new Map<number, GPUBuffer[]>();
  // Per pool bucket: its buffers in use now, and the most in use at once since the last
  // trimPoolToRecentUse() (what that trim keeps).
  private readonly bucketUse = new Map<number, { live: number; peak: number }>();
  private readonly freeStaging = new Map<number, GPUBuffer[]>();
  private readonly bufferIds = new WeakMap<GPUBuffer, number>();
  private nextBufferId = 1;
  private readonly kernels = new Map<string, Kernel>();
  private readonly bindGroups = new Map<string, GPUBindGroup>();
  private readonly uniforms = new Map<string, GPUBuffer>();

  private encoder: GPUCommandEncoder | null = null;
  private pass: GPUComputePassEncoder | null = null;
  private recorded = 0;
  private recordedCost = 0;

  // Wait prediction: cost units completed per millisecond, learned from previous waits, per bucket
  // of the wait's total cost (costBucket).
  private readonly costPerMs = new Map<number, number>();
  private unsyncedCost = 0;
  private firstUnsyncedSubmit = 0;
  // A wait that includes a new pipeline's first use also times its compilation (seconds on lavapipe
  // for a large kernel): learning from it would make every later wait oversleep.
  private compiledSinceWait = false;
  // Waits sleeping now, and since when the first of them (for sleptMs as wall time: two reads awaited
  // together after one update sleep side by side, and summing them overstated the sleep twofold).
  private sleepers = 0;
  private sleepersSince = 0;

  private readonly counters: GpuStats = {
    liveBytes: 0,
    peakLiveBytes: 0,
    pooledBytes: 0,
    buffersCreated: 0,
    buffersReused: 0,
    dispatches: 0,
    submits: 0,
    readbacks: 0,
    kernels: 0,
    sleptWaits: 0,
    oversleptWaits: 0,
    sleptMs: 0,
    largestBuffer: 0,
  };

  static async create(options: GpuOptions = {}): Promise<Gpu> {
    const cpuProbe = options.cpuProbe !== undefined ? options.cpuProbe : isNode ? await nodeCpuProbe() : null;
    return new Gpu(await acquireDevice(options), { ...options, cpuProbe });
  }

  constructor(acquired: AcquiredDevice, options: GpuOptions = {}) {
    this.device = acquired.device;
    this.adapter = acquired.adapter;
    this.api = acquired.gpu;
    this.report = acquired.report;
    this.hasF16 = this.device.features.has('shader-f16');
    this.hasSubgroups = this.device.features.has('subgroups');
    this.hasTimestamps = this.device.features.has('timestamp-query');
    this.timeoutMs = options.timeoutMs ?? 300_000;
    this.cpuProbe = options.cpuProbe ?? null;
    const fromEnv = isNode ? (process.env.AGENT_R1_WAIT as WaitMode | undefined) : undefined;
    this.waitMode = options.waitMode ?? (fromEnv || (isNode ? 'block' : 'await'));
    if (!WAIT_MODES.includes(this.waitMode)) {
      const source = options.waitMode ? 'waitMode' : 'AGENT_R1_WAIT';
      throw new Error(
        `Gpu: ${source} must be one of ${WAIT_MODES.join(', ')}, got ${JSON.stringify(this.waitMode)}`,
      );
    }
    if (this.waitMode !== 'await' && !isNode) {
      throw new Error(
        `Gpu: waitMode '${this.waitMode}' is for Node (Dawn's busy-wait); browsers wait with 'await'`,
      );
    }
    this.maxDispatchesPerSubmit = options.maxDispatchesPerSubmit ?? 512;
    this.lostPromise = this.device.lost.then((info) => {
      this.lostError = new DeviceLostError(info.reason ?? 'unknown', info.message);
      throw this.lostError;
    });
    this.lostPromise.catch(() => {}); // observed through assertAlive() and races below
    this.device.addEventListener('uncapturederror', (event) => {
      const e = (event as GPUUncapturedErrorEvent).error;
      this.uncapturedError ??= toGpuError(e, 'uncaptured');
    });
  }

  get limits(): Record<string, number> {
    return this.report.limits;
  }

  get stats(): GpuStats {
    return { ...this.counters };
  }

  /** Starts a new peak measurement: peakLiveBytes becomes the current live bytes. */
  resetPeakMemory(): void {
    this.counters.peakLiveBytes = this.counters.liveBytes;
  }

  /** Starts a new measurement of stats.largestBuffer. */
  resetLargestBuffer(): void {
    this.counters.largestBuffer = 0;
  }

  // ---------------------------------------------------------------- buffers and tensors

  private assertAlive(): void {
    if (this.lostError) throw this.lostError;
  }

  private bufferId(buffer: GPUBuffer): number {
    let id = this.bufferIds.get(buffer);
    if (id === undefined) {
      id = this.nextBufferId++;
      this.bufferIds.set(buffer, id);
    }
    return id;
  }

  private acquireBuffer(bytes: number, label: string): GPUBuffer {
    this.assertAlive();
    const size = poolBucketSize(bytes);
    const maxBuffer = this.limits.maxBufferSize;
    if (size > maxBuffer) {
      throw new GpuLimitError(
        `tensor "${label}" needs ${formatBytes(bytes)}, more than this adapter's largest buffer (maxBufferSize ${formatBytes(maxBuffer)})`,
      );
    }
    const free = this.freeBuffers.get(size);
    let buffer = free?.pop();
    if (buffer) {
      this.counters.buffersReused++;
      this.counters.pooledBytes -= size;
    } else {
      this.device.pushErrorScope('out-of-memory');
      buffer = this.device.createBuffer({
        size,
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
        label,
      });
      this.watch(this.device.popErrorScope(), `allocating ${formatBytes(size)} for "${label}"`);
      this.counters.buffersCreated++;
    }
    this.counters.liveBytes += size;
    this.counters.peakLiveBytes = Math.max(this.counters.peakLiveBytes, this.counters.liveBytes);
    this.counters.largestBuffer = Math.max(this.counters.largestBuffer, bytes);
    let use = this.bucketUse.get(size);
    if (!use) {
      use = { live: 0, peak: 0 };
      this.bucketUse.set(size, use);
    }
    use.live++;
    use.peak = Math.max(use.peak, use.live);
    return buffer;
  }

  /** Called by Tensor.release(). */
  releaseBuffer(buffer: GPUBuffer): void {
    const size = buffer.size;
    this.counters.liveBytes -= size;
    this.counters.pooledBytes += size;
    const use = this.bucketUse.get(size);
    if (use) use.live--;
    let list = this.freeBuffers.get(size);
    if (!list) {
      list = [];
      this.freeBuffers.set(size, list);
    }
    list.push(buffer);
  }

  /** Destroys every pooled (free) buffer; live tensors are untouched. */
  trimPool(): void {
    this.flush();
    for (const list of this.freeBuffers.values()) for (const b of list) b.destroy();
    this.freeBuffers.clear();
    this.counters.pooledBytes = 0;
    this.bindGroups.clear(); // entries may reference destroyed buffers
    for (const use of this.bucketUse.values()) use.peak = use.live;
  }

  /**
   * Destroys the pooled buffers that the work since the last call did not need: of each size, it
   * keeps as many buffers (in use and free) as were in use at once since then. Called between
   * training steps, it bounds what the pool holds by one step's use; without it, every size a step
   * once needed (KV caches and packed rows vary from step to step) stays allocated for the run: a
   * 4 × 4 REINFORCE++ run held 3 to 6 times its peak of live tensors over six steps, and six 32 × 8 runs
   * sharing an 80 GB GPU ran out of memory. Returns the bytes freed.
   */
  trimPoolToRecentUse(): number {
    this.flush(); // recorded work may still name a pooled buffer: submit it before destroying any
    let freed = 0;
    for (const [size, list] of this.freeBuffers) {
      const use = this.bucketUse.get(size);
      const keep = use ? Math.max(0, use.peak - use.live) : 0;
      while (list.length > keep) {
        list.pop()!.destroy();
        freed += size;
      }
      if (list.length === 0) this.freeBuffers.delete(size);
    }
    for (const use of this.bucketUse.values()) use.peak = use.live;
    if (freed > 0) {
      this.counters.pooledBytes -= freed;
      this.bindGroups.clear(); // entries may reference destroyed buffers
    }
    return freed;
  }

  /** An uninitialised tensor (contents are whatever the pooled buffer held). */
  empty(shape: readonly number[], dtype: DType = 'f32', label = ''): Tensor {
    return new Tensor(this, this.acquireBuffer(byteSizeOf(shape, dtype), label), shape, dtype, label);
  }

  zeros(shape: readonly number[], dtype: DType = 'f32', label = ''): Tensor {
    const t = this.empty(shape, dtype, label);
    this.fill0(t);
    return t;
  }

  /** Zero-fills a tensor, ordered with the recorded dispatches. */
  fill0(target: Tensor | TensorView): void {
    const { buffer, offset, size } = resolveBinding(target);
    this.endPass();
    this.openEncoder().clearBuffer(buffer, offset, size);
  }

  upload<D extends DType>(
    data: TypedArrayFor<D> | ArrayLike<number>,
    shape: readonly number[],
    dtype?: D,
    label = '',
  ): Tensor {
    const dt: DType = dtype ?? inferDType(data);
    const t = this.empty(shape, dt, label);
    this.write(t, data);
    return t;
  }

  /** Writes CPU data into a tensor (flushes recorded work first; see the ordering rule above). */
  write(target: Tensor, data: ArrayLike<number> | ArrayBufferView, elementOffset = 0): void {
    this.assertAlive();
    const view = toTypedArray(data, target.dtype);
    if (elementOffset + view.length > target.size) {
      throw new Error(
        `write of ${view.length} elements at ${elementOffset} overflows ${target.toString()} (${target.size} elements)`,
      );
    }
    this.flush();
    const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    const byteOffset = elementOffset * (view.BYTES_PER_ELEMENT ?? 4);
    // writeBuffer needs 4-byte multiples: pad a trailing odd f16.
    if (bytes.byteLength % 4 !== 0 || byteOffset % 4 !== 0) {
      if (byteOffset % 4 !== 0) throw new Error('f16 writes must start at an even element offset');
      const padded = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
      padded.set(bytes);
      this.device.queue.writeBuffer(target.buffer, byteOffset, padded);
    } else {
      this.device.queue.writeBuffer(target.buffer, byteOffset, bytes as Uint8Array<ArrayBuffer>);
    }
  }

  /** Copies bytes between tensors, ordered with recorded dispatches. */
  copy(src: Tensor | TensorView, dst: Tensor | TensorView, bytes?: number): void {
    const s = resolveBinding(src);
    const d = resolveBinding(dst);
    const n = bytes ?? Math.min(s.size, d.size);
    this.endPass();
    this.openEncoder().copyBufferToBuffer(s.buffer, s.offset, d.buffer, d.offset, n);
  }

  // ---------------------------------------------------------------- kernels and dispatch

  /** A compiled pipeline, cached by source, entry point and override constants. */
  kernel(spec: KernelSpec): Kernel {
    this.assertAlive();
    const entryPoint = spec.entryPoint ?? 'main';
    const constKey = spec.constants ? JSON.stringify(Object.entries(spec.constants).sort()) : '';
    const key = `${spec.name}\u0000${entryPoint}\u0000${constKey}\u0000${spec.code}`;
    const cached = this.kernels.get(key);
    if (cached) return cached;
    const module = this.device.createShaderModule({ code: spec.code, label: spec.name });
    const compiled = module.getCompilationInfo().then((info) => {
      const messages = info.messages.map((m) => ({
        type: m.type,
        line: m.lineNum,
        column: m.linePos,
        text: m.message,
      }));
      return messages.some((m) => m.type === 'error')
        ? new ShaderCompileError(spec.name, messages, spec.code)
        : null;
    });
    this.device.pushErrorScope('validation');
    const pipeline = this.device.createComputePipeline({
      layout: 'auto',
      compute: { module, entryPoint, constants: spec.constants },
      label: `${spec.name}:${entryPoint}`,
    });
    const pipelineError = this.device
      .popErrorScope()
      .then((e) =>
        e ? new GpuValidationError(`creating pipeline ${spec.name}:${entryPoint}: ${e.message}`) : null,
      );
    // A compile error explains a pipeline error better, so report it first.
    this.pendingErrors.push(compiled.then(async (c) => c ?? (await pipelineError)));
    const kernel: Kernel = { id: this.kernels.size + 1, name: spec.name, entryPoint, pipeline };
    this.kernels.set(key, kernel);
    this.counters.kernels++;
    this.compiledSinceWait = true;
    return kernel;
  }

  /**
   * A uniform buffer holding `values`, one 4-byte slot each, typed by `types` ('u' u32, 'i' i32,
   * 'f' f32), e.g. uniform('uuuf', [M, N, K, alpha]). Cached by content: steady-state is free.
   */
  uniform(types: string, values: readonly number[]): GPUBuffer {
    if (types.length !== values.length)
      throw new Error(`uniform: ${types.length} types for ${values.length} values`);
    const slots = Math.max(4, Math.ceil(values.length / 4) * 4); // uniform structs round to 16 bytes
    const data = new ArrayBuffer(slots * 4);
    const u = new Uint32Array(data);
    const i = new Int32Array(data);
    const f = new Float32Array(data);
    for (let k = 0; k < values.length; k++) {
      const t = types[k];
      if (t === 'u') u[k] = values[k] >>> 0;
      else if (t === 'i') i[k] = values[k] | 0;
      else if (t === 'f') f[k] = values[k];
      else throw new Error(`uniform: unknown slot type "${t}" (use u, i or f)`);
    }
    const key = Array.from(u).join(',');
    const hit = this.uniforms.get(key);
    if (hit) {
      // Refresh LRU position.
      this.uniforms.delete(key);
      this.uniforms.set(key, hit);
      return hit;
    }
    const buffer = this.device.createBuffer({
      size: data.byteLength,
      usage: GPUBufferUsage.UNIFORM,
      mappedAtCreation: true,
    });
    new Uint32Array(buffer.getMappedRange()).set(u);
    buffer.unmap();
    this.uniforms.set(key, buffer);
    if (this.uniforms.size > 4096) {
      // Evicted uniforms may still be referenced by recorded work: drop them only after a flush.
      this.flush();
      const oldest = this.uniforms.keys().next().value as string;
      this.uniforms.get(oldest)?.destroy();
      this.uniforms.delete(oldest);
      this.bindGroups.clear();
    }
    return buffer;
  }

  /**
   * Records one dispatch. `bindings[i]` is bound at @binding(i) of group 0; each entry point should
   * use a contiguous 0..n-1 range (layouts are derived from the entry point). `cost` is a rough work
   * estimate (e.g. FLOPs) used only to predict wait times.
   */
  dispatch(
    kernel: Kernel,
    bindings: ReadonlyArray<Bindable | undefined>,
    workgroups: Workgroups,
    cost?: number,
  ): void {
    this.assertAlive();
    const [x, y = 1, z = 1] = workgroups;
    const maxWg = this.limits.maxComputeWorkgroupsPerDimension;
    if (x > maxWg || y > maxWg || z > maxWg) {
      throw new GpuLimitError(
        `${kernel.name}:${kernel.entryPoint} asks for [${x}, ${y}, ${z}] workgroups; this adapter allows ${maxWg} per dimension`,
      );
    }
    if (x === 0 || y === 0 || z === 0) return; // an empty problem: nothing to do
    const bindGroup = this.bindGroupFor(kernel, bindings);
    const pass = this.openPass();
    pass.setPipeline(kernel.pipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(x, y, z);
    this.recorded++;
    this.recordedCost += cost ?? x * y * z * 64;
    this.counters.dispatches++;
    if (this.recorded >= this.maxDispatchesPerSubmit) this.flush();
  }

  private bindGroupFor(kernel: Kernel, bindings: ReadonlyArray<Bindable | undefined>): GPUBindGroup {
    const entries: GPUBindGroupEntry[] = [];
    let key = `${kernel.id}`;
    const align = this.limits.minStorageBufferOffsetAlignment;
    const maxBinding = this.limits.maxStorageBufferBindingSize;
    for (let i = 0; i < bindings.length; i++) {
      const b = bindings[i];
      if (b === undefined) continue;
      const { buffer, offset, size } = resolveBinding(b);
      if (offset % align !== 0) {
        throw new GpuLimitError(
          `${kernel.name}: binding ${i} starts at byte ${offset}, not a multiple of the adapter's ${align}-byte offset alignment`,
        );
      }
      if (size > maxBinding && (buffer.usage & GPUBufferUsage.STORAGE) !== 0) {
        throw new GpuLimitError(
          `${kernel.name}: binding ${i} is ${formatBytes(size)}, over this adapter's maxStorageBufferBindingSize (${formatBytes(maxBinding)}); chunk it`,
        );
      }
      key += `|${i}:${this.bufferId(buffer)}:${offset}:${size}`;
      entries.push({ binding: i, resource: { buffer, offset, size } });
    }
    let group = this.bindGroups.get(key);
    if (!group) {
      group = this.device.createBindGroup({ layout: kernel.pipeline.getBindGroupLayout(0), entries });
      if (this.bindGroups.size > 8192) this.bindGroups.clear();
      this.bindGroups.set(key, group);
    }
    return group;
  }

  private openEncoder(): GPUCommandEncoder {
    if (!this.encoder) {
      this.device.pushErrorScope('validation');
      this.device.pushErrorScope('out-of-memory');
      this.encoder = this.device.createCommandEncoder();
    }
    return this.encoder;
  }

  private openPass(): GPUComputePassEncoder {
    if (!this.pass) this.pass = this.openEncoder().beginComputePass();
    return this.pass;
  }

  private endPass(): void {
    if (this.pass) {
      this.pass.end();
      this.pass = null;
    }
  }

  /** Submits everything recorded so far (does not wait). */
  flush(): void {
    if (!this.encoder) return;
    this.endPass();
    const commands = this.encoder.finish();
    this.encoder = null;
    this.device.queue.submit([commands]);
    this.watch(this.device.popErrorScope(), 'submitted GPU work');
    this.watch(this.device.popErrorScope(), 'submitted GPU work');
    this.counters.submits++;
    if (this.unsyncedCost === 0) this.firstUnsyncedSubmit = performance.now();
    this.unsyncedCost += this.recordedCost;
    this.recorded = 0;
    this.recordedCost = 0;
  }

  private watch(scope: Promise<GPUError | null>, what: string): void {
    this.pendingErrors.push(scope.then((e) => (e ? toGpuError(e, what) : null)));
  }

  /** Throws the first error any earlier GPU call produced (compile, validation, OOM, uncaptured). */
  async checkErrors(): Promise<void> {
    const pending = this.pendingErrors;
    this.pendingErrors = [];
    const results = await Promise.all(pending);
    const first = results.find((e) => e !== null) ?? this.uncapturedError;
    this.uncapturedError = null;
    if (first) throw first;
  }

  /**
   * How long the next wait may last: timeoutMs, or WAIT_LIMIT_PREDICTIONS times the GPU time that
   * the rate learned for work of its size (else the nearest size learned) predicts for the work
   * submitted since the last wait, whichever is longer.
   */
  waitLimitMs(): number {
    if (this.unsyncedCost === 0 || this.costPerMs.size === 0) return this.timeoutMs;
    const bucket = costBucket(this.unsyncedCost);
    let nearest = Number.POSITIVE_INFINITY;
    let rate = 0;
    for (const [b, r] of this.costPerMs) {
      if (Math.abs(b - bucket) < nearest) [nearest, rate] = [Math.abs(b - bucket), r];
    }
    return Math.max(this.timeoutMs, (WAIT_LIMIT_PREDICTIONS * this.unsyncedCost) / rate);
  }

  /** Waits for `work` as waitMode says (see the header): await, block in slices, or sleep first. */
  private async waitFor<T>(work: () => Promise<T>, what: string): Promise<T> {
    const start = this.firstUnsyncedSubmit || performance.now();
    let slept = false;
    const bucket = costBucket(this.unsyncedCost);
    const rate = this.costPerMs.get(bucket);
    if (this.waitMode === 'sleep' && this.unsyncedCost > 0 && rate !== undefined) {
      const remaining = (0.85 * this.unsyncedCost) / rate - (performance.now() - start);
      if (remaining > 2) {
        if (this.sleepers++ === 0) this.sleepersSince = performance.now();
        try {
          await sleep(Math.min(remaining, this.timeoutMs));
        } finally {
          if (--this.sleepers === 0) this.counters.sleptMs += performance.now() - this.sleepersSince;
        }
        slept = true;
        this.counters.sleptWaits++;
      }
    }
    const woke = performance.now();
    const limit = this.waitLimitMs();
    const hang = hangTimer(limit, this.cpuProbe, (clock) => new GpuTimeoutError(what, limit, clock.starved));
    const timeout = hang.promise;
    try {
      const pending = Promise.race([work(), this.lostPromise, timeout]);
      let result: T;
      if (this.waitMode === 'block') {
        const predictedMs = rate === undefined ? 0 : this.unsyncedCost / rate;
        [result, slept] = await blockUntilSettled(pending, start, predictedMs, this.counters);
      } else result = await pending;
      const now = performance.now();
      const elapsed = now - start;
      // 'block' sets `slept` only where its first, predicted block found the work done.
      if (slept && (this.waitMode === 'block' || now - woke < 2)) {
        // The work was already done when we woke: `elapsed` is our own sleep, not the GPU's time, and
        // learning from it would confirm an underestimated rate forever. Halve the next sleep instead.
        this.costPerMs.set(bucket, 2 * rate!);
        this.counters.oversleptWaits++;
      } else if (this.unsyncedCost > 0 && elapsed > 20 && !this.compiledSinceWait) {
        // Short waits are mostly submit/readback overhead (several ms on a loaded CPU), not throughput:
        // a tiny job learned here would predict seconds of sleep for the next, larger one.
        const seen = this.unsyncedCost / elapsed;
        this.costPerMs.set(bucket, rate === undefined ? seen : 0.7 * rate + 0.3 * seen);
      }
      this.unsyncedCost = 0;
      this.firstUnsyncedSubmit = 0;
      this.compiledSinceWait = false;
      return result;
    } finally {
      hang.stop();
    }
  }

  /** Submits recorded work and waits until the GPU has finished it; throws any pending GPU error. */
  async sync(): Promise<void> {
    this.assertAlive();
    this.flush();
    await this.waitFor(() => this.device.queue.onSubmittedWorkDone(), 'GPU work (sync)');
    await this.checkErrors();
  }

  async read(t: Tensor | TensorView): Promise<Float32Array | Uint16Array | Uint32Array | Int32Array> {
    const [out] = await this.readMany([t]);
    return out;
  }

  /** Reads a float32 tensor (throws for other dtypes, so callers never misread bits). */
  async readF32(t: Tensor): Promise<Float32Array> {
    if (t.dtype !== 'f32') throw new Error(`readF32 on ${t.toString()}`);
    return (await this.read(t)) as Float32Array;
  }

  /** Reads several tensors with one submit and one wait. */
  async readMany(
    list: ReadonlyArray<Tensor | TensorView>,
  ): Promise<Array<Float32Array | Uint16Array | Uint32Array | Int32Array>> {
    this.assertAlive();
    this.endPass();
    const encoder = this.openEncoder();
    const staged = list.map((t) => {
      const { buffer, offset, size } = resolveBinding(t);
      const staging = this.acquireStaging(size);
      encoder.copyBufferToBuffer(buffer, offset, staging, 0, size);
      const tensor = 'tensor' in t ? t.tensor : t;
      // A whole tensor reads back exactly `size` elements (an odd f16 count has 2 bytes of padding).
      const count = 'tensor' in t ? Math.floor(size / DTYPE_BYTES[tensor.dtype]) : t.size;
      return { staging, size, dtype: tensor.dtype, count };
    });
    this.flush();
    this.counters.readbacks++;
    try {
      await this.waitFor(
        () => Promise.all(staged.map((s) => s.staging.mapAsync(GPUMapMode.READ, 0, s.size))),
        `reading back ${list.length} tensor(s)`,
      );
    } catch (e) {
      // A failed map leaves buffers unusable for mapping; drop them rather than pool them.
      for (const s of staged) s.staging.destroy();
      await this.checkErrors();
      throw e;
    }
    const out = staged.map((s) => {
      const bytes = s.staging.getMappedRange(0, s.size).slice(0);
      s.staging.unmap();
      this.releaseStaging(s.staging);
      return fromBytes(bytes, s.dtype, s.count);
    });
    await this.checkErrors();
    return out;
  }

  private acquireStaging(bytes: number): GPUBuffer {
    const size = poolBucketSize(bytes);
    const hit = this.freeStaging.get(size)?.pop();
    if (hit) return hit;
    return this.device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  }

  private releaseStaging(buffer: GPUBuffer): void {
    let list = this.freeStaging.get(buffer.size);
    if (!list) {
      list = [];
      this.freeStaging.set(buffer.size, list);
    }
    if (list.length < 8) list.push(buffer);
    else buffer.destroy();
  }

  /** Frees everything; the Gpu object is unusable afterwards. */
  destroy(): void {
    this.encoder = null;
    this.pass = null;
    this.device.destroy();
    // Let Node exit: Dawn keeps the process alive while its instance is referenced.
    releaseDawnInstance(this.api);
  }
}

function resolveBinding(b: Bindable): { buffer: GPUBuffer; offset: number; size: number } {
  if (b instanceof Tensor) return { buffer: b.buffer, offset: 0, size: b.byteSize };
  if ('tensor' in b) {
    if (b.offset + b.size > b.tensor.byteSize) {
      throw new Error(
        `view [${b.offset}, ${b.offset + b.size}) is outside ${b.tensor.toString()} (${b.tensor.byteSize} bytes)`,
      );
    }
    return { buffer: b.tensor.buffer, offset: b.offset, size: b.size };
  }
  return { buffer: b, offset: 0, size: b.size };
}

function inferDType(data: ArrayLike<number>): DType {
  if (data instanceof Uint32Array) return 'u32';
  if (data instanceof Int32Array) return 'i32';
  if (data instanceof Uint16Array) return 'f16';
  return 'f32';
}

function toTypedArray(
  data: ArrayLike<number> | ArrayBufferView,
  dtype: DType,
): Float32Array | Uint32Array | Int32Array | Uint16Array {
  const want = { f32: Float32Array, u32: Uint32Array, i32: Int32Array, f16: Uint16Array, bf16: Uint16Array }[
    dtype
  ];
  if (data instanceof want) return data;
  if (ArrayBuffer.isView(data)) {
    if (data instanceof DataView) throw new Error('write: DataView is not supported; pass a typed array');
    return want.from(data as unknown as ArrayLike<number>);
  }
  return want.from(data as ArrayLike<number>);
}

function fromBytes(
  bytes: ArrayBuffer,
  dtype: DType,
  count: number,
): Float32Array | Uint16Array | Uint32Array | Int32Array {
  switch (dtype) {
    case 'f32':
      return new Float32Array(bytes, 0, count);
    case 'u32':
      return new Uint32Array(bytes, 0, count);
    case 'i32':
      return new Int32Array(bytes, 0, count);
    case 'f16':
    case 'bf16':
      return new Uint16Array(bytes, 0, count);
  }
}

function toGpuError(e: GPUError, what: string): GpuError {
  const name = (e as { constructor?: { name?: string } }).constructor?.name ?? '';
  if (name.includes('OutOfMemory')) return new GpuOutOfMemoryError(`${what}: ${e.message}`);
  return new GpuValidationError(`${what}: ${e.message}`);
}
