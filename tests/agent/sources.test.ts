// Model sources for real: a local HTTP server (127.0.0.1, random port) serving project-made
// checkpoints in the Hub's <repo>/resolve/main/<file> layout, plus File objects and a directory.

import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { ModelSourceError, SafetensorsError } from '../../src/agent/model/errors.ts';
import { directorySource, writeCheckpointFiles } from '../../src/agent/model/node-fs.ts';
import { serializeSafetensors, serializeShardIndex } from '../../src/agent/model/safetensors.ts';
import {
  fileSource,
  hubSource,
  type Progress,
  publicModelSource,
  type ResponseCache,
  urlSource,
} from '../../src/agent/model/sources.ts';
import {
  makeTinyCheckpoint,
  tinyCheckpointTensors,
  tinySpec,
} from '../../src/agent/model/tiny-checkpoints.ts';
import { sameBytes } from './helpers.ts';

const SPEC = tinySpec('tiny-qwen2-v512');
const FILES = makeTinyCheckpoint(SPEC);
const EXPECTED = tinyCheckpointTensors(SPEC);

/** The same checkpoint split into two shards with an index, as save_pretrained shards it. */
function shardedFiles(): Map<string, Uint8Array> {
  const names = [...EXPECTED.keys()];
  const shards = [names.slice(0, 10), names.slice(10)];
  const files = new Map<string, Uint8Array>([['config.json', FILES.get('config.json')!]]);
  const weightMap = new Map<string, string>();
  let total = 0;
  shards.forEach((group, i) => {
    const shardName = `model-0000${i + 1}-of-00002.safetensors`;
    const tensors = new Map(
      group.map((n) => {
        const t = EXPECTED.get(n)!;
        total += t.data.byteLength;
        weightMap.set(n, shardName);
        return [n, { dtype: 'F32' as const, shape: t.shape, data: new Uint8Array(t.data.buffer.slice(0)) }];
      }),
    );
    files.set(shardName, serializeSafetensors(tensors));
  });
  files.set('model.safetensors.index.json', new TextEncoder().encode(serializeShardIndex(weightMap, total)));
  return files;
}

// ---------------------------------------------------------------------------------------------
// The server. Routes:
//   /Org/Tiny/resolve/main/<file>       the tiny checkpoint, sent in 64 KiB writes; 404 if absent
//   /Org/Sharded/resolve/main/<file>    the sharded variant
//   /Org/Gated/resolve/main/<file>      401, as the Hub answers for gated repos without a token
//   /Org/Flaky/resolve/main/<file>      500
//   /Org/Cut/resolve/main/<file>        full Content-Length, half the body, then the socket closes
//   /Org/Chunked/resolve/main/<file>    no Content-Length (chunked transfer encoding)
//   /Org/Short/resolve/main/<file>      complete responses, but model.safetensors is a truncated file
//   /site/models/tiny/<file>            a dev server: missing files get index.html with status 200

let server: Server;
let origin: string;
const requests: string[] = [];

function send(
  res: import('node:http').ServerResponse,
  body: Uint8Array,
  headers: Record<string, string | number> = {},
) {
  res.writeHead(200, {
    'content-type': 'application/octet-stream',
    'content-length': body.length,
    ...headers,
  });
  for (let i = 0; i < body.length; i += 65536) res.write(body.subarray(i, i + 65536));
  res.end();
}

beforeAll(async () => {
  const sharded = shardedFiles();
  server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    const path = decodeURIComponent(new URL(req.url!, 'http://x').pathname);
    const hub = /^\/Org\/(\w+)\/resolve\/main\/(.+)$/.exec(path);
    const site = /^\/site\/models\/tiny\/(.+)$/.exec(path);
    if (hub) {
      const [, repo, file] = hub;
      const files = repo === 'Sharded' ? sharded : FILES;
      const full = files.get(file);
      const body = repo === 'Short' && file === 'model.safetensors' ? full?.subarray(0, 5000) : full;
      if (repo === 'Gated') return res.writeHead(401).end('Access to model Org/Gated is restricted.');
      if (repo === 'Flaky') return res.writeHead(500).end('oops');
      if (body === undefined) return res.writeHead(404).end('Entry not found');
      if (repo === 'Cut' && req.method === 'GET') {
        res.writeHead(200, { 'content-length': body.length });
        res.write(body.subarray(0, body.length >> 1));
        setTimeout(() => res.socket?.destroy(), 20);
        return;
      }
      if (repo === 'Chunked') {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.write(body.subarray(0, 100));
        res.end(body.subarray(100));
        return;
      }
      return send(res, body);
    }
    if (site) {
      const body = FILES.get(site[1]);
      if (body === undefined)
        return send(res, new TextEncoder().encode('<!doctype html><div id=root>'), {
          'content-type': 'text/html',
        });
      return send(res, body);
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections(); // keep-alive sockets would hold close() for seconds
  await new Promise((resolve) => server.close(resolve));
});

async function sourceError(promise: Promise<unknown>): Promise<ModelSourceError> {
  try {
    await promise;
  } catch (e) {
    expect(e).toBeInstanceOf(ModelSourceError);
    return e as ModelSourceError;
  }
  throw new Error('expected a ModelSourceError');
}

describe('URL source in the Hub layout', () => {
  it('hubSource builds <endpoint>/<repo>/resolve/<revision>/ URLs', () => {
    expect(hubSource('Qwen/Qwen2.5-0.5B-Instruct').description).toBe(
      'https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/resolve/main/',
    );
    expect(hubSource('Org/Tiny', { endpoint: `${origin}/`, revision: 'v1.0' }).description).toBe(
      `${origin}/Org/Tiny/resolve/v1.0/`,
    );
  });

  it('loads a checkpoint over HTTP with streaming progress', async () => {
    const progress: Progress[] = [];
    const source = hubSource('Org/Tiny', { endpoint: origin, cache: null });
    const ckpt = await loadCheckpoint(source, { onProgress: (p) => progress.push({ ...p }) });
    for (const [name, t] of EXPECTED) expect(sameBytes(ckpt.tensors.get(name)!.data, t.data)).toBe(true);
    expect(ckpt.generationConfig?.eosTokenIds).toEqual([1]);

    const weights = progress.filter((p) => p.file === 'model.safetensors');
    const size = FILES.get('model.safetensors')!.length;
    expect(weights.length).toBeGreaterThanOrEqual(3); // start, several chunks
    expect(weights[0]).toEqual({ file: 'model.safetensors', loaded: 0, total: size });
    expect(weights.at(-1)).toEqual({ file: 'model.safetensors', loaded: size, total: size });
    for (let i = 1; i < weights.length; i++)
      expect(weights[i].loaded).toBeGreaterThanOrEqual(weights[i - 1].loaded);
  });

  it('has() and list() probe the standard files', async () => {
    const source = hubSource('Org/Tiny', { endpoint: origin, cache: null });
    expect(await source.has('config.json')).toBe(true);
    expect(await source.has('tokenizer.json')).toBe(false);
    expect(await source.list()).toEqual(['config.json', 'generation_config.json', 'model.safetensors']);
  });

  it('loads a sharded checkpoint; list() includes the shards', async () => {
    const source = hubSource('Org/Sharded', { endpoint: origin, cache: null });
    expect(await source.list()).toEqual([
      'config.json',
      'model.safetensors.index.json',
      'model-00001-of-00002.safetensors',
      'model-00002-of-00002.safetensors',
    ]);
    const ckpt = await loadCheckpoint(source);
    expect(ckpt.weightFiles).toEqual([
      'model-00001-of-00002.safetensors',
      'model-00002-of-00002.safetensors',
    ]);
    for (const [name, t] of EXPECTED) expect(sameBytes(ckpt.tensors.get(name)!.data, t.data)).toBe(true);
  });

  it('404: not-found with the file and the URL', async () => {
    const e = await sourceError(
      hubSource('Org/Tiny', { endpoint: origin, cache: null }).readText('nope.json'),
    );
    expect(e.kind).toBe('not-found');
    expect(e.status).toBe(404);
    expect(e.message).toBe(`nope.json: not found (HTTP 404) at ${origin}/Org/Tiny/resolve/main/nope.json`);
  });

  it('401: unauthorized, from readBytes and from has()', async () => {
    const source = hubSource('Org/Gated', { endpoint: origin, cache: null });
    const e = await sourceError(source.readBytes('config.json'));
    expect([e.kind, e.status, e.file]).toEqual(['unauthorized', 401, 'config.json']);
    expect(e.message).toMatch(/gated or private and needs an access token/);
    expect((await sourceError(source.has('config.json'))).kind).toBe('unauthorized');
    expect((await sourceError(loadCheckpoint(source))).kind).toBe('unauthorized');
  });

  it('other HTTP errors keep their status', async () => {
    const e = await sourceError(
      hubSource('Org/Flaky', { endpoint: origin, cache: null }).readBytes('config.json'),
    );
    expect([e.kind, e.status]).toEqual(['http', 500]);
  });

  it('a body cut short of its Content-Length is reported as truncated', async () => {
    const size = FILES.get('model.safetensors')!.length;
    const source = hubSource('Org/Cut', { endpoint: origin, cache: null });
    const e = await sourceError(source.readBytes('model.safetensors'));
    expect(e.kind).toBe('truncated');
    expect(e.message).toMatch(new RegExp(`broke off after \\d+ of ${size} bytes`));
    expect((await sourceError(loadCheckpoint(source))).kind).toBe('truncated');
  });

  it('a complete download of a truncated file fails in the safetensors parser, naming the file', async () => {
    const e = await loadCheckpoint(hubSource('Org/Short', { endpoint: origin, cache: null })).catch(
      (err: Error) => err,
    );
    expect(e).toBeInstanceOf(SafetensorsError);
    expect((e as SafetensorsError).file).toBe('model.safetensors');
    expect((e as SafetensorsError).problem).toMatch(
      /are out of range: the data section is \d+ bytes \(truncated file\?\)/,
    );
  });

  it('without Content-Length: progress has total null, bytes still complete', async () => {
    const progress: Progress[] = [];
    const bytes = await hubSource('Org/Chunked', { endpoint: origin, cache: null }).readBytes(
      'config.json',
      (p) => progress.push(p),
    );
    expect(sameBytes(bytes, FILES.get('config.json')!)).toBe(true);
    expect(progress.every((p) => p.total === null)).toBe(true);
    expect(progress.at(-1)!.loaded).toBe(bytes.length);
  });

  it('network failure: kind network', async () => {
    const e = await sourceError(urlSource('http://127.0.0.1:1/m/', { cache: null }).readBytes('config.json'));
    expect(e.kind).toBe('network');
    expect(e.message).toMatch(/^config\.json: could not fetch http:\/\/127\.0\.0\.1:1\/m\/config\.json/);
  });

  it('caches complete downloads and serves them again without a request; never caches a cut one', async () => {
    const store = new Map<string, Uint8Array>();
    const cache: ResponseCache = {
      async match(url) {
        const b = store.get(url);
        return b === undefined
          ? undefined
          : new Response(b.slice(), { headers: { 'content-length': String(b.length) } });
      },
      async put(url, response) {
        store.set(url, new Uint8Array(await response.arrayBuffer()));
      },
    };
    const source = hubSource('Org/Tiny', { endpoint: origin, cache });
    const first = await source.readBytes('model.safetensors');
    const count = requests.length;
    const progress: Progress[] = [];
    const second = await source.readBytes('model.safetensors', (p) => progress.push(p));
    expect(requests.length).toBe(count); // no request at all
    expect(sameBytes(second, first)).toBe(true);
    expect(progress.at(-1)).toEqual({ file: 'model.safetensors', loaded: first.length, total: first.length });
    expect(await source.has('model.safetensors')).toBe(true);
    expect(requests.length).toBe(count);

    await sourceError(hubSource('Org/Cut', { endpoint: origin, cache }).readBytes('model.safetensors'));
    expect([...store.keys()]).toEqual([`${origin}/Org/Tiny/resolve/main/model.safetensors`]);
  });
});

describe('public/models folder source', () => {
  it('reads /models/<name>/ under the site base, and treats an index.html fallback as not found', async () => {
    const source = publicModelSource('tiny', `${origin}/site/`, { cache: null });
    expect(source.description).toBe(`${origin}/site/models/tiny/`);
    expect(sameBytes(await source.readBytes('config.json'), FILES.get('config.json')!)).toBe(true);
    expect(await source.has('model.safetensors.index.json')).toBe(false);
    const e = await sourceError(source.readText('tokenizer.json'));
    expect(e.kind).toBe('not-found');
    expect(e.message).toMatch(/answered with an HTML page; is the file in public\/models\//);
    const ckpt = await loadCheckpoint(source);
    expect(ckpt.tokenizerFiles.size).toBe(0);
  });
});

describe('picked / dropped File objects', () => {
  it('loads a checkpoint from File objects matched by name, with progress', async () => {
    const files = [...FILES].map(([name, bytes]) => new File([bytes.slice()], name));
    const progress: Progress[] = [];
    const ckpt = await loadCheckpoint(fileSource(files), { onProgress: (p) => progress.push({ ...p }) });
    expect(sameBytes(ckpt.tensors.get('lm_head.weight')!.data, EXPECTED.get('lm_head.weight')!.data)).toBe(
      true,
    );
    const size = FILES.get('model.safetensors')!.length;
    expect(progress.filter((p) => p.file === 'model.safetensors').at(-1)).toEqual({
      file: 'model.safetensors',
      loaded: size,
      total: size,
    });
  });

  it('two files with one name, or a missing file, are clear errors', async () => {
    expect(() => fileSource([new File(['{}'], 'config.json'), new File(['{}'], 'config.json')])).toThrow(
      /two of the chosen files are named 'config.json'/,
    );
    const e = await sourceError(fileSource([new File(['{}'], 'config.json')]).readBytes('model.safetensors'));
    expect(e.kind).toBe('not-found');
    expect(e.message).toBe('model.safetensors: not among the chosen files (config.json)');
  });
});

describe('directory source (Node)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'agent-r1-ckpt-'));
    await writeCheckpointFiles(dir, FILES);
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('lists, reads with progress and loads', async () => {
    const source = directorySource(dir);
    expect((await source.list()).sort()).toEqual([...FILES.keys()].sort());
    const progress: Progress[] = [];
    const bytes = await source.readBytes('model.safetensors', (p) => progress.push(p));
    expect(sameBytes(bytes, FILES.get('model.safetensors')!)).toBe(true);
    expect(progress.at(-1)).toEqual({ file: 'model.safetensors', loaded: bytes.length, total: bytes.length });
    const ckpt = await loadCheckpoint(source);
    expect(ckpt.config.vocabSize).toBe(512);
  });

  it('missing files and paths outside the directory are errors', async () => {
    const source = directorySource(dir);
    expect(await source.has('nope.json')).toBe(false);
    expect((await sourceError(source.readText('nope.json'))).kind).toBe('not-found');
    expect(await source.has('../x.json')).toBe(false);
    expect((await sourceError(source.readText('../x.json'))).kind).toBe('io');
  });
});
