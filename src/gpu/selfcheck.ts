// The matmul self-check the page runs (and the e2e test reads): every transpose variant on a few odd
// shapes, GPU vs the CPU reference. Pure engine code: no React, runs in Node too.
import { defaultMatmulVariant, matmul } from './kernels/matmul.ts';
import { matmulRef, maxRelativeError } from './reference/matmul.ts';
import type { Gpu } from './runtime.ts';

export interface SelfCheckCase {
  name: string;
  shape: [number, number, number];
  maxRelError: number;
  ok: boolean;
}

export interface SelfCheckResult {
  ok: boolean;
  tolerance: number;
  variant: string;
  cases: SelfCheckCase[];
  gflops: number;
  ms: number;
}

const SHAPES: Array<[number, number, number]> = [
  [1, 1, 1],
  [7, 13, 5],
  [65, 33, 129],
  [128, 96, 80],
];

function seeded(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 2 ** 31 - 1;
  }
  return out;
}

export async function runMatmulSelfCheck(gpu: Gpu, tolerance = 1e-4): Promise<SelfCheckResult> {
  const cases: SelfCheckCase[] = [];
  const t0 = performance.now();
  let flops = 0;
  for (const [transA, transB] of [
    [false, false],
    [false, true],
    [true, false],
  ] as const) {
    const pending = SHAPES.map(([M, N, K], i) => {
      const a = seeded(M * K, 17 + i);
      const b = seeded(K * N, 91 + i);
      const ta = gpu.upload(a, transA ? [K, M] : [M, K]);
      const tb = gpu.upload(b, transB ? [N, K] : [K, N]);
      const out = matmul(gpu, ta, tb, { transA, transB });
      ta.release();
      tb.release();
      flops += 2 * M * N * K;
      return {
        out,
        ref: matmulRef(a, b, { M, N, K, transA, transB }),
        shape: [M, N, K] as [number, number, number],
      };
    });
    const got = await gpu.readMany(pending.map((p) => p.out));
    pending.forEach((p, i) => {
      const err = maxRelativeError(got[i], p.ref);
      p.out.release();
      cases.push({
        name: `${transA ? 'Aᵀ' : 'A'}·${transB ? 'Bᵀ' : 'B'} ${p.shape.join('×')}`,
        shape: p.shape,
        maxRelError: err,
        ok: err <= tolerance,
      });
    });
  }
  const ms = performance.now() - t0;
  return {
    ok: cases.every((c) => c.ok),
    tolerance,
    variant: defaultMatmulVariant(gpu),
    cases,
    gflops: flops / ms / 1e6,
    ms,
  };
}
