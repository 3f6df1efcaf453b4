/**
 * One task schema for every QA source (synthetic world, HotpotQA, 2WikiMultihopQA, MuSiQue), so the
 * ToolEnv, the policies, the evaluation and the parquet export need not care where a question came from.
 */

import type { Passage } from '../retrieval/bm25.ts';
import { hash53Hex } from '../rng.ts';
import type { JsonValue } from '../types.ts';
import { lineColumn, scanJson } from './json-scan.ts';

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

/**
 * A record that was skipped (could not be turned into a task) or repaired (turned into one after an
 * unambiguous fix), and why.
 */
export interface LoadProblem {
  /** 0-based position of the record among the file's records (a JSON array's index; for JSON lines, the n-th non-blank line). */
  index: number;
  /** 1-based line in the file where the record starts, when the text was read from a file. */
  line?: number;
  id?: string;
  /** Short category for the summary by reason ("missing answer", "duplicate title", …). */
  kind: string;
  /** The full reason, naming the bad value. */
  reason: string;
  action: 'skipped' | 'repaired';
}

export interface LoadResult {
  tasks: QaTask[];
  /** Records skipped (bad records are counted, never fatal unless `strict`). */
  skipped: number;
  /** The skipped records. */
  problems: LoadProblem[];
  /** Records kept after an unambiguous repair, one entry per repair. */
  repairs: LoadProblem[];
}

export interface LoadOptions {
  /** Throw a TaskRecordError at the first bad record (skipped or repaired) instead of going on. */
  strict?: boolean;
  /** 1-based line of each record, to name it in problems (parseJsonLines and readTaskFile supply it). */
  lines?: readonly number[];
}

/** A bad record met with `strict: true`. */
export class TaskRecordError extends Error {
  readonly problem: LoadProblem;
  constructor(problem: LoadProblem) {
    super(formatLoadProblem(problem));
    this.name = 'TaskRecordError';
    this.problem = problem;
  }
}

/** "line 12: record 11 (id 5a8b…): skipped: missing answer" (file name prefixed by the caller). */
export function formatLoadProblem(problem: LoadProblem): string {
  const where = problem.line !== undefined ? `line ${problem.line}: ` : '';
  const id = problem.id !== undefined ? ` (id ${JSON.stringify(truncateId(problem.id))})` : '';
  return `${where}record ${problem.index + 1}${id} ${problem.action}: ${problem.reason}`;
}

function truncateId(id: string): string {
  return id.length > 60 ? `${id.slice(0, 59)}…` : id;
}

/** Counts of problems by kind, most frequent first: [['missing answer', 3], …]. */
export function countByKind(problems: readonly LoadProblem[]): [string, number][] {
  const counts = new Map<string, number>();
  for (const p of problems) counts.set(p.kind, (counts.get(p.kind) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
}

/** A reason to skip a record: a short kind for the summary, and the full reason (defaults to the kind). */
export interface Skip {
  skip: true;
  kind: string;
  reason: string;
}

export function skip(kind: string, reason = kind): Skip {
  return { skip: true, kind, reason };
}

/** Records a repair of the record being converted. */
export type Repair = (kind: string, reason: string) => void;

/** A short, safe rendering of a bad value for a reason: JSON, cut to 40 characters. */
export function showValue(value: unknown): string {
  let text: string;
  try {
    text = value === undefined ? 'undefined' : (JSON.stringify(value) ?? String(value));
  } catch {
    text = String(value);
  }
  return text.length > 40 ? `${text.slice(0, 39)}…` : text;
}

/** Removes a UTF-8 byte-order mark (U+FEFF) at the start of a text: editors on Windows write one. */
export function stripBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
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

/**
 * Parses JSON lines; a leading byte-order mark and blank lines are ignored, unparsable lines reported
 * with their 1-based line number. `lines[k]` is the line of `records[k]`.
 */
export function parseJsonLines(text: string): {
  records: unknown[];
  lines: number[];
  problems: LoadProblem[];
} {
  const records: unknown[] = [];
  const lines: number[] = [];
  const problems: LoadProblem[] = [];
  let index = 0;
  stripBom(text)
    .split('\n')
    .forEach((raw, i) => {
      const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
      if (line.trim() === '') return;
      try {
        records.push(JSON.parse(line));
        lines.push(i + 1);
      } catch {
        const scan = scanJson(line);
        const detail = scan.ok
          ? 'invalid JSON'
          : `invalid JSON at column ${lineColumn(line, scan.offset).column}: expected ${scan.expected.replace('end of file', 'end of line')}, found ${scan.found.replace('end of file', 'end of line')}`;
        problems.push({ index, line: i + 1, kind: 'invalid JSON', reason: detail, action: 'skipped' });
      }
      index++;
    });
  return { records, lines, problems };
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
