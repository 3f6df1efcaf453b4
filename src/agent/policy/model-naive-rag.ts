// Naive RAG with the model as the reader (the paper's Naive RAG baseline): the policy in
// src/env/policies/naive-rag.ts searches once with the question; this reader puts the retrieved
// passages and then the question into ONE user message, offers no tools, lets the model answer in one
// turn, and takes the answer from it:
//
//   messages = [{ role: 'user', content: instruction \n\n Passages:\n 1. title: text … \n\n Question: q }]
//   turn     = generate(messages, [])              (modelGenerateTurn: chat template, sample, decode)
//   answer   = <answer>…</answer> content if the turn has one, else the turn's text with its
//              <think> block, stray tags and extra white space stripped
//
// No system message: the ToolEnv's system prompt describes tool calls, which this prompt does not offer.

import { extractAnswer } from '../../env/parse.ts';
import type { GenerateTurn } from '../../env/policies/base-tool-call.ts';
import type { PassageReader } from '../../env/policies/naive-rag.ts';
import { stripStopTokens } from '../../env/text.ts';
import type { ChatMessage } from '../../env/types.ts';

export const NAIVE_RAG_INSTRUCTION =
  'Answer the question using the passages below. Give the answer inside <answer>...</answer>: ' +
  'a short phrase (a name, a place, a year, or yes / no), nothing else.';

/** The one user message of a Naive RAG prompt: instruction, the retrieved passages, then the question. */
export function naiveRagMessages(question: string, retrieved: string): ChatMessage[] {
  const passages = retrieved.trim() === '' ? '(no passages were retrieved)' : retrieved.trim();
  return [
    {
      role: 'user',
      content: `${NAIVE_RAG_INSTRUCTION}\n\nPassages:\n${passages}\n\nQuestion: ${question}`,
    },
  ];
}

/**
 * The answer in a model turn: the content of its `<answer>` block when it has a well-formed one; else
 * the whole turn, without stop tokens, the `<think>…</think>` reasoning (or an unclosed `<think>` and all
 * after it) and any remaining `<answer>` / `<tool_call>` / `<think>` tags, white space collapsed.
 * The ToolEnv re-wraps the result in `<answer>` tags, so no tag may survive. '' when nothing is left.
 */
export function answerFromTurn(turn: string): string {
  const tagged = extractAnswer(turn);
  if (tagged !== null && tagged !== '') return collapse(stripTags(tagged));
  let text = stripStopTokens(turn);
  const thinkEnd = text.lastIndexOf('</think>');
  if (thinkEnd >= 0) text = text.slice(thinkEnd + '</think>'.length);
  const thinkStart = text.indexOf('<think>');
  if (thinkStart >= 0) text = text.slice(0, thinkStart);
  return collapse(stripTags(text));
}

function stripTags(text: string): string {
  return text.replace(/<\/?(answer|tool_call|tool_response|think)>|<\|im_start\|>|<\|im_end\|>/g, ' ');
}

function collapse(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

export interface ModelReaderTurn {
  messages: ChatMessage[];
  /** The model's decoded turn. */
  turn: string;
  answer: string;
}

/**
 * A PassageReader backed by a model turn generator (modelGenerateTurn(model, tokenizer, options), or any
 * GenerateTurn). `onRead` sees each prompt, turn and extracted answer (logs, tests).
 */
export function modelPassageReader(
  generate: GenerateTurn,
  onRead?: (read: ModelReaderTurn) => void,
): PassageReader {
  return async (question, retrieved) => {
    const messages = naiveRagMessages(question, retrieved);
    const turn = await generate(messages, []);
    const answer = answerFromTurn(turn);
    onRead?.({ messages, turn, answer });
    return answer;
  };
}
