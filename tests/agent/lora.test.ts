// LoRA (src/agent/model/lora.ts and QwenGpuModel.addLora): the adapted model's logits equal the merged
// model's; adapters off = the base model exactly; A and B gradients match finite differences of the
// float64 reference forward of the merged weights; base weights get no gradient; PEFT files round-trip
// and bad ones are refused by name.
import { describe, expect, it } from 'vitest';
import type { ModelConfig } from '../../src/agent/model/config.ts';
import { CheckpointError } from '../../src/agent/model/errors.ts';
import {
  initLoraWeights,
  LORA_MODULES,
  type LoraConfig,
  loadPeftAdapter,
  loraScale,
  loraTensors,
  mergeLora,
  PEFT_CONFIG_FILE,
  PEFT_WEIGHTS_FILE,
  savePeftAdapter,
} from '../../src/agent/model/lora.ts';
import { packBatch, QwenGpuModel } from '../../src/agent/model/qwen-gpu.ts';
import { parseSafetensors } from '../../src/agent/model/safetensors.ts';
import { tinyCheckpoint, tinySpec } from '../../src/agent/model/tiny-checkpoints.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';
import { referenceLoss } from '../reference/qwen-ref.ts';
import { maxAbsDiff, nextTokenTargets } from './helpers.ts';

type Weights = Map<string, { shape: number[]; data: Float32Array }>;

const LORA: LoraConfig = { rank: 4, alpha: 8, modules: [...LORA_MODULES] };

function tiny(name: string): { config: ModelConfig; weights: Weights } {
  const { config, tensors } = tinyCheckpoint(tinySpec(name));
  return { config, weights: tensors as unknown as Weights };
}

/** An adapter whose B is not zero (a fresh one changes nothing, so it would test nothing). */
function trainedAdapter(config: ModelConfig, lora: LoraConfig, seed: number): Weights {
  const w = initLoraWeights(config, lora, seed);
  let k = 0;
  for (const t of loraTensors(config, lora))
    w.get(t.b)!.data.set(randomArray(t.bShape[0] * t.bShape[1], seed + ++k, 0.2));
  return w;
}

const seqs = [
  [5, 17, 99, 3, 250, 41, 7],
  [8, 300, 12, 60],
];

describe('LoRA', () => {
  for (const name of ['tiny-qwen2-v512', 'tiny-qwen3-v512']) {
    it(`${name}: adapted logits = merged-weight logits; adapters off = the base model exactly`, async () => {
      const gpu = await getTestGpu();
      const { config, weights } = tiny(name);
      const adapter = trainedAdapter(config, LORA, 3);
      const base = new QwenGpuModel(gpu, config, weights);
      const adapted = new QwenGpuModel(gpu, config, weights);
      adapted.addLora(LORA, adapter);
      const merged = new QwenGpuModel(gpu, config, mergeLora(config, weights, adapter, LORA));
      const batch = packBatch(seqs);
      const la = await adapted.logits(batch);
      const lm = await merged.logits(batch);
      const lb = await base.logits(batch);
      expect(maxAbsDiff(la, lm)).toBeLessThan(1e-4);
      expect(maxAbsDiff(la, lb)).toBeGreaterThan(1e-2); // the adapter does change the model
      adapted.adaptersEnabled = false;
      expect(await adapted.logits(batch)).toEqual(lb);
      adapted.adaptersEnabled = true;
      // KV-cache decoding goes through the adapters too: greedy tokens equal the merged model's.
      const g1 = await adapted.generate([seqs[0]], { maxNewTokens: 12, temperature: 0 });
      const g2 = await merged.generate([seqs[0]], { maxNewTokens: 12, temperature: 0 });
      expect(g1.tokens).toEqual(g2.tokens);
      for (const m of [base, adapted, merged]) m.release();
    });
  }

  it('gradients of A and B match finite differences of the float64 reference; the base gets none', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen3-v512');
    const lora: LoraConfig = {
      rank: 2,
      alpha: 6,
      modules: ['q_proj', 'v_proj', 'o_proj', 'up_proj', 'down_proj'],
    };
    const adapter = trainedAdapter(config, lora, 5);
    const model = new QwenGpuModel(gpu, config, weights);
    model.addLora(lora, adapter);
    expect([...model.trainableParams().keys()].sort()).toEqual(
      loraTensors(config, lora)
        .flatMap((t) => [t.a, t.b])
        .sort(),
    );
    const batch = packBatch(seqs, { padSide: 'left' });
    const { targets, mask, count, N } = nextTokenTargets(batch);
    const fwd = model.forward(batch, targets, mask);
    const g = gpu.upload(
      Float32Array.from(mask, (m) => (m ? -1 / count : 0)),
      [N],
    );
    model.backward(fwd, g);
    fwd.release();
    g.release();
    expect(model.grads.has('model.layers.0.self_attn.q_proj.weight')).toBe(false);
    expect(model.grads.has('model.embed_tokens.weight')).toBe(false);

    // Reference loss: mean next-token NLL of the float64 forward of W + (alpha/r)·B·A (in float64).
    const scale = loraScale(lora);
    const loss = (a: Weights): number => {
      const m = new Map(weights) as Map<string, { shape: number[]; data: Float32Array }>;
      for (const t of loraTensors(config, lora)) {
        const W = weights.get(`${t.module}.weight`)!.data;
        const A = a.get(t.a)!.data;
        const B = a.get(t.b)!.data;
        const [o, i] = [t.bShape[0], t.aShape[1]];
        const out = Float64Array.from(W);
        for (let r = 0; r < o; r++)
          for (let c = 0; c < i; c++) {
            let s = 0;
            for (let k = 0; k < lora.rank; k++) s += B[r * lora.rank + k] * A[k * i + c];
            out[r * i + c] += scale * s;
          }
        m.set(`${t.module}.weight`, { shape: [o, i], data: out as unknown as Float32Array });
      }
      return referenceLoss(config, m, seqs);
    };
    const probes: [string, number][] = [];
    for (const t of loraTensors(config, lora).filter((_, k) => k % 3 === 0))
      for (const name of [t.a, t.b]) probes.push([name, Math.floor(0.37 * adapter.get(name)!.data.length)]);
    const grads = new Map<string, Float32Array>();
    for (const [name] of probes) grads.set(name, await gpu.readF32(model.grad(name)));
    let maxAbs = 0;
    for (const gr of grads.values()) for (const v of gr) maxAbs = Math.max(maxAbs, Math.abs(v));
    expect(maxAbs).toBeGreaterThan(0);
    const eps = 1e-3;
    for (const [name, idx] of probes) {
      const f64 = Float64Array.from(adapter.get(name)!.data);
      const at = (delta: number) => {
        const copy = Float64Array.from(f64);
        copy[idx] += delta;
        const a = new Map(adapter);
        a.set(name, { shape: adapter.get(name)!.shape, data: copy as unknown as Float32Array });
        return loss(a);
      };
      const fd = (at(eps) - at(-eps)) / (2 * eps);
      const got = grads.get(name)![idx];
      expect(Math.abs(got - fd), `${name}[${idx}] gpu ${got} fd ${fd}`).toBeLessThanOrEqual(
        2e-3 * maxAbs + 2e-3 * Math.abs(fd),
      );
    }
    model.release();
  });

  it('PEFT files round-trip (adapter_config.json + adapter_model.safetensors) and bad ones are refused by name', () => {
    const { config } = tiny('tiny-qwen3-v512');
    const adapter = trainedAdapter(config, LORA, 7);
    const files = savePeftAdapter({ config, lora: LORA, tensors: adapter, baseModel: 'qwen-tiny' });
    const json = JSON.parse(new TextDecoder().decode(files.get(PEFT_CONFIG_FILE)));
    expect(json).toMatchObject({
      peft_type: 'LORA',
      r: 4,
      lora_alpha: 8,
      task_type: 'CAUSAL_LM',
      bias: 'none',
    });
    expect(json.target_modules).toEqual([...LORA_MODULES]);
    const st = parseSafetensors(files.get(PEFT_WEIGHTS_FILE)!, PEFT_WEIGHTS_FILE);
    expect(st.tensors.has('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')).toBe(true);
    const back = loadPeftAdapter(config, files);
    expect(back.lora).toEqual(LORA);
    for (const [name, t] of adapter) expect(back.tensors.get(name)!.data).toEqual(t.data);

    const edit = (patch: Record<string, unknown>) =>
      new Map([
        ...files,
        [PEFT_CONFIG_FILE, new TextEncoder().encode(JSON.stringify({ ...json, ...patch }))],
      ]);
    expect(() => loadPeftAdapter(config, edit({ peft_type: 'IA3' }))).toThrow(CheckpointError);
    expect(() => loadPeftAdapter(config, edit({ use_dora: true }))).toThrow(/DoRA/);
    expect(() => loadPeftAdapter(config, edit({ target_modules: ['lm_head'] }))).toThrow(/lm_head/);
    expect(() => loadPeftAdapter(config, edit({ r: 8 }))).toThrow(/\[8, 64\]|is \[4/);
    expect(() =>
      loadPeftAdapter(config, new Map([[PEFT_CONFIG_FILE, files.get(PEFT_CONFIG_FILE)!]])),
    ).toThrow(/adapter_model\.safetensors/);
  });
});
