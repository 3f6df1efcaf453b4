// npm run bench:rollout -- --config configs/<name>.json [--model DIR] [--questions 8] [--samples 8]
//                          [--reps 2] [--temperature 0.5] [--readback-steps 1,8]
// One training step's rollout (the config's rollout settings, the questions of steps 1, 2, … ×
// samples episodes, the trainer's own code) timed by phase: appends (prompt prefill and env text, GPU
// work synced before sampling starts) vs sampling (decode steps and their readbacks) vs the CPU env.
// Each rep runs on the same questions and seed: with the group's prompt prefilled once and copied to
// its samples (copyRow, what the trainer does) and with every row prefilling its own; then, for each
// further --readback-steps value, shared again with that many decode steps between readbacks (the
// first value, default the adapter's, applies to the first two). It prints the ratios, measured in
// one run on one adapter, after an untimed warm-up rollout (pipeline compiles); the episodes are the
// same in every variant.
import { defaultStepsPerReadback } from '../src/agent/model/qwen-gpu.ts';
import { runRollouts, type TurnSampler } from '../src/rl/rollout.ts';
import { rolloutBench } from './trainer-cli.ts';

const stepsList = (text: string) => text.split(',').map(Number);
const { gpu, trainer, Q, reps, rolloutOptions, values } = await rolloutBench('bench:rollout', true, {
  usage: ' [--readback-steps 1,8]',
  options: { 'readback-steps': { type: 'string' } },
  check: (v, fail) => {
    const text = v['readback-steps'];
    if (text !== undefined && stepsList(text).some((n) => !Number.isInteger(n) || n < 1))
      fail(`--readback-steps takes positive integers, got ${text}`);
  },
});
const readbackSteps = stepsList(values['readback-steps'] ?? String(defaultStepsPerReadback(gpu)));

/** The policy's session, timing appends (synced) and turns; `share` false hides copyRow. */
function timedSampler(
  share: boolean,
  stepsPerReadback: number,
  times: { append: number; sample: number; tokens: number },
) {
  return (rows: number, maxLen: number): TurnSampler => {
    const session = trainer.policy.startSession(rows, maxLen);
    session.stepsPerReadback = stepsPerReadback;
    let unsynced = false;
    const sync = async () => {
      if (!unsynced) return;
      const t0 = performance.now();
      await gpu.sync();
      times.append += (performance.now() - t0) / 1000;
      unsynced = false;
    };
    return {
      batch: session.batch,
      maxLen: session.maxLen,
      append(tokens) {
        const t0 = performance.now();
        session.append(tokens);
        times.append += (performance.now() - t0) / 1000;
        for (const t of tokens) times.tokens += t.length;
        unsynced = true;
      },
      ...(share && {
        copyRow(from: number, to: readonly number[]) {
          session.copyRow(from, to);
          unsynced = true;
        },
      }),
      async sample(options) {
        await sync();
        const t0 = performance.now();
        const r = await session.sample(options);
        times.sample += (performance.now() - t0) / 1000;
        return r;
      },
      release: () => session.release(),
    };
  };
}

const rows: string[] = [];
const [first, ...more] = readbackSteps;
const variants = [
  { share: true, steps: first },
  { share: false, steps: first },
  ...more.map((steps) => ({ share: true, steps })),
];
// An untimed rollout first: the first one of a process compiles the pipelines, which would count
// against whichever variant ran first.
await runRollouts({
  sampler: timedSampler(true, first, { append: 0, sample: 0, tokens: 0 }),
  ...rolloutOptions(trainer.questionsFor(1, Q), 1000),
});
for (let rep = 0; rep < reps; rep++) {
  const tasks = trainer.questionsFor(rep + 1, Q); // step rep + 1's questions
  const wall: number[] = [];
  for (const { share, steps } of variants) {
    const times = { append: 0, sample: 0, tokens: 0 };
    const readbacks = gpu.stats.readbacks;
    const t0 = performance.now();
    const r = await runRollouts({
      sampler: timedSampler(share, steps, times),
      ...rolloutOptions(tasks, 1000 + rep),
    });
    const s = r.stats;
    const w = (performance.now() - t0) / 1000;
    wall.push(w);
    rows.push(
      `| ${rep} | ${share ? 'shared' : 'per row'} | ${steps} | ${w.toFixed(1)} | ${times.append.toFixed(1)} | ${times.sample.toFixed(1)} | ${s.envSeconds.toFixed(1)} | ${gpu.stats.readbacks - readbacks} | ${times.tokens} | ${s.promptTokens} / ${s.policyTokens} / ${s.envTokens} | ${(s.policyTokens / w).toFixed(0)} |`,
    );
  }
  rows.push(`| ${rep} | per row ÷ shared | | ${(wall[1] / wall[0]).toFixed(2)}× | | | | | | | |`);
  for (const [i, steps] of more.entries()) {
    rows.push(
      `| ${rep} | ${first} ÷ ${steps} steps per readback | | ${(wall[0] / wall[2 + i]).toFixed(2)}× | | | | | | | |`,
    );
  }
}
console.log(
  '\n| rep | prompt prefill | steps per readback | rollout s | appends s | sampling s | env s | readbacks | ids appended | prompt / policy / env ids | policy tok/s |',
);
console.log('|---|---|---|---|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
trainer.release();
