// Token count of a tokenizer.json, read straight from the JSON (no tokenizer is built), so the model
// loader can check the embedding against it without pulling in the tokenizer library.

import { TokenizerError } from '../model/errors.ts';

/**
 * Number of token ids the tokenizer can produce: 1 + the largest id in model.vocab and added_tokens.
 * Qwen2.5/Qwen3: 151,643 BPE tokens + 26 added (<|endoftext|> 151643 ... </think> 151668) = 151,669.
 */
export function tokenizerVocabSize(tokenizerJSON: unknown, file = 'tokenizer.json'): number {
  if (typeof tokenizerJSON !== 'object' || tokenizerJSON === null) {
    throw new TokenizerError(file, 'not a JSON object');
  }
  const { model, added_tokens: added } = tokenizerJSON as {
    model?: { vocab?: unknown };
    added_tokens?: unknown;
  };
  const vocab = model?.vocab;
  if (typeof vocab !== 'object' || vocab === null || Array.isArray(vocab)) {
    throw new TokenizerError(file, 'has no model.vocab object (not a BPE tokenizer.json?)');
  }
  let maxId = -1;
  for (const id of Object.values(vocab)) if (typeof id === 'number' && id > maxId) maxId = id;
  if (Array.isArray(added)) {
    for (const t of added) {
      const id = (t as { id?: unknown }).id;
      if (typeof id === 'number' && id > maxId) maxId = id;
    }
  }
  return maxId + 1;
}
