/**
 * HotpotQA (distractor setting) records → tasks. A record is
 * `{_id, question, answer, type, level, supporting_facts: [[title, sent_idx]], context: [[title, [sentences]]]}`;
 * each context paragraph becomes a passage and the titles named in supporting_facts are the gold ones.
 * 2WikiMultihopQA uses the same layout (see twowiki.ts). Bad records are skipped and reported.
 */
import { isJsonObject } from '../json.ts';
import type { JsonValue } from '../types.ts';
import {
  joinSentences,
  type LoadProblem,
  type LoadResult,
  type Passage,
  passageId,
  type QaTask,
  uniqueStrings,
} from './schema.ts';

/** The common part of HotpotQA-format records: passages and gold ids, or a reason to skip. */
export interface HotpotLikeParts {
  id: string;
  question: string;
  answer: string;
  passages: Passage[];
  supportingIds: string[];
  type?: string;
  level?: string;
  supportingFacts: [string, number][];
}

/** Validates and converts the fields HotpotQA and 2Wiki share; returns a reason string when unusable. */
export function parseHotpotLike(record: unknown): HotpotLikeParts | string {
  if (!isJsonObject(record)) return 'record is not an object';
  const id = record._id ?? record.id;
  if (typeof id !== 'string' || id === '') return 'missing _id';
  if (typeof record.question !== 'string' || record.question.trim() === '') return 'missing question';
  if (typeof record.answer !== 'string' || record.answer.trim() === '') return 'missing answer';
  if (!Array.isArray(record.context) || record.context.length === 0) return 'missing context';

  const passages: Passage[] = [];
  const idsByTitle = new Map<string, string[]>();
  for (const entry of record.context) {
    if (!Array.isArray(entry) || entry.length !== 2) return 'context entry is not [title, sentences]';
    const [title, sentences] = entry as unknown[];
    if (typeof title !== 'string' || !Array.isArray(sentences))
      return 'context entry is not [title, sentences]';
    if (!sentences.every((s) => typeof s === 'string')) return `context '${title}' has a non-string sentence`;
    const text = joinSentences(sentences as string[]);
    const pid = passageId(title, text);
    if (passages.some((p) => p.id === pid)) continue; // the same paragraph twice adds nothing
    passages.push({ id: pid, title, text });
    idsByTitle.set(title, [...(idsByTitle.get(title) ?? []), pid]);
  }

  const supportingFacts: [string, number][] = [];
  if (record.supporting_facts !== undefined) {
    if (!Array.isArray(record.supporting_facts)) return 'supporting_facts is not a list';
    for (const fact of record.supporting_facts) {
      if (!Array.isArray(fact) || typeof fact[0] !== 'string' || !Number.isInteger(fact[1])) {
        return 'supporting fact is not [title, sentence index]';
      }
      if (!idsByTitle.has(fact[0])) return `supporting title '${fact[0]}' is not in the context`;
      supportingFacts.push([fact[0], fact[1] as number]);
    }
  }
  const supportingIds = uniqueStrings(supportingFacts.flatMap(([title]) => idsByTitle.get(title) ?? []));
  return {
    id,
    question: record.question.trim(),
    answer: record.answer.trim(),
    passages,
    supportingIds,
    type: typeof record.type === 'string' ? record.type : undefined,
    level: typeof record.level === 'string' ? record.level : undefined,
    supportingFacts,
  };
}

/** Converts HotpotQA records (the parsed JSON array) into tasks; `records` that is not an array is one problem. */
export function loadHotpotQa(records: unknown, source = 'hotpotqa'): LoadResult {
  return loadRecords(records, (record) => {
    const parts = parseHotpotLike(record);
    if (typeof parts === 'string') return parts;
    const meta: Record<string, JsonValue> = { supportingFacts: parts.supportingFacts };
    if (parts.level !== undefined) meta.level = parts.level;
    return {
      id: parts.id,
      source,
      question: parts.question,
      answers: [parts.answer],
      passages: parts.passages,
      supportingIds: parts.supportingIds,
      type: parts.type,
      meta,
    };
  });
}

/** Runs a per-record converter, collecting tasks and problems; never throws on bad data. */
export function loadRecords(records: unknown, convert: (record: unknown) => QaTask | string): LoadResult {
  if (!Array.isArray(records)) {
    return { tasks: [], skipped: 1, problems: [{ index: 0, reason: 'input is not a list of records' }] };
  }
  const tasks: QaTask[] = [];
  const problems: LoadProblem[] = [];
  const seenIds = new Set<string>();
  records.forEach((record, index) => {
    let converted: QaTask | string;
    try {
      converted = convert(record);
    } catch (error) {
      converted = `unexpected error: ${(error as Error).message}`;
    }
    const id =
      isJsonObject(record) && typeof (record._id ?? record.id) === 'string'
        ? String(record._id ?? record.id)
        : undefined;
    if (typeof converted === 'string') {
      problems.push({ index, id, reason: converted });
    } else if (seenIds.has(converted.id)) {
      problems.push({ index, id, reason: 'duplicate id' });
    } else {
      seenIds.add(converted.id);
      tasks.push(converted);
    }
  });
  return { tasks, skipped: problems.length, problems };
}
