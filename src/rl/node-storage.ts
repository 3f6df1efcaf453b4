// A run folder on disk (Node only: scripts and tests import this, the engine never does).
import { appendFile, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import type { RunStorage } from './storage.ts';

export function directoryStorage(dir: string): RunStorage {
  const root = resolve(dir);
  const pathOf = (p: string) => {
    if (p.split('/').includes('..')) throw new Error(`run storage: ${p} leaves the run folder`);
    return join(root, p);
  };
  return {
    description: root,
    async write(path, data) {
      const full = pathOf(path);
      await mkdir(dirname(full), { recursive: true });
      await writeFile(full, data);
    },
    async append(path, text) {
      const full = pathOf(path);
      await mkdir(dirname(full), { recursive: true });
      await appendFile(full, text);
    },
    async read(path) {
      try {
        return new Uint8Array(await readFile(pathOf(path)));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw e;
      }
    },
    async list(d) {
      try {
        return (await readdir(pathOf(d))).sort();
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
        throw e;
      }
    },
    async remove(path) {
      await rm(pathOf(path), { recursive: true, force: true });
    },
  };
}
