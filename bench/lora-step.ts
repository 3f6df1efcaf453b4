// npm run bench:lora — the update of a GRPO step on a Qwen-shaped random model, as the trainer runs it
// (src/rl/trainer.ts: reference log-probs with the adapters off, the policy's forward, the GRPO loss
// on the GPU, backward, grad norm, AdamW), with the choices of issue 12: LoRA, recomputation, the base
// in half precision, the compact LM head. Prints the planner's prediction next to the measured peak
// (the runtime's live tensor bytes), the step's time and the LM head's share of it, and the rollout's
// cache peak and decode speed.
//
//   npm run bench:lora -- [--shape 05b|tiny] [--rows 8] [--tokens 512] [--share 0.25] [--rank 16]
//                         [--frozen bf16|f16|f32] [--recompute 1] [--reps 1] [--decode 4] [--head-only]
//
// --share: the fraction of positions that are the policy's tokens (the LM head's rows; an agent
// episode here is about a quarter policy tokens). --rank 0 trains everything (full fine-tuning, f32,
// with a reference copy). --head-only skips the step and times only the LM head as a step runs it (the
// reference's forward, the policy's forward, the backward), before (all rows, f32, with its weight
// gradient: full fine-tuning without the compact head) and after (policy rows, frozen, --frozen dtype).
import { parseArgs } from 'node:util';
import { initLoraWeights, LORA_MODULES } from '../src/agent/model/lora.ts';
import { planTrainingMemory } from '../src/agent/model/memory-plan.ts';
import { packBatch, QwenGpuModel } from '../src/agent/model/qwen-gpu.ts';
import { formatBytes } from '../src/gpu/errors.ts';
import { tokenLogprob, tokenLogprobBackward } from '../src/gpu/kernels/logprob.ts';
import { AdamW, gradNorm, readGradNorm } from '../src/gpu/kernels/optimizer.ts';
import { policyLoss } from '../src/gpu/kernels/policy-loss.ts';
import { Gpu, type WaitMode } from '../src/gpu/runtime.ts';
import type { Tensor } from '../src/gpu/tensor.ts';
import { QWEN25_05B, randomWeights, shapeConfig, TINY } from './random-model.ts';

const { values: args } = parseArgs({
  options: {
    shape: { type: 'string', default: '05b' },
    rows: { type: 'string', default: '8' },
    tokens: { type: 'string', default: '512' },
    share: { type: 'string', default: '0.25' },
    rank: { type: 'string', default: '16' },
    frozen: { type: 'string', default: 'bf16' },
    recompute: { type: 'string', default: '1' },
    reps: { type: 'string', default: '1' },
    decode: { type: 'string', default: '4' },
    'head-only': { type: 'boolean', default: false },
    wait: { type: 'string', default: 'block' },
  },
});
const B = Number(args.rows);
const T = Number(args.tokens);
const share = Number(args.share);
const rank = Number(args.rank);
const frozen = args.frozen as 'f32' | 'f16' | 'bf16';
const recompute = args.recompute !== '0';
const shape = args.shape === 'tiny' ? TINY : QWEN25_05B;
const N = B * T;

// --wait await|block|sleep: how the runtime waits for the GPU (src/gpu/runtime.ts; 'block' is Node's default).
const gpu = await Gpu.create({ waitMode: args.wait as WaitMode });
const adapter = `${gpu.report.kind} — ${gpu.report.description || gpu.report.device}`;
console.log(`adapter: ${adapter}`);
const config = shapeConfig(shape);
const lora = rank > 0 ? { rank, alpha: 2 * rank, modules: [...LORA_MODULES] } : null;
const t0 = performance.now();
const weights = randomWeights(config, 3);
console.log(`${shape.name}: random weights in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

function sync(): Promise<void> {
  return gpu.sync();
}

/** Positions the LM head trains on: `share` of each row, spread through it (one turn's tokens). */
function policyMask(): Uint32Array {
  const m = new Uint32Array(N);
  for (let i = 0; i < N; i++) if ((i * 37) % 100 < share * 100 && (i + 1) % T !== 0) m[i] = 1;
  return m;
}
const ids = Array.from({ length: B }, (_, b) =>
  Array.from({ length: T }, (_, i) => (i * 2654435761 + b * 97) % config.vocabSize),
);
const batch = packBatch(ids, { padSide: 'right' });
const targets = Uint32Array.from({ length: N }, (_, i) => ((i + 1) % T === 0 ? 0 : batch.ids[i + 1]));
const mask = policyMask();
const active = mask.reduce((a, b) => a + b, 0);

/** The LM head alone, as a step runs it: before (all rows, f32, trained) and after (policy rows, frozen). */
async function benchHead(): Promise<void> {
  // The LM head alone on final hidden states: forward (log-prob, entropy) and backward (dh, and dW
  // when the head trains).
  const D = config.hiddenSize;
  const h = gpu.upload(
    Float32Array.from({ length: N * D }, (_, i) => Math.sin(i * 0.37)),
    [N, D],
  );
  const full = new QwenGpuModel(gpu, config, weights);
  const headTime = async (rows: number, w: Tensor, withDw: boolean) => {
    const hRows = rows === N ? h : gpu.upload(new Float32Array(rows * D).fill(0.1), [rows, D]);
    const tg = gpu.upload(
      Uint32Array.from({ length: rows }, (_, i) => (i * 7919) % config.vocabSize),
      [rows],
      'u32',
    );
    const g = gpu.upload(new Float32Array(rows).fill(-1 / rows), [rows]);
    const dW = withDw ? gpu.zeros(w.shape, 'f32') : undefined;
    // A step runs the head three times over: the reference's forward, the policy's, its backward.
    await sync();
    const s0 = performance.now();
    tokenLogprob(gpu, hRows, w, tg).release();
    await sync();
    const s = performance.now();
    const f = tokenLogprob(gpu, hRows, w, tg);
    const r = tokenLogprobBackward(gpu, hRows, w, tg, f, { gLogprob: g, computeDw: withDw, dW });
    await sync();
    const ms = performance.now() - s0;
    console.log(
      `  head over ${rows} rows: forward ${((s - s0) / 1000).toFixed(2)} s, forward + backward ${((performance.now() - s) / 1000).toFixed(2)} s`,
    );
    f.release();
    r.dh?.release();
    for (const t of [tg, g, dW]) t?.release();
    if (hRows !== h) hRows.release();
    return ms;
  };
  const before = await headTime(N, full.lmHead, true);
  console.log(`LM head before (all ${N} rows, f32, with dW): ${(before / 1000).toFixed(2)} s per step`);
  full.release();
  const m = new QwenGpuModel(gpu, config, weights, {
    frozenDtype: lora && frozen !== 'f32' ? frozen : undefined,
  });
  const after = await headTime(active, m.lmHead, !lora);
  console.log(
    `LM head after (${active} policy rows, ${m.lmHead.dtype}, ${lora ? 'frozen' : 'with dW'}): ${(after / 1000).toFixed(2)} s per step (${(before / after).toFixed(2)}× less time)`,
  );
  m.release();
}

/** The update of a GRPO step after a rollout phase: time, tok/s, measured peak vs the planner. */
async function benchUpdate(): Promise<void> {
  const plan = planTrainingMemory({
    config,
    rows: B,
    tokens: T,
    headShare: share,
    lora,
    recompute,
    frozenWeights: frozen,
    reference: true,
    optimizer: true,
    rolloutRows: B,
    rolloutLength: T,
  });

  const live0 = gpu.stats.liveBytes;
  gpu.resetPeakMemory();
  const model = new QwenGpuModel(gpu, config, weights, {
    frozenDtype: lora && frozen !== 'f32' ? frozen : undefined,
  });
  if (lora) model.addLora(lora, initLoraWeights(config, lora, 1));
  model.recomputeActivations = recompute;
  const reference = lora ? null : new QwenGpuModel(gpu, config, weights);
  const loadPeak = gpu.stats.peakLiveBytes - live0;
  const opt = new AdamW(gpu, model.trainableParams(), { lr: 1e-4, maxGradNorm: 1 });
  await sync();
  console.log(
    `weights resident: ${formatBytes(gpu.stats.liveBytes - live0)} (load peak ${formatBytes(loadPeak)})`,
  );

  // Rollout: the cache of all rows at full length, a prompt, a few sampled tokens.
  gpu.resetPeakMemory();
  const session = model.startSession(B, T);
  session.append(ids.map((r) => r.slice(0, 16)));
  await session.readLogits();
  const d0 = performance.now();
  await session.sample({ maxNewTokens: Number(args.decode), temperature: 1, seed: 1 });
  const decodeMs = performance.now() - d0;
  const rolloutPeak = gpu.stats.peakLiveBytes - live0;
  session.release();
  console.log(
    `rollout: cache ${B} × ${T}, decode ${((B * Number(args.decode)) / (decodeMs / 1000)).toFixed(2)} tok/s (${(decodeMs / Number(args.decode) / 1000).toFixed(2)} s/step), peak ${formatBytes(rolloutPeak)}`,
  );

  async function updateStep(): Promise<number> {
    const s = performance.now();
    // Reference log-probs: the frozen copy, or (LoRA) the base with the adapters off.
    if (!reference) model.adaptersEnabled = false;
    const ref = (reference ?? model).forward(batch, targets, mask);
    const refLogprob = gpu.empty([N], 'f32', 'bench.ref');
    gpu.copy(ref.head.logprob, refLogprob);
    ref.release();
    model.adaptersEnabled = true;
    // Policy forward, GRPO loss (token-mean, KL loss k3), backward, grad norm, AdamW.
    model.zeroGrad();
    const fwd = model.forward(batch, targets, mask);
    const oldLogprob = gpu.empty([N], 'f32', 'bench.old');
    gpu.copy(fwd.head.logprob, oldLogprob);
    const advantages = gpu.upload(
      Float32Array.from({ length: N }, (_, i) => (Math.floor(i / T) % 2 ? 1 : -1)),
      [N],
    );
    const lossMask = gpu.upload(Float32Array.from(mask), [N]);
    const loss = policyLoss(gpu, {
      logprob: fwd.head.logprob,
      oldLogprob,
      advantages,
      mask: lossMask,
      entropy: null,
      refLogprob,
      B,
      T,
      clipRatioLow: 0.2,
      clipRatioHigh: 0.28,
      clipRatioC: 3,
      mode: 'token-mean',
      policyLossMode: 'vanilla',
      entropyCoef: 0,
      klCoef: 0.001,
      klKind: 'k3',
    });
    model.backward(fwd, loss.gLogprob, loss.gEntropy);
    fwd.release();
    const grads = [...model.trainableParams().keys()].map((n) => model.grad(n));
    const norm = gradNorm(gpu, grads, { maxNorm: 1 });
    const info = await readGradNorm(gpu, norm);
    if (!Number.isFinite(info.norm)) throw new Error('non-finite gradient norm');
    opt.step(model.trainableGrads(), { gradNorm: norm });
    await sync();
    for (const t of [norm, refLogprob, oldLogprob, advantages, lossMask, loss.gLogprob, loss.stats])
      t.release();
    loss.gEntropy?.release();
    return performance.now() - s;
  }

  gpu.resetPeakMemory();
  const times: number[] = [];
  for (let r = 0; r < Number(args.reps); r++) times.push(await updateStep());
  const updatePeak = gpu.stats.peakLiveBytes - live0;
  const ms = times.sort((a, b) => a - b)[Math.floor(times.length / 2)];
  const peak = Math.max(updatePeak, rolloutPeak, loadPeak);
  const label = `${shape.name}, ${lora ? `LoRA r${rank} (${frozen} base)` : 'full fine-tuning'}${recompute ? ', recomputation' : ''}, ${B} × ${T}, head share ${share}`;
  console.log(`\n${label}`);
  console.log(
    `update step: ${(ms / 1000).toFixed(1)} s (${(N / (ms / 1000)).toFixed(1)} tok/s over ${N} tokens)`,
  );
  console.log(
    `peak: measured ${formatBytes(peak)} (update ${formatBytes(updatePeak)}, rollout ${formatBytes(rolloutPeak)}, load ${formatBytes(loadPeak)}); planner ${formatBytes(plan.peak)} (ratio ${(plan.peak / peak).toFixed(3)})`,
  );
  console.log(
    `(${new Date().toISOString().slice(0, 10)}, ${adapter}, command: npm run bench:lora -- ${process.argv.slice(2).join(' ')})`,
  );
}

if (args['head-only']) await benchHead();
else await benchUpdate();
gpu.destroy();
