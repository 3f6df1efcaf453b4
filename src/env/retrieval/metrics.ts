/**
 * Retrieval quality: recall@k of the gold supporting passages, with the question as the query, in the
 * distractor setting (each question's own passages) or over a pooled corpus.
 */
import type { QaTask } from '../tasks/schema.ts';
import { pooledCorpus } from '../tasks/schema.ts';
import { PassageIndex, type PassageIndexOptions } from './bm25.ts';

export interface RecallReport {
  k: number;
  /** Questions with at least one gold passage (the others are left out). */
  questions: number;
  /** Mean over questions of (gold passages in the top k) / (gold passages). */
  recall: number;
  /** Share of questions with every gold passage in the top k. */
  allGold: number;
  /** Passages in the searched corpus (per question: the mean). */
  corpusSize: number;
}

export type CorpusSetting = 'per-question' | 'pooled';

export function recallAtK(
  tasks: readonly QaTask[],
  setting: CorpusSetting,
  k = 5,
  indexOptions: PassageIndexOptions = {},
): RecallReport {
  const scored = tasks.filter((t) => t.supportingIds.length > 0);
  const pooled = setting === 'pooled' ? PassageIndex.build(pooledCorpus(scored), indexOptions) : null;
  let recallSum = 0;
  let allGold = 0;
  let corpusSum = 0;
  for (const task of scored) {
    const index = pooled ?? PassageIndex.build(task.passages, indexOptions);
    corpusSum += index.size;
    const top = new Set(index.search(task.question, k).map((h) => h.passage.id));
    const found = task.supportingIds.filter((id) => top.has(id)).length;
    recallSum += found / task.supportingIds.length;
    if (found === task.supportingIds.length) allGold++;
  }
  const n = scored.length;
  return {
    k,
    questions: n,
    recall: n === 0 ? 0 : recallSum / n,
    allGold: n === 0 ? 0 : allGold / n,
    corpusSize: n === 0 ? 0 : corpusSum / n,
  };
}
