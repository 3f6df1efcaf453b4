// The lab's one store. Views read slices of it and call its actions; engine objects (the Gpu) live
// here too, so every view talks to the same device. Actions never throw: failures become state.
import { create } from 'zustand';
import type { AdapterReport } from '../gpu/device.ts';
import { GpuError } from '../gpu/errors.ts';
import { Gpu } from '../gpu/runtime.ts';
import { runMatmulSelfCheck, type SelfCheckResult } from '../gpu/selfcheck.ts';

export type GpuStatus = 'idle' | 'acquiring' | 'ready' | 'unavailable' | 'error';

export interface LabState {
  gpuStatus: GpuStatus;
  gpu: Gpu | null;
  adapter: AdapterReport | null;
  gpuError: string | null;
  selfCheck: SelfCheckResult | null;
  selfCheckRunning: boolean;
  selfCheckError: string | null;

  connectGpu: () => Promise<void>;
  runSelfCheck: () => Promise<void>;
}

function describeError(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}

export const useLab = create<LabState>((set, get) => ({
  gpuStatus: 'idle',
  gpu: null,
  adapter: null,
  gpuError: null,
  selfCheck: null,
  selfCheckRunning: false,
  selfCheckError: null,

  connectGpu: async () => {
    if (get().gpuStatus === 'acquiring' || get().gpuStatus === 'ready') return;
    set({ gpuStatus: 'acquiring', gpuError: null });
    try {
      const gpu = await Gpu.create();
      gpu.device.lost.then((info) => {
        set({
          gpuStatus: 'error',
          gpu: null,
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
}));
