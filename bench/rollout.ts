// npm run bench:rollout -- --config configs/<name>.json [--model DIR] [--questions 8] [--samples 8]
//                          [--reps 2] [--temperature 0.5]
// One training step's rollout (the config's rollout settings, the questions of steps 1, 2, … ×
// samples episodes, the trainer's own code) timed by phase: appends (prompt prefill and env text, GPU
// work synced before sampling starts) vs sampling (decode steps with their per-token readback) vs the
// CPU env. Each rep runs twice on the same questions and seed: with the group's prompt prefilled once
// and copied to its samples (copyRow, what the trainer does) and with every row prefilling its own,
// and prints the ratio, measured in one run on one adapter.
import { runRollouts, type TurnSampler } from '../src/rl/rollout.ts';
import { rolloutBench } from './trainer-cli.ts';

const { gpu, trainer, Q, reps, rolloutOptions } = await rolloutBench('bench:rollout', true);

/** The policy's session, timing appends (synced) and turns; `share` false hides copyRow. */
function timedSampler(share: boolean, times: { append: number; sample: number; tokens: number }) {
  return (rows: number, maxLen: number): TurnSampler => {
    const session = trainer.policy.startSession(rows, maxLen);
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
for (let rep = 0; rep < reps; rep++) {
  const tasks = trainer.questionsFor(rep + 1, Q); // step rep + 1's questions
  const wall: Record<string, number> = {};
  for (const share of [true, false]) {
    const times = { append: 0, sample: 0, tokens: 0 };
    const t0 = performance.now();
    const r = await runRollouts({
      sampler: timedSampler(share, times),
      ...rolloutOptions(tasks, 1000 + rep),
    });
    const s = r.stats;
    const w = (performance.now() - t0) / 1000;
    wall[String(share)] = w;
    rows.push(
      `| ${rep} | ${share ? 'shared' : 'per row'} | ${w.toFixed(1)} | ${times.append.toFixed(1)} | ${times.sample.toFixed(1)} | ${s.envSeconds.toFixed(1)} | ${times.tokens} | ${s.promptTokens} / ${s.policyTokens} / ${s.envTokens} | ${(s.policyTokens / w).toFixed(0)} |`,
    );
  }
  rows.push(`| ${rep} | per row ÷ shared | ${(wall.false / wall.true).toFixed(2)}× | | | | | | |`);
}
console.log(
  '\n| rep | prompt prefill | rollout s | appends s | sampling s | env s | ids appended | prompt / policy / env ids | policy tok/s |',
);
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
trainer.release();
