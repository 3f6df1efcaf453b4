// Run an exported decoder (onnx-export.ts) with onnxruntime: logits of a batch, and greedy decoding
// with the KV cache the way transformers.js drives it (left padding, position ids counted over the
// real tokens, present.* fed back as past_key_values.*). Used by the parity tests (onnxruntime-web's
// wasm backend in Node) and by the lab's in-tab check (WebGPU execution provider).
//
// onnxruntime is passed in, not imported: Node tests use onnxruntime-web, the browser loads
// 'onnxruntime-web/webgpu' on demand, and the engine's bundle does not carry it.

import type * as Ort from 'onnxruntime-common';
import type { ModelConfig } from './config.ts';

export interface OrtModule {
  Tensor: typeof Ort.Tensor;
}

type Feeds = Record<string, Ort.Tensor>;

const i64 = (ort: OrtModule, values: number[], dims: number[]) =>
  new ort.Tensor(
    'int64',
    BigInt64Array.from(values, (v) => BigInt(v)),
    dims,
  );

function emptyPast(ort: OrtModule, config: ModelConfig, batch: number): Feeds {
  const feeds: Feeds = {};
  for (let l = 0; l < config.numLayers; l++)
    for (const kv of ['key', 'value'])
      feeds[`past_key_values.${l}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [
        batch,
        config.numKvHeads,
        0,
        config.headDim,
      ]);
  return feeds;
}

/**
 * Logits of each sequence at each of its positions ([len_b × V] per row), from one left-padded run
 * with an empty cache.
 */
export async function onnxLogits(
  ort: OrtModule,
  session: Ort.InferenceSession,
  config: ModelConfig,
  sequences: readonly (readonly number[])[],
): Promise<Float32Array[]> {
  const B = sequences.length;
  const T = Math.max(...sequences.map((s) => s.length));
  const ids: number[] = [];
  const mask: number[] = [];
  const pos: number[] = [];
  for (const s of sequences) {
    const pad = T - s.length;
    for (let i = 0; i < T; i++) {
      ids.push(i < pad ? 0 : s[i - pad]);
      mask.push(i < pad ? 0 : 1);
      pos.push(i < pad ? 1 : i - pad); // transformers.js: cumsum(mask) - 1, padding filled with 1
    }
  }
  const out = await session.run({
    input_ids: i64(ort, ids, [B, T]),
    attention_mask: i64(ort, mask, [B, T]),
    position_ids: i64(ort, pos, [B, T]),
    ...emptyPast(ort, config, B),
  });
  const logits = (await out.logits.getData()) as Float32Array;
  const V = config.vocabSize;
  return sequences.map((s, b) => {
    const start = b * T + (T - s.length);
    return logits.slice(start * V, (start + s.length) * V);
  });
}

function argmax(row: Float32Array, from: number, V: number): number {
  let best = 0;
  for (let v = 1; v < V; v++) if (row[from + v] > row[from + best]) best = v;
  return best;
}

/**
 * Greedy continuation of one prompt: a prefill, then one token per run with the cache. Stops after
 * maxNewTokens or after a stop id (kept in the output).
 */
export async function onnxGreedy(
  ort: OrtModule,
  session: Ort.InferenceSession,
  config: ModelConfig,
  prompt: readonly number[],
  options: { maxNewTokens: number; stopTokenIds?: readonly number[] },
): Promise<number[]> {
  const V = config.vocabSize;
  const stop = new Set(options.stopTokenIds ?? []);
  let past: Feeds = emptyPast(ort, config, 1);
  let input = [...prompt];
  let length = 0;
  const out: number[] = [];
  while (out.length < options.maxNewTokens) {
    const total = length + input.length;
    const result = await session.run({
      input_ids: i64(ort, input, [1, input.length]),
      attention_mask: i64(ort, new Array(total).fill(1), [1, total]),
      position_ids: i64(
        ort,
        input.map((_, i) => length + i),
        [1, input.length],
      ),
      ...past,
    });
    const logits = (await result.logits.getData()) as Float32Array;
    const next = argmax(logits, (input.length - 1) * V, V);
    out.push(next);
    const present: Feeds = {};
    for (let l = 0; l < config.numLayers; l++)
      for (const kv of ['key', 'value']) present[`past_key_values.${l}.${kv}`] = result[`present.${l}.${kv}`];
    for (const t of Object.values(past)) t.dispose();
    result.logits.dispose();
    past = present;
    length = total;
    input = [next];
    if (stop.has(next)) break;
  }
  for (const t of Object.values(past)) t.dispose();
  return out;
}
