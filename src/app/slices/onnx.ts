// ONNX slice: the "Download for transformers.js (ONNX)" zip and the in-tab check of the export with
// onnxruntime-web, for the loaded model (Model screen) or the policy being trained (Train screen).
import type { StateCreator } from 'zustand';
import { saveBlob } from '../browser-files.ts';
import { engine } from '../engine-client.ts';
import { describeError } from './gpu.ts';
import type { LabState, OnnxSlice } from './types.ts';

export const createOnnxSlice: StateCreator<LabState, [], [], OnnxSlice> = (set, get) => {
  const busy = () => get().onnx?.status === 'exporting' || get().onnx?.status === 'checking';
  return {
    onnx: null,

    downloadOnnx: async (source) => {
      if (busy()) return;
      set({ onnx: { source, status: 'exporting', download: null, check: null, error: null } });
      try {
        const zip = await engine.exportOnnx(source);
        saveBlob(zip.blob, zip.fileName);
        set({
          onnx: {
            source,
            status: 'done',
            download: { fileName: zip.fileName, bytes: zip.blob.size, files: zip.files },
            check: null,
            error: null,
          },
        });
      } catch (e) {
        set({ onnx: { source, status: 'error', download: null, check: null, error: describeError(e) } });
      }
    },

    checkOnnx: async (source, provider) => {
      if (busy()) return;
      const download = get().onnx?.source === source ? (get().onnx?.download ?? null) : null;
      set({ onnx: { source, status: 'checking', download, check: null, error: null } });
      try {
        const check = await engine.checkOnnx(source, provider);
        set({ onnx: { source, status: 'done', download, check, error: null } });
      } catch (e) {
        set({ onnx: { source, status: 'error', download, check: null, error: describeError(e) } });
      }
    },
  };
};
