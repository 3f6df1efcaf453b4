// RunStorage on the origin private file system (OPFS): a run's files (config.json, metrics.jsonl,
// checkpoints/step-XXXXXX/…) under runs/<id>/ of navigator.storage.getDirectory(), so checkpoints
// survive a reload and a run resumes from them. Writes go through createWritable(), which commits a
// file only when it is closed: a tab killed mid-write leaves the previous file, not half of it.
import type { RunStorage } from '../rl/storage.ts';

export const RUNS_DIR = 'runs';

/** A bad path inside a run (names the path). */
export class RunPathError extends Error {
  override name = 'RunPathError';
}

function partsOf(path: string): string[] {
  const parts = path.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.some((p) => p === '..')) throw new RunPathError(`run storage: "${path}" leaves the run folder`);
  return parts;
}

function isNotFound(e: unknown): boolean {
  return e instanceof DOMException && (e.name === 'NotFoundError' || e.name === 'TypeMismatchError');
}

async function opfsRoot(): Promise<FileSystemDirectoryHandle> {
  const storage = (globalThis.navigator as Navigator | undefined)?.storage;
  if (!storage?.getDirectory)
    throw new Error('this browser has no origin private file system (navigator.storage.getDirectory)');
  return storage.getDirectory();
}

async function dirAt(
  root: FileSystemDirectoryHandle,
  parts: readonly string[],
  create: boolean,
): Promise<FileSystemDirectoryHandle | null> {
  let dir = root;
  for (const p of parts) {
    try {
      dir = await dir.getDirectoryHandle(p, { create });
    } catch (e) {
      if (!create && isNotFound(e)) return null;
      throw e;
    }
  }
  return dir;
}

/** The run folder runs/<runId>/ as a RunStorage. */
export async function opfsRunStorage(runId: string): Promise<RunStorage> {
  if (!/^[\w.-]+$/.test(runId))
    throw new RunPathError(`run id "${runId}" may hold only letters, digits, . _ -`);
  const root = (await dirAt(await opfsRoot(), [RUNS_DIR, runId], true))!;
  const readFile = async (path: string): Promise<Uint8Array | null> => {
    const parts = partsOf(path);
    const dir = await dirAt(root, parts.slice(0, -1), false);
    if (!dir) return null;
    try {
      const file = await (await dir.getFileHandle(parts.at(-1)!)).getFile();
      return new Uint8Array(await file.arrayBuffer());
    } catch (e) {
      if (isNotFound(e)) return null;
      throw e;
    }
  };
  const writeFile = async (path: string, data: Uint8Array | string): Promise<void> => {
    const parts = partsOf(path);
    if (parts.length === 0) throw new RunPathError(`run storage: "${path}" names no file`);
    const dir = (await dirAt(root, parts.slice(0, -1), true))!;
    const handle = await dir.getFileHandle(parts.at(-1)!, { create: true });
    const w = await handle.createWritable();
    await w.write(typeof data === 'string' ? data : (data as Uint8Array<ArrayBuffer>));
    await w.close();
  };
  return {
    description: `OPFS:${RUNS_DIR}/${runId}`,
    write: writeFile,
    async append(path, text) {
      // metrics.jsonl stays small (one line per step): rewrite it whole, which keeps writes atomic.
      const old = await readFile(path);
      const add = new TextEncoder().encode(text);
      const out = new Uint8Array((old?.length ?? 0) + add.length);
      if (old) out.set(old);
      out.set(add, old?.length ?? 0);
      await writeFile(path, out);
    },
    read: readFile,
    async list(d) {
      const dir = await dirAt(root, partsOf(d), false);
      if (!dir) return [];
      const names: string[] = [];
      for await (const name of (dir as unknown as { keys(): AsyncIterable<string> }).keys()) names.push(name);
      return names.sort();
    },
    async remove(path) {
      const parts = partsOf(path);
      const dir = await dirAt(root, parts.slice(0, -1), false);
      if (!dir || parts.length === 0) return;
      try {
        await dir.removeEntry(parts.at(-1)!, { recursive: true });
      } catch (e) {
        if (!isNotFound(e)) throw e;
      }
    },
  };
}

/** Ids of the runs kept in OPFS. */
export async function opfsRunIds(): Promise<string[]> {
  const dir = await dirAt(await opfsRoot(), [RUNS_DIR], false);
  if (!dir) return [];
  const ids: string[] = [];
  for await (const [name, handle] of (
    dir as unknown as { entries(): AsyncIterable<[string, FileSystemHandle]> }
  ).entries())
    if (handle.kind === 'directory') ids.push(name);
  return ids.sort();
}

export async function opfsRemoveRun(runId: string): Promise<void> {
  const dir = await dirAt(await opfsRoot(), [RUNS_DIR], false);
  if (!dir) return;
  try {
    await dir.removeEntry(runId, { recursive: true });
  } catch (e) {
    if (!isNotFound(e)) throw e;
  }
}
