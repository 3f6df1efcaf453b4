// One Gpu per test file, on the adapter chosen by src/gpu/device.ts (AGENT_R1_ADAPTER overrides).
// The adapter's name is printed once per file so CI logs show where kernels ran.
import { afterAll } from 'vitest';
import { Gpu } from '../../src/gpu/runtime.ts';

let shared: Promise<Gpu> | null = null;
let printed = false;

export function getTestGpu(): Promise<Gpu> {
  if (!shared) {
    shared = Gpu.create().then((gpu) => {
      if (!printed) {
        printed = true;
        const r = gpu.report;
        console.log(
          `[gpu] adapter: ${r.kind} — ${r.description || r.device} (${r.source}); f16=${gpu.hasF16}`,
        );
      }
      return gpu;
    });
    afterAll(async () => {
      const gpu = await shared;
      gpu?.destroy();
      shared = null;
    });
  }
  return shared;
}

/** Deterministic uniform(-1, 1) data (mulberry32), so failures reproduce. */
export function randomArray(n: number, seed: number, scale = 1): Float32Array {
  let s = seed >>> 0;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = ((((t ^ (t >>> 14)) >>> 0) / 4294967296) * 2 - 1) * scale;
  }
  return out;
}
