// Train slice: the run being trained (state pushed by the engine), the runs kept in OPFS (listed
// after a reload, overlaid on the charts), the chart settings and the downloads of a run.
import type { StateCreator } from 'zustand';
import { parseConfigText } from '../../rl/config.ts';
import { saveBlob } from '../browser-files.ts';
import { engine } from '../engine-client.ts';
import { metricsToCsv, metricsToJsonl } from '../metrics.ts';
import { describeError } from './gpu.ts';
import type { LabState, TrainSlice } from './types.ts';

export const createTrainSlice: StateCreator<LabState, [], [], TrainSlice> = (set, get) => {
  /** Runs an engine call, keeping its failure as the screen's error. */
  async function guarded(fn: () => Promise<void>): Promise<void> {
    set({ trainError: null });
    try {
      await fn();
    } catch (e) {
      set({ trainError: describeError(e) });
    }
    await get().refreshRuns();
  }

  return {
    trainState: null,
    trainError: null,
    liveEpisodes: [],
    runs: [],
    shownRuns: [],
    smoothing: 0,
    trajectories: null,

    refreshRuns: async () => {
      try {
        const runs = await engine.listRuns();
        const ids = new Set(runs.map((r) => r.meta.id));
        let shown = get().shownRuns.filter((id) => ids.has(id));
        // New runs are shown by default.
        const known = new Set(get().runs.map((r) => r.meta.id));
        for (const r of runs)
          if (!known.has(r.meta.id) && !shown.includes(r.meta.id)) shown = [...shown, r.meta.id];
        set({ runs, shownRuns: shown });
      } catch (e) {
        set({ trainError: `could not read the saved runs: ${describeError(e)}` });
      }
    },

    startTraining: () =>
      guarded(async () => {
        const cur = get().trainState;
        if (!cur || cur.runId === '' || cur.step >= cur.steps) {
          set({ trainState: await engine.trainSetup({ config: get().trainConfig, resumeId: null }) });
          await get().refreshRuns();
        }
        set({ trainState: await engine.trainRun() });
      }),

    trainOneStep: () =>
      guarded(async () => {
        const cur = get().trainState;
        if (!cur || cur.runId === '' || cur.step >= cur.steps) {
          set({ trainState: await engine.trainSetup({ config: get().trainConfig, resumeId: null }) });
          await get().refreshRuns();
        }
        set({ trainState: await engine.trainOneStep() });
      }),

    pauseTraining: async () => {
      await engine.trainPause();
    },

    resetTraining: () =>
      guarded(async () => {
        await engine.trainReset();
        set({ trainState: null, liveEpisodes: [] });
      }),

    resumeRun: (runId) =>
      guarded(async () => {
        const run = get().runs.find((r) => r.meta.id === runId);
        if (!run) throw new Error(`no saved run ${runId}`);
        if (get().model?.name !== run.meta.model) {
          await get().loadBundledModel(run.meta.model);
          if (get().model?.name !== run.meta.model)
            throw new Error(`run ${runId} needs the model ${run.meta.model}, which did not load`);
        }
        set({ trainState: await engine.trainSetup({ config: get().trainConfig, resumeId: runId }) });
        // The form shows the resumed run's own config.
        const text = await engine.readRunFile(runId, 'config.json');
        if (text)
          get().setTrainConfig(parseConfigText(new TextDecoder().decode(text), `${runId}/config.json`));
      }),

    deleteRun: (runId) =>
      guarded(async () => {
        await engine.deleteRun(runId);
        if (get().trainState?.runId === runId) set({ trainState: null });
      }),

    toggleShownRun: (runId) => {
      const shown = get().shownRuns;
      set({ shownRuns: shown.includes(runId) ? shown.filter((id) => id !== runId) : [...shown, runId] });
    },

    setSmoothing: (smoothing) => set({ smoothing }),

    downloadRunFile: (runId, what) =>
      guarded(async () => {
        if (what === 'config') {
          const bytes = await engine.readRunFile(runId, 'config.json');
          if (!bytes) throw new Error(`run ${runId} has no config.json`);
          saveBlob(
            new Blob([bytes as Uint8Array<ArrayBuffer>], { type: 'application/json' }),
            `${runId}-config.json`,
          );
          return;
        }
        const lines = get().runs.find((r) => r.meta.id === runId)?.metrics ?? [];
        if (what === 'metrics-jsonl')
          saveBlob(
            new Blob([metricsToJsonl(lines)], { type: 'application/x-ndjson' }),
            `${runId}-metrics.jsonl`,
          );
        else saveBlob(new Blob([metricsToCsv(lines)], { type: 'text/csv' }), `${runId}-metrics.csv`);
      }),

    downloadTrainedWeights: () =>
      guarded(async () => {
        const zip = await engine.trainWeightsZip();
        saveBlob(zip.blob, zip.fileName);
      }),

    loadTrajectories: (runId, step) =>
      guarded(async () => {
        set({ trajectories: { runId, step, views: await engine.trajectoriesOf(runId, step) } });
      }),

    appendMetrics: (runId, line) => {
      set({
        runs: get().runs.map((r) => (r.meta.id === runId ? { ...r, metrics: [...r.metrics, line] } : r)),
      });
    },
  };
};
