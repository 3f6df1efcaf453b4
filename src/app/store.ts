// The page's store: UI state only, in slices (src/app/slices/): gpu, model, generation, task, train,
// stepper, ui. The GPU device, the model, the decode loop, rollouts and training run in the engine
// worker (src/worker/); actions call it through src/app/engine-client.ts and its events land here.
// Actions never throw: failures become state.
import { create } from 'zustand';
import type { EngineEvent } from '../worker/protocol.ts';
import { onEngineEvent } from './engine-client.ts';
import { applyGenerationEvent, createGenerationSlice } from './slices/generation.ts';
import { createGpuSlice } from './slices/gpu.ts';
import { createModelSlice } from './slices/model.ts';
import { createOnnxSlice } from './slices/onnx.ts';
import { createStepperSlice } from './slices/stepper.ts';
import { createTaskSlice } from './slices/task.ts';
import { createTrainSlice } from './slices/train.ts';
import type { LabState } from './slices/types.ts';
import { createUiSlice } from './slices/ui.ts';

export type { GenSettings } from '../worker/generation.ts';
export type { GenToken, ModelInfo, WeightsDtype } from '../worker/protocol.ts';
export type * from './slices/types.ts';

export const useLab = create<LabState>()((...a) => ({
  ...createGpuSlice(...a),
  ...createModelSlice(...a),
  ...createOnnxSlice(...a),
  ...createGenerationSlice(...a),
  ...createTaskSlice(...a),
  ...createTrainSlice(...a),
  ...createStepperSlice(...a),
  ...createUiSlice(...a),
}));

function onEvent(event: EngineEvent): void {
  const { getState: get, setState: set } = useLab;
  switch (event.type) {
    case 'gpu-lost':
      set({ gpuStatus: 'acquiring', gpuError: event.message });
      void get().recoverGpu(event.message);
      break;
    case 'model-progress': {
      const cur = get().modelLoading;
      if (cur) set({ modelLoading: { ...cur, phase: event.phase, files: event.files } });
      break;
    }
    case 'generation-start':
    case 'generation-tokens':
      applyGenerationEvent(event, get, set);
      break;
    case 'train-state':
      set({ trainState: event.state });
      if (event.state.phase === 'rollout' && event.state.phaseProgress === 0) set({ liveEpisodes: [] });
      break;
    case 'train-metrics':
      get().appendMetrics(event.runId, event.line);
      break;
    case 'train-rollout':
      if (event.event.type === 'episode_done') {
        const { row, reward, doneReason } = event.event;
        set({ liveEpisodes: [...get().liveEpisodes, { row, reward, doneReason }] });
      }
      break;
    case 'runs-changed':
      void get().refreshRuns();
      break;
  }
}

let subscribed = false;
/** Starts listening to the engine (once; the worker starts with it). */
export function connectEngineEvents(): void {
  if (subscribed) return;
  subscribed = true;
  onEngineEvent(onEvent);
}
