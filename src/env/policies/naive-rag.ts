/**
 * Naive RAG: retrieve once with the question as the query, then answer from those passages.
 *
 * Turn 1 calls the task's search tool with the question; turn 2 is `<answer>{reader(question, response)}
 * </answer>`. The reader is where the baselines differ:
 *   - the paper's baseline: the model reads the passages in one prompt and answers
 *     (modelPassageReader in src/agent/policy/model-naive-rag.ts);
 *   - the scripted reader (default): follows the synthetic question's structure through the retrieved
 *     passages only and answers "unanswerable" when the chain leaves them. It measures how much of a
 *     synthetic task one retrieval covers (an upper bound for a perfect reader) and cannot read any
 *     other data: it answers every real HotpotQA / MuSiQue question "unanswerable".
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

/** Report name of Naive RAG with the scripted reader, which says what its figure means. */
export const SCRIPTED_NAIVE_RAG_NAME = 'naive-rag (rule-based reader: upper bound, synthetic only)';

export function createNaiveRagPolicy(
  reader: PassageReader = scriptedReader,
  name = reader === scriptedReader ? SCRIPTED_NAIVE_RAG_NAME : 'naive-rag',
): Policy {
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
