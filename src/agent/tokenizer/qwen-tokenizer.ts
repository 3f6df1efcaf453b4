// The Qwen tokenizer and chat template, built from a checkpoint's own tokenizer.json and
// tokenizer_config.json: no network, no files fetched by the library.
//
// Tokenization and template rendering are transformers.js' (`Qwen2Tokenizer`, the same class
// AutoTokenizer picks for Qwen's tokenizer_class, and its Jinja engine), so prompts come out exactly
// as Python transformers' `apply_chat_template` renders them. The template is the one in
// tokenizer_config.json: Qwen3's (with <think> handling) for Qwen3 files, Qwen2.5's for Qwen2.5 files.
//
// The agent-facing format (Qwen's Hermes-style function calling):
//   <|im_start|>system\n<system text>\n\n# Tools\n\n...<tools>\n{tool json}\n</tools>\n\n...<|im_end|>\n
//   <|im_start|>user\n<question><|im_end|>\n
//   <|im_start|>assistant\n<tool_call>\n{"name": "search", "arguments": {...}}\n</tool_call><|im_end|>\n
//   <|im_start|>user\n<tool_response>\n<result>\n</tool_response><|im_end|>\n
//   <|im_start|>assistant\n

import { env, type Message, Qwen2Tokenizer } from '@huggingface/transformers';
import { TokenizerError } from '../model/errors.ts';
import { tokenizerVocabSize } from './vocab.ts';

/**
 * Special and control tokens of the Qwen2.5 / Qwen3 chat format, by text. Their ids depend on the
 * vocabulary (151643.. in Qwen's full one, small numbers in a trimmed one like qwen-tiny's), so they
 * are looked up in the loaded tokenizer: specialId(name).
 */
export const QWEN_TOKENS = {
  endOfText: { text: '<|endoftext|>' }, // padding / document end
  imStart: { text: '<|im_start|>' },
  imEnd: { text: '<|im_end|>' }, // end of a chat turn: the chat models' EOS
  toolCall: { text: '<tool_call>' },
  toolCallEnd: { text: '</tool_call>' },
  toolResponse: { text: '<tool_response>' }, // Qwen3 vocabulary only
  toolResponseEnd: { text: '</tool_response>' }, // Qwen3 vocabulary only
  think: { text: '<think>' }, // Qwen3 vocabulary only
  thinkEnd: { text: '</think>' }, // Qwen3 vocabulary only
} as const;

/** Tokens every Qwen chat tokenizer we accept has: the chat turns and Hermes tool calls need them. */
const REQUIRED_TOKENS = ['imStart', 'imEnd', 'endOfText', 'toolCall', 'toolCallEnd'] as const;

export type QwenTokenName = keyof typeof QWEN_TOKENS;

export interface ToolCall {
  type?: 'function';
  function: {
    name: string;
    /** An object (rendered with tojson) or an already-serialised JSON string (rendered as is). */
    arguments: Record<string, unknown> | string;
  };
}

/**
 * A chat message as the template reads it. One interface rather than a union per role, so that
 * src/env's ChatMessage (the ToolEnv's history) is assignable as is: tool_calls and
 * reasoning_content are read only on assistant messages, name only on tool messages.
 */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  tool_calls?: ToolCall[];
  reasoning_content?: string;
  name?: string;
}

/** A function tool as OpenAI / HF describe it: JSON Schema parameters. */
export interface ToolSpec {
  type: 'function';
  function: {
    name: string;
    description?: string;
    /** JSON Schema; any object (the template only serialises it). */
    parameters?: object;
  };
}

export interface ChatTemplateOptions {
  tools?: ToolSpec[];
  /** End with '<|im_start|>assistant\n' so the model writes the next assistant turn. */
  addGenerationPrompt?: boolean;
  /** Qwen3 only: false adds an empty '<think>\n\n</think>\n\n' so the model answers without thinking. */
  enableThinking?: boolean;
}

type Json = Record<string, unknown>;

function parseJson(text: string | Json, file: string): Json {
  if (typeof text !== 'string') return text;
  try {
    const v: unknown = JSON.parse(text);
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) return v as Json;
  } catch (e) {
    throw new TokenizerError(file, `not JSON (${(e as Error).message})`);
  }
  throw new TokenizerError(file, 'not a JSON object');
}

export class QwenTokenizer {
  /** Token ids the tokenizer can produce (151,669 for Qwen3's, fewer than the 151,936 embedding rows). */
  readonly vocabSize: number;
  /** Token id ending a chat turn (config's eos_token, <|im_end|> for chat models). */
  readonly eosTokenId: number;
  /** Token id used for padding (<|endoftext|>). */
  readonly padTokenId: number;
  private readonly tokenizer: Qwen2Tokenizer;

  private constructor(tokenizer: Qwen2Tokenizer, vocabSize: number) {
    this.tokenizer = tokenizer;
    this.vocabSize = vocabSize;
    this.eosTokenId = tokenizer.eos_token_id;
    this.padTokenId = tokenizer.pad_token_id;
  }

  /**
   * Build from tokenizer.json and tokenizer_config.json (texts or parsed objects), e.g. a
   * Checkpoint's tokenizerFiles. Refuses anything that is not a Qwen2 tokenizer.
   */
  static fromJSON(tokenizerJSON: string | Json, tokenizerConfig: string | Json): QwenTokenizer {
    // We never want transformers.js to fetch anything; everything it needs is passed in.
    env.allowRemoteModels = false;
    const json = parseJson(tokenizerJSON, 'tokenizer.json');
    const config = parseJson(tokenizerConfig, 'tokenizer_config.json');
    const cls =
      typeof config.tokenizer_class === 'string' ? config.tokenizer_class.replace(/Fast$/, '') : null;
    if (cls !== 'Qwen2Tokenizer') {
      throw new TokenizerError(
        'tokenizer_config.json',
        `tokenizer_class ${JSON.stringify(config.tokenizer_class)} is not Qwen2Tokenizer`,
      );
    }
    if (typeof config.chat_template !== 'string') {
      throw new TokenizerError('tokenizer_config.json', 'has no chat_template string');
    }
    const vocabSize = tokenizerVocabSize(json);
    const tokenizer = new Qwen2Tokenizer(json, config);
    const vocab = tokenizer.get_vocab();
    for (const key of REQUIRED_TOKENS) {
      const { text } = QWEN_TOKENS[key];
      if (!vocab.has(text)) {
        throw new TokenizerError('tokenizer.json', `has no ${text} token: not a Qwen2.5/Qwen3 vocabulary`);
      }
    }
    return new QwenTokenizer(tokenizer, vocabSize);
  }

  /** From a checkpoint's tokenizer files (file name -> text). */
  static fromFiles(files: ReadonlyMap<string, string>): QwenTokenizer {
    const json = files.get('tokenizer.json');
    const config = files.get('tokenizer_config.json');
    if (json === undefined) throw new TokenizerError('tokenizer.json', 'missing from the checkpoint');
    if (config === undefined)
      throw new TokenizerError('tokenizer_config.json', 'missing from the checkpoint');
    return QwenTokenizer.fromJSON(json, config);
  }

  /** Token ids of `text`. Special tokens written in the text (<|im_start|>...) become their ids. */
  encode(text: string): number[] {
    // Qwen adds no BOS/EOS (add_bos_token false), so add_special_tokens changes nothing; be explicit.
    return this.tokenizer.encode(text, { add_special_tokens: false });
  }

  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    if (ids.length === 0) return '';
    return this.tokenizer.decode([...ids], { skip_special_tokens: options.skipSpecialTokens ?? false });
  }

  /** Id of a single token's text, or null if it is not one token of the vocabulary. */
  tokenToId(token: string): number | null {
    const id = this.tokenizer.get_vocab().get(token);
    return id === undefined ? null : id;
  }

  /** Token strings of `text` (byte-level BPE pieces, e.g. 'Ġworld'; special tokens as written). */
  tokenize(text: string): string[] {
    return this.tokenizer.tokenize(text, { add_special_tokens: false });
  }

  /** Id of a named Qwen token in this vocabulary (Qwen2.5 lacks <think>, <tool_response>). */
  specialId(name: QwenTokenName): number {
    const { text } = QWEN_TOKENS[name];
    const id = this.tokenToId(text);
    if (id === null) throw new TokenizerError('tokenizer.json', `has no ${text} token`);
    return id;
  }

  /** The prompt text the chat template renders for `messages`. */
  applyChatTemplate(messages: readonly ChatMessage[], options: ChatTemplateOptions = {}): string {
    if (messages.length === 0) throw new Error('applyChatTemplate: no messages');
    const extra: Json = {};
    if (options.enableThinking !== undefined) extra.enable_thinking = options.enableThinking;
    // Our messages carry extra keys (tool_calls, reasoning_content) the template reads; the library's
    // Message type names only role and content.
    return this.tokenizer.apply_chat_template(messages as unknown as Message[], {
      tools: options.tools && options.tools.length > 0 ? (options.tools as unknown as Json[]) : null,
      add_generation_prompt: options.addGenerationPrompt ?? false,
      tokenize: false,
      ...extra,
    }) as string;
  }

  /** Token ids of the rendered chat prompt. */
  encodeChat(messages: readonly ChatMessage[], options: ChatTemplateOptions = {}): number[] {
    return this.encode(this.applyChatTemplate(messages, options));
  }
}
