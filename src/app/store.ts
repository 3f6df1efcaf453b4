// The lab's one store. Views read slices of it and call its actions; engine objects (the Gpu, the
// loaded model) live here too, so every view talks to the same device. Actions never throw: failures
// become state.
//
// Slices: the GPU (adapter, self-check); the model (bundled catalog, loading with per-file progress,
// the loaded QwenGpuModel with its config and tokenizer, exporting weights as a .zip); generation
// (chat prompt through the tokenizer's chat template, sampling one token per step through a KV-cache
// session so the text streams into the page, Stop between steps).
import { create } from 'zustand';
import { loadCheckpoint, saveCheckpoint } from '../agent/model/checkpoint.ts';
import type { GenerationConfig, ModelConfig } from '../agent/model/config.ts';
import { ModelFileError, ModelSourceError, ModelTooLargeError } from '../agent/model/errors.ts';
import { type GenerationSession, QwenGpuModel } from '../agent/model/qwen-gpu.ts';
import type { FloatDtype } from '../agent/model/safetensors.ts';
import {
  fileSource,
  hubSource,
  MODEL_CACHE_NAME,
  type ModelSource,
  type NamedBlob,
  type Progress,
  publicModelSource,
} from '../agent/model/sources.ts';
import { type AdapterFit, assertFitsAdapter, parameterCount } from '../agent/model/weights.ts';
import { zipParts } from '../agent/model/zip.ts';
import type { QwenTokenizer } from '../agent/tokenizer/qwen-tokenizer.ts';
import type { AdapterReport } from '../gpu/device.ts';
import { GpuError } from '../gpu/errors.ts';
import { Gpu } from '../gpu/runtime.ts';
import { runMatmulSelfCheck, type SelfCheckResult } from '../gpu/selfcheck.ts';
import { saveBlob } from './browser-files.ts';
import {
  chatMessages,
  DEFAULT_GEN_SETTINGS,
  type GenSettings,
  offeredTools,
  parseGenSettings,
  parsePromptIds,
  type SamplingSettings,
  settingsFromGenerationConfig,
} from './generation.ts';

export type { GenSettings } from './generation.ts';

export type GpuStatus = 'idle' | 'acquiring' | 'ready' | 'unavailable' | 'error';

// ---------------------------------------------------------------------------------------------
// Model types

/** One entry of public/models/index.json (written by `npm run models`). */
export interface BundledModel {
  name: string;
  description: string;
  /** Bytes of the folder. */
  size: number;
  tokenizer: boolean;
  /** File name -> bytes, from the manifest (gives progress a total when the server compresses). */
  files: Record<string, number>;
}

export type ModelOrigin =
  | { kind: 'bundled'; name: string }
  | { kind: 'hub'; repo: string; revision: string }
  | { kind: 'files'; names: string[] };

export interface FileProgress {
  file: string;
  loaded: number;
  total: number | null;
}

export interface ModelLoading {
  /** What is being loaded, in words ("tiny-qwen3 (bundled)"). */
  label: string;
  phase: 'reading files' | 'building the tokenizer' | 'uploading to the GPU';
  /** Files read so far, in order, with bytes. */
  files: FileProgress[];
  startedAt: number;
}

export interface LoadedModel {
  /** Increases with every load; generations remember which model they ran on. */
  id: number;
  /** Short name (folder, repo, or the config's architecture for picked files); also the zip's name. */
  name: string;
  label: string;
  origin: ModelOrigin;
  config: ModelConfig;
  generationConfig: GenerationConfig | null;
  tokenizerFiles: Map<string, string>;
  tokenizer: QwenTokenizer | null;
  /** Token count of the tokenizer (may be less than config.vocabSize: Qwen pads the embedding). */
  tokenizerVocabSize: number | null;
  model: QwenGpuModel;
  /** dtype of the weights in the files (F32, F16, BF16). */
  fileDtype: FloatDtype;
  weightFiles: string[];
  /** Bytes read from the source. */
  bytesRead: number;
  parameters: number;
  /** Bytes of the weights on the GPU (float32). */
  gpuBytes: number;
  fit: AdapterFit;
  warnings: string[];
  /** Files the user picked that are not part of a checkpoint and were ignored. */
  ignoredFiles: string[];
  loadMs: number;
}

export interface ModelLoadError {
  /** What was being loaded. */
  label: string;
  message: string;
  /** The file the problem is in, when the loader says. */
  file: string | null;
}

export type WeightsDtype = 'as-loaded' | FloatDtype;

export interface DownloadState {
  status: 'exporting' | 'done' | 'error';
  fileName: string | null;
  bytes: number | null;
  files: { name: string; bytes: number }[];
  ms: number | null;
  error: string | null;
}

// ---------------------------------------------------------------------------------------------
// Generation types

export interface GenToken {
  id: number;
  /**
   * What this token added to the decoded text (null without a tokenizer). Text that ends inside a
   * UTF-8 character is held back until the character is complete, so the pieces add up to `text`.
   */
  piece: string | null;
  /** The token decoded on its own (for the table; may be part of a character). */
  alone: string | null;
  /** Log-probability of the token under the sampling temperature's distribution (T = 1 when greedy). */
  logprob: number;
}

export interface Generation {
  modelId: number;
  modelName: string;
  status: 'running' | 'done' | 'stopped' | 'error';
  /** The rendered chat template (null for a token-id prompt). */
  promptText: string | null;
  promptIds: number[];
  tokens: GenToken[];
  /** All new tokens decoded together; null without a tokenizer. */
  text: string | null;
  /** Why it ended: a stop token, the token limit, or the Stop button. */
  finish: 'stop' | 'length' | 'stopped' | null;
  /** Prompt forward + first token. */
  firstTokenMs: number | null;
  /** Tokens per second after the first token. */
  tokensPerSecond: number | null;
  totalMs: number | null;
  settings: SamplingSettings;
  error: string | null;
}

// ---------------------------------------------------------------------------------------------

export interface LabState {
  gpuStatus: GpuStatus;
  gpu: Gpu | null;
  adapter: AdapterReport | null;
  gpuError: string | null;
  selfCheck: SelfCheckResult | null;
  selfCheckRunning: boolean;
  selfCheckError: string | null;

  /** public/models/index.json; null until fetched. */
  catalog: BundledModel[] | null;
  catalogError: string | null;
  modelLoading: ModelLoading | null;
  modelError: ModelLoadError | null;
  model: LoadedModel | null;
  download: DownloadState | null;

  genSettings: GenSettings;
  generation: Generation | null;
  /** A generation is running (also while its first token is computed). */
  generating: boolean;
  stopRequested: boolean;

  connectGpu: () => Promise<void>;
  runSelfCheck: () => Promise<void>;

  fetchCatalog: () => Promise<void>;
  loadBundledModel: (name: string) => Promise<void>;
  loadHubModel: (repo: string, revision?: string) => Promise<void>;
  /** Where Hub repos are downloaded from: huggingface.co, a mirror, or `?hub=<url>` in the page URL. */
  hubEndpoint: string;
  setHubEndpoint: (url: string) => void;
  /** Empties the browser's cache of downloaded model files (Cache Storage). */
  clearModelCache: () => Promise<void>;
  /** The outcome of the last cache action, for the panel. */
  cacheMessage: string | null;
  /** Files from an <input type=file> or a drop (config.json, *.safetensors, tokenizer files). */
  loadModelFiles: (files: readonly NamedBlob[]) => Promise<void>;
  downloadWeights: (dtype?: WeightsDtype) => Promise<void>;

  setGenSettings: (patch: Partial<GenSettings>) => void;
  generate: () => Promise<void>;
  stopGeneration: () => void;
}

function describeError(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}

/** Files a checkpoint folder may hold; anything else picked by the user is ignored. */
const CHECKPOINT_FILE =
  /^(config\.json|generation_config\.json|tokenizer\.json|tokenizer_config\.json|.*\.safetensors|model\.safetensors\.index\.json)$/;

const HUB_REPO = /^[A-Za-z0-9][\w.-]*\/[\w.-]+$/;
const DEFAULT_HUB_ENDPOINT = 'https://huggingface.co';

/** An http(s) URL without a trailing slash, or null. */
function normaliseEndpoint(url: string): string | null {
  try {
    const u = new URL(url.trim());
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
    return u.toString().replace(/\/+$/, '');
  } catch {
    return null;
  }
}

/** `?hub=<url>` selects a Hub mirror (or a local server in tests); anything else: huggingface.co. */
function initialHubEndpoint(): string {
  const fromQuery = typeof location === 'undefined' ? null : new URLSearchParams(location.search).get('hub');
  return (fromQuery && normaliseEndpoint(fromQuery)) || DEFAULT_HUB_ENDPOINT;
}

const SAMPLE_INVALID_TOKEN = 0xffffffff;

let nextModelId = 1;

/** Progress reports arrive per chunk (hundreds per file); the view needs a few per second. */
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

export const useLab = create<LabState>((set, get) => {
  /** Shared by the three load actions: read, check, build the tokenizer, upload, swap in. */
  async function loadFrom(
    makeSource: () => ModelSource,
    label: string,
    name: string | ((config: ModelConfig) => string),
    origin: ModelOrigin,
    ignoredFiles: string[] = [],
    knownSizes: Record<string, number> = {},
  ): Promise<void> {
    const { gpu, modelLoading, generating } = get();
    if (modelLoading) return;
    if (!gpu) {
      set({
        modelError: { label, message: 'WebGPU is not ready: no device to load the model onto', file: null },
      });
      return;
    }
    if (generating || get().download?.status === 'exporting') {
      const what = generating ? 'a generation is running: stop it' : 'the weights are being exported: wait';
      set({ modelError: { label, message: `${what} before loading another model`, file: null } });
      return;
    }
    const startedAt = performance.now();
    set({ modelLoading: { label, phase: 'reading files', files: [], startedAt }, modelError: null });
    const progress = progressTracker((files) => {
      const cur = get().modelLoading;
      if (cur) set({ modelLoading: { ...cur, files } });
    }, knownSizes);
    let model: QwenGpuModel | null = null;
    try {
      const source = makeSource();
      const ckpt = await loadCheckpoint(source, {
        onProgress: (p) => progress.report(p),
        adapterLimits: {
          maxBufferSize: gpu.limits.maxBufferSize,
          maxStorageBufferBindingSize: gpu.limits.maxStorageBufferBindingSize,
        },
      });
      set({ modelLoading: { label, phase: 'building the tokenizer', files: progress.files(), startedAt } });
      let tokenizer: QwenTokenizer | null = null;
      if (ckpt.tokenizerFiles.size > 0) {
        // transformers.js is large; it is only fetched once a model with a tokenizer shows up.
        const { QwenTokenizer } = await import('../agent/tokenizer/qwen-tokenizer.ts');
        tokenizer = QwenTokenizer.fromFiles(ckpt.tokenizerFiles);
      }
      set({ modelLoading: { label, phase: 'uploading to the GPU', files: progress.files(), startedAt } });
      // For the panel: how the model fits this device (loadCheckpoint refused misfits already).
      const fit = assertFitsAdapter(ckpt.config, {
        maxBufferSize: gpu.limits.maxBufferSize,
        maxStorageBufferBindingSize: gpu.limits.maxStorageBufferBindingSize,
      });
      model = new QwenGpuModel(gpu, ckpt.config, ckpt.tensors);
      await gpu.sync(); // surfaces out-of-memory and validation errors of the uploads
      const embedDtype = ckpt.tensors.get('model.embed_tokens.weight')?.dtype;
      const fileDtype: FloatDtype = embedDtype === 'F16' || embedDtype === 'BF16' ? embedDtype : 'F32';
      const parameters = parameterCount(ckpt.config);
      const loaded: LoadedModel = {
        id: nextModelId++,
        name: typeof name === 'string' ? name : name(ckpt.config),
        label,
        origin,
        config: ckpt.config,
        generationConfig: ckpt.generationConfig,
        tokenizerFiles: ckpt.tokenizerFiles,
        tokenizer,
        tokenizerVocabSize: ckpt.tokenizerVocabSize,
        model,
        fileDtype,
        weightFiles: ckpt.weightFiles,
        bytesRead: progress.files().reduce((n, f) => n + f.loaded, 0),
        parameters,
        gpuBytes: parameters * 4,
        fit,
        warnings: ckpt.warnings,
        ignoredFiles,
        loadMs: performance.now() - startedAt,
      };
      const previous = get().model;
      set({
        model: loaded,
        modelLoading: null,
        download: null,
        genSettings: settingsFromGenerationConfig(ckpt.generationConfig, get().genSettings),
      });
      if (previous) {
        previous.model.release();
        gpu.trimPool();
      }
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
        message += ` — you chose: ${origin.names.concat(ignoredFiles).join(', ')}`;
      } else if (ignoredFiles.length > 0) {
        message += ` (ignored, not checkpoint files: ${ignoredFiles.join(', ')})`;
      }
      if (e instanceof ModelTooLargeError) message = `${message}. The model was not loaded.`;
      set({
        modelLoading: null,
        modelError: { label, message, file: e instanceof ModelFileError ? e.file : null },
      });
    }
  }

  return {
    gpuStatus: 'idle',
    gpu: null,
    adapter: null,
    gpuError: null,
    selfCheck: null,
    selfCheckRunning: false,
    selfCheckError: null,

    catalog: null,
    catalogError: null,
    modelLoading: null,
    modelError: null,
    model: null,
    download: null,

    genSettings: DEFAULT_GEN_SETTINGS,
    generation: null,
    generating: false,
    stopRequested: false,

    connectGpu: async () => {
      if (get().gpuStatus === 'acquiring' || get().gpuStatus === 'ready') return;
      set({ gpuStatus: 'acquiring', gpuError: null });
      try {
        const gpu = await Gpu.create();
        gpu.device.lost.then((info) => {
          set({
            gpuStatus: 'error',
            gpu: null,
            model: null,
            gpuError: `The GPU device was lost (${info.reason}): ${info.message}`,
          });
        });
        set({ gpuStatus: 'ready', gpu, adapter: gpu.report });
      } catch (e) {
        const unavailable = e instanceof GpuError && e.kind === 'unavailable';
        set({ gpuStatus: unavailable ? 'unavailable' : 'error', gpuError: describeError(e) });
      }
    },

    runSelfCheck: async () => {
      const { gpu, selfCheckRunning } = get();
      if (!gpu || selfCheckRunning) return;
      set({ selfCheckRunning: true, selfCheckError: null });
      try {
        set({ selfCheck: await runMatmulSelfCheck(gpu) });
      } catch (e) {
        set({ selfCheckError: describeError(e) });
      } finally {
        set({ selfCheckRunning: false });
      }
    },

    // ------------------------------------------------------------------------------- model

    fetchCatalog: async () => {
      const url = `${import.meta.env.BASE_URL}models/index.json`;
      const missing = `no bundled models: ${url} is missing (run \`npm run models\`, then rebuild)`;
      try {
        const res = await fetch(url, { cache: 'no-cache' });
        const type = res.headers.get('content-type') ?? '';
        if (res.status === 404 || type.startsWith('text/html')) throw new Error(missing);
        if (!res.ok) throw new Error(`${url}: HTTP ${res.status} ${res.statusText}`);
        const json = (await res.json()) as { models?: unknown };
        if (!Array.isArray(json.models)) throw new Error(`${url}: no "models" list`);
        const catalog: BundledModel[] = json.models.map((m: Record<string, unknown>, i: number) => {
          if (typeof m?.name !== 'string' || typeof m.size !== 'number') {
            throw new Error(`${url}: entry ${i} needs a name and a size`);
          }
          return {
            name: m.name,
            description: typeof m.description === 'string' ? m.description : '',
            size: m.size,
            tokenizer: m.tokenizer === true,
            files: Object.fromEntries(
              (Array.isArray(m.files) ? m.files : [])
                .filter(
                  (f: { name?: unknown; size?: unknown }) =>
                    typeof f?.name === 'string' && typeof f.size === 'number',
                )
                .map((f: { name: string; size: number }) => [f.name, f.size]),
            ),
          };
        });
        set({ catalog, catalogError: catalog.length === 0 ? missing : null });
      } catch (e) {
        set({ catalog: [], catalogError: describeError(e) });
      }
    },

    loadBundledModel: async (name) => {
      // The site's own files: no point copying them into the Cache API as well.
      await loadFrom(
        () => publicModelSource(name, import.meta.env.BASE_URL, { cache: null }),
        `${name} (bundled)`,
        name,
        { kind: 'bundled', name },
        [],
        get().catalog?.find((m) => m.name === name)?.files,
      );
    },

    loadHubModel: async (repoInput, revisionInput) => {
      const repo = repoInput
        .trim()
        .replace(/^https:\/\/huggingface\.co\//, '')
        .replace(/\/+$/, '');
      const revision = revisionInput?.trim() || 'main';
      const label = `${repo || '(empty)'}@${revision} (Hugging Face Hub)`;
      if (!HUB_REPO.test(repo)) {
        set({
          modelError: {
            label,
            message: `"${repoInput}" is not a Hub repository id: use owner/name, e.g. Qwen/Qwen2.5-0.5B-Instruct`,
            file: null,
          },
        });
        return;
      }
      const endpoint = get().hubEndpoint;
      await loadFrom(() => hubSource(repo, { revision, endpoint }), label, repo.split('/')[1], {
        kind: 'hub',
        repo,
        revision,
      });
    },

    hubEndpoint: initialHubEndpoint(),
    cacheMessage: null,

    setHubEndpoint: (url) => {
      const endpoint = normaliseEndpoint(url);
      if (endpoint) set({ hubEndpoint: endpoint, cacheMessage: null });
      else
        set({ cacheMessage: `"${url}" is not an http(s) URL; the Hub endpoint stays ${get().hubEndpoint}` });
    },

    clearModelCache: async () => {
      if (typeof caches === 'undefined') {
        set({
          cacheMessage: 'This page has no Cache Storage (it needs https or localhost): nothing is cached.',
        });
        return;
      }
      try {
        const existed = await caches.delete(MODEL_CACHE_NAME);
        set({
          cacheMessage: existed
            ? 'Cleared the downloaded model files.'
            : 'The download cache was already empty.',
        });
      } catch (e) {
        set({ cacheMessage: `Could not clear the cache: ${describeError(e)}` });
      }
    },

    loadModelFiles: async (files) => {
      const picked = [...files];
      const wanted = picked.filter((f) => CHECKPOINT_FILE.test(f.name));
      const ignored = picked.filter((f) => !CHECKPOINT_FILE.test(f.name)).map((f) => f.name);
      const names = wanted.map((f) => f.name);
      if (picked.length === 0) return;
      const shown = picked.map((f) => f.name);
      const list =
        shown.length <= 4 ? shown.join(', ') : `${shown.slice(0, 3).join(', ')} and ${shown.length - 3} more`;
      const label = `your files (${list})`;
      // Picked files do not say what the model is called: name it after the architecture.
      await loadFrom(
        () => fileSource(wanted),
        label,
        (c) => `${c.modelType}-model`,
        { kind: 'files', names },
        ignored,
      );
    },

    downloadWeights: async (dtype = 'as-loaded') => {
      const loaded = get().model;
      if (!loaded || get().download?.status === 'exporting') return;
      const started = performance.now();
      set({
        download: { status: 'exporting', fileName: null, bytes: null, files: [], ms: null, error: null },
      });
      try {
        const weights = await loaded.model.exportWeights();
        const files = saveCheckpoint({
          config: loaded.config,
          generationConfig: loaded.generationConfig,
          tensors: weights,
          dtype: dtype === 'as-loaded' ? loaded.fileDtype : dtype,
          tokenizerFiles: loaded.tokenizerFiles,
        });
        const folder = loaded.name.replace(/[^\w.-]+/g, '-') || 'model';
        const parts = zipParts(
          [...files].map(([name, data]) => ({ name: `${folder}/${name}`, data })),
          { modified: new Date() },
        );
        const blob = new Blob(parts as BlobPart[], { type: 'application/zip' });
        const fileName = `${folder}.zip`;
        saveBlob(blob, fileName);
        set({
          download: {
            status: 'done',
            fileName,
            bytes: blob.size,
            files: [...files].map(([name, data]) => ({ name, bytes: data.length })),
            ms: performance.now() - started,
            error: null,
          },
        });
      } catch (e) {
        set({
          download: {
            status: 'error',
            fileName: null,
            bytes: null,
            files: [],
            ms: null,
            error: describeError(e),
          },
        });
      }
    },

    // ------------------------------------------------------------------------------- generation

    setGenSettings: (patch) => set({ genSettings: { ...get().genSettings, ...patch } }),

    stopGeneration: () => {
      if (get().generating) set({ stopRequested: true });
    },

    generate: async () => {
      const loaded = get().model;
      if (!loaded || get().generating) return;
      const s = get().genSettings;
      const base: Generation = {
        modelId: loaded.id,
        modelName: loaded.name,
        status: 'running',
        promptText: null,
        promptIds: [],
        tokens: [],
        text: null,
        finish: null,
        firstTokenMs: null,
        tokensPerSecond: null,
        totalMs: null,
        settings: { temperature: 0, topP: 1, topK: 0, maxNewTokens: 1, seed: 0 },
        error: null,
      };
      set({ generating: true, stopRequested: false, generation: base });
      let gen = base;
      const update = (patch: Partial<Generation>) => {
        gen = { ...gen, ...patch };
        set({ generation: gen });
      };
      let session: GenerationSession | null = null;
      try {
        const settings = parseGenSettings(s);
        const { tokenizer, config } = loaded;
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
        update({ promptText, promptIds, settings });
        const stopIds = new Set<number>([
          ...(loaded.generationConfig?.eosTokenIds ?? []),
          ...config.eosTokenIds,
          ...(tokenizer ? [tokenizer.eosTokenId] : []),
        ]);
        const t0 = performance.now();
        let tFirst = 0;
        session = loaded.model.startSession(1, maxLen);
        session.append([promptIds]);
        const ids: number[] = [];
        let emitted = ''; // decoded text already shown as token pieces
        let finish: Generation['finish'] = 'length';
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
          let text: string | null = null;
          if (tokenizer) {
            text = tokenizer.decode(ids);
            piece = '';
            if (!text.endsWith('\uFFFD')) {
              piece = text.slice(emitted.length);
              emitted = text;
            }
          }
          const alone = tokenizer ? tokenizer.decode([id]) : null;
          update({
            tokens: [...gen.tokens, { id, piece, alone, logprob: r.logprobs[0][0] }],
            text,
            firstTokenMs: tFirst - t0,
            tokensPerSecond: ids.length > 1 ? ((ids.length - 1) * 1000) / (now - tFirst) : null,
            totalMs: now - t0,
          });
          if (stopIds.has(id)) {
            finish = 'stop';
            break;
          }
          if (get().stopRequested) {
            finish = 'stopped';
            break;
          }
        }
        if (gen.text !== null && gen.text !== emitted && gen.tokens.length > 0) {
          // The text ended inside a character: the held-back rest goes to the last token.
          const last = gen.tokens[gen.tokens.length - 1];
          const rest = gen.text.slice(emitted.length);
          update({ tokens: [...gen.tokens.slice(0, -1), { ...last, piece: (last.piece ?? '') + rest }] });
        }
        update({ status: finish === 'stopped' ? 'stopped' : 'done', finish });
      } catch (e) {
        update({ status: 'error', error: describeError(e) });
      } finally {
        session?.release();
        set({ generating: false, stopRequested: false });
      }
    },
  };
});
