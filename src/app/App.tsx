import { useEffect } from 'react';
import { AdapterPanel } from './components/AdapterPanel.tsx';
import { GeneratePanel } from './components/GeneratePanel.tsx';
import { ModelPanel } from './components/ModelPanel.tsx';
import { NoWebGpu } from './components/NoWebGpu.tsx';
import { SelfCheckPanel } from './components/SelfCheckPanel.tsx';
import { useLab } from './store.ts';

export function App() {
  const status = useLab((s) => s.gpuStatus);
  const connectGpu = useLab((s) => s.connectGpu);
  const runSelfCheck = useLab((s) => s.runSelfCheck);

  useEffect(() => {
    void connectGpu();
  }, [connectGpu]);
  useEffect(() => {
    if (status === 'ready') void runSelfCheck();
  }, [status, runSelfCheck]);

  return (
    <div className="lab">
      <header>
        <h1>Agent-R1 Lab</h1>
        <p className="tagline">
          Train LLM agents with end-to-end reinforcement learning, in this tab, on your GPU (WebGPU).
        </p>
      </header>
      {status === 'idle' || status === 'acquiring' ? (
        <p data-testid="gpu-status">Connecting to WebGPU…</p>
      ) : null}
      {status === 'unavailable' || status === 'error' ? <NoWebGpu /> : null}
      {status === 'ready' ? (
        <main className="panels">
          <ModelPanel />
          <GeneratePanel />
          <AdapterPanel />
          <SelfCheckPanel />
        </main>
      ) : null}
    </div>
  );
}
