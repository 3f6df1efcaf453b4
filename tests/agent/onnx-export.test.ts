// The ONNX export (src/agent/model/onnx-export.ts) run by onnxruntime-web's wasm backend in Node,
// against this engine (QwenGpuModel on the test adapter) and the float64 reference written from the
// HF modeling code: logits within 1e-4, the same greedy tokens over 64 steps with the KV cache,
// left padding, external data, and clear refusals.
import * as ort from 'onnxruntime-web';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Checkpoint, loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import type { ModelConfig } from '../../src/agent/model/config.ts';
import { CheckpointError } from '../../src/agent/model/errors.ts';
import { directorySource } from '../../src/agent/model/node-fs.ts';
import {
  buildQwenOnnx,
  exportForTransformersJs,
  ONNX_DATA_FILE,
  ONNX_MODEL_FILE,
} from '../../src/agent/model/onnx-export.ts';
import { onnxGreedy, onnxLogits } from '../../src/agent/model/onnx-run.ts';
import { packBatch, QwenGpuModel } from '../../src/agent/model/qwen-gpu.ts';
import { tinyCheckpoint, tinySpec } from '../../src/agent/model/tiny-checkpoints.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import { getTestGpu } from '../helpers/gpu.ts';
import { qwenForward } from '../reference/qwen-ref.ts';
import { maxAbsDiff } from './helpers.ts';

type Weights = Map<string, { shape: number[]; data: Float32Array }>;

ort.env.wasm.numThreads = 1;

const QWEN_TINY = 'public/models/qwen-tiny';

function tiny(name: string): { config: ModelConfig; weights: Weights } {
  const { config, tensors } = tinyCheckpoint(tinySpec(name));
  return { config, weights: tensors as unknown as Weights };
}

function session(model: Uint8Array, externalData?: Uint8Array): Promise<ort.InferenceSession> {
  return ort.InferenceSession.create(model, {
    executionProviders: ['wasm'],
    ...(externalData ? { externalData: [{ path: 'model.onnx_data', data: externalData }] } : {}),
  });
}

/** Engine logits per sequence ([len × V] each), from one right-padded batch. */
async function engineLogits(model: QwenGpuModel, seqs: number[][]): Promise<Float32Array[]> {
  const batch = packBatch(seqs);
  const all = await model.logits(batch);
  const V = model.config.vocabSize;
  return seqs.map((s, b) => all.slice(b * batch.T * V, (b * batch.T + s.length) * V));
}

const prompts = (V: number): number[][] => [
  Array.from({ length: 11 }, (_, i) => (i * 37 + 5) % V),
  Array.from({ length: 6 }, (_, i) => (i * 101 + 17) % V),
];

let gpu: Gpu;
beforeAll(async () => {
  gpu = await getTestGpu();
});

describe('ONNX export: onnxruntime-web (wasm) against the engine', () => {
  let qwenTiny: Checkpoint;
  beforeAll(async () => {
    qwenTiny = await loadCheckpoint(directorySource(QWEN_TINY), { requireTokenizer: true });
  });
  afterAll(() => {});

  for (const name of ['tiny-qwen2-tied-v512', 'tiny-qwen3-v512']) {
    it(`${name}: logits of a left-padded batch within 1e-4 of the engine and of the float64 reference`, async () => {
      const { config, weights } = tiny(name);
      const s = await session(buildQwenOnnx(config, weights).model);
      const seqs = prompts(config.vocabSize);
      const got = await onnxLogits(ort, s, config, seqs);
      const model = new QwenGpuModel(gpu, config, weights);
      const engine = await engineLogits(model, seqs);
      model.release();
      for (let b = 0; b < seqs.length; b++) {
        expect(got[b].length).toBe(seqs[b].length * config.vocabSize);
        expect(maxAbsDiff(got[b], engine[b])).toBeLessThan(1e-4);
        const ref = qwenForward(config, weights, seqs[b]).logits;
        expect(maxAbsDiff(got[b], ref)).toBeLessThan(1e-4);
      }
      await s.release();
    });
  }

  it('qwen-tiny (bundled): logits within 1e-4 of the engine; 64 greedy steps with the cache give the same tokens', async () => {
    const { config } = qwenTiny;
    const weights = qwenTiny.tensors as unknown as Weights;
    const s = await session(buildQwenOnnx(config, weights).model);
    const model = new QwenGpuModel(gpu, config, weights);
    const seqs = prompts(config.vocabSize);
    const got = await onnxLogits(ort, s, config, seqs);
    const engine = await engineLogits(model, seqs);
    for (let b = 0; b < seqs.length; b++) expect(maxAbsDiff(got[b], engine[b])).toBeLessThan(1e-4);

    for (const prompt of seqs) {
      const onnxTokens = await onnxGreedy(ort, s, config, prompt, { maxNewTokens: 64 });
      const ours = await model.generate([prompt], { maxNewTokens: 64, temperature: 0 });
      expect(onnxTokens).toHaveLength(64);
      expect(onnxTokens).toEqual(ours.tokens[0]);
    }
    model.release();
    await s.release();
  });

  it('external data (model.onnx_data) gives the same logits as weights inside the graph', async () => {
    const { config, weights } = tiny('tiny-qwen3-v512');
    const inline = buildQwenOnnx(config, weights, { externalData: false });
    const external = buildQwenOnnx(config, weights, { externalData: true });
    expect(inline.externalData).toBeNull();
    expect(external.externalData).not.toBeNull();
    expect(external.model.length).toBeLessThan(inline.model.length / 10);
    const seqs = prompts(config.vocabSize);
    const a = await session(inline.model);
    const b = await session(external.model, external.externalData!);
    const la = await onnxLogits(ort, a, config, seqs);
    const lb = await onnxLogits(ort, b, config, seqs);
    for (let i = 0; i < seqs.length; i++) expect(maxAbsDiff(la[i], lb[i])).toBe(0);
    await a.release();
    await b.release();
  });

  it('the transformers.js folder: config with fp32 and head_dim, generation config, tokenizer files, onnx/model.onnx', () => {
    const files = exportForTransformersJs({
      config: qwenTiny.config,
      generationConfig: qwenTiny.generationConfig,
      tensors: qwenTiny.tensors,
      tokenizerFiles: qwenTiny.tokenizerFiles,
    });
    expect([...files.keys()].sort()).toEqual(
      [
        'config.json',
        'generation_config.json',
        ONNX_MODEL_FILE,
        'tokenizer.json',
        'tokenizer_config.json',
      ].sort(),
    );
    const config = JSON.parse(new TextDecoder().decode(files.get('config.json')));
    expect(config['transformers.js_config']).toEqual({ dtype: 'fp32' });
    expect(config.head_dim).toBe(qwenTiny.config.headDim);
    expect(config.model_type).toBe('qwen3');
    expect(files.has(ONNX_DATA_FILE)).toBe(false);
    const withData = exportForTransformersJs(
      {
        config: qwenTiny.config,
        generationConfig: null,
        tensors: qwenTiny.tensors,
        tokenizerFiles: qwenTiny.tokenizerFiles,
      },
      { externalData: true },
    );
    expect(withData.has(ONNX_DATA_FILE)).toBe(true);
    const c2 = JSON.parse(new TextDecoder().decode(withData.get('config.json')));
    expect(c2['transformers.js_config']).toEqual({ dtype: 'fp32', use_external_data_format: true });
    const gen = JSON.parse(new TextDecoder().decode(withData.get('generation_config.json')));
    expect(gen.eos_token_id).toEqual(
      qwenTiny.config.eosTokenIds.length === 1 ? qwenTiny.config.eosTokenIds[0] : qwenTiny.config.eosTokenIds,
    );
  });

  it('refuses clearly: no tokenizer, a missing tensor, a tensor of the wrong size', () => {
    const { config, weights } = tiny('tiny-qwen3-v512');
    expect(() =>
      exportForTransformersJs({
        config,
        generationConfig: null,
        tensors: weights,
        tokenizerFiles: new Map(),
      }),
    ).toThrow(/tokenizer/);
    const missing = new Map(weights);
    missing.delete('model.layers.1.mlp.up_proj.weight');
    expect(() => buildQwenOnnx(config, missing)).toThrow(CheckpointError);
    expect(() => buildQwenOnnx(config, missing)).toThrow(/up_proj/);
    const wrong = new Map(weights);
    wrong.set('model.norm.weight', { shape: [3], data: new Float32Array(3) });
    expect(() => buildQwenOnnx(config, wrong)).toThrow(/model\.norm\.weight/);
  });
});
