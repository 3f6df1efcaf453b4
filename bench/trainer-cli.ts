// What the benchmarks that run the trainer's own code (pass-at-k.ts, rollout.ts, packing.ts) share:
// their command line (--config, --model and their own options), a config file (validated, errors
// naming the bad key), the checkpoint, the adapter.
import { readFile } from 'node:fs/promises';
import { type ParseArgsOptionsConfig, parseArgs } from 'node:util';
import { loadCheckpoint } from '../src/agent/model/checkpoint.ts';
import { directorySource } from '../src/agent/model/node-fs.ts';
import type { QaTask } from '../src/env/tasks/schema.ts';
import { Gpu } from '../src/gpu/runtime.ts';
import { ConfigError, parseConfigText, type TrainConfig } from '../src/rl/config.ts';
import { Trainer } from '../src/rl/trainer.ts';

/**
 * Parses a benchmark's command line: --config (required), --model and `options`, strictly. `fail`
 * prints a message with the usage line and exits 2; `positiveInt` reads an optional positive integer.
 */
export function benchArgs(
  name: string,
  usage: string,
  options: ParseArgsOptionsConfig,
): {
  values: Record<string, string | undefined> & { config: string };
  fail: (message: string) => never;
  positiveInt: (key: string) => number | undefined;
} {
  const fail = (message: string): never => {
    console.error(`${name}: ${message}\nusage: ${usage}`);
    process.exit(2);
  };
  let values: Record<string, string | undefined> = {};
  try {
    values = parseArgs({
      options: { config: { type: 'string' }, model: { type: 'string' }, ...options },
      strict: true,
    }).values as Record<string, string | undefined>;
  } catch (e) {
    fail((e as Error).message);
  }
  if (!values.config) fail('--config is required');
  const positiveInt = (key: string): number | undefined => {
    if (values[key] === undefined) return undefined;
    const v = Number(values[key]);
    if (!Number.isInteger(v) || v < 1) fail(`--${key} must be a positive integer, got ${values[key]}`);
    return v;
  };
  return { values: values as Record<string, string | undefined> & { config: string }, fail, positiveInt };
}

/** Loads the config and model, prints the adapter, and starts a Trainer; `fail` exits with a line. */
export async function benchTrainer(
  configPath: string,
  model: string | undefined,
  fail: (message: string) => never,
): Promise<{ config: TrainConfig; gpu: Gpu; trainer: Trainer }> {
  let config: TrainConfig;
  try {
    config = parseConfigText(await readFile(configPath, 'utf8'), configPath);
  } catch (e) {
    if (e instanceof ConfigError) fail(e.message);
    fail(`cannot read ${configPath}: ${(e as Error).message}`);
  }
  if (model) config.model.path = model;
  const initial = await loadCheckpoint(directorySource(config.model.path), { requireTokenizer: true }).catch(
    (e: Error) => fail(`cannot load the model at ${config.model.path}: ${e.message}`),
  );
  const gpu = await Gpu.create();
  console.log(`adapter: ${gpu.report.kind} — ${gpu.report.description || gpu.report.device}`);
  return { config, gpu, trainer: await Trainer.create(gpu, config, initial) };
}

/**
 * A benchmark that plays one step's rollout (rollout.ts, packing.ts): parses --config, --model,
 * --questions, --samples, --reps (default 2) and --temperature (unset ones default to the config's;
 * `greedy` allows 0, else a greedy config samples at 1) and the bench's `extra` options (returned in
 * `values`), then loads the config, model and adapter.
 */
export async function rolloutBench(
  name: string,
  greedy: boolean,
  extra: {
    usage: string;
    options: ParseArgsOptionsConfig;
    /** Checks the extra options (before the model loads); calls fail for a bad one. */
    check?: (values: Record<string, string | undefined>, fail: (message: string) => never) => void;
  } = { usage: '', options: {} },
) {
  const { values, fail, positiveInt } = benchArgs(
    name,
    `npm run ${name} -- --config configs/<name>.json [--model DIR] [--questions 8] [--samples 8] [--reps 2] [--temperature 0.5]${extra.usage}`,
    {
      questions: { type: 'string' },
      samples: { type: 'string' },
      reps: { type: 'string' },
      temperature: { type: 'string' },
      ...extra.options,
    },
  );
  // Arguments are checked before the model loads.
  extra.check?.(values, fail);
  const questions = positiveInt('questions');
  const samples = positiveInt('samples');
  const reps = positiveInt('reps') ?? 2;
  const temperatureArg = values.temperature === undefined ? undefined : Number(values.temperature);
  if (temperatureArg !== undefined && !(greedy ? temperatureArg >= 0 : temperatureArg > 0))
    fail(`--temperature must be ${greedy ? '>= 0' : '> 0'}, got ${values.temperature}`);
  const { config, gpu, trainer } = await benchTrainer(values.config, values.model, fail);
  const Q = questions ?? config.rollout.questionsPerStep;
  const G = samples ?? config.rollout.samplesPerQuestion;
  const fromConfig = config.rollout.temperature;
  const temperature = temperatureArg ?? (greedy || fromConfig > 0 ? fromConfig : 1);
  console.log(`model ${config.model.path}, ${Q} questions × ${G} samples, temperature ${temperature}`);
  /** runRollouts' options but the policy (model or sampler): these tasks × G, the config's budgets. */
  const rolloutOptions = (tasks: QaTask[], seed: number) => ({
    tokenizer: trainer.tokenizer,
    tasks,
    samplesPerTask: G,
    toolsFor: trainer.rlTools,
    env: trainer.envOptions(),
    maxNewTokensPerTurn: config.rollout.maxNewTokensPerTurn,
    maxTotalTokens: config.rollout.maxTotalTokens,
    temperature,
    ...(temperature > 0 ? { topP: config.rollout.topP, topK: config.rollout.topK } : {}),
    seed,
  });
  return { config, gpu, trainer, Q, G, reps, temperature, rolloutOptions, values };
}
