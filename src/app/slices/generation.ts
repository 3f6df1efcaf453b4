// Generation slice: the Generate form and the tokens the engine streams back (one event per token;
// the decode loop itself runs in the worker, so Stop is a message it reads between steps).
import type { StateCreator } from 'zustand';
import { DEFAULT_GEN_SETTINGS } from '../../worker/generation.ts';
import type { EngineEvent } from '../../worker/protocol.ts';
import { engine } from '../engine-client.ts';
import { describeError } from './gpu.ts';
import type { Generation, GenerationSlice, LabState } from './types.ts';

export const createGenerationSlice: StateCreator<LabState, [], [], GenerationSlice> = (set, get) => ({
  genSettings: DEFAULT_GEN_SETTINGS,
  generation: null,
  generating: false,
  stopRequested: false,

  setGenSettings: (patch) => set({ genSettings: { ...get().genSettings, ...patch } }),

  stopGeneration: () => {
    if (!get().generating) return;
    set({ stopRequested: true });
    void engine.stopGeneration();
  },

  generate: async () => {
    const model = get().model;
    if (!model || get().generating) return;
    const base: Generation = {
      modelId: model.id,
      modelName: model.name,
      status: 'running',
      promptText: null,
      promptIds: [],
      tokens: [],
      text: null,
      finish: null,
      firstTokenMs: null,
      tokensPerSecond: null,
      totalMs: null,
      settings: { temperature: 0, topP: 1, topK: 0, maxNewTokens: 1, seed: 0 },
      error: null,
    };
    set({ generating: true, stopRequested: false, generation: base });
    try {
      const end = await engine.generate(get().genSettings);
      const g = get().generation!;
      let tokens = g.tokens;
      if (end.lastPiece !== null && tokens.length > 0) {
        // The text ended inside a character: the held-back rest goes to the last token.
        const last = tokens[tokens.length - 1];
        tokens = [...tokens.slice(0, -1), { ...last, piece: (last.piece ?? '') + end.lastPiece }];
      }
      set({
        generation: {
          ...g,
          tokens,
          status: end.finish === 'stopped' ? 'stopped' : 'done',
          finish: end.finish,
        },
      });
    } catch (e) {
      set({ generation: { ...get().generation!, status: 'error', error: describeError(e) } });
    } finally {
      set({ generating: false, stopRequested: false });
    }
  },
});

/** Applies the engine's generation events to the store. */
export function applyGenerationEvent(
  event: EngineEvent,
  get: () => LabState,
  set: (p: Partial<LabState>) => void,
) {
  const g = get().generation;
  if (!g) return;
  if (event.type === 'generation-start') {
    const s = event.start;
    set({ generation: { ...g, promptText: s.promptText, promptIds: s.promptIds, settings: s.settings } });
  } else if (event.type === 'generation-tokens') {
    const tokens = [...g.tokens, ...event.tokens];
    const afterFirst = event.totalMs - event.firstTokenMs;
    set({
      generation: {
        ...g,
        tokens,
        text: event.text,
        firstTokenMs: event.firstTokenMs,
        tokensPerSecond:
          tokens.length > 1 && afterFirst > 0 ? ((tokens.length - 1) * 1000) / afterFirst : null,
        totalMs: event.totalMs,
      },
    });
  }
}
