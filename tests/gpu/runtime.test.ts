import { describe, expect, it } from 'vitest';
import {
  DeviceLostError,
  GpuLimitError,
  GpuTimeoutError,
  ShaderCompileError,
  WebGPUUnavailableError,
} from '../../src/gpu/errors.ts';
import { matmul } from '../../src/gpu/kernels/matmul.ts';
import { blockUntilSettled, Gpu, MAX_BLOCK_MS, poolBucketSize } from '../../src/gpu/runtime.ts';
import type { Tensor } from '../../src/gpu/tensor.ts';
import { getTestGpu } from '../helpers/gpu.ts';

describe('gpu runtime', () => {
  it('reports the adapter and requests its real limits', async () => {
    const gpu = await getTestGpu();
    expect(['gpu', 'lavapipe', 'swiftshader', 'software']).toContain(gpu.report.kind);
    expect(gpu.limits.maxStorageBufferBindingSize).toBeGreaterThanOrEqual(128 * 1024 * 1024);
    expect(gpu.limits.maxStorageBufferBindingSize).toBe(gpu.device.limits.maxStorageBufferBindingSize);
    expect(gpu.hasF16).toBe(gpu.report.features.includes('shader-f16'));
  });

  it('round-trips f32, u32, i32 and f16 bits through upload and readback', async () => {
    const gpu = await getTestGpu();
    const f = gpu.upload(new Float32Array([1.5, -2, Number.POSITIVE_INFINITY]), [3]);
    const u = gpu.upload(new Uint32Array([0, 1, 0xffffffff]), [3]);
    const i = gpu.upload(new Int32Array([-7, 0, 7]), [3]);
    const h = gpu.upload(new Uint16Array([0x3c00, 0xc000, 0x7c00]), [3], 'f16'); // odd count: padded
    const [rf, ru, ri, rh] = await gpu.readMany([f, u, i, h]);
    expect(Array.from(rf)).toEqual([1.5, -2, Number.POSITIVE_INFINITY]);
    expect(Array.from(ru)).toEqual([0, 1, 0xffffffff]);
    expect(Array.from(ri)).toEqual([-7, 0, 7]);
    expect(Array.from(rh)).toEqual([0x3c00, 0xc000, 0x7c00]);
  });

  it('pools buffers: a released tensor is reused, writes after release are ordered', async () => {
    const gpu = await getTestGpu();
    const before = gpu.stats;
    const a = gpu.upload(new Float32Array(100).fill(1), [100]);
    const snapshotA = gpu.readF32(a);
    a.release();
    const b = gpu.upload(new Float32Array(100).fill(2), [100]);
    expect(gpu.stats.buffersReused).toBeGreaterThan(before.buffersReused);
    expect(Array.from(await snapshotA).every((x) => x === 1)).toBe(true);
    expect(Array.from(await gpu.readF32(b)).every((x) => x === 2)).toBe(true);
    expect(() => a.buffer).toThrow(/used after release/);
  });

  it('trims the pool to the buffers used at once since the last trim, even under recorded work', async () => {
    const gpu = await getTestGpu();
    const A = 300_007; // floats; three distinct pool buckets
    const B = 170_003;
    const C = 340_000;
    const sizeA = poolBucketSize(A * 4);
    const sizeB = poolBucketSize(B * 4);
    const sizeC = poolBucketSize(C * 4);
    expect(new Set([sizeA, sizeB, sizeC]).size).toBe(3);
    const fill = (n: number, v: number) => gpu.upload(new Float32Array(n).fill(v), [n]);
    gpu.trimPoolToRecentUse();
    gpu.trimPoolToRecentUse(); // a window that used nothing: the pool is empty now
    expect(gpu.stats.pooledBytes).toBe(0);
    const live = gpu.stats.liveBytes;
    const threeA = [fill(A, 1), fill(A, 2), fill(A, 3)];
    const twoB = [fill(B, 1), fill(B, 2)];
    for (const t of [...threeA, ...twoB]) t.release();
    // Everything freed was in use at once in this window: kept.
    expect(gpu.trimPoolToRecentUse()).toBe(0);
    expect(gpu.stats.pooledBytes).toBe(3 * sizeA + 2 * sizeB);
    // A window that uses one A (and a C): two As and both Bs go.
    const x = fill(A, 4);
    const c = gpu.empty([C]);
    gpu.copy(x, c, A * 4); // recorded, not submitted
    x.release(); // x's buffer is the first the trim destroys (the pool hands out the last released)
    expect(gpu.trimPoolToRecentUse()).toBe(2 * sizeA + 2 * sizeB);
    expect(gpu.stats.pooledBytes).toBe(sizeA);
    expect(gpu.stats.liveBytes).toBe(live + sizeC);
    // The recorded copy ran before its source was destroyed.
    expect(Array.from((await gpu.readF32(c)).subarray(0, A)).every((v) => v === 4)).toBe(true);
    c.release();
    // A tensor alive across a trim stays usable; the next window frees what it no longer uses.
    const y = fill(A, 5);
    gpu.trimPoolToRecentUse();
    expect(Array.from(await gpu.readF32(y)).every((v) => v === 5)).toBe(true);
    y.release();
    gpu.trimPoolToRecentUse();
    gpu.trimPoolToRecentUse();
    expect(gpu.stats.pooledBytes).toBe(0);
    expect(gpu.stats.liveBytes).toBe(live);
  });

  it('zero-fills and copies in order with dispatches', async () => {
    const gpu = await getTestGpu();
    const src = gpu.upload(new Float32Array([1, 2, 3, 4]), [4]);
    const dst = gpu.upload(new Float32Array([9, 9, 9, 9]), [4]);
    gpu.copy(src, dst);
    gpu.fill0(src);
    const [s, d] = await gpu.readMany([src, dst]);
    expect(Array.from(s)).toEqual([0, 0, 0, 0]);
    expect(Array.from(d)).toEqual([1, 2, 3, 4]);
  });

  it('turns a WGSL compile error into a ShaderCompileError with the line', async () => {
    const gpu = await getTestGpu();
    gpu.kernel({
      name: 'broken.wgsl',
      code: '@compute @workgroup_size(1)\nfn main() {\n  let x: f32 = nope;\n}\n',
    });
    const err = await gpu.checkErrors().catch((e) => e);
    expect(err).toBeInstanceOf(ShaderCompileError);
    expect(String(err.message)).toMatch(/broken\.wgsl:3/);
  });

  it('rejects a binding at a misaligned offset and workgroup counts over the limit', async () => {
    const gpu = await getTestGpu();
    const t = gpu.zeros([1024]);
    const k = gpu.kernel({
      name: 'copy.wgsl',
      code: '@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n@compute @workgroup_size(1) fn main() { x[0] = 1.0; }',
    });
    expect(() => gpu.dispatch(k, [{ tensor: t, offset: 4, size: 16 }], [1])).toThrow(GpuLimitError);
    expect(() => gpu.dispatch(k, [t], [gpu.limits.maxComputeWorkgroupsPerDimension + 1])).toThrow(
      /workgroups/,
    );
    gpu.dispatch(k, [t], [1]);
    expect((await gpu.readF32(t))[0]).toBe(1);
  });

  it('surfaces a validation error (binding a too-small buffer) at the next sync, then recovers', async () => {
    const gpu = await getTestGpu();
    const k = gpu.kernel({
      name: 'needs-big.wgsl',
      code: '@group(0) @binding(0) var<storage, read_write> x: array<vec4<f32>, 64>;\n@compute @workgroup_size(1) fn main() { x[0] = vec4<f32>(1.0); }',
    });
    const small = gpu.zeros([4]);
    gpu.dispatch(k, [small], [1]);
    await expect(gpu.sync()).rejects.toThrow(/validation/i);
    const ok = gpu.upload(new Float32Array([5]), [1]);
    expect((await gpu.readF32(ok))[0]).toBe(5);
  });

  it('buckets pool sizes with bounded waste', () => {
    expect(poolBucketSize(1)).toBe(256);
    expect(poolBucketSize(1000)).toBe(1024);
    for (const n of [70_000, 1_000_003, 123_456_789]) {
      const b = poolBucketSize(n);
      expect(b).toBeGreaterThanOrEqual(n);
      expect(b / n).toBeLessThan(1.13);
    }
  });

  it('turns device loss into DeviceLostError for every later call instead of hanging', async () => {
    const gpu = await Gpu.create();
    const t = gpu.upload(new Float32Array([1, 2, 3]), [3]);
    gpu.device.destroy();
    await gpu.device.lost;
    await new Promise((r) => setTimeout(r, 0)); // let the runtime's lost handler run
    expect(() => gpu.empty([4])).toThrow(DeviceLostError);
    await expect(gpu.read(t)).rejects.toBeInstanceOf(DeviceLostError);
    await expect(gpu.sync()).rejects.toThrow(/device was lost/);
  });

  it.each(['await', 'block'] as const)(
    'gives up on GPU work that outlasts the timeout with GpuTimeoutError (waitMode %s)',
    async (waitMode) => {
      const gpu = await Gpu.create({ timeoutMs: 1, waitMode });
      // Eight products that outlast 1 ms: 512³ on a CPU adapter; an H100 needs 4096³ (~60 ms).
      const n = gpu.report.kind === 'gpu' ? 4096 : 512;
      const a = gpu.zeros([n, n]);
      let out = a;
      for (let i = 0; i < 8; i++) out = matmul(gpu, a, a);
      await expect(gpu.read(out)).rejects.toBeInstanceOf(GpuTimeoutError);
      gpu.destroy();
    },
  );

  it('blocks at most MAX_BLOCK_MS at a time, so timers and Ctrl-C run during a long predicted wait', async () => {
    // Work predicted at 2 s that is done in 600 ms (a promise settled by a timer stands for Dawn's
    // tick). A single block through 80 % of the prediction held the thread for 1.6 s, timers and
    // signal handlers with it; on lavapipe an update's one readback is minutes of work.
    const counters = { sleptWaits: 0, sleptMs: 0 };
    const ticks: number[] = [];
    const interval = setInterval(() => ticks.push(performance.now()), 20);
    const start = performance.now();
    const pending = new Promise<string>((resolve) => setTimeout(() => resolve('done'), 600));
    const [result, overslept] = await blockUntilSettled(pending, start, 2000, counters);
    const wall = performance.now() - start;
    clearInterval(interval);
    expect(result).toBe('done');
    expect(overslept).toBe(true); // settled inside the predicted part
    expect(wall).toBeLessThan(600 + 2 * MAX_BLOCK_MS); // ends a block after the work, not at 1.6 s
    let [previous, longestGap] = [start, 0];
    for (const t of ticks) [previous, longestGap] = [t, Math.max(longestGap, t - previous)];
    expect(ticks.length).toBeGreaterThan(3);
    expect(longestGap).toBeLessThan(2 * MAX_BLOCK_MS);
    expect(counters.sleptWaits).toBe(1);
    expect(counters.sleptMs).toBeGreaterThan(0.5 * wall); // the thread blocked, it did not spin
  });

  it('without a prediction, blocks in slices of at most 1 ms and is not oversleeping', async () => {
    const counters = { sleptWaits: 0, sleptMs: 0 };
    const start = performance.now();
    const pending = new Promise<number>((resolve) => setTimeout(() => resolve(7), 50));
    const [result, overslept] = await blockUntilSettled(pending, start, 0, counters);
    expect(result).toBe(7);
    expect(overslept).toBe(false);
    expect(performance.now() - start).toBeLessThan(50 + 40);
    await expect(blockUntilSettled(Promise.reject(new Error('lost')), start, 0, counters)).rejects.toThrow(
      'lost',
    );
  });

  it("waits in Node by blocking the JS thread between Dawn's ticks ('block', the default)", async () => {
    // Dawn's busy-wait spins the JS thread while work is pending; 'block' spends the wait in
    // Atomics.wait slices instead, so most of a long wait's wall time is the thread blocked.
    const gpu = await Gpu.create();
    expect(gpu.waitMode).toBe('block');
    const n = gpu.report.kind === 'gpu' ? 4096 : 512;
    const a = gpu.upload(new Float32Array(n * n).fill(1 / n), [n, n]);
    const work = () => {
      let out = a;
      for (let i = 0; i < 8; i++) out = matmul(gpu, out, a);
      return out;
    };
    await gpu.read(work()); // pipelines compiled
    const [waits, ms] = [gpu.stats.sleptWaits, gpu.stats.sleptMs];
    const t0 = performance.now();
    const [x, y] = await Promise.all([gpu.readF32(work()), gpu.readF32(work())]); // two waits at once
    const wall = performance.now() - t0;
    expect(x[0]).toBeCloseTo(1 / n, 6);
    expect(y[n * n - 1]).toBeCloseTo(1 / n, 6);
    expect(gpu.stats.sleptWaits - waits).toBeGreaterThanOrEqual(1);
    expect(gpu.stats.sleptMs - ms).toBeLessThanOrEqual(wall + 1); // wall time, never more
    if (gpu.report.kind !== 'gpu') expect(gpu.stats.sleptMs - ms).toBeGreaterThan(0.5 * wall);
    gpu.destroy();
  });

  it('rejects an unknown wait mode with a clear message', async () => {
    await expect(Gpu.create({ waitMode: 'poll' as never })).rejects.toThrow(
      /waitMode must be one of await, block, sleep/,
    );
  });

  it('lets a wait run to several times its predicted GPU time before calling it a hang', async () => {
    // A fixed limit failed a real run: an update of 256 episodes on lavapipe is minutes of GPU work
    // behind one readback. Once a rate is learned, the limit is WAIT_LIMIT_PREDICTIONS × the prediction.
    const gpu = await Gpu.create({ waitMode: 'await' });
    const n = gpu.report.kind === 'gpu' ? 4096 : 512;
    const a = gpu.zeros([n, n]);
    const record = (count: number) => {
      let out = a;
      for (let i = 0; i < count; i++) out = matmul(gpu, a, a);
      return out;
    };
    expect(gpu.waitLimitMs()).toBe(gpu.timeoutMs); // nothing learned, nothing pending
    for (let i = 0; i < 3; i++) await gpu.read(record(8)); // learns the rate of this size
    gpu.timeoutMs = 1;
    const out = record(8);
    gpu.flush();
    const limit = gpu.waitLimitMs();
    expect(limit).toBeGreaterThan(1);
    await expect(gpu.read(out)).resolves.toBeDefined(); // longer than 1 ms, shorter than the limit
    // Four times the work: the nearest size's rate predicts it, and the limit grows with it.
    const more = record(32);
    gpu.flush();
    expect(gpu.waitLimitMs()).toBeGreaterThan(2 * limit);
    await gpu.read(more);
    gpu.destroy();
  });

  it('sleeps before a wait only on a rate learned from waits of the same size', async () => {
    // Small waits (four 256³ matmuls) and large ones (eight 512³) may run at different rates on a CPU
    // adapter; a rate learned from one kind must not time the other (the first update after a rollout
    // overslept 3x before the rates were kept per size).
    const gpu = await Gpu.create({ waitMode: 'sleep' });
    // Waits are only learned from when they last > 20 ms and only slept before when > 2 ms are left:
    // a real GPU needs larger products for that (an H100 does eight 512³ matmuls in ~0.1 ms).
    const [sn, ln] = gpu.report.kind === 'gpu' ? [2048, 4096] : [256, 512];
    const small = gpu.zeros([sn, sn]);
    const large = gpu.zeros([ln, ln]);
    const wait = async (a: Tensor, n: number) => {
      let out = a;
      for (let i = 0; i < n; i++) out = matmul(gpu, a, a);
      await gpu.read(out);
    };
    for (let i = 0; i < 6; i++) await wait(small, 4);
    const slept = gpu.stats.sleptWaits;
    await wait(large, 8); // a size never seen: no sleep on a foreign rate
    expect(gpu.stats.sleptWaits).toBe(slept);
    for (let i = 0; i < 4; i++) await wait(large, 8);
    expect(gpu.stats.sleptWaits).toBeGreaterThan(slept); // its own rate, once learned
    gpu.destroy();
  });

  it('counts the sleep of waits awaited together once (sleptMs is wall time)', async () => {
    // The trainer reads the loss statistics and the gradient norm together after an update: both
    // waits sleep for the same work, side by side.
    const gpu = await Gpu.create({ waitMode: 'sleep' });
    const n = gpu.report.kind === 'gpu' ? 4096 : 512;
    const a = gpu.zeros([n, n]);
    const work = () => {
      let out = a;
      for (let i = 0; i < 8; i++) out = matmul(gpu, a, a);
      return out;
    };
    for (let i = 0; i < 5; i++) await gpu.read(work());
    const [waits, ms] = [gpu.stats.sleptWaits, gpu.stats.sleptMs];
    const x = work();
    const y = matmul(gpu, x, a);
    const t0 = performance.now();
    await Promise.all([gpu.read(x), gpu.read(y)]);
    const wall = performance.now() - t0;
    expect(gpu.stats.sleptWaits - waits).toBe(2);
    expect(gpu.stats.sleptMs - ms).toBeGreaterThan(0);
    expect(gpu.stats.sleptMs - ms).toBeLessThanOrEqual(wall + 1);
    gpu.destroy();
  });

  it('rejects an unknown adapter choice with a clear message', async () => {
    await expect(Gpu.create({ adapter: 'tpu' as never })).rejects.toBeInstanceOf(WebGPUUnavailableError);
    await expect(Gpu.create({ adapter: 'tpu' as never })).rejects.toThrow(/auto, gpu, lavapipe, swiftshader/);
  });
});
