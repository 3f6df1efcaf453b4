// Where checkpoint files come from. One interface, four kinds of source:
//   urlSource(base)          any base URL laid out like the Hub's  <base>/<file>, e.g.
//                            https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/resolve/main/config.json
//   hubSource(repo)          urlSource for https://huggingface.co/<repo>/resolve/<revision>/
//   publicModelSource(name)  urlSource for the site's own /models/<name>/ (public/models/<name>/)
//   fileSource(files)        File objects the user picked or dropped (matched by file name)
//   memorySource(files)      bytes already in memory (what saveCheckpoint returns; tests)
// plus directorySource(dir) for Node, in node-fs.ts (kept out of here so this module runs in a browser).
//
// readBytes streams the body and reports progress per chunk; URL sources cache complete downloads
// with the Cache API when the page has one (`caches`), so a reload does not download 1 GB again.

import { ModelSourceError } from './errors.ts';
import { parseShardIndex, SHARD_INDEX_FILE } from './safetensors.ts';

export interface Progress {
  file: string;
  loaded: number; // bytes so far
  total: number | null; // Content-Length / file size, when known
}
export type ProgressCallback = (p: Progress) => void;

export interface ModelSource {
  /** For messages: the URL or folder the files come from. */
  readonly description: string;
  /** File names this source has (URL sources: see urlSource). */
  list(): Promise<string[]>;
  has(name: string): Promise<boolean>;
  readText(name: string, onProgress?: ProgressCallback): Promise<string>;
  readBytes(name: string, onProgress?: ProgressCallback): Promise<Uint8Array>;
}

/** The files a checkpoint folder may have; URL sources probe these since HTTP cannot list a folder. */
export const STANDARD_CHECKPOINT_FILES = [
  'config.json',
  'generation_config.json',
  'model.safetensors',
  'model.safetensors.index.json',
  'tokenizer.json',
  'tokenizer_config.json',
] as const;

/** Read a stream to the end, reporting progress after each chunk. */
async function readStream(
  stream: ReadableStream<Uint8Array>,
  file: string,
  total: number | null,
  onProgress: ProgressCallback | undefined,
): Promise<Uint8Array> {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let loaded = 0;
  onProgress?.({ file, loaded, total });
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    loaded += value.length;
    onProgress?.({ file, loaded, total });
  }
  return concat(chunks, loaded);
}

function concat(chunks: Uint8Array[], length: number): Uint8Array {
  if (chunks.length === 1) return chunks[0];
  const out = new Uint8Array(length);
  let offset = 0;
  for (const c of chunks) {
    out.set(c, offset);
    offset += c.length;
  }
  return out;
}

const utf8 = new TextDecoder('utf-8');

// ---------------------------------------------------------------------------------------------
// URL sources

/** The subset of the Cache API we use (a browser `Cache` satisfies it). */
export interface ResponseCache {
  match(url: string): Promise<Response | undefined>;
  put(url: string, response: Response): Promise<void>;
}

export interface UrlSourceOptions {
  /** Defaults to globalThis.fetch. */
  fetch?: typeof fetch;
  /** Extra request headers, e.g. { Authorization: 'Bearer hf_...' } for gated repos. */
  headers?: Record<string, string>;
  /**
   * 'auto' (default): the Cache API's 'agent-r1-models' cache when `caches` exists, else none.
   * null: never cache. Or any ResponseCache.
   */
  cache?: ResponseCache | null | 'auto';
}

export const MODEL_CACHE_NAME = 'agent-r1-models';

/**
 * Files under a base URL. `list()` cannot enumerate an HTTP folder, so it reports which of
 * STANDARD_CHECKPOINT_FILES exist (HEAD requests) plus the shards named in the index, if any.
 */
export function urlSource(baseUrl: string, options: UrlSourceOptions = {}): ModelSource {
  const base = baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`;
  const doFetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const headers = options.headers ?? {};
  let cachePromise: Promise<ResponseCache | null> | null = null;
  const getCache = (): Promise<ResponseCache | null> => {
    if (cachePromise === null) {
      const c = options.cache ?? 'auto';
      if (c !== 'auto') cachePromise = Promise.resolve(c);
      else if (typeof caches !== 'undefined') cachePromise = caches.open(MODEL_CACHE_NAME).catch(() => null);
      else cachePromise = Promise.resolve(null);
    }
    return cachePromise;
  };
  const urlOf = (name: string) => base + name.split('/').map(encodeURIComponent).join('/');

  async function request(name: string, method: 'GET' | 'HEAD'): Promise<Response> {
    const url = urlOf(name);
    let res: Response;
    try {
      res = await doFetch(url, { method, headers });
    } catch (e) {
      throw new ModelSourceError('network', name, `could not fetch ${url}: ${(e as Error).message}`, {
        cause: e,
      });
    }
    if (res.status === 404) {
      throw new ModelSourceError('not-found', name, `not found (HTTP 404) at ${url}`, { status: 404 });
    }
    if (res.status === 401 || res.status === 403) {
      throw new ModelSourceError(
        'unauthorized',
        name,
        `HTTP ${res.status} at ${url}: the repository is gated or private and needs an access token ` +
          '(the Hub also answers 401 for a repository that does not exist)',
        { status: res.status },
      );
    }
    if (!res.ok) {
      throw new ModelSourceError('http', name, `HTTP ${res.status} ${res.statusText} at ${url}`, {
        status: res.status,
      });
    }
    // A dev server (Vite) answers a missing file under public/ with index.html and status 200.
    const type = res.headers.get('content-type') ?? '';
    if (type.startsWith('text/html') && !name.endsWith('.html')) {
      throw new ModelSourceError(
        'not-found',
        name,
        `not found at ${url} (the server answered with an HTML page; is the file in public/models/?)`,
        { status: res.status },
      );
    }
    return res;
  }

  async function readBytes(name: string, onProgress?: ProgressCallback): Promise<Uint8Array> {
    const url = urlOf(name);
    const cache = await getCache();
    const cached = cache === null ? undefined : await cache.match(url).catch(() => undefined);
    if (cached?.body) {
      const total = Number(cached.headers.get('content-length')) || null;
      return readStream(cached.body, name, total, onProgress);
    }

    const res = await request(name, 'GET');
    // Content-Length counts the bytes on the wire; with Content-Encoding (gzip) the body we read
    // is decoded and longer. Cross-origin, the browser hides Content-Encoding, so a body longer
    // than Content-Length is accepted; only a shorter one means the download was cut.
    const encoding = res.headers.get('content-encoding');
    const declared = Number(res.headers.get('content-length') ?? Number.NaN);
    const total =
      Number.isSafeInteger(declared) && (encoding === null || encoding === 'identity') ? declared : null;
    let bytes: Uint8Array;
    let loaded = 0;
    try {
      if (res.body === null) {
        bytes = new Uint8Array(await res.arrayBuffer());
        onProgress?.({ file: name, loaded: bytes.length, total });
      } else {
        bytes = await readStream(res.body, name, total, (p) => {
          loaded = p.loaded;
          onProgress?.(p);
        });
      }
    } catch (e) {
      if (total !== null) {
        throw new ModelSourceError(
          'truncated',
          name,
          `download from ${url} broke off after ${loaded} of ${total} bytes: ${(e as Error).message}`,
          { cause: e },
        );
      }
      throw new ModelSourceError('network', name, `download from ${url} failed: ${(e as Error).message}`, {
        cause: e,
      });
    }
    if (total !== null && bytes.length < total) {
      throw new ModelSourceError(
        'truncated',
        name,
        `download from ${url} is ${bytes.length} bytes but Content-Length said ${total}`,
      );
    }
    if (cache !== null) {
      // Cache only complete downloads; a failed put (quota) just means no cache next time.
      const stored = new Response(bytes.slice(), {
        headers: {
          'content-type': res.headers.get('content-type') ?? 'application/octet-stream',
          'content-length': String(bytes.length),
        },
      });
      await cache.put(url, stored).catch(() => undefined);
    }
    return bytes;
  }

  async function has(name: string): Promise<boolean> {
    const cache = await getCache();
    if (cache !== null && (await cache.match(urlOf(name)).catch(() => undefined)) !== undefined) return true;
    try {
      const res = await request(name, 'HEAD');
      await res.body?.cancel();
      return true;
    } catch (e) {
      if (e instanceof ModelSourceError && e.kind === 'not-found') return false;
      throw e;
    }
  }

  const readText = async (name: string, onProgress?: ProgressCallback): Promise<string> =>
    utf8.decode(await readBytes(name, onProgress));

  async function list(): Promise<string[]> {
    const found: string[] = [];
    for (const name of STANDARD_CHECKPOINT_FILES) if (await has(name)) found.push(name);
    if (found.includes(SHARD_INDEX_FILE)) {
      const index = parseShardIndex(await readText(SHARD_INDEX_FILE));
      found.push(...[...new Set(index.weightMap.values())].sort());
    }
    return found;
  }

  return { description: base, list, has, readText, readBytes };
}

export interface HubSourceOptions extends UrlSourceOptions {
  revision?: string; // branch, tag or commit; default 'main'
  endpoint?: string; // default https://huggingface.co
}

/** A Hub repository, e.g. hubSource('Qwen/Qwen2.5-0.5B-Instruct'). */
export function hubSource(repo: string, options: HubSourceOptions = {}): ModelSource {
  const endpoint = (options.endpoint ?? 'https://huggingface.co').replace(/\/+$/, '');
  const revision = encodeURIComponent(options.revision ?? 'main');
  return urlSource(`${endpoint}/${repo}/resolve/${revision}/`, options);
}

/**
 * A checkpoint shipped with the site under public/models/<name>/ (served at <base>models/<name>/).
 * `siteBase` is the app's base URL (Vite's import.meta.env.BASE_URL), '/' by default.
 */
export function publicModelSource(name: string, siteBase = '/', options: UrlSourceOptions = {}): ModelSource {
  const base = siteBase.endsWith('/') ? siteBase : `${siteBase}/`;
  return urlSource(`${base}models/${encodeURIComponent(name)}/`, options);
}

// ---------------------------------------------------------------------------------------------
// Picked / dropped files

/** What we need of a browser File (a Blob with a name). */
export interface NamedBlob {
  readonly name: string;
  readonly size: number;
  stream(): ReadableStream<Uint8Array>;
}

/**
 * Files the user picked (an <input type=file multiple> or a dropped folder's files). Matched by file
 * name only, so picking a folder works whatever it is called; two files with the same name are an
 * error since we could not tell which one is meant.
 */
export function fileSource(files: Iterable<NamedBlob>): ModelSource {
  const byName = new Map<string, NamedBlob>();
  for (const f of files) {
    if (byName.has(f.name)) {
      throw new ModelSourceError(
        'io',
        f.name,
        `two of the chosen files are named '${f.name}'; pick one folder only`,
      );
    }
    byName.set(f.name, f);
  }
  const get = (name: string): NamedBlob => {
    const f = byName.get(name);
    if (f === undefined) {
      throw new ModelSourceError(
        'not-found',
        name,
        `not among the chosen files (${[...byName.keys()].join(', ')})`,
      );
    }
    return f;
  };
  const readBytes = async (name: string, onProgress?: ProgressCallback): Promise<Uint8Array> => {
    const f = get(name);
    try {
      return await readStream(f.stream(), name, f.size, onProgress);
    } catch (e) {
      throw new ModelSourceError('io', name, `could not read the chosen file: ${(e as Error).message}`, {
        cause: e,
      });
    }
  };
  return {
    description: 'chosen files',
    list: async () => [...byName.keys()],
    has: async (name) => byName.has(name),
    readBytes,
    readText: async (name, onProgress) => utf8.decode(await readBytes(name, onProgress)),
  };
}

// ---------------------------------------------------------------------------------------------
// In memory

export function memorySource(
  files: ReadonlyMap<string, Uint8Array | string> | Readonly<Record<string, Uint8Array | string>>,
  description = 'memory',
): ModelSource {
  const map = files instanceof Map ? files : new Map(Object.entries(files));
  const encoder = new TextEncoder();
  const get = (name: string): Uint8Array => {
    const v = map.get(name);
    if (v === undefined) throw new ModelSourceError('not-found', name, `not in ${description}`);
    return typeof v === 'string' ? encoder.encode(v) : v;
  };
  return {
    description,
    list: async () => [...map.keys()],
    has: async (name) => map.has(name),
    readBytes: async (name, onProgress) => {
      const bytes = get(name);
      onProgress?.({ file: name, loaded: bytes.length, total: bytes.length });
      return bytes;
    },
    readText: async (name) => {
      const v = map.get(name);
      return typeof v === 'string' ? v : utf8.decode(get(name));
    },
  };
}
