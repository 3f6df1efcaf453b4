// Typed request/response over postMessage, both ends. The engine side (serveEngine) answers each
// { kind: 'call' } with one { kind: 'result' } and may post { kind: 'event' } at any time; the page
// side (connectEngine) turns EngineApi method calls into messages and resolves them by id. Works over
// any MessagePort-like endpoint: a dedicated Worker and its global scope in the browser, a
// MessageChannel in Node tests.
import type {
  CallMessage,
  EngineApi,
  EngineEvent,
  EngineMethod,
  ResultMessage,
  WorkerMessage,
} from './protocol.ts';

/** The part of Worker / DedicatedWorkerGlobalScope / MessagePort both ends use. */
export interface Endpoint {
  postMessage(message: unknown): void;
  addEventListener(type: 'message', listener: (e: MessageEvent) => void): void;
}

/** A failure inside the engine, re-thrown on the page with the engine's error name and message. */
export class EngineCallError extends Error {
  constructor(
    readonly method: string,
    readonly remoteName: string,
    message: string,
  ) {
    super(message);
    this.name = 'EngineCallError';
  }
}

/** Answers calls from `endpoint` with `engine`'s methods. */
export function serveEngine(endpoint: Endpoint, engine: EngineApi): void {
  endpoint.addEventListener('message', (e: MessageEvent) => {
    const msg = e.data as CallMessage;
    if (msg?.kind !== 'call') return;
    const method = engine[msg.method] as ((...args: unknown[]) => Promise<unknown>) | undefined;
    const reply = (r: ResultMessage) => endpoint.postMessage(r);
    if (typeof method !== 'function') {
      reply({
        kind: 'result',
        id: msg.id,
        ok: false,
        error: { name: 'TypeError', message: `the engine has no method "${String(msg.method)}"` },
      });
      return;
    }
    method.apply(engine, msg.args).then(
      (value) => reply({ kind: 'result', id: msg.id, ok: true, value }),
      (err: unknown) =>
        reply({
          kind: 'result',
          id: msg.id,
          ok: false,
          error: {
            name: err instanceof Error ? err.name : 'Error',
            message: err instanceof Error ? err.message : String(err),
          },
        }),
    );
  });
}

/** Posts an engine event to the page. */
export function eventPoster(endpoint: Endpoint): (event: EngineEvent) => void {
  return (event) => endpoint.postMessage({ kind: 'event', event } satisfies WorkerMessage);
}

export interface EngineConnection {
  /** The engine's methods, as promises of their results. */
  api: EngineApi;
  /** Calls `listener` for every event; returns the unsubscribe function. */
  onEvent(listener: (event: EngineEvent) => void): () => void;
}

/** The page's end: EngineApi over `endpoint`. */
export function connectEngine(endpoint: Endpoint): EngineConnection {
  let nextId = 1;
  const pending = new Map<
    number,
    { method: string; resolve: (v: unknown) => void; reject: (e: Error) => void }
  >();
  const listeners = new Set<(event: EngineEvent) => void>();
  endpoint.addEventListener('message', (e: MessageEvent) => {
    const msg = e.data as WorkerMessage;
    if (msg?.kind === 'event') {
      for (const l of listeners) l(msg.event);
    } else if (msg?.kind === 'result') {
      const p = pending.get(msg.id);
      if (!p) return;
      pending.delete(msg.id);
      if (msg.ok) p.resolve(msg.value);
      else p.reject(new EngineCallError(p.method, msg.error.name, msg.error.message));
    }
  });
  const call = (method: EngineMethod, args: unknown[]) =>
    new Promise<unknown>((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { method, resolve, reject });
      endpoint.postMessage({ kind: 'call', id, method, args } satisfies CallMessage);
    });
  const api = new Proxy({} as EngineApi, {
    // 'then' must stay undefined, or `await api` would treat the proxy as a promise.
    get: (_target, method) =>
      typeof method === 'string' && method !== 'then'
        ? (...args: unknown[]) => call(method as EngineMethod, args)
        : undefined,
  });
  return {
    api,
    onEvent(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}
