// npm run evaluate -- --policy <oracle|naive-rag|naive-rag:model:DIR|model:DIR>
//                     --tasks <synthetic|hotpotqa:FILE|2wiki:FILE|musique:FILE> [--split train|test] [--limit N]
//                     [--corpus pooled|question] [--preset default|compact] [--temperature T]
//                     [--max-new-tokens N] [--seed S] [--hops 2,3,4] [--json FILE [--episodes]] [--strict]
// Plays a policy on a task set through the ToolEnv and prints EM, F1, substring EM, mean turns and tool
// calls, the format-error rate and the per-type breakdown.
//   model:DIR            Base Tool Call: a Qwen checkpoint folder on the GPU, the search tool offered
//   naive-rag:model:DIR  Naive RAG: one search with the question, the model answers from the passages
//   naive-rag            Naive RAG with the scripted reader (synthetic only: an upper bound for a reader)
//   oracle               the scripted multi-hop searcher (synthetic only)
// The scripted policies follow the synthetic question templates; on real data they are refused (exit 2)
// rather than reported as EM 0. Models decode greedily unless --temperature > 0.
// Task files: a file that cannot be read as its task set (not UTF-8, not JSON, JSON lines given as
// hotpotqa, truncated, …) is one line `evaluate: file:line:column: expected …, found … (hint)`, exit 2.
// Bad records are repaired when one reading is possible, else skipped; each is printed with its line,
// and the run ends with a summary by reason. --strict stops at the first bad record (exit 2).
import { readFile, writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { loadCheckpoint } from '../src/agent/model/checkpoint.ts';
import { directorySource } from '../src/agent/model/node-fs.ts';
import { QwenGpuModel } from '../src/agent/model/qwen-gpu.ts';
import { modelPassageReader } from '../src/agent/policy/model-naive-rag.ts';
import { modelGenerateTurn } from '../src/agent/policy/model-turn.ts';
import { QwenTokenizer } from '../src/agent/tokenizer/qwen-tokenizer.ts';
import { evaluate } from '../src/env/evaluate.ts';
import { createBaseToolCallPolicy, type GenerateTurn } from '../src/env/policies/base-tool-call.ts';
import { createNaiveRagPolicy, SCRIPTED_NAIVE_RAG_NAME } from '../src/env/policies/naive-rag.ts';
import { createOraclePolicy } from '../src/env/policies/oracle.ts';
import type { Policy } from '../src/env/policies/policy.ts';
import { TASK_PRESETS, type TaskPresetName } from '../src/env/presets.ts';
import {
  type LoadResult,
  type Passage,
  pooledCorpus,
  type QaTask,
  TaskRecordError,
} from '../src/env/tasks/schema.ts';
import { generateSyntheticDataset } from '../src/env/tasks/synthetic.ts';
import {
  describeLoadProblem,
  readTaskFile,
  summarizeLoad,
  TASK_FILE_KINDS,
  TaskFileError,
  type TaskFileKind,
} from '../src/env/tasks/task-file.ts';
import { corpusSearchTools } from '../src/env/tools/search.ts';
import { Gpu } from '../src/gpu/runtime.ts';
import { keepWorkingWhenStdoutCloses } from './closed-stdout.ts';

keepWorkingWhenStdoutCloses();

const USAGE =
  'usage: npm run evaluate -- --policy <oracle|naive-rag|naive-rag:model:DIR|model:DIR> ' +
  '--tasks <synthetic|hotpotqa:FILE|2wiki:FILE|musique:FILE> [--split train|test] [--limit N] ' +
  '[--corpus pooled|question] [--preset default|compact] [--temperature T] [--max-new-tokens N] [--seed S] [--hops 2,3,4] ' +
  '[--json FILE [--episodes]] [--strict]';

/** A bad command line: the problem, then the usage. */
function fail(message: string): never {
  console.error(`evaluate: ${message}\n${USAGE}`);
  process.exit(2);
}

/** Bad data (the command line is fine): one line, no usage. */
function failData(message: string): never {
  console.error(`evaluate: ${message}`);
  process.exit(2);
}

/** Problems printed one per line before the run; the rest only counted in the summary. */
const MAX_PROBLEM_LINES = 20;

function parseCommandLine() {
  try {
    return parseArgs({
      options: {
        policy: { type: 'string' },
        tasks: { type: 'string', default: 'synthetic' },
        split: { type: 'string' },
        limit: { type: 'string' },
        corpus: { type: 'string', default: 'pooled' },
        preset: { type: 'string', default: 'default' },
        temperature: { type: 'string', default: '0' },
        seed: { type: 'string', default: '1' },
        hops: { type: 'string', default: '2,3,4' },
        'max-new-tokens': { type: 'string', default: '256' },
        json: { type: 'string' },
        episodes: { type: 'boolean', default: false },
        strict: { type: 'boolean', default: false },
      },
      strict: true,
    });
  } catch (error) {
    // Unknown options, missing values (a negative number needs the --opt=-1 form).
    fail((error as Error).message);
  }
}
const { values } = parseCommandLine();

const policySpec = values.policy ?? fail('--policy is required');
const taskSpec = values.tasks;
const limit = values.limit === undefined ? Number.POSITIVE_INFINITY : Number(values.limit);
if (!(limit > 0)) fail(`--limit must be a positive number, got ${values.limit}`);
if (values.corpus !== 'pooled' && values.corpus !== 'question')
  fail(`--corpus must be pooled or question, got ${values.corpus}`);
const seed = Number(values.seed);
if (!Number.isSafeInteger(seed)) fail(`--seed must be an integer, got ${values.seed}`);
const temperature = Number(values.temperature);
if (!(temperature >= 0 && Number.isFinite(temperature)))
  fail(`--temperature must be a number ≥ 0 (0 = greedy), got ${values.temperature}`);
const hops = (values.hops ?? '2,3,4').split(',').map((h) => Number(h.trim()));
if (hops.length === 0 || hops.some((h) => !(h === 2 || h === 3 || h === 4)))
  fail(`--hops takes gold-passage counts among 2, 3, 4 (e.g. 2 or 2,3), got ${values.hops}`);
const maxNewTokens = Number(values['max-new-tokens']);
if (!(Number.isSafeInteger(maxNewTokens) && maxNewTokens > 0))
  fail(`--max-new-tokens must be a positive integer, got ${values['max-new-tokens']}`);
if (!Object.hasOwn(TASK_PRESETS, values.preset))
  fail(`--preset must be one of ${Object.keys(TASK_PRESETS).join(', ')}, got ${values.preset}`);
const presetName = values.preset as TaskPresetName;
const preset = TASK_PRESETS[presetName];
if (values.split !== undefined && values.split !== 'train' && values.split !== 'test')
  fail(`--split must be train or test, got ${values.split}`);
if (values.split !== undefined && taskSpec !== 'synthetic')
  fail(`--split applies to the synthetic task set only (got --tasks ${taskSpec})`);
const split = (values.split ?? 'test') as 'train' | 'test';
if (values.episodes && !values.json)
  fail('--episodes adds the episodes to the --json report; give --json FILE');

/** --tasks: the synthetic world, or a real task set's kind and file. */
function parseTaskSpec(spec: string): { kind: 'synthetic' } | { kind: TaskFileKind; file: string } {
  if (spec === 'synthetic') return { kind: 'synthetic' };
  const colon = spec.indexOf(':');
  const [kind, file] = [spec.slice(0, colon), spec.slice(colon + 1)];
  if (colon < 0 || !file)
    fail(`--tasks ${spec}: expected synthetic, hotpotqa:FILE, 2wiki:FILE or musique:FILE`);
  if (!(TASK_FILE_KINDS as readonly string[]).includes(kind))
    fail(`unknown task set "${kind}" in --tasks ${spec}`);
  return { kind: kind as TaskFileKind, file };
}
const taskSet = parseTaskSpec(taskSpec);

const MODEL_PREFIX = 'model:';
const NAIVE_RAG_MODEL_PREFIX = 'naive-rag:model:';
const scripted = policySpec === 'oracle' || policySpec === 'naive-rag';
if (!scripted && !policySpec.startsWith(MODEL_PREFIX) && !policySpec.startsWith(NAIVE_RAG_MODEL_PREFIX))
  fail(`unknown policy "${policySpec}"`);
if (policySpec === MODEL_PREFIX || policySpec === NAIVE_RAG_MODEL_PREFIX)
  fail(`--policy ${policySpec} needs a checkpoint folder after the colon`);
if (scripted && taskSet.kind !== 'synthetic') {
  // One line, no usage: the command is well formed, the policy just cannot read this data.
  const name = policySpec === 'oracle' ? 'oracle' : SCRIPTED_NAIVE_RAG_NAME;
  console.error(
    `evaluate: ${name} cannot read ${taskSet.kind} data: it follows the synthetic question templates only ` +
      `(it would score EM 0 without reading a word); use naive-rag:model:DIR or model:DIR`,
  );
  process.exit(2);
}

/**
 * The tasks, and for the synthetic world its split's whole corpus (distractor entities included); for a
 * task file also its load summary (null when every record loaded as is).
 */
async function loadTasks(): Promise<{ tasks: QaTask[]; corpus?: Passage[]; summary?: string | null }> {
  if (taskSet.kind === 'synthetic') {
    // The same world and split as a training config with task.seed = --seed and task.hops = --hops.
    const dataset = generateSyntheticDataset({ seed, hops });
    return { tasks: dataset[split].tasks, corpus: dataset[split].corpus };
  }
  const { kind, file } = taskSet;
  const bytes = await readFile(file).catch((e: NodeJS.ErrnoException) =>
    failData(
      `cannot read ${file}: ${e.code === 'ENOENT' ? 'no such file' : e.code === 'EISDIR' ? 'it is a folder' : e.message}`,
    ),
  );
  let result: LoadResult;
  try {
    result = readTaskFile(bytes, kind, file, { strict: values.strict });
  } catch (error) {
    if (error instanceof TaskFileError) failData(error.message);
    if (error instanceof TaskRecordError)
      failData(`${describeLoadProblem(file, error.problem)} (--strict stops at the first bad record)`);
    failData(`cannot load ${file} as ${kind}: ${(error as Error).message}`);
  }
  const problems = [...result.problems, ...result.repairs].sort((a, b) => a.index - b.index);
  for (const problem of problems.slice(0, MAX_PROBLEM_LINES))
    console.error(describeLoadProblem(file, problem));
  if (problems.length > MAX_PROBLEM_LINES)
    console.error(
      `${file}: … and ${problems.length - MAX_PROBLEM_LINES} more (counted in the summary at the end)`,
    );
  return { tasks: result.tasks, summary: summarizeLoad(file, result) };
}

/** A Qwen checkpoint folder on the GPU as a turn generator (chat template, sampling, decoding). */
async function loadModel(dir: string): Promise<{ generate: GenerateTurn; release(): void }> {
  const gpu = await Gpu.create();
  console.log(`adapter: ${gpu.report.kind} — ${gpu.report.description || gpu.report.device}`);
  const ckpt = await loadCheckpoint(directorySource(dir), {
    requireTokenizer: true,
    adapterLimits: gpu.report.limits as never,
  }).catch((error: Error) => fail(`cannot load the checkpoint folder ${dir}: ${error.message}`));
  const model = new QwenGpuModel(gpu, ckpt.config, ckpt.tensors);
  const tokenizer = QwenTokenizer.fromFiles(ckpt.tokenizerFiles);
  const generate = modelGenerateTurn(model, tokenizer, {
    maxNewTokens,
    temperature,
    // Only used when sampling (temperature > 0): the checkpoint's own nucleus / top-k settings.
    topP: ckpt.generationConfig?.topP ?? 1,
    topK: ckpt.generationConfig?.topK ?? 0,
    seed,
  });
  return {
    generate,
    release() {
      model.release();
      gpu.destroy();
    },
  };
}

async function makePolicy(spec: string): Promise<{ policy: Policy; release(): void }> {
  if (spec === 'oracle') return { policy: createOraclePolicy({ style: preset.oracleStyle }), release() {} };
  if (spec === 'naive-rag') return { policy: createNaiveRagPolicy(), release() {} };
  if (spec.startsWith(NAIVE_RAG_MODEL_PREFIX)) {
    const dir = spec.slice(NAIVE_RAG_MODEL_PREFIX.length);
    const { generate, release } = await loadModel(dir);
    return { policy: createNaiveRagPolicy(modelPassageReader(generate), `naive-rag(${dir})`), release };
  }
  const dir = spec.slice(MODEL_PREFIX.length);
  const { generate, release } = await loadModel(dir);
  return { policy: createBaseToolCallPolicy(generate, `base-tool-call(${dir})`), release };
}

const loaded = await loadTasks();
const tasks = loaded.tasks.slice(0, limit);
if (tasks.length === 0) {
  if (loaded.summary) failData(`no tasks to evaluate: ${loaded.summary}`);
  fail('no tasks to evaluate');
}
const { policy, release } = await makePolicy(policySpec);
const tools = corpusSearchTools(values.corpus, loaded.corpus ?? pooledCorpus(tasks), preset.search);
const t0 = performance.now();
const report = await evaluate(policy, tasks, {
  tools,
  env: { systemPrompt: preset.systemPrompt },
  onEpisode: (e, i) => {
    if (tasks.length <= 20 || (i + 1) % 10 === 0) {
      const prediction = JSON.stringify((e.prediction ?? '').slice(0, 60));
      process.stdout.write(
        `  ${i + 1}/${tasks.length} em=${e.em} turns=${e.turns} calls=${e.toolCalls} (${e.doneReason}) answer=${prediction}\n`,
      );
    }
  },
});
release();
const seconds = (performance.now() - t0) / 1000;
const setting =
  `${taskSpec}${taskSpec === 'synthetic' ? ` ${split}` : ''}, ${report.n} questions, ${values.corpus} corpus, ` +
  `preset ${presetName}${scripted ? '' : `, temperature ${temperature}, max ${maxNewTokens} new tokens, seed ${seed}`}`;
const pct = (x: number) => x.toFixed(3);
console.log(`\n${report.policy} on ${setting}; ${seconds.toFixed(1)} s`);
console.log('| EM | F1 | substring EM | mean turns | mean tool calls | format-error rate | mean outcome |');
console.log('|---|---|---|---|---|---|---|');
console.log(
  `| ${pct(report.em)} | ${pct(report.f1)} | ${pct(report.subEm)} | ${report.meanTurns.toFixed(2)} | ${report.meanToolCalls.toFixed(2)} | ${pct(report.formatErrorRate)} | ${pct(report.meanOutcome)} |`,
);
for (const [type, m] of Object.entries(report.byType))
  console.log(`  ${type}: EM ${pct(m.em)} F1 ${pct(m.f1)} (n=${m.n})`);
if (values.json) {
  const config = {
    policy: policySpec,
    tasks: taskSpec,
    split: taskSpec === 'synthetic' ? split : null,
    limit: Number.isFinite(limit) ? limit : null,
    corpus: values.corpus,
    preset: presetName,
    temperature,
    maxNewTokens,
    seed,
    seconds,
  };
  // The tool specs are the same in every episode; the messages are the bulk of a report.
  const episodes = report.episodes.map(({ tools: _tools, messages, ...e }) =>
    values.episodes ? { ...e, messages } : e,
  );
  await writeFile(values.json, `${JSON.stringify({ config, ...report, episodes }, null, 2)}\n`);
  console.log(`wrote ${values.json}`);
}
if (loaded.summary) console.log(`\n${loaded.summary}`);
