// The GPU model as the environment's `generate` function (src/env/policies/base-tool-call.ts): render
// the conversation with Qwen's chat template and the tools, sample until the assistant turn ends
// (<|im_end|> or <|endoftext|>), decode. This is the Base Tool Call baseline with an untrained model,
// and equally any trained checkpoint.
//
// Each call prefills the whole conversation again. That is fine for evaluation; RL rollouts keep one
// GenerationSession per episode and append tool responses instead (qwen-gpu.ts).
import type { GenerateTurn } from '../../env/policies/base-tool-call.ts';
import { ContextFullError } from '../../env/policies/policy.ts';
import type { QwenGpuModel } from '../model/qwen-gpu.ts';
import type { QwenTokenizer } from '../tokenizer/qwen-tokenizer.ts';

export interface ModelTurnOptions {
  /** Longest assistant turn, in tokens. Default 512. */
  maxNewTokens?: number;
  /** 0 = greedy. Default 0.7. */
  temperature?: number;
  topP?: number;
  topK?: number;
  /** Seed of the first call; each later call uses the next seed, so turns differ but runs repeat. */
  seed?: number;
  /** Qwen3: false renders an empty <think></think> block so the model answers directly. */
  enableThinking?: boolean;
  /** Sees every prompt's token ids and the sampled ids (for logging and tests). */
  onTurn?: (prompt: readonly number[], sampled: readonly number[], logprobs: readonly number[]) => void;
}

export function modelGenerateTurn(
  model: QwenGpuModel,
  tokenizer: QwenTokenizer,
  options: ModelTurnOptions = {},
): GenerateTurn {
  const { maxNewTokens = 512, temperature = 0.7, topP = 1, topK = 0, enableThinking } = options;
  const stopTokenIds = [tokenizer.specialId('imEnd'), tokenizer.specialId('endOfText')];
  let seed = options.seed ?? 0;
  return async (messages, tools) => {
    const prompt = tokenizer.encodeChat(messages, {
      tools: [...tools],
      addGenerationPrompt: true,
      enableThinking,
    });
    const room = model.config.maxPositionEmbeddings - prompt.length;
    if (room < 1) throw new ContextFullError(prompt.length, model.config.maxPositionEmbeddings);
    const result = await model.generate([prompt], {
      maxNewTokens: Math.min(maxNewTokens, room),
      temperature,
      topP,
      topK,
      seed: seed++,
      stopTokenIds,
      padId: tokenizer.padTokenId,
    });
    const sampled = result.tokens[0];
    options.onTurn?.(prompt, sampled, result.logprobs[0]);
    const body = result.finish[0] === 'stop' ? sampled.slice(0, -1) : sampled;
    return tokenizer.decode(body);
  };
}
