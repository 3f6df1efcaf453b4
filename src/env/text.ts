/**
 * Small string helpers written as loops on purpose: the regex equivalents (`/\n+$/`, `/\s*x\s*$/`)
 * backtrack quadratically on long runs of newlines or spaces, and model output can be 20,000 of them.
 */

/** Python's `s.lstrip('\n')`. */
export function lstripNewlines(s: string): string {
  let start = 0;
  while (start < s.length && s.charCodeAt(start) === 10) start++;
  return s.slice(start);
}

/** Python's `s.rstrip('\n')`. */
export function rstripNewlines(s: string): string {
  let end = s.length;
  while (end > 0 && s.charCodeAt(end - 1) === 10) end--;
  return s.slice(0, end);
}

/** Python's `s.strip('\n')`. */
export function stripNewlines(s: string): string {
  return rstripNewlines(lstripNewlines(s));
}

const STOP_TOKENS = ['<|im_end|>', '<|endoftext|>'];

/**
 * Removes the stop token(s) a decoder may leave at the end of a turn, with the white space around them;
 * the chat template adds its own `<|im_end|>`. Text without a trailing stop token is returned unchanged.
 */
export function stripStopTokens(text: string): string {
  let out = text;
  for (;;) {
    const trimmed = out.trimEnd();
    const token = STOP_TOKENS.find((t) => trimmed.endsWith(t));
    if (token === undefined) return out;
    out = trimmed.slice(0, trimmed.length - token.length).trimEnd();
  }
}
