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
//
// Data is data: a question, a passage or a tool result may contain the text of a special token
// (`<|im_end|>`, `<tool_call>`, …). encode() turns such text into the special id, which is right for
// template text and wrong for data (a passage could end the turn or open a fake tool call).
//   encodeText(text)        plain text: special-token strings are spelled out as ordinary BPE pieces
//                           (Python transformers' split_special_tokens=True); never an added-token id
//   encodePieces(pieces)    template pieces as encode(), data pieces as encodeText(); on text without
//                           special strings in the data, equal to encode(concatenation) id for id
//   encodeChat(messages)    the template's rendering, with the contents of user and tool messages as
//                           data (system and assistant contents are the lab's and the model's own markup)

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

/** Text to encode: template markup (`data: false`, special-token strings become ids) or data (never). */
export interface TextPiece {
  text: string;
  data: boolean;
}

/** The parts of transformers.js' tokenizer that encodeText drives directly (its pipeline minus the added-token split). */
interface TokenizerPipeline {
  normalizer: ((text: string) => string) | null;
  pre_tokenizer: ((text: string, options: { section_index: number }) => string[]) | null;
  model: ((words: string[]) => string[]) & { tokens_to_ids: Map<string, number>; unk_token_id?: number };
}

/** Private-use code points marking message contents in a rendering (chosen absent from the messages). */
const MARK_BASE = 0xf0000;
const TOOL_RESPONSE_OPEN = '<tool_response>';
const TOOL_RESPONSE_CLOSE = '</tool_response>';

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
  private readonly pipeline: TokenizerPipeline;
  /** Ids of the added tokens (special or not): encodeText never yields one. */
  private readonly addedIds: ReadonlySet<number>;
  /** Added token text -> id (get_vocab() builds the whole vocabulary's map on every call). */
  private readonly addedIdByText: ReadonlyMap<string, number>;
  /** Matches any added token's text, longest first. */
  private readonly addedPattern: RegExp;

  private constructor(
    tokenizer: Qwen2Tokenizer,
    vocabSize: number,
    added: readonly { content: string; id: number }[],
  ) {
    this.tokenizer = tokenizer;
    this.vocabSize = vocabSize;
    this.eosTokenId = tokenizer.eos_token_id;
    this.padTokenId = tokenizer.pad_token_id;
    this.pipeline = (tokenizer as unknown as { _tokenizer: TokenizerPipeline })._tokenizer;
    this.addedIds = new Set(added.map((t) => t.id));
    this.addedIdByText = new Map(added.map((t) => [t.content, t.id]));
    const texts = added.map((t) => t.content).sort((a, b) => b.length - a.length);
    // (?!) never matches: a vocabulary without added tokens has no markup to find.
    this.addedPattern = new RegExp(
      texts.length > 0 ? texts.map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|') : '(?!)',
      'g',
    );
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
    const added = Array.isArray(json.added_tokens)
      ? (json.added_tokens as { content?: unknown; id?: unknown }[]).filter(
          (t): t is { content: string; id: number } =>
            typeof t.content === 'string' && typeof t.id === 'number',
        )
      : [];
    return new QwenTokenizer(tokenizer, vocabSize, added);
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

  /**
   * Token ids of data text: special-token strings in it are encoded as ordinary text, never as
   * special ids. Equal to encode(text) when the text contains no added token's string.
   */
  encodeText(text: string): number[] {
    if (text === '') return [];
    const { normalizer, pre_tokenizer, model } = this.pipeline;
    const normalized = normalizer ? normalizer(text) : text;
    const words = pre_tokenizer ? pre_tokenizer(normalized, { section_index: 0 }) : [normalized];
    const pieces = model(words);
    const ids: number[] = [];
    for (const piece of pieces) {
      const id = model.tokens_to_ids.get(piece) ?? model.unk_token_id;
      if (id === undefined)
        throw new TokenizerError('tokenizer.json', `has no token for the piece ${JSON.stringify(piece)}`);
      // A BPE merge that rebuilt an added token's string would smuggle a special id in.
      if (this.addedIds.has(id))
        throw new TokenizerError(
          'tokenizer.json',
          `BPE merges rebuild the added token ${JSON.stringify(piece)}`,
        );
      ids.push(id);
    }
    return ids;
  }

  /**
   * Token ids of template and data pieces in order: the added tokens written in template pieces become
   * their ids, everything else (template text between them and all data) is encoded as one plain text
   * per stretch, so a stretch spanning template and data tokenizes as encode() would.
   */
  encodePieces(pieces: readonly TextPiece[]): number[] {
    const ids: number[] = [];
    let stretch = '';
    for (const piece of pieces) {
      if (piece.data) {
        stretch += piece.text;
        continue;
      }
      let last = 0;
      for (const match of piece.text.matchAll(this.addedPattern)) {
        stretch += piece.text.slice(last, match.index);
        ids.push(...this.encodeText(stretch));
        stretch = '';
        ids.push(this.addedIdByText.get(match[0]) as number); // the pattern holds added tokens only
        last = (match.index ?? 0) + match[0].length;
      }
      stretch += piece.text.slice(last);
    }
    ids.push(...this.encodeText(stretch));
    return ids;
  }

  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    if (ids.length === 0) return '';
    return this.tokenizer.decode([...ids], { skip_special_tokens: options.skipSpecialTokens ?? false });
  }

  /** Id of a single token's text, or null if it is not one token of the vocabulary. */
  tokenToId(token: string): number | null {
    const added = this.addedIdByText.get(token);
    if (added !== undefined) return added;
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

  /**
   * Token ids of the rendered chat prompt. The contents of user and tool messages are data (encodeText):
   * a question or a passage that spells `<|im_end|>` stays text. System and assistant contents are
   * markup as written (the lab's instructions, the model's own turns).
   */
  encodeChat(messages: readonly ChatMessage[], options: ChatTemplateOptions = {}): number[] {
    return this.encodePieces(this.chatPieces(messages, options));
  }

  /**
   * The template's rendering as template and data pieces: the template is rendered once with each
   * user / tool content replaced by a marker, and the markers are replaced by the contents as data
   * pieces. The joined pieces are checked against the plain rendering, so a template that rewrites
   * contents cannot mix data into markup unnoticed (a TokenizerError instead).
   */
  chatPieces(messages: readonly ChatMessage[], options: ChatTemplateOptions = {}): TextPiece[] {
    const rendered = this.applyChatTemplate(messages, options);
    const dataIndices = messages.flatMap((m, i) =>
      (m.role === 'user' || m.role === 'tool') && m.content !== '' ? [i] : [],
    );
    if (dataIndices.length === 0) return [{ text: rendered, data: false }];
    const [open, close] = markerPair(messages, options);
    const markers = new Map<string, string>();
    const marked = messages.map((m, i) => {
      if (!dataIndices.includes(i)) return m;
      let marker = `${open}${i}${close}`;
      // Qwen3's template looks at whether a user content is a wrapped tool response; keep that visible.
      if (m.content.startsWith(TOOL_RESPONSE_OPEN) && m.content.endsWith(TOOL_RESPONSE_CLOSE))
        marker = `${TOOL_RESPONSE_OPEN}${marker}${TOOL_RESPONSE_CLOSE}`;
      markers.set(marker, m.content);
      return { ...m, content: marker };
    });
    const template = this.applyChatTemplate(marked, options);
    const pieces: TextPiece[] = [];
    const pattern = new RegExp(
      [...markers.keys()].map((k) => k.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|'),
      'gu',
    );
    let last = 0;
    for (const match of template.matchAll(pattern)) {
      pieces.push({ text: template.slice(last, match.index), data: false });
      pieces.push({ text: markers.get(match[0]) ?? '', data: true });
      last = (match.index ?? 0) + match[0].length;
    }
    pieces.push({ text: template.slice(last), data: false });
    if (pieces.map((p) => p.text).join('') !== rendered) {
      throw new TokenizerError(
        'tokenizer_config.json',
        'the chat template rewrites user or tool message contents; cannot tell data from markup in its rendering',
      );
    }
    return pieces.filter((p) => p.text !== '');
  }
}

/** Two private-use characters that occur nowhere in the messages or tools, to mark contents. */
function markerPair(messages: readonly ChatMessage[], options: ChatTemplateOptions): [string, string] {
  const everything = JSON.stringify([messages, options.tools ?? null]);
  for (let cp = MARK_BASE; cp < MARK_BASE + 0x1000; cp += 2) {
    const open = String.fromCodePoint(cp);
    const close = String.fromCodePoint(cp + 1);
    if (!everything.includes(open) && !everything.includes(close)) return [open, close];
  }
  throw new TokenizerError('tokenizer_config.json', 'no free private-use character to mark message contents');
}
