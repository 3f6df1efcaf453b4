// npm run evaluate -- --policy <oracle|naive-rag|model:DIR> --tasks <synthetic|hotpotqa:FILE|musique:FILE>
//                     [--limit N] [--corpus pooled|question] [--seed S] [--max-new-tokens N] [--json FILE]
// Plays a policy on a task set through the ToolEnv and prints EM, F1, substring EM, mean turns and tool
// calls, the format-error rate and the per-type breakdown. `model:DIR` is Base Tool Call with a Qwen
// checkpoint folder on the GPU (Dawn; see the README for adapters).
import { readFile, writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { loadCheckpoint } from '../src/agent/model/checkpoint.ts';
import { directorySource } from '../src/agent/model/node-fs.ts';
import { QwenGpuModel } from '../src/agent/model/qwen-gpu.ts';
import { modelGenerateTurn } from '../src/agent/policy/model-turn.ts';
import { QwenTokenizer } from '../src/agent/tokenizer/qwen-tokenizer.ts';
import { evaluate } from '../src/env/evaluate.ts';
import { createBaseToolCallPolicy } from '../src/env/policies/base-tool-call.ts';
import { createNaiveRagPolicy } from '../src/env/policies/naive-rag.ts';
import { createOraclePolicy } from '../src/env/policies/oracle.ts';
import type { Policy } from '../src/env/policies/policy.ts';
import { loadHotpotQa } from '../src/env/tasks/hotpotqa.ts';
import { loadMusiqueJsonl } from '../src/env/tasks/musique.ts';
import { type Passage, pooledCorpus, type QaTask } from '../src/env/tasks/schema.ts';
import { generateSyntheticDataset } from '../src/env/tasks/synthetic.ts';
import { perQuestionSearchTools, pooledSearchTools } from '../src/env/tools/search.ts';
import { Gpu } from '../src/gpu/runtime.ts';

const USAGE =
  'usage: npm run evaluate -- --policy <oracle|naive-rag|model:DIR> --tasks <synthetic|hotpotqa:FILE|musique:FILE> ' +
  '[--limit N] [--corpus pooled|question] [--seed S] [--max-new-tokens N] [--json FILE]';

function fail(message: string): never {
  console.error(`evaluate: ${message}\n${USAGE}`);
  process.exit(2);
}

const { values } = parseArgs({
  options: {
    policy: { type: 'string' },
    tasks: { type: 'string', default: 'synthetic' },
    limit: { type: 'string' },
    corpus: { type: 'string', default: 'pooled' },
    seed: { type: 'string', default: '1' },
    'max-new-tokens': { type: 'string', default: '256' },
    json: { type: 'string' },
  },
  strict: true,
});
if (!values.policy) fail('--policy is required');
const limit = values.limit === undefined ? Number.POSITIVE_INFINITY : Number(values.limit);
if (!(limit > 0)) fail(`--limit must be a positive number, got ${values.limit}`);
if (values.corpus !== 'pooled' && values.corpus !== 'question') fail(`--corpus must be pooled or question`);
const seed = Number(values.seed);

/** The tasks, and for the synthetic world its whole corpus (distractor entities included). */
async function loadTasks(spec: string): Promise<{ tasks: QaTask[]; corpus?: Passage[] }> {
  if (spec === 'synthetic') {
    const { test } = generateSyntheticDataset({ seed });
    return { tasks: test.tasks, corpus: test.corpus };
  }
  const [kind, file] = [spec.slice(0, spec.indexOf(':')), spec.slice(spec.indexOf(':') + 1)];
  if (!file || spec.indexOf(':') < 0)
    fail(`--tasks ${spec}: expected synthetic, hotpotqa:FILE or musique:FILE`);
  const text = await readFile(file, 'utf8').catch((e: Error) => fail(`cannot read ${file}: ${e.message}`));
  const result =
    kind === 'hotpotqa'
      ? loadHotpotQa(JSON.parse(text))
      : kind === 'musique'
        ? loadMusiqueJsonl(text)
        : fail(`unknown task set "${kind}"`);
  if (result.skipped > 0) console.log(`${file}: skipped ${result.skipped} bad record(s)`);
  return { tasks: result.tasks };
}

async function makePolicy(spec: string): Promise<{ policy: Policy; release(): void }> {
  if (spec === 'oracle') return { policy: createOraclePolicy(), release() {} };
  if (spec === 'naive-rag') return { policy: createNaiveRagPolicy(), release() {} };
  if (!spec.startsWith('model:')) fail(`unknown policy "${spec}"`);
  const dir = spec.slice('model:'.length);
  const gpu = await Gpu.create();
  console.log(`adapter: ${gpu.report.kind} — ${gpu.report.description || gpu.report.device}`);
  const ckpt = await loadCheckpoint(directorySource(dir), {
    requireTokenizer: true,
    adapterLimits: gpu.report.limits as never,
  });
  const model = new QwenGpuModel(gpu, ckpt.config, ckpt.tensors);
  const tokenizer = QwenTokenizer.fromFiles(ckpt.tokenizerFiles);
  const generate = modelGenerateTurn(model, tokenizer, {
    maxNewTokens: Number(values['max-new-tokens']),
    temperature: ckpt.generationConfig?.doSample === false ? 0 : (ckpt.generationConfig?.temperature ?? 0.7),
    topP: ckpt.generationConfig?.topP ?? 1,
    topK: ckpt.generationConfig?.topK ?? 0,
    seed,
  });
  return {
    policy: createBaseToolCallPolicy(generate, `base-tool-call(${dir})`),
    release() {
      model.release();
      gpu.destroy();
    },
  };
}

if (values.policy === 'oracle' && values.tasks !== 'synthetic') {
  fail('the oracle solves only the synthetic world (it scripts searches from the question templates)');
}
const loaded = await loadTasks(values.tasks!);
const tasks = loaded.tasks.slice(0, limit);
if (tasks.length === 0) fail('no tasks to evaluate');
const { policy, release } = await makePolicy(values.policy!);
const tools =
  values.corpus === 'pooled'
    ? pooledSearchTools(loaded.corpus ?? pooledCorpus(tasks))
    : perQuestionSearchTools();
const t0 = performance.now();
const report = await evaluate(policy, tasks, {
  tools,
  onEpisode: (e, i) => {
    if (tasks.length <= 20 || (i + 1) % 10 === 0) {
      process.stdout.write(
        `  ${i + 1}/${tasks.length} em=${e.em} turns=${e.turns} calls=${e.toolCalls} (${e.doneReason})\n`,
      );
    }
  },
});
release();
const pct = (x: number) => x.toFixed(3);
console.log(
  `\n${report.policy} on ${values.tasks} (${report.n} questions, ${values.corpus} corpus), ${((performance.now() - t0) / 1000).toFixed(1)} s`,
);
console.log('| EM | F1 | substring EM | mean turns | mean tool calls | format-error rate | mean outcome |');
console.log('|---|---|---|---|---|---|---|');
console.log(
  `| ${pct(report.em)} | ${pct(report.f1)} | ${pct(report.subEm)} | ${report.meanTurns.toFixed(2)} | ${report.meanToolCalls.toFixed(2)} | ${pct(report.formatErrorRate)} | ${pct(report.meanOutcome)} |`,
);
for (const [type, m] of Object.entries(report.byType))
  console.log(`  ${type}: EM ${pct(m.em)} F1 ${pct(m.f1)} (n=${m.n})`);
if (values.json) {
  await writeFile(
    values.json,
    JSON.stringify({ ...report, episodes: report.episodes.map(({ tools: _t, ...e }) => e) }, null, 2),
  );
  console.log(`wrote ${values.json}`);
}
