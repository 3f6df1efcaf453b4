// Where a run keeps its files: a folder on disk in Node (src/rl/node-storage.ts), the origin private
// file system in the browser. Paths are relative, '/'-separated, inside the run.

export interface RunStorage {
  /** Human-readable location (a path, "OPFS:runs/x"), for messages. */
  readonly description: string;
  write(path: string, data: Uint8Array | string): Promise<void>;
  append(path: string, text: string): Promise<void>;
  /** null when the file does not exist. */
  read(path: string): Promise<Uint8Array | null>;
  /** Names directly inside a folder ([] when it does not exist). */
  list(dir: string): Promise<string[]>;
  remove(path: string): Promise<void>;
}

/** A run kept in memory (tests, or a browser without OPFS). */
export function memoryStorage(description = 'memory'): RunStorage & { files: Map<string, Uint8Array> } {
  const files = new Map<string, Uint8Array>();
  const enc = new TextEncoder();
  return {
    description,
    files,
    async write(path, data) {
      files.set(path, typeof data === 'string' ? enc.encode(data) : data.slice());
    },
    async append(path, text) {
      const old = files.get(path) ?? new Uint8Array(0);
      const add = enc.encode(text);
      const out = new Uint8Array(old.length + add.length);
      out.set(old);
      out.set(add, old.length);
      files.set(path, out);
    },
    async read(path) {
      return files.get(path)?.slice() ?? null;
    },
    async list(dir) {
      const prefix = dir === '' ? '' : `${dir.replace(/\/$/, '')}/`;
      const names = new Set<string>();
      for (const k of files.keys()) if (k.startsWith(prefix)) names.add(k.slice(prefix.length).split('/')[0]);
      return [...names].sort();
    },
    async remove(path) {
      const prefix = `${path}/`;
      for (const k of [...files.keys()]) if (k === path || k.startsWith(prefix)) files.delete(k);
    },
  };
}

export async function readText(storage: RunStorage, path: string): Promise<string | null> {
  const bytes = await storage.read(path);
  return bytes === null ? null : new TextDecoder().decode(bytes);
}
