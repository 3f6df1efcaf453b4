// Stepper slice: one episode stepped a turn at a time by the engine (rolloutStream underneath), and
// the trajectory the token inspector shows.
import type { StateCreator } from 'zustand';
import { engine } from '../engine-client.ts';
import { trajectoryTurns } from '../trajectory-turns.ts';
import { describeError } from './gpu.ts';
import type { LabState, StepperSlice } from './types.ts';

export const createStepperSlice: StateCreator<LabState, [], [], StepperSlice> = (set, get) => {
  async function advance(untilDone: boolean) {
    const s = get().stepper;
    if (!s || s.done || get().stepperBusy) return;
    set({ stepperBusy: true, stepperError: null });
    try {
      const r = await engine.stepperAdvance(untilDone);
      const cur = get().stepper;
      if (!cur) return;
      const done = r.trajectory !== null || r.turns.some((t) => t.done);
      set({ stepper: { ...cur, turns: [...cur.turns, ...r.turns], done: cur.done || done } });
      if (r.trajectory) set({ inspected: r.trajectory });
    } catch (e) {
      set({ stepperError: describeError(e) });
    } finally {
      set({ stepperBusy: false });
    }
  }
  return {
    stepper: null,
    stepperBusy: false,
    stepperError: null,
    inspected: null,
    stepperStart: async (pick, temperature, seed) => {
      if (get().stepperBusy) return;
      set({ stepperBusy: true, stepperError: null, stepper: null });
      try {
        const start = await engine.stepperStart({
          config: get().trainConfig,
          pick,
          temperature,
          seed,
          searchTopK: get().searchTopK,
        });
        set({ stepper: { start, turns: [], done: false } });
      } catch (e) {
        set({ stepperError: describeError(e) });
      } finally {
        set({ stepperBusy: false });
      }
    },
    stepperNext: () => advance(false),
    stepperRun: () => advance(true),
    stepperReset: async () => {
      set({ stepper: null, stepperError: null });
      await engine.stepperReset();
    },
    inspect: (view) => set({ inspected: view }),
    openInStepper: (view) => {
      const t = view.trajectory;
      void engine.stepperReset();
      set({
        inspected: view,
        stepperError: null,
        stepper: {
          start: {
            question: t.question,
            answers: t.answers,
            systemPrompt: t.messages.find((m) => m.role === 'system')?.content ?? '',
            tools: t.tools,
            policy: view.step !== null ? `replay of training step ${view.step}, episode ${t.row}` : 'replay',
          },
          turns: trajectoryTurns(t),
          done: true,
        },
      });
    },
  };
};
