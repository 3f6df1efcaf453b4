import { describe, expect, it } from 'vitest';
import {
  AdamW,
  type AdamWGroup,
  GRAD_NORM_SLOT,
  gradNorm,
  type ReduceVariant,
  readGradNorm,
  sumOfSquares,
} from '../../src/gpu/kernels/optimizer.ts';
import { type AdamWRefHyper, adamwStepRef, gradNormRef } from '../../src/gpu/reference/optimizer.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

// Tolerances. Grad norm: float32 partial sums vs float64, relative 2e-6 on Σ g² (observed ~1e-7).
// AdamW: |gpu - ref| <= RTOL * |ref| + ATOL * max|ref| per tensor, RTOL 2e-5, ATOL 1e-6, after five
// float32 steps vs float64 (observed ~1e-7 relative).
const NORM_RTOL = 2e-6;
const RTOL = 2e-5;
const ATOL = 1e-6;

function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, what: string): void {
  expect(got.length, `${what}: length`).toBe(want.length);
  let scale = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]));
  let worst = 0;
  let at = -1;
  for (let i = 0; i < want.length; i++) {
    if (!Number.isFinite(got[i])) throw new Error(`${what}: non-finite ${got[i]} at ${i}`);
    const excess = Math.abs(got[i] - want[i]) - (RTOL * Math.abs(want[i]) + ATOL * scale);
    if (excess > worst) {
      worst = excess;
      at = i;
    }
  }
  expect(at, `${what}: element ${at} is ${got[at]}, reference ${want[at]}`).toBe(-1);
}

function relErr(got: number, want: number): number {
  return Math.abs(got - want) / Math.max(Math.abs(want), 1e-30);
}

const NORM_SIZES = [1, 7, 1000, 70001, 0, 4097];

describe.each<ReduceVariant>(['lanes', 'tree'])('gradNorm (%s)', (variant) => {
  it(`matches float64 for sizes ${NORM_SIZES.join(', ')}, clipping on and off`, async () => {
    const gpu = await getTestGpu();
    const host = NORM_SIZES.map((n, k) => randomArray(n, 100 + k, 0.5));
    const grads = host.map((h, k) => gpu.upload(h, [h.length], 'f32', `g${k}`));
    const ref = gradNormRef(host);
    const maxNorm = ref.norm / 3; // clipping active: scale ≈ 1/3
    const clipped = gradNorm(gpu, grads, { maxNorm, variant });
    const unclipped = gradNorm(gpu, grads, { variant });
    const big = gradNorm(gpu, grads, { maxNorm: ref.norm * 10, variant }); // clip on, not binding
    const a = await readGradNorm(gpu, clipped, { perTensor: true });
    const b = await readGradNorm(gpu, unclipped);
    const c = await readGradNorm(gpu, big);
    expect(relErr(a.sumSq, ref.sumSq)).toBeLessThan(NORM_RTOL);
    expect(relErr(a.norm, ref.norm)).toBeLessThan(NORM_RTOL);
    expect(relErr(a.clipScale, gradNormRef(host, maxNorm).clipScale)).toBeLessThan(NORM_RTOL);
    expect(a.clipScale).toBeLessThan(0.34);
    expect(a.maxNorm).toBeCloseTo(maxNorm, 4);
    expect(a.nonFinite).toBe(false);
    ref.perTensorSumSq.forEach((s, k) => {
      if (s === 0) expect(a.perTensorSumSq![k]).toBe(0);
      else expect(relErr(a.perTensorSumSq![k], s), `tensor ${k}`).toBeLessThan(NORM_RTOL);
    });
    expect(b.norm).toBe(a.norm); // same reduction, same bits
    expect(b.clipScale).toBe(1);
    expect(b.maxNorm).toBeNull();
    expect(c.clipScale).toBe(1);
    for (const t of [...grads, clipped, unclipped, big]) t.release();
  });

  it('is deterministic and independent of binding chunking and 2D grids (multi-stage sizes)', async () => {
    const gpu = await getTestGpu();
    const n = 300001; // lanes: 74 workgroups -> 4736 partials -> one more stage -> serial
    const h = randomArray(n, 7, 2);
    const g = gpu.upload(h, [n]);
    const small = gpu.upload(randomArray(5, 8), [5]);
    const ref = gradNormRef([h, randomArray(5, 8)]);
    const s1 = gradNorm(gpu, [g, small], { variant });
    const s2 = gradNorm(gpu, [g, small], { variant });
    const limits = { bindingElements: 16384, workgroupsPerDim: 3 };
    const s3 = gradNorm(gpu, [g, small], { variant, limits });
    const [r1, r2, r3] = (await gpu.readMany([s1, s2, s3])) as Float32Array[];
    expect(Array.from(r2)).toEqual(Array.from(r1));
    expect(relErr(r1[GRAD_NORM_SLOT.sumSq], ref.sumSq)).toBeLessThan(NORM_RTOL);
    expect(relErr(r3[GRAD_NORM_SLOT.sumSq], ref.sumSq)).toBeLessThan(NORM_RTOL);
    expect(relErr(r3[GRAD_NORM_SLOT.header], ref.perTensorSumSq[0])).toBeLessThan(NORM_RTOL);
    // sumOfSquares into an arbitrary slot, leaving the other slots alone.
    const out = gpu.upload(new Float32Array([5, 5, 5]), [3]);
    sumOfSquares(gpu, g, out, 1, { variant, limits });
    const o = (await gpu.readF32(out)) as Float32Array;
    expect(o[0]).toBe(5);
    expect(o[2]).toBe(5);
    expect(relErr(o[1], ref.perTensorSumSq[0])).toBeLessThan(NORM_RTOL);
    for (const t of [g, small, s1, s2, s3, out]) t.release();
  });

  it('flags NaN and inf gradients (nonFinite = 1, clipScale = 0)', async () => {
    const gpu = await getTestGpu();
    const withNan = randomArray(1000, 3);
    withNan[517] = Number.NaN;
    const withInf = randomArray(70001, 4);
    withInf[69999] = Number.NEGATIVE_INFINITY;
    const overflow = new Float32Array([3e19, 3e19]); // finite values whose squares overflow f32
    const fine = gpu.upload(randomArray(7, 5), [7]);
    const cases = [withNan, withInf, overflow].map((h) => gpu.upload(h, [h.length]));
    const states = cases.map((c) => gradNorm(gpu, [fine, c], { maxNorm: 1, variant }));
    for (const s of states) {
      const info = await readGradNorm(gpu, s);
      expect(info.nonFinite).toBe(true);
      expect(info.clipScale).toBe(0);
      expect(Number.isFinite(info.norm)).toBe(false);
    }
    const ok = await readGradNorm(gpu, gradNorm(gpu, [fine], { maxNorm: 1, variant }));
    expect(ok.nonFinite).toBe(false);
    for (const t of [fine, ...cases, ...states]) t.release();
  });
});

describe('gradNorm input checks', () => {
  it('rejects bad maxNorm, non-f32 gradients and a too-small out tensor', async () => {
    const gpu = await getTestGpu();
    const g = gpu.upload(randomArray(3, 1), [3]);
    const u = gpu.upload(new Uint32Array([1, 2]), [2], 'u32');
    expect(() => gradNorm(gpu, [g], { maxNorm: -1 })).toThrow(/maxNorm/);
    expect(() => gradNorm(gpu, [g], { maxNorm: Number.NaN })).toThrow(/maxNorm/);
    expect(() => gradNorm(gpu, [u])).toThrow(/not f32/);
    const small = gpu.empty([8]);
    expect(() => gradNorm(gpu, [g], { out: small })).toThrow(/at least 9/);
    for (const t of [g, u, small]) t.release();
  });
});

// ------------------------------------------------------------------------------------------ AdamW

interface Case {
  name: string;
  shape: number[];
}

const PARAMS: Case[] = [
  { name: 'layers.0.attn.q.weight', shape: [13, 7] },
  { name: 'layers.0.attn.q.bias', shape: [13] },
  { name: 'layers.0.norm.weight', shape: [7] },
  { name: 'embed.weight', shape: [101, 11] },
  { name: 'lm_head.weight', shape: [1] },
];
const GROUPS: AdamWGroup[] = [
  {
    name: 'no_decay',
    match: (n) => n.endsWith('.bias') || n.includes('norm'),
    weightDecay: 0,
    lr: 2e-2,
    betas: [0.8, 0.99],
    eps: 1e-6,
  },
];
const DEFAULTS = { lr: 1e-2, betas: [0.9, 0.999] as const, eps: 1e-8, weightDecay: 0.1 };

function hyperFor(name: string, lrScale: number): AdamWRefHyper {
  const nd = GROUPS[0].match as (n: string) => boolean;
  const h = nd(name)
    ? { lr: 2e-2, beta1: 0.8, beta2: 0.99, eps: 1e-6, weightDecay: 0 }
    : { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1 };
  return { ...h, lr: h.lr * lrScale };
}

function numelOf(shape: number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

async function readAll(gpu: Gpu, ts: Tensor[]): Promise<Float32Array[]> {
  return (await gpu.readMany(ts)) as Float32Array[];
}

describe('AdamW', () => {
  it('matches float64 torch AdamW over 5 steps: two groups, lr schedule, clipping, frozen param', async () => {
    const gpu = await getTestGpu();
    const host = PARAMS.map((p, k) => Float64Array.from(randomArray(numelOf(p.shape), 10 + k)));
    const params = Object.fromEntries(
      PARAMS.map((p, k) => [p.name, gpu.upload(Float32Array.from(host[k]), p.shape, 'f32', p.name)]),
    );
    const frozenName = 'lm_head.weight';
    const opt = new AdamW(gpu, params, {
      ...DEFAULTS,
      groups: [...GROUPS, { name: 'frozen', match: [frozenName], frozen: true }],
      maxGradNorm: 0.5,
    });
    expect(opt.parameters.map((p) => p.group)).toEqual([
      'default',
      'no_decay',
      'no_decay',
      'default',
      'frozen',
    ]);
    // Float64 mirror of the state. Frozen: never stepped, so its reference copy just stays.
    const m = host.map((h) => new Float64Array(h.length));
    const v = host.map((h) => new Float64Array(h.length));
    const lrs = [1e-2, 8e-3, 6e-3, 1e-2, 2e-3]; // a schedule on the default lr
    const clipScales: number[] = [];
    for (let step = 1; step <= 5; step++) {
      const gHost = PARAMS.map((p, k) => randomArray(numelOf(p.shape), 1000 * step + k, step === 3 ? 3 : 1));
      const grads = Object.fromEntries(PARAMS.map((p, k) => [p.name, gpu.upload(gHost[k], p.shape)]));
      opt.step(grads, { lr: lrs[step - 1] });
      const active = PARAMS.map((_, k) => k).filter((k) => PARAMS[k].name !== frozenName);
      const { clipScale } = gradNormRef(
        active.map((k) => gHost[k]),
        0.5,
      );
      clipScales.push(clipScale);
      for (const k of active) {
        adamwStepRef(
          host[k],
          gHost[k],
          m[k],
          v[k],
          hyperFor(PARAMS[k].name, lrs[step - 1] / DEFAULTS.lr),
          step,
          clipScale,
        );
      }
      for (const g of Object.values(grads)) g.release();
    }
    expect(clipScales.every((s) => s < 1)).toBe(true); // clipping was active every step
    const names = PARAMS.map((p) => p.name);
    const got = await readAll(
      gpu,
      names.map((n) => params[n]),
    );
    names.forEach((n, k) => {
      expectClose(got[k], host[k], `p ${n}`);
    });
    const state = await opt.state();
    expect(Object.keys(state.params).sort()).toEqual(names.filter((n) => n !== frozenName).sort());
    names.forEach((n, k) => {
      if (n === frozenName) return;
      expect(state.params[n].step).toBe(5);
      expectClose(state.params[n].m, m[k], `m ${n}`);
      expectClose(state.params[n].v, v[k], `v ${n}`);
    });
    // The frozen parameter is bit-for-bit unchanged and owns no moments.
    expect(Array.from(got[names.indexOf(frozenName)])).toEqual(
      Array.from(Float32Array.from(host[names.indexOf(frozenName)])),
    );
    expect(opt.moments(frozenName).m).toBeNull();
    opt.release();
    for (const t of Object.values(params)) t.release();
  });

  it('without clipping uses the raw gradients (no grad-norm pass); an explicit gradNorm state also works', async () => {
    const gpu = await getTestGpu();
    const n = 70001;
    const p0 = randomArray(n, 21);
    const g1 = randomArray(n, 22, 5);
    const a = gpu.upload(p0, [n]);
    const b = gpu.upload(p0, [n]);
    const grad = gpu.upload(g1, [n]);
    const optA = new AdamW(gpu, { w: a }, { lr: 1e-3, weightDecay: 0.05 });
    const optB = new AdamW(gpu, { w: b }, { lr: 1e-3, weightDecay: 0.05 });
    expect(optA.step({ w: grad })).toBeNull();
    const norm = gradNorm(gpu, [grad], { maxNorm: 10 });
    expect(optB.step({ w: grad }, { gradNorm: norm })).toBe(norm);
    const ref = gradNormRef([g1], 10);
    const pa = Float64Array.from(p0);
    const pb = Float64Array.from(p0);
    const h = { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.05 };
    adamwStepRef(pa, g1, new Float64Array(n), new Float64Array(n), h, 1);
    adamwStepRef(pb, g1, new Float64Array(n), new Float64Array(n), h, 1, ref.clipScale);
    const [ga, gb] = await readAll(gpu, [a, b]);
    expectClose(ga, pa, 'unclipped');
    expectClose(gb, pb, 'clipped');
    expect(ref.clipScale).toBeLessThan(0.1);
    optA.release();
    optB.release();
    for (const t of [a, b, grad, norm]) t.release();
  });

  it('skips the whole step on NaN / inf gradients, and undoStep() restores the step counts', async () => {
    const gpu = await getTestGpu();
    const pw = randomArray(33, 31);
    const pb = randomArray(5, 32);
    const w = gpu.upload(pw, [3, 11]);
    const bias = gpu.upload(pb, [5]);
    const opt = new AdamW(gpu, { w, bias }, { lr: 1e-2, maxGradNorm: Number.POSITIVE_INFINITY });
    const gw = gpu.upload(randomArray(33, 33), [3, 11]);
    const gb = gpu.upload(randomArray(5, 34), [5]);
    const s1 = opt.step({ w: gw, bias: gb })!;
    expect((await readGradNorm(gpu, s1)).clipScale).toBe(1); // detect-only: no clipping
    const [w1, b1] = await readAll(gpu, [w, bias]);
    const before = await opt.state();
    const bad = randomArray(5, 35);
    bad[2] = Number.NaN;
    const gbBad = gpu.upload(bad, [5]);
    const s2 = opt.step({ w: gw, bias: gbBad })!;
    const info = await readGradNorm(gpu, s2);
    expect(info.nonFinite).toBe(true);
    const [w2, b2] = await readAll(gpu, [w, bias]);
    const after = await opt.state();
    expect(Array.from(w2)).toEqual(Array.from(w1)); // finite tensor skipped too: the step is global
    expect(Array.from(b2)).toEqual(Array.from(b1));
    for (const k of ['w', 'bias']) {
      expect(Array.from(after.params[k].m)).toEqual(Array.from(before.params[k].m));
      expect(Array.from(after.params[k].v)).toEqual(Array.from(before.params[k].v));
    }
    expect(after.params.w.step).toBe(2);
    opt.undoStep();
    expect(opt.moments('w').step).toBe(1);
    expect(w1.every(Number.isFinite) && b1.every(Number.isFinite)).toBe(true);
    opt.release();
    for (const t of [w, bias, gw, gb, gbBad]) t.release();
  });

  it('state()/loadState() round-trip: a restored optimizer continues identically', async () => {
    const gpu = await getTestGpu();
    const shape = [17, 3];
    const p0 = randomArray(51, 41);
    const a = gpu.upload(p0, shape);
    const opt = new AdamW(gpu, { a }, { lr: 3e-3, groups: GROUPS.map((g) => ({ ...g })) });
    const grads = [1, 2, 3].map((s) => gpu.upload(randomArray(51, 50 + s), shape));
    opt.step({ a: grads[0] });
    opt.step({ a: grads[1] });
    const saved = await opt.state();
    const [pSaved] = await readAll(gpu, [a]);
    opt.step({ a: grads[2] });
    const [pNext] = await readAll(gpu, [a]);

    const b = gpu.upload(pSaved, shape);
    const restored = new AdamW(gpu, { a: b }, { lr: 3e-3, groups: GROUPS.map((g) => ({ ...g })) });
    restored.loadState(saved);
    expect(restored.moments('a').step).toBe(2);
    restored.step({ a: grads[2] });
    const [pRestored] = await readAll(gpu, [b]);
    expect(Array.from(pRestored)).toEqual(Array.from(pNext));

    expect(() => restored.loadState({ version: 1, params: { nope: saved.params.a } })).toThrow(/nope/);
    expect(() =>
      restored.loadState({
        version: 1,
        params: { a: { step: 1, m: new Float32Array(3), v: new Float32Array(3) } },
      }),
    ).toThrow(/3\/3 elements/);
    opt.release();
    restored.release();
    for (const t of [a, b, ...grads]) t.release();
  });

  it('chunked bindings and a 2D grid give the same bits; unfreezing starts at t = 1', async () => {
    const gpu = await getTestGpu();
    const n = 20001;
    const p0 = randomArray(n, 61);
    const g0 = randomArray(n, 62);
    const a = gpu.upload(p0, [n]);
    const b = gpu.upload(p0, [n]);
    const c = gpu.upload(p0, [n]);
    const grad = gpu.upload(g0, [n]);
    const plain = new AdamW(gpu, { a }, { lr: 1e-2, maxGradNorm: 1 });
    const chunked = new AdamW(
      gpu,
      { b },
      { lr: 1e-2, maxGradNorm: 1, limits: { bindingElements: 4096, workgroupsPerDim: 9 } },
    );
    const late = new AdamW(gpu, { c }, { lr: 1e-2, maxGradNorm: 1, groups: [{ name: 'f', match: /c/ }] });
    late.setFrozen('c', true);
    for (let i = 0; i < 2; i++) {
      plain.step({ a: grad });
      chunked.step({ b: grad });
      late.step({ c: grad }); // frozen: nothing happens
    }
    late.setFrozen('c', false);
    late.step({ c: grad });
    const fresh = gpu.upload(p0, [n]);
    const once = new AdamW(gpu, { fresh }, { lr: 1e-2, maxGradNorm: 1 });
    once.step({ fresh: grad });
    const [ga, gb, gc, gf] = await readAll(gpu, [a, b, c, fresh]);
    expect(Array.from(gb)).toEqual(Array.from(ga));
    expect(Array.from(gc)).toEqual(Array.from(gf)); // frozen steps did not count
    for (const o of [plain, chunked, late, once]) o.release();
    for (const t of [a, b, c, grad, fresh]) t.release();
  });

  it('rejects bad input with clear errors', async () => {
    const gpu = await getTestGpu();
    const w = gpu.upload(randomArray(6, 1), [2, 3]);
    const g5 = gpu.upload(randomArray(5, 2), [5]);
    const g6 = gpu.upload(randomArray(6, 3), [6]);
    expect(() => new AdamW(gpu, { w }, { lr: -1 })).toThrow(/lr/);
    expect(() => new AdamW(gpu, { w }, { betas: [0.9, 1] })).toThrow(/betas/);
    expect(() => new AdamW(gpu, { w }, { groups: [{ name: 'x', match: ['nope'] }] })).toThrow(/nope/);
    const opt = new AdamW(gpu, { w });
    expect(() => opt.step({})).toThrow(/no gradient for trainable parameter "w"/);
    expect(() => opt.step({ w: g5 })).toThrow(/does not match parameter \[2, 3\]/);
    expect(() => opt.step({ w: g5, other: g5 })).toThrow(/"other" has no parameter/);
    expect(() => opt.step({ w: g6 }, { t: 0 })).toThrow(/t must be an integer/);
    expect(() => opt.step({ w: g6 }, { lr: Number.NaN })).toThrow(/lr must be/);
    opt.release();
    expect(() => opt.step({ w: g5 })).toThrow(/after release/);
    for (const t of [w, g5, g6]) t.release();
  });
});
