// The lab's engine: it owns the GPU device, the loaded model and tokenizer, generation, the rollout
// stepper and the trainer, and runs in a dedicated Web Worker (src/worker/engine.worker.ts) so the
// page's thread only draws. The page talks to it through EngineApi (src/worker/protocol.ts); the
// engine reports progress as EngineEvents.
//
// GPU work is serialised (gpuTurn): a training step, a stepper turn and a generation take turns on the
// one device instead of interleaving their buffers. Requests other than GPU work (listing runs,
// pausing) are answered at once, also while a step runs.
//
// Training runs live in the origin private file system (src/worker/opfs-storage.ts):
//   runs/<id>/lab-run.json   RunMeta (status, step) — what the page lists after a reload
//   runs/<id>/config.json, metrics.jsonl, samples/step-XXXXXX.json, checkpoints/step-XXXXXX/
// the same layout as `npm run train`'s run folder (src/rl/run.ts), plus lab-run.json.
import { type Checkpoint, loadCheckpoint, saveCheckpoint } from '../agent/model/checkpoint.ts';
import { ModelFileError, ModelSourceError, ModelTooLargeError } from '../agent/model/errors.ts';
import { exportForTransformersJs } from '../agent/model/onnx-export.ts';
import { type GenerationSession, QwenGpuModel } from '../agent/model/qwen-gpu.ts';
import type { FloatDtype } from '../agent/model/safetensors.ts';
import {
  fileSource,
  hubSource,
  MODEL_CACHE_NAME,
  type ModelSource,
  type Progress,
  publicModelSource,
} from '../agent/model/sources.ts';
import { assertFitsAdapter, parameterCount } from '../agent/model/weights.ts';
import { zipParts } from '../agent/model/zip.ts';
import type { QwenTokenizer } from '../agent/tokenizer/qwen-tokenizer.ts';
import { TASK_PRESETS } from '../env/presets.ts';
import type { LoadResult, QaTask } from '../env/tasks/schema.ts';
import { generateSyntheticDataset, type SyntheticQuestionType } from '../env/tasks/synthetic.ts';
import {
  describeLoadProblem,
  readTaskFile,
  summarizeLoad,
  type TaskFileKind,
} from '../env/tasks/task-file.ts';
import { toToolSpec } from '../env/tool.ts';
import type { ToolEnvOptions } from '../env/tool-env.ts';
import { corpusSearchTools, perQuestionSearchTools, type TaskTools } from '../env/tools/search.ts';
import type { AdapterReport } from '../gpu/device.ts';
import { Gpu } from '../gpu/runtime.ts';
import { runMatmulSelfCheck, type SelfCheckResult } from '../gpu/selfcheck.ts';
import type { TrainingBatch } from '../rl/batch.ts';
import { parseConfigText, type TrainConfig } from '../rl/config.ts';
import {
  type RolloutEvent,
  type RolloutResult,
  rolloutStream,
  type Trajectory,
  trajectoryFromJSON,
  trajectoryToJSON,
} from '../rl/rollout.ts';
import { evaluationLine, METRICS_FILE, truncateMetrics } from '../rl/run.ts';
import { type RunStorage, readText } from '../rl/storage.ts';
import { type StepMetrics, Trainer, type TrainerPhase, type UpdateArrays } from '../rl/trainer.ts';
import {
  chatMessages,
  type GenSettings,
  offeredTools,
  parseGenSettings,
  parsePromptIds,
} from './generation.ts';
import { checkOnnxExport } from './onnx-check.ts';
import { opfsRemoveRun, opfsRunIds, opfsRunStorage } from './opfs-storage.ts';
import type {
  DroppedTasks,
  EngineApi,
  EngineEvent,
  ExportSource,
  FileProgress,
  GenerationEnd,
  GenToken,
  GpuRecovery,
  LoadOutcome,
  ModelInfo,
  ModelOrigin,
  ModelSpec,
  OnnxCheck,
  OnnxProvider,
  RolloutEventSummary,
  RunMeta,
  RunSummary,
  StepperAdvance,
  StepperRequest,
  StepperStart,
  StepperTurn,
  TrainSetup,
  TrainState,
  TrajectoryView,
  WeightsDtype,
  WeightsZip,
} from './protocol.ts';

/** Where runs are kept: OPFS in the browser; tests pass memory storage. */
export interface RunStore {
  open(runId: string): Promise<RunStorage>;
  ids(): Promise<string[]>;
  remove(runId: string): Promise<void>;
}

export const OPFS_RUNS: RunStore = { open: opfsRunStorage, ids: opfsRunIds, remove: opfsRemoveRun };

const META_FILE = 'lab-run.json';
const SAMPLE_INVALID_TOKEN = 0xffffffff;
/** Trajectory views kept in memory per run (with the per-token training arrays). */
const KEPT_STEPS = 20;

interface Loaded {
  info: ModelInfo;
  checkpoint: Checkpoint;
  model: QwenGpuModel;
  tokenizer: QwenTokenizer | null;
}

interface Stepper {
  stream: AsyncGenerator<RolloutEvent, RolloutResult>;
  done: boolean;
  tokenizer: QwenTokenizer;
  /** The turn being assembled from events. */
  current: StepperTurn | null;
}

interface Training {
  runId: string;
  trainer: Trainer;
  storage: RunStorage;
  meta: RunMeta;
  running: boolean;
  pauseRequested: boolean;
  phase: TrainerPhase | null;
  phaseProgress: number;
  lastStepSeconds: number | null;
  message: string | null;
  /** Step → its trajectories, for the Trajectories list and the inspector. */
  views: Map<number, TrajectoryView[]>;
  evaluatedAtStart: boolean;
}

function describeError(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function runIdFor(config: TrainConfig): string {
  const t = new Date().toISOString().replace(/[-:]/g, '').replace(/\..*/, '').replace('T', '-');
  return `${config.name}-${config.algorithm.name.replace(/\+/g, 'p')}-${t}`.replace(/[^\w.-]/g, '-');
}

/** Progress reports arrive per chunk (hundreds per file); the page needs a few per second. */
function progressTracker(onFlush: (files: FileProgress[]) => void, knownSizes: Record<string, number> = {}) {
  const files: FileProgress[] = [];
  let last = 0;
  return {
    report(p: Progress) {
      let f = files.find((x) => x.file === p.file);
      if (!f) {
        f = { file: p.file, loaded: 0, total: p.total };
        files.push(f);
      }
      f.loaded = p.loaded;
      f.total = p.total ?? knownSizes[p.file] ?? null;
      const now = performance.now();
      if (now - last > 80 || (f.total !== null && p.loaded >= f.total)) {
        last = now;
        onFlush(files.map((x) => ({ ...x })));
      }
    },
    files: () => files.map((x) => ({ ...x })),
  };
}

/** The synthetic world of a config's task section, with its search tools (as Trainer builds them). */
function taskWorld(config: TrainConfig, searchTopK?: number) {
  const t = config.task;
  const dataset = generateSyntheticDataset({
    seed: t.seed,
    trainSize: t.trainSize,
    testSize: t.testSize,
    hops: t.hops,
    ...(t.types.length > 0 ? { types: t.types as SyntheticQuestionType[] } : {}),
  });
  const search = { ...TASK_PRESETS[t.preset].search, ...(searchTopK ? { topK: searchTopK } : {}) };
  const tools = (split: 'train' | 'test'): TaskTools =>
    corpusSearchTools(t.corpus, dataset[split].corpus, search);
  return { dataset, search, tools };
}

function envOptions(config: TrainConfig): ToolEnvOptions {
  return {
    maxTurns: config.rollout.maxTurns,
    maxToolCalls: config.rollout.maxToolCalls,
    systemPrompt: TASK_PRESETS[config.task.preset].systemPrompt,
    outcome: { metric: config.reward.outcomeMetric },
  };
}

/** Each token decoded on its own (the inspector's cells). */
function tokenTexts(tokenizer: QwenTokenizer | null, ids: readonly number[]): string[] {
  return ids.map((id) => (tokenizer ? tokenizer.decode([id]) : `⟨${id}⟩`));
}

/**
 * Per-token advantage, ratio π/π_sampler and k1 KL to the reference of trajectory `row`, from the
 * batch arrays (token j's quantities live at position j − 1 of the row, src/rl/batch.ts); NaN where the
 * policy did not sample the token.
 */
export function perTokenTrainArrays(
  t: Pick<Trajectory, 'ids' | 'sources'>,
  row: number,
  a: Pick<UpdateArrays, 'logprob' | 'ref' | 'advantages'> & {
    batch: Pick<TrainingBatch, 'T' | 'oldLogprob'>;
  },
): { advantage: number[]; ratio: number[]; kl: number[] } {
  const T = a.batch.T;
  const advantage: number[] = [];
  const ratio: number[] = [];
  const kl: number[] = [];
  for (let j = 0; j < t.ids.length; j++) {
    const i = row * T + j - 1;
    if (j === 0 || t.sources[j] !== 'policy') {
      advantage.push(Number.NaN);
      ratio.push(Number.NaN);
      kl.push(Number.NaN);
      continue;
    }
    advantage.push(a.advantages[i]);
    ratio.push(Math.exp(a.logprob[i] - a.batch.oldLogprob[i]));
    kl.push(a.logprob[i] - a.ref[i]);
  }
  return { advantage, ratio, kl };
}

function summarise(event: RolloutEvent): RolloutEventSummary {
  switch (event.type) {
    case 'tokens_sampled':
      return { type: 'tokens_sampled', row: event.row, turn: event.turn, count: event.ids.length };
    case 'episode_done':
      return {
        type: 'episode_done',
        row: event.row,
        reward: event.trajectory.outcome?.outcome ?? 0,
        doneReason: event.trajectory.doneReason,
      };
    case 'rollout_done':
      return { type: 'rollout_done', rows: event.result.trajectories.length };
    default:
      return event;
  }
}

export class LabEngine implements EngineApi {
  private gpu: Gpu | null = null;
  private adapter: AdapterReport | null = null;
  private loaded: Loaded | null = null;
  private loading = false;
  private nextModelId = 1;
  private generating = false;
  private stopRequested = false;
  private stepper: Stepper | null = null;
  private training: Training | null = null;
  private dropped: { info: DroppedTasks; tasks: QaTask[] } | null = null;
  private worlds = new Map<string, ReturnType<typeof taskWorld>>();
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly emit: (event: EngineEvent) => void,
    private readonly runs: RunStore = OPFS_RUNS,
    /** Where the device comes from (tests share theirs). */
    private readonly createGpu: () => Promise<Gpu> = () => Gpu.create(),
  ) {}

  /** Runs `fn` when the GPU is free (one GPU job at a time). */
  private gpuTurn<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }

  private requireGpu(): Gpu {
    if (!this.gpu) throw new Error('WebGPU is not ready: no device (call init first)');
    return this.gpu;
  }

  // ------------------------------------------------------------------------------------ GPU

  async init(): Promise<AdapterReport> {
    if (this.gpu && this.adapter) return this.adapter;
    const gpu = await this.createGpu();
    gpu.device.lost.then((info) => {
      if (this.gpu !== gpu) return; // an old device, already replaced
      this.gpu = null;
      this.adapter = null;
      if (this.training) {
        this.training.running = false;
        this.training.pauseRequested = true;
      }
      this.emit({ type: 'gpu-lost', message: `The GPU device was lost (${info.reason}): ${info.message}` });
    });
    this.gpu = gpu;
    this.adapter = gpu.report;
    return gpu.report;
  }

  async recoverGpu(): Promise<GpuRecovery> {
    if (this.gpu) throw new Error('the GPU device is not lost');
    const loaded = this.loaded;
    const t = this.training;
    // Everything on the old device is gone; its buffers need no release.
    this.loaded = null;
    this.training = null;
    this.stepper = null;
    this.queue = Promise.resolve();
    const adapter = await this.init();
    const gpu = this.requireGpu();
    let model: ModelInfo | null = null;
    if (loaded) {
      this.loaded = {
        ...loaded,
        model: new QwenGpuModel(gpu, loaded.info.config, loaded.checkpoint.tensors),
      };
      await gpu.sync();
      model = loaded.info;
    }
    let train: TrainState | null = null;
    if (t && this.loaded) {
      const reached = Math.max(t.meta.step, t.trainer.step);
      const trainer = await Trainer.create(gpu, t.trainer.config, this.loaded.checkpoint, {
        storage: t.storage,
        resume: true,
      });
      await truncateMetrics(t.storage, trainer.step);
      const lost = reached - trainer.step;
      this.training = {
        ...t,
        trainer,
        running: false,
        pauseRequested: false,
        phase: null,
        phaseProgress: 0,
        views: new Map(),
        evaluatedAtStart: trainer.step > 0,
        message:
          `the GPU device was lost at step ${reached}; resumed from the checkpoint at step ${trainer.step}` +
          (lost > 0 ? ` (${lost} step${lost === 1 ? '' : 's'} lost, run again)` : ''),
      };
      this.training.meta.status = 'paused';
      await this.writeMeta(this.training);
      train = this.pushState();
    }
    return { adapter, model, train };
  }

  async selfCheck(): Promise<SelfCheckResult> {
    const gpu = this.requireGpu();
    return this.gpuTurn(() => runMatmulSelfCheck(gpu));
  }

  async gpuLiveBytes(): Promise<number> {
    return this.gpu?.stats.liveBytes ?? 0;
  }

  // ------------------------------------------------------------------------------------ model

  async loadModel(spec: ModelSpec, label: string): Promise<LoadOutcome> {
    const fail = (message: string, file: string | null = null): LoadOutcome => ({
      ok: false,
      error: { label, message, file },
    });
    const gpu = this.gpu;
    if (!gpu) return fail('WebGPU is not ready: no device to load the model onto');
    if (this.loading) return fail('another model is being loaded: wait for it');
    if (this.generating) return fail('a generation is running: stop it before loading another model');
    if (this.training?.running) return fail('training is running: pause it before loading another model');
    this.loading = true;
    try {
      return await this.gpuTurn(() => this.loadNow(gpu, spec, label));
    } finally {
      this.loading = false;
    }
  }

  private async loadNow(gpu: Gpu, spec: ModelSpec, label: string): Promise<LoadOutcome> {
    const startedAt = performance.now();
    let phase: 'reading files' | 'building the tokenizer' | 'uploading to the GPU' = 'reading files';
    const progress = progressTracker(
      (files) => this.emit({ type: 'model-progress', label, phase, files }),
      spec.kind === 'bundled' ? spec.knownSizes : {},
    );
    const setPhase = (p: typeof phase) => {
      phase = p;
      this.emit({ type: 'model-progress', label, phase, files: progress.files() });
    };
    setPhase('reading files');
    let source: ModelSource;
    let origin: ModelOrigin;
    let name: string | null;
    const ignored = spec.kind === 'files' ? spec.ignored : [];
    if (spec.kind === 'bundled') {
      // The site's own files: no point copying them into the Cache API as well.
      source = publicModelSource(spec.name, spec.siteBase, { cache: null });
      origin = { kind: 'bundled', name: spec.name };
      name = spec.name;
    } else if (spec.kind === 'hub') {
      source = hubSource(spec.repo, { revision: spec.revision, endpoint: spec.endpoint });
      origin = { kind: 'hub', repo: spec.repo, revision: spec.revision };
      name = spec.repo.split('/')[1];
    } else {
      source = fileSource(spec.files);
      origin = { kind: 'files', names: spec.files.map((f) => f.name) };
      name = null; // picked files do not say what the model is called: named after the architecture
    }
    let model: QwenGpuModel | null = null;
    try {
      const limits = {
        maxBufferSize: gpu.limits.maxBufferSize,
        maxStorageBufferBindingSize: gpu.limits.maxStorageBufferBindingSize,
      };
      const ckpt = await loadCheckpoint(source, {
        onProgress: (p) => progress.report(p),
        adapterLimits: limits,
      });
      setPhase('building the tokenizer');
      let tokenizer: QwenTokenizer | null = null;
      if (ckpt.tokenizerFiles.size > 0) {
        // transformers.js is large; it is only fetched once a model with a tokenizer shows up.
        const { QwenTokenizer } = await import('../agent/tokenizer/qwen-tokenizer.ts');
        tokenizer = QwenTokenizer.fromFiles(ckpt.tokenizerFiles);
      }
      setPhase('uploading to the GPU');
      const fit = assertFitsAdapter(ckpt.config, limits);
      model = new QwenGpuModel(gpu, ckpt.config, ckpt.tensors);
      await gpu.sync(); // surfaces out-of-memory and validation errors of the uploads
      const embedDtype = ckpt.tensors.get('model.embed_tokens.weight')?.dtype;
      const fileDtype: FloatDtype = embedDtype === 'F16' || embedDtype === 'BF16' ? embedDtype : 'F32';
      const parameters = parameterCount(ckpt.config);
      const info: ModelInfo = {
        id: this.nextModelId++,
        name: name ?? `${ckpt.config.modelType}-model`,
        label,
        origin,
        config: ckpt.config,
        generationConfig: ckpt.generationConfig,
        tokenizerFileNames: [...ckpt.tokenizerFiles.keys()],
        hasTokenizer: tokenizer !== null,
        tokenizerVocabSize: ckpt.tokenizerVocabSize,
        fileDtype,
        weightFiles: ckpt.weightFiles,
        bytesRead: progress.files().reduce((n, f) => n + f.loaded, 0),
        parameters,
        gpuBytes: parameters * 4,
        fit,
        warnings: ckpt.warnings,
        ignoredFiles: ignored,
        loadMs: performance.now() - startedAt,
      };
      const previous = this.loaded;
      this.loaded = { info, checkpoint: ckpt, model, tokenizer };
      if (previous) {
        previous.model.release();
        gpu.trimPool();
      }
      return { ok: true, model: info };
    } catch (e) {
      if (model) {
        model.release();
        gpu.trimPool(); // give a failed upload's memory back now
      }
      let message = describeError(e);
      if (e instanceof ModelSourceError && e.kind === 'network' && origin.kind === 'hub') {
        message +=
          ' — the Hugging Face Hub could not be reached from this page (offline, blocked by a proxy, or CORS)';
      }
      if (origin.kind === 'files' && e instanceof ModelSourceError && e.kind === 'not-found') {
        message += ` — you chose: ${origin.names.concat(ignored).join(', ')}`;
      } else if (ignored.length > 0) {
        message += ` (ignored, not checkpoint files: ${ignored.join(', ')})`;
      }
      if (e instanceof ModelTooLargeError) message = `${message}. The model was not loaded.`;
      return { ok: false, error: { label, message, file: e instanceof ModelFileError ? e.file : null } };
    }
  }

  async clearModelCache(): Promise<string> {
    if (typeof caches === 'undefined')
      return 'This page has no Cache Storage (it needs https or localhost): nothing is cached.';
    try {
      const existed = await caches.delete(MODEL_CACHE_NAME);
      return existed ? 'Cleared the downloaded model files.' : 'The download cache was already empty.';
    } catch (e) {
      return `Could not clear the cache: ${describeError(e)}`;
    }
  }

  private zip(folderName: string, files: Map<string, Uint8Array>): WeightsZip {
    const folder = folderName.replace(/[^\w.-]+/g, '-') || 'model';
    const parts = zipParts(
      [...files].map(([name, data]) => ({ name: `${folder}/${name}`, data })),
      { modified: new Date() },
    );
    return {
      blob: new Blob(parts as BlobPart[], { type: 'application/zip' }),
      fileName: `${folder}.zip`,
      files: [...files].map(([name, data]) => ({ name, bytes: data.length })),
    };
  }

  async exportWeights(dtype: WeightsDtype): Promise<WeightsZip> {
    const loaded = this.loaded;
    if (!loaded) throw new Error('no model is loaded');
    const weights = await this.gpuTurn(() => loaded.model.exportWeights());
    const files = saveCheckpoint({
      config: loaded.info.config,
      generationConfig: loaded.info.generationConfig,
      tensors: weights,
      dtype: dtype === 'as-loaded' ? loaded.info.fileDtype : dtype,
      tokenizerFiles: loaded.checkpoint.tokenizerFiles,
    });
    return this.zip(loaded.info.name, files);
  }

  /** The weights, config and tokenizer an export takes, and the GPU model that holds them. */
  private async exportInput(source: ExportSource) {
    if (source === 'train') {
      const t = this.requireTraining();
      const checkpoint = await this.gpuTurn(() => t.trainer.policyCheckpoint());
      return {
        name: `${t.runId}-step${t.trainer.step}`,
        checkpoint,
        model: t.trainer.policy,
        tokenizer: t.trainer.tokenizer,
      };
    }
    const loaded = this.loaded;
    if (!loaded) throw new Error('no model is loaded');
    const tensors = await this.gpuTurn(() => loaded.model.exportWeights());
    return {
      name: loaded.info.name,
      checkpoint: { ...loaded.checkpoint, tensors },
      model: loaded.model,
      tokenizer: loaded.tokenizer,
    };
  }

  async exportOnnx(source: ExportSource): Promise<WeightsZip> {
    const input = await this.exportInput(source);
    return this.zip(`${input.name}-onnx`, exportForTransformersJs(input.checkpoint));
  }

  async checkOnnx(source: ExportSource, provider: OnnxProvider): Promise<OnnxCheck> {
    const input = await this.exportInput(source);
    if (!input.tokenizer) throw new Error('the model has no tokenizer: the check decodes a chat prompt');
    return checkOnnxExport({
      files: exportForTransformersJs(input.checkpoint),
      model: input.model,
      tokenizer: input.tokenizer,
      provider,
      steps: 32,
      gpuTurn: (fn) => this.gpuTurn(fn),
    });
  }

  // ------------------------------------------------------------------------------------ generation

  async stopGeneration(): Promise<void> {
    if (this.generating) this.stopRequested = true;
  }

  async generate(s: GenSettings): Promise<GenerationEnd> {
    const loaded = this.loaded;
    if (!loaded) throw new Error('no model is loaded');
    if (this.generating) throw new Error('a generation is already running');
    this.generating = true;
    this.stopRequested = false;
    try {
      return await this.gpuTurn(() => this.generateNow(loaded, s));
    } finally {
      this.generating = false;
      this.stopRequested = false;
    }
  }

  private async generateNow(loaded: Loaded, s: GenSettings): Promise<GenerationEnd> {
    const settings = parseGenSettings(s);
    const { tokenizer } = loaded;
    const config = loaded.info.config;
    let promptText: string | null = null;
    let promptIds: number[];
    if (tokenizer) {
      promptText = tokenizer.applyChatTemplate(chatMessages(s), {
        tools: offeredTools(s),
        addGenerationPrompt: true,
      });
      promptIds = tokenizer.encode(promptText);
    } else {
      promptIds = parsePromptIds(s.promptIds, config.vocabSize);
    }
    const maxLen = promptIds.length + settings.maxNewTokens;
    if (maxLen > config.maxPositionEmbeddings) {
      throw new Error(
        `prompt (${promptIds.length} tokens) + max new tokens (${settings.maxNewTokens}) exceed the model's ` +
          `max_position_embeddings (${config.maxPositionEmbeddings})`,
      );
    }
    this.emit({
      type: 'generation-start',
      start: { modelId: loaded.info.id, promptText, promptIds, settings },
    });
    const stopIds = new Set<number>([
      ...(loaded.info.generationConfig?.eosTokenIds ?? []),
      ...config.eosTokenIds,
      ...(tokenizer ? [tokenizer.eosTokenId] : []),
    ]);
    const t0 = performance.now();
    let tFirst = 0;
    let session: GenerationSession | null = null;
    try {
      session = loaded.model.startSession(1, maxLen);
      session.append([promptIds]);
      const ids: number[] = [];
      let emitted = ''; // decoded text already shown as token pieces
      let text: string | null = null;
      let finish: GenerationEnd['finish'] = 'length';
      // One token per step: each shows up as soon as it is sampled, and Stop acts between steps.
      for (let step = 0; step < settings.maxNewTokens; step++) {
        if (step > 0) session.append([[]]); // feeds the last sampled token through the cache
        const r = await session.sample({
          maxNewTokens: 1,
          temperature: settings.temperature,
          topP: settings.topP,
          topK: settings.topK,
          seed: settings.seed,
        });
        const id = r.tokens[0][0];
        if (id === SAMPLE_INVALID_TOKEN || !Number.isFinite(r.logprobs[0][0])) {
          throw new Error(`the model's logits are not finite (NaN or infinity) at new token ${step + 1}`);
        }
        const now = performance.now();
        if (step === 0) tFirst = now;
        ids.push(id);
        let piece: string | null = null;
        if (tokenizer) {
          text = tokenizer.decode(ids);
          piece = '';
          // Text that ends inside a UTF-8 character is held back until the character is complete.
          if (!text.endsWith('\uFFFD')) {
            piece = text.slice(emitted.length);
            emitted = text;
          }
        }
        const token: GenToken = {
          id,
          piece,
          alone: tokenizer ? tokenizer.decode([id]) : null,
          logprob: r.logprobs[0][0],
        };
        this.emit({
          type: 'generation-tokens',
          tokens: [token],
          text,
          firstTokenMs: tFirst - t0,
          totalMs: now - t0,
        });
        if (stopIds.has(id)) {
          finish = 'stop';
          break;
        }
        if (this.stopRequested) {
          finish = 'stopped';
          break;
        }
      }
      const lastPiece = text !== null && text !== emitted ? text.slice(emitted.length) : null;
      return { finish, lastPiece, text };
    } finally {
      session?.release();
    }
  }

  // ------------------------------------------------------------------------------------ tasks

  private world(config: TrainConfig, searchTopK?: number) {
    const key = JSON.stringify([config.task, searchTopK ?? 0]);
    let w = this.worlds.get(key);
    if (!w) {
      w = taskWorld(config, searchTopK);
      if (this.worlds.size > 4) this.worlds.clear();
      this.worlds.set(key, w);
    }
    return w;
  }

  async loadTaskFile(file: File): Promise<DroppedTasks> {
    const bytes = new Uint8Array(await file.arrayBuffer());
    // MuSiQue files are JSON lines; HotpotQA and 2Wiki files are a JSON array, told apart by which
    // loader understands more records. A file unusable as a whole throws readTaskFile's
    // `file:line:column: expected …` error.
    const kinds: TaskFileKind[] = file.name.toLowerCase().endsWith('.jsonl')
      ? ['musique']
      : ['hotpotqa', '2wiki'];
    let best: { kind: TaskFileKind; result: LoadResult } | null = null;
    for (const kind of kinds) {
      const result = readTaskFile(bytes, kind, file.name);
      if (!best || result.tasks.length > best.result.tasks.length) best = { kind, result };
    }
    if (!best || best.result.tasks.length === 0) {
      const first = best?.result.problems[0];
      const why = first ? describeLoadProblem(file.name, first) : 'the file has no records';
      throw new Error(`${file.name}: no HotpotQA, 2WikiMultihopQA or MuSiQue questions in it (${why})`);
    }
    const info: DroppedTasks = {
      fileName: file.name,
      kind: best.kind,
      count: best.result.tasks.length,
      skipped: best.result.skipped,
      summary: summarizeLoad(file.name, best.result),
      sample: best.result.tasks.slice(0, 5).map((t) => t.question),
    };
    this.dropped = { info, tasks: best.result.tasks };
    return info;
  }

  async listQuestions(
    config: TrainConfig,
    split: 'train' | 'test' | 'dropped',
    limit: number,
  ): Promise<string[]> {
    if (split === 'dropped') return (this.dropped?.tasks ?? []).slice(0, limit).map((t) => t.question);
    return this.world(config)
      .dataset[split].tasks.slice(0, limit)
      .map((t) => t.question);
  }

  // ------------------------------------------------------------------------------------ stepper

  async stepperReset(): Promise<void> {
    const s = this.stepper;
    this.stepper = null;
    // Finishing the generator releases its GenerationSession (the stream's finally block).
    if (s && !s.done) await this.gpuTurn(() => s.stream.return(undefined as never));
  }

  async stepperStart(req: StepperRequest): Promise<StepperStart> {
    await this.stepperReset();
    const policy = this.training?.trainer ?? null;
    const model = policy?.policy ?? this.loaded?.model;
    const tokenizer = policy?.tokenizer ?? this.loaded?.tokenizer;
    if (!model) throw new Error('load a model first');
    if (!tokenizer) throw new Error('the stepper needs a model with a tokenizer (a chat template)');
    const c = req.config;
    let task: QaTask;
    let tools: TaskTools;
    if (req.pick.kind === 'dropped') {
      const d = this.dropped;
      if (!d) throw new Error('no question file was dropped on the Task screen');
      task = d.tasks[req.pick.index];
      if (!task)
        throw new Error(
          `question ${req.pick.index} is not in ${d.info.fileName} (${d.tasks.length} questions)`,
        );
      tools = perQuestionSearchTools({ ...TASK_PRESETS[c.task.preset].search, topK: req.searchTopK });
    } else {
      const w = this.world(c, req.searchTopK);
      if (req.pick.kind === 'split') {
        task = w.dataset[req.pick.split].tasks[req.pick.index];
        if (!task)
          throw new Error(
            `question ${req.pick.index} is not in the ${req.pick.split} split (${w.dataset[req.pick.split].tasks.length} questions)`,
          );
        tools = w.tools(req.pick.split);
      } else {
        if (req.pick.question.trim() === '') throw new Error('the question is empty');
        // A typed question searches the synthetic world's train corpus; its answer is what the user says.
        task = {
          id: 'custom',
          source: 'custom',
          question: req.pick.question,
          answers: [req.pick.answer.trim() || '(no answer given)'],
          passages: [],
          supportingIds: [],
        };
        tools = w.tools('train');
      }
    }
    const stream = rolloutStream({
      model,
      tokenizer,
      tasks: [task],
      samplesPerTask: 1,
      toolsFor: tools,
      env: envOptions(c),
      maxNewTokensPerTurn: c.rollout.maxNewTokensPerTurn,
      maxTotalTokens: c.rollout.maxTotalTokens,
      temperature: req.temperature,
      topP: c.rollout.topP,
      topK: c.rollout.topK,
      seed: req.seed >>> 0,
    });
    this.stepper = { stream, done: false, tokenizer, current: null };
    return {
      question: task.question,
      answers: task.answers,
      systemPrompt: TASK_PRESETS[c.task.preset].systemPrompt,
      tools: tools(task).map(toToolSpec),
      policy: policy
        ? `the policy of run ${this.training!.runId} at step ${policy.step}`
        : this.loaded!.info.name,
    };
  }

  async stepperAdvance(untilDone: boolean): Promise<StepperAdvance> {
    const s = this.stepper;
    if (!s) throw new Error('start an episode first');
    if (s.done) return { turns: [], trajectory: null };
    return this.gpuTurn(async () => {
      const turns: StepperTurn[] = [];
      let trajectory: TrajectoryView | null = null;
      for (;;) {
        const next = await s.stream.next();
        if (next.done) {
          s.done = true;
          break;
        }
        const e = next.value;
        if (e.type === 'turn_started') {
          // The next turn's sampling starts on the next pull: a single step ends here.
          if (s.current) {
            turns.push(s.current);
            s.current = null;
            if (!untilDone) break;
          }
          continue;
        }
        if (e.type === 'tokens_sampled') {
          s.current = {
            turn: e.turn,
            action: e.text,
            actionIds: e.ids,
            calls: [],
            toolResult: '',
            reward: null,
            outcome: null,
            done: false,
          };
        } else if (e.type === 'tool_called' && s.current) {
          s.current.calls = e.calls.map((c) => ({
            name: c.name,
            arguments: c.arguments === null ? '(unparsable)' : JSON.stringify(c.arguments),
            ok: c.success,
            ...(c.success ? {} : { error: c.status }),
          }));
        } else if (e.type === 'tool_result' && s.current) {
          s.current.toolResult = e.text;
        } else if (e.type === 'reward' && s.current) {
          const { total, ...parts } = e.reward;
          s.current.reward = { total, parts };
          if (e.outcome)
            s.current.outcome = {
              outcome: e.outcome.outcome,
              em: e.outcome.em,
              f1: e.outcome.f1,
              formatValid: e.outcome.formatValid,
            };
        } else if (e.type === 'episode_done') {
          if (s.current) {
            s.current.done = true;
            turns.push(s.current);
            s.current = null;
          }
          trajectory = {
            trajectory: e.trajectory,
            tokenTexts: tokenTexts(s.tokenizer, e.trajectory.ids),
            step: null,
            trained: null,
          };
        } else if (e.type === 'rollout_done') {
          s.done = true;
          break;
        }
      }
      return { turns, trajectory };
    });
  }

  // ------------------------------------------------------------------------------------ training

  private state(): TrainState {
    const t = this.training;
    if (!t)
      return {
        runId: '',
        step: 0,
        steps: 0,
        running: false,
        phase: null,
        phaseProgress: 0,
        lastStepSeconds: null,
        message: null,
      };
    return {
      runId: t.runId,
      step: t.trainer.step,
      steps: t.trainer.config.train.steps,
      running: t.running,
      phase: t.phase,
      phaseProgress: t.phaseProgress,
      lastStepSeconds: t.lastStepSeconds,
      message: t.message,
    };
  }

  private pushState(): TrainState {
    const s = this.state();
    this.emit({ type: 'train-state', state: s });
    return s;
  }

  private async writeMeta(t: Training): Promise<void> {
    t.meta.step = t.trainer.step;
    await t.storage.write(META_FILE, `${JSON.stringify(t.meta, null, 2)}\n`);
    this.emit({ type: 'runs-changed' });
  }

  async trainSetup(setup: TrainSetup): Promise<TrainState> {
    if (this.training?.running) throw new Error('training is running: pause it first');
    const gpu = this.requireGpu();
    const loaded = this.loaded;
    if (!loaded) throw new Error('load a model first (the run starts from its weights)');
    if (loaded.checkpoint.tokenizerFiles.size === 0)
      throw new Error(`${loaded.info.name} has no tokenizer: training needs the chat template`);
    await this.trainReset();
    await this.stepperReset();
    let config = setup.config;
    let runId: string;
    let storage: RunStorage;
    let meta: RunMeta;
    let message: string;
    if (setup.resumeId) {
      runId = setup.resumeId;
      storage = await this.runs.open(runId);
      const metaText = await readText(storage, META_FILE);
      const configText = await readText(storage, 'config.json');
      if (metaText === null || configText === null)
        throw new Error(
          `run ${runId} has no ${metaText === null ? META_FILE : 'config.json'}: it cannot be resumed`,
        );
      meta = JSON.parse(metaText) as RunMeta;
      config = parseConfigText(configText, `${storage.description}/config.json`);
      if (meta.model !== loaded.info.name)
        throw new Error(
          `run ${runId} started from ${meta.model}, but ${loaded.info.name} is loaded: load ${meta.model} first`,
        );
      message = '';
    } else {
      runId = runIdFor(config);
      storage = await this.runs.open(runId);
      meta = {
        id: runId,
        name: config.name,
        algorithm: config.algorithm.name,
        model: loaded.info.name,
        createdAt: new Date().toISOString(),
        status: 'paused',
        step: 0,
        steps: config.train.steps,
      };
      message = `new run ${runId}`;
    }
    const trainer = await this.gpuTurn(() =>
      // The path `npm run train` finds a bundled model at, so the run's config.json works there too.
      Trainer.create(
        gpu,
        { ...config, model: { ...config.model, path: `public/models/${loaded.info.name}` } },
        loaded.checkpoint,
        {
          storage,
          resume: setup.resumeId !== null,
        },
      ),
    );
    if (setup.resumeId) {
      const lost = meta.step - trainer.step;
      message =
        trainer.step === 0
          ? `run ${runId} had no checkpoint yet: it starts again from step 0`
          : `resumed run ${runId} from its checkpoint at step ${trainer.step}` +
            (lost > 0
              ? ` (it had reached step ${meta.step}: ${lost} step${lost === 1 ? '' : 's'} lost, run again)`
              : '');
    }
    await storage.write('config.json', `${JSON.stringify(trainer.config, null, 2)}\n`);
    await truncateMetrics(storage, trainer.step);
    meta.status = 'paused';
    this.training = {
      runId,
      trainer,
      storage,
      meta,
      running: false,
      pauseRequested: false,
      phase: null,
      phaseProgress: 0,
      lastStepSeconds: null,
      message,
      views: new Map(),
      evaluatedAtStart: trainer.step > 0,
    };
    await this.writeMeta(this.training);
    return this.pushState();
  }

  private async evaluateLine(t: Training): Promise<void> {
    const trainer = t.trainer;
    if (trainer.config.train.evalSize === 0) return;
    t.phase = 'evaluate';
    t.phaseProgress = 0;
    this.pushState();
    const { line } = await this.gpuTurn(() => evaluationLine(trainer));
    await t.storage.append(METRICS_FILE, `${JSON.stringify(line)}\n`);
    this.emit({ type: 'train-metrics', runId: t.runId, line });
  }

  /** One training step with its bookkeeping: metrics line, samples, evaluation, checkpoint. */
  private async stepOnce(t: Training): Promise<void> {
    const trainer = t.trainer;
    const c = trainer.config;
    if (!t.evaluatedAtStart) {
      t.evaluatedAtStart = true;
      await this.evaluateLine(t);
    }
    const rows = c.algorithm.name === 'sft' ? 0 : c.rollout.questionsPerStep * c.rollout.samplesPerQuestion;
    let finished = 0;
    let arrays: UpdateArrays | null = null;
    const line = await this.gpuTurn(() =>
      trainer.trainStep({
        onPhase: (phase) => {
          t.phase = phase;
          t.phaseProgress = 0;
          this.pushState();
        },
        onRolloutEvent: (event) => {
          if (event.type === 'episode_done' && rows > 0) {
            finished++;
            t.phaseProgress = finished / rows;
            this.pushState();
          }
          this.emit({ type: 'train-rollout', runId: t.runId, event: summarise(event) });
        },
        onUpdateArrays: (a) => {
          arrays = a;
        },
      }),
    );
    // A lost device replaces the run (recoverGpu): this step's result belongs to the old one.
    if (this.training !== t)
      throw new Error('the run was restored on a new GPU device: this step is dropped');
    await t.storage.append(METRICS_FILE, `${JSON.stringify(line)}\n`);
    t.lastStepSeconds = typeof line['time/step_s'] === 'number' ? line['time/step_s'] : null;
    this.emit({ type: 'train-metrics', runId: t.runId, line });
    const step = trainer.step;
    const trajectories = c.algorithm.name === 'sft' ? [] : trainer.lastTrajectories;
    if (trajectories.length > 0) {
      const got = arrays as UpdateArrays | null;
      const views = trajectories.map((tr, row) => ({
        trajectory: tr,
        tokenTexts: tokenTexts(trainer.tokenizer, tr.ids),
        step,
        trained: got ? perTokenTrainArrays(tr, row, got) : null,
      }));
      t.views.set(step, views);
      for (const k of [...t.views.keys()]) if (k <= step - KEPT_STEPS) t.views.delete(k);
      await t.storage.write(
        `samples/step-${String(step).padStart(6, '0')}.json`,
        JSON.stringify(trajectories.map(trajectoryToJSON)),
      );
    }
    const last = step >= c.train.steps;
    if (c.train.evalEvery > 0 && step % c.train.evalEvery === 0 && !last) await this.evaluateLine(t);
    if ((c.train.checkpointEvery > 0 && step % c.train.checkpointEvery === 0) || last) {
      t.phase = 'checkpoint';
      this.pushState();
      await this.gpuTurn(() => trainer.saveCheckpoint());
    }
    if (last) {
      await this.evaluateLine(t);
      t.meta.status = 'done';
    }
    t.phase = null;
    await this.writeMeta(t);
  }

  private requireTraining(): Training {
    if (!this.training) throw new Error('set up a run first (Start)');
    return this.training;
  }

  async trainOneStep(): Promise<TrainState> {
    const t = this.requireTraining();
    if (t.running) throw new Error('training is running: pause it first');
    if (t.trainer.step >= t.trainer.config.train.steps)
      throw new Error(`the run is done (${t.trainer.step} of ${t.trainer.config.train.steps} steps)`);
    t.running = true;
    t.meta.status = 'running';
    try {
      await this.writeMeta(t);
      this.pushState();
      await this.stepOnce(t);
    } finally {
      t.running = false;
      if (t.meta.status === 'running') t.meta.status = 'paused';
      if (this.training === t) await this.writeMeta(t);
    }
    return this.pushState();
  }

  async trainRun(): Promise<TrainState> {
    const t = this.requireTraining();
    if (t.running) throw new Error('training is already running');
    t.running = true;
    t.pauseRequested = false;
    t.meta.status = 'running';
    await this.writeMeta(t);
    this.pushState();
    try {
      while (!t.pauseRequested && t.trainer.step < t.trainer.config.train.steps) await this.stepOnce(t);
      if (t.pauseRequested) t.message = `paused at step ${t.trainer.step}`;
    } catch (e) {
      t.message = `the step failed: ${describeError(e)}`;
      throw e;
    } finally {
      t.running = false;
      t.phase = null;
      if (t.meta.status === 'running') t.meta.status = 'paused';
      if (this.training === t) await this.writeMeta(t);
      this.pushState();
    }
    return this.state();
  }

  async trainPause(): Promise<void> {
    if (this.training?.running) {
      this.training.pauseRequested = true;
      this.training.message = 'pausing after this step…';
      this.pushState();
    }
  }

  async trainReset(): Promise<void> {
    const t = this.training;
    if (!t) return;
    if (t.running) throw new Error('training is running: pause it first');
    this.training = null;
    await this.stepperReset();
    await this.gpuTurn(async () => {
      t.trainer.release();
      this.gpu?.trimPool();
    });
    this.pushState();
  }

  async trainWeightsZip(): Promise<WeightsZip> {
    const t = this.requireTraining();
    const files = await this.gpuTurn(() => t.trainer.policyFiles());
    return this.zip(`${t.runId}-step${t.trainer.step}`, files);
  }

  async trajectoriesOf(runId: string, step: number): Promise<TrajectoryView[]> {
    const kept = this.training?.runId === runId ? this.training.views.get(step) : undefined;
    if (kept) return kept;
    const storage = await this.runs.open(runId);
    const text = await readText(storage, `samples/step-${String(step).padStart(6, '0')}.json`);
    if (text === null) return [];
    const tokenizer = this.training?.trainer.tokenizer ?? this.loaded?.tokenizer ?? null;
    return (JSON.parse(text) as unknown[]).map((j) => {
      const trajectory = trajectoryFromJSON(j);
      return { trajectory, tokenTexts: tokenTexts(tokenizer, trajectory.ids), step, trained: null };
    });
  }

  // ------------------------------------------------------------------------------------ runs

  async listRuns(): Promise<RunSummary[]> {
    const out: RunSummary[] = [];
    for (const id of await this.runs.ids()) {
      const storage = await this.runs.open(id);
      const metaText = await readText(storage, META_FILE);
      if (metaText === null) continue;
      let meta: RunMeta;
      try {
        meta = JSON.parse(metaText) as RunMeta;
      } catch {
        continue;
      }
      // 'running' on disk but not running here: the tab that ran it was closed or reloaded.
      if (meta.status === 'running' && !(this.training?.runId === id && this.training.running))
        meta = { ...meta, status: 'interrupted' };
      const metrics: StepMetrics[] = [];
      for (const l of ((await readText(storage, METRICS_FILE)) ?? '').split('\n')) {
        if (l.trim() === '') continue;
        try {
          metrics.push(JSON.parse(l) as StepMetrics);
        } catch {
          // a line cut by a killed tab: the rest of the file is still good
        }
      }
      const checkpoints: number[] = [];
      for (const n of await storage.list('checkpoints')) {
        const m = /^step-(\d+)$/.exec(n);
        if (m && (await storage.read(`checkpoints/${n}/trainer-state.json`)) !== null)
          checkpoints.push(Number(m[1]));
      }
      out.push({ meta, metrics, checkpoints: checkpoints.sort((a, b) => a - b) });
    }
    return out.sort((a, b) => a.meta.createdAt.localeCompare(b.meta.createdAt));
  }

  async readRunFile(runId: string, path: string): Promise<Uint8Array | null> {
    return (await this.runs.open(runId)).read(path);
  }

  async deleteRun(runId: string): Promise<void> {
    if (this.training?.runId === runId) await this.trainReset();
    await this.runs.remove(runId);
    this.emit({ type: 'runs-changed' });
  }
}
