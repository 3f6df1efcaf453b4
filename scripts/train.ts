// npm run train -- --config configs/<name>.json [--out runs/<name>] [--resume] [--force]
//                  [--steps N] [--minutes M] [--memory-budget MIB] [--save-arrays] [--model DIR] [--export DIR] [--quiet]
// Trains in Node on Dawn (src/rl/trainer.ts through src/rl/run.ts, the code the browser lab runs).
//   --out      the run folder (default runs/<config name>): config.json, metrics.jsonl, samples/,
//              checkpoints/step-XXXXXX/ (HF layout + optimizer + trainer state)
//   --resume   continue from the run folder's last checkpoint (weights, optimizer, step; every random
//              draw derives from the seed and the step, so the metrics repeat an uninterrupted run)
//   --force    start over in a folder that already holds a run
//   --steps / --minutes / --memory-budget override train.steps / train.maxMinutes / train.memoryBudgetMiB
//              (a run's share of a GPU that other runs use too: the planner splits the update to fit it)
//   --save-arrays  sets train.saveArrays: each RL step's per-token arrays in arrays/ (npm run probe:adv-mask
//              reads them); it changes no number the run computes, so a config need not be copied for it
//   --model    start from this checkpoint folder instead of the config's model.path
//   --export   also write the final policy as an HF checkpoint folder (e.g. public/models/qwen-tiny)
//   --evaluate-only [--model DIR] [--json FILE] [--split test|train] [--questions N]
//              no training: play the config's held-out questions (greedy, train.evalSize of them, or
//              the first N: a larger N adds questions after the same first ones, same world) with
//              the config's model or DIR (any checkpoint: the untrained init is Base Tool Call) and
//              print EM / F1; the same episodes and settings as a run's eval lines. --split train plays
//              the first questions of the training world instead (what RL trained on: a gap between
//              the two splits measures what the policy memorised of its training world). Prints EM
//              per question type and the most frequent answer's share too; --json also lists each
//              question's id, type, EM, F1 and answer (npm run compare reads two such files).
// Ctrl-C (SIGINT) or SIGTERM during training stops the run after the step in flight: it evaluates and
// saves a checkpoint as at the end of a run (so --resume continues from there, losing nothing), then
// exits 130. A second Ctrl-C quits at once, losing the step in flight and anything not checkpointed.
// Exit codes: 0 done, 2 bad command line or config (one line naming the problem), 1 a failure,
// 130 stopped by a signal (after the checkpoint, or at once on the second).
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadCheckpoint } from '../src/agent/model/checkpoint.ts';
import { directorySource } from '../src/agent/model/node-fs.ts';
import { Gpu } from '../src/gpu/runtime.ts';
import { ConfigError, parseConfigText } from '../src/rl/config.ts';
import { type AnswerSource, classifyAnswerSource, classifyVainSearch } from '../src/rl/evidence.ts';
import { describeMicroBatch } from '../src/rl/memory.ts';
import { directoryStorage } from '../src/rl/node-storage.ts';
import { perQuestionFileText } from '../src/rl/paired-eval.ts';
import { METRICS_FILE, runFailureMessage, runTraining } from '../src/rl/run.ts';
import type { StepMetrics } from '../src/rl/trainer.ts';
import { Trainer } from '../src/rl/trainer.ts';

const USAGE =
  'usage: npm run train -- --config configs/<name>.json [--out runs/<name>] [--resume] [--force] [--steps N] [--minutes M] [--memory-budget MIB] [--save-arrays] [--model DIR] [--export DIR] [--quiet]\n' +
  '       npm run train -- --config configs/<name>.json --evaluate-only [--model DIR] [--json FILE] [--split test|train] [--questions N]';

function fail(message: string): never {
  console.error(`train: ${message}`);
  process.exit(2);
}

let args: ReturnType<typeof parse>;
function parse() {
  return parseArgs({
    options: {
      config: { type: 'string' },
      out: { type: 'string' },
      resume: { type: 'boolean', default: false },
      force: { type: 'boolean', default: false },
      steps: { type: 'string' },
      minutes: { type: 'string' },
      'memory-budget': { type: 'string' },
      'save-arrays': { type: 'boolean', default: false },
      export: { type: 'string' },
      quiet: { type: 'boolean', default: false },
      'evaluate-only': { type: 'boolean', default: false },
      model: { type: 'string' },
      json: { type: 'string' },
      split: { type: 'string' },
      questions: { type: 'string' },
    },
    strict: true,
  });
}
try {
  args = parse();
} catch (e) {
  fail(`${(e as Error).message}\n${USAGE}`);
}
const { values } = args;
if (!values.config) fail(`--config is required\n${USAGE}`);
if (values.resume && values.force) fail('--resume and --force contradict each other');

let text: string;
try {
  text = await readFile(values.config, 'utf8');
} catch (e) {
  fail(`cannot read ${values.config}: ${(e as Error).message}`);
}
let config: ReturnType<typeof parseConfigText>;
try {
  config = parseConfigText(text, values.config);
  if (values.steps !== undefined) {
    const n = Number(values.steps);
    if (!Number.isInteger(n) || n < 0) fail(`--steps must be a non-negative integer, got ${values.steps}`);
    config.train.steps = n;
  }
  if (values.minutes !== undefined) {
    const m = Number(values.minutes);
    if (!(m >= 0)) fail(`--minutes must be a number >= 0, got ${values.minutes}`);
    config.train.maxMinutes = m;
  }
  const budget = values['memory-budget'];
  if (budget !== undefined) {
    const mib = Number(budget);
    if (!(mib >= 0)) fail(`--memory-budget must be a number of MiB >= 0, got ${budget}`);
    config.train.memoryBudgetMiB = mib;
  }
} catch (e) {
  if (e instanceof ConfigError) fail(e.message);
  throw e;
}

if (values['save-arrays']) {
  if (values['evaluate-only']) fail('--save-arrays goes with training, not --evaluate-only');
  config.train.saveArrays = true;
}
if (values.model) config.model.path = values.model;
const split = values.split ?? 'test';
if (split !== 'test' && split !== 'train') fail(`--split must be test or train, got ${values.split}`);
if (values.split !== undefined && !values['evaluate-only']) fail('--split goes with --evaluate-only');
if (values.questions !== undefined) {
  if (!values['evaluate-only']) fail('--questions goes with --evaluate-only');
  const n = Number(values.questions);
  if (!Number.isInteger(n) || n < 1) fail(`--questions must be a positive integer, got ${values.questions}`);
  if (split === 'train' && n > config.task.trainSize)
    fail(`--questions ${n} is more than the training world's task.trainSize ${config.task.trainSize}`);
  // More held-out questions: the test world is fixed by task.seed and its questions are drawn in order,
  // so a larger testSize keeps the first ones.
  if (split === 'test') config.task.testSize = Math.max(config.task.testSize, n);
  config.train.evalSize = n;
}
if (values['evaluate-only']) {
  const initial = await loadCheckpoint(directorySource(config.model.path), { requireTokenizer: true }).catch(
    (e: Error) => fail(`cannot load the model at ${config.model.path}: ${e.message}`),
  );
  const gpu = await Gpu.create();
  const trainer = await Trainer.create(gpu, config, initial);
  const t0 = performance.now();
  const r = await trainer.evaluate(config.train.evalSize, split);
  const seconds = (performance.now() - t0) / 1000;
  const splitName = split === 'test' ? 'held-out split' : 'training world';
  console.log(
    `${config.model.path} on ${config.name}'s ${splitName} (${r.n} questions, greedy): EM ${r.em.toFixed(3)} F1 ${r.f1.toFixed(3)} ` +
      `format-valid ${r.formatValid.toFixed(3)} turns ${r.turns.toFixed(2)} tool calls ${r.toolCalls.toFixed(2)} (${seconds.toFixed(0)} s)`,
  );
  const types = Object.entries(r.byType).map(([type, s]) => `${type} ${s.em.toFixed(3)} (${s.n})`);
  console.log(
    `  EM by question type: ${types.join(' · ')}; most frequent answer ${JSON.stringify(r.modalAnswer.answer)} (${(100 * r.modalAnswer.share).toFixed(0)} % of episodes)`,
  );
  const o = r.byOutcome;
  const share = (x: number) => `${(100 * x).toFixed(1)} %`;
  console.log(
    `  outcomes: right ${share(o.right)} · no answer ${share(o.no_answer)} · wrong with none / some then stopped / some then searched in vain / all ` +
      `of the supporting passages found ${share(o.wrong_no_evidence)} / ${share(o.wrong_stopped_short)} / ${share(o.wrong_missed_hop)} / ${share(o.wrong_all_evidence)}` +
      `${o.wrong_unknown > 0 ? ` · wrong, no supporting passages named ${share(o.wrong_unknown)}` : ''}; supporting passages found ${share(r.supportingRecall)}`,
  );
  const sources = r.trajectories.map((t) => classifyAnswerSource(t));
  const sourceShare = (k: AnswerSource) =>
    share(sources.filter((x) => x === k).length / Math.max(1, sources.length));
  console.log(
    `  answers: yes/no ${sourceShare('yes_no')} · from the question ${sourceShare('from_question')} · from the results read ${sourceShare('from_results')} · in nothing read ${sourceShare('nowhere')}`,
  );
  if (values.json) {
    const { trajectories, evidence, ...summary } = r;
    // Each question's outcome, in the order played, so that two checkpoints' files can be compared
    // question by question (npm run compare), with what its searches found (npm run compare -- --evidence).
    const tasks = split === 'test' ? trainer.dataset.test.tasks : trainer.dataset.train.tasks;
    const typeOf = new Map(tasks.map((t) => [t.id, t.type ?? 'untyped']));
    // A passage's title names its entity: a fruitless search is read against the split's titles.
    const corpus = split === 'test' ? trainer.dataset.test.corpus : trainer.dataset.train.corpus;
    const titleOf = new Map(corpus.map((p) => [p.id, p.title]));
    const allTitles = [...titleOf.values()];
    const supportOf = new Map(tasks.map((t) => [t.id, t.supportingIds]));
    const questions = trajectories.map((t, i) => {
      const { missingIds, lastVainQuery, ...counts } = evidence[i];
      const missingTitles = missingIds.map((id) => titleOf.get(id) ?? id);
      const foundTitles = (supportOf.get(t.taskId) ?? [])
        .filter((id) => !missingIds.includes(id))
        .map((id) => titleOf.get(id) ?? id);
      return {
        id: t.taskId,
        type: typeOf.get(t.taskId) ?? 'untyped',
        em: t.outcome?.em ?? 0,
        f1: t.outcome?.f1 ?? 0,
        prediction: t.prediction,
        answerSource: sources[i],
        ...counts,
        missingTitles,
        ...(lastVainQuery !== undefined
          ? {
              lastVainQuery,
              vainSearch: classifyVainSearch(lastVainQuery, {
                missing: missingTitles,
                found: foundTitles,
                all: allTitles,
              }),
            }
          : {}),
        turns: t.turns,
        toolCalls: t.toolCalls,
        doneReason: t.doneReason,
      };
    });
    await writeFile(
      values.json,
      perQuestionFileText(
        { model: config.model.path, config: config.name, split, ...summary, seconds },
        questions,
      ),
    );
  }
  trainer.release();
  gpu.destroy();
  process.exit(0);
}

const outDir = values.out ?? join('runs', config.name);
const storage = directoryStorage(outDir);
const existing = await storage.read(METRICS_FILE);
if (existing !== null && !values.resume) {
  if (!values.force)
    fail(`${outDir} already holds a run: pass --resume to continue it or --force to start over`);
  await storage.remove('checkpoints');
  await storage.remove('samples');
  await storage.remove(METRICS_FILE);
}

const initial = await loadCheckpoint(directorySource(config.model.path), { requireTokenizer: true }).catch(
  (e: Error) => fail(`cannot load the model at ${config.model.path}: ${e.message}`),
);
const gpu = await Gpu.create();
const started = performance.now();
const trainer = await Trainer.create(gpu, config, initial, { storage, resume: values.resume });
if (values.resume) console.log(`train: resuming ${outDir} from step ${trainer.step}`);
console.log(
  `train: ${config.name}: ${config.algorithm.name} on ${config.task.kind}/${config.task.preset}, model ${config.model.path}, ` +
    `${config.train.steps} steps, ${describeMicroBatch(trainer.microBatch)} → ${outDir} [${gpu.report.kind}: ${gpu.report.description || gpu.report.device}]`,
);

const isTty = process.stdout.isTTY === true;
let phase = '';
let lastReward = '';
let lastEval = '';
const stepTimes: number[] = [];
function status(): string {
  const done = trainer.step;
  const total = config.train.steps;
  const avg = stepTimes.length ? stepTimes.reduce((a, b) => a + b, 0) / stepTimes.length : 0;
  const left = avg > 0 ? ` · ~${Math.ceil((avg * (total - done)) / 60)} min left` : '';
  const elapsed = ((performance.now() - started) / 60000).toFixed(1);
  return `[${done}/${total}] ${phase}${lastReward}${lastEval} · ${elapsed} min${left}`;
}
function show(line = status()) {
  if (values.quiet) return;
  if (isTty) process.stdout.write(`\r\x1b[2K${line}`);
}

// A step cannot stop halfway (the optimizer's update and the RNG's position must match a checkpoint),
// so the first signal only asks runTraining to stop before the next step.
let stopSignal: NodeJS.Signals | null = null;
const onSignal = (signal: NodeJS.Signals) => {
  if (stopSignal !== null) {
    // Exits without releasing the GPU or saving: the user asked twice; the process's end frees both.
    console.error(`\ntrain: ${signal} again: quitting now; the last checkpoint is the one to --resume from`);
    process.exit(130);
  }
  stopSignal = signal;
  console.error(
    `\ntrain: ${signal}: stopping when the step in flight ends (an evaluation and a checkpoint follow); send it again (Ctrl-C) to quit at once`,
  );
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);

try {
  await runTraining(trainer, storage, {
    shouldStop: () => stopSignal !== null,
    onPhase(p) {
      phase = p;
      show();
    },
    onMetrics(m: StepMetrics) {
      if (typeof m['time/step_s'] === 'number') stepTimes.push(m['time/step_s']);
      if (typeof m['reward/mean'] === 'number')
        lastReward = ` · reward ${(m['reward/mean'] as number).toFixed(3)}`;
      if (typeof m['sft/loss'] === 'number') lastReward = ` · loss ${(m['sft/loss'] as number).toFixed(3)}`;
      if (typeof m['eval/em'] === 'number') lastEval = ` · eval EM ${(m['eval/em'] as number).toFixed(3)}`;
      if (!values.quiet) {
        if (isTty) process.stdout.write('\r\x1b[2K');
        console.log(status());
      }
    },
    onMessage(t) {
      console.log(`\ntrain: ${t}`);
    },
  });
} catch (e) {
  if (isTty) process.stdout.write('\n');
  const last = (await trainer.checkpointSteps().catch(() => [] as number[])).at(-1);
  console.error(`train: ${runFailureMessage(e, trainer.step, last)}`);
  process.exit(1);
}
if (isTty) process.stdout.write('\n');

if (values.export) {
  await mkdir(values.export, { recursive: true });
  for (const [name, bytes] of await trainer.policyFiles()) await writeFile(join(values.export, name), bytes);
  console.log(`train: wrote the policy to ${values.export}`);
}
console.log(
  `train: ${stopSignal ? `stopped (${stopSignal})` : 'done'} at step ${trainer.step} in ${((performance.now() - started) / 60000).toFixed(1)} min; metrics in ${join(outDir, METRICS_FILE)}`,
);
trainer.release();
gpu.destroy();
if (stopSignal) process.exit(130);
