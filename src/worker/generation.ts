// The Generate form's settings and the prompt they make, as plain functions (no GPU, no React), so
// the engine (src/worker/engine.ts), the page and the tests build prompts the same way.
import type { GenerationConfig } from '../agent/model/config.ts';
import type { ChatMessage, ToolSpec } from '../agent/tokenizer/qwen-tokenizer.ts';
import { toToolSpec } from '../env/tool.ts';
import { createSearchTool } from '../env/tools/search.ts';

/** What the Generate form holds; numbers as typed, checked when Generate is pressed. */
export interface GenSettings {
  system: string;
  user: string;
  offerSearchTool: boolean;
  /** Prompt for models without a tokenizer: token ids separated by spaces or commas. */
  promptIds: string;
  temperature: string;
  topP: string;
  topK: string;
  maxNewTokens: string;
  seed: string;
}

/** The sampling settings, checked. */
export interface SamplingSettings {
  temperature: number;
  topP: number;
  topK: number;
  maxNewTokens: number;
  seed: number;
}

export const DEFAULT_SYSTEM_PROMPT = 'You are a helpful assistant.';
export const DEFAULT_USER_PROMPT = 'Who wrote "The Old Man and the Sea"? Search if you need to.';

/** The search tool as the chat template sees it (OpenAI function format, from src/env). */
export const SEARCH_TOOL_SPEC: ToolSpec = (() => {
  const spec = toToolSpec(createSearchTool([]));
  // A JSON Schema is a plain JSON object; the tokenizer's ToolSpec types it as a record.
  return { type: 'function', function: { ...spec.function, parameters: { ...spec.function.parameters } } };
})();

export const DEFAULT_GEN_SETTINGS: GenSettings = {
  system: DEFAULT_SYSTEM_PROMPT,
  user: DEFAULT_USER_PROMPT,
  offerSearchTool: true,
  promptIds: '1 2 3 4 5',
  temperature: '0',
  topP: '1',
  topK: '0',
  maxNewTokens: '32',
  seed: '0',
};

function parseNumber(
  label: string,
  text: string,
  ok: (v: number) => boolean,
  rule: string,
  integer = false,
): number {
  const v = Number(text.trim());
  if (text.trim() === '' || !Number.isFinite(v) || (integer && !Number.isInteger(v)) || !ok(v)) {
    throw new Error(`${label} must be ${rule} (got "${text}")`);
  }
  return v;
}

export function parseGenSettings(s: GenSettings): SamplingSettings {
  return {
    temperature: parseNumber(
      'temperature',
      s.temperature,
      (v) => v >= 0 && v <= 100,
      'a number ≥ 0 (0 = greedy)',
    ),
    topP: parseNumber('top-p', s.topP, (v) => v > 0 && v <= 1, 'in (0, 1]'),
    topK: parseNumber('top-k', s.topK, (v) => v >= 0, 'an integer ≥ 0 (0 = off)', true),
    maxNewTokens: parseNumber(
      'max new tokens',
      s.maxNewTokens,
      (v) => v >= 1 && v <= 8192,
      'an integer 1–8192',
      true,
    ),
    seed: parseNumber('seed', s.seed, (v) => v >= 0 && v <= 0xffffffff, 'an integer 0–4294967295', true),
  };
}

/** "1 2, 3" -> [1, 2, 3], each checked against the vocabulary. */
export function parsePromptIds(text: string, vocabSize: number): number[] {
  const parts = text.split(/[\s,]+/).filter((p) => p !== '');
  if (parts.length === 0) throw new Error('the prompt needs at least one token id');
  return parts.map((p) => {
    const id = Number(p);
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
      throw new Error(`prompt token "${p}" is not an id in 0–${vocabSize - 1}`);
    }
    return id;
  });
}

export function settingsFromGenerationConfig(g: GenerationConfig | null, current: GenSettings): GenSettings {
  if (g === null) return current;
  return {
    ...current,
    temperature: g.doSample ? String(g.temperature) : '0',
    topP: String(g.topP),
    topK: String(g.topK),
  };
}

/** The chat for a tokenizer model: the system message (when not empty) and the user message. */
export function chatMessages(s: Pick<GenSettings, 'system' | 'user'>): ChatMessage[] {
  if (s.user.trim() === '') throw new Error('the user message is empty');
  const messages: ChatMessage[] = [];
  if (s.system.trim() !== '') messages.push({ role: 'system', content: s.system });
  messages.push({ role: 'user', content: s.user });
  return messages;
}

/** The tools the chat template lists. */
export function offeredTools(s: Pick<GenSettings, 'offerSearchTool'>): ToolSpec[] | undefined {
  return s.offerSearchTool ? [SEARCH_TOOL_SPEC] : undefined;
}
