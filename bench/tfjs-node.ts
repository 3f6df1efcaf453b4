// tfjs on the same Dawn adapter as our runtime, for side-by-side benchmarks in one process.
// tfjs-backend-webgpu reads navigator.gpu when it registers, so it must be set before the import.
import type { Gpu } from '../src/gpu/runtime.ts';

export type Tf = typeof import('@tensorflow/tfjs');

export async function tfjsOnSameAdapter(gpu: Gpu): Promise<Tf> {
  const g = globalThis as { navigator?: { gpu?: GPU } };
  if (!g.navigator)
    Object.defineProperty(globalThis, 'navigator', { value: { gpu: gpu.api }, configurable: true });
  else if (!g.navigator.gpu)
    Object.defineProperty(g.navigator, 'gpu', { value: gpu.api, configurable: true });
  const tf = await import('@tensorflow/tfjs');
  await import('@tensorflow/tfjs-backend-webgpu');
  if (!(await tf.setBackend('webgpu')))
    throw new Error('tfjs could not start its webgpu backend on this adapter');
  await tf.ready();
  return tf;
}
