// GPU actor and critic losses (src/gpu/kernels/policy-loss.ts) against their float64 CPU twin
// (src/rl/core-algos.ts: computePolicyLoss + computeEntropyLoss + computeKlLoss, computeValueLoss):
// the loss values, the metrics and the per-token gradients, for every aggregation mode, with and
// without global denominators, every KL kind, on ragged masks (interior zeros, all-zero rows,
// one-token rows; B not a multiple of 64; N over many workgroups).
//
// Tolerances: losses and metrics |gpu − twin| / max(1, |twin|) ≤ 1e-5; gradients (of order
// 1/tokens) |gpu − twin| / max(m, 1e-3·max m) ≤ 1e-5 with m = |twin| per token, or for gLogprob the
// sum of the magnitudes of its PPO and KL terms (which can cancel): f32 exp, a few-ulp error, times
// f32 weights. The inputs avoid measure-zero kinks (a ratio within f32 rounding of a clip bound) where
// f32 and f64 may legitimately take different branches; exact ties are tested separately.

import { describe, expect, it } from 'vitest';
import {
  type LossAggMode,
  type LossGlobals,
  POLICY_STAT,
  policyLoss,
  VALUE_STAT,
  valueLoss,
} from '../../src/gpu/kernels/policy-loss.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import {
  type AggGlobals,
  computeCispoPolicyLoss,
  computeEntropyLoss,
  computeGspoPolicyLoss,
  computeKlLoss,
  computePolicyLoss,
  computeValueLoss,
  type KlKind,
  maskedMean,
} from '../../src/rl/core-algos.ts';
import { getTestGpu } from '../helpers/gpu.ts';
import { makeRlBatch, scaledRelativeError, uniformArray, unitRelativeError } from '../helpers/rl-batch.ts';

const TOL = 1e-5;
const MODES: LossAggMode[] = [
  'token-mean',
  'seq-mean-token-sum',
  'seq-mean-token-mean',
  'seq-mean-token-sum-norm',
];
const KINDS: KlKind[] = ['k1', 'k2', 'k3'];
const SHAPES: Array<[number, number]> = [
  [7, 13],
  [70, 300],
];

interface ActorData {
  B: number;
  T: number;
  mask: Float32Array;
  logprob: Float32Array;
  oldLogprob: Float32Array;
  advantages: Float32Array;
  entropy: Float32Array;
  refLogprob: Float32Array;
}

/** Ratios spread over the clip and dual-clip regions, exact ties (r = 1), |log-ratio| > 20, A = 0. */
function actorData(B: number, T: number, seed: number): ActorData {
  const N = B * T;
  const { mask } = makeRlBatch(B, T, seed);
  const logprob = uniformArray(N, seed + 1, -3, -0.01);
  const delta = uniformArray(N, seed + 2, -1.6, 1.6);
  const advantages = uniformArray(N, seed + 3, -2, 2);
  const entropy = uniformArray(N, seed + 4, 0, 3);
  const refNoise = uniformArray(N, seed + 5, -0.6, 0.6);
  const oldLogprob = new Float32Array(N);
  const refLogprob = new Float32Array(N);
  for (let i = 0; i < N; i++) {
    const k = i % 29;
    oldLogprob[i] =
      k === 0 ? logprob[i] : k === 1 ? logprob[i] - 25 : k === 2 ? logprob[i] + 25 : logprob[i] - delta[i];
    refLogprob[i] = k === 3 ? logprob[i] : k === 4 ? logprob[i] + 14 : logprob[i] + refNoise[i];
    if (i % 13 === 0) advantages[i] = 0;
  }
  return { B, T, mask, logprob, oldLogprob, advantages, entropy, refLogprob };
}

function uploadActor(gpu: Gpu, d: ActorData) {
  const shape = [d.B, d.T];
  return {
    mask: gpu.upload(d.mask, shape),
    logprob: gpu.upload(d.logprob, shape),
    oldLogprob: gpu.upload(d.oldLogprob, shape),
    advantages: gpu.upload(d.advantages, shape),
    entropy: gpu.upload(d.entropy, shape),
    refLogprob: gpu.upload(d.refLogprob, shape),
  };
}

interface ActorCase {
  mode: LossAggMode;
  globals?: AggGlobals;
  klKind: KlKind;
  entropyCoef: number;
  klCoef: number;
  clipRatioLow: number;
  clipRatioHigh: number;
  clipRatioC: number;
}

/** What the GPU's one call must equal: the twin's pg, entropy and KL losses combined as verl's actor. */
function actorTwin(d: ActorData, c: ActorCase) {
  const base = { mask: d.mask, B: d.B, T: d.T, mode: c.mode, globals: c.globals };
  const pg = computePolicyLoss({
    ...base,
    logprob: d.logprob,
    oldLogprob: d.oldLogprob,
    advantages: d.advantages,
    clipRatioLow: c.clipRatioLow,
    clipRatioHigh: c.clipRatioHigh,
    clipRatioC: c.clipRatioC,
  });
  const ent = computeEntropyLoss({ ...base, entropy: d.entropy });
  const kl = computeKlLoss({ ...base, logprob: d.logprob, refLogprob: d.refLogprob, kind: c.klKind });
  const N = d.B * d.T;
  const gLogprob = new Float64Array(N);
  // The PPO and KL terms of gLogprob can cancel: f32 error scales with the terms, not their sum.
  const gLogprobMagnitude = new Float64Array(N);
  const gEntropy = new Float64Array(N);
  for (let i = 0; i < N; i++) {
    gLogprob[i] = pg.gradLogprob[i] + c.klCoef * kl.gradLogprob[i];
    gLogprobMagnitude[i] = Math.abs(pg.gradLogprob[i]) + Math.abs(c.klCoef * kl.gradLogprob[i]);
    gEntropy[i] = -c.entropyCoef * ent.gradEntropy[i];
  }
  const stats = new Float64Array(POLICY_STAT.size);
  stats[POLICY_STAT.loss] = pg.loss - c.entropyCoef * ent.loss + c.klCoef * kl.loss;
  stats[POLICY_STAT.pgLoss] = pg.loss;
  stats[POLICY_STAT.entropy] = ent.loss;
  stats[POLICY_STAT.klLoss] = kl.loss;
  stats[POLICY_STAT.clipfrac] = pg.clipfrac;
  stats[POLICY_STAT.clipfracLower] = pg.clipfracLower;
  stats[POLICY_STAT.ppoKl] = pg.ppoKl;
  return { stats, gLogprob, gLogprobMagnitude, gEntropy, pg };
}

function activeCounts(mask: Float32Array, B: number, T: number): { tokens: number; rows: number } {
  let tokens = 0;
  let rows = 0;
  for (let b = 0; b < B; b++) {
    let n = 0;
    for (let t = 0; t < T; t++) n += mask[b * T + t];
    tokens += n;
    rows += n > 0 ? 1 : 0;
  }
  return { tokens, rows };
}

describe('policyLoss (PPO clip + dual clip, entropy bonus, KL loss)', () => {
  for (const [B, T] of SHAPES) {
    it(`matches the twin for every mode, with and without globals, k1/k2/k3, B=${B} T=${T} (tol ${TOL})`, async () => {
      const gpu = await getTestGpu();
      const d = actorData(B, T, 40 + B);
      const g = uploadActor(gpu, d);
      const { tokens, rows } = activeCounts(d.mask, B, T);
      const cases: ActorCase[] = [];
      MODES.forEach((mode, m) => {
        for (const useGlobals of [false, true]) {
          cases.push({
            mode,
            globals: useGlobals ? { tokens: 3 * tokens + 5, rows: 2 * rows + 1, maxLen: T + 7 } : undefined,
            klKind: KINDS[(m + (useGlobals ? 1 : 0)) % 3],
            entropyCoef: 0.01 * (m + 1),
            klCoef: useGlobals ? 0.1 : 0.5,
            clipRatioLow: 0.2,
            clipRatioHigh: m % 2 === 0 ? 0.2 : 0.28,
            clipRatioC: m === 3 ? 2.5 : 3,
          });
        }
      });
      const outs: Tensor[] = [];
      for (const c of cases) {
        const r = policyLoss(gpu, { ...g, B, T, ...c });
        if (!r.gEntropy) throw new Error('gEntropy must exist with entropy and entropyCoef != 0');
        outs.push(r.stats, r.gLogprob, r.gEntropy);
      }
      const got = (await gpu.readMany(outs)) as Float32Array[];
      let sawClip = 0;
      let sawLower = 0;
      cases.forEach((c, k) => {
        const what = `${c.mode}${c.globals ? ' +globals' : ''} ${c.klKind}`;
        const want = actorTwin(d, c);
        const [stats, gLogprob, gEntropy] = got.slice(3 * k, 3 * k + 3);
        expect(unitRelativeError(stats.slice(0, 7), want.stats.slice(0, 7)), `${what}: stats`).toBeLessThan(
          TOL,
        );
        expect(stats[POLICY_STAT.activeTokens]).toBe(tokens);
        expect(stats[POLICY_STAT.activeRows]).toBe(rows);
        expect(stats[POLICY_STAT.tokensDenominator]).toBe(c.globals?.tokens ?? tokens);
        expect(stats[POLICY_STAT.rowsDenominator]).toBe(c.globals?.rows ?? rows);
        expect(
          scaledRelativeError(gLogprob, want.gLogprob, want.gLogprobMagnitude),
          `${what}: gLogprob`,
        ).toBeLessThan(TOL);
        expect(scaledRelativeError(gEntropy, want.gEntropy), `${what}: gEntropy`).toBeLessThan(TOL);
        sawClip = Math.max(sawClip, want.pg.clipfrac);
        sawLower = Math.max(sawLower, want.pg.clipfracLower);
      });
      // The data really exercises both clips.
      expect(sawClip).toBeGreaterThan(0.1);
      expect(sawLower).toBeGreaterThan(0.05);
      for (const t of [...outs, ...Object.values(g)]) t.release();
    });
  }

  it('micro-batches with the whole batch as globals sum to the whole batch, in every mode', async () => {
    const gpu = await getTestGpu();
    const [B, T, B1] = [23, 31, 9];
    const d = actorData(B, T, 77);
    const { tokens, rows } = activeCounts(d.mask, B, T);
    const globals: LossGlobals = { tokens, rows, maxLen: T };
    const whole = uploadActor(gpu, d);
    const part = (b0: number, b1: number) => {
      const slice = (x: Float32Array) => x.slice(b0 * T, b1 * T);
      return uploadActor(gpu, {
        B: b1 - b0,
        T,
        mask: slice(d.mask),
        logprob: slice(d.logprob),
        oldLogprob: slice(d.oldLogprob),
        advantages: slice(d.advantages),
        entropy: slice(d.entropy),
        refLogprob: slice(d.refLogprob),
      });
    };
    const p1 = part(0, B1);
    const p2 = part(B1, B);
    const common = { entropyCoef: 0.02, klCoef: 0.2, klKind: 'k3' as const };
    const outs: Tensor[] = [];
    for (const mode of MODES) {
      const w = policyLoss(gpu, { ...whole, B, T, mode, ...common });
      const a = policyLoss(gpu, { ...p1, B: B1, T, mode, globals, ...common });
      const b = policyLoss(gpu, { ...p2, B: B - B1, T, mode, globals, ...common });
      outs.push(w.stats, a.stats, b.stats, w.gLogprob, a.gLogprob, b.gLogprob);
    }
    const got = (await gpu.readMany(outs)) as Float32Array[];
    MODES.forEach((mode, k) => {
      const [sw, sa, sb, gw, ga, gb] = got.slice(6 * k, 6 * k + 6);
      for (const slot of [POLICY_STAT.loss, POLICY_STAT.pgLoss, POLICY_STAT.entropy, POLICY_STAT.klLoss]) {
        expect(Math.abs(sa[slot] + sb[slot] - sw[slot]), `${mode} slot ${slot}`).toBeLessThan(
          TOL * Math.max(1, Math.abs(sw[slot])),
        );
      }
      const joined = new Float32Array(B * T);
      joined.set(ga, 0);
      joined.set(gb, B1 * T);
      expect(scaledRelativeError(joined, gw), `${mode}: gradients`).toBeLessThan(TOL);
      // And the twin agrees on a part with globals.
      const twin = computePolicyLoss({
        logprob: d.logprob.slice(0, B1 * T),
        oldLogprob: d.oldLogprob.slice(0, B1 * T),
        advantages: d.advantages.slice(0, B1 * T),
        mask: d.mask.slice(0, B1 * T),
        B: B1,
        T,
        mode,
        globals: { tokens, rows, maxLen: T },
      });
      expect(unitRelativeError([sa[POLICY_STAT.pgLoss]], [twin.loss]), `${mode}: part vs twin`).toBeLessThan(
        TOL,
      );
    });
    for (const t of [...outs, ...Object.values(whole), ...Object.values(p1), ...Object.values(p2)])
      t.release();
  });

  it('ratio 1 everywhere (the L1 = L2 tie): loss = −mean(A), gradient −A/tokens, KL 0, clipfrac 0', async () => {
    const gpu = await getTestGpu();
    const [B, T] = [5, 11];
    const d = actorData(B, T, 5);
    d.oldLogprob.set(d.logprob);
    d.refLogprob.set(d.logprob);
    const g = uploadActor(gpu, d);
    const outs: Tensor[] = [];
    for (const klKind of KINDS) {
      const r = policyLoss(gpu, { ...g, B, T, klKind, klCoef: 1, entropyCoef: 0 });
      expect(r.gEntropy).toBeNull();
      outs.push(r.stats, r.gLogprob);
    }
    const got = (await gpu.readMany(outs)) as Float32Array[];
    const { tokens } = activeCounts(d.mask, B, T);
    const meanA = maskedMean(d.advantages, d.mask);
    KINDS.forEach((kind, k) => {
      const [stats, gLogprob] = [got[2 * k], got[2 * k + 1]];
      expect(stats[POLICY_STAT.pgLoss]).toBeCloseTo(-meanA, 6);
      expect(stats[POLICY_STAT.klLoss]).toBe(0);
      expect(stats[POLICY_STAT.clipfrac]).toBe(0);
      expect(stats[POLICY_STAT.ppoKl]).toBe(0);
      // d k/d logprob at logprob = ref: k1 → 1, k2 → 0, k3 → 0.
      const dKl = kind === 'k1' ? 1 : 0;
      const want = Array.from(d.advantages, (a, i) => (d.mask[i] ? (-a + dKl) / tokens : 0));
      expect(scaledRelativeError(gLogprob, want), kind).toBeLessThan(TOL);
      const twin = computePolicyLoss({ ...d, mode: 'token-mean' });
      expect(
        scaledRelativeError(
          gLogprob,
          twin.gradLogprob.map((x, i) => x + (d.mask[i] ? dKl / tokens : 0)),
        ),
      ).toBeLessThan(TOL);
    });
    for (const t of [...outs, ...Object.values(g)]) t.release();
  });

  it('an all-masked batch and an empty batch give loss 0, gradient 0, no NaN', async () => {
    const gpu = await getTestGpu();
    const [B, T] = [3, 4];
    const d = actorData(B, T, 9);
    d.mask.fill(0);
    const g = uploadActor(gpu, d);
    const outs: Tensor[] = [];
    for (const mode of MODES) {
      const r = policyLoss(gpu, { ...g, B, T, mode, entropyCoef: 0.1, klCoef: 0.1 });
      outs.push(r.stats, r.gLogprob, r.gEntropy as Tensor);
    }
    const empty = policyLoss(gpu, { ...uploadActor(gpu, actorData(0, 5, 1)), B: 0, T: 5 });
    outs.push(empty.stats);
    const got = (await gpu.readMany(outs)) as Float32Array[];
    for (const x of got) for (const v of x) expect(v).toBe(0);
    for (const t of [...outs, ...Object.values(g)]) t.release();
  });

  it('is bitwise reproducible', async () => {
    const gpu = await getTestGpu();
    const [B, T] = SHAPES[1];
    const g = uploadActor(gpu, actorData(B, T, 3));
    const run = () =>
      policyLoss(gpu, { ...g, B, T, mode: 'seq-mean-token-mean', entropyCoef: 0.01, klCoef: 0.1 });
    const a = run();
    const b = run();
    const [sa, ga, sb, gb] = await gpu.readMany([a.stats, a.gLogprob, b.stats, b.gLogprob]);
    expect(Array.from(sb)).toEqual(Array.from(sa));
    expect(Array.from(gb)).toEqual(Array.from(ga));
  });

  it('names bad shapes and values', async () => {
    const gpu = await getTestGpu();
    const x = gpu.zeros([2, 3]);
    const y = gpu.zeros([2, 4]);
    const base = { logprob: x, oldLogprob: x, advantages: x, mask: x, B: 2, T: 3 };
    expect(() => policyLoss(gpu, { ...base, advantages: y })).toThrow(
      /advantages \[2, 4\] must hold B\*T = 2\*3 = 6/,
    );
    expect(() => policyLoss(gpu, { ...base, entropy: y })).toThrow(/entropy \[2, 4\]/);
    expect(() => policyLoss(gpu, { ...base, mode: 'seq-sum' as LossAggMode })).toThrow(
      /mode must be one of .*got seq-sum/,
    );
    expect(() => policyLoss(gpu, { ...base, clipRatioC: 1 })).toThrow(
      /clipRatioC must be a number > 1 .*got 1/,
    );
    expect(() => policyLoss(gpu, { ...base, klCoef: 0.1 })).toThrow(/klCoef = 0.1 needs refLogprob/);
    expect(() => policyLoss(gpu, { ...base, globals: { tokens: -1 } })).toThrow(
      /globals.tokens must be a non-negative integer, got -1/,
    );
    expect(() => valueLoss(gpu, { vpreds: x, oldValues: x, returns: y, mask: x, B: 2, T: 3 })).toThrow(
      /returns \[2, 4\]/,
    );
    x.release();
    y.release();
  });
});

describe('valueLoss (clipped value loss)', () => {
  for (const [B, T] of SHAPES) {
    it(`matches computeValueLoss for every mode, with and without globals, B=${B} T=${T} (tol ${TOL})`, async () => {
      const gpu = await getTestGpu();
      const N = B * T;
      const { mask } = makeRlBatch(B, T, 60 + B);
      const vpreds = uniformArray(N, 61, -2, 2);
      const noise = uniformArray(N, 62, -0.6, 0.6);
      const oldValues = vpreds.map((v, i) => v + noise[i]);
      const returns = uniformArray(N, 63, -2, 2);
      const shape = [B, T];
      const g = {
        vpreds: gpu.upload(vpreds, shape),
        oldValues: gpu.upload(oldValues, shape),
        returns: gpu.upload(returns, shape),
        mask: gpu.upload(mask, shape),
      };
      const { tokens, rows } = activeCounts(mask, B, T);
      const cases: Array<{ mode: LossAggMode; globals?: AggGlobals; clip: number }> = [];
      for (const mode of MODES) {
        cases.push({ mode, clip: 0.2 });
        cases.push({ mode, clip: 0.5, globals: { tokens: tokens + 3, rows: rows + 2, maxLen: 2 * T } });
      }
      const outs: Tensor[] = [];
      for (const c of cases) {
        const r = valueLoss(gpu, { ...g, B, T, mode: c.mode, globals: c.globals, clipRangeValue: c.clip });
        outs.push(r.stats, r.gValue);
      }
      const got = (await gpu.readMany(outs)) as Float32Array[];
      cases.forEach((c, k) => {
        const what = `${c.mode}${c.globals ? ' +globals' : ''}`;
        const want = computeValueLoss({
          vpreds,
          oldValues,
          returns,
          mask,
          B,
          T,
          clipRangeValue: c.clip,
          mode: c.mode,
          globals: c.globals,
        });
        const [stats, gValue] = [got[2 * k], got[2 * k + 1]];
        expect(
          unitRelativeError(
            [stats[VALUE_STAT.loss], stats[VALUE_STAT.clipfrac], stats[VALUE_STAT.vpredMean]],
            [want.loss, want.clipfrac, maskedMean(vpreds, mask)],
          ),
          what,
        ).toBeLessThan(TOL);
        expect(want.clipfrac).toBeGreaterThan(0.05);
        expect(stats[VALUE_STAT.activeTokens]).toBe(tokens);
        expect(stats[VALUE_STAT.rowsDenominator]).toBe(c.globals?.rows ?? rows);
        expect(scaledRelativeError(gValue, want.gradVpreds), `${what}: gValue`).toBeLessThan(TOL);
      });
      for (const t of [...outs, ...Object.values(g)]) t.release();
    });
  }

  it('exact ties: inside the clip interval the full gradient, outside it half (torch.maximum)', async () => {
    const gpu = await getTestGpu();
    // Binary fractions, so f32 and f64 see the same ties. Token 0: v inside [old ± c] (l1 = l2).
    // Token 1: v = 0.75 outside [−0.25, 0.25], vc − R = −(v − R) = −0.25 (l1 = l2 = 1/16).
    // Token 2: strictly clipped. Token 3: masked.
    const vpreds = new Float32Array([0.125, 0.75, 1, 5]);
    const oldValues = new Float32Array([0, 0, 0, 0]);
    const returns = new Float32Array([0.5, 0.5, 1.5, 0]);
    const mask = new Float32Array([1, 1, 1, 0]);
    const up = (x: Float32Array) => gpu.upload(x, [1, 4]);
    const r = valueLoss(gpu, {
      vpreds: up(vpreds),
      oldValues: up(oldValues),
      returns: up(returns),
      mask: up(mask),
      B: 1,
      T: 4,
      clipRangeValue: 0.25,
    });
    const [stats, gValue] = (await gpu.readMany([r.stats, r.gValue])) as Float32Array[];
    const want = computeValueLoss({ vpreds, oldValues, returns, mask, B: 1, T: 4, clipRangeValue: 0.25 });
    // 0.5·(1/3)·d: d = 2(v − R) inside, half of it at the outside tie, 0 when clipped.
    expect(Array.from(gValue)).toEqual(
      [(0.5 / 3) * 2 * (0.125 - 0.5), (0.5 / 3) * 0.5 * 2 * 0.25, 0, 0].map(Math.fround),
    );
    expect(scaledRelativeError(gValue, want.gradVpreds)).toBeLessThan(TOL);
    expect(stats[VALUE_STAT.clipfrac]).toBeCloseTo(1 / 3, 6);
    expect(stats[VALUE_STAT.loss]).toBeCloseTo(want.loss, 6);
  });
});

describe('policyLoss with GSPO and CISPO', () => {
  for (const policyLossMode of ['gspo', 'cispo'] as const) {
    it(`${policyLossMode} matches the twin in every mode, with entropy and KL terms (tol ${TOL})`, async () => {
      const gpu = await getTestGpu();
      const [B, T] = SHAPES[1];
      const d = actorData(B, T, policyLossMode === 'gspo' ? 91 : 92);
      if (policyLossMode === 'gspo') {
        // Row-mean log-ratios over a range that crosses the clip bounds and, for a few rows, 10.
        for (let b = 0; b < B; b++) {
          const shift = b % 9 === 0 ? 12 : 0.6 * Math.sin(b);
          for (let t = 0; t < T; t++)
            d.oldLogprob[b * T + t] = d.logprob[b * T + t] - shift - 0.05 * Math.cos(t + b);
        }
      }
      const g = uploadActor(gpu, d);
      const { tokens, rows } = activeCounts(d.mask, B, T);
      const outs: Tensor[] = [];
      const cases = MODES.map((mode, m) => ({
        mode,
        globals: m % 2 === 1 ? { tokens: tokens + 4, rows: rows + 3, maxLen: T + 1 } : undefined,
        klKind: KINDS[m % 3],
      }));
      for (const c of cases) {
        const r = policyLoss(gpu, {
          ...g,
          B,
          T,
          ...c,
          policyLossMode,
          clipRatioHigh: 0.28,
          entropyCoef: 0.01,
          klCoef: 0.1,
        });
        outs.push(r.stats, r.gLogprob);
      }
      const got = (await gpu.readMany(outs)) as Float32Array[];
      cases.forEach((c, k) => {
        const what = `${policyLossMode} ${c.mode}${c.globals ? ' +globals' : ''}`;
        const base = { mask: d.mask, B, T, globals: c.globals };
        const pgArgs = {
          ...base,
          logprob: d.logprob,
          oldLogprob: d.oldLogprob,
          advantages: d.advantages,
          clipRatioLow: 0.2,
          clipRatioHigh: 0.28,
        };
        const pg =
          policyLossMode === 'gspo'
            ? computeGspoPolicyLoss(pgArgs)
            : computeCispoPolicyLoss({ ...pgArgs, mode: c.mode });
        const ent = computeEntropyLoss({ ...base, mode: c.mode, entropy: d.entropy });
        const kl = computeKlLoss({
          ...base,
          mode: c.mode,
          logprob: d.logprob,
          refLogprob: d.refLogprob,
          kind: c.klKind,
        });
        const [stats, gLogprob] = [got[2 * k], got[2 * k + 1]];
        const want = [
          pg.loss - 0.01 * ent.loss + 0.1 * kl.loss,
          pg.loss,
          ent.loss,
          kl.loss,
          pg.clipfrac,
          0,
          pg.ppoKl,
        ];
        expect(unitRelativeError(stats.slice(0, 7), want), `${what}: stats`).toBeLessThan(TOL);
        const wantG = pg.gradLogprob.map((x, i) => x + 0.1 * kl.gradLogprob[i]);
        const magnitude = pg.gradLogprob.map((x, i) => Math.abs(x) + Math.abs(0.1 * kl.gradLogprob[i]));
        expect(scaledRelativeError(gLogprob, wantG, magnitude), `${what}: gLogprob`).toBeLessThan(TOL);
        expect(pg.clipfrac, `${what}: the data clips`).toBeGreaterThan(0.05);
      });
      for (const t of [...outs, ...Object.values(g)]) t.release();
    });
  }
});
