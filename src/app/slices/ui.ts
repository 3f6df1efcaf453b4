// UI slice: which screen is shown (kept in the URL hash so a reload returns to it).
import type { StateCreator } from 'zustand';
import type { LabState, Screen, UiSlice } from './types.ts';

export const SCREENS: { id: Screen; label: string; hint: string }[] = [
  { id: 'model', label: 'Model', hint: 'load a policy, generate, download weights' },
  { id: 'task', label: 'Task', hint: 'questions, search tool, rewards' },
  { id: 'stepper', label: 'Rollout', hint: 'step an episode turn by turn' },
  { id: 'train', label: 'Train', hint: 'run RL with live charts' },
  { id: 'inspector', label: 'Tokens', hint: 'every token, its source, mask and log-prob' },
  { id: 'gpu', label: 'GPU', hint: 'adapter and kernel self-check' },
];

function initialScreen(): Screen {
  const hash = typeof location === 'undefined' ? '' : location.hash.replace(/^#/, '');
  return SCREENS.find((s) => s.id === hash)?.id ?? 'model';
}

export const createUiSlice: StateCreator<LabState, [], [], UiSlice> = (set) => ({
  screen: initialScreen(),
  setScreen: (screen) => {
    if (typeof history !== 'undefined') history.replaceState(null, '', `#${screen}`);
    set({ screen });
  },
});
