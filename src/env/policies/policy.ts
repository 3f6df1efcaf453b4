/**
 * A policy writes the assistant's next turn from the episode state. Scripted baselines implement it here;
 * the GPU model implements it in src/agent (see base-tool-call.ts for the adapter).
 */
import type { Action, State, ToolSpec } from '../types.ts';

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
