/**
 * A JSON syntax checker that says where and why a text is not JSON, for task files that JSON.parse
 * rejects with a message that quotes the file (V8 prints the text around the error) and no line.
 *
 *   scanJson(text) -> { ok: true, arrayElementStarts } | { ok: false, offset, expected, found }
 *
 * It builds no values: one pass over the UTF-16 code units with an explicit stack (no recursion, so
 * nesting depth costs memory in the stack array only, capped at MAX_JSON_DEPTH), O(n) time. It also
 * returns where each element of a top-level array starts, so loaders can name a record's line.
 * Same grammar as JSON.parse (RFC 8259): no comments, no trailing commas, no NaN / Infinity.
 */

/** Deeper nesting is refused (JSON.parse itself throws a RangeError somewhere past ~10^5 levels). */
export const MAX_JSON_DEPTH = 10_000;

export type JsonScan =
  | {
      ok: true /** Offsets of the elements of a top-level array (empty for any other value). */;
      arrayElementStarts: number[];
    }
  | { ok: false; offset: number; expected: string; found: string };

/** What the scanner waits for next. */
enum Want {
  Value,
  ArrayFirst, // after '[': a value or ']'
  ArrayNext, // after an element: ',' or ']'
  ObjectFirst, // after '{': a key or '}'
  ObjectKey, // after ',' in an object
  Colon,
  ObjectNext, // after a member: ',' or '}'
  End,
}

const EXPECTED: Record<Want, string> = {
  [Want.Value]: 'a JSON value',
  [Want.ArrayFirst]: "a value or ']'",
  [Want.ArrayNext]: "',' or ']'",
  [Want.ObjectFirst]: 'a "key" or \'}\'',
  [Want.ObjectKey]: 'a "key" string',
  [Want.Colon]: "':'",
  [Want.ObjectNext]: "',' or '}'",
  [Want.End]: 'end of file',
};

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const WORD = /[A-Za-z_$][A-Za-z0-9_$]*/y;

export function scanJson(text: string): JsonScan {
  const stack: number[] = []; // 0x5b '[' or 0x7b '{'
  const arrayElementStarts: number[] = [];
  let want = Want.Value;
  let i = 0;
  const n = text.length;
  const fail = (offset: number, expected: string, found = describeAt(text, offset)): JsonScan => ({
    ok: false,
    offset,
    expected,
    found,
  });

  for (;;) {
    // Whitespace as JSON defines it: space, tab, line feed, carriage return.
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
      i++;
    }
    if (i >= n) {
      if (want === Want.End) return { ok: true, arrayElementStarts };
      return fail(n, EXPECTED[want]);
    }
    const c = text.charCodeAt(i);

    if (want === Want.End) return fail(i, EXPECTED[want]);
    if (want === Want.Colon) {
      if (c !== 0x3a) return fail(i, EXPECTED[want]);
      i++;
      want = Want.Value;
      continue;
    }
    if (want === Want.ArrayNext || want === Want.ObjectNext) {
      const close = want === Want.ArrayNext ? 0x5d : 0x7d;
      if (c === 0x2c) {
        i++;
        want = want === Want.ArrayNext ? Want.Value : Want.ObjectKey;
        continue;
      }
      if (c !== close) return fail(i, EXPECTED[want]);
      i++;
      stack.pop();
      want = afterValue(stack);
      continue;
    }
    if (want === Want.ObjectFirst || want === Want.ObjectKey) {
      if (want === Want.ObjectFirst && c === 0x7d) {
        i++;
        stack.pop();
        want = afterValue(stack);
        continue;
      }
      if (c !== 0x22) return fail(i, EXPECTED[want]);
      const end = scanString(text, i);
      if (typeof end !== 'number') return fail(end.offset, end.expected, end.found);
      i = end;
      want = Want.Colon;
      continue;
    }
    // Want.Value or Want.ArrayFirst.
    if (want === Want.ArrayFirst && c === 0x5d) {
      i++;
      stack.pop();
      want = afterValue(stack);
      continue;
    }
    if (stack.length === 1 && stack[0] === 0x5b) arrayElementStarts.push(i);
    if (c === 0x5b || c === 0x7b) {
      if (stack.length >= MAX_JSON_DEPTH) return fail(i, `at most ${MAX_JSON_DEPTH} levels of nesting`);
      stack.push(c);
      i++;
      want = c === 0x5b ? Want.ArrayFirst : Want.ObjectFirst;
      continue;
    }
    if (c === 0x22) {
      const end = scanString(text, i);
      if (typeof end !== 'number') return fail(end.offset, end.expected, end.found);
      i = end;
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      NUMBER.lastIndex = i;
      const m = NUMBER.exec(text);
      if (m === null) return fail(i, 'a number');
      i += m[0].length;
      // "01", "1.", "1e": the number stops early and the rest is not JSON.
      const next = text.charCodeAt(i);
      if ((next >= 0x30 && next <= 0x39) || next === 0x2e || next === 0x65 || next === 0x45)
        return fail(i, 'a complete number', `${describeAt(text, i)} inside a number`);
    } else {
      WORD.lastIndex = i;
      const m = WORD.exec(text);
      const word = m?.[0];
      if (word === 'true' || word === 'false' || word === 'null') i += word.length;
      else return fail(i, want === Want.ArrayFirst ? EXPECTED[want] : EXPECTED[Want.Value]);
    }
    want = afterValue(stack);
  }
}

function afterValue(stack: readonly number[]): Want {
  if (stack.length === 0) return Want.End;
  return stack[stack.length - 1] === 0x5b ? Want.ArrayNext : Want.ObjectNext;
}

/** Offset just past the closing quote of the string starting at `start`, or why it is not a string. */
function scanString(
  text: string,
  start: number,
): number | { offset: number; expected: string; found: string } {
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) return i + 1;
    if (c === 0x5c) {
      const e = text[i + 1];
      if (e === 'u') {
        if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6)))
          return { offset: i, expected: 'four hex digits after \\u', found: describeAt(text, i + 2) };
        i += 5;
      } else if (e !== undefined && '"\\/bfnrt'.includes(e)) {
        i += 1;
      } else {
        return {
          offset: i,
          expected: 'an escape (\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)',
          found: describeAt(text, i + 1),
        };
      }
    } else if (c < 0x20) {
      return {
        offset: i,
        expected: "a closing '\"'",
        found:
          c === 0x0a || c === 0x0d
            ? 'a line break inside a string'
            : `control character U+${hex4(c)} inside a string`,
      };
    }
  }
  return { offset: text.length, expected: "a closing '\"'", found: 'end of file inside a string' };
}

function hex4(c: number): string {
  return c.toString(16).toUpperCase().padStart(4, '0');
}

/**
 * A short description of what stands at `offset`: 'end of file', a quoted word of at most 20
 * characters, or one quoted character (code point for invisible ones). Never more of the file.
 */
export function describeAt(text: string, offset: number): string {
  if (offset >= text.length) return 'end of file';
  WORD.lastIndex = offset;
  const word = WORD.exec(text)?.[0];
  if (word !== undefined) return `'${word.length > 20 ? `${word.slice(0, 20)}…` : word}'`;
  const cp = text.codePointAt(offset) ?? 0;
  if (cp === 0x0a || cp === 0x0d) return 'end of line';
  if (cp < 0x20 || cp === 0x7f || (cp >= 0x80 && cp < 0xa0) || cp === 0xfeff || cp === 0xfffd)
    return `U+${hex4(cp)}`;
  return `'${String.fromCodePoint(cp)}'`;
}

/** 1-based line and column (in characters) of an offset; lines end at '\n'. */
export function lineColumn(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let i = text.indexOf('\n'); i !== -1 && i < offset; i = text.indexOf('\n', i + 1)) {
    line++;
    lineStart = i + 1;
  }
  // Columns count code points, as editors do, not UTF-16 units.
  let column = 1;
  for (let i = lineStart; i < offset; i++) {
    const c = text.charCodeAt(i);
    if (c < 0xdc00 || c > 0xdfff) column++;
  }
  return { line, column };
}

/** 1-based line of each offset (offsets ascending), in one pass. */
export function linesOfOffsets(text: string, offsets: readonly number[]): number[] {
  const out: number[] = [];
  let line = 1;
  let pos = 0;
  for (const offset of offsets) {
    for (let i = text.indexOf('\n', pos); i !== -1 && i < offset; i = text.indexOf('\n', i + 1)) {
      line++;
      pos = i + 1;
    }
    out.push(line);
  }
  return out;
}
