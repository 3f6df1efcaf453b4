// GPU advantage estimators (src/gpu/kernels/advantage.ts) against their float64 CPU twin
// (src/rl/core-algos.ts) on ragged batches: interior mask zeros between turns, all-zero rows,
// one-token responses, groups of one, a group with equal scores, B not a multiple of the 64-wide
// workgroup, and N large enough for many workgroups and whitening chunks.
//
// Tolerance: |gpu − twin| / max(1, |twin|) ≤ 1e-5 (TOL). The GPU works in f32: row scans and chunked
// sums of a few hundred terms of order one, and whitening divides by a std of order one.

import { describe, expect, it } from 'vitest';
import {
  type AdvantageEstimator,
  advantage,
  gaeAdvantageReturn,
  grpoOutcomeAdvantage,
  klPenaltyRewards,
  maskedWhiten,
  reinforcePlusPlusBaselineOutcomeAdvantage,
  reinforcePlusPlusOutcomeAdvantage,
  rlooOutcomeAdvantage,
  WHITEN_CHUNK,
} from '../../src/gpu/kernels/advantage.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import {
  applyKlPenaltyToRewards,
  computeGaeAdvantageReturn,
  computeGrpoOutcomeAdvantage,
  computeReinforcePlusPlusBaselineOutcomeAdvantage,
  computeReinforcePlusPlusOutcomeAdvantage,
  computeRlooOutcomeAdvantage,
  type KlKind,
  maskedWhiten as maskedWhitenRef,
} from '../../src/rl/core-algos.ts';
import { getTestGpu } from '../helpers/gpu.ts';
import {
  makeRlBatch,
  type RlBatch,
  responseOutMask,
  uniformArray,
  unitRelativeError,
} from '../helpers/rl-batch.ts';

const TOL = 1e-5;

// Small: B = 7 rows (one workgroup, partly used); large: B = 70 (two workgroups), N = 21,000
// (329 workgroups of tokens, 83 whitening chunks).
const SHAPES: Array<[number, number]> = [
  [7, 13],
  [70, 300],
];

async function readAll(gpu: Gpu, tensors: Tensor[]): Promise<Float32Array[]> {
  const out = (await gpu.readMany(tensors)) as Float32Array[];
  for (const t of tensors) t.release();
  return out;
}

function upload(gpu: Gpu, batch: RlBatch) {
  const { B, T } = batch;
  return {
    mask: gpu.upload(batch.mask, [B, T]),
    index: gpu.upload(batch.index, [B], 'u32'),
    tokenRewards: gpu.upload(batch.tokenRewards, [B, T]),
    outcomeRewards: gpu.upload(batch.outcomeRewards, [B, T]),
  };
}

function release(...tensors: Tensor[]): void {
  for (const t of tensors) t.release();
}

const ESTIMATORS: AdvantageEstimator[] = [
  'gae',
  'ppo',
  'grpo',
  'drgrpo',
  'rloo',
  'reinforce++',
  'reinforce++-baseline',
];

/** The CPU twin of `advantage()` for one estimator name. */
function twinAdvantage(
  estimator: AdvantageEstimator,
  cpu: {
    tokenRewards: ArrayLike<number>;
    mask: ArrayLike<number>;
    outMask?: ArrayLike<number>;
    index: ArrayLike<number>;
    B: number;
    T: number;
  },
  values: ArrayLike<number>,
  gamma: number,
  lam: number,
) {
  if (estimator === 'gae' || estimator === 'ppo')
    return computeGaeAdvantageReturn({ ...cpu, values, gamma, lam });
  if (estimator === 'grpo' || estimator === 'drgrpo')
    return computeGrpoOutcomeAdvantage({ ...cpu, normByStd: estimator === 'grpo' });
  if (estimator === 'rloo') return computeRlooOutcomeAdvantage(cpu);
  if (estimator === 'reinforce++') return computeReinforcePlusPlusOutcomeAdvantage({ ...cpu, gamma });
  return computeReinforcePlusPlusBaselineOutcomeAdvantage(cpu);
}

describe('GAE', () => {
  for (const [B, T] of SHAPES) {
    it(`matches computeGaeAdvantageReturn, whitened and raw, B=${B} T=${T} (tol ${TOL})`, async () => {
      const gpu = await getTestGpu();
      const batch = makeRlBatch(B, T, 100 + B);
      const values = uniformArray(B * T, 200 + B, -1, 1);
      const g = upload(gpu, batch);
      const v = gpu.upload(values, [B, T]);
      const outs: Tensor[] = [];
      const refs: Array<ArrayLike<number>> = [];
      for (const [gamma, lam, whiten] of [
        [0.99, 0.95, true],
        [1, 1, false],
        [0.9, 0.8, false],
      ] as const) {
        const r = gaeAdvantageReturn(gpu, {
          tokenRewards: g.tokenRewards,
          values: v,
          mask: g.mask,
          B,
          T,
          gamma,
          lam,
          whiten,
        });
        outs.push(r.advantages, r.returns);
        const ref = computeGaeAdvantageReturn({
          tokenRewards: batch.tokenRewards,
          values,
          mask: batch.mask,
          B,
          T,
          gamma,
          lam,
          whiten,
        });
        refs.push(ref.advantages, ref.returns);
      }
      const got = await readAll(gpu, outs);
      got.forEach((x, k) => {
        expect(unitRelativeError(x, refs[k]), `output ${k}`).toBeLessThan(TOL);
      });
      // γ = λ = 1: advantage = (return-to-go over policy tokens) − value, on policy tokens.
      const adv1 = got[2];
      for (let b = 0; b < B; b++) {
        let togo = 0;
        for (let t = T - 1; t >= 0; t--) {
          const i = b * T + t;
          if (batch.mask[i] !== 1) {
            expect(adv1[i]).toBe(0);
            continue;
          }
          togo += batch.tokenRewards[i];
          expect(Math.abs(adv1[i] - (togo - values[i]))).toBeLessThan(TOL * Math.max(1, Math.abs(togo)));
        }
      }
      release(g.mask, g.index, g.tokenRewards, g.outcomeRewards, v);
    });
  }

  it('values at environment positions do not change the advantages', async () => {
    const gpu = await getTestGpu();
    const [B, T] = SHAPES[0];
    const batch = makeRlBatch(B, T, 7);
    const values = uniformArray(B * T, 8, -1, 1);
    const scrambled = values.slice();
    for (let i = 0; i < B * T; i++) if (batch.mask[i] === 0) scrambled[i] = 1e3 * (i % 5) - 2e3;
    const g = upload(gpu, batch);
    const v1 = gpu.upload(values, [B, T]);
    const v2 = gpu.upload(scrambled, [B, T]);
    const a = gaeAdvantageReturn(gpu, {
      tokenRewards: g.tokenRewards,
      values: v1,
      mask: g.mask,
      B,
      T,
      gamma: 0.99,
      lam: 0.95,
    });
    const b = gaeAdvantageReturn(gpu, {
      tokenRewards: g.tokenRewards,
      values: v2,
      mask: g.mask,
      B,
      T,
      gamma: 0.99,
      lam: 0.95,
    });
    const [a1, r1, a2, r2] = await readAll(gpu, [a.advantages, a.returns, b.advantages, b.returns]);
    expect(Array.from(a2)).toEqual(Array.from(a1));
    expect(Array.from(r2)).toEqual(Array.from(r1));
    release(g.mask, g.index, g.tokenRewards, g.outcomeRewards, v1, v2);
  });
});

describe('outcome estimators', () => {
  for (const [B, T] of SHAPES) {
    it(`GRPO, Dr.GRPO, RLOO, REINFORCE++ and REINFORCE++-baseline match the twin, B=${B} T=${T} (tol ${TOL})`, async () => {
      const gpu = await getTestGpu();
      const batch = makeRlBatch(B, T, 300 + B);
      const g = upload(gpu, batch);
      const outs: Tensor[] = [];
      const refs: Array<{ name: string; ref: ArrayLike<number> }> = [];
      const push = (
        name: string,
        r: { advantages: Tensor; returns: Tensor },
        ref: { advantages: ArrayLike<number>; returns: ArrayLike<number> },
      ) => {
        outs.push(r.advantages);
        refs.push({ name: `${name}.advantages`, ref: ref.advantages });
        if (r.returns !== r.advantages) {
          outs.push(r.returns);
          refs.push({ name: `${name}.returns`, ref: ref.returns });
        } else {
          expect(Array.from(ref.returns), `${name}: the twin's returns equal its advantages`).toEqual(
            Array.from(ref.advantages),
          );
        }
      };
      for (const rewards of ['tokenRewards', 'outcomeRewards'] as const) {
        const cpu = { tokenRewards: batch[rewards], mask: batch.mask, index: batch.index, B, T };
        const gpuArgs = { tokenRewards: g[rewards], mask: g.mask, index: g.index, B, T };
        push(`grpo(${rewards})`, grpoOutcomeAdvantage(gpu, gpuArgs), computeGrpoOutcomeAdvantage(cpu));
        push(
          `drgrpo(${rewards})`,
          grpoOutcomeAdvantage(gpu, { ...gpuArgs, normByStd: false }),
          computeGrpoOutcomeAdvantage({ ...cpu, normByStd: false }),
        );
        push(
          `grpo-eps(${rewards})`,
          grpoOutcomeAdvantage(gpu, { ...gpuArgs, epsilon: 0.25 }),
          computeGrpoOutcomeAdvantage({ ...cpu, epsilon: 0.25 }),
        );
        push(`rloo(${rewards})`, rlooOutcomeAdvantage(gpu, gpuArgs), computeRlooOutcomeAdvantage(cpu));
        push(
          `rpp-baseline(${rewards})`,
          reinforcePlusPlusBaselineOutcomeAdvantage(gpu, gpuArgs),
          computeReinforcePlusPlusBaselineOutcomeAdvantage(cpu),
        );
        for (const gamma of [1, 0.97]) {
          push(
            `rpp(${rewards}, γ=${gamma})`,
            reinforcePlusPlusOutcomeAdvantage(gpu, { tokenRewards: g[rewards], mask: g.mask, B, T, gamma }),
            computeReinforcePlusPlusOutcomeAdvantage({
              tokenRewards: batch[rewards],
              mask: batch.mask,
              B,
              T,
              gamma,
            }),
          );
        }
      }
      const got = await readAll(gpu, outs);
      got.forEach((x, k) => {
        expect(unitRelativeError(x, refs[k].ref), refs[k].name).toBeLessThan(TOL);
      });
      // The group with equal (binary-fraction) scores gets exactly 0 from GRPO, Dr.GRPO and RLOO.
      expect(batch.equalGroupRows.length).toBeGreaterThanOrEqual(3);
      for (const k of [0, 1, 3]) {
        for (const b of batch.equalGroupRows)
          for (let t = 0; t < T; t++) expect(got[k][b * T + t], refs[k].name).toBe(0);
      }
      release(g.mask, g.index, g.tokenRewards, g.outcomeRewards);
    });
  }

  it('a batch of groups of one: GRPO gives score/(1 + eps), RLOO the score', async () => {
    const gpu = await getTestGpu();
    const B = 5;
    const T = 3;
    const tokenRewards = new Float32Array([0, 0, 1, 0, 0.5, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0]);
    const mask = new Float32Array([1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0]);
    const index = new Uint32Array([5, 4, 3, 2, 1]);
    const args = {
      tokenRewards: gpu.upload(tokenRewards, [B, T]),
      mask: gpu.upload(mask, [B, T]),
      index: gpu.upload(index, [B], 'u32'),
      B,
      T,
    };
    const grpo = grpoOutcomeAdvantage(gpu, args).advantages;
    const rloo = rlooOutcomeAdvantage(gpu, args).advantages;
    const [gGrpo, gRloo] = await readAll(gpu, [grpo, rloo]);
    const cpu = { tokenRewards, mask, index, B, T };
    expect(unitRelativeError(gGrpo, computeGrpoOutcomeAdvantage(cpu).advantages)).toBeLessThan(TOL);
    expect(Array.from(gRloo)).toEqual(Array.from(computeRlooOutcomeAdvantage(cpu).advantages));
    expect(gGrpo[0]).toBeCloseTo(1 / (1 + 1e-6), 6);
    release(args.tokenRewards, args.mask, args.index);
  });
});

describe('masked whitening', () => {
  it(`matches maskedWhiten for N across several chunks of ${WHITEN_CHUNK}, |mean| ≫ std included`, async () => {
    const gpu = await getTestGpu();
    const N = 5 * WHITEN_CHUNK + 17;
    // About 70% active tokens, in runs that straddle chunk boundaries.
    const mask = uniformArray(N, 11, 0, 1).map((u, i) => (u < 0.7 || (i >= 300 && i < 700) ? 1 : 0));
    mask.fill(0, 1000, 1100);
    const x = uniformArray(N, 12, -1, 1);
    const shifted = x.map((v) => 50 + v);
    const outs = [x, shifted].map((data) => maskedWhiten(gpu, gpu.upload(data, [N]), gpu.upload(mask, [N])));
    const got = await readAll(gpu, outs);
    expect(unitRelativeError(got[0], maskedWhitenRef(x, mask))).toBeLessThan(TOL);
    // At mean 50 the f32 mean itself is only good to an ulp of 50 (3.8e-6), which (x − mean)·rstd
    // scales by 1/std ≈ 1.7: a few 1e-6 per ulp is all f32 can do, hence 5e-5 here. Chunk-local
    // centring keeps the variance from cancelling (a one-pass Σx² would lose it entirely).
    expect(unitRelativeError(got[1], maskedWhitenRef(shifted, mask))).toBeLessThan(5e-5);
    expect(Math.max(...got[0].map(Math.abs))).toBeGreaterThan(1); // a real spread, not all zeros
  });

  it('returns zeros with one or no active token (never NaN)', async () => {
    const gpu = await getTestGpu();
    const x = new Float32Array([3, -2, 7, 1]);
    const one = new Float32Array([0, 0, 1, 0]);
    const none = new Float32Array(4);
    const outs = [one, none].map((m) => maskedWhiten(gpu, gpu.upload(x, [4]), gpu.upload(m, [4])));
    const got = await readAll(gpu, outs);
    expect(Array.from(got[0])).toEqual([0, 0, 0, 0]);
    expect(Array.from(got[1])).toEqual([0, 0, 0, 0]);
    // The estimators that whiten inherit it: REINFORCE++ on a batch with a single policy token.
    const r = reinforcePlusPlusOutcomeAdvantage(gpu, {
      tokenRewards: gpu.upload(x, [2, 2]),
      mask: gpu.upload(one, [2, 2]),
      B: 2,
      T: 2,
      gamma: 1,
    });
    const [adv, ret] = await readAll(gpu, [r.advantages, r.returns]);
    expect(Array.from(adv)).toEqual([0, 0, 0, 0]);
    expect(Array.from(ret)).toEqual([0, 0, 7, 0]);
  });
});

describe('KL penalty in the reward', () => {
  it('matches applyKlPenaltyToRewards for k1, k2, k3, including both k3 clamps and tiny differences', async () => {
    const gpu = await getTestGpu();
    const [B, T] = [9, 37];
    const N = B * T;
    const batch = makeRlBatch(B, T, 21);
    const logprob = uniformArray(N, 22, -4, 0);
    const refLogprob = new Float32Array(N);
    const noise = uniformArray(N, 23, -1, 1);
    for (let i = 0; i < N; i++) {
      // Mostly close to logprob (k3's cancellation regime), some far (|ref − logp| > 20, k3 > 10).
      const k = i % 11;
      refLogprob[i] =
        k === 0
          ? logprob[i] - 25
          : k === 1
            ? logprob[i] + 22
            : k === 2
              ? logprob[i] + 12
              : logprob[i] + noise[i] * (k < 6 ? 1e-3 : 1);
    }
    const g = upload(gpu, batch);
    const lp = gpu.upload(logprob, [B, T]);
    const ref = gpu.upload(refLogprob, [B, T]);
    const kinds: KlKind[] = ['k1', 'k2', 'k3'];
    const outs = kinds.map((kind) =>
      klPenaltyRewards(gpu, {
        tokenRewards: g.tokenRewards,
        logprob: lp,
        refLogprob: ref,
        mask: g.mask,
        beta: 0.05,
        kind,
      }),
    );
    const got = await readAll(gpu, outs);
    kinds.forEach((kind, k) => {
      const want = applyKlPenaltyToRewards({
        tokenRewards: batch.tokenRewards,
        logprob,
        refLogprob,
        mask: batch.mask,
        beta: 0.05,
        kind,
      });
      expect(unitRelativeError(got[k], want), kind).toBeLessThan(TOL);
      // Positions with mask = 0 keep their reward bit for bit.
      for (let i = 0; i < N; i++) if (batch.mask[i] === 0) expect(got[k][i]).toBe(batch.tokenRewards[i]);
    });
    release(g.mask, g.index, g.tokenRewards, g.outcomeRewards, lp, ref);
  });
});

/** max over groups of size ≥ 2 of max|score| / std (unbiased): GRPO's amplification of score errors. */
function grpoCondition(tokenRewards: ArrayLike<number>, batch: RlBatch, B: number, T: number): number {
  const scores = new Map<number, number[]>();
  for (let b = 0; b < B; b++) {
    let s = 0;
    for (let t = 0; t < T; t++) s += tokenRewards[b * T + t];
    const list = scores.get(batch.index[b]) ?? [];
    list.push(s);
    scores.set(batch.index[b], list);
  }
  let worst = 1;
  for (const list of scores.values()) {
    if (list.length < 2) continue;
    const mean = list.reduce((x, y) => x + y, 0) / list.length;
    const std = Math.sqrt(list.reduce((x, y) => x + (y - mean) ** 2, 0) / (list.length - 1));
    if (std > 0) worst = Math.max(worst, Math.max(...list.map(Math.abs)) / std);
  }
  return worst;
}

describe('advantage (by estimator name, with the in-reward KL penalty)', () => {
  it('equals the twin estimator on the penalised rewards for every name', async () => {
    const gpu = await getTestGpu();
    const [B, T] = [11, 29];
    const N = B * T;
    const batch = makeRlBatch(B, T, 31);
    const values = uniformArray(N, 32, -1, 1);
    const logprob = uniformArray(N, 33, -3, 0);
    const refLogprob = logprob.map((x, i) => x + 0.3 * Math.sin(i));
    const g = upload(gpu, batch);
    const v = gpu.upload(values, [B, T]);
    const lp = gpu.upload(logprob, [B, T]);
    const ref = gpu.upload(refLogprob, [B, T]);
    const names = ESTIMATORS;
    const [gamma, lam, beta] = [0.95, 0.9, 0.2];
    const outs: Tensor[] = [];
    for (const estimator of names) {
      for (const withKl of [false, true]) {
        const r = advantage(gpu, {
          estimator,
          tokenRewards: g.tokenRewards,
          mask: g.mask,
          index: g.index,
          values: v,
          B,
          T,
          gamma,
          lam,
          klInReward: withKl ? { logprob: lp, refLogprob: ref, beta, kind: 'k2' } : null,
        });
        outs.push(r.advantages, r.returns);
      }
    }
    // The twin gets the GPU's f32 penalised rewards (the penalty is tested above): a group whose
    // scores differ only by the KL terms has a tiny std, which would amplify the f32 rounding of the
    // rewards themselves far beyond the estimator's own error.
    const penalised = klPenaltyRewards(gpu, {
      tokenRewards: g.tokenRewards,
      logprob: lp,
      refLogprob: ref,
      mask: g.mask,
      beta,
      kind: 'k2',
    });
    outs.push(penalised);
    const got = (await gpu.readMany(outs)) as Float32Array[];
    const penalisedRewards = got[got.length - 1];
    expect(
      unitRelativeError(
        penalisedRewards,
        applyKlPenaltyToRewards({
          tokenRewards: batch.tokenRewards,
          logprob,
          refLogprob,
          mask: batch.mask,
          beta,
          kind: 'k2',
        }),
      ),
    ).toBeLessThan(TOL);
    let k = 0;
    for (const estimator of names) {
      for (const withKl of [false, true]) {
        const tokenRewards = withKl ? penalisedRewards : batch.tokenRewards;
        const cpu = { tokenRewards, mask: batch.mask, index: batch.index, B, T };
        const want = twinAdvantage(estimator, cpu, values, gamma, lam);
        const what = `${estimator}${withKl ? ' +kl' : ''}`;
        // GRPO divides by the group std: scores that nearly agree (equal outcomes minus small KL
        // terms) make it ill-conditioned, and one f32 ulp of a score (2^-24·|s|) becomes 2^-24·|s|/σ
        // of an advantage. Tolerance: the larger of TOL and 4 such ulps at the worst group.
        const tol =
          estimator === 'grpo' ? Math.max(TOL, 4 * 2 ** -24 * grpoCondition(tokenRewards, batch, B, T)) : TOL;
        expect(unitRelativeError(got[k], want.advantages), `${what}: advantages`).toBeLessThan(tol);
        expect(unitRelativeError(got[k + 1], want.returns), `${what}: returns`).toBeLessThan(tol);
        k += 2;
      }
    }
    // The KL penalty changes GAE's numbers (so the twin comparison above tests it).
    expect(unitRelativeError(got[0], got[2])).toBeGreaterThan(1e-3);
    expect(() =>
      advantage(gpu, { estimator: 'rloo', tokenRewards: g.tokenRewards, mask: g.mask, B, T }),
    ).toThrow(/estimator 'rloo' needs index/);
    expect(() =>
      advantage(gpu, { estimator: 'ppo', tokenRewards: g.tokenRewards, mask: g.mask, B, T }),
    ).toThrow(/estimator 'ppo' \(GAE\) needs values/);
    expect(() =>
      advantage(gpu, {
        estimator: 'gspo' as AdvantageEstimator,
        tokenRewards: g.tokenRewards,
        mask: g.mask,
        B,
        T,
      }),
    ).toThrow(/unknown estimator 'gspo'/);
    release(g.mask, g.index, g.tokenRewards, g.outcomeRewards, v, lp, ref);
  });
});

describe('outMask: advantages on the positions the loss reads outside the mask (loss-mask ablation)', () => {
  it('every estimator matches its twin, and on the mask equals the estimator without an outMask', async () => {
    const gpu = await getTestGpu();
    const [B, T] = [70, 41];
    const N = B * T;
    const batch = makeRlBatch(B, T, 57);
    const outMask = responseOutMask(batch);
    let outside = 0;
    for (let i = 0; i < N; i++) if (outMask[i] === 1 && batch.mask[i] === 0) outside++;
    expect(outside).toBeGreaterThan(N / 10);
    const values = uniformArray(N, 58, -1, 1);
    const g = upload(gpu, batch);
    const v = gpu.upload(values, [B, T]);
    const om = gpu.upload(outMask, [B, T]);
    const names = ESTIMATORS.filter((n) => n !== 'gae'); // 'gae' is 'ppo'
    const [gamma, lam] = [0.97, 0.9];
    const outs: Tensor[] = [];
    for (const estimator of names) {
      const r = advantage(gpu, {
        estimator,
        tokenRewards: g.tokenRewards,
        mask: g.mask,
        outMask: om,
        index: g.index,
        values: v,
        B,
        T,
        gamma,
        lam,
      });
      outs.push(r.advantages, r.returns);
    }
    const got = (await gpu.readMany(outs)) as Float32Array[];
    const twin = (estimator: AdvantageEstimator, withOut: boolean) =>
      twinAdvantage(
        estimator,
        { ...batch, tokenRewards: batch.tokenRewards, outMask: withOut ? outMask : undefined },
        values,
        gamma,
        lam,
      );
    names.forEach((estimator, k) => {
      const want = twin(estimator, true);
      const plain = twin(estimator, false);
      expect(unitRelativeError(got[2 * k], want.advantages), `${estimator}: advantages`).toBeLessThan(TOL);
      expect(unitRelativeError(got[2 * k + 1], want.returns), `${estimator}: returns`).toBeLessThan(TOL);
      let filled = 0;
      for (let i = 0; i < N; i++) {
        if (batch.mask[i] === 1) {
          expect(want.advantages[i], `${estimator} at ${i}`).toBe(plain.advantages[i]);
          expect(want.returns[i], `${estimator} returns at ${i}`).toBe(plain.returns[i]);
        } else if (outMask[i] === 0) {
          expect(got[2 * k][i], `${estimator} outside mask ∪ outMask at ${i}`).toBe(0);
        } else if (want.advantages[i] !== 0) filled++;
      }
      // The environment positions now carry advantages (the ablation trains them).
      expect(filled, estimator).toBeGreaterThan(outside / 2);
    });
    release(g.mask, g.index, g.tokenRewards, g.outcomeRewards, v, om);
  });
});

describe('whitenMask: GAE over every response token, whitened over the policy tokens (ablation.whitenOver "policy")', () => {
  it('matches the twin; the policy tokens then have mean 0 and variance 1, which whitening over the mask does not give', async () => {
    const gpu = await getTestGpu();
    const [B, T] = [70, 41];
    const N = B * T;
    const batch = makeRlBatch(B, T, 91);
    const response = responseOutMask(batch); // the policy's tokens and the environment's between them
    const values = uniformArray(N, 92, -1, 1);
    const g = upload(gpu, batch);
    const v = gpu.upload(values, [B, T]);
    const r = gpu.upload(response, [B, T]);
    const [gamma, lam] = [1, 0.95];
    const outs: Tensor[] = [];
    for (const whitenMask of [g.mask, undefined]) {
      const a = advantage(gpu, {
        estimator: 'ppo',
        tokenRewards: g.tokenRewards,
        mask: r,
        outMask: r,
        values: v,
        B,
        T,
        gamma,
        lam,
        whitenMask,
      });
      outs.push(a.advantages, a.returns);
    }
    const [policyWhitened, returns1, responseWhitened] = await readAll(gpu, outs.slice(0, 3));
    outs[3].release();
    const cpu = {
      tokenRewards: batch.tokenRewards,
      values,
      mask: response,
      outMask: response,
      B,
      T,
      gamma,
      lam,
    };
    const want = computeGaeAdvantageReturn({ ...cpu, whitenMask: batch.mask });
    expect(unitRelativeError(policyWhitened, want.advantages)).toBeLessThan(TOL);
    expect(unitRelativeError(returns1, want.returns)).toBeLessThan(TOL);
    expect(unitRelativeError(responseWhitened, computeGaeAdvantageReturn(cpu).advantages)).toBeLessThan(TOL);
    const moments = (x: ArrayLike<number>) => {
      const xs = Array.from(x).filter((_, i) => batch.mask[i] === 1);
      const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
      return { mean, variance: xs.reduce((a, b) => a + (b - mean) ** 2, 0) / (xs.length - 1) };
    };
    const m = moments(want.advantages);
    expect(Math.abs(m.mean)).toBeLessThan(1e-9);
    expect(m.variance).toBeCloseTo(1, 6);
    const other = moments(computeGaeAdvantageReturn(cpu).advantages);
    expect(Math.abs(other.mean) + Math.abs(other.variance - 1)).toBeGreaterThan(1e-2);
    release(g.mask, g.index, g.tokenRewards, g.outcomeRewards, v, r);
  });
});

describe('argument checks', () => {
  it('name the bad shapes and values', async () => {
    const gpu = await getTestGpu();
    const r = gpu.zeros([2, 3]);
    const m = gpu.zeros([2, 4]);
    const idx = gpu.zeros([3], 'u32');
    const idxF = gpu.zeros([2]);
    expect(() =>
      gaeAdvantageReturn(gpu, { tokenRewards: r, values: r, mask: m, B: 2, T: 3, gamma: 1, lam: 1 }),
    ).toThrow(/mask \[2, 4\] must hold B\*T = 2\*3 = 6/);
    expect(() => grpoOutcomeAdvantage(gpu, { tokenRewards: r, mask: r, index: idx, B: 2, T: 3 })).toThrow(
      /index \[3\] must hold one group id per row \(B = 2\)/,
    );
    expect(() => rlooOutcomeAdvantage(gpu, { tokenRewards: r, mask: r, index: idxF, B: 2, T: 3 })).toThrow(
      /index must be u32/,
    );
    expect(() =>
      reinforcePlusPlusOutcomeAdvantage(gpu, { tokenRewards: r, mask: r, B: 2, T: 3, gamma: Number.NaN }),
    ).toThrow(/gamma must be a finite number, got NaN/);
    expect(() =>
      gaeAdvantageReturn(gpu, { tokenRewards: r, values: r, mask: r, B: 1.5, T: 4, gamma: 1, lam: 1 }),
    ).toThrow(/B must be a non-negative integer, got 1.5/);
    expect(() =>
      klPenaltyRewards(gpu, {
        tokenRewards: r,
        logprob: r,
        refLogprob: r,
        mask: r,
        beta: 0.1,
        kind: 'k4' as KlKind,
      }),
    ).toThrow(/kind must be 'k1', 'k2' or 'k3', got k4/);
    release(r, m, idx, idxF);
  });
});
