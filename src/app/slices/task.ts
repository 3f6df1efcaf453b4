// Task slice: the TrainConfig the Task and Train screens edit (task world, rollout budgets, rewards,
// algorithm and hyper-parameters), and question files dropped on the Task screen.
import type { StateCreator } from 'zustand';
import microConfig from '../../../configs/micro.json';
import { resolveConfig } from '../../rl/config.ts';
import { engine } from '../engine-client.ts';
import { describeError } from './gpu.ts';
import type { LabState, TaskSlice } from './types.ts';

/**
 * The lab's starting config: configs/micro.json (a step takes seconds on a laptop GPU) on the bundled
 * qwen-tiny; every other key has DEFAULT_CONFIG's value.
 */
export const LAB_DEFAULT_CONFIG = resolveConfig({ ...microConfig, name: 'lab' });

export const createTaskSlice: StateCreator<LabState, [], [], TaskSlice> = (set) => ({
  trainConfig: LAB_DEFAULT_CONFIG,
  searchTopK: 3,
  droppedTasks: null,
  taskError: null,
  setTrainConfig: (config) => set({ trainConfig: config }),
  setSearchTopK: (k) => set({ searchTopK: k }),
  dropTaskFile: async (file) => {
    set({ taskError: null });
    try {
      set({ droppedTasks: await engine.loadTaskFile(file) });
    } catch (e) {
      set({ taskError: describeError(e) });
    }
  },
});
