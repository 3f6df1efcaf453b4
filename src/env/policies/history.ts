/**
 * Reads an episode's tool traffic back from its messages: which calls were made and what came back.
 * Scripted policies are stateless and rebuild their progress from this on every turn.
 */
import { parseTurn } from '../parse.ts';
import type { ChatMessage, JsonObject } from '../types.ts';

export interface ToolExchange {
  name: string;
  arguments: JsonObject;
  /** The tool message answering the call, or null when none followed (e.g. the episode ended). */
  response: string | null;
}

/** Pairs each parsed tool call with the tool message that answered it (calls and responses in order). */
export function toolExchanges(messages: readonly ChatMessage[]): ToolExchange[] {
  const out: ToolExchange[] = [];
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (m.role !== 'assistant') continue;
    const calls = parseTurn(m.content, { maxChars: Number.MAX_SAFE_INTEGER }).toolCalls;
    const responses: string[] = [];
    for (let j = i + 1; j < messages.length && messages[j].role === 'tool'; j++)
      responses.push(messages[j].content);
    calls.forEach((call, k) => {
      out.push({ name: call.name, arguments: call.arguments, response: responses[k] ?? null });
    });
  }
  return out;
}

/**
 * Search responses by query, trimmed (the search ignores surrounding spaces, and the compact oracle
 * writes its queries with a leading one); the latest response wins when a query was repeated.
 */
export function searchResponses(messages: readonly ChatMessage[], toolName: string): Map<string, string> {
  const map = new Map<string, string>();
  for (const x of toolExchanges(messages)) {
    if (x.name === toolName && typeof x.arguments.query === 'string' && x.response !== null) {
      map.set(x.arguments.query.trim(), x.response);
    }
  }
  return map;
}
