// npm run bench:passk -- --config configs/<name>.json [--model DIR] [--n 25] [--samples 8]
//                        [--temperatures 0.5,1] [--splits test,train]
// Before a long group-method run: for each split and temperature, samples G episodes of each of the
// first n questions (the trainer's own rollout code, Trainer.evaluate) and prints what GRPO / RLOO
// would have to learn from (src/rl/group-signal.ts): mean EM, pass@G, maj@G, the share of groups whose EM
// differs between samples, the share whose reward differs at all, and the mean in-group reward std.
// Greedy EM of the same questions is printed beside them (temperature 0, one sample).
// The sampling seed is fixed (12345), so a rerun on the same adapter draws the same episodes.
import { normalizeAnswer } from '../src/env/reward.ts';
import { groupSignal } from '../src/rl/group-signal.ts';
import { episodeReward } from '../src/rl/trainer.ts';
import { benchArgs, benchTrainer } from './trainer-cli.ts';

const SAMPLING_SEED = 12345;
const { values, fail, positiveInt } = benchArgs(
  'bench:passk',
  'npm run bench:passk -- --config configs/<name>.json [--model DIR] [--n 25] [--samples 8] [--temperatures 0.5,1] [--splits test,train]',
  {
    n: { type: 'string', default: '25' },
    samples: { type: 'string', default: '8' },
    temperatures: { type: 'string', default: '0.5,1' },
    splits: { type: 'string', default: 'test,train' },
  },
);
const n = positiveInt('n')!;
const samples = positiveInt('samples')!;
const temperatures = (values.temperatures ?? '').split(',').map(Number);
if (temperatures.some((t) => !(t > 0 && Number.isFinite(t))))
  fail(`--temperatures must be numbers > 0, got ${values.temperatures}`);
const splits = (values.splits ?? '').split(',');
if (splits.some((s) => s !== 'test' && s !== 'train'))
  fail(`--splits takes test and/or train, got ${values.splits}`);

const { config, gpu, trainer } = await benchTrainer(values.config, values.model, fail);
console.log(`model ${config.model.path}, ${n} questions × ${samples} samples, config ${config.name}`);
const w = config.reward.processWeight;
for (const split of splits as ('test' | 'train')[]) {
  const greedy = await trainer.evaluate(n, split);
  console.log(`${split}: greedy EM ${greedy.em.toFixed(3)} format-valid ${greedy.formatValid.toFixed(3)}`);
  for (const temperature of temperatures) {
    const t0 = performance.now();
    const r = await trainer.evaluate(n, split, {
      samplesPerQuestion: samples,
      temperature,
      seed: SAMPLING_SEED,
    });
    const g = groupSignal(
      r.trajectories.map((t) => ({
        group: t.group,
        em: t.outcome?.em ?? 0,
        reward: episodeReward(t, w),
        answer: t.prediction === null ? null : normalizeAnswer(t.prediction),
      })),
    );
    console.log(
      `${split} T=${temperature}: mean EM ${g.meanEm.toFixed(3)} · pass@${samples} ${g.passAtK.toFixed(3)} · ` +
        `maj@${samples} ${g.majAtK!.toFixed(3)} · ` +
        `EM-split groups ${g.emSplitGroups.toFixed(3)} · reward-split groups ${g.rewardSplitGroups.toFixed(3)} · ` +
        `reward std ${g.meanRewardStd.toFixed(3)} · format-valid ${r.formatValid.toFixed(3)} · ` +
        `${((performance.now() - t0) / 1000).toFixed(0)} s`,
    );
  }
}
trainer.release();
gpu.destroy();
