/**
 * Base Tool Call: the untrained model with the tools offered. The model lives in src/agent; it plugs in
 * here as a `generate` function that continues the chat (apply the chat template with `tools`, add the
 * generation prompt, sample until `<|im_end|>`, return the decoded turn).
 */
import type { ChatMessage, State, ToolSpec } from '../types.ts';
import type { Policy } from './policy.ts';

export type GenerateTurn = (messages: readonly ChatMessage[], tools: readonly ToolSpec[]) => Promise<string>;

export function createBaseToolCallPolicy(generate: GenerateTurn, name = 'base-tool-call'): Policy {
  return {
    name,
    act(state: Readonly<State>, tools: readonly ToolSpec[]) {
      return generate(state.messages, tools);
    },
  };
}
