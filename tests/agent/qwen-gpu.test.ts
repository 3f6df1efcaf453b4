// The composed GPU model against independent oracles: the plain-TS f64 reference forward
// (tests/reference/qwen-ref.ts), finite differences of that reference, and the tfjs decoder layer.
import { describe, expect, it } from 'vitest';
import { loadCheckpoint, saveCheckpoint } from '../../src/agent/model/checkpoint.ts';
import type { ModelConfig } from '../../src/agent/model/config.ts';
import { initLoraWeights, LORA_MODULES, type LoraConfig } from '../../src/agent/model/lora.ts';
import {
  type ForwardActivations,
  type GenerateOptions,
  packBatch,
  QwenGpuModel,
  type TokenBatch,
} from '../../src/agent/model/qwen-gpu.ts';
import { memorySource } from '../../src/agent/model/sources.ts';
import { tinyCheckpoint, tinySpec } from '../../src/agent/model/tiny-checkpoints.ts';
import { AdamW } from '../../src/gpu/kernels/optimizer.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';
import { qwenForward, referenceLoss } from '../reference/qwen-ref.ts';
import {
  type DecoderParamName,
  decoderLayerGradsTf,
  HF_LAYER_NAMES,
  hfLayerParams,
  initTf,
} from '../reference/tfjs-decoder-layer.ts';

type Weights = Map<string, { shape: readonly number[]; data: Float32Array }>;

function tiny(name: string): { config: ModelConfig; weights: Weights } {
  const { config, tensors } = tinyCheckpoint(tinySpec(name));
  return { config, weights: tensors as unknown as Weights };
}

/** max |a - b| / max(1, |b|) over the listed positions' rows of width V. */
function rowsError(got: ArrayLike<number>, ref: ArrayLike<number>, n: number): number {
  let worst = 0;
  for (let i = 0; i < n; i++) {
    if (!Number.isFinite(got[i])) return Number.POSITIVE_INFINITY;
    worst = Math.max(worst, Math.abs(got[i] - ref[i]) / Math.max(1, Math.abs(ref[i])));
  }
  return worst;
}

/** ||a - b|| / ||b||. */
function normError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    if (!Number.isFinite(a[i])) return Number.POSITIVE_INFINITY;
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  return Math.sqrt(num / Math.max(den, 1e-30));
}

function tokens(n: number, seed: number, vocab: number): number[] {
  return Array.from(randomArray(n, seed), (x) => Math.floor(((x + 1) / 2) * vocab) % vocab);
}

describe('QwenGpuModel forward', () => {
  for (const name of ['tiny-qwen2-v512', 'tiny-qwen2-tied-v512', 'tiny-qwen3-v512']) {
    for (const padSide of ['left', 'right'] as const) {
      it(`${name}: logits equal the f64 reference with ${padSide} padding (rel <= 1e-4)`, async () => {
        const gpu = await getTestGpu();
        const { config, weights } = tiny(name);
        const model = new QwenGpuModel(gpu, config, weights);
        const seqs = [tokens(9, 1, config.vocabSize), tokens(5, 2, config.vocabSize)];
        const batch = packBatch(seqs, { padSide });
        const logits = await model.logits(batch);
        const V = config.vocabSize;
        seqs.forEach((seq, b) => {
          const ref = qwenForward(config, weights, seq).logits;
          const start = padSide === 'left' ? batch.T - seq.length : 0;
          const got = logits.subarray((b * batch.T + start) * V, (b * batch.T + start + seq.length) * V);
          expect(rowsError(got, ref, seq.length * V), `row ${b}`).toBeLessThanOrEqual(1e-4);
        });
        model.release();
      });
    }
  }
});

describe('QwenGpuModel KV-cache generation', () => {
  it('decode logits equal a full recompute at every step, across a mid-turn append of uneven length', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen3-v512');
    const V = config.vocabSize;
    const model = new QwenGpuModel(gpu, config, weights);
    const prompts = [tokens(6, 3, V), tokens(3, 4, V)];
    const history = prompts.map((p) => [...p]);
    const session = model.startSession(2, 40);
    const check = async (label: string) => {
      const got = await session.readLogits();
      history.forEach((seq, b) => {
        const ref = qwenForward(config, weights, seq).logits.subarray((seq.length - 1) * V, seq.length * V);
        expect(rowsError(got.subarray(b * V, (b + 1) * V), ref, V), `${label} row ${b}`).toBeLessThanOrEqual(
          1e-4,
        );
      });
    };
    session.append(prompts);
    await check('prefill');
    // Greedy turn of 4 tokens; each sampled token must be the reference argmax at that point.
    const turn = await session.sample({ maxNewTokens: 4, temperature: 0 });
    for (let b = 0; b < 2; b++) {
      for (const id of turn.tokens[b]) {
        const ref = qwenForward(config, weights, history[b]).logits.subarray((history[b].length - 1) * V);
        let arg = 0;
        for (let j = 1; j < V; j++) if (ref[j] > ref[arg]) arg = j;
        expect(id, `greedy row ${b}`).toBe(arg);
        history[b].push(id);
      }
    }
    // A "tool response" of different lengths per row, appended without recomputing the prefix.
    const tool = [tokens(5, 5, V), tokens(2, 6, V)];
    session.append(tool);
    tool.forEach((t, b) => {
      history[b].push(...t);
    });
    await check('after append');
    const turn2 = await session.sample({ maxNewTokens: 2, temperature: 0 });
    turn2.tokens.forEach((t, b) => {
      history[b].push(...t);
    });
    session.append([[], []]); // flushes the last sampled tokens into the cache
    await check('second turn');
    session.release();
    model.release();
  });

  it('sampling is reproducible with a seed and differs across seeds', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen2-v512');
    const model = new QwenGpuModel(gpu, config, weights);
    const prompts = [tokens(4, 7, 512), tokens(6, 8, 512), tokens(2, 9, 512)];
    const opts = { maxNewTokens: 8, temperature: 1, topP: 0.95, topK: 50 };
    const a = await model.generate(prompts, { ...opts, seed: 42 });
    const b = await model.generate(prompts, { ...opts, seed: 42 });
    const c = await model.generate(prompts, { ...opts, seed: 43 });
    expect(a.tokens).toEqual(b.tokens);
    expect(a.logprobs).toEqual(b.logprobs);
    expect(a.tokens).not.toEqual(c.tokens);
    for (const row of a.logprobs) for (const lp of row) expect(lp).toBeLessThanOrEqual(0);
    model.release();
  });

  it('inactive rows sample nothing and use no cache slots; they resume later with exact logits', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen2-v512');
    const V = config.vocabSize;
    const model = new QwenGpuModel(gpu, config, weights);
    const prompts = [tokens(5, 21, V), tokens(3, 22, V)];
    // Row 0 alone in its own session: the reference for row 0's tokens (RNG stream = row index).
    const alone = model.startSession(2, 12);
    alone.append([prompts[0], []]);
    const ref = await alone.sample({ maxNewTokens: 4, temperature: 1, seed: 5, active: [true, false] });
    alone.release();
    const session = model.startSession(2, 14);
    session.append(prompts);
    const turn = await session.sample({ maxNewTokens: 4, temperature: 1, seed: 5, active: [true, false] });
    expect(turn.tokens[1]).toEqual([]);
    expect(turn.finish[1]).toBe('inactive');
    expect(turn.tokens[0]).toEqual(ref.tokens[0]);
    expect(turn.logprobs[0]).toEqual(ref.logprobs[0]);
    session.append([[], []]); // flushes row 0's last token; row 1 appends nothing
    expect(session.rowLengths()).toEqual([5 + 4, 3]);
    // Row 1 resumes with 5 tokens while row 0 appends 1: its logits equal a full recompute.
    const more = [tokens(1, 23, V), tokens(5, 24, V)];
    session.append(more);
    const history = [
      [...prompts[0], ...turn.tokens[0], ...more[0]],
      [...prompts[1], ...more[1]],
    ];
    const got = await session.readLogits();
    history.forEach((seq, b) => {
      const want = qwenForward(config, weights, seq).logits.subarray((seq.length - 1) * V, seq.length * V);
      expect(rowsError(got.subarray(b * V, (b + 1) * V), want, V), `row ${b}`).toBeLessThanOrEqual(1e-4);
    });
    // No active row: nothing is sampled.
    const none = await session.sample({ maxNewTokens: 3, temperature: 1, active: [false, false] });
    expect(none.tokens).toEqual([[], []]);
    expect(() => session.append([tokens(5, 25, V), []])).toThrow(/row 0 holds 10 tokens/);
    session.release();
    model.release();
  });

  it('copyRow shares a prefilled prompt: copies sample and continue exactly as rows that prefilled it', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen3-v512');
    const V = config.vocabSize;
    const model = new QwenGpuModel(gpu, config, weights);
    const prompt = tokens(7, 41, V);
    const opts = { maxNewTokens: 5, temperature: 1, seed: 3 };
    const full = model.startSession(3, 24);
    full.append([prompt, prompt, prompt]);
    const want = await full.sample(opts);
    const shared = model.startSession(3, 24);
    shared.append([prompt, [], []]);
    shared.copyRow(0, [1, 2]);
    expect(shared.rowLengths()).toEqual([7, 7, 7]);
    const got = await shared.sample(opts);
    expect(got.tokens).toEqual(want.tokens);
    expect(got.logprobs).toEqual(want.logprobs);
    // The copies' caches hold the prompt: after an append their logits equal a full recompute.
    const more = [tokens(2, 42, V), tokens(3, 43, V), tokens(1, 44, V)];
    shared.append(more);
    const logits = await shared.readLogits();
    for (let b = 0; b < 3; b++) {
      const seq = [...prompt, ...got.tokens[b], ...more[b]];
      const ref = qwenForward(config, weights, seq).logits.subarray((seq.length - 1) * V, seq.length * V);
      expect(rowsError(logits.subarray(b * V, (b + 1) * V), ref, V), `row ${b}`).toBeLessThanOrEqual(1e-4);
    }
    expect(() => shared.copyRow(0, [3])).toThrow(/row 3 is outside the session's 3 rows/);
    for (const s of [full, shared]) s.release();
    model.release();
  });

  it("an append too large for one forward's bindings runs in blocks: the same logits, samples and cache", async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen3-v512');
    const V = config.vocabSize;
    const model = new QwenGpuModel(gpu, config, weights);
    // the cap follows the adapter's binding limit and the model's widest activation
    const widest = Math.max(config.intermediateSize, config.numHeads * config.headDim, config.hiddenSize);
    expect(model.maxTokensPerForward()).toBe(
      Math.floor(gpu.limits.maxStorageBufferBindingSize / (widest * 4)),
    );
    const prompts = [tokens(9, 51, V), [], tokens(4, 52, V), tokens(6, 53, V)];
    const opts = { maxNewTokens: 4, temperature: 1, seed: 5 };
    const whole = model.startSession(4, 32);
    const blocks = model.startSession(4, 32);
    blocks.maxTokensPerForward = 4; // 19 tokens in blocks of 4: row 0 cut in three, row 2 in two
    whole.append(prompts);
    blocks.append(prompts);
    const [a, b] = [await whole.readLogits(), await blocks.readLogits()];
    expect(rowsError(b, a, V)).toBeLessThanOrEqual(1e-5);
    expect(b.subarray(V, 2 * V).every((x) => x === 0)).toBe(true); // row 1 appended nothing
    const active = [true, false, true, true];
    const sw = await whole.sample({ ...opts, active });
    const sb = await blocks.sample({ ...opts, active });
    expect(sb.tokens).toEqual(sw.tokens);
    expect(sb.logprobs).toEqual(sw.logprobs);
    // a tool response for every row (row 1's first tokens), with each row's pending sampled token
    const more = [tokens(3, 54, V), tokens(5, 55, V), tokens(2, 56, V), tokens(1, 57, V)];
    whole.append(more);
    blocks.append(more);
    expect(blocks.rowLengths()).toEqual(whole.rowLengths());
    const logits = await blocks.readLogits();
    for (const r of [0, 1, 2, 3]) {
      const seq = [...prompts[r], ...sw.tokens[r], ...more[r]];
      const ref = qwenForward(config, weights, seq).logits.subarray((seq.length - 1) * V, seq.length * V);
      expect(rowsError(logits.subarray(r * V, (r + 1) * V), ref, V), `row ${r}`).toBeLessThanOrEqual(1e-4);
    }
    for (const x of [whole, blocks]) x.release();
    model.release();
  });

  it('maxNewTokensPerRow caps one row without changing the tokens of the others', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen2-v512');
    const model = new QwenGpuModel(gpu, config, weights);
    const prompts = [tokens(4, 31, 512), tokens(6, 32, 512)];
    const opts = { maxNewTokens: 5, temperature: 1, seed: 9 };
    const free = await model.generate(prompts, opts);
    // Row 0 capped at 2; row 1 needs 6 + 4 slots (its last token waits in the tail).
    const session = model.startSession(2, 11);
    session.append(prompts);
    const capped = await session.sample({ ...opts, maxNewTokensPerRow: [2, 5] });
    session.release();
    expect(capped.tokens[0]).toEqual(free.tokens[0].slice(0, 2));
    expect(capped.tokens[1]).toEqual(free.tokens[1]);
    expect(capped.finish).toEqual(['length', 'length']);
    model.release();
  });

  it('decoding in blocks between readbacks gives what a readback per step gives, turn after turn', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen3-v512');
    const V = config.vocabSize;
    const model = new QwenGpuModel(gpu, config, weights);
    const prompts = [
      tokens(5, 61, V),
      tokens(9, 62, V),
      tokens(3, 63, V),
      tokens(7, 64, V),
      tokens(4, 65, V),
    ];
    // A stop id that a free run samples early in some rows and not in others, so that rows stop at
    // different steps inside a block and the block decodes on past them.
    const free = await model.generate(prompts, { maxNewTokens: 12, temperature: 1, seed: 7 });
    const stopId = free.tokens[1][3];
    const turns: GenerateOptions[] = [
      { maxNewTokens: 12, maxNewTokensPerRow: [12, 12, 2, 12, 9], active: [true, true, true, false, true] },
      // every row stops (a stop string) long before the block's end: the RNG counter must not count
      // the block's dropped steps, or the next turn draws other tokens
      { maxNewTokens: 7, shouldStop: (b, t) => t.length >= 1 + (b % 2) },
      { maxNewTokens: 7, maxNewTokensPerRow: [7, 7, 7, 7, 1], active: [true, true, true, true, true] },
    ];
    const tool = [tokens(3, 66, V), tokens(2, 67, V), tokens(4, 68, V), tokens(1, 69, V), tokens(2, 70, V)];
    const play = async (stepsPerReadback: number, maxLen: number) => {
      const session = model.startSession(5, maxLen);
      session.stepsPerReadback = stepsPerReadback;
      session.append(prompts);
      const out = [];
      const readbacks = gpu.stats.readbacks;
      for (const turn of turns) {
        const r = await session.sample({ ...turn, temperature: 1, seed: 7, stopTokenIds: [stopId] });
        out.push({ ...r, lengths: session.rowLengths() });
        session.append(tool);
      }
      return { out, session, readbacks: gpu.stats.readbacks - readbacks, logits: await session.readLogits() };
    };
    const want = await play(1, 48);
    expect(want.out[0].finish).toContain('stop'); // the stop id ends a row in the first turn
    expect(want.out[0].finish.filter((f) => f === 'length').length).toBeGreaterThan(0);
    // 3 steps a block: rows stop inside blocks; 16: one block a turn.
    for (const [steps, maxLen] of [
      [3, 48],
      [16, 48],
    ] as const) {
      const got = await play(steps, maxLen);
      for (let t = 0; t < turns.length; t++) {
        expect(got.out[t].tokens, `${steps} steps, turn ${t}`).toEqual(want.out[t].tokens);
        expect(got.out[t].logprobs, `${steps} steps, turn ${t}`).toEqual(want.out[t].logprobs);
        expect(got.out[t].finish).toEqual(want.out[t].finish);
        expect(got.out[t].lengths).toEqual(want.out[t].lengths);
      }
      expect(got.logits).toEqual(want.logits);
      // one readback per block: 12 + 2 + 7 steps one by one; blocks of 3: 4 + 1 + 3; of 16: 1 + 1 + 1
      expect([want.readbacks, got.readbacks]).toEqual([21, steps === 3 ? 8 : 3]);
      got.session.release();
    }
    // The cache holds exactly each row's sequence: the logits after the last append equal a recompute.
    for (let b = 0; b < 5; b++) {
      const seq = [...prompts[b]];
      for (const turn of want.out) seq.push(...turn.tokens[b], ...tool[b]);
      const ref = qwenForward(config, weights, seq).logits.subarray((seq.length - 1) * V, seq.length * V);
      expect(rowsError(want.logits.subarray(b * V, (b + 1) * V), ref, V), `row ${b}`).toBeLessThanOrEqual(
        1e-4,
      );
    }
    want.session.release();
    // A row with few slots left and a small cap beside a row with many: a block would make the first
    // decode past its cache's end, so its free slots bound the block (10 + 2 of 12 slots: blocks of 3).
    const tight = [tokens(10, 71, V), tokens(2, 72, V)];
    const tightTurn = { maxNewTokens: 8, maxNewTokensPerRow: [2, 8], temperature: 1, seed: 3 };
    const results = [];
    for (const steps of [1, 16]) {
      const session = model.startSession(2, 12);
      session.stepsPerReadback = steps;
      session.append(tight);
      results.push(await session.sample(tightTurn));
      session.release();
    }
    expect(results[1]).toEqual(results[0]);
    const session = model.startSession(1, 8);
    session.append([prompts[0]]);
    await expect(session.sample({ maxNewTokens: 2, stepsPerReadback: 0 })).rejects.toThrow(
      /stepsPerReadback must be an integer >= 1, got 0/,
    );
    session.release();
    model.release();
  });

  it('stops a row at a stop token and keeps the others going', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen2-v512');
    const model = new QwenGpuModel(gpu, config, weights);
    const prompts = [tokens(4, 10, 512), tokens(4, 11, 512)];
    const free = await model.generate(prompts, { maxNewTokens: 6, temperature: 0 });
    const stopId = free.tokens[0][2];
    const stopped = await model.generate(prompts, {
      maxNewTokens: 6,
      temperature: 0,
      stopTokenIds: [stopId],
    });
    expect(stopped.finish[0]).toBe('stop');
    expect(stopped.tokens[0]).toEqual(free.tokens[0].slice(0, free.tokens[0].indexOf(stopId) + 1));
    if (!free.tokens[1].includes(stopId)) expect(stopped.tokens[1]).toEqual(free.tokens[1]);
    model.release();
  });
});

function nextTokenTargets(batch: TokenBatch): { targets: Uint32Array; mask: Uint32Array; count: number } {
  const N = batch.B * batch.T;
  const targets = new Uint32Array(N);
  const mask = new Uint32Array(N);
  let count = 0;
  for (let i = 0; i < N; i++) {
    const sameRow = (i + 1) % batch.T !== 0;
    if (batch.seg[i] !== 0 && sameRow && batch.seg[i + 1] === batch.seg[i]) {
      targets[i] = batch.ids[i + 1];
      mask[i] = 1;
      count++;
    }
  }
  return { targets, mask, count };
}

describe('QwenGpuModel backward', () => {
  for (const name of ['tiny-qwen2-v512', 'tiny-qwen3-v512', 'tiny-qwen2-tied-v512']) {
    it(`${name}: gradients match finite differences of the f64 reference loss`, async () => {
      const gpu = await getTestGpu();
      const { config, weights } = tiny(name);
      const model = new QwenGpuModel(gpu, config, weights);
      const seqs = [tokens(7, 21, 512), tokens(4, 22, 512)];
      const batch = packBatch(seqs, { padSide: 'left' });
      const { targets, mask, count } = nextTokenTargets(batch);
      const fwd = model.forward(batch, targets, mask);
      const gLp = gpu.upload(
        Float32Array.from(mask, (m) => (m ? -1 / count : 0)),
        [mask.length],
      );
      model.backward(fwd, gLp);
      const probes: Array<[string, number]> = [];
      for (const pname of model.params.keys()) {
        const n = weights.get(pname)!.data.length;
        for (const frac of [0.13, 0.61]) probes.push([pname, Math.floor(frac * n)]);
      }
      // Embedding rows of tokens in the batch get gradient; probe one of them too.
      probes.push(['model.embed_tokens.weight', seqs[0][2] * config.hiddenSize + 5]);
      const grads = new Map<string, Float32Array>();
      for (const pname of new Set(probes.map((p) => p[0])))
        grads.set(pname, await gpu.readF32(model.grad(pname)));
      let maxAbsGrad = 0;
      for (const g of grads.values()) for (const v of g) maxAbsGrad = Math.max(maxAbsGrad, Math.abs(v));
      const eps = 1e-3;
      for (const [pname, idx] of probes) {
        const w = weights.get(pname)!.data;
        const orig = w[idx];
        // The reference reads weights through Float32Arrays: perturb a float64 copy instead.
        const f64 = Float64Array.from(w);
        const with_ = (delta: number) => {
          f64[idx] = orig + delta;
          const m = new Map(weights) as Weights;
          m.set(pname, { shape: weights.get(pname)!.shape, data: f64 as unknown as Float32Array });
          return referenceLoss(config, m, seqs);
        };
        const fd = (with_(eps) - with_(-eps)) / (2 * eps);
        const got = grads.get(pname)![idx];
        expect(Math.abs(got - fd), `${pname}[${idx}] gpu ${got} fd ${fd}`).toBeLessThanOrEqual(
          2e-3 * maxAbsGrad + 2e-3 * Math.abs(fd),
        );
      }
      fwd.release();
      gLp.release();
      model.release();
    });
  }
});

/**
 * A fresh model's training forward and backward (gradients gLp, gEnt of the log-probs and entropies);
 * `check` sees the forward's activations. Returns the log-probs, entropies and every gradient.
 */
async function forwardBackward(
  config: ModelConfig,
  weights: Weights,
  batch: TokenBatch,
  targets: Uint32Array,
  mask: Uint32Array,
  options: { gLp: Float32Array; gEnt: Float32Array; pack: boolean },
  check: (fwd: ForwardActivations) => void,
): Promise<{ lp: Float32Array; ent: Float32Array; grads: Map<string, Float32Array> }> {
  const gpu = await getTestGpu();
  const N = batch.B * batch.T;
  const model = new QwenGpuModel(gpu, config, weights);
  const fwd = model.forward(batch, targets, mask, { pack: options.pack });
  check(fwd);
  const gLp = gpu.upload(options.gLp, [N]);
  const gEnt = gpu.upload(options.gEnt, [N]);
  model.backward(fwd, gLp, gEnt);
  const [lp, ent] = (await gpu.readMany([fwd.head.logprob, fwd.head.entropy])) as Float32Array[];
  const grads = new Map<string, Float32Array>();
  for (const name of model.params.keys()) grads.set(name, await gpu.readF32(model.grad(name)));
  fwd.release();
  gLp.release();
  gEnt.release();
  model.release();
  return { lp, ent, grads };
}

describe('QwenGpuModel compact LM head', () => {
  it('a sparse mask runs the head on its rows alone: same log-probs, entropies and gradients as the full head', async () => {
    const { config, weights } = tiny('tiny-qwen3-v512');
    const seqs = [tokens(12, 31, 512), tokens(9, 32, 512)];
    const batch = packBatch(seqs, { padSide: 'right' });
    const N = batch.B * batch.T;
    const { targets, mask: full } = nextTokenTargets(batch);
    const sparse = Uint32Array.from(full, (m, i) => (m && i % 3 === 1 ? 1 : 0)); // a third of the rows
    const g = randomArray(N, 33);
    const gLp = Float32Array.from(g, (x, i) => (sparse[i] ? x : 0));
    const gEnt = Float32Array.from(g, (x, i) => (sparse[i] ? 0.5 * x : 0));
    const run = (mask: Uint32Array) =>
      // the head alone: packing has its own tests below
      forwardBackward(config, weights, batch, targets, mask, { gLp, gEnt, pack: false }, (fwd) =>
        expect(fwd.compact !== null).toBe(mask === sparse),
      );
    const a = await run(sparse);
    const b = await run(full);
    for (let i = 0; i < N; i++) {
      if (!sparse[i]) {
        expect(a.lp[i]).toBe(0);
        continue;
      }
      expect(Math.abs(a.lp[i] - b.lp[i])).toBeLessThanOrEqual(1e-5 * Math.max(1, Math.abs(b.lp[i])));
      expect(Math.abs(a.ent[i] - b.ent[i])).toBeLessThanOrEqual(1e-5 * Math.max(1, Math.abs(b.ent[i])));
    }
    for (const [name, ga] of a.grads)
      expect(normError(ga, b.grads.get(name)!), name).toBeLessThanOrEqual(1e-5);
  });
});

describe('QwenGpuModel packed rows', () => {
  // Episodes of one batch differ in length: a forward packs the short ones into shared rows
  // (src/agent/model/packing.ts). A token's result must not depend on its slot.
  for (const masked of ['every token', 'a sparse mask'] as const) {
    it(`packed and padded forwards agree (${masked}): log-probs, entropies, gradients`, async () => {
      const { config, weights } = tiny('tiny-qwen3-v512');
      const seqs = [tokens(14, 41, 512), tokens(5, 42, 512), tokens(6, 43, 512), tokens(3, 44, 512)];
      const batch = packBatch(seqs, { padSide: 'right' });
      const N = batch.B * batch.T;
      const { targets, mask: full } = nextTokenTargets(batch);
      const mask = masked === 'every token' ? full : Uint32Array.from(full, (m, i) => (m && i % 2 ? 1 : 0));
      const g = randomArray(N, 45);
      const gLp = Float32Array.from(g, (x, i) => (mask[i] ? x : 0));
      const gEnt = Float32Array.from(g, (x, i) => (mask[i] ? -0.5 * x : 0));
      const run = (pack: boolean) =>
        forwardBackward(config, weights, batch, targets, mask, { gLp, gEnt, pack }, (fwd) =>
          // 14 + 6 + 5 + 3 in one row of 28 slots (2T: the most a real GPU's rows hold) instead of 4 × 14
          expect([fwd.batch.B, fwd.batch.T]).toEqual(pack ? [1, 28] : [4, 14]),
        );
      const packed = await run(true);
      const padded = await run(false);
      for (let i = 0; i < N; i++) {
        if (!mask[i]) {
          expect(packed.lp[i]).toBe(0);
          expect(packed.ent[i]).toBe(0);
          continue;
        }
        expect(Math.abs(packed.lp[i] - padded.lp[i])).toBeLessThanOrEqual(
          1e-5 * Math.max(1, Math.abs(padded.lp[i])),
        );
        expect(Math.abs(packed.ent[i] - padded.ent[i])).toBeLessThanOrEqual(
          1e-5 * Math.max(1, Math.abs(padded.ent[i])),
        );
      }
      for (const [name, ga] of packed.grads)
        expect(normError(ga, padded.grads.get(name)!), name).toBeLessThanOrEqual(1e-5);
    });
  }

  it('packs on its own when it saves a tenth of the slots, and not otherwise', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen3-v512');
    const model = new QwenGpuModel(gpu, config, weights);
    const slots = (seqs: number[][]) => {
      const batch = packBatch(seqs, { padSide: 'right' });
      const fwd = model.forward(batch, nextTokenTargets(batch).targets);
      const n = fwd.batch.B * fwd.batch.T;
      fwd.release();
      return n;
    };
    expect(slots([tokens(10, 1, 512), tokens(4, 2, 512), tokens(5, 3, 512)])).toBe(19); // 10 + 5 + 4
    // 29 slots packed (one row on a CPU adapter; 10 + 10 | 9 in 2 × 20 on a GPU): not a tenth saved
    expect(slots([tokens(10, 1, 512), tokens(10, 2, 512), tokens(9, 3, 512)])).toBe(30);
    model.release();
  });
});

describe('decoder layer vs the tfjs oracle (tf.grads)', () => {
  for (const name of ['tiny-qwen2-v512', 'tiny-qwen3-v512']) {
    it(`${name}: layer output, dX and every parameter gradient match (||·|| rel <= 2e-4)`, async () => {
      const gpu = await getTestGpu();
      await initTf();
      const { config: c, weights } = tiny(name);
      const model = new QwenGpuModel(gpu, c, weights);
      const batch = packBatch([tokens(6, 31, 512), tokens(4, 32, 512)], { padSide: 'left' });
      const N = batch.B * batch.T;
      const D = c.hiddenSize;
      const x = randomArray(N * D, 33);
      const R = randomArray(N * D, 34);
      const params = hfLayerParams(weights, 0);
      const cfg = {
        T: batch.T,
        seg: Array.from(batch.seg),
        pos: Array.from(batch.pos),
        nH: c.numHeads,
        nKv: c.numKvHeads,
        hd: c.headDim,
        eps: c.rmsNormEps,
        theta: c.ropeTheta,
        qkNorm: c.qkNorm,
      };
      const oracle = await decoderLayerGradsTf(params, x, cfg as never, R);
      const seg = gpu.upload(batch.seg, [N], 'u32');
      const pos = gpu.upload(batch.pos, [N], 'u32');
      const act = model.layerForward(0, gpu.upload(x, [N, D]), seg, pos, batch.B);
      const out = model.layerOutput(0, act);
      const dx = gpu.upload(R, [N, D]);
      model.layerBackward(0, act, dx, seg, pos, batch.B);
      expect(normError(await gpu.readF32(out), oracle.out)).toBeLessThanOrEqual(2e-4);
      expect(normError(await gpu.readF32(dx), oracle.dx)).toBeLessThanOrEqual(2e-4);
      let compared = 0;
      for (const [key, ref] of Object.entries(oracle.dParams)) {
        if (!ref) continue;
        const got = await gpu.readF32(
          model.grad(`model.layers.0.${HF_LAYER_NAMES[key as DecoderParamName]}`),
        );
        expect(normError(got, ref), key).toBeLessThanOrEqual(2e-4);
        compared++;
      }
      expect(compared).toBe(c.qkNorm ? 11 : 12);
      model.release();
    });
  }
});

describe('QwenGpuModel training', () => {
  it('overfits one fixed batch: loss falls from ~ln(V) to near zero with AdamW', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen2-v512');
    const model = new QwenGpuModel(gpu, config, weights);
    const batch = packBatch([tokens(12, 41, 512), tokens(9, 42, 512)], { padSide: 'right' });
    const { targets, mask, count } = nextTokenTargets(batch);
    const gLp = gpu.upload(
      Float32Array.from(mask, (m) => (m ? -1 / count : 0)),
      [mask.length],
    );
    const opt = new AdamW(gpu, model.trainableParams(), {
      lr: 1e-2,
      weightDecay: 0,
      maxGradNorm: 1,
      groups: [{ name: 'norms', match: /norm|bias/, weightDecay: 0 }],
    });
    const losses: number[] = [];
    for (let step = 0; step < 150; step++) {
      model.zeroGrad();
      const fwd = model.forward(batch, targets, mask);
      if (step % 10 === 0 || step === 149) {
        const lp = await gpu.readF32(fwd.head.logprob);
        let s = 0;
        for (let i = 0; i < lp.length; i++) if (mask[i]) s -= lp[i];
        losses.push(s / count);
      }
      model.backward(fwd, gLp);
      opt.step(model.grads);
      fwd.release();
    }
    console.log(`[overfit] loss every 10 steps: ${losses.map((l) => l.toFixed(3)).join(' ')}`);
    expect(losses[0]).toBeGreaterThan(5); // ln 512 = 6.24 for a random model
    expect(losses.at(-1)!).toBeLessThan(0.05);
    opt.release();
    model.release();
  });
});

describe('QwenGpuModel frozen parameters', () => {
  it('a training step changes only unfrozen tensors (frozen LM head and embedding stay bit-identical)', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen2-v512');
    const model = new QwenGpuModel(gpu, config, weights);
    model.frozen.add('lm_head.weight');
    model.frozen.add('model.embed_tokens.weight');
    for (const name of model.params.keys()) if (name.includes('layers.1.')) model.frozen.add(name);
    const batch = packBatch([tokens(8, 61, 512)]);
    const { targets, mask, count } = nextTokenTargets(batch);
    const gLp = gpu.upload(
      Float32Array.from(mask, (m) => (m ? -1 / count : 0)),
      [mask.length],
    );
    const trainable = model.trainableParams();
    expect(trainable.has('lm_head.weight')).toBe(false);
    const opt = new AdamW(gpu, trainable, { lr: 1e-2 });
    const before = await model.exportWeights();
    const fwd = model.forward(batch, targets, mask);
    model.backward(fwd, gLp);
    opt.step(new Map([...model.grads].filter(([n]) => trainable.has(n))));
    fwd.release();
    const after = await model.exportWeights();
    for (const [name, t] of before) {
      const same = Buffer.from(t.data.buffer).equals(Buffer.from(after.get(name)!.data.buffer));
      expect(same, name).toBe(model.frozen.has(name));
    }
    opt.release();
    gLp.release();
    model.release();
  });
});

describe('QwenGpuModel save and load', () => {
  it('exported weights save as HF files and load back bit-exactly, giving identical logits', async () => {
    const gpu = await getTestGpu();
    const { config, weights } = tiny('tiny-qwen3-v512');
    const model = new QwenGpuModel(gpu, config, weights);
    const exported = await model.exportWeights();
    const files = saveCheckpoint({ config, tensors: exported, dtype: 'F32' });
    const loaded = await loadCheckpoint(memorySource(files));
    for (const [name, t] of exported) {
      const back = loaded.tensors.get(name)!;
      expect(back.shape).toEqual(t.shape);
      expect(
        Buffer.from(back.data.buffer, back.data.byteOffset, back.data.byteLength).equals(
          Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength),
        ),
        name,
      ).toBe(true);
    }
    const again = new QwenGpuModel(gpu, loaded.config, loaded.tensors);
    const batch = packBatch([tokens(5, 51, 512)]);
    expect(Array.from(await again.logits(batch))).toEqual(Array.from(await model.logits(batch)));
    again.release();
    model.release();
  });
});

describe('activation recomputation', () => {
  for (const withLora of [false, true]) {
    it(`gives the same gradients bit for bit${withLora ? ' (LoRA adapters)' : ''}, with a lower peak of live GPU memory`, async () => {
      const gpu = await getTestGpu();
      const { config, weights } = tiny('tiny-qwen3-v512');
      const seqs = [tokens(96, 31, 512), tokens(80, 32, 512)];
      const batch = packBatch(seqs);
      const N = batch.B * batch.T;
      const targets = Uint32Array.from({ length: N }, (_, i) => batch.ids[(i + 1) % N]);
      const mask = Uint32Array.from(batch.seg);
      const run = async (recompute: boolean) => {
        const model = new QwenGpuModel(gpu, config, weights);
        if (withLora) {
          const lora: LoraConfig = { rank: 4, alpha: 8, modules: [...LORA_MODULES] };
          const adapter = initLoraWeights(config, lora, 9);
          for (const [name, t] of adapter)
            if (name.includes('lora_B')) t.data.set(randomArray(t.data.length, 77, 0.1));
          model.addLora(lora, adapter);
        }
        model.recomputeActivations = recompute;
        const g = gpu.upload(
          Float32Array.from(mask, (m) => (m ? 1 / N : 0)),
          [N],
        );
        gpu.resetPeakMemory();
        const before = gpu.stats.liveBytes;
        const fwd = model.forward(batch, targets, mask);
        model.backward(fwd, g);
        const peak = gpu.stats.peakLiveBytes - before;
        fwd.release();
        g.release();
        const names = [...model.trainableParams().keys()];
        const grads = await gpu.readMany(names.map((n) => model.grad(n)));
        model.release();
        return { peak, grads: new Map(names.map((n, i) => [n, grads[i] as Float32Array])) };
      };
      const plain = await run(false);
      const again = await run(true);
      expect([...again.grads.keys()]).toEqual([...plain.grads.keys()]);
      for (const [name, g] of plain.grads) expect(again.grads.get(name), name).toEqual(g);
      expect(again.peak).toBeLessThan(plain.peak);
    });
  }
});
