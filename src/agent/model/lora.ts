// LoRA adapters (Hu et al. 2021) on a Qwen decoder's projections, in PEFT's layout:
//
//   y = x·Wᵀ + b + (alpha / r) · (x·Aᵀ)·Bᵀ        A [r, in] (lora_A), B [out, r] (lora_B)
//
// A starts as PEFT's kaiming_uniform(a=√5) (uniform in ±1/√in), B at zero, so a fresh adapter leaves
// the model unchanged. The GPU path lives in QwenGpuModel (a low-rank branch beside each frozen matmul);
// this file holds the pure parts: names and shapes, initialisation, merging into the base weights, and
// PEFT's files (adapter_config.json + adapter_model.safetensors, keys prefixed "base_model.model.").

import type { ModelConfig } from './config.ts';
import { CheckpointError } from './errors.ts';
import {
  PT_FORMAT_METADATA,
  parseSafetensors,
  serializeSafetensors,
  type TensorToWrite,
  tensorToFloat32,
} from './safetensors.ts';
import { hash32, mulberry32 } from './tiny-checkpoints.ts';

export const LORA_MODULES = [
  'q_proj',
  'k_proj',
  'v_proj',
  'o_proj',
  'gate_proj',
  'up_proj',
  'down_proj',
] as const;
export type LoraModule = (typeof LORA_MODULES)[number];

export interface LoraConfig {
  rank: number;
  alpha: number;
  modules: LoraModule[];
}

export const PEFT_CONFIG_FILE = 'adapter_config.json';
export const PEFT_WEIGHTS_FILE = 'adapter_model.safetensors';
const PEFT_PREFIX = 'base_model.model.';

type Weights = ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>;

/** The module's path under a layer (self_attn.q_proj, mlp.down_proj, ...). */
export function modulePath(module: LoraModule): string {
  return module === 'gate_proj' || module === 'up_proj' || module === 'down_proj'
    ? `mlp.${module}`
    : `self_attn.${module}`;
}

/** [out, in] of a module's weight. */
export function moduleShape(config: ModelConfig, module: LoraModule): [number, number] {
  const { hiddenSize: H, intermediateSize: I, numHeads, numKvHeads, headDim: D } = config;
  switch (module) {
    case 'q_proj':
      return [numHeads * D, H];
    case 'k_proj':
    case 'v_proj':
      return [numKvHeads * D, H];
    case 'o_proj':
      return [H, numHeads * D];
    case 'gate_proj':
    case 'up_proj':
      return [I, H];
    case 'down_proj':
      return [H, I];
  }
}

export function loraScale(lora: LoraConfig): number {
  return lora.alpha / lora.rank;
}

/** Every adapter tensor: the base module's name (model.layers.l.self_attn.q_proj), A's and B's. */
export function loraTensors(
  config: ModelConfig,
  lora: LoraConfig,
): { module: string; a: string; b: string; aShape: [number, number]; bShape: [number, number] }[] {
  checkLoraConfig(lora);
  const out = [];
  for (let l = 0; l < config.numLayers; l++)
    for (const m of lora.modules) {
      const module = `model.layers.${l}.${modulePath(m)}`;
      const [o, i] = moduleShape(config, m);
      out.push({
        module,
        a: `${module}.lora_A.weight`,
        b: `${module}.lora_B.weight`,
        aShape: [lora.rank, i] as [number, number],
        bShape: [o, lora.rank] as [number, number],
      });
    }
  return out;
}

export function checkLoraConfig(lora: LoraConfig): void {
  if (!Number.isInteger(lora.rank) || lora.rank < 1)
    throw new Error(`LoRA rank must be an integer >= 1, got ${lora.rank}`);
  if (!(lora.alpha > 0)) throw new Error(`LoRA alpha must be > 0, got ${lora.alpha}`);
  if (lora.modules.length === 0) throw new Error('LoRA needs at least one target module');
  for (const m of lora.modules)
    if (!LORA_MODULES.includes(m))
      throw new Error(`LoRA target module "${m}" is not one of ${LORA_MODULES.join(', ')}`);
}

/** A fresh adapter: A uniform in ±1/√in (PEFT's kaiming_uniform with a = √5), B = 0. */
export function initLoraWeights(
  config: ModelConfig,
  lora: LoraConfig,
  seed: number,
): Map<string, { shape: number[]; data: Float32Array }> {
  const out = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const t of loraTensors(config, lora)) {
    const a = new Float32Array(t.aShape[0] * t.aShape[1]);
    const rand = mulberry32(hash32(`${seed}:${t.a}`));
    const bound = 1 / Math.sqrt(t.aShape[1]);
    for (let i = 0; i < a.length; i++) a[i] = (2 * rand() - 1) * bound;
    out.set(t.a, { shape: [...t.aShape], data: a });
    out.set(t.b, { shape: [...t.bShape], data: new Float32Array(t.bShape[0] * t.bShape[1]) });
  }
  return out;
}

/** The base weights with every adapter merged in: W + (alpha / r)·B·A (float64 sums, float32 result). */
export function mergeLora(
  config: ModelConfig,
  base: Weights,
  adapter: Weights,
  lora: LoraConfig,
): Map<string, { shape: number[]; data: Float32Array }> {
  const scale = loraScale(lora);
  const out = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const [name, t] of base) out.set(name, { shape: [...t.shape], data: t.data });
  for (const t of loraTensors(config, lora)) {
    const w = base.get(`${t.module}.weight`);
    const A = adapter.get(t.a)?.data;
    const B = adapter.get(t.b)?.data;
    if (!w || !A || !B)
      throw new Error(`mergeLora: ${!w ? `${t.module}.weight` : !A ? t.a : t.b} is missing`);
    const [o, i] = [t.bShape[0], t.aShape[1]];
    const r = lora.rank;
    const merged = new Float32Array(w.data);
    for (let row = 0; row < o; row++)
      for (let col = 0; col < i; col++) {
        let s = 0;
        for (let k = 0; k < r; k++) s += B[row * r + k] * A[k * i + col];
        merged[row * i + col] += scale * s;
      }
    out.set(`${t.module}.weight`, { shape: [o, i], data: merged });
  }
  return out;
}

/** PEFT's adapter files: adapter_config.json and adapter_model.safetensors (F32). */
export function savePeftAdapter(input: {
  config: ModelConfig;
  lora: LoraConfig;
  tensors: Weights;
  baseModel: string;
}): Map<string, Uint8Array> {
  const toWrite = new Map<string, TensorToWrite>();
  for (const t of loraTensors(input.config, input.lora))
    for (const [name, shape] of [
      [t.a, t.aShape],
      [t.b, t.bShape],
    ] as const) {
      const w = input.tensors.get(name);
      if (!w || w.data.length !== shape[0] * shape[1])
        throw new Error(`savePeftAdapter: ${name} is missing or not [${shape.join(', ')}]`);
      toWrite.set(`${PEFT_PREFIX}${name}`, {
        dtype: 'F32',
        shape: [...shape],
        data: new Uint8Array(w.data.buffer, w.data.byteOffset, w.data.byteLength),
      });
    }
  const adapterConfig = {
    base_model_name_or_path: input.baseModel,
    bias: 'none',
    fan_in_fan_out: false,
    inference_mode: true,
    init_lora_weights: true,
    lora_alpha: input.lora.alpha,
    lora_dropout: 0,
    modules_to_save: null,
    peft_type: 'LORA',
    r: input.lora.rank,
    target_modules: [...input.lora.modules],
    task_type: 'CAUSAL_LM',
  };
  return new Map([
    [PEFT_CONFIG_FILE, new TextEncoder().encode(`${JSON.stringify(adapterConfig, null, 2)}\n`)],
    [PEFT_WEIGHTS_FILE, serializeSafetensors(toWrite, PT_FORMAT_METADATA, PEFT_WEIGHTS_FILE)],
  ]);
}

/** Reads PEFT's adapter files for `config`; every problem is a CheckpointError naming the file. */
export function loadPeftAdapter(
  config: ModelConfig,
  files: ReadonlyMap<string, Uint8Array>,
): { lora: LoraConfig; tensors: Map<string, { shape: number[]; data: Float32Array }> } {
  const configBytes = files.get(PEFT_CONFIG_FILE);
  const weightBytes = files.get(PEFT_WEIGHTS_FILE);
  if (!configBytes) throw new CheckpointError(PEFT_CONFIG_FILE, 'missing: a PEFT adapter needs it');
  if (!weightBytes) throw new CheckpointError(PEFT_WEIGHTS_FILE, 'missing: a PEFT adapter needs it');
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(new TextDecoder().decode(configBytes));
  } catch (e) {
    throw new CheckpointError(PEFT_CONFIG_FILE, `not JSON: ${(e as Error).message}`);
  }
  if (json.peft_type !== 'LORA')
    throw new CheckpointError(PEFT_CONFIG_FILE, `peft_type ${JSON.stringify(json.peft_type)} is not "LORA"`);
  if (json.bias !== undefined && json.bias !== 'none')
    throw new CheckpointError(
      PEFT_CONFIG_FILE,
      `bias ${JSON.stringify(json.bias)} is not supported (only "none")`,
    );
  if (json.fan_in_fan_out === true)
    throw new CheckpointError(PEFT_CONFIG_FILE, 'fan_in_fan_out: true is not supported');
  if (json.use_dora === true) throw new CheckpointError(PEFT_CONFIG_FILE, 'DoRA adapters are not supported');
  if (json.use_rslora === true)
    throw new CheckpointError(PEFT_CONFIG_FILE, 'rsLoRA scaling is not supported');
  const targets = json.target_modules;
  const modules = (Array.isArray(targets) ? targets : []) as LoraModule[];
  const lora: LoraConfig = { rank: Number(json.r), alpha: Number(json.lora_alpha), modules };
  try {
    checkLoraConfig(lora);
  } catch (e) {
    throw new CheckpointError(PEFT_CONFIG_FILE, (e as Error).message);
  }
  const file = parseSafetensors(weightBytes, PEFT_WEIGHTS_FILE);
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  const expected = loraTensors(config, lora);
  const wanted = new Set(expected.flatMap((t) => [t.a, t.b]));
  for (const name of file.tensors.keys()) {
    const short = name.startsWith(PEFT_PREFIX) ? name.slice(PEFT_PREFIX.length) : name;
    if (!wanted.has(short))
      throw new CheckpointError(PEFT_WEIGHTS_FILE, `unexpected tensor '${name}' for this model and config`);
  }
  for (const t of expected)
    for (const [name, shape] of [
      [t.a, t.aShape],
      [t.b, t.bShape],
    ] as const) {
      const key = file.tensors.has(`${PEFT_PREFIX}${name}`) ? `${PEFT_PREFIX}${name}` : name;
      const entry = file.tensors.get(key);
      if (!entry) throw new CheckpointError(PEFT_WEIGHTS_FILE, `tensor '${PEFT_PREFIX}${name}' is missing`);
      if (entry.shape.length !== 2 || entry.shape[0] !== shape[0] || entry.shape[1] !== shape[1])
        throw new CheckpointError(
          PEFT_WEIGHTS_FILE,
          `tensor '${name}' is [${entry.shape.join(', ')}], the model needs [${shape.join(', ')}]`,
        );
      tensors.set(name, { shape: [...shape], data: tensorToFloat32(file, key) });
    }
  return { lora, tensors };
}
