/**
 * Oracle: a scripted policy that solves synthetic questions by searching, one hop per turn.
 *
 * It knows the question templates (their structure), not the world: every fact it uses is read from the
 * search tool's responses in the episode history, so its accuracy is earned through retrieval. It is
 * stateless (progress is rebuilt from the history on each turn) and writes turns in the exact Qwen3
 * format (`<think>`, `<tool_call>`, `<answer>`), so its episodes double as supervised warm-start traces.
 *
 * Two styles of `<think>` text:
 *   'full'    (default) the question restated, every fact found so far, then the next step;
 *   'compact' only the facts not yet written in an earlier turn, then the next step: one or two short
 *             lines, so a small model trained on CPU sees short episodes (see src/env/presets.ts).
 *             Every name it writes is preceded by a space, as in the question and the passages: Qwen's
 *             tokenizer spells " Tide of Condbral" as ĠTide Ġof ĠCond bral but "Tide of Condbral" after a
 *             quote or a line break as T ide Ġof ĠCond bral, so a quoted name is not a copy of its source
 *             tokens and a model without pretraining cannot copy it (docs/results.md, fifth session). So
 *             facts are bullets ("- Tide of Condbral was written by …"), the next step is `Next, search
 *             for Tide of Condbral.`, and the search query and the answer start with a space.
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

export type OracleStyle = 'full' | 'compact';

export interface OraclePolicyOptions {
  /** How much the `<think>` text says; default 'full'. */
  style?: OracleStyle;
}

export function createOraclePolicy(options: OraclePolicyOptions = {}): Policy {
  const style = options.style ?? 'full';
  if (style !== 'full' && style !== 'compact') {
    throw new Error(`createOraclePolicy: style must be 'full' or 'compact', got ${JSON.stringify(style)}`);
  }
  return {
    name: 'oracle',
    async act(state: Readonly<State>, tools: readonly ToolSpec[]) {
      const search = findSearchTool(tools);
      if (!search)
        return answerTurn('No search tool is available, so I cannot look anything up.', UNKNOWN_ANSWER);
      const reader = new SearchHistoryReader(searchResponses(state.messages, search.function.name));
      // The lines before the conclusion. Compact: facts already stated in an earlier turn's reasoning
      // stay there (the Qwen3 template keeps the reasoning of every turn of the current episode).
      const facts = (): string[] => {
        if (style === 'full') return [`The question: ${state.question}`, ...reader.notes];
        const earlier = state.messages
          .filter((m) => m.role === 'assistant')
          .map((m) => m.content)
          .join('\n');
        return reader.notes.filter((note) => !earlier.includes(note)).map((note) => `- ${note}`);
      };
      // Compact: the answer and the query start with a space (see the header).
      const spaced = (text: string) => (style === 'compact' ? ` ${text}` : text);
      try {
        const answer = solveQuestion(state.question, reader);
        return answerTurn([...facts(), `So the answer is ${answer}.`].join('\n'), spaced(answer));
      } catch (error) {
        if (!(error instanceof SolveStop)) throw error;
        if (error.query !== null) {
          const next =
            style === 'full' ? `Next I need to ${error.message}.` : `Next, search for ${error.query}.`;
          return toolCallTurn([...facts(), next].join('\n'), search.function.name, {
            query: spaced(error.query),
          });
        }
        return answerTurn([...facts(), `I cannot go on: ${error.message}.`].join('\n'), UNKNOWN_ANSWER);
      }
    },
  };
}
