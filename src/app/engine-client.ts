// The page's handle on the engine: one dedicated Web Worker (src/worker/engine.worker.ts) that owns
// the GPU, the model, rollouts and training, spoken to through the typed EngineApi. Every call is a
// promise; the worker's own reports (progress, tokens, metrics) arrive as events.
import type { EngineApi, EngineEvent } from '../worker/protocol.ts';
import { connectEngine, type EngineConnection } from '../worker/rpc.ts';

export { EngineCallError } from '../worker/rpc.ts';

let connection: EngineConnection | null = null;

function connection_(): EngineConnection {
  if (!connection) {
    const worker = new Worker(new URL('../worker/engine.worker.ts', import.meta.url), {
      type: 'module',
      name: 'agent-r1-engine',
    });
    connection = connectEngine(worker);
  }
  return connection;
}

/** The engine's methods (the worker starts on first use). */
export const engine: EngineApi = new Proxy({} as EngineApi, {
  get: (_t, method) =>
    typeof method === 'string' && method !== 'then'
      ? (connection_().api as unknown as Record<string, unknown>)[method]
      : undefined,
});

/** Subscribes to the engine's events; returns the unsubscribe function. */
export function onEngineEvent(listener: (event: EngineEvent) => void): () => void {
  return connection_().onEvent(listener);
}
