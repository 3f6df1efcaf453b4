// npm run bench:rollout -- --config configs/<name>.json [--model DIR] [--questions 8] [--samples 8]
//                          [--reps 2] [--temperature 0.5]
// One training step's rollout (the config's rollout settings, the questions of steps 1, 2, … ×
// samples episodes, the trainer's own code) timed by phase: appends (prompt prefill and env text, GPU
// work synced before sampling starts) vs sampling (decode steps with their per-token readback) vs the
// CPU env. Each rep runs twice on the same questions and seed: with the group's prompt prefilled once
// and copied to its samples (copyRow, what the trainer does) and with every row prefilling its own,
// and prints the ratio, measured in one run on one adapter.
import { parseArgs } from 'node:util';
import { runRollouts, type TurnSampler } from '../src/rl/rollout.ts';
import { benchTrainer } from './trainer-cli.ts';

const USAGE =
  'usage: npm run bench:rollout -- --config configs/<name>.json [--model DIR] [--questions 8] [--samples 8] [--reps 2] [--temperature 0.5]';
function fail(message: string): never {
  console.error(`bench:rollout: ${message}\n${USAGE}`);
  process.exit(2);
}
let values: Record<string, string | undefined>;
try {
  values = parseArgs({
    options: {
      config: { type: 'string' },
      model: { type: 'string' },
      questions: { type: 'string' },
      samples: { type: 'string' },
      reps: { type: 'string' },
      temperature: { type: 'string' },
    },
    strict: true,
  }).values;
} catch (e) {
  fail((e as Error).message);
}
if (!values.config) fail('--config is required');
// Arguments are checked before the model loads; unset ones default to the config's.
const given = (name: string): number | undefined => {
  if (values[name] === undefined) return undefined;
  const v = Number(values[name]);
  if (!Number.isInteger(v) || v < 1) fail(`--${name} must be a positive integer, got ${values[name]}`);
  return v;
};
const questions = given('questions');
const samples = given('samples');
const reps = given('reps') ?? 2;
const temperatureArg = values.temperature === undefined ? undefined : Number(values.temperature);
if (temperatureArg !== undefined && !(temperatureArg >= 0))
  fail(`--temperature must be >= 0, got ${values.temperature}`);
const { config, gpu, trainer } = await benchTrainer(values.config, values.model, fail);
const Q = questions ?? config.rollout.questionsPerStep;
const G = samples ?? config.rollout.samplesPerQuestion;
const temperature = temperatureArg ?? config.rollout.temperature;
console.log(`model ${config.model.path}, ${Q} questions × ${G} samples, temperature ${temperature}`);

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
      tokenizer: trainer.tokenizer,
      tasks,
      samplesPerTask: G,
      toolsFor: trainer.rlTools,
      env: trainer.envOptions(),
      maxNewTokensPerTurn: config.rollout.maxNewTokensPerTurn,
      maxTotalTokens: config.rollout.maxTotalTokens,
      temperature,
      ...(temperature > 0 ? { topP: config.rollout.topP, topK: config.rollout.topK } : {}),
      seed: 1000 + rep,
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
