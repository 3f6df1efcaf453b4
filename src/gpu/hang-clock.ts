// The clock that decides when a wait for GPU work counts as hung.
//
// On a CPU adapter (lavapipe, SwiftShader) the "GPU" is this process's own threads, so a run that
// shares the cores with a higher-priority process can be slowed 27-fold (measured at `nice 19` on a
// loaded lavapipe machine) without anything being wrong: a real RL run at `nice 19` beside another run failed with "GPU work (sync) did not finish
// within 300000 ms" after 20 healthy steps (its checkpoint was kept). Wall time alone cannot tell
// that from a hang, so in Node the clock leaves out the time in which this process was starved:
// sampled intervals in which it used less than STARVED_CPU_SHARE of one core while the machine's
// load average was at least its number of cores. An interval counts, as before, when the process ran
// (a shader that never ends keeps a core busy) or when the machine had room (a driver that never
// answers uses no CPU on an idle machine). What it cannot tell apart: a driver deadlock on a machine
// kept busy by others is only called hung once the machine has room again.
// Browsers give no such figures: there the clock is wall time (no probe).

/** What the clock samples: this process's CPU time (all threads) and the machine's load. */
export interface CpuProbe {
  /** CPU milliseconds this process has used so far, user + system, all threads. */
  cpuMs(): number;
  /** The 1-minute load average divided by the number of logical cores (0 where unknown). */
  loadPerCore(): number;
}

/** Below this share of one core while the machine is fully loaded, an interval counts as starved. */
export const STARVED_CPU_SHARE = 0.25;

/** How often (ms) a wait with a probe samples it; shorter for short limits. */
export const HANG_SAMPLE_MS = 5_000;

export class HangClock {
  private lastWall: number;
  private lastCpu: number;
  /** Wall milliseconds counted toward the limit so far. */
  counted = 0;
  /** Wall milliseconds left out as starved so far. */
  starved = 0;

  constructor(
    private readonly probe: CpuProbe | null,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.lastWall = now();
    this.lastCpu = probe?.cpuMs() ?? 0;
  }

  /** Closes the interval since the last sample: counts it, or leaves it out if the process was starved. */
  sample(): number {
    const wall = this.now();
    const interval = wall - this.lastWall;
    this.lastWall = wall;
    if (!this.probe) {
      this.counted += interval;
      return this.counted;
    }
    const cpu = this.probe.cpuMs();
    const used = cpu - this.lastCpu;
    this.lastCpu = cpu;
    const starved = used < STARVED_CPU_SHARE * interval && this.probe.loadPerCore() >= 1;
    if (starved) this.starved += interval;
    else this.counted += interval;
    return this.counted;
  }
}

/**
 * Rejects with `onHang()`'s error once `limitMs` of unstarved time has passed (see the header);
 * `stop()` cancels it. Without a probe this is one timer of `limitMs`, as before.
 */
export function hangTimer(
  limitMs: number,
  probe: CpuProbe | null,
  onHang: (clock: HangClock) => Error,
): { promise: Promise<never>; stop: () => void; clock: HangClock } {
  const clock = new HangClock(probe);
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  const promise = new Promise<never>((_, reject) => {
    const arm = (ms: number) => {
      timer = setTimeout(check, Math.max(1, ms));
    };
    const check = () => {
      if (stopped) return;
      const counted = clock.sample();
      if (counted >= limitMs) reject(onHang(clock));
      else arm(probe ? Math.min(limitMs - counted, HANG_SAMPLE_MS) : limitMs - counted);
    };
    arm(probe ? Math.min(limitMs, HANG_SAMPLE_MS) : limitMs);
  });
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
  };
  return { promise, stop, clock };
}

/** The probe for Node (call it only there): process.cpuUsage() and os.loadavg(). */
export async function nodeCpuProbe(): Promise<CpuProbe> {
  const osName = 'node:os'; // a variable, so bundlers leave this Node-only import alone
  const os = (await import(/* @vite-ignore */ osName)) as typeof import('node:os');
  const cores = os.availableParallelism();
  return {
    cpuMs: () => {
      const { user, system } = process.cpuUsage();
      return (user + system) / 1000;
    },
    loadPerCore: () => (cores > 0 ? os.loadavg()[0] / cores : 0),
  };
}
