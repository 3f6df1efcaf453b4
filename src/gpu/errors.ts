// Typed GPU errors. Every failure the runtime can see becomes one of these, with a message a person
// can act on; callers (UI, tests, scripts) branch on the class, never on message text.

export type GpuErrorKind =
  | 'unavailable' // no WebGPU at all, or no adapter
  | 'shader-compile' // WGSL did not compile
  | 'validation' // a WebGPU validation error (bad binding, bad size, ...)
  | 'out-of-memory'
  | 'device-lost'
  | 'timeout' // GPU work did not finish within the allowed time
  | 'limit' // the request exceeds an adapter limit (buffer or binding size, ...)
  | 'internal';

export class GpuError extends Error {
  readonly kind: GpuErrorKind;
  constructor(kind: GpuErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.kind = kind;
    this.name = 'GpuError';
  }
}

/** No `navigator.gpu`, no adapter, or the device request failed. */
export class WebGPUUnavailableError extends GpuError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('unavailable', message, options);
    this.name = 'WebGPUUnavailableError';
  }
}

export interface ShaderMessage {
  type: 'error' | 'warning' | 'info';
  line: number;
  column: number;
  text: string;
}

/** WGSL compile error, with the shader's name and each message's line and the source line. */
export class ShaderCompileError extends GpuError {
  readonly shader: string;
  readonly messages: ShaderMessage[];
  constructor(shader: string, messages: ShaderMessage[], source: string) {
    const lines = source.split('\n');
    const detail = messages
      .filter((m) => m.type === 'error')
      .map((m) => `  ${shader}:${m.line}:${m.column}: ${m.text}\n    | ${(lines[m.line - 1] ?? '').trim()}`)
      .join('\n');
    super('shader-compile', `WGSL shader "${shader}" failed to compile:\n${detail}`);
    this.shader = shader;
    this.messages = messages;
    this.name = 'ShaderCompileError';
  }
}

export class GpuValidationError extends GpuError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('validation', `WebGPU validation error: ${message}`, options);
    this.name = 'GpuValidationError';
  }
}

export class GpuOutOfMemoryError extends GpuError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('out-of-memory', `GPU out of memory: ${message}`, options);
    this.name = 'GpuOutOfMemoryError';
  }
}

export class DeviceLostError extends GpuError {
  readonly reason: string;
  constructor(reason: string, message: string) {
    super(
      'device-lost',
      `The GPU device was lost (${reason}): ${message || 'no message'}. Reload the page or restart the process.`,
    );
    this.reason = reason;
    this.name = 'DeviceLostError';
  }
}

export class GpuTimeoutError extends GpuError {
  /** `starvedMs`: wall time not counted because this process was starved of CPU (hang-clock.ts). */
  constructor(what: string, ms: number, starvedMs = 0) {
    const starved =
      starvedMs > 0 ? ` (plus ${Math.round(starvedMs)} ms not counted: the process was starved of CPU)` : '';
    super('timeout', `${what} did not finish within ${Math.round(ms)} ms${starved}`);
    this.name = 'GpuTimeoutError';
  }
}

/** A request larger than what the adapter allows, with both numbers in the message. */
export class GpuLimitError extends GpuError {
  constructor(message: string) {
    super('limit', message);
    this.name = 'GpuLimitError';
  }
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}
