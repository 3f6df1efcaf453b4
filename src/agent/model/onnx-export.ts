// Export a Qwen2/Qwen3 checkpoint to ONNX in the layout transformers.js loads for text generation:
//
//   config.json              the model's config + "transformers.js_config" (dtype fp32; external data)
//   generation_config.json   eos ids and sampling defaults
//   tokenizer.json, tokenizer_config.json   unchanged (the chat template with tools lives in the latter)
//   onnx/model.onnx          the decoder with a KV cache (below), fp32
//   onnx/model.onnx_data     the weights, when they are stored outside the graph (models near 2 GiB)
//
// The graph (standard ONNX operators, opset 14; B batch, S new tokens, P past tokens, T = P + S):
//   inputs   input_ids [B, S] int64, attention_mask [B, T] int64, position_ids [B, S] int64,
//            past_key_values.{l}.key / .value [B, KV, P, D] float32            (l = 0 .. layers-1)
//   outputs  logits [B, S, V] float32, present.{l}.key / .value [B, KV, T, D] float32
//
//   x = embed[input_ids]
//   per layer:  h = rmsnorm(x) · Wqkv (+ bias) → q [B,H,S,D], k, v [B,KV,S,D]; Qwen3: per-head rmsnorm
//               of q and k; RoPE (cos/sin tables gathered by position_ids); k, v appended to the past (→ present);
//               attention grouped as [B, KV, H/KV, S, T] (no copy of K/V per query head), scores
//               + mask (causal from the positions in the cache, and attention_mask's padding)
//               x += o_proj(attn);  x += down(silu(gate(rmsnorm(x))) * up(rmsnorm(x)))
//   logits = rmsnorm(x) · lm_head^T   (Gemm with transB, so a tied head shares the embedding's tensor)
//
// Linear weights are stored transposed ([in, out], for MatMul); names keep the HF name with "_T" when
// transposed. The math is the HF modeling code's (modeling_qwen2.py / modeling_qwen3.py) in float32;
// tests check the logits against this engine's and greedy decoding with the cache token for token.

import onnxProto, { type onnx as OnnxTypes } from 'onnx-proto';
import {
  type GenerationConfig,
  type ModelConfig,
  serializeGenerationConfig,
  serializeModelConfig,
} from './config.ts';
import { CheckpointError } from './errors.ts';
import { checkTensors, expectedTensors } from './weights.ts';

const { onnx } = onnxProto;

export const ONNX_MODEL_FILE = 'onnx/model.onnx';
export const ONNX_DATA_FILE = 'onnx/model.onnx_data';
/** The opset the graph is written for (ReduceMean's axes are an attribute up to 17). */
export const ONNX_OPSET = 14;
/** Weights above this many bytes go to model.onnx_data: a protobuf message cannot exceed 2 GiB. */
export const EXTERNAL_DATA_THRESHOLD = 1536 * 1024 * 1024;

type Weights = ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>;

export interface OnnxExportOptions {
  /** Store the weights in onnx/model.onnx_data: true, false, or 'auto' (default: above 1.5 GiB). */
  externalData?: boolean | 'auto';
  /** producer_version in the model's metadata. */
  producerVersion?: string;
}

export interface OnnxGraphFiles {
  /** onnx/model.onnx */
  model: Uint8Array;
  /** onnx/model.onnx_data, when the weights are external. */
  externalData: Uint8Array | null;
}

const F32 = onnx.TensorProto.DataType.FLOAT;
const I64 = onnx.TensorProto.DataType.INT64;
const BOOL = onnx.TensorProto.DataType.BOOL;

type Attr = { i: number } | { ints: number[] } | { f: number };

/** Nodes and initializers of one graph; every op returns the names of its outputs. */
class GraphBuilder {
  readonly nodes: OnnxTypes.INodeProto[] = [];
  readonly initializers: OnnxTypes.ITensorProto[] = [];
  private counter = 0;
  private readonly constants = new Map<string, string>();
  /** External data being laid out (offset = length so far), or null when the weights are inline. */
  private readonly external: { chunks: Uint8Array[]; length: number } | null;

  constructor(externalData: boolean) {
    this.external = externalData ? { chunks: [], length: 0 } : null;
  }

  op(opType: string, inputs: string[], attrs: Record<string, Attr> = {}, outputs = 1): string[] {
    const id = this.counter++;
    const out = Array.from(
      { length: outputs },
      (_, k) => `${opType.toLowerCase()}_${id}${outputs > 1 ? `_${k}` : ''}`,
    );
    this.nodes.push({
      name: `${opType}_${id}`,
      opType,
      input: inputs,
      output: out,
      attribute: Object.entries(attrs).map(([name, a]) =>
        'i' in a
          ? { name, type: onnx.AttributeProto.AttributeType.INT, i: a.i }
          : 'ints' in a
            ? { name, type: onnx.AttributeProto.AttributeType.INTS, ints: a.ints }
            : { name, type: onnx.AttributeProto.AttributeType.FLOAT, f: a.f },
      ),
    });
    return out;
  }

  /** One-output op. */
  o(opType: string, inputs: string[], attrs: Record<string, Attr> = {}): string {
    return this.op(opType, inputs, attrs)[0];
  }

  weight(name: string, dims: readonly number[], data: Float32Array): string {
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    if (this.external && data.length > 16) {
      // 64-byte aligned offsets, as onnx's own external-data writer is free to and mmap likes.
      const pad = (64 - (this.external.length % 64)) % 64;
      if (pad) this.external.chunks.push(new Uint8Array(pad));
      const offset = this.external.length + pad;
      this.external.chunks.push(bytes.slice());
      this.external.length = offset + bytes.length;
      this.initializers.push({
        name,
        dims: [...dims],
        dataType: F32,
        dataLocation: onnx.TensorProto.DataLocation.EXTERNAL,
        externalData: [
          { key: 'location', value: 'model.onnx_data' },
          { key: 'offset', value: String(offset) },
          { key: 'length', value: String(bytes.length) },
        ],
      });
    } else {
      this.initializers.push({ name, dims: [...dims], dataType: F32, rawData: bytes.slice() });
    }
    return name;
  }

  /** A small constant (shared when the same values recur). */
  constI64(values: readonly number[], scalar = false): string {
    const key = `i64:${scalar}:${values.join(',')}`;
    let name = this.constants.get(key);
    if (!name) {
      name = `const_${this.constants.size}`;
      const raw = new Uint8Array(new BigInt64Array(values.map((v) => BigInt(v))).buffer);
      this.initializers.push({ name, dims: scalar ? [] : [values.length], dataType: I64, rawData: raw });
      this.constants.set(key, name);
    }
    return name;
  }

  constF32(values: readonly number[], scalar = false): string {
    const key = `f32:${scalar}:${values.join(',')}`;
    let name = this.constants.get(key);
    if (!name) {
      name = `const_${this.constants.size}`;
      const raw = new Uint8Array(Float32Array.from(values).buffer);
      this.initializers.push({ name, dims: scalar ? [] : [values.length], dataType: F32, rawData: raw });
      this.constants.set(key, name);
    }
    return name;
  }

  externalBytes(): Uint8Array | null {
    if (!this.external) return null;
    const out = new Uint8Array(this.external.length);
    let at = 0;
    for (const c of this.external.chunks) {
      out.set(c, at);
      at += c.length;
    }
    return out;
  }
}

/** [rows, cols] row-major -> [cols, rows]. */
function transpose(data: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c];
  return out;
}

function valueInfo(name: string, elemType: number, dims: (number | string)[]): OnnxTypes.IValueInfoProto {
  return {
    name,
    type: {
      tensorType: {
        elemType,
        shape: { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) },
      },
    },
  };
}

/** The total bytes of the weights as float32 (what decides external data under 'auto'). */
export function onnxWeightBytes(config: ModelConfig): number {
  return expectedTensors(config).reduce((n, t) => n + 4 * t.shape.reduce((a, b) => a * b, 1), 0);
}

/** The decoder graph with its weights (see the top of this file). */
export function buildQwenOnnx(
  config: ModelConfig,
  weights: Weights,
  options: OnnxExportOptions = {},
): OnnxGraphFiles {
  checkTensors(config, weights, 'the exported weights', { unexpected: 'error' });
  const mode = options.externalData ?? 'auto';
  const external = mode === 'auto' ? onnxWeightBytes(config) > EXTERNAL_DATA_THRESHOLD : mode;
  const g = new GraphBuilder(external);
  const c = config;
  const H = c.hiddenSize;
  const D = c.headDim;
  const nH = c.numHeads;
  const nKV = c.numKvHeads;
  const group = nH / nKV;
  const w = (name: string) => {
    const t = weights.get(name);
    if (!t) throw new CheckpointError('the exported weights', `tensor '${name}' is missing`);
    return t;
  };
  const weightT = (name: string): string => {
    const t = w(name);
    const [rows, cols] = t.shape;
    return g.weight(`${name}_T`, [cols, rows], transpose(t.data, rows, cols));
  };
  const plain = (name: string): string => g.weight(name, w(name).shape, w(name).data);

  const rmsnorm = (x: string, weightName: string): string => {
    const ms = g.o('ReduceMean', [g.o('Mul', [x, x])], { axes: { ints: [-1] }, keepdims: { i: 1 } });
    const rms = g.o('Sqrt', [g.o('Add', [ms, g.constF32([c.rmsNormEps], true)])]);
    return g.o('Mul', [g.o('Div', [x, rms]), plain(weightName)]);
  };
  const linear = (x: string, name: string, bias: boolean): string => {
    const y = g.o('MatMul', [x, weightT(`${name}.weight`)]);
    return bias ? g.o('Add', [y, plain(`${name}.bias`)]) : y;
  };

  // Shapes and the attention mask, shared by all layers.
  const seqLen = g.o('Gather', [g.o('Shape', ['input_ids']), g.constI64([1], true)], { axis: { i: 0 } });
  const totalLen = g.o('Gather', [g.o('Shape', ['attention_mask']), g.constI64([1], true)], {
    axis: { i: 0 },
  });
  const totalF = g.o('Cast', [totalLen], { to: { i: F32 } });
  const pastF = g.o('Sub', [totalF, g.o('Cast', [seqLen], { to: { i: F32 } })]);
  const one = g.constF32([1], true);
  const keyPos = g.o('Range', [g.constF32([0], true), totalF, one]); // [T]
  const queryPos = g.o('Unsqueeze', [g.o('Range', [pastF, totalF, one]), g.constI64([1])]); // [S, 1]
  const causal = g.o('Not', [g.o('Less', [queryPos, keyPos])]); // [S, T]: key j <= query i
  const notPad = g.o('Unsqueeze', [
    g.o('Cast', ['attention_mask'], { to: { i: BOOL } }),
    g.constI64([1, 2, 3]),
  ]);
  const allowed = g.o('And', [causal, notPad]); // [B, 1, 1, S, T]
  // The most negative float32, as transformers' masks use; softmax gives a masked key weight 0.
  const maskBias = g.o('Where', [allowed, g.constF32([0], true), g.constF32([-3.4028234663852886e38], true)]);

  // RoPE: cos/sin [B, 1, S, D] gathered by position_ids from tables over max_position_embeddings,
  // computed as Qwen2RotaryEmbedding does (angle = float32(position) * float32 inv_freq, rounded to
  // float32) but with cos/sin in float64. Sin/Cos ops on large angles are imprecise on GPU backends
  // (WGSL's sin/cos are specified only on [-pi, pi]); a table is exact everywhere.
  const half = D / 2;
  const invFreq = Float32Array.from({ length: half }, (_, i) => 1 / c.ropeTheta ** ((2 * i) / D));
  const maxPos = c.maxPositionEmbeddings;
  const cosTable = new Float32Array(maxPos * D);
  const sinTable = new Float32Array(maxPos * D);
  for (let p = 0; p < maxPos; p++)
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(Math.fround(p) * invFreq[i]);
      cosTable[p * D + i] = cosTable[p * D + half + i] = Math.cos(angle);
      sinTable[p * D + i] = sinTable[p * D + half + i] = Math.sin(angle);
    }
  const ropeTable = (name: string, table: Float32Array) =>
    g.o('Unsqueeze', [
      g.o('Gather', [g.weight(name, [maxPos, D], table), 'position_ids'], { axis: { i: 0 } }),
      g.constI64([1]),
    ]);
  const cos = ropeTable('rope.cos_table', cosTable);
  const sin = ropeTable('rope.sin_table', sinTable);
  const rope = (x: string): string => {
    const x1 = g.o('Slice', [x, g.constI64([0]), g.constI64([half]), g.constI64([3])]);
    const x2 = g.o('Slice', [x, g.constI64([half]), g.constI64([D]), g.constI64([3])]);
    const rotated = g.o('Concat', [g.o('Neg', [x2]), x1], { axis: { i: -1 } });
    return g.o('Add', [g.o('Mul', [x, cos]), g.o('Mul', [rotated, sin])]);
  };
  const heads = (x: string, n: number, normName: string | null): string => {
    let y = g.o('Reshape', [x, g.constI64([0, 0, n, D])]); // [B, S, n, D]
    if (normName) y = rmsnorm(y, normName);
    return g.o('Transpose', [y], { perm: { ints: [0, 2, 1, 3] } }); // [B, n, S, D]
  };

  const graphInputs = [
    valueInfo('input_ids', I64, ['batch_size', 'sequence_length']),
    valueInfo('attention_mask', I64, ['batch_size', 'total_sequence_length']),
    valueInfo('position_ids', I64, ['batch_size', 'sequence_length']),
  ];
  const graphOutputs: OnnxTypes.IValueInfoProto[] = [];
  const presentNodes: [string, string][] = [];

  let x = g.o('Gather', [plain('model.embed_tokens.weight'), 'input_ids'], { axis: { i: 0 } });
  for (let l = 0; l < c.numLayers; l++) {
    const p = `model.layers.${l}`;
    const pastKey = `past_key_values.${l}.key`;
    const pastValue = `past_key_values.${l}.value`;
    graphInputs.push(valueInfo(pastKey, F32, ['batch_size', nKV, 'past_sequence_length', D]));
    graphInputs.push(valueInfo(pastValue, F32, ['batch_size', nKV, 'past_sequence_length', D]));

    const hIn = rmsnorm(x, `${p}.input_layernorm.weight`);
    const q = rope(
      heads(
        linear(hIn, `${p}.self_attn.q_proj`, c.qkvBias),
        nH,
        c.qkNorm ? `${p}.self_attn.q_norm.weight` : null,
      ),
    );
    const k = rope(
      heads(
        linear(hIn, `${p}.self_attn.k_proj`, c.qkvBias),
        nKV,
        c.qkNorm ? `${p}.self_attn.k_norm.weight` : null,
      ),
    );
    const v = heads(linear(hIn, `${p}.self_attn.v_proj`, c.qkvBias), nKV, null);
    const keys = g.o('Concat', [pastKey, k], { axis: { i: 2 } }); // [B, KV, T, D]
    const values = g.o('Concat', [pastValue, v], { axis: { i: 2 } });
    presentNodes.push([keys, `present.${l}.key`], [values, `present.${l}.value`]);
    graphOutputs.push(valueInfo(`present.${l}.key`, F32, ['batch_size', nKV, 'total_sequence_length', D]));
    graphOutputs.push(valueInfo(`present.${l}.value`, F32, ['batch_size', nKV, 'total_sequence_length', D]));

    // Grouped-query attention without repeating K/V: q [B, KV, G, S, D] against k [B, KV, 1, D, T].
    const qGrouped = g.o('Reshape', [q, g.constI64([0, nKV, group, -1, D])]);
    const kT = g.o('Unsqueeze', [
      g.o('Transpose', [keys], { perm: { ints: [0, 1, 3, 2] } }),
      g.constI64([2]),
    ]);
    const scores = g.o('Add', [
      g.o('Mul', [g.o('MatMul', [qGrouped, kT]), g.constF32([1 / Math.sqrt(D)], true)]),
      maskBias,
    ]);
    const probs = g.o('Softmax', [scores], { axis: { i: -1 } });
    const attn = g.o('MatMul', [probs, g.o('Unsqueeze', [values, g.constI64([2])])]); // [B, KV, G, S, D]
    const merged = g.o('Reshape', [
      g.o('Transpose', [g.o('Reshape', [attn, g.constI64([0, nH, -1, D])])], {
        perm: { ints: [0, 2, 1, 3] },
      }),
      g.constI64([0, 0, nH * D]),
    ]);
    x = g.o('Add', [x, linear(merged, `${p}.self_attn.o_proj`, c.oBias)]);

    const hMlp = rmsnorm(x, `${p}.post_attention_layernorm.weight`);
    const gate = linear(hMlp, `${p}.mlp.gate_proj`, false);
    const up = linear(hMlp, `${p}.mlp.up_proj`, false);
    const act = g.o('Mul', [g.o('Mul', [gate, g.o('Sigmoid', [gate])]), up]);
    x = g.o('Add', [x, linear(act, `${p}.mlp.down_proj`, false)]);
  }
  const hFinal = rmsnorm(x, 'model.norm.weight');
  const head = c.tieWordEmbeddings ? 'model.embed_tokens.weight' : plain('lm_head.weight');
  const flat = g.o('Reshape', [hFinal, g.constI64([-1, H])]);
  const logits2d = g.o('Gemm', [flat, head], { transB: { i: 1 } });
  const logitsShape = g.o('Concat', [g.o('Shape', ['input_ids']), g.constI64([c.vocabSize])], {
    axis: { i: 0 },
  });
  g.nodes.push({ name: 'logits', opType: 'Reshape', input: [logits2d, logitsShape], output: ['logits'] });
  for (const [from, to] of presentNodes)
    g.nodes.push({ name: to, opType: 'Identity', input: [from], output: [to] });
  graphOutputs.unshift(valueInfo('logits', F32, ['batch_size', 'sequence_length', c.vocabSize]));

  const model: OnnxTypes.IModelProto = {
    irVersion: 8,
    opsetImport: [{ domain: '', version: ONNX_OPSET }],
    producerName: 'agent-r1-lab',
    producerVersion: options.producerVersion ?? '0',
    docString: `${c.architecture} (${c.numLayers} layers, hidden ${H}, vocab ${c.vocabSize}) exported by Agent-R1 Lab`,
    graph: {
      name: c.architecture,
      node: g.nodes,
      initializer: g.initializers,
      input: graphInputs,
      output: graphOutputs,
    },
  };
  return { model: onnx.ModelProto.encode(model).finish(), externalData: g.externalBytes() };
}

export interface TransformersJsExportInput {
  config: ModelConfig;
  generationConfig: GenerationConfig | null;
  tensors: Weights;
  /** tokenizer.json and tokenizer_config.json: transformers.js needs both. */
  tokenizerFiles: ReadonlyMap<string, string | Uint8Array>;
}

/**
 * The folder transformers.js loads (file name -> bytes): `pipeline('text-generation', folder)` with
 * no options picks fp32 (config.json says so) and the external data file when there is one.
 */
export function exportForTransformersJs(
  input: TransformersJsExportInput,
  options: OnnxExportOptions = {},
): Map<string, Uint8Array> {
  for (const name of ['tokenizer.json', 'tokenizer_config.json']) {
    if (!input.tokenizerFiles.has(name))
      throw new CheckpointError(
        name,
        'transformers.js needs the tokenizer files beside the ONNX model; this checkpoint has none',
      );
  }
  const graph = buildQwenOnnx(input.config, input.tensors, options);
  const encoder = new TextEncoder();
  const config = JSON.parse(serializeModelConfig({ ...input.config, torchDtype: 'float32' })) as Record<
    string,
    unknown
  >;
  config.head_dim = input.config.headDim; // transformers.js reads the cache's head size from here
  config['transformers.js_config'] = {
    dtype: 'fp32',
    ...(graph.externalData ? { use_external_data_format: true } : {}),
  };
  const generation: GenerationConfig = input.generationConfig ?? {
    bosTokenId: input.config.bosTokenId,
    eosTokenIds: input.config.eosTokenIds,
    padTokenId: null,
    doSample: false,
    temperature: 1,
    topP: 1,
    topK: 50,
    repetitionPenalty: 1,
    maxNewTokens: null,
    raw: {},
  };
  const files = new Map<string, Uint8Array>();
  files.set('config.json', encoder.encode(`${JSON.stringify(config, null, 2)}\n`));
  files.set('generation_config.json', encoder.encode(serializeGenerationConfig(generation)));
  for (const [name, content] of input.tokenizerFiles)
    files.set(name, typeof content === 'string' ? encoder.encode(content) : content);
  files.set(ONNX_MODEL_FILE, graph.model);
  if (graph.externalData) files.set(ONNX_DATA_FILE, graph.externalData);
  return files;
}
