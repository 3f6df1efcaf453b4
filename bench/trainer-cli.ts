// What the benchmarks that run the trainer's own code (pass-at-k.ts, rollout.ts) share: a config file
// (validated, errors naming the bad key), an optional --model override, the checkpoint, the adapter.
import { readFile } from 'node:fs/promises';
import { loadCheckpoint } from '../src/agent/model/checkpoint.ts';
import { directorySource } from '../src/agent/model/node-fs.ts';
import { Gpu } from '../src/gpu/runtime.ts';
import { ConfigError, parseConfigText, type TrainConfig } from '../src/rl/config.ts';
import { Trainer } from '../src/rl/trainer.ts';

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
