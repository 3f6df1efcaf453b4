/**
 * Parser for one assistant turn in Qwen / Hermes format:
 *
 *   <think>\n…\n</think>\n\n          optional reasoning (kept apart, never searched for tags)
 *   <tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>    zero or more calls
 *   <answer>…</answer>                the final answer
 *
 * It never throws: every problem becomes a message the model can read. A turn is well-formed when it has
 * no problems and is either a tool-call turn or an answer turn.
 *
 * Tags inside the JSON strings of a tool call are data, not markup: a search for "what does </tool_call>
 * mean" or for a title containing <|im_end|> is one well-formed call. Tags are looked for in a masked
 * copy of the turn where those string interiors are blanked (same offsets), and contents are cut from
 * the original text.
 */
import { isJsonObject } from './json.ts';
import { stripNewlines, stripStopTokens } from './text.ts';
import type { JsonObject } from './types.ts';

/** A tool call whose JSON parsed into `{ name: string, arguments: object }`. */
export interface ParsedToolCall {
  name: string;
  arguments: JsonObject;
  /** The text between the tags, for logs. */
  raw: string;
}

export type TurnKind = 'tool_calls' | 'answer' | 'none' | 'invalid';

export interface ParsedTurn {
  kind: TurnKind;
  /** Reasoning before `</think>`, or null when the turn has none. */
  think: string | null;
  /** The turn after the reasoning: where tool calls and the answer are looked for. */
  body: string;
  toolCalls: ParsedToolCall[];
  /** Trimmed text of the single `<answer>` block, or null. */
  answer: string | null;
  /** Format problems, phrased for the model (the env prefixes them with "Error: "). */
  errors: string[];
}

export interface ParseOptions {
  /** Longer turns are rejected unparsed (they are runaway generations). Default 20,000 characters. */
  maxChars?: number;
}

export const DEFAULT_MAX_ACTION_CHARS = 20_000;

const TAG = /<(\/?)(tool_call|answer)>/g;

/** Parses one assistant turn. Total: returns a result for every input, including non-strings. */
export function parseTurn(text: unknown, options: ParseOptions = {}): ParsedTurn {
  const maxChars = options.maxChars ?? DEFAULT_MAX_ACTION_CHARS;
  const result: ParsedTurn = {
    kind: 'invalid',
    think: null,
    body: '',
    toolCalls: [],
    answer: null,
    errors: [],
  };
  if (typeof text !== 'string') {
    result.errors.push('the response is not text');
    return result;
  }
  if (text.length > maxChars) {
    result.errors.push(`the response is too long (${text.length} characters; the limit is ${maxChars})`);
    return result;
  }
  // A decoder may hand over the stop token with the text; it ends the turn, it is not part of it.
  const cleaned = stripStopTokens(text);
  if (cleaned.trim() === '') {
    result.errors.push('the response is empty');
    return result;
  }
  const masked = maskToolCallStrings(cleaned);
  if (masked.includes('<|im_start|>') || masked.includes('<|im_end|>')) {
    result.errors.push('the response contains chat control tokens (<|im_start|> or <|im_end|>)');
  }

  const bodyStart = splitThink(cleaned, masked, result);
  scanBlocks(result.body, masked.slice(bodyStart), result);

  if (result.answer !== null && result.toolCalls.length > 0) {
    result.errors.push('a turn must either call tools or give the final <answer>, not both');
  }
  result.kind =
    result.errors.length > 0
      ? 'invalid'
      : result.toolCalls.length > 0
        ? 'tool_calls'
        : result.answer !== null
          ? 'answer'
          : 'none';
  return result;
}

/**
 * Separates the reasoning the way Qwen3's template does (everything before the last `</think>`), with
 * tags found in `masked`; returns the offset where the body starts.
 */
function splitThink(text: string, masked: string, result: ParsedTurn): number {
  const opens = countOccurrences(masked, '<think>');
  const closes = countOccurrences(masked, '</think>');
  if (opens > 1 || closes > 1) result.errors.push('use at most one <think>…</think> block');
  if (closes === 0) {
    if (opens > 0) {
      result.errors.push('unclosed <think> tag: close your reasoning with </think>');
      result.think = text.slice(masked.indexOf('<think>') + '<think>'.length);
      result.body = '';
      return text.length;
    }
    result.body = text;
    return 0;
  }
  const end = masked.lastIndexOf('</think>');
  const start = masked.slice(0, end).lastIndexOf('<think>');
  const before = text.slice(0, end);
  result.think = stripNewlines(start >= 0 ? before.slice(start + '<think>'.length) : before);
  // A bare </think> is fine: the <think> may have been part of the prompt.
  result.body = text.slice(end + '</think>'.length);
  return end + '</think>'.length;
}

/**
 * `text` with the interior of every JSON string inside a closed `<tool_call>…</tool_call>` blanked
 * (same length), so tags written as data inside arguments are not taken for markup. A block whose
 * strings do not close, or that never closes outside a string, is left as is: the parser then reports
 * it as the malformed block it is.
 */
function maskToolCallStrings(text: string): string {
  const OPEN = '<tool_call>';
  const CLOSE = '</tool_call>';
  let out = '';
  let copied = 0;
  let pos = text.indexOf(OPEN);
  while (pos !== -1) {
    const spans: [number, number][] = [];
    let inString = false;
    let escaped = false;
    let spanStart = 0;
    let end = -1;
    for (let i = pos + OPEN.length; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (inString) {
        if (escaped) escaped = false;
        else if (c === 0x5c) escaped = true;
        else if (c === 0x22) {
          inString = false;
          spans.push([spanStart, i]);
        } else if (c === 0x0a) break; // JSON strings hold no raw line break: this is no string
        continue;
      }
      if (c === 0x22) {
        inString = true;
        spanStart = i + 1;
      } else if (c === 0x3c && text.startsWith(CLOSE, i)) {
        end = i;
        break;
      }
    }
    if (end === -1) {
      pos = text.indexOf(OPEN, pos + OPEN.length);
      continue;
    }
    for (const [a, b] of spans) {
      out += text.slice(copied, a) + '_'.repeat(b - a);
      copied = b;
    }
    pos = text.indexOf(OPEN, end + CLOSE.length);
  }
  return out + text.slice(copied);
}

/** Finds `<tool_call>` and `<answer>` blocks (tags located in `masked`); reports stray, nested, mismatched and unclosed tags. */
function scanBlocks(body: string, masked: string, result: ParsedTurn): void {
  const answers: string[] = [];
  let open: { tag: string; contentStart: number } | null = null;
  for (const match of masked.matchAll(TAG)) {
    const closing = match[1] === '/';
    const tag = match[2];
    const index = match.index ?? 0;
    if (open === null) {
      if (closing) {
        result.errors.push(`unexpected </${tag}> without an opening <${tag}>`);
        return;
      }
      open = { tag, contentStart: index + match[0].length };
    } else if (!closing) {
      result.errors.push(`nested <${tag}> inside <${open.tag}>: close each block before opening another`);
      return;
    } else if (tag !== open.tag) {
      result.errors.push(`mismatched </${tag}> inside <${open.tag}>`);
      return;
    } else {
      const content = body.slice(open.contentStart, index);
      if (tag === 'tool_call') parseToolCallJson(content, result);
      else answers.push(content.trim());
      open = null;
    }
  }
  if (open !== null) {
    result.errors.push(`unclosed <${open.tag}> tag: close it with </${open.tag}>`);
    return;
  }
  if (answers.length > 1) result.errors.push('give exactly one <answer>…</answer>');
  if (answers.length >= 1) {
    if (answers[0] === '') result.errors.push('the <answer> is empty');
    result.answer = answers[0];
  }
}

function parseToolCallJson(raw: string, result: ParsedTurn): void {
  const text = raw.trim();
  if (text === '') {
    result.errors.push('empty <tool_call>: write {"name": <tool-name>, "arguments": {…}}');
    return;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    result.errors.push(`invalid JSON in <tool_call>: ${(error as Error).message}`);
    return;
  }
  if (!isJsonObject(value)) {
    result.errors.push('a <tool_call> must hold a JSON object {"name": …, "arguments": {…}}');
    return;
  }
  if (typeof value.name !== 'string' || value.name.trim() === '') {
    result.errors.push('a <tool_call> needs a "name" string');
    return;
  }
  let args: unknown = value.arguments;
  // OpenAI clients send arguments as a JSON string; the chat template accepts that form too.
  if (typeof args === 'string') {
    try {
      args = JSON.parse(args);
    } catch {
      // fall through to the object check below
    }
  }
  if (!isJsonObject(args)) {
    result.errors.push(`the call to '${value.name}' needs an "arguments" object (use {} for none)`);
    return;
  }
  result.toolCalls.push({ name: value.name, arguments: args as JsonObject, raw: text });
}

function countOccurrences(text: string, needle: string): number {
  let count = 0;
  for (let i = text.indexOf(needle); i !== -1; i = text.indexOf(needle, i + needle.length)) count++;
  return count;
}

/** Extracts the final answer from an assistant turn, or null (used for scoring, lenient on format). */
export function extractAnswer(text: string): string | null {
  const parsed = parseTurn(text, { maxChars: Number.MAX_SAFE_INTEGER });
  return parsed.answer;
}
