/**
 * JSON text the way Python writes it, because chat templates render tool calls and tool specs with
 * Jinja's `tojson`, which is `json.dumps(x, ensure_ascii=False)`: separators `", "` and `": "`, keys in
 * insertion order, non-ASCII characters kept as they are.
 */

/**
 * Serialises a JSON-compatible value like Python's `json.dumps(value, ensure_ascii=False)`.
 * Known difference: Python writes floats that are whole numbers as `1.0`, JavaScript has no such type
 * and writes `1`; tool arguments parsed from model text never carry that distinction anyway.
 */
export function pythonJsonDumps(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (Number.isNaN(value)) return 'NaN';
    if (!Number.isFinite(value)) return value > 0 ? 'Infinity' : '-Infinity';
    return JSON.stringify(value);
  }
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (Array.isArray(value)) return `[${value.map(pythonJsonDumps).join(', ')}]`;
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}: ${pythonJsonDumps(v)}`).join(', ')}}`;
  }
  throw new TypeError(`pythonJsonDumps: cannot serialise a ${typeof value}`);
}

/** True for a plain JSON object (not null, not an array). */
export function isJsonObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Shortens text to at most `maxChars` characters, marking the cut with an ellipsis. */
export function truncateText(text: string, maxChars: number): string {
  if (maxChars <= 0) return '';
  if (text.length <= maxChars) return text;
  if (maxChars === 1) return '…';
  return `${text.slice(0, maxChars - 1)}…`;
}
