/**
 * Naive RAG: retrieve once with the question as the query, then answer from those passages.
 *
 * The default reader is scripted (it follows the synthetic question's structure through the retrieved
 * passages only and answers "unknown" when the chain leaves them), which measures how much of a task
 * one retrieval covers. A model-backed reader can be passed instead (src/agent).
 */
import { SolveStop, solveQuestion } from '../tasks/synthetic.ts';
import { parseSearchResponse } from '../tools/search.ts';
import type { State, ToolSpec } from '../types.ts';
import { toolExchanges } from './history.ts';
import { UNKNOWN_ANSWER } from './oracle.ts';
import { findSearchTool, type Policy } from './policy.ts';
import { FixedPassagesReader } from './readers.ts';
import { answerTurn, toolCallTurn } from './turns.ts';

/** Answers a question from retrieved passages (the search tool's response text). */
export type PassageReader = (question: string, retrieved: string) => Promise<string>;

/** The scripted reader: solve the synthetic question inside the retrieved passages, or say "unknown". */
export const scriptedReader: PassageReader = async (question, retrieved) => {
  const reader = new FixedPassagesReader(parseSearchResponse(retrieved));
  try {
    return solveQuestion(question, reader);
  } catch (error) {
    if (error instanceof SolveStop) return UNKNOWN_ANSWER;
    throw error;
  }
};

export function createNaiveRagPolicy(reader: PassageReader = scriptedReader, name = 'naive-rag'): Policy {
  return {
    name,
    async act(state: Readonly<State>, tools: readonly ToolSpec[]) {
      const search = findSearchTool(tools);
      if (!search) return answerTurn('No search tool is available.', UNKNOWN_ANSWER);
      const first = toolExchanges(state.messages).find((x) => x.name === search.function.name);
      if (!first) {
        return toolCallTurn('I will retrieve passages for the question.', search.function.name, {
          query: state.question,
        });
      }
      const answer = (await reader(state.question, first.response ?? '')).trim() || UNKNOWN_ANSWER;
      return answerTurn('I answer from the retrieved passages.', answer);
    },
  };
}
