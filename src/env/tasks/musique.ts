/**
 * MuSiQue-Ans records (JSON lines) → tasks. A record is
 * `{id, question, answer, answer_aliases, answerable, paragraphs: [{idx, title, paragraph_text, is_supporting}],
 * question_decomposition}`. Unanswerable records (MuSiQue-Full) have no gold answer and are skipped.
 */
import { isJsonObject } from '../json.ts';
import { loadRecords } from './hotpotqa.ts';
import { type LoadResult, type Passage, parseJsonLines, passageId, uniqueStrings } from './schema.ts';

export function loadMusique(records: unknown, source = 'musique'): LoadResult {
  return loadRecords(records, (record) => {
    if (!isJsonObject(record)) return 'record is not an object';
    const { id, question, answer } = record;
    if (typeof id !== 'string' || id === '') return 'missing id';
    if (typeof question !== 'string' || question.trim() === '') return 'missing question';
    if (record.answerable === false) return 'unanswerable';
    if (typeof answer !== 'string' || answer.trim() === '') return 'missing answer';
    const aliases = record.answer_aliases ?? [];
    if (!Array.isArray(aliases) || !aliases.every((a) => typeof a === 'string')) {
      return 'answer_aliases is not a list of strings';
    }
    if (!Array.isArray(record.paragraphs) || record.paragraphs.length === 0) return 'missing paragraphs';

    const passages: Passage[] = [];
    const supportingIds: string[] = [];
    for (const p of record.paragraphs) {
      if (!isJsonObject(p) || typeof p.title !== 'string' || typeof p.paragraph_text !== 'string') {
        return 'paragraph is not {title, paragraph_text}';
      }
      const pid = passageId(p.title, p.paragraph_text);
      if (!passages.some((q) => q.id === pid))
        passages.push({ id: pid, title: p.title, text: p.paragraph_text });
      if (p.is_supporting === true) supportingIds.push(pid);
    }
    if (supportingIds.length === 0) return 'no supporting paragraph';

    const decomposition = Array.isArray(record.question_decomposition) ? record.question_decomposition : [];
    const hops = decomposition.length;
    return {
      id,
      source,
      question: question.trim(),
      answers: uniqueStrings([answer, ...(aliases as string[])]),
      passages,
      supportingIds: uniqueStrings(supportingIds),
      // MuSiQue ids start with the hop pattern, e.g. "2hop__…", "3hop1__…".
      type: id.split('__')[0],
      meta: { hops },
    };
  });
}

/** Convenience: JSON-lines text → tasks, with unparsable lines counted as skipped records. */
export function loadMusiqueJsonl(text: string, source = 'musique'): LoadResult {
  const { records, problems } = parseJsonLines(text);
  const result = loadMusique(records, source);
  return {
    tasks: result.tasks,
    skipped: result.skipped + problems.length,
    problems: [...problems, ...result.problems],
  };
}
