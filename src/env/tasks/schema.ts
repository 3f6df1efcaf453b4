/**
 * One task schema for every QA source (synthetic world, HotpotQA, 2WikiMultihopQA, MuSiQue), so the
 * ToolEnv, the policies, the evaluation and the parquet export need not care where a question came from.
 */

import type { Passage } from '../retrieval/bm25.ts';
import { hash53Hex } from '../rng.ts';
import type { JsonValue } from '../types.ts';

export type { Passage } from '../retrieval/bm25.ts';

export interface QaTask {
  /** Unique within its source. */
  id: string;
  /** Where the task comes from: 'synthetic', 'hotpotqa', '2wiki', 'musique'. */
  source: string;
  question: string;
  /** Gold answer first, then accepted aliases. Never empty. */
  answers: string[];
  /** The question's own passages (distractor setting): supporting ones plus distractors. */
  passages: Passage[];
  /** Ids, within `passages`, of the gold supporting passages. */
  supportingIds: string[];
  /** Question type as the source names it (bridge, comparison, compositional, …). */
  type?: string;
  /** Source-specific details (level, evidences, decomposition, synthetic template, …). */
  meta?: Record<string, JsonValue>;
}

/** A record that could not be turned into a task, and why. */
export interface LoadProblem {
  /** Position in the input (0-based record index, or 1-based line for JSON lines). */
  index: number;
  id?: string;
  reason: string;
}

export interface LoadResult {
  tasks: QaTask[];
  /** Records skipped (bad records are counted, never fatal). */
  skipped: number;
  problems: LoadProblem[];
}

/**
 * Content-derived passage id: `title#hash`. Identical paragraphs from different questions get the same
 * id, which pools corpora without losing track of which pooled passages are gold.
 */
export function passageId(title: string, text: string): string {
  return `${title}#${hash53Hex(`${title}\n${text}`)}`;
}

/** All passages of a task set, deduplicated by id, in first-seen order (the "pooled" corpus). */
export function pooledCorpus(tasks: readonly QaTask[]): Passage[] {
  const seen = new Map<string, Passage>();
  for (const task of tasks) for (const p of task.passages) if (!seen.has(p.id)) seen.set(p.id, p);
  return [...seen.values()];
}

/** Parses JSON lines; blank lines are ignored, unparsable ones reported with their 1-based line number. */
export function parseJsonLines(text: string): { records: unknown[]; problems: LoadProblem[] } {
  const records: unknown[] = [];
  const problems: LoadProblem[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (line.trim() === '') return;
    try {
      records.push(JSON.parse(line));
    } catch (error) {
      problems.push({ index: i + 1, reason: `invalid JSON: ${(error as Error).message}` });
    }
  });
  return { records, problems };
}

/** Checks the invariants every loader and generator promises; returns problems, empty when valid. */
export function validateTask(task: QaTask): string[] {
  const problems: string[] = [];
  if (task.id === '') problems.push('empty id');
  if (task.question.trim() === '') problems.push('empty question');
  if (task.answers.length === 0 || task.answers.some((a) => a.trim() === '')) problems.push('empty answer');
  const ids = new Set(task.passages.map((p) => p.id));
  if (ids.size !== task.passages.length) problems.push('duplicate passage ids');
  for (const id of task.supportingIds) if (!ids.has(id)) problems.push(`supporting id ${id} not in passages`);
  return problems;
}

/** Joins HotpotQA-style sentence lists: sentences usually carry their own leading space. */
export function joinSentences(sentences: readonly string[]): string {
  let out = '';
  for (const s of sentences) {
    if (out !== '' && !/^\s/.test(s) && !/\s$/.test(out)) out += ' ';
    out += s;
  }
  return out.trim();
}

/** Trims, drops empty strings and duplicates, keeping first-seen order. */
export function uniqueStrings(values: readonly string[]): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const v of values) {
    const key = v.trim();
    if (key === '' || seen.has(key)) continue;
    seen.add(key);
    out.push(key);
  }
  return out;
}
