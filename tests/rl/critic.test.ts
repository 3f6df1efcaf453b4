// PPO's critic (src/rl/critic.ts): values and gradients of a packed forward (ragged episodes in shared
// rows, the head on the real tokens) equal those of the padded batch, and the padded head equals a
// plain CPU product of the trunk's hidden states with the value head.
import { describe, expect, it } from 'vitest';
import { packBatch } from '../../src/agent/model/qwen-gpu.ts';
import { tinyCheckpoint, tinySpec } from '../../src/agent/model/tiny-checkpoints.ts';
import { VALUE_HEAD_BIAS, VALUE_HEAD_WEIGHT, ValueModel } from '../../src/rl/critic.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

type Weights = Map<string, { shape: readonly number[]; data: Float32Array }>;

function weightsWithHead(seed: number) {
  const { config, tensors } = tinyCheckpoint(tinySpec('tiny-qwen3-v512'));
  const weights = new Map(tensors as unknown as Weights);
  // A value head that is not zero (a fresh critic's is), so the trunk gets a gradient.
  weights.set(VALUE_HEAD_WEIGHT, {
    shape: [1, config.hiddenSize],
    data: randomArray(config.hiddenSize, seed),
  });
  weights.set(VALUE_HEAD_BIAS, { shape: [1], data: Float32Array.of(0.25) });
  return { config, weights };
}

const ids = (n: number, seed: number) =>
  Array.from(randomArray(n, seed), (x) => Math.floor(((x + 1) / 2) * 512) % 512);

/** ||a - b|| / ||b||. */
function normError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  return Math.sqrt(num / Math.max(den, 1e-30));
}

describe('ValueModel', () => {
  it('packed and padded forwards agree: values on real tokens, every gradient', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = weightsWithHead(7);
    const batch = packBatch([ids(14, 1), ids(5, 2), ids(6, 3), ids(3, 4)], { padSide: 'right' });
    const N = batch.B * batch.T;
    // dLoss/dv on real tokens only, as the value loss gives (0 where its mask is 0, padding included)
    const g = Float32Array.from(randomArray(N, 5), (x, i) => (batch.seg[i] ? x : 0));
    const run = async (pack: boolean) => {
      const critic = new ValueModel(gpu, config, weights);
      const fwd = critic.forward(batch, { pack });
      expect(fwd.packed !== null).toBe(pack);
      expect([fwd.act.batch.B, fwd.act.batch.T]).toEqual(pack ? [1, 28] : [4, 14]);
      const gValue = gpu.upload(g, [N]);
      critic.zeroGrad();
      critic.backward(fwd, gValue);
      const values = await gpu.readF32(fwd.values);
      const grads = new Map<string, Float32Array>();
      for (const [name, t] of critic.grads()) grads.set(name, await gpu.readF32(t));
      gValue.release();
      fwd.release();
      critic.release();
      return { values, grads };
    };
    const packed = await run(true);
    const padded = await run(false);
    for (let i = 0; i < N; i++) {
      if (!batch.seg[i]) {
        expect(packed.values[i]).toBe(0); // padding: no value, and no loss reads one
        continue;
      }
      expect(Math.abs(packed.values[i] - padded.values[i])).toBeLessThanOrEqual(
        1e-5 * Math.max(1, Math.abs(padded.values[i])),
      );
    }
    expect(packed.grads.size).toBe(padded.grads.size);
    for (const [name, ga] of packed.grads) {
      // every weight but the LM head (the critic does not use it) has a gradient to compare
      if (name !== 'lm_head.weight')
        expect(
          padded.grads.get(name)!.some((x) => x !== 0),
          `${name} has a gradient`,
        ).toBe(true);
      expect(normError(ga, padded.grads.get(name)!), name).toBeLessThanOrEqual(1e-5);
    }
  });

  it("the padded head is the trunk's hidden states times the value head, plus its bias", async () => {
    const gpu = await getTestGpu();
    const { config, weights } = weightsWithHead(11);
    const batch = packBatch([ids(6, 12), ids(4, 13)], { padSide: 'right' });
    const critic = new ValueModel(gpu, config, weights);
    const fwd = critic.forward(batch, { pack: false });
    const [values, h] = (await gpu.readMany([fwd.values, fwd.act.hFinal])) as Float32Array[];
    const D = config.hiddenSize;
    const w = weights.get(VALUE_HEAD_WEIGHT)!.data;
    for (let i = 0; i < batch.B * batch.T; i++) {
      let v = 0.25;
      for (let d = 0; d < D; d++) v += h[i * D + d] * w[d];
      expect(Math.abs(values[i] - v), `token ${i}`).toBeLessThanOrEqual(1e-5 * Math.max(1, Math.abs(v)));
    }
    fwd.release();
    critic.release();
  });
});
