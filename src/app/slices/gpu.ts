// GPU slice: the engine worker's adapter and the in-page matmul self-check.
import type { StateCreator } from 'zustand';
import { EngineCallError, engine } from '../engine-client.ts';
import type { GpuSlice, LabState } from './types.ts';

export const describeError = (e: unknown): string => (e instanceof Error ? e.message : String(e));

export const createGpuSlice: StateCreator<LabState, [], [], GpuSlice> = (set, get) => ({
  gpuStatus: 'idle',
  adapter: null,
  gpuError: null,
  gpuLiveBytes: 0,
  selfCheck: null,
  selfCheckRunning: false,
  selfCheckError: null,

  connectGpu: async () => {
    if (get().gpuStatus === 'acquiring' || get().gpuStatus === 'ready') return;
    set({ gpuStatus: 'acquiring', gpuError: null });
    try {
      set({ gpuStatus: 'ready', adapter: await engine.init() });
    } catch (e) {
      const unavailable =
        e instanceof EngineCallError &&
        (e.remoteName === 'WebGPUUnavailableError' || /navigator\.gpu/.test(e.message));
      set({ gpuStatus: unavailable ? 'unavailable' : 'error', gpuError: describeError(e) });
    }
  },

  runSelfCheck: async () => {
    if (get().gpuStatus !== 'ready' || get().selfCheckRunning) return;
    set({ selfCheckRunning: true, selfCheckError: null });
    try {
      set({ selfCheck: await engine.selfCheck() });
    } catch (e) {
      set({ selfCheckError: describeError(e) });
    } finally {
      set({ selfCheckRunning: false });
    }
  },

  refreshGpuBytes: async () => {
    set({ gpuLiveBytes: await engine.gpuLiveBytes() });
  },

  gpuRecovery: null,
  recoverGpu: async (why) => {
    try {
      const r = await engine.recoverGpu();
      set({
        gpuStatus: 'ready',
        adapter: r.adapter,
        gpuError: null,
        model: r.model,
        ...(r.train ? { trainState: r.train } : {}),
        gpuRecovery: `${why}. A new device was started${r.model ? ` and ${r.model.name} loaded again` : ''}${
          r.train ? `; ${r.train.message}` : ''
        }.`,
      });
    } catch (e) {
      set({
        gpuStatus: 'error',
        model: null,
        gpuError: `${why}; starting a new device failed: ${describeError(e)}`,
      });
    }
  },
});
