// The lab's check of its ONNX export, in the tab: onnxruntime-web (WebGPU execution provider, or wasm)
// runs the exported graph on a chat prompt, and the logits and greedy tokens are compared with the
// engine's for the same weights. onnxruntime-web is loaded on first use, so the engine's bundle does
// not carry it; its own GPU device is separate from the engine's.

import { ONNX_MODEL_FILE } from '../agent/model/onnx-export.ts';
import { onnxGreedy, onnxLogits } from '../agent/model/onnx-run.ts';
import type { QwenGpuModel } from '../agent/model/qwen-gpu.ts';
import { packBatch } from '../agent/model/qwen-gpu.ts';
import type { QwenTokenizer } from '../agent/tokenizer/qwen-tokenizer.ts';
import { TASK_PRESETS } from '../env/presets.ts';
import type { OnnxCheck, OnnxProvider } from './protocol.ts';

/** A fixed chat, so every check decodes from the same prompt. */
const CHECK_QUESTION = 'Which city was the founder of the company that published the album born in?';

export async function checkOnnxExport(options: {
  files: ReadonlyMap<string, Uint8Array>;
  model: QwenGpuModel;
  tokenizer: QwenTokenizer;
  provider: OnnxProvider;
  steps: number;
  /** Runs engine GPU work in the engine's queue. */
  gpuTurn: <T>(fn: () => Promise<T>) => Promise<T>;
}): Promise<OnnxCheck> {
  const { files, model, tokenizer, provider, steps, gpuTurn } = options;
  const started = performance.now();
  const graph = files.get(ONNX_MODEL_FILE);
  if (!graph) throw new Error(`the export has no ${ONNX_MODEL_FILE}`);
  const data = files.get('onnx/model.onnx_data');
  const ort = await import('onnxruntime-web/webgpu');
  ort.env.wasm.numThreads = 1; // no cross-origin isolation needed
  const session = await ort.InferenceSession.create(graph, {
    executionProviders: [provider],
    ...(data ? { externalData: [{ path: 'model.onnx_data', data }] } : {}),
  });
  try {
    const config = model.config;
    const prompt = tokenizer.encodeChat(
      [
        { role: 'system', content: TASK_PRESETS.compact.systemPrompt },
        { role: 'user', content: CHECK_QUESTION },
      ],
      { addGenerationPrompt: true },
    );
    const [onnx] = await onnxLogits(ort, session, config, [prompt]);
    const ours = await gpuTurn(() => model.logits(packBatch([prompt])));
    let maxLogitDiff = 0;
    for (let i = 0; i < onnx.length; i++) maxLogitDiff = Math.max(maxLogitDiff, Math.abs(onnx[i] - ours[i]));
    const onnxTokens = await onnxGreedy(ort, session, config, prompt, { maxNewTokens: steps });
    const engine = await gpuTurn(() => model.generate([prompt], { maxNewTokens: steps, temperature: 0 }));
    const engineTokens = engine.tokens[0];
    let firstDifference: number | null = null;
    for (let i = 0; i < Math.max(onnxTokens.length, engineTokens.length); i++)
      if (onnxTokens[i] !== engineTokens[i]) {
        firstDifference = i;
        break;
      }
    return {
      provider,
      promptTokens: prompt.length,
      steps,
      sameTokens: firstDifference === null,
      firstDifference,
      maxLogitDiff,
      onnxText: tokenizer.decode(onnxTokens),
      seconds: (performance.now() - started) / 1000,
    };
  } finally {
    await session.release();
  }
}
