// npm run bench:passk -- --config configs/<name>.json [--model DIR] [--n 25] [--samples 8]
//                        [--temperatures 0.5,1] [--splits test,train] [--json PREFIX]
// Before a long group-method run: for each split and temperature, samples G episodes of each of the
// first n questions (the trainer's own rollout code, Trainer.evaluate) and prints what GRPO / RLOO
// would have to learn from (src/rl/group-signal.ts): mean EM, pass@G, maj@G, the share of groups whose EM
// differs between samples, the share whose reward differs at all, and the mean in-group reward std.
// Greedy EM of the same questions is printed beside them (temperature 0, one sample).
// The sampling seed is fixed (12345), so a rerun on the same adapter draws the same episodes.
// --json PREFIX writes, for each split and temperature, three files in the shape npm run compare reads
// (one line per question, id / type / em / f1): PREFIX-<split>-t<T>-maj<G>.json (the EM and F1 of the
// question's most frequent answer), -pass<G>.json (1 when some sample is right; F1 the best sample's)
// and -mean<G>.json (the samples' mean EM and F1), so that two checkpoints' maj@G or pass@G can be
// compared question by question and pooled over seeds (npm run compare -- --pairs).
import { existsSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { normalizeAnswer } from '../src/env/reward.ts';
import { type GroupScore, groupScores, groupSignal } from '../src/rl/group-signal.ts';
import { perQuestionFileText } from '../src/rl/paired-eval.ts';
import { episodeReward } from '../src/rl/trainer.ts';
import { benchArgs, benchTrainer } from './trainer-cli.ts';

const SAMPLING_SEED = 12345;
const { values, fail, positiveInt } = benchArgs(
  'bench:passk',
  'npm run bench:passk -- --config configs/<name>.json [--model DIR] [--n 25] [--samples 8] [--temperatures 0.5,1] [--splits test,train] [--json PREFIX]',
  {
    json: { type: 'string' },
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

// Checked before any sampling, so that a typo does not cost the run.
if (values.json !== undefined && !existsSync(dirname(values.json)))
  fail(`--json ${values.json}: the folder ${dirname(values.json)} does not exist`);

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
    const episodes = r.trajectories.map((t) => ({
      group: t.group,
      em: t.outcome?.em ?? 0,
      f1: t.outcome?.f1 ?? 0,
      reward: episodeReward(t, w),
      answer: t.prediction === null ? null : normalizeAnswer(t.prediction),
    }));
    const g = groupSignal(episodes);
    console.log(
      `${split} T=${temperature}: mean EM ${g.meanEm.toFixed(3)} · pass@${samples} ${g.passAtK.toFixed(3)} · ` +
        `maj@${samples} ${g.majAtK!.toFixed(3)} · ` +
        `EM-split groups ${g.emSplitGroups.toFixed(3)} · reward-split groups ${g.rewardSplitGroups.toFixed(3)} · ` +
        `reward std ${g.meanRewardStd.toFixed(3)} · format-valid ${r.formatValid.toFixed(3)} · ` +
        `${((performance.now() - t0) / 1000).toFixed(0)} s`,
    );
    if (values.json !== undefined) {
      const tasks = split === 'test' ? trainer.dataset.test.tasks : trainer.dataset.train.tasks;
      const typeOf = new Map(tasks.map((t) => [t.id, t.type ?? 'untyped']));
      const taskOf = new Map(r.trajectories.map((t) => [t.group, t.taskId]));
      const scores = groupScores(episodes);
      const views: [string, (s: GroupScore) => [number, number]][] = [
        [`maj${samples}`, (s) => [s.majEm ?? 0, s.majF1 ?? 0]],
        [`pass${samples}`, (s) => [s.pass, s.bestF1 ?? 0]],
        [`mean${samples}`, (s) => [s.meanEm, s.meanF1 ?? 0]],
      ];
      for (const [view, score] of views) {
        const file = `${values.json}-${split}-t${temperature}-${view}.json`;
        const questions = scores.map((s) => {
          const id = taskOf.get(s.group) ?? `group-${s.group}`;
          const [em, f1] = score(s);
          return { id, type: typeOf.get(id) ?? 'untyped', em, f1 };
        });
        const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
        const summary = {
          model: `${config.model.path} (${view} at T ${temperature})`,
          config: config.name,
          split,
          temperature,
          samples,
          seed: SAMPLING_SEED,
          n: questions.length,
          em: mean(questions.map((q) => q.em)),
          f1: mean(questions.map((q) => q.f1)),
        };
        writeFileSync(file, perQuestionFileText(summary, questions));
        console.log(`  wrote ${file}`);
      }
    }
  }
}
trainer.release();
gpu.destroy();
