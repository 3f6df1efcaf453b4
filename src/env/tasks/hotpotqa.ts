/**
 * HotpotQA (distractor setting) records → tasks. A record is
 * `{_id, question, answer, type, level, supporting_facts: [[title, sent_idx]], context: [[title, [sentences]]]}`;
 * each context paragraph becomes a passage and the titles named in supporting_facts are the gold ones.
 * 2WikiMultihopQA uses the same layout (see twowiki.ts). Bad records are repaired when one reading is
 * possible, else skipped; both are reported (parseHotpotLike lists the cases).
 */
import { isJsonObject } from '../json.ts';
import type { JsonValue } from '../types.ts';
import {
  joinSentences,
  type LoadOptions,
  type LoadProblem,
  type LoadResult,
  type Passage,
  passageId,
  type QaTask,
  type Repair,
  type Skip,
  showValue,
  skip,
  TaskRecordError,
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

/**
 * Validates and converts the fields HotpotQA and 2Wiki share; returns a Skip when unusable. Repairs
 * (reported through `repair`) are made only where one reading is possible:
 *   answer written as a number or boolean      -> its text ("1990")
 *   the same paragraph (title and text) twice  -> kept once
 *   supporting fact [title, i] with i outside the paragraph's sentences -> the title stays gold, the
 *                                                 index is dropped from meta.supportingFacts
 * and skipped where a guess would be needed: two paragraphs with the same title and different text (a
 * supporting fact names a title, so which paragraph is gold is unknowable), an empty answer, …
 */
export function parseHotpotLike(record: unknown, repair: Repair = () => {}): HotpotLikeParts | Skip {
  if (!isJsonObject(record)) return skip('record is not an object');
  const id = record._id ?? record.id;
  if (typeof id !== 'string' || id === '') return skip('missing _id');
  if (typeof record.question !== 'string' || record.question.trim() === '') return skip('missing question');
  let answer = record.answer;
  if (typeof answer === 'number' || typeof answer === 'boolean') {
    repair(
      'answer is not a string',
      `answer ${showValue(answer)} is not a string: read as "${String(answer)}"`,
    );
    answer = String(answer);
  }
  if (typeof answer !== 'string' || answer.trim() === '') {
    return skip(
      'missing answer',
      answer === undefined ? 'missing answer' : `missing answer (answer is ${showValue(answer)})`,
    );
  }
  if (!Array.isArray(record.context) || record.context.length === 0) return skip('missing context');

  const passages: Passage[] = [];
  const idsByTitle = new Map<string, string[]>();
  const sentenceCount = new Map<string, number>();
  for (const entry of record.context) {
    if (!Array.isArray(entry) || entry.length !== 2) return skip('context entry is not [title, sentences]');
    const [title, sentences] = entry as unknown[];
    if (typeof title !== 'string' || !Array.isArray(sentences))
      return skip('context entry is not [title, sentences]');
    if (!sentences.every((s) => typeof s === 'string'))
      return skip('non-string sentence', `context '${title}' has a non-string sentence`);
    const text = joinSentences(sentences as string[]);
    const pid = passageId(title, text);
    if (passages.some((p) => p.id === pid)) {
      repair('repeated paragraph', `context paragraph '${title}' appears twice: kept once`);
      continue;
    }
    if (idsByTitle.has(title)) {
      return skip(
        'duplicate title',
        `two context paragraphs are titled '${title}' with different text: which one is gold is ambiguous`,
      );
    }
    passages.push({ id: pid, title, text });
    idsByTitle.set(title, [pid]);
    sentenceCount.set(title, sentences.length);
  }

  const supportingFacts: [string, number][] = [];
  const supportingTitles: string[] = [];
  if (record.supporting_facts !== undefined) {
    if (!Array.isArray(record.supporting_facts)) return skip('supporting_facts is not a list');
    for (const fact of record.supporting_facts) {
      if (!Array.isArray(fact) || typeof fact[0] !== 'string' || !Number.isInteger(fact[1])) {
        return skip('supporting fact is not [title, sentence index]');
      }
      const [title, sentence] = fact as [string, number];
      if (!idsByTitle.has(title))
        return skip('supporting title not in context', `supporting title '${title}' is not in the context`);
      supportingTitles.push(title);
      const count = sentenceCount.get(title) ?? 0;
      if (sentence < 0 || sentence >= count) {
        repair(
          'supporting fact out of range',
          `supporting fact ['${title}', ${sentence}] points outside the paragraph's ${count} sentence(s): the title stays gold, the index is dropped`,
        );
        continue;
      }
      supportingFacts.push([title, sentence]);
    }
  }
  const supportingIds = uniqueStrings(supportingTitles.flatMap((title) => idsByTitle.get(title) ?? []));
  return {
    id,
    question: record.question.trim(),
    answer: answer.trim(),
    passages,
    supportingIds,
    type: typeof record.type === 'string' ? record.type : undefined,
    level: typeof record.level === 'string' ? record.level : undefined,
    supportingFacts,
  };
}

/** Converts HotpotQA records (the parsed JSON array) into tasks; `records` that is not an array is one problem. */
export function loadHotpotQa(records: unknown, source = 'hotpotqa', options: LoadOptions = {}): LoadResult {
  return loadRecords(
    records,
    (record, repair) => {
      const parts = parseHotpotLike(record, repair);
      if ('skip' in parts) return parts;
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
    },
    options,
  );
}

/**
 * Runs a per-record converter, collecting tasks, skips and repairs; never throws on bad data unless
 * `options.strict`, where the first skip or repair throws a TaskRecordError.
 */
export function loadRecords(
  records: unknown,
  convert: (record: unknown, repair: Repair) => QaTask | Skip,
  options: LoadOptions = {},
): LoadResult {
  if (!Array.isArray(records)) {
    const problem: LoadProblem = {
      index: 0,
      kind: 'not a list of records',
      reason: `input is not a list of records (got ${records === null ? 'null' : Array.isArray(records) ? 'a list' : typeof records})`,
      action: 'skipped',
    };
    if (options.strict) throw new TaskRecordError(problem);
    return { tasks: [], skipped: 1, problems: [problem], repairs: [] };
  }
  const tasks: QaTask[] = [];
  const problems: LoadProblem[] = [];
  const repairs: LoadProblem[] = [];
  const seenIds = new Set<string>();
  records.forEach((record, index) => {
    const rawId = isJsonObject(record) ? (record._id ?? record.id) : undefined;
    const where = {
      index,
      ...(options.lines?.[index] !== undefined ? { line: options.lines[index] } : {}),
      ...(typeof rawId === 'string' ? { id: rawId } : {}),
    };
    const report = (problem: LoadProblem) => {
      if (options.strict) throw new TaskRecordError(problem);
      (problem.action === 'skipped' ? problems : repairs).push(problem);
    };
    // One entry per kind of repair in a record (20 paragraphs with "false" as text are one problem).
    const recordRepairs = new Map<string, { problem: LoadProblem; count: number }>();
    let converted: QaTask | Skip;
    try {
      converted = convert(record, (kind, reason) => {
        const problem: LoadProblem = { ...where, kind, reason, action: 'repaired' };
        if (options.strict) throw new TaskRecordError(problem);
        const seen = recordRepairs.get(kind);
        if (seen) seen.count++;
        else recordRepairs.set(kind, { problem, count: 1 });
      });
    } catch (error) {
      if (error instanceof TaskRecordError) throw error;
      converted = skip('unexpected error', `unexpected error: ${(error as Error).message}`);
    }
    if ('skip' in converted) {
      report({ ...where, kind: converted.kind, reason: converted.reason, action: 'skipped' });
    } else if (seenIds.has(converted.id)) {
      report({ ...where, kind: 'duplicate id', reason: 'duplicate id', action: 'skipped' });
    } else {
      seenIds.add(converted.id);
      tasks.push(converted);
      for (const { problem, count } of recordRepairs.values()) {
        repairs.push(
          count === 1 ? problem : { ...problem, reason: `${problem.reason} (and ${count - 1} more like it)` },
        );
      }
    }
  });
  return { tasks, skipped: problems.length, problems, repairs };
}
