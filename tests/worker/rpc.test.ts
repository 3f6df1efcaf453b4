// The page ↔ worker protocol over a real MessageChannel (what postMessage does between a page and a
// dedicated worker): calls resolve by id even when answered out of order, engine errors arrive with
// their name and message, unknown methods are refused by name, events reach every listener, and
// structured-clone payloads (Blob, typed arrays) cross intact.
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import type { EngineApi, EngineEvent } from '../../src/worker/protocol.ts';
import {
  connectEngine,
  type Endpoint,
  EngineCallError,
  eventPoster,
  serveEngine,
} from '../../src/worker/rpc.ts';

/** node:worker_threads ports deliver `data` directly to 'message' listeners; wrap them as MessageEvents. */
function endpoint(port: MessagePort): Endpoint {
  return {
    postMessage: (m) => port.postMessage(m),
    addEventListener: (_type, listener) => port.on('message', (data) => listener({ data } as MessageEvent)),
  };
}

const ports: MessagePort[] = [];
afterEach(() => {
  for (const p of ports.splice(0)) p.close();
});

function pair(engine: Partial<EngineApi>) {
  const { port1, port2 } = new MessageChannel();
  ports.push(port1, port2);
  const worker = endpoint(port2);
  serveEngine(worker, engine as EngineApi);
  return { page: connectEngine(endpoint(port1)), emit: eventPoster(worker) };
}

describe('engine rpc', () => {
  it('resolves each call with its own result, also when answers come out of order', async () => {
    const { page } = pair({
      gpuLiveBytes: async () => {
        await new Promise((r) => setTimeout(r, 30));
        return 111;
      },
      clearModelCache: async () => 'fast',
    });
    const slow = page.api.gpuLiveBytes();
    const fast = page.api.clearModelCache();
    expect(await fast).toBe('fast');
    expect(await slow).toBe(111);
  });

  it('passes arguments and structured-clone values both ways', async () => {
    const { page } = pair({
      readRunFile: async (runId: string, path: string) => new TextEncoder().encode(`${runId}/${path}`),
    });
    const bytes = await page.api.readRunFile('run-1', 'metrics.jsonl');
    expect(bytes).toBeInstanceOf(Uint8Array);
    expect(new TextDecoder().decode(bytes!)).toBe('run-1/metrics.jsonl');
  });

  it("re-throws the engine's error with its name and message", async () => {
    const { page } = pair({
      trainOneStep: async () => {
        const e = new Error('set up a run first (Start)');
        e.name = 'RunError';
        throw e;
      },
    });
    const err = await page.api.trainOneStep().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineCallError);
    expect((err as EngineCallError).remoteName).toBe('RunError');
    expect((err as EngineCallError).method).toBe('trainOneStep');
    expect((err as Error).message).toBe('set up a run first (Start)');
  });

  it('refuses a method the engine does not have, naming it', async () => {
    const { page } = pair({});
    await expect(page.api.listRuns()).rejects.toThrow('the engine has no method "listRuns"');
  });

  it('delivers events to every listener until it unsubscribes', async () => {
    const { page, emit } = pair({});
    const a: EngineEvent[] = [];
    const b: EngineEvent[] = [];
    page.onEvent((e) => a.push(e));
    const offB = page.onEvent((e) => b.push(e));
    emit({ type: 'runs-changed' });
    await new Promise((r) => setTimeout(r, 20));
    offB();
    emit({ type: 'gpu-lost', message: 'lost' });
    await new Promise((r) => setTimeout(r, 20));
    expect(a.map((e) => e.type)).toEqual(['runs-changed', 'gpu-lost']);
    expect(b.map((e) => e.type)).toEqual(['runs-changed']);
  });

  it('is not mistaken for a promise (await on the api proxy returns it)', async () => {
    const { page } = pair({});
    const api = await Promise.resolve(page.api);
    expect(typeof api.init).toBe('function');
  });
});
