import { describe, expect, it } from 'vitest';
import { GpuTimeoutError } from '../../src/gpu/errors.ts';
import {
  type CpuProbe,
  HangClock,
  hangTimer,
  nodeCpuProbe,
  STARVED_CPU_SHARE,
} from '../../src/gpu/hang-clock.ts';
import { matmul } from '../../src/gpu/kernels/matmul.ts';
import { Gpu } from '../../src/gpu/runtime.ts';

/** A probe and a wall clock driven by the test: `advance(wall, cpu, load)` is one interval. */
function scripted() {
  let [wall, cpu, load] = [0, 0, 0];
  const probe: CpuProbe = { cpuMs: () => cpu, loadPerCore: () => load };
  const clock = new HangClock(probe, () => wall);
  const advance = (wallMs: number, cpuMs: number, loadPerCore: number) => {
    wall += wallMs;
    cpu += cpuMs;
    load = loadPerCore;
    return clock.sample();
  };
  return { clock, advance };
}

describe('hang clock', () => {
  it('leaves out intervals in which the process was starved on a fully loaded machine', () => {
    const { clock, advance } = scripted();
    expect(advance(1000, 800, 1.5)).toBe(1000); // ran (0.8 core): counts however busy the machine
    expect(advance(1000, 10, 2)).toBe(1000); // 1 % of a core, load 2 per core: starved, left out
    expect(advance(1000, 0.99 * STARVED_CPU_SHARE * 1000, 1)).toBe(1000); // just under the share
    expect(advance(1000, STARVED_CPU_SHARE * 1000, 1)).toBe(2000); // at the share: counts
    expect(clock.starved).toBe(2000);
  });

  it('counts an idle process on a machine with room: a driver that never answers uses no CPU', () => {
    const { clock, advance } = scripted();
    expect(advance(1000, 0, 0.2)).toBe(1000);
    expect(advance(1000, 0, 0.99)).toBe(2000);
    expect(clock.starved).toBe(0);
  });

  it('is wall time without a probe (browsers)', () => {
    let wall = 5;
    const clock = new HangClock(null, () => wall);
    wall += 300;
    expect(clock.sample()).toBe(300);
    expect(clock.starved).toBe(0);
  });

  it('fires after the limit of counted time, and not while the process is starved', async () => {
    const starvedProbe: CpuProbe = { cpuMs: () => 0, loadPerCore: () => 4 };
    const idleProbe: CpuProbe = { cpuMs: () => 0, loadPerCore: () => 0 };
    const fired = (probe: CpuProbe | null) => {
      const t = hangTimer(20, probe, (c) => new Error(`hung after ${c.counted} ms`));
      t.promise.catch(() => {});
      return t;
    };
    const starved = fired(starvedProbe);
    const idle = fired(idleProbe);
    const wallOnly = fired(null);
    await expect(idle.promise).rejects.toThrow(/hung after/);
    await expect(wallOnly.promise).rejects.toThrow(/hung after/);
    await new Promise((r) => setTimeout(r, 100));
    expect(starved.clock.counted).toBe(0);
    expect(starved.clock.starved).toBeGreaterThanOrEqual(20);
    starved.stop(); // a stopped timer neither fires nor samples again
    const sampledUntil = starved.clock.starved;
    await new Promise((r) => setTimeout(r, 50));
    expect(starved.clock.starved).toBe(sampledUntil);
  });

  it("in Node reads this process's CPU time and the load average", async () => {
    const probe = await nodeCpuProbe();
    const before = probe.cpuMs();
    let x = 0;
    for (let i = 0; i < 2e7; i++) x += i % 7;
    expect(x).toBeGreaterThan(0);
    expect(probe.cpuMs()).toBeGreaterThan(before);
    expect(probe.loadPerCore()).toBeGreaterThanOrEqual(0);
  });

  it('lets a starved wait outlast timeoutMs, and names the starved time when a wait does time out', async () => {
    // The same eight 512³ products that outlast a 1-ms limit in runtime.test.ts (4096³ on a real GPU).
    const starvedProbe: CpuProbe = { cpuMs: () => 0, loadPerCore: () => 4 };
    const gpu = await Gpu.create({ timeoutMs: 1, waitMode: 'block', cpuProbe: starvedProbe });
    const n = gpu.report.kind === 'gpu' ? 4096 : 512;
    const a = gpu.zeros([n, n]);
    let out = a;
    for (let i = 0; i < 8; i++) out = matmul(gpu, a, a);
    await expect(gpu.read(out)).resolves.toBeDefined();
    // Starved for a while, then a machine with room: the wait times out, and says what it left out.
    let calls = 0;
    const thenIdle: CpuProbe = { cpuMs: () => 0, loadPerCore: () => (calls++ < 3 ? 4 : 0) };
    const gpu2 = await Gpu.create({ timeoutMs: 1, waitMode: 'block', cpuProbe: thenIdle });
    const b = gpu2.zeros([n, n]);
    out = b;
    for (let i = 0; i < 8; i++) out = matmul(gpu2, b, b);
    const error = await gpu2.read(out).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GpuTimeoutError);
    expect((error as Error).message).toMatch(
      /within 1 ms \(plus \d+ ms not counted: the process was starved of CPU\)/,
    );
    gpu.destroy();
    gpu2.destroy();
  });
});
