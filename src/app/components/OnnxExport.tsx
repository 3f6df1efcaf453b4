// "Download for transformers.js (ONNX)" and the in-tab check of that export (onnxruntime-web on
// WebGPU or wasm against the engine), for the loaded model or the policy being trained.
import { useState } from 'react';
import { formatBytes } from '../../gpu/errors.ts';
import type { ExportSource, OnnxProvider } from '../../worker/protocol.ts';
import { useLab } from '../store.ts';

export function OnnxExport(props: { source: ExportSource; disabled: boolean }) {
  const onnx = useLab((s) => s.onnx);
  const download = useLab((s) => s.downloadOnnx);
  const check = useLab((s) => s.checkOnnx);
  const [provider, setProvider] = useState<OnnxProvider>('webgpu');
  const mine = onnx?.source === props.source ? onnx : null;
  const busy = onnx?.status === 'exporting' || onnx?.status === 'checking';
  const c = mine?.check;
  return (
    <div className="row download" data-testid={`onnx-${props.source}`}>
      <button
        type="button"
        data-testid="download-onnx"
        disabled={props.disabled || busy}
        onClick={() => void download(props.source)}
        title="onnx/model.onnx with config, generation config and tokenizer: the folder transformers.js loads"
      >
        Download for transformers.js (ONNX)
      </button>
      <select
        value={provider}
        onChange={(e) => setProvider(e.target.value as OnnxProvider)}
        title="onnxruntime-web execution provider for the check"
      >
        <option value="webgpu">WebGPU</option>
        <option value="wasm">wasm</option>
      </select>
      <button
        type="button"
        data-testid="check-onnx"
        disabled={props.disabled || busy}
        onClick={() => void check(props.source, provider)}
        title="run the export with onnxruntime-web in this tab and compare logits and 32 greedy tokens with the lab's engine"
      >
        Check the export in this tab
      </button>
      <span className="muted" data-testid="onnx-status">
        {mine?.status === 'exporting' && 'building the ONNX graph…'}
        {mine?.status === 'checking' && 'running the export with onnxruntime-web…'}
        {mine?.download &&
          mine.status !== 'exporting' &&
          `${mine.download.fileName}: ${formatBytes(mine.download.bytes)} (${mine.download.files.map((f) => f.name).join(', ')}) `}
        {c &&
          `onnxruntime-web (${c.provider}): ${c.sameTokens ? 'same' : `different from token ${c.firstDifference}:`} ` +
            `${c.steps} greedy tokens as the engine, max logit difference ${c.maxLogitDiff.toExponential(1)} ` +
            `over ${c.promptTokens} prompt tokens (${c.seconds.toFixed(1)} s)`}
        {mine?.status === 'error' && <span className="error-text">{mine.error}</span>}
      </span>
    </div>
  );
}
