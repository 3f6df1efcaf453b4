/**
 * 2WikiMultihopQA records → tasks. A record is a HotpotQA record plus `evidences: [[subject, relation,
 * object]]`, with `type` among comparison, inference, compositional and bridge_comparison. The public
 * passage file (`{title, text}` lines) loads with loadPassagesJsonl for corpus-level retrieval.
 */
import { isJsonObject } from '../json.ts';
import type { JsonValue } from '../types.ts';
import { loadRecords, parseHotpotLike } from './hotpotqa.ts';
import {
  type LoadOptions,
  type LoadProblem,
  type LoadResult,
  type Passage,
  parseJsonLines,
  passageId,
  showValue,
  skip,
} from './schema.ts';

export const TWOWIKI_TYPES = ['comparison', 'inference', 'compositional', 'bridge_comparison'] as const;

export function loadTwoWiki(records: unknown, source = '2wiki', options: LoadOptions = {}): LoadResult {
  return loadRecords(
    records,
    (record, repair) => {
      const parts = parseHotpotLike(record, repair);
      if ('skip' in parts) return parts;
      const r = record as Record<string, unknown>;
      if (typeof r.type !== 'string' || !(TWOWIKI_TYPES as readonly string[]).includes(r.type)) {
        return skip('unknown 2Wiki type', `unknown 2Wiki type ${showValue(r.type)}`);
      }
      const evidences: JsonValue[] = [];
      if (r.evidences !== undefined) {
        if (!Array.isArray(r.evidences)) return skip('evidences is not a list');
        for (const e of r.evidences) {
          if (!Array.isArray(e) || e.length !== 3 || !e.every((x) => typeof x === 'string')) {
            return skip('evidence is not [subject, relation, object]');
          }
          evidences.push(e as string[]);
        }
      }
      return {
        id: parts.id,
        source,
        question: parts.question,
        answers: [parts.answer],
        passages: parts.passages,
        supportingIds: parts.supportingIds,
        type: r.type,
        meta: { evidences, supportingFacts: parts.supportingFacts },
      };
    },
    options,
  );
}

/** Loads `{title, text}` JSON lines (the 2Wiki passage sample) into passages; bad lines are reported with their line. */
export function loadPassagesJsonl(text: string): {
  passages: Passage[];
  skipped: number;
  problems: LoadProblem[];
} {
  const { records, lines, problems } = parseJsonLines(text);
  const passages: Passage[] = [];
  const seen = new Set<string>();
  records.forEach((record, index) => {
    if (!isJsonObject(record) || typeof record.title !== 'string' || typeof record.text !== 'string') {
      problems.push({
        index,
        line: lines[index],
        kind: 'passage is not {title, text}',
        reason: 'passage is not {title, text}',
        action: 'skipped',
      });
      return;
    }
    const id = passageId(record.title, record.text);
    if (seen.has(id)) return; // identical duplicates are harmless; keep one
    seen.add(id);
    passages.push({ id, title: record.title, text: record.text });
  });
  problems.sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
  return { passages, skipped: problems.length, problems };
}
