/**
 * A policy writes the assistant's next turn from the episode state. Scripted baselines implement it here;
 * the GPU model implements it in src/agent (see base-tool-call.ts for the adapter).
 */
import type { Action, State, ToolSpec } from '../types.ts';

/**
 * Thrown by a policy whose model cannot write another turn because the conversation already fills its
 * context window. runEpisode ends the episode there (done reason context_budget, scored as it stands)
 * instead of aborting the evaluation.
 */
export class ContextFullError extends Error {
  constructor(
    readonly tokens: number,
    readonly limit: number,
  ) {
    super(`the conversation is ${tokens} tokens, at the model's limit (${limit})`);
    this.name = 'ContextFullError';
  }
}

export interface Policy {
  /** Shown in reports. */
  readonly name: string;
  /** The next assistant turn, in the chat format the ToolEnv parses. */
  act(state: Readonly<State>, tools: readonly ToolSpec[]): Promise<Action>;
}

/** The search tool among the offered ones: named 'search', else the first with a string `query` parameter. */
export function findSearchTool(tools: readonly ToolSpec[]): ToolSpec | undefined {
  return (
    tools.find((t) => t.function.name === 'search') ??
    tools.find((t) => t.function.parameters.properties?.query?.type === 'string')
  );
}
