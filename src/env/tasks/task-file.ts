/**
 * A user's task file, bytes to tasks, with one clear error for a file that cannot be read at all:
 *
 *   readTaskFile(bytes, 'hotpotqa' | '2wiki' | 'musique', fileName, { strict })
 *     -> LoadResult (tasks, skipped records, repairs; each with its line)
 *     throws TaskFileError   the file as a whole is unusable: not UTF-8, not JSON, JSON lines where a
 *                            JSON array is expected (or the reverse), a truncated file, … The message is
 *                            one line: `file:line:column: expected …, found … (hint)`, never the
 *                            file's contents beyond a short token.
 *     throws TaskRecordError with strict, at the first bad record.
 *
 * A UTF-8 byte-order mark is accepted and dropped. HotpotQA and 2Wiki files are one JSON array of
 * records; MuSiQue files are JSON lines (one record per line).
 */

import { loadHotpotQa } from './hotpotqa.ts';
import { describeAt, lineColumn, linesOfOffsets, scanJson } from './json-scan.ts';
import { loadJsonLinesWith, loadMusique } from './musique.ts';
import {
  countByKind,
  formatLoadProblem,
  type LoadOptions,
  type LoadProblem,
  type LoadResult,
  stripBom,
} from './schema.ts';
import { loadTwoWiki } from './twowiki.ts';

export const TASK_FILE_KINDS = ['hotpotqa', '2wiki', 'musique'] as const;
export type TaskFileKind = (typeof TASK_FILE_KINDS)[number];

/** The file as a whole cannot be read as the task set it was given as. */
export class TaskFileError extends Error {
  readonly file: string;
  readonly line: number;
  readonly column: number;
  readonly expected: string;
  readonly found: string;
  readonly hint?: string;
  constructor(
    file: string,
    at: { line: number; column: number },
    expected: string,
    found: string,
    hint?: string,
  ) {
    super(`${file}:${at.line}:${at.column}: expected ${expected}, found ${found}${hint ? ` (${hint})` : ''}`);
    this.name = 'TaskFileError';
    this.file = file;
    this.line = at.line;
    this.column = at.column;
    this.expected = expected;
    this.found = found;
    this.hint = hint;
  }
}

const FORMAT: Record<TaskFileKind, 'array' | 'lines'> = {
  hotpotqa: 'array',
  '2wiki': 'array',
  musique: 'lines',
};

export function readTaskFile(
  input: Uint8Array | string,
  kind: TaskFileKind,
  file: string,
  options: Pick<LoadOptions, 'strict'> = {},
): LoadResult {
  if (!(TASK_FILE_KINDS as readonly string[]).includes(kind))
    throw new TypeError(`readTaskFile: unknown task file kind ${JSON.stringify(kind)}`);
  const text = stripBom(typeof input === 'string' ? input : decodeUtf8(input, file));
  if (text.trim() === '') {
    throw new TaskFileError(
      file,
      { line: 1, column: 1 },
      expectedTop(kind),
      'end of file',
      'the file is empty',
    );
  }
  return FORMAT[kind] === 'array'
    ? readArrayFile(text, kind, file, options)
    : readLinesFile(text, kind, file, options);
}

function expectedTop(kind: TaskFileKind): string {
  return FORMAT[kind] === 'array' ? `a JSON array of ${kind} records` : `one JSON ${kind} record per line`;
}

/** Strict UTF-8; a bad byte is named with its line and column, with a hint for common binary formats. */
function decodeUtf8(bytes: Uint8Array, file: string): string {
  const hint = binaryHint(bytes);
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    // Find the first invalid byte: decode growing prefixes would be quadratic, so validate by hand.
    const bad = firstInvalidUtf8(bytes);
    const before = new TextDecoder('utf-8').decode(bytes.subarray(0, bad));
    const at = lineColumn(before, before.length);
    throw new TaskFileError(
      file,
      at,
      'UTF-8 text',
      `byte 0x${bytes[bad].toString(16).padStart(2, '0')}`,
      hint,
    );
  }
}

function binaryHint(bytes: Uint8Array): string | undefined {
  const b = (i: number) => bytes[i] ?? -1;
  if (b(0) === 0x1f && b(1) === 0x8b) return 'this looks like a gzip file: decompress it first';
  if (b(0) === 0x50 && b(1) === 0x4b && b(2) === 0x03 && b(3) === 0x04)
    return 'this looks like a zip file: extract it first';
  if (b(0) === 0x50 && b(1) === 0x41 && b(2) === 0x52 && b(3) === 0x31)
    return 'this looks like a parquet file: the task loaders read JSON and JSON lines';
  if ((b(0) === 0xff && b(1) === 0xfe) || (b(0) === 0xfe && b(1) === 0xff))
    return 'this looks like UTF-16 text: save it as UTF-8';
  return undefined;
}

function firstInvalidUtf8(bytes: Uint8Array): number {
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i];
    const len =
      b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    if (len === 0) return i;
    if (i + len > bytes.length) return i;
    for (let k = 1; k < len; k++) if ((bytes[i + k] & 0xc0) !== 0x80) return i;
    // Overlong 3/4-byte forms, surrogates and code points past U+10FFFF.
    const b1 = bytes[i + 1];
    if (
      (b === 0xe0 && b1 < 0xa0) ||
      (b === 0xed && b1 >= 0xa0) ||
      (b === 0xf0 && b1 < 0x90) ||
      (b === 0xf4 && b1 >= 0x90)
    )
      return i;
    i += len;
  }
  return bytes.length - 1;
}

function readArrayFile(text: string, kind: TaskFileKind, file: string, options: LoadOptions): LoadResult {
  let records: unknown;
  try {
    records = JSON.parse(text);
  } catch {
    records = undefined;
  }
  const scan = scanJson(text);
  if (!scan.ok) {
    const at = lineColumn(text, scan.offset);
    throw new TaskFileError(
      file,
      at,
      scan.expected,
      scan.found,
      arrayFileHint(text, kind, scan.offset, scan.expected),
    );
  }
  if (!Array.isArray(records)) {
    const start = text.length - text.trimStart().length;
    const shape =
      records === null ? 'null' : typeof records === 'object' ? 'a JSON object' : `a JSON ${typeof records}`;
    let hint = `${kind}:FILE takes a JSON array of records`;
    if (typeof records === 'object' && records !== null) {
      const looksLikeRecord = ['_id', 'id', 'question'].some((k) => Object.hasOwn(records as object, k));
      const listKey = Object.entries(records).find(([, v]) => Array.isArray(v))?.[0];
      hint =
        looksLikeRecord || listKey === undefined
          ? 'one record? wrap it in [ ]'
          : `its key ${JSON.stringify(listKey.slice(0, 40))} holds a list: the records must be the top-level array`;
    }
    throw new TaskFileError(file, lineColumn(text, start), expectedTop(kind), shape, hint);
  }
  const lines = linesOfOffsets(text, scan.arrayElementStarts);
  const load = kind === '2wiki' ? loadTwoWiki : loadHotpotQa;
  return load(records, kind, { ...options, lines });
}

/** Why a JSON array file failed to parse, in user terms. */
function arrayFileHint(
  text: string,
  kind: TaskFileKind,
  offset: number,
  expected: string,
): string | undefined {
  if (offset >= text.length) return 'the file looks truncated';
  if (expected === 'end of file') {
    // A second top-level value: JSON lines, or two arrays pasted together.
    const lineStart = text.lastIndexOf('\n', offset - 1) + 1;
    if (text.slice(lineStart, offset).trim() === '' && text[offset] === '{')
      return `this looks like JSON lines (one record per line); ${kind}:FILE takes one JSON array`;
    return 'there is more after the end of the JSON value';
  }
  return undefined;
}

function readLinesFile(text: string, kind: TaskFileKind, file: string, options: LoadOptions): LoadResult {
  const first = text.trimStart();
  const start = text.length - first.length;
  if (first.startsWith('[')) {
    throw new TaskFileError(
      file,
      lineColumn(text, start),
      'a JSON object on each line',
      "'['",
      `this looks like a JSON array; ${kind}:FILE takes JSON lines (one record per line)`,
    );
  }
  const result = loadJsonLinesWith(
    text,
    (records, lines) => loadMusique(records, kind, { ...options, lines }),
    options,
  );
  // No record loaded and the first record line is not JSON: the file as a whole is something else
  // (pretty-printed JSON, CSV, a truncated one-line file, …).
  const firstProblem = result.problems[0];
  const firstLine = lineColumn(text, start).line;
  if (result.tasks.length === 0 && firstProblem?.kind === 'invalid JSON' && firstProblem.line === firstLine) {
    const lines = text.split('\n');
    const lineText = (lines[firstLine - 1] ?? '').replace(/\r$/, '');
    const scan = scanJson(lineText);
    const column = scan.ok ? 1 : lineColumn(lineText, scan.offset).column;
    const found = scan.ok ? describeAt(lineText, 0) : scan.found;
    const expected = scan.ok ? 'a JSON object on each line' : scan.expected;
    const hint =
      !scan.ok && scan.offset >= lineText.length && lines.slice(firstLine).every((l) => l.trim() === '')
        ? 'the file looks truncated'
        : first.startsWith('{')
          ? 'this looks like one JSON value spread over several lines; JSON lines need one record per line'
          : 'the first record line is not JSON';
    throw new TaskFileError(
      file,
      { line: firstLine, column },
      expected,
      found === 'end of file' ? 'end of line' : found,
      hint,
    );
  }
  return result;
}

/** One problem as a compiler-style line: `file:12: record 11 (id "5a8b") skipped: missing answer`. */
export function describeLoadProblem(file: string, problem: LoadProblem): string {
  const { line, ...rest } = problem;
  return `${file}${line !== undefined ? `:${line}` : ''}: ${formatLoadProblem(rest)}`;
}

/**
 * The summary by reason, one line, or null when every record loaded as is:
 * `file: 97 tasks; skipped 3: missing answer ×2, duplicate title ×1; repaired 1: supporting fact out of range ×1`.
 */
export function summarizeLoad(file: string, result: LoadResult): string | null {
  if (result.problems.length === 0 && result.repairs.length === 0) return null;
  const list = (problems: readonly LoadProblem[]) =>
    countByKind(problems)
      .map(([kind, n]) => `${kind} ×${n}`)
      .join(', ');
  const parts = [`${file}: ${result.tasks.length} task(s)`];
  if (result.problems.length > 0) parts.push(`skipped ${result.problems.length}: ${list(result.problems)}`);
  if (result.repairs.length > 0) {
    parts.push(`repaired ${result.repairs.length}: ${list(result.repairs)}`);
  }
  return parts.join('; ');
}
