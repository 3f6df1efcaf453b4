// The lab's engine (what the browser's worker runs) in Node on the default adapter, with runs kept in
// memory instead of OPFS, on configs/micro.json: the stepper plays an episode one turn per call and
// ends with a trajectory whose masks follow the token sources; two training steps log metrics,
// samples, checkpoints and the run's meta; a run left "running" (a closed tab) is listed as
// interrupted and resumes from its last checkpoint, cutting metrics.jsonl back and saying what was lost.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Gpu } from '../../src/gpu/runtime.ts';
import { parseConfigText, type TrainConfig } from '../../src/rl/config.ts';
import { memoryStorage, type RunStorage, readText } from '../../src/rl/storage.ts';
import { LabEngine, type RunStore } from '../../src/worker/engine.ts';
import type { EngineEvent } from '../../src/worker/protocol.ts';
import { getTestGpu } from '../helpers/gpu.ts';

const MODEL_DIR = 'public/models/qwen-tiny';
const FILES = [
  'config.json',
  'generation_config.json',
  'model.safetensors',
  'tokenizer.json',
  'tokenizer_config.json',
];

function memoryRuns(): RunStore & { folders: Map<string, RunStorage> } {
  const folders = new Map<string, RunStorage>();
  return {
    folders,
    async open(id) {
      let s = folders.get(id);
      if (!s) {
        s = memoryStorage(`memory:${id}`);
        folders.set(id, s);
      }
      return s;
    },
    async ids() {
      return [...folders.keys()].sort();
    },
    async remove(id) {
      folders.delete(id);
    },
  };
}

function micro(edit: (c: TrainConfig) => void): TrainConfig {
  const c = parseConfigText(readFileSync('configs/micro.json', 'utf8'), 'configs/micro.json');
  edit(c);
  return c;
}

let gpu: Gpu;
const runs = memoryRuns();
const events: EngineEvent[] = [];
let engine: LabEngine;

async function newEngine(createGpu: () => Promise<Gpu> = async () => gpu): Promise<LabEngine> {
  const e = new LabEngine((ev) => events.push(ev), runs, createGpu);
  await e.init();
  const files = FILES.map((n) => new File([readFileSync(join(MODEL_DIR, n))], n));
  const outcome = await e.loadModel({ kind: 'files', files, ignored: [] }, 'qwen-tiny (test)');
  if (!outcome.ok) throw new Error(outcome.error.message);
  return e;
}

beforeAll(async () => {
  gpu = await getTestGpu();
  engine = await newEngine();
});
afterAll(async () => {
  await engine?.trainReset().catch(() => undefined);
});

describe('LabEngine', () => {
  it('steps an episode one turn per call, then returns its trajectory', async () => {
    const config = micro(() => {});
    const start = await engine.stepperStart({
      config,
      pick: { kind: 'split', split: 'train', index: 0 },
      temperature: 1,
      seed: 5,
      searchTopK: 3,
    });
    expect(start.question.length).toBeGreaterThan(10);
    expect(start.tools.map((t) => t.function.name)).toEqual(['search']);
    const first = await engine.stepperAdvance(false);
    expect(first.turns).toHaveLength(1);
    expect(first.turns[0].turn).toBe(0);
    let trajectory = first.trajectory;
    let turns = first.turns.length;
    if (!trajectory) {
      const rest = await engine.stepperAdvance(true);
      turns += rest.turns.length;
      trajectory = rest.trajectory;
    }
    expect(trajectory).not.toBeNull();
    const t = trajectory!.trajectory;
    expect(t.turns).toBe(turns);
    expect(turns).toBeLessThanOrEqual(config.rollout.maxTurns);
    expect(trajectory!.tokenTexts).toHaveLength(t.ids.length);
    t.sources.forEach((s, j) => {
      expect(t.lossMask[j]).toBe(s === 'policy' ? 1 : 0);
    });
    // A finished episode does not step further.
    expect(await engine.stepperAdvance(true)).toEqual({ turns: [], trajectory: null });
  });

  it('reads a dropped HotpotQA file, steps its question, and names the place of a broken file', async () => {
    const record = {
      _id: 'q1',
      question: 'Who founded Brook Works?',
      answer: 'Ada Brook',
      type: 'bridge',
      level: 'easy',
      supporting_facts: [['Brook Works', 0]],
      context: [
        ['Brook Works', ['Brook Works was founded by Ada Brook.']],
        ['Other', ['Nothing here.']],
      ],
    };
    const info = await engine.loadTaskFile(new File([JSON.stringify([record])], 'hotpot.json'));
    expect(info).toMatchObject({ fileName: 'hotpot.json', kind: 'hotpotqa', count: 1, skipped: 0 });
    expect(info.sample).toEqual(['Who founded Brook Works?']);
    const start = await engine.stepperStart({
      config: micro(() => {}),
      pick: { kind: 'dropped', index: 0 },
      temperature: 0,
      seed: 1,
      searchTopK: 2,
    });
    expect(start.answers).toEqual(['Ada Brook']);
    await expect(
      engine.stepperStart({
        config: micro(() => {}),
        pick: { kind: 'dropped', index: 1 },
        temperature: 0,
        seed: 1,
        searchTopK: 2,
      }),
    ).rejects.toThrow('question 1 is not in hotpot.json (1 questions)');
    await expect(engine.loadTaskFile(new File(['[{"_id": "x", '], 'cut.json'))).rejects.toThrow(
      /^cut\.json:1:\d+: expected/,
    );
  });

  it('trains two steps with metrics, samples, checkpoints; resumes an interrupted run from its checkpoint', async () => {
    const config = micro((c) => {
      c.train.steps = 3;
      c.train.evalSize = 0;
      c.train.checkpointEvery = 1;
    });
    const setup = await engine.trainSetup({ config, resumeId: null });
    expect(setup.step).toBe(0);
    const id = setup.runId;
    await engine.trainOneStep();
    const two = await engine.trainOneStep();
    expect(two.step).toBe(2);
    expect(two.lastStepSeconds).toBeGreaterThan(0);
    const metricsEvents = events.filter((e) => e.type === 'train-metrics');
    expect(metricsEvents.map((e) => (e.type === 'train-metrics' ? e.line.step : -1))).toEqual([1, 2]);
    const phases = events.flatMap((e) => (e.type === 'train-state' && e.state.phase ? [e.state.phase] : []));
    expect(phases).toEqual(expect.arrayContaining(['rollout', 'reference', 'update', 'checkpoint']));

    const [run] = (await engine.listRuns()).filter((r) => r.meta.id === id);
    expect(run.meta).toMatchObject({
      status: 'paused',
      step: 2,
      steps: 3,
      algorithm: 'grpo',
      model: 'qwen3-model',
    });
    expect(run.metrics.map((l) => l.step)).toEqual([1, 2]);
    expect(run.checkpoints).toEqual([1, 2]);
    const views = await engine.trajectoriesOf(id, 2);
    expect(views).toHaveLength(4);
    expect(views[0].trained).not.toBeNull();
    const adv = views[0].trained!.advantage;
    views[0].trajectory.sources.forEach((s, j) => {
      expect(Number.isNaN(adv[j])).toBe(s !== 'policy' || j === 0);
    });

    // A tab closed during step 3: the meta says running at step 3, metrics.jsonl has a step-3 line,
    // and only the step-2 checkpoint exists.
    const storage = runs.folders.get(id)!;
    const meta = JSON.parse((await readText(storage, 'lab-run.json'))!);
    await storage.write('lab-run.json', JSON.stringify({ ...meta, status: 'running', step: 3 }));
    await storage.append('metrics.jsonl', `${JSON.stringify({ step: 3, 'reward/mean': 0 })}\n`);
    await engine.trainReset();
    const fresh = await newEngine(); // the reloaded page's engine
    const listed = (await fresh.listRuns()).find((r) => r.meta.id === id)!;
    expect(listed.meta.status).toBe('interrupted');
    const resumed = await fresh.trainSetup({ config: micro(() => {}), resumeId: id });
    expect(resumed.step).toBe(2);
    expect(resumed.steps).toBe(3); // the run's own config, not the page's
    expect(resumed.message).toBe(
      `resumed run ${id} from its checkpoint at step 2 (it had reached step 3: 1 step lost, run again)`,
    );
    const kept = (await readText(storage, 'metrics.jsonl'))!.trim().split('\n');
    expect(kept.map((l) => JSON.parse(l).step)).toEqual([1, 2]);
    const three = await fresh.trainOneStep();
    expect(three.step).toBe(3);
    const done = (await fresh.listRuns()).find((r) => r.meta.id === id)!;
    expect(done.meta.status).toBe('done');
    expect(done.metrics.map((l) => l.step)).toEqual([1, 2, 3]);
    await expect(fresh.trainOneStep()).rejects.toThrow('the run is done (3 of 3 steps)');
    await fresh.trainReset();
  });

  it('trains LoRA adapters on a bf16 base in the tab; the download holds the merged weights and the PEFT adapter', async () => {
    const config = micro((c) => {
      c.train.steps = 1;
      c.train.evalSize = 0;
      c.model.lora = { rank: 4, alpha: 8, modules: ['q_proj', 'v_proj'] };
      c.model.frozenWeights = 'bf16';
    });
    await engine.trainSetup({ config, resumeId: null });
    const one = await engine.trainOneStep();
    expect(one.step).toBe(1);
    const line = events.findLast((e) => e.type === 'train-metrics');
    expect(line?.type === 'train-metrics' && line.line['actor/kl_ref_k3']).toBe(0);
    const zip = await engine.trainWeightsZip();
    expect(zip.files.map((f) => f.name)).toEqual(
      expect.arrayContaining([
        'model.safetensors',
        'config.json',
        'adapter/adapter_config.json',
        'adapter/adapter_model.safetensors',
      ]),
    );
    await engine.trainReset();
  });

  it('ONNX: the loaded model and a trained policy zip for transformers.js; the in-tab check (wasm) equals the engine', async () => {
    const zip = await engine.exportOnnx('model');
    expect(zip.fileName).toBe('qwen3-model-onnx.zip');
    expect(zip.files.map((f) => f.name).sort()).toEqual([
      'config.json',
      'generation_config.json',
      'onnx/model.onnx',
      'tokenizer.json',
      'tokenizer_config.json',
    ]);
    const check = await engine.checkOnnx('model', 'wasm');
    expect(check).toMatchObject({ provider: 'wasm', steps: 32, sameTokens: true, firstDifference: null });
    expect(check.maxLogitDiff).toBeLessThan(1e-4);
    expect(check.onnxText.length).toBeGreaterThan(0);

    const config = micro((c) => {
      c.train.steps = 1;
      c.train.evalSize = 0;
      c.train.checkpointEvery = 0;
      c.actor.lr = 1e-2; // a visible change of the weights in one step
    });
    await expect(engine.exportOnnx('train')).rejects.toThrow();
    const setup = await engine.trainSetup({ config, resumeId: null });
    await engine.trainOneStep();
    const trained = await engine.exportOnnx('train');
    expect(trained.fileName).toBe(`${setup.runId}-step1-onnx.zip`);
    const trainedCheck = await engine.checkOnnx('train', 'wasm');
    expect(trainedCheck.sameTokens).toBe(true);
    expect(trainedCheck.maxLogitDiff).toBeLessThan(1e-4);
    await engine.trainReset();
  });

  it('after a lost device: a new device, the model again, and the run from its last checkpoint', async () => {
    const devices: Gpu[] = [];
    const e = await newEngine(async () => {
      const g = await Gpu.create();
      devices.push(g);
      return g;
    });
    try {
      const config = micro((c) => {
        c.train.steps = 4;
        c.train.evalSize = 0;
        c.train.checkpointEvery = 2;
      });
      const { runId } = await e.trainSetup({ config, resumeId: null });
      for (let k = 0; k < 3; k++) await e.trainOneStep();
      const lost = new Promise<EngineEvent>((resolve) => {
        const before = events.length;
        const poll = setInterval(() => {
          const ev = events.slice(before).find((x) => x.type === 'gpu-lost');
          if (ev) {
            clearInterval(poll);
            resolve(ev);
          }
        }, 20);
      });
      devices[0].device.destroy();
      expect((await lost).type).toBe('gpu-lost');
      await expect(e.trainOneStep()).rejects.toThrow();
      const r = await e.recoverGpu();
      expect(devices).toHaveLength(2);
      expect(r.model?.name).toBe('qwen3-model');
      expect(r.train).toMatchObject({ runId, step: 2, steps: 4, running: false });
      expect(r.train!.message).toBe(
        'the GPU device was lost at step 3; resumed from the checkpoint at step 2 (1 step lost, run again)',
      );
      const storage = runs.folders.get(runId)!;
      expect((await readText(storage, 'metrics.jsonl'))!.trim().split('\n')).toHaveLength(2);
      // The new device trains.
      expect((await e.trainOneStep()).step).toBe(3);
      await e.trainReset();
    } finally {
      for (const d of devices) d.destroy();
    }
  });
});
