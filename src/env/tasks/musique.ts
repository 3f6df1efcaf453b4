/**
 * MuSiQue-Ans records (JSON lines) → tasks. A record is
 * `{id, question, answer, answer_aliases, answerable, paragraphs: [{idx, title, paragraph_text, is_supporting}],
 * question_decomposition}`. Unanswerable records (MuSiQue-Full) have no gold answer and are skipped.
 *
 * Repairs (reported) where one reading is possible:
 *   answerable / is_supporting written as the strings "true" / "false"  -> the booleans
 *   answer written as a number                                           -> its text
 *   question_decomposition that is not a list                            -> hops read from the id ("3hop1__…" → 3)
 * Everything else that is wrong skips the record with its reason.
 */
import { isJsonObject } from '../json.ts';
import { loadRecords } from './hotpotqa.ts';
import {
  type LoadOptions,
  type LoadResult,
  type Passage,
  parseJsonLines,
  passageId,
  type Repair,
  type Skip,
  showValue,
  skip,
  TaskRecordError,
  uniqueStrings,
} from './schema.ts';

/** A MuSiQue flag: a boolean, or "true"/"false" as text (repaired); undefined when absent; a Skip otherwise. */
function readFlag(value: unknown, name: string, repair: Repair): boolean | undefined | Skip {
  if (value === undefined || typeof value === 'boolean') return value;
  if (typeof value === 'string') {
    const text = value.trim().toLowerCase();
    if (text === 'true' || text === 'false') {
      repair(`${name} is a string`, `${name} ${showValue(value)} is a string: read as ${text}`);
      return text === 'true';
    }
  }
  return skip(`${name} is not a boolean`, `${name} is ${showValue(value)}, not true or false`);
}

export function loadMusique(records: unknown, source = 'musique', options: LoadOptions = {}): LoadResult {
  return loadRecords(
    records,
    (record, repair) => {
      if (!isJsonObject(record)) return skip('record is not an object');
      const { id, question } = record;
      if (typeof id !== 'string' || id === '') return skip('missing id');
      if (typeof question !== 'string' || question.trim() === '') return skip('missing question');
      const answerable = readFlag(record.answerable, 'answerable', repair);
      if (typeof answerable === 'object') return answerable;
      if (answerable === false) return skip('unanswerable');
      let answer = record.answer;
      if (typeof answer === 'number') {
        repair('answer is not a string', `answer ${showValue(answer)} is not a string: read as "${answer}"`);
        answer = String(answer);
      }
      if (typeof answer !== 'string' || answer.trim() === '') {
        return skip(
          'missing answer',
          answer === undefined ? 'missing answer' : `missing answer (answer is ${showValue(answer)})`,
        );
      }
      const aliases = record.answer_aliases ?? [];
      if (!Array.isArray(aliases) || !aliases.every((a) => typeof a === 'string')) {
        return skip('answer_aliases is not a list of strings');
      }
      if (!Array.isArray(record.paragraphs) || record.paragraphs.length === 0)
        return skip('missing paragraphs');

      const passages: Passage[] = [];
      const supportingIds: string[] = [];
      for (const p of record.paragraphs) {
        if (!isJsonObject(p) || typeof p.title !== 'string' || typeof p.paragraph_text !== 'string') {
          return skip('paragraph is not {title, paragraph_text}');
        }
        const supporting = readFlag(p.is_supporting, 'is_supporting', repair);
        if (typeof supporting === 'object') return supporting;
        const pid = passageId(p.title, p.paragraph_text);
        if (!passages.some((q) => q.id === pid))
          passages.push({ id: pid, title: p.title, text: p.paragraph_text });
        if (supporting === true) supportingIds.push(pid);
      }
      if (supportingIds.length === 0) return skip('no supporting paragraph');

      // MuSiQue ids start with the hop pattern, e.g. "2hop__…", "3hop1__…".
      const type = id.split('__')[0];
      let hops: number;
      const decomposition = record.question_decomposition;
      if (decomposition === undefined) {
        hops = 0;
      } else if (Array.isArray(decomposition)) {
        hops = decomposition.length;
      } else {
        const fromId = /^(\d+)hop/.exec(type);
        if (fromId === null) {
          return skip(
            'question_decomposition is not a list',
            `question_decomposition is ${showValue(decomposition)}, not a list, and the id names no hop count`,
          );
        }
        hops = Number(fromId[1]);
        repair(
          'question_decomposition is not a list',
          `question_decomposition is ${showValue(decomposition)}, not a list: hops = ${hops} from the id`,
        );
      }
      return {
        id,
        source,
        question: question.trim(),
        answers: uniqueStrings([answer, ...(aliases as string[])]),
        passages,
        supportingIds: uniqueStrings(supportingIds),
        type,
        meta: { hops },
      };
    },
    options,
  );
}

/**
 * JSON-lines text → tasks, with unparsable lines counted as skipped records and every problem named
 * by its line. A leading byte-order mark is ignored. With `strict`, an unparsable line throws too.
 */
export function loadMusiqueJsonl(text: string, source = 'musique', options: LoadOptions = {}): LoadResult {
  return loadJsonLinesWith(
    text,
    (records, lines) => loadMusique(records, source, { ...options, lines }),
    options,
  );
}

/** Shared by the JSON-lines loaders: parse, convert, and merge the parse problems in line order. */
export function loadJsonLinesWith(
  text: string,
  load: (records: unknown[], lines: number[]) => LoadResult,
  options: LoadOptions = {},
): LoadResult {
  const { records, lines, problems } = parseJsonLines(text);
  // In strict mode a bad line stops the load, unless a bad record comes first (load throws first then).
  const firstBadLine = problems[0]?.line ?? Number.POSITIVE_INFINITY;
  const result = load(
    options.strict ? records.filter((_, k) => lines[k] < firstBadLine) : records,
    options.strict ? lines.filter((l) => l < firstBadLine) : lines,
  );
  if (options.strict && problems.length > 0) throw new TaskRecordError(problems[0]);
  const all = [...problems, ...result.problems].sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
  return { tasks: result.tasks, skipped: all.length, problems: all, repairs: result.repairs };
}
