// npm run bench:packing -- --config configs/<name>.json [--model DIR] [--questions 8] [--samples 8]
//                          [--reps 2] [--temperature 0.5]
// One rollout of the config (the questions of step 1 × samples episodes, the trainer's code), then
// the update's forward + backward over those episodes, timed with the rows padded to the longest
// episode and with the rows packed (src/agent/model/packing.ts), in the trainer's micro-batches, on
// one adapter in one run. Prints the slots each layout computes, the seconds, the ratio, and the
// largest difference of the two layouts' log-probs (they should agree to rounding). With a PPO config
// the critic's forward + backward (values of every real token) is timed the same way.
import { buildTrainingBatch, sliceRows } from '../src/rl/batch.ts';
import { runRollouts } from '../src/rl/rollout.ts';
import { microBatchRanges, trajectoryEpisode } from '../src/rl/trainer.ts';
import { rolloutBench } from './trainer-cli.ts';

const { config, gpu, trainer, Q, reps, temperature, rolloutOptions } = await rolloutBench(
  'bench:packing',
  false,
);

const t0 = performance.now();
const { trajectories } = await runRollouts({
  model: trainer.policy,
  ...rolloutOptions(trainer.questionsFor(1, Q), 1),
});
console.log(`rollout: ${trajectories.length} episodes in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

const batch = buildTrainingBatch(trajectories.map((t) => trajectoryEpisode(t, config.reward.processWeight)));
const { B, T } = batch;
const real = trajectories.reduce((n, t) => n + t.ids.length, 0);
const mask = Uint32Array.from(batch.lossMask, (m) => (m > 0 ? 1 : 0));
const ranges = microBatchRanges(0, B, trainer.microBatch.rows);
console.log(
  `${B} rows × T ${T} = ${B * T} slots, ${real} real tokens (${((100 * real) / (B * T)).toFixed(0)} %), ${ranges.length} micro-batch(es) of up to ${trainer.microBatch.rows} rows`,
);

/** The update's passes over the batch: forward (log-probs of the policy's tokens) and backward. */
async function pass(pack: boolean): Promise<{ seconds: number; slots: number; logprob: Float32Array }> {
  const policy = trainer.policy;
  const logprob = new Float32Array(B * T);
  let slots = 0;
  await gpu.sync();
  const start = performance.now();
  policy.zeroGrad();
  for (const [m0, m1] of ranges) {
    const sub = m0 === 0 && m1 === B ? batch : sliceRows(batch, m0, m1);
    const n = sub.B * sub.T;
    const subMask = mask.subarray(m0 * T, m1 * T);
    const fwd = policy.forward(sub.tokens, sub.targets, subMask, { pack, temperature });
    slots += fwd.batch.B * fwd.batch.T;
    // a stand-in for the policy loss's gradient: −1/(active tokens) on each policy token
    const g = gpu.upload(
      Float32Array.from(subMask, (m) => (m ? -1 / real : 0)),
      [n],
      'f32',
      'bench.gLogprob',
    );
    policy.backward(fwd, g);
    logprob.set(await gpu.readF32(fwd.head.logprob), m0 * T);
    g.release();
    fwd.release();
  }
  await gpu.sync();
  const seconds = (performance.now() - start) / 1000;
  console.log(`  ${pack ? 'packed' : 'padded'}: ${slots} slots, ${seconds.toFixed(1)} s`);
  return { seconds, slots, logprob };
}

/** The critic's passes (PPO): values of every real token, forward and backward. */
async function criticPass(pack: boolean): Promise<{ seconds: number; slots: number; logprob: Float32Array }> {
  const critic = trainer.critic!;
  const values = new Float32Array(B * T);
  let slots = 0;
  await gpu.sync();
  const start = performance.now();
  critic.zeroGrad();
  for (const [m0, m1] of ranges) {
    const sub = m0 === 0 && m1 === B ? batch : sliceRows(batch, m0, m1);
    const fwd = critic.forward(sub.tokens, { pack });
    slots += fwd.act.batch.B * fwd.act.batch.T;
    // a stand-in for the value loss's gradient: 1/(active tokens) on each policy token
    const g = gpu.upload(
      Float32Array.from(mask.subarray(m0 * T, m1 * T), (m) => (m ? 1 / real : 0)),
      [sub.B * sub.T],
      'f32',
      'bench.gValue',
    );
    critic.backward(fwd, g);
    values.set(await gpu.readF32(fwd.values), m0 * T);
    g.release();
    fwd.release();
  }
  await gpu.sync();
  const seconds = (performance.now() - start) / 1000;
  console.log(`  critic ${pack ? 'packed' : 'padded'}: ${slots} slots, ${seconds.toFixed(1)} s`);
  return { seconds, slots, logprob: values };
}

const models = [{ name: 'policy', run: pass, what: 'log-prob' }];
if (trainer.critic) models.push({ name: 'critic', run: criticPass, what: 'value' });
for (const m of models) {
  await m.run(true); // warm-up: pipelines compile on first use
  const rows: string[] = [];
  let worst = 0;
  for (let rep = 0; rep < reps; rep++) {
    const padded = await m.run(false);
    const packed = await m.run(true);
    for (let i = 0; i < B * T; i++)
      if (mask[i]) worst = Math.max(worst, Math.abs(packed.logprob[i] - padded.logprob[i]));
    for (const [name, r] of [
      ['padded', padded],
      ['packed', packed],
    ] as const)
      rows.push(
        `| ${rep} | ${name} | ${r.slots} | ${r.seconds.toFixed(1)} | ${(real / r.seconds).toFixed(0)} |`,
      );
    rows.push(
      `| ${rep} | padded ÷ packed | ${(padded.slots / packed.slots).toFixed(2)}× | ${(padded.seconds / packed.seconds).toFixed(2)}× | |`,
    );
  }
  console.log(`\n${m.name}\n| rep | rows | slots computed | forward + backward s | real tokens/s |`);
  console.log('|---|---|---|---|---|');
  for (const r of rows) console.log(r);
  console.log(`\nlargest |Δ ${m.what}| on the policy's tokens, packed vs padded: ${worst.toExponential(2)}`);
}
trainer.release();
