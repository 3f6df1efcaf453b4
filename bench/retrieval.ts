/**
 * Retrieval benchmark: BM25 index build and query latency on the 6,119-passage 2WikiMultihopQA sample,
 * recall@5 of the gold paragraphs on the HotpotQA and MuSiQue samples (per-question corpus and pooled
 * corpus), and the training-free baselines on the synthetic task.
 *
 *   node --import tsx bench/retrieval.ts            print the markdown report
 *   node --import tsx bench/retrieval.ts --write    also write docs/benchmarks/retrieval.md
 *   node --import tsx bench/retrieval.ts --data DIR use another data folder (default ../shared/data)
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { evaluate } from '../src/env/evaluate.ts';
import { createNaiveRagPolicy } from '../src/env/policies/naive-rag.ts';
import { createOraclePolicy } from '../src/env/policies/oracle.ts';
import { PassageIndex } from '../src/env/retrieval/bm25.ts';
import { type RecallReport, recallAtK } from '../src/env/retrieval/metrics.ts';
import { createRng } from '../src/env/rng.ts';
import { loadHotpotQa } from '../src/env/tasks/hotpotqa.ts';
import { loadMusiqueJsonl } from '../src/env/tasks/musique.ts';
import { DEFAULT_SYNTHETIC_CONFIG, generateSyntheticDataset } from '../src/env/tasks/synthetic.ts';
import { loadPassagesJsonl } from '../src/env/tasks/twowiki.ts';
import { pooledSearchTools } from '../src/env/tools/search.ts';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const dataArg = args.indexOf('--data');
const DATA_DIR =
  dataArg >= 0 ? path.resolve(args[dataArg + 1] ?? '') : path.resolve(REPO_ROOT, '..', 'shared', 'data');
const WRITE = args.includes('--write');
const BUILD_REPEATS = 5;
const QUERY_COUNT = 300;
const K = 5;
const loadAtStart = os.loadavg()[0];

if (!existsSync(DATA_DIR)) {
  console.error(`data folder not found: ${DATA_DIR} (pass --data DIR)`);
  process.exit(1);
}
const read = (relative: string) => readFileSync(path.join(DATA_DIR, relative), 'utf8');

function percentile(sorted: number[], p: number): number {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}
const ms = (x: number) => x.toFixed(x < 1 ? 3 : x < 10 ? 2 : 1);

// ---- 2Wiki: index build and query latency -----------------------------------------------------------
const twoWiki = loadPassagesJsonl(read('2wiki/2wiki_passages_6119.jsonl'));
const buildTimes: number[] = [];
let index = PassageIndex.build(twoWiki.passages); // warm-up (JIT)
for (let i = 0; i < BUILD_REPEATS; i++) {
  const t0 = performance.now();
  index = PassageIndex.build(twoWiki.passages);
  buildTimes.push(performance.now() - t0);
}

const hotpot = loadHotpotQa(JSON.parse(read('hotpotqa/hotpot_train_sample_100.json')));
const musique = loadMusiqueJsonl(read('musique/musique_ans_train_sample_60.jsonl'));

// Queries: real multi-hop questions, plus the opening words of seeded-random 2Wiki passages (which also
// checks that a passage is found from its own first sentence).
const rng = createRng(2024);
const sampled = rng
  .shuffle(twoWiki.passages)
  .slice(0, QUERY_COUNT - hotpot.tasks.length - musique.tasks.length);
const queries = [
  ...hotpot.tasks.map((t) => t.question),
  ...musique.tasks.map((t) => t.question),
  ...sampled.map((p) => p.text.split(/\s+/).slice(0, 12).join(' ')),
];
for (const q of queries.slice(0, 20)) index.search(q, K); // warm-up
const latencies = queries.map((q) => {
  const t0 = performance.now();
  index.search(q, K);
  return performance.now() - t0;
});
const sortedLatencies = [...latencies].sort((a, b) => a - b);
const selfHits = sampled.filter((p) => {
  const top = index.search(p.text.split(/\s+/).slice(0, 12).join(' '), K);
  return top.some((h) => h.passage.id === p.id);
}).length;

// ---- Recall@5 --------------------------------------------------------------------------------------
const recall: [string, string, RecallReport][] = [
  [
    'HotpotQA (distractor, train sample)',
    'per question (10 paragraphs)',
    recallAtK(hotpot.tasks, 'per-question', K),
  ],
  ['HotpotQA (distractor, train sample)', 'pooled over the sample', recallAtK(hotpot.tasks, 'pooled', K)],
  ['MuSiQue-Ans (train sample)', 'per question (20 paragraphs)', recallAtK(musique.tasks, 'per-question', K)],
  ['MuSiQue-Ans (train sample)', 'pooled over the sample', recallAtK(musique.tasks, 'pooled', K)],
];

// ---- Synthetic task: the training-free baselines ------------------------------------------------------
const synthetic = generateSyntheticDataset({ seed: DEFAULT_SYNTHETIC_CONFIG.seed });
const syntheticTools = pooledSearchTools(synthetic.test.corpus);
const oracle = await evaluate(createOraclePolicy(), synthetic.test.tasks, { tools: syntheticTools });
const naive = await evaluate(createNaiveRagPolicy(), synthetic.test.tasks, { tools: syntheticTools });

// ---- Report ------------------------------------------------------------------------------------------
const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
const loadAtEnd = os.loadavg()[0];
const lines = [
  '# Retrieval benchmark',
  '',
  `- Date: ${new Date().toISOString().slice(0, 10)}`,
  '- Command: `node --import tsx bench/retrieval.ts --write`',
  `- Machine: ${cpu}, ${os.cpus().length} logical cores, Node ${process.version}, ${os.platform()} ${os.arch()}; ` +
    `1-minute load average ${loadAtStart.toFixed(1)} before and ${loadAtEnd.toFixed(1)} after the run ` +
    '(timings grow with load on a shared machine)',
  `- Retriever: BM25+ (minisearch), title boost 2, diacritic folding, English stop words, light stemming; top-${K}`,
  '',
  '## Index build and query latency (2WikiMultihopQA passage sample)',
  '',
  '| measure | value |',
  '|---|---|',
  `| passages indexed | ${twoWiki.passages.length.toLocaleString('en-US')} (${twoWiki.skipped} bad lines) |`,
  `| index build, mean of ${BUILD_REPEATS} (min) | ${ms(mean(buildTimes))} ms (${ms(Math.min(...buildTimes))} ms) |`,
  `| query latency, mean over ${latencies.length} queries | ${ms(mean(latencies))} ms |`,
  `| query latency p50 / p95 / max | ${ms(percentile(sortedLatencies, 50))} / ${ms(percentile(sortedLatencies, 95))} / ${ms(sortedLatencies[sortedLatencies.length - 1])} ms |`,
  `| passage found in top ${K} from its first 12 words | ${selfHits} / ${sampled.length} |`,
  '',
  `Queries: the ${hotpot.tasks.length} HotpotQA and ${musique.tasks.length} MuSiQue questions and the first 12 words of ${sampled.length} seeded-random passages.`,
  '',
  `## Recall@${K} of gold supporting paragraphs (question as query)`,
  '',
  '| dataset | corpus | questions | corpus size | recall@5 | all gold in top 5 |',
  '|---|---|---|---|---|---|',
  ...recall.map(
    ([dataset, corpus, r]) =>
      `| ${dataset} | ${corpus} | ${r.questions} | ${Math.round(r.corpusSize)} | ${r.recall.toFixed(3)} | ${r.allGold.toFixed(3)} |`,
  ),
  '',
  'Recall@5 is the mean over questions of (gold paragraphs in the top 5) / (gold paragraphs). HotpotQA has 2 gold',
  'paragraphs per question, MuSiQue 2 to 4; the "all gold" share is much lower than recall because a question',
  'names its first hop but rarely the later ones, which an agent reaches only through further searches.',
  '',
  `## Synthetic task, test split (seed ${synthetic.config.seed}, ${synthetic.test.tasks.length} questions, ${synthetic.test.corpus.length} passages, pooled search)`,
  '',
  '| policy | EM | F1 | mean turns | mean tool calls | format-error rate |',
  '|---|---|---|---|---|---|',
  ...[oracle, naive].map(
    (r) =>
      `| ${r.policy} | ${r.em.toFixed(3)} | ${r.f1.toFixed(3)} | ${r.meanTurns.toFixed(2)} | ${r.meanToolCalls.toFixed(2)} | ${r.formatErrorRate.toFixed(3)} |`,
  ),
  '',
  `Naive RAG EM by question type: ${Object.entries(naive.byType)
    .map(([type, m]) => `${type} ${m.em.toFixed(2)} (n=${m.n})`)
    .join(', ')}.`,
  '',
];
const report = lines.join('\n');
console.log(report);
if (WRITE) {
  const out = path.join(REPO_ROOT, 'docs', 'benchmarks', 'retrieval.md');
  mkdirSync(path.dirname(out), { recursive: true });
  writeFileSync(out, report);
  console.error(`wrote ${path.relative(REPO_ROOT, out)}`);
}
