import { type DragEvent, useEffect, useState } from 'react';
import { describeMemoryPlan } from '../../agent/model/memory-plan.ts';
import { formatBytes } from '../../gpu/errors.ts';
import { describeMicroBatch, pickMicroBatchRows } from '../../rl/memory.ts';
import { droppedFiles } from '../browser-files.ts';
import { type ModelInfo, useLab, type WeightsDtype } from '../store.ts';
import { OnnxExport } from './OnnxExport.tsx';

export function ModelPanel() {
  const catalog = useLab((s) => s.catalog);
  const catalogError = useLab((s) => s.catalogError);
  const loading = useLab((s) => s.modelLoading);
  const error = useLab((s) => s.modelError);
  const model = useLab((s) => s.model);
  const generating = useLab((s) => s.generating);
  const exporting = useLab((s) => s.download?.status === 'exporting');
  const fetchCatalog = useLab((s) => s.fetchCatalog);
  const loadBundled = useLab((s) => s.loadBundledModel);
  const loadHub = useLab((s) => s.loadHubModel);
  const loadFiles = useLab((s) => s.loadModelFiles);
  const hubEndpoint = useLab((s) => s.hubEndpoint);
  const setHubEndpoint = useLab((s) => s.setHubEndpoint);
  const clearCache = useLab((s) => s.clearModelCache);
  const cacheMessage = useLab((s) => s.cacheMessage);
  const [bundled, setBundled] = useState('');
  const [repo, setRepo] = useState('Qwen/Qwen2.5-0.5B-Instruct');
  const [revision, setRevision] = useState('main');
  const [dragging, setDragging] = useState(false);

  useEffect(() => {
    void fetchCatalog();
  }, [fetchCatalog]);
  // The lab's own model first: it is the one the Task, Rollout and Train screens are tuned for.
  const selected = bundled || catalog?.find((m) => m.name === 'qwen-tiny')?.name || catalog?.[0]?.name || '';
  const entry = catalog?.find((m) => m.name === selected);
  const busy = loading !== null || generating || exporting;

  const onDrop = (e: DragEvent) => {
    e.preventDefault();
    setDragging(false);
    if (busy) return;
    void droppedFiles(e.dataTransfer).then((files) => loadFiles(files));
  };

  return (
    // biome-ignore lint/a11y/noStaticElementInteractions: a drop target for model files; the file input is the keyboard route
    <section
      className={`panel wide${dragging ? ' dropping' : ''}`}
      data-testid="model-panel"
      onDragOver={(e) => {
        e.preventDefault();
        setDragging(true);
      }}
      onDragLeave={(e) => {
        // Leaving for a child element is not leaving the panel.
        if (!e.currentTarget.contains(e.relatedTarget as Node | null)) setDragging(false);
      }}
      onDrop={onDrop}
    >
      <h2>Model</h2>
      <div className="sources">
        <div className="source">
          <h3>Bundled with the lab</h3>
          {catalogError ? <p className="error-text">{catalogError}</p> : null}
          {catalog === null ? <p className="muted">reading /models/index.json…</p> : null}
          {catalog && catalog.length > 0 ? (
            <>
              <div className="row">
                <select
                  data-testid="bundled-select"
                  value={selected}
                  onChange={(e) => setBundled(e.target.value)}
                  disabled={busy}
                >
                  {catalog.map((m) => (
                    <option key={m.name} value={m.name}>
                      {m.name} — {formatBytes(m.size)}
                    </option>
                  ))}
                </select>
                <button
                  type="button"
                  data-testid="load-bundled"
                  disabled={busy || !selected}
                  onClick={() => void loadBundled(selected)}
                >
                  Load
                </button>
              </div>
              {entry ? <p className="muted">{entry.description}</p> : null}
            </>
          ) : null}
        </div>
        <div className="source">
          <h3>Hugging Face Hub</h3>
          <div className="row">
            <input
              data-testid="hub-repo"
              type="text"
              value={repo}
              placeholder="owner/name"
              spellCheck={false}
              onChange={(e) => setRepo(e.target.value)}
              disabled={busy}
            />
            <input
              className="short"
              type="text"
              value={revision}
              title="branch, tag or commit"
              onChange={(e) => setRevision(e.target.value)}
              disabled={busy}
            />
            <button
              type="button"
              data-testid="load-hub"
              disabled={busy}
              onClick={() => void loadHub(repo, revision)}
            >
              Load
            </button>
          </div>
          <p className="muted">
            Qwen2 / Qwen2.5 / Qwen3 repos: config, tokenizer and safetensors are downloaded from{' '}
            <span data-testid="hub-endpoint">{hubEndpoint}</span> and kept in the browser's Cache Storage, so
            a reload does not download them again. Pin a commit as the revision to be sure of what you get.
          </p>
          <details className="muted">
            <summary>endpoint and cache</summary>
            <div className="row">
              <input
                type="text"
                defaultValue={hubEndpoint}
                title="a Hugging Face mirror, e.g. https://hf-mirror.com"
                spellCheck={false}
                onBlur={(e) => setHubEndpoint(e.target.value)}
                disabled={busy}
              />
              <button
                type="button"
                data-testid="clear-cache"
                onClick={() => void clearCache()}
                disabled={busy}
              >
                Clear download cache
              </button>
            </div>
            {cacheMessage ? <p data-testid="cache-message">{cacheMessage}</p> : null}
          </details>
        </div>
        <div className="source">
          <h3>Your files</h3>
          <div className="row">
            <label className={`file-button${busy ? ' disabled' : ''}`}>
              Choose files…
              <input
                data-testid="model-files"
                type="file"
                multiple
                disabled={busy}
                onChange={(e) => {
                  const files = Array.from(e.target.files ?? []);
                  e.target.value = '';
                  void loadFiles(files);
                }}
              />
            </label>
          </div>
          <p className="muted">
            config.json, model.safetensors (or the shards and their index), tokenizer.json and
            tokenizer_config.json — or drop a model folder onto this panel.
          </p>
        </div>
      </div>

      {loading ? <LoadProgress /> : null}
      {error ? (
        <div className="load-error" data-testid="model-error">
          <strong>Could not load {error.label}:</strong> <span className="error-text">{error.message}</span>
          {model ? <p className="muted">Still loaded: {model.label}.</p> : null}
        </div>
      ) : null}
      {model ? <ModelDetails model={model} /> : null}
      {!model && !loading ? <p className="muted">No model loaded yet.</p> : null}
    </section>
  );
}

function LoadProgress() {
  const loading = useLab((s) => s.modelLoading)!;
  return (
    <div className="load-progress" data-testid="model-loading">
      <p>
        Loading {loading.label}: {loading.phase}…
      </p>
      <table className="cases">
        <tbody>
          {loading.files.map((f) => (
            <tr key={f.file}>
              <td>{f.file}</td>
              <td>{f.total !== null ? <progress value={f.loaded} max={f.total} /> : <progress />}</td>
              <td>
                {formatBytes(f.loaded)}
                {f.total !== null ? ` of ${formatBytes(f.total)}` : ''}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function ModelDetails({ model }: { model: ModelInfo }) {
  const c = model.config;
  const trainConfig = useLab((s) => s.trainConfig);
  const bindingLimit = useLab((s) => s.adapter?.limits.maxStorageBufferBindingSize ?? 0);
  const micro = pickMicroBatchRows(c, trainConfig, undefined, bindingLimit);
  const plan = micro.plan;
  const gpuLive = useLab((s) => s.gpuLiveBytes);
  const download = useLab((s) => s.download);
  const downloadWeights = useLab((s) => s.downloadWeights);
  const [dtype, setDtype] = useState<WeightsDtype>('as-loaded');
  const tokenizerNote =
    model.tokenizerVocabSize !== null
      ? `${c.vocabSize.toLocaleString('en')} rows (tokenizer: ${model.tokenizerVocabSize.toLocaleString('en')} tokens)`
      : `${c.vocabSize.toLocaleString('en')} rows (no tokenizer)`;
  return (
    <div className="model-info" data-testid="model-info">
      <p className="status status-pass" data-testid="model-loaded">
        Loaded {model.label} in {(model.loadMs / 1000).toFixed(1)} s
      </p>
      <dl className="kv">
        <dt>architecture</dt>
        <dd data-testid="model-arch">{c.architecture}</dd>
        <dt>layers</dt>
        <dd>{c.numLayers}</dd>
        <dt>hidden / intermediate</dt>
        <dd>
          {c.hiddenSize} / {c.intermediateSize}
        </dd>
        <dt>heads / kv heads × head dim</dt>
        <dd>
          {c.numHeads} / {c.numKvHeads} × {c.headDim}
        </dd>
        <dt>vocabulary</dt>
        <dd>{tokenizerNote}</dd>
        <dt>tied embeddings</dt>
        <dd>{c.tieWordEmbeddings ? 'yes' : 'no'}</dd>
        <dt>dtype in the files</dt>
        <dd>
          {model.fileDtype}
          {c.torchDtype ? ` (torch_dtype ${c.torchDtype})` : ''}
        </dd>
        <dt>parameters</dt>
        <dd data-testid="model-params">
          {model.parameters.toLocaleString('en')} ({(model.parameters / 1e6).toFixed(2)} M)
        </dd>
        <dt>GPU memory</dt>
        <dd>
          {formatBytes(model.gpuBytes)} of f32 weights; {formatBytes(gpuLive)} live on the device
        </dd>
        <dt>to train it</dt>
        <dd
          data-testid="model-train-memory"
          title="the memory planner (src/agent/model/memory-plan.ts) for the Train screen's settings: weights, KL reference, AdamW moments, activations, gradients and the backward's scratch, every episode padded to the token budget; the micro-batch is train.microBatchRows, or the largest that fits train.memoryBudgetMiB and the adapter's maxStorageBufferBindingSize"
        >
          {describeMemoryPlan(plan)}, for{' '}
          {trainConfig.rollout.questionsPerStep * trainConfig.rollout.samplesPerQuestion} episodes of up to{' '}
          {trainConfig.rollout.maxTotalTokens} tokens,{' '}
          {trainConfig.model.lora.rank > 0
            ? `LoRA rank ${trainConfig.model.lora.rank}${trainConfig.model.frozenWeights === 'f32' ? '' : `, ${trainConfig.model.frozenWeights} base`}`
            : 'full fine-tuning'}
          {trainConfig.model.recomputeActivations ? ', recomputation on' : ''}, {describeMicroBatch(micro)}
          {micro.fits
            ? ''
            : ` — over train.memoryBudgetMiB (${trainConfig.train.memoryBudgetMiB} MiB): training would refuse to start`}{' '}
          (Train screen)
        </dd>
        <dt>largest binding</dt>
        <dd>
          {model.fit.largest.name} {formatBytes(model.fit.largest.bytes)}; LM head in {model.fit.vocabChunks}{' '}
          chunk{model.fit.vocabChunks === 1 ? '' : 's'}
        </dd>
        <dt>files</dt>
        <dd>
          {model.weightFiles.join(', ')}
          {model.tokenizerFileNames.length > 0 ? `, ${model.tokenizerFileNames.join(', ')}` : ''} —{' '}
          {formatBytes(model.bytesRead)} read
        </dd>
      </dl>
      {model.warnings.length > 0 || model.ignoredFiles.length > 0 ? (
        <ul className="warnings">
          {model.warnings.map((w) => (
            <li key={w}>{w}</li>
          ))}
          {model.ignoredFiles.length > 0 ? (
            <li>ignored (not checkpoint files): {model.ignoredFiles.join(', ')}</li>
          ) : null}
        </ul>
      ) : null}
      <div className="row download">
        <select
          value={dtype}
          onChange={(e) => setDtype(e.target.value as WeightsDtype)}
          title="dtype of model.safetensors"
        >
          <option value="as-loaded">{model.fileDtype} (as loaded)</option>
          <option value="F32">F32</option>
          <option value="F16">F16</option>
          <option value="BF16">BF16</option>
        </select>
        <button
          type="button"
          data-testid="download-weights"
          disabled={download?.status === 'exporting'}
          onClick={() => void downloadWeights(dtype)}
        >
          Download weights (.zip)
        </button>
        <span className="muted" data-testid="download-status">
          {download?.status === 'exporting' && 'reading the weights back from the GPU…'}
          {download?.status === 'done' &&
            `${download.fileName}: ${formatBytes(download.bytes!)} (${download.files.map((f) => f.name).join(', ')}) in ${download.ms!.toFixed(0)} ms`}
          {download?.status === 'error' && <span className="error-text">{download.error}</span>}
        </span>
      </div>
      <OnnxExport source="model" disabled={download?.status === 'exporting'} />
    </div>
  );
}
