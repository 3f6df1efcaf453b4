// Thin wrappers over src/shaders/optimizer.wgsl: the global gradient norm with clipping and
// non-finite detection, computed and consumed on the GPU, and a fused AdamW (torch.optim.AdamW).
//
// A training step needs no readback:
//   const norm = gradNorm(gpu, grads, { maxNorm: 1 });   // records the reduction, returns a state tensor
//   adamw.step(grads, { lr, gradNorm: norm });           // kernels read clipScale / nonFinite from it
//   ... later, for logging: (await readGradNorm(gpu, norm)).norm
// or let the optimizer do it: new AdamW(gpu, params, { lr, maxGradNorm: 1 }).step(grads).
//
// Non-finite gradients: if any gradient holds inf/NaN (or Σ g² overflows float32), the state reads
// nonFinite = 1, clipScale = 0, norm = inf/NaN, and adamw_step leaves every p, m and v untouched (the
// step is skipped on the GPU, like torch's GradScaler skipping optimizer.step()). The CPU cannot know
// this without a readback, so AdamW's per-parameter step counts have advanced; a caller that wants
// torch's exact bookkeeping reads the flag (readGradNorm) and calls `adamw.undoStep()`.

import optimizerWgsl from '../../shaders/optimizer.wgsl?raw';
import type { Gpu } from '../runtime.ts';
import type { Tensor, TensorView } from '../tensor.ts';

/** Slots of the grad-norm state tensor (f32). Per-tensor Σ g² follow at HEADER + k. */
export const GRAD_NORM_SLOT = {
  sumSq: 0,
  norm: 1,
  clipScale: 2,
  nonFinite: 3,
  maxNorm: 4,
  header: 8,
} as const;

export type ReduceVariant = 'lanes' | 'tree';

/**
 * Barrier-free per-lane partial sums on CPU adapters (workgroup barriers and workgroup memory are
 * slow there); a workgroup-memory tree on real GPUs. Both are deterministic.
 */
export function defaultReduceVariant(gpu: Gpu): ReduceVariant {
  return gpu.report.kind === 'gpu' ? 'tree' : 'lanes';
}

/** Overrides of adapter limits, for tests of the chunked / 2D-grid paths on small tensors. */
export interface OptimizerLimits {
  /** Elements per storage binding (default: the adapter's maxStorageBufferBindingSize). */
  bindingElements?: number;
  /** Workgroups per grid dimension (default: the adapter's maxComputeWorkgroupsPerDimension). */
  workgroupsPerDim?: number;
}

// Values per workgroup in one stage (64 lanes x 64 items, or 256 threads x 16 items): 4096 both.
const BLOCK = 4096;
const LANES = 64;
const SERIAL_MAX = 4096; // lanes variant: the last stage sums at most this many values in one invocation
const ADAM_WG = 64;

interface Limits {
  bindingElements: number;
  workgroupsPerDim: number;
  align: number;
}

function resolveLimits(gpu: Gpu, o: OptimizerLimits | undefined): Limits {
  const align = Math.max(4, gpu.limits.minStorageBufferOffsetAlignment || 256);
  const alignElems = align / 4;
  let bindingElements = o?.bindingElements ?? Math.floor(gpu.limits.maxStorageBufferBindingSize / 4);
  // Chunks start at multiples of the offset alignment (and of the Adam workgroup size).
  const quantum = Math.max(alignElems, ADAM_WG, BLOCK);
  bindingElements = Math.floor(bindingElements / quantum) * quantum;
  if (bindingElements < quantum) {
    throw new Error(
      `optimizer: bindingElements ${o?.bindingElements ?? 'from the adapter'} is below the minimum chunk of ${quantum} elements`,
    );
  }
  const workgroupsPerDim = o?.workgroupsPerDim ?? gpu.limits.maxComputeWorkgroupsPerDimension;
  if (!Number.isInteger(workgroupsPerDim) || workgroupsPerDim < 1)
    throw new Error(`optimizer: workgroupsPerDim must be a positive integer, got ${workgroupsPerDim}`);
  return { bindingElements, workgroupsPerDim, align };
}

/** A 2D grid holding `groups` workgroups within the per-dimension limit. */
function grid(groups: number, perDim: number): [number, number] {
  const x = Math.min(groups, perDim);
  const y = Math.ceil(groups / x);
  if (y > perDim) throw new Error(`optimizer: ${groups} workgroups do not fit a ${perDim}² grid`);
  return [x, y];
}

/** Element ranges of a tensor that each fit one storage binding. */
function chunks(size: number, bindingElements: number): Array<{ start: number; count: number }> {
  const out: Array<{ start: number; count: number }> = [];
  for (let start = 0; start < size; start += bindingElements)
    out.push({ start, count: Math.min(bindingElements, size - start) });
  return out;
}

function viewOf(t: Tensor, start: number, count: number): Tensor | TensorView {
  if (start === 0 && count === t.size) return t;
  return { tensor: t, offset: start * 4, size: count * 4 };
}

function shapeStr(t: Tensor): string {
  return `[${t.shape.join(', ')}]`;
}

// ------------------------------------------------------------------------------------------ grad norm

export interface GradNormOptions {
  /** Clip threshold: clipScale = min(1, maxNorm / (norm + 1e-6)). Omit (or Infinity) for no clipping. */
  maxNorm?: number;
  /** Reuse a state tensor (f32, at least 8 + grads.length elements) instead of allocating one. */
  out?: Tensor;
  variant?: ReduceVariant;
  limits?: OptimizerLimits;
  label?: string;
}

/**
 * Records the global L2 norm of `grads` and the clip scale, all on the GPU. Returns the state tensor
 * (layout: GRAD_NORM_SLOT; per-tensor Σ g² at 8 + k). Nothing is read back.
 */
export function gradNorm(gpu: Gpu, grads: readonly Tensor[], options: GradNormOptions = {}): Tensor {
  const { maxNorm } = options;
  const clip = maxNorm !== undefined && maxNorm !== Number.POSITIVE_INFINITY;
  if (clip && !(Number.isFinite(maxNorm) && maxNorm > 0))
    throw new Error(`gradNorm: maxNorm must be a positive number or Infinity, got ${maxNorm}`);
  grads.forEach((g, k) => {
    if (g.dtype !== 'f32') throw new Error(`gradNorm: gradient ${k} ${g.toString()} is not f32`);
  });
  const stateSize = GRAD_NORM_SLOT.header + grads.length;
  let state = options.out;
  if (state) {
    if (state.dtype !== 'f32' || state.size < stateSize)
      throw new Error(
        `gradNorm: out ${state.toString()} must be f32 with at least ${stateSize} elements (8 + ${grads.length} tensors)`,
      );
  } else state = gpu.empty([stateSize], 'f32', options.label ?? 'gradNorm.state');
  gpu.fill0(state); // empty tensors keep a 0 slot
  const variant = options.variant ?? defaultReduceVariant(gpu);
  const limits = resolveLimits(gpu, options.limits);

  // Ping-pong scratch for the partial sums, sized for the largest gradient.
  let maxPartials = 0;
  for (const g of grads) maxPartials = Math.max(maxPartials, stage1Count(g.size, variant, limits));
  const scratch =
    maxPartials > 0
      ? [
          gpu.empty([maxPartials], 'f32', 'gradNorm.partialsA'),
          gpu.empty([Math.max(1, Math.ceil(maxPartials / BLOCK) * LANES)], 'f32', 'gradNorm.partialsB'),
        ]
      : [];
  grads.forEach((g, k) => {
    sumOfSquaresInto(gpu, g, state, GRAD_NORM_SLOT.header + k, variant, limits, scratch);
  });
  for (const s of scratch) s.release(); // pooled reuse is queue-ordered: safe with work in flight

  const kernel = gpu.kernel({
    name: 'optimizer.wgsl',
    code: optimizerWgsl,
    entryPoint: 'grad_norm_finalize',
  });
  const params = gpu.uniform('uuf', [grads.length, clip ? 1 : 0, clip ? (maxNorm as number) : 0]);
  gpu.dispatch(kernel, [state, params], [1], grads.length + 16);
  return state;
}

/** How many partials stage 1 writes for a tensor of n values, or 0 when one stage suffices. */
function stage1Count(n: number, variant: ReduceVariant, limits: Limits): number {
  const pieces = chunks(n, limits.bindingElements);
  if (pieces.length <= 1 && n <= finalMax(variant)) return 0;
  let total = 0;
  for (const p of pieces) total += stageOut(p.count, variant);
  return total;
}

function finalMax(variant: ReduceVariant): number {
  return variant === 'tree' ? BLOCK : SERIAL_MAX;
}

function stageOut(n: number, variant: ReduceVariant): number {
  const groups = Math.ceil(n / BLOCK);
  return variant === 'tree' ? groups : groups * LANES;
}

function reduceKernel(gpu: Gpu, entry: 'reduce_lanes' | 'reduce_tree' | 'reduce_serial', square: boolean) {
  return gpu.kernel({
    name: 'optimizer.wgsl',
    code: optimizerWgsl,
    entryPoint: entry,
    constants: { SQUARE: square ? 1 : 0 },
  });
}

/** One reduction stage: src [n] -> dst[dstOff ..]. Returns how many values it wrote. */
function stage(
  gpu: Gpu,
  src: Tensor | TensorView,
  n: number,
  dst: Tensor,
  dstOff: number,
  square: boolean,
  variant: ReduceVariant,
  limits: Limits,
  final: boolean,
): number {
  if (variant === 'lanes' && final) {
    const params = gpu.uniform('uuuu', [n, dstOff, 1, 0]);
    gpu.dispatch(reduceKernel(gpu, 'reduce_serial', square), [src, dst, params], [1], n * 8);
    return 1;
  }
  const groups = Math.ceil(n / BLOCK);
  const params = gpu.uniform('uuuu', [n, dstOff, groups, 0]);
  const entry = variant === 'tree' ? 'reduce_tree' : 'reduce_lanes';
  gpu.dispatch(
    reduceKernel(gpu, entry, square),
    [src, dst, params],
    grid(groups, limits.workgroupsPerDim),
    n,
  );
  return stageOut(n, variant);
}

/** Records Σ x² of one tensor into dst[slot], in deterministic stages. */
function sumOfSquaresInto(
  gpu: Gpu,
  x: Tensor,
  dst: Tensor,
  slot: number,
  variant: ReduceVariant,
  limits: Limits,
  scratch: Tensor[],
): void {
  const n = x.size;
  if (n === 0) return;
  const pieces = chunks(n, limits.bindingElements);
  if (pieces.length === 1 && n <= finalMax(variant)) {
    stage(gpu, x, n, dst, slot, true, variant, limits, true);
    return;
  }
  // Stage 1: each binding-sized piece writes its partials after the previous piece's.
  let count = 0;
  for (const p of pieces) {
    count += stage(
      gpu,
      viewOf(x, p.start, p.count),
      p.count,
      scratch[0],
      count,
      true,
      variant,
      limits,
      false,
    );
  }
  let cur = 0;
  while (count > finalMax(variant)) {
    count = stage(gpu, scratch[cur], count, scratch[1 - cur], 0, false, variant, limits, false);
    cur = 1 - cur;
  }
  stage(gpu, scratch[cur], count, dst, slot, false, variant, limits, true);
}

/**
 * Records Σ x² of one tensor into `out[slot]` (f32). Deterministic; no readback.
 * Useful for per-tensor norms outside the optimizer.
 */
export function sumOfSquares(
  gpu: Gpu,
  x: Tensor,
  out: Tensor,
  slot = 0,
  options: { variant?: ReduceVariant; limits?: OptimizerLimits } = {},
): void {
  if (x.dtype !== 'f32') throw new Error(`sumOfSquares: ${x.toString()} is not f32`);
  if (out.dtype !== 'f32' || slot < 0 || slot >= out.size || !Number.isInteger(slot))
    throw new Error(`sumOfSquares: slot ${slot} is not an element of ${out.toString()}`);
  const variant = options.variant ?? defaultReduceVariant(gpu);
  const limits = resolveLimits(gpu, options.limits);
  const partials = stage1Count(x.size, variant, limits);
  const scratch =
    partials > 0
      ? [
          gpu.empty([partials], 'f32', 'sumOfSquares.partialsA'),
          gpu.empty([Math.max(1, Math.ceil(partials / BLOCK) * LANES)], 'f32', 'sumOfSquares.partialsB'),
        ]
      : [];
  if (x.size === 0) gpu.fill0({ tensor: out, offset: slot * 4, size: 4 }); // Σ over nothing is 0
  sumOfSquaresInto(gpu, x, out, slot, variant, limits, scratch);
  for (const s of scratch) s.release();
}

export interface GradNormInfo {
  sumSq: number;
  norm: number;
  clipScale: number;
  /** True when some gradient was inf/NaN (or Σ g² overflowed): AdamW skipped that step. */
  nonFinite: boolean;
  /** The clip threshold used, or null without clipping. */
  maxNorm: number | null;
  /** Σ g² per gradient tensor, in the order given to gradNorm (only with perTensor: true). */
  perTensorSumSq?: Float32Array;
}

/** Reads a grad-norm state tensor back (one small readback; do it lazily, for logging). */
export async function readGradNorm(
  gpu: Gpu,
  state: Tensor,
  options: { perTensor?: boolean } = {},
): Promise<GradNormInfo> {
  if (state.dtype !== 'f32' || state.size < GRAD_NORM_SLOT.header)
    throw new Error(`readGradNorm: ${state.toString()} is not a grad-norm state tensor`);
  const all = options.perTensor === true;
  const data = (await gpu.read(
    all ? state : { tensor: state, offset: 0, size: GRAD_NORM_SLOT.header * 4 },
  )) as Float32Array;
  const info: GradNormInfo = {
    sumSq: data[GRAD_NORM_SLOT.sumSq],
    norm: data[GRAD_NORM_SLOT.norm],
    clipScale: data[GRAD_NORM_SLOT.clipScale],
    nonFinite: data[GRAD_NORM_SLOT.nonFinite] !== 0,
    maxNorm: data[GRAD_NORM_SLOT.maxNorm] > 0 ? data[GRAD_NORM_SLOT.maxNorm] : null,
  };
  if (all) info.perTensorSumSq = data.slice(GRAD_NORM_SLOT.header);
  return info;
}

// ------------------------------------------------------------------------------------------ AdamW

export interface AdamWHyperparams {
  lr: number;
  betas: readonly [number, number];
  eps: number;
  weightDecay: number;
}

export interface AdamWGroup extends Partial<AdamWHyperparams> {
  name: string;
  /** Members: a list of names, a RegExp tested on the name, or a predicate. The first matching group wins. */
  match: readonly string[] | RegExp | ((name: string) => boolean);
  /** Parameters of a frozen group are never stepped (and get no m/v until unfrozen). */
  frozen?: boolean;
}

export interface AdamWOptions extends Partial<AdamWHyperparams> {
  /** Groups with their own hyperparameters; parameters matching none are in group "default". */
  groups?: readonly AdamWGroup[];
  /** When set, step() computes the global grad norm itself and clips to this (Infinity: detect only). */
  maxGradNorm?: number;
  variant?: ReduceVariant;
  limits?: OptimizerLimits;
}

export interface AdamWStepOptions {
  /**
   * The scheduled learning rate for this step. Each group's lr is scaled by the same factor
   * (lr / the optimizer's default lr), as torch's LR schedulers do with per-group initial lrs;
   * without per-group lrs this is simply the lr (and every group gets exactly lr when the default
   * lr is 0). Default: the configured lrs.
   */
  lr?: number;
  /** Overrides the step count t used for bias correction (default: per-parameter counts, 1-based). */
  t?: number;
  /** A grad-norm state tensor from gradNorm() to clip with and check; default: per maxGradNorm. */
  gradNorm?: Tensor;
}

export type NamedTensors = Readonly<Record<string, Tensor>> | ReadonlyMap<string, Tensor>;

export interface AdamWState {
  version: 1;
  /** Per parameter that has been stepped: its step count and moment estimates. */
  params: Record<string, { step: number; m: Float32Array; v: Float32Array }>;
}

interface ParamSlot {
  name: string;
  tensor: Tensor;
  group: string;
  row: number;
  step: number;
  frozen: boolean;
  m: Tensor | null;
  v: Tensor | null;
}

function entriesOf(x: NamedTensors): Array<[string, Tensor]> {
  return x instanceof Map ? [...x.entries()] : Object.entries(x as Record<string, Tensor>);
}

function checkHyper(where: string, h: AdamWHyperparams): void {
  const [b1, b2] = h.betas;
  if (!(Number.isFinite(h.lr) && h.lr >= 0)) throw new Error(`${where}: lr must be >= 0, got ${h.lr}`);
  if (!(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1))
    throw new Error(`${where}: betas must be in [0, 1), got [${b1}, ${b2}]`);
  if (!(Number.isFinite(h.eps) && h.eps > 0)) throw new Error(`${where}: eps must be > 0, got ${h.eps}`);
  if (!(Number.isFinite(h.weightDecay) && h.weightDecay >= 0))
    throw new Error(`${where}: weightDecay must be >= 0, got ${h.weightDecay}`);
}

/**
 * AdamW over named parameters, torch.optim.AdamW semantics, one fused dispatch per parameter tensor.
 * Owns m and v (pooled, zero-initialised on a parameter's first step), a per-step hyperparameter
 * tensor, and (with maxGradNorm) a grad-norm state tensor.
 */
export class AdamW {
  readonly gpu: Gpu;
  readonly defaults: AdamWHyperparams;
  private readonly groupHyper = new Map<string, AdamWHyperparams>();
  private readonly slots: ParamSlot[] = [];
  private readonly byName = new Map<string, ParamSlot>();
  private readonly hyper: Tensor;
  private readonly noClipState: Tensor;
  private normState: Tensor | null = null;
  private readonly maxGradNorm: number | undefined;
  private readonly variant: ReduceVariant | undefined;
  private readonly limits: OptimizerLimits | undefined;
  private lastStepped: ParamSlot[] = [];
  private released = false;

  constructor(gpu: Gpu, params: NamedTensors, options: AdamWOptions = {}) {
    this.gpu = gpu;
    this.defaults = {
      lr: options.lr ?? 1e-3,
      betas: options.betas ?? [0.9, 0.999],
      eps: options.eps ?? 1e-8,
      weightDecay: options.weightDecay ?? 1e-2,
    };
    checkHyper('AdamW', this.defaults);
    this.maxGradNorm = options.maxGradNorm;
    if (
      this.maxGradNorm !== undefined &&
      !(this.maxGradNorm > 0 || this.maxGradNorm === Number.POSITIVE_INFINITY)
    )
      throw new Error(`AdamW: maxGradNorm must be > 0 or Infinity, got ${this.maxGradNorm}`);
    this.variant = options.variant;
    this.limits = options.limits;
    const groups = options.groups ?? [];
    this.groupHyper.set('default', this.defaults);
    for (const g of groups) {
      if (this.groupHyper.has(g.name)) throw new Error(`AdamW: duplicate group name "${g.name}"`);
      const h: AdamWHyperparams = {
        lr: g.lr ?? this.defaults.lr,
        betas: g.betas ?? this.defaults.betas,
        eps: g.eps ?? this.defaults.eps,
        weightDecay: g.weightDecay ?? this.defaults.weightDecay,
      };
      checkHyper(`AdamW group "${g.name}"`, h);
      this.groupHyper.set(g.name, h);
    }
    const matches = (g: AdamWGroup, name: string): boolean =>
      typeof g.match === 'function'
        ? g.match(name)
        : g.match instanceof RegExp
          ? g.match.test(name)
          : g.match.includes(name);
    for (const g of groups) {
      if (Array.isArray(g.match)) {
        for (const n of g.match as readonly string[]) {
          if (!entriesOf(params).some(([k]) => k === n))
            throw new Error(`AdamW group "${g.name}" names "${n}", which is not a parameter`);
        }
      }
    }
    for (const [name, tensor] of entriesOf(params)) {
      if (tensor.dtype !== 'f32')
        throw new Error(`AdamW: parameter "${name}" ${tensor.toString()} is not f32`);
      const group = groups.find((g) => matches(g, name));
      const slot: ParamSlot = {
        name,
        tensor,
        group: group?.name ?? 'default',
        row: this.slots.length,
        step: 0,
        frozen: group?.frozen === true,
        m: null,
        v: null,
      };
      this.slots.push(slot);
      this.byName.set(name, slot);
    }
    this.hyper = gpu.zeros([Math.max(1, this.slots.length), 8], 'f32', 'adamw.hyper');
    this.noClipState = gpu.upload(new Float32Array([0, 0, 1, 0, 0, 0, 0, 0]), [8], 'f32', 'adamw.noClip');
  }

  /** Parameter names in order, with their group and frozen flag. */
  get parameters(): Array<{ name: string; group: string; frozen: boolean; step: number }> {
    return this.slots.map((s) => ({ name: s.name, group: s.group, frozen: s.frozen, step: s.step }));
  }

  /** Hyperparameters of a group ("default" for unmatched parameters). */
  groupHyperparams(group: string): AdamWHyperparams {
    const h = this.groupHyper.get(group);
    if (!h) throw new Error(`AdamW: no group "${group}"`);
    return h;
  }

  setFrozen(name: string, frozen: boolean): void {
    this.slot(name).frozen = frozen;
  }

  private slot(name: string): ParamSlot {
    const s = this.byName.get(name);
    if (!s) throw new Error(`AdamW: no parameter "${name}"`);
    return s;
  }

  private assertLive(): void {
    if (this.released) throw new Error('AdamW used after release()');
  }

  /**
   * Records one optimizer step for every non-frozen parameter. `grads` must hold a gradient for each
   * of them (same element count); gradients of frozen parameters are ignored. Returns the grad-norm
   * state tensor used (null without clipping), for lazy logging with readGradNorm().
   */
  step(grads: NamedTensors, options: AdamWStepOptions = {}): Tensor | null {
    this.assertLive();
    const gpu = this.gpu;
    const gradMap = new Map(entriesOf(grads));
    for (const name of gradMap.keys())
      if (!this.byName.has(name)) throw new Error(`AdamW.step: gradient "${name}" has no parameter`);
    const active = this.slots.filter((s) => !s.frozen);
    const pairs = active.map((s) => {
      const g = gradMap.get(s.name);
      if (!g) throw new Error(`AdamW.step: no gradient for trainable parameter "${s.name}"`);
      if (g.dtype !== 'f32' || g.size !== s.tensor.size)
        throw new Error(
          `AdamW.step: gradient "${s.name}" ${g.toString()} does not match parameter ${shapeStr(s.tensor)} (f32, ${s.tensor.size} elements)`,
        );
      return { slot: s, grad: g };
    });
    if (options.lr !== undefined && !(Number.isFinite(options.lr) && options.lr >= 0))
      throw new Error(`AdamW.step: lr must be >= 0, got ${options.lr}`);
    if (options.t !== undefined && !(Number.isInteger(options.t) && options.t >= 1))
      throw new Error(`AdamW.step: t must be an integer >= 1, got ${options.t}`);

    let state: Tensor | null = options.gradNorm ?? null;
    if (state && (state.dtype !== 'f32' || state.size < GRAD_NORM_SLOT.header))
      throw new Error(`AdamW.step: gradNorm ${state.toString()} is not a grad-norm state tensor`);
    if (!state && this.maxGradNorm !== undefined) {
      const need = GRAD_NORM_SLOT.header + pairs.length;
      if (!this.normState || this.normState.size < need) {
        this.normState?.release();
        this.normState = gpu.empty([need], 'f32', 'adamw.gradNorm');
      }
      state = gradNorm(
        gpu,
        pairs.map((p) => p.grad),
        { maxNorm: this.maxGradNorm, out: this.normState, variant: this.variant, limits: this.limits },
      );
    }

    // Per-parameter scalars, bias corrections in float64, one write for the whole step.
    // A scheduled lr scales every group's lr by the same factor (all equal when the default lr is 0).
    const lrOf = (h: AdamWHyperparams): number =>
      options.lr === undefined
        ? h.lr
        : this.defaults.lr === 0
          ? options.lr
          : (h.lr * options.lr) / this.defaults.lr;
    const rows = new Float32Array(Math.max(1, this.slots.length) * 8);
    for (const { slot } of pairs) {
      slot.step += 1;
      const t = options.t ?? slot.step;
      const h = this.groupHyper.get(slot.group)!;
      const lr = lrOf(h);
      const [b1, b2] = h.betas;
      const bc1 = 1 - b1 ** t;
      const bc2 = 1 - b2 ** t;
      rows.set(
        [b1, 1 - b1, b2, 1 - b2, h.eps, 1 - lr * h.weightDecay, lr / bc1, 1 / Math.sqrt(bc2)],
        slot.row * 8,
      );
    }
    gpu.write(this.hyper, rows);

    const limits = resolveLimits(gpu, this.limits);
    const kernel = gpu.kernel({ name: 'optimizer.wgsl', code: optimizerWgsl, entryPoint: 'adamw_step' });
    for (const { slot, grad } of pairs) {
      if (!slot.m || !slot.v) {
        slot.m = gpu.zeros(slot.tensor.shape, 'f32', `adamw.m.${slot.name}`);
        slot.v = gpu.zeros(slot.tensor.shape, 'f32', `adamw.v.${slot.name}`);
      }
      for (const c of chunks(slot.tensor.size, limits.bindingElements)) {
        const groups = Math.ceil(c.count / ADAM_WG);
        const params = gpu.uniform('uuuu', [c.count, groups, slot.row, 0]);
        gpu.dispatch(
          kernel,
          [
            viewOf(slot.tensor, c.start, c.count),
            viewOf(grad, c.start, c.count),
            viewOf(slot.m, c.start, c.count),
            viewOf(slot.v, c.start, c.count),
            state ?? this.noClipState,
            this.hyper,
            params,
          ],
          grid(groups, limits.workgroupsPerDim),
          c.count * 12,
        );
      }
    }
    this.lastStepped = pairs.map((p) => p.slot);
    return state;
  }

  /**
   * Rolls back the CPU-side step counts of the last step(), for a step the GPU skipped because the
   * gradients were not finite (readGradNorm(...).nonFinite). p, m and v need no rollback: the GPU
   * never changed them.
   */
  undoStep(): void {
    for (const s of this.lastStepped) s.step = Math.max(0, s.step - 1);
    this.lastStepped = [];
  }

  /** The moment tensors of a parameter (null before its first step). */
  moments(name: string): { m: Tensor | null; v: Tensor | null; step: number } {
    const s = this.slot(name);
    return { m: s.m, v: s.v, step: s.step };
  }

  /** Reads m, v and step counts back, for saving. Parameters never stepped are omitted. */
  async state(): Promise<AdamWState> {
    this.assertLive();
    const stepped = this.slots.filter((s) => s.m && s.v);
    const data = await this.gpu.readMany(stepped.flatMap((s) => [s.m!, s.v!]));
    const out: AdamWState = { version: 1, params: {} };
    stepped.forEach((s, i) => {
      out.params[s.name] = {
        step: s.step,
        m: data[2 * i] as Float32Array,
        v: data[2 * i + 1] as Float32Array,
      };
    });
    return out;
  }

  /**
   * Restores a saved state. Every entry must name a parameter of this optimizer with matching sizes;
   * parameters absent from the state are reset (no moments, step 0), as for a fresh optimizer.
   */
  loadState(state: AdamWState): void {
    this.assertLive();
    if (state?.version !== 1) throw new Error('AdamW.loadState: unknown state version');
    for (const [name, e] of Object.entries(state.params)) {
      const s = this.byName.get(name);
      if (!s) throw new Error(`AdamW.loadState: "${name}" is not a parameter of this optimizer`);
      if (e.m.length !== s.tensor.size || e.v.length !== s.tensor.size)
        throw new Error(
          `AdamW.loadState: "${name}" has m/v of ${e.m.length}/${e.v.length} elements, parameter ${shapeStr(s.tensor)} has ${s.tensor.size}`,
        );
      if (!(Number.isInteger(e.step) && e.step >= 0))
        throw new Error(`AdamW.loadState: "${name}" has an invalid step ${e.step}`);
    }
    for (const s of this.slots) {
      const e = state.params[s.name];
      if (!e) {
        s.m?.release();
        s.v?.release();
        s.m = null;
        s.v = null;
        s.step = 0;
        continue;
      }
      s.m ??= this.gpu.empty(s.tensor.shape, 'f32', `adamw.m.${s.name}`);
      s.v ??= this.gpu.empty(s.tensor.shape, 'f32', `adamw.v.${s.name}`);
      this.gpu.write(s.m, e.m);
      this.gpu.write(s.v, e.v);
      s.step = e.step;
    }
    this.lastStepped = [];
  }

  /** Returns m, v and the optimizer's own tensors to the pool. Parameters are not touched. */
  release(): void {
    if (this.released) return;
    for (const s of this.slots) {
      s.m?.release();
      s.v?.release();
      s.m = null;
      s.v = null;
    }
    this.hyper.release();
    this.noClipState.release();
    this.normState?.release();
    this.released = true;
  }
}
