/**
 * The prompt an episode starts from: a system message with the rules of the game and a user message
 * with the question. Tools are not listed here: the chat template renders them from the ToolSpecs.
 */
import type { ChatMessage } from './types.ts';

export const DEFAULT_SYSTEM_PROMPT = [
  'You answer questions by searching a knowledge base. The answer is not in your memory: look it up.',
  'In each turn, first think inside <think>...</think>. Then either call one tool inside',
  '<tool_call>...</tool_call>, or, once the retrieved passages contain the answer, give it as',
  '<answer>...</answer>: a short phrase (a name, a place, a year, or yes / no), nothing else.',
].join('\n');

/** The user message for a question. Kept in one place so prompts and parquet exports agree. */
export function formatUserPrompt(question: string): string {
  return `Question: ${question}`;
}

/** The first two messages of an episode. */
export function initialMessages(question: string, systemPrompt = DEFAULT_SYSTEM_PROMPT): ChatMessage[] {
  return [
    { role: 'system', content: systemPrompt },
    { role: 'user', content: formatUserPrompt(question) },
  ];
}
