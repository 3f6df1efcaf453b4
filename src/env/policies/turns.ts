/**
 * Assistant turns in the exact text a Qwen3 model writes and Qwen3's chat template re-renders:
 * `<think>\n{reasoning}\n</think>\n\n` followed by a tool call or the answer. Traces built from these
 * turns are valid supervised warm-start data: rendering them reproduces the same text.
 */
import { renderToolCall } from '../chat-format.ts';
import { stripNewlines } from '../text.ts';
import type { JsonObject } from '../types.ts';

function thinkBlock(reasoning: string): string {
  // The template strips newlines around the reasoning; keeping none there makes the text a fixed point.
  return `<think>\n${stripNewlines(reasoning)}\n</think>\n\n`;
}

export function toolCallTurn(reasoning: string, name: string, args: JsonObject): string {
  return thinkBlock(reasoning) + renderToolCall(name, args);
}

export function answerTurn(reasoning: string, answer: string): string {
  return `${thinkBlock(reasoning)}<answer>${answer}</answer>`;
}
