// Model slice: the bundled catalog, loading (per-file progress reported by the engine), the loaded
// model's description, the Hub endpoint and cache, and the weights download.
import type { StateCreator } from 'zustand';
import { saveBlob } from '../browser-files.ts';
import { engine } from '../engine-client.ts';
import { describeError } from './gpu.ts';
import type { BundledModel, LabState, ModelSlice } from './types.ts';

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

export const createModelSlice: StateCreator<LabState, [], [], ModelSlice> = (set, get) => {
  async function load(spec: Parameters<typeof engine.loadModel>[0], label: string): Promise<void> {
    if (get().modelLoading) return;
    if (get().gpuStatus !== 'ready') {
      set({
        modelError: { label, message: 'WebGPU is not ready: no device to load the model onto', file: null },
      });
      return;
    }
    if (get().generating || get().download?.status === 'exporting') {
      const what = get().generating
        ? 'a generation is running: stop it'
        : 'the weights are being exported: wait';
      set({ modelError: { label, message: `${what} before loading another model`, file: null } });
      return;
    }
    set({
      modelLoading: { label, phase: 'reading files', files: [], startedAt: performance.now() },
      modelError: null,
    });
    try {
      const outcome = await engine.loadModel(spec, label);
      if (outcome.ok) {
        set({ model: outcome.model, modelLoading: null, download: null });
        const g = outcome.model.generationConfig;
        if (g)
          get().setGenSettings({
            temperature: g.doSample ? String(g.temperature) : '0',
            topP: String(g.topP),
            topK: String(g.topK),
          });
      } else {
        set({ modelLoading: null, modelError: outcome.error });
      }
    } catch (e) {
      set({ modelLoading: null, modelError: { label, message: describeError(e), file: null } });
    }
    void get().refreshGpuBytes();
  }

  return {
    catalog: null,
    catalogError: null,
    modelLoading: null,
    modelError: null,
    model: null,
    download: null,
    hubEndpoint: initialHubEndpoint(),
    cacheMessage: null,

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

    loadBundledModel: (name) =>
      load(
        {
          kind: 'bundled',
          name,
          siteBase: import.meta.env.BASE_URL,
          knownSizes: get().catalog?.find((m) => m.name === name)?.files ?? {},
        },
        `${name} (bundled)`,
      ),

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
      await load({ kind: 'hub', repo, revision, endpoint: get().hubEndpoint }, label);
    },

    setHubEndpoint: (url) => {
      const endpoint = normaliseEndpoint(url);
      if (endpoint) set({ hubEndpoint: endpoint, cacheMessage: null });
      else
        set({ cacheMessage: `"${url}" is not an http(s) URL; the Hub endpoint stays ${get().hubEndpoint}` });
    },

    clearModelCache: async () => {
      set({ cacheMessage: await engine.clearModelCache() });
    },

    loadModelFiles: async (files) => {
      const picked = [...files];
      if (picked.length === 0) return;
      const wanted = picked.filter((f) => CHECKPOINT_FILE.test(f.name));
      const ignored = picked.filter((f) => !CHECKPOINT_FILE.test(f.name)).map((f) => f.name);
      const shown = picked.map((f) => f.name);
      const list =
        shown.length <= 4 ? shown.join(', ') : `${shown.slice(0, 3).join(', ')} and ${shown.length - 3} more`;
      await load({ kind: 'files', files: wanted, ignored }, `your files (${list})`);
    },

    downloadWeights: async (dtype = 'as-loaded') => {
      if (!get().model || get().download?.status === 'exporting') return;
      const started = performance.now();
      set({
        download: { status: 'exporting', fileName: null, bytes: null, files: [], ms: null, error: null },
      });
      try {
        const zip = await engine.exportWeights(dtype);
        saveBlob(zip.blob, zip.fileName);
        set({
          download: {
            status: 'done',
            fileName: zip.fileName,
            bytes: zip.blob.size,
            files: zip.files,
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
  };
};
