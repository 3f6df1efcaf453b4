/**
 * Oracle: a scripted policy that solves synthetic questions by searching, one hop per turn.
 *
 * It knows the question templates (their structure), not the world: every fact it uses is read from the
 * search tool's responses in the episode history, so its accuracy is earned through retrieval. It is
 * stateless (progress is rebuilt from the history on each turn) and writes turns in the exact Qwen3
 * format (`<think>`, `<tool_call>`, `<answer>`), so its episodes double as supervised warm-start traces.
 */
import { SolveStop, solveQuestion } from '../tasks/synthetic.ts';
import type { State, ToolSpec } from '../types.ts';
import { searchResponses } from './history.ts';
import { findSearchTool, type Policy } from './policy.ts';
import { SearchHistoryReader } from './readers.ts';
import { answerTurn, toolCallTurn } from './turns.ts';

/**
 * The answer the scripted policies give when they cannot find one. Chosen to contain neither "yes" nor
 * "no": substring EM would credit "unknown" for a "no" question.
 */
export const UNKNOWN_ANSWER = 'unanswerable';

export function createOraclePolicy(): Policy {
  return {
    name: 'oracle',
    async act(state: Readonly<State>, tools: readonly ToolSpec[]) {
      const search = findSearchTool(tools);
      if (!search)
        return answerTurn('No search tool is available, so I cannot look anything up.', UNKNOWN_ANSWER);
      const reader = new SearchHistoryReader(searchResponses(state.messages, search.function.name));
      const intro = `The question: ${state.question}`;
      try {
        const answer = solveQuestion(state.question, reader);
        return answerTurn([intro, ...reader.notes, `So the answer is ${answer}.`].join('\n'), answer);
      } catch (error) {
        if (!(error instanceof SolveStop)) throw error;
        if (error.query !== null) {
          const reasoning = [intro, ...reader.notes, `Next I need to ${error.message}.`].join('\n');
          return toolCallTurn(reasoning, search.function.name, { query: error.query });
        }
        return answerTurn(
          [intro, ...reader.notes, `I cannot go on: ${error.message}.`].join('\n'),
          UNKNOWN_ANSWER,
        );
      }
    },
  };
}
