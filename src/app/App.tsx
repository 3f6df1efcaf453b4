// The lab's shell: a header with the screens (Model, Task, Rollout, Train, Tokens) and the one shown.
// The Model screen holds what the page has always shown first (model, generate, adapter, self-check).
import { useEffect } from 'react';
import { AdapterPanel } from './components/AdapterPanel.tsx';
import { GeneratePanel } from './components/GeneratePanel.tsx';
import { InspectorScreen } from './components/InspectorScreen.tsx';
import { ModelPanel } from './components/ModelPanel.tsx';
import { NoWebGpu } from './components/NoWebGpu.tsx';
import { SelfCheckPanel } from './components/SelfCheckPanel.tsx';
import { StepperScreen } from './components/StepperScreen.tsx';
import { TaskScreen } from './components/TaskScreen.tsx';
import { TrainScreen } from './components/TrainScreen.tsx';
import { SCREENS } from './slices/ui.ts';
import { connectEngineEvents, useLab } from './store.ts';

export function App() {
  const status = useLab((s) => s.gpuStatus);
  const connectGpu = useLab((s) => s.connectGpu);
  const runSelfCheck = useLab((s) => s.runSelfCheck);
  const screen = useLab((s) => s.screen);
  const setScreen = useLab((s) => s.setScreen);
  const model = useLab((s) => s.model);
  const train = useLab((s) => s.trainState);
  const recovery = useLab((s) => s.gpuRecovery);

  useEffect(() => {
    connectEngineEvents();
    void connectGpu();
  }, [connectGpu]);
  useEffect(() => {
    if (status === 'ready') void runSelfCheck();
  }, [status, runSelfCheck]);

  return (
    <div className="lab">
      <header className="topbar">
        <div className="brand">
          <h1>Agent-R1 Lab</h1>
          <p className="tagline">
            Train LLM agents with end-to-end reinforcement learning, in this tab, on your GPU.
          </p>
        </div>
        <nav className="tabs" aria-label="screens">
          {SCREENS.filter((s) => s.id !== 'gpu').map((s) => (
            <button
              key={s.id}
              type="button"
              data-testid={`nav-${s.id}`}
              className={screen === s.id ? 'tab active' : 'tab'}
              title={s.hint}
              onClick={() => setScreen(s.id)}
            >
              {s.label}
            </button>
          ))}
        </nav>
        <div className="statusbar small">
          <span data-testid="status-model">{model ? model.name : 'no model'}</span>
          {train && train.runId !== '' ? (
            <span data-testid="status-train">
              {' '}
              · step {train.step}/{train.steps}
              {train.running ? ' · training' : ''}
            </span>
          ) : null}
        </div>
      </header>
      {status === 'idle' || status === 'acquiring' ? (
        <p data-testid="gpu-status">Connecting to WebGPU…</p>
      ) : null}
      {recovery ? (
        <p className="banner" data-testid="gpu-recovery">
          {recovery}
        </p>
      ) : null}
      {status === 'unavailable' || status === 'error' ? <NoWebGpu /> : null}
      {status === 'ready' ? (
        <>
          {screen === 'model' || screen === 'gpu' ? (
            <main className="panels">
              <ModelPanel />
              <GeneratePanel />
              <AdapterPanel />
              <SelfCheckPanel />
            </main>
          ) : null}
          {screen === 'task' ? <TaskScreen /> : null}
          {screen === 'stepper' ? <StepperScreen /> : null}
          {screen === 'train' ? <TrainScreen /> : null}
          {screen === 'inspector' ? <InspectorScreen /> : null}
        </>
      ) : null}
    </div>
  );
}
