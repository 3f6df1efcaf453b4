// The store-only ZIP writer against independent readers: Python's zipfile (python3 -m zipfile -t
// and a read-back of every entry's bytes, name and date), Info-ZIP's `unzip -t` where installed, and
// Node's zlib.crc32 for the checksum. Tools that are missing are skipped, with a note.

import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { crc32, ZipError, zip, zipParts } from '../../src/agent/model/zip.ts';

const has = (cmd: string, args: string[]) => spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;
const PYTHON = has('python3', ['--version']);
const UNZIP = has('unzip', ['-v']);
if (!PYTHON) console.log('[zip test] python3 not found: skipping the zipfile read-back');
if (!UNZIP) console.log('[zip test] unzip not found: skipping unzip -t');

const nodeCrc32 = (zlib as unknown as { crc32?: (d: Uint8Array) => number }).crc32;

function bytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s >>> 24;
  }
  return out;
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
const MODIFIED = new Date(2024, 4, 6, 7, 8, 11); // local time; DOS time keeps even seconds: 10

const ENTRIES = [
  { name: 'tiny-model/config.json', data: new TextEncoder().encode('{"hidden_size": 64}\n') },
  { name: 'tiny-model/model.safetensors', data: bytes(100_003, 1) },
  { name: 'tiny-model/empty.txt', data: new Uint8Array(0) },
  { name: 'tiny-model/ünïcode —名前.json', data: bytes(17, 2) },
  { name: 'top-level.bin', data: bytes(4096, 3) },
];

/** What Python's zipfile reads back: per entry name, size, CRC, sha256 of the bytes, date_time. */
const READ_BACK = `
import hashlib, json, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    bad = z.testzip()
    out = [{"name": i.filename, "size": i.file_size, "compressed": i.compress_size, "crc": i.CRC,
            "method": i.compress_type, "date_time": list(i.date_time),
            "sha256": hashlib.sha256(z.read(i)).hexdigest()} for i in z.infolist()]
print(json.dumps({"bad": bad, "entries": out}))
`;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agent-r1-zip-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('crc32', () => {
  it('matches the check value of CRC-32/ISO-HDLC and edge cases', () => {
    expect(crc32(new TextEncoder().encode('123456789'))).toBe(0xcbf43926);
    expect(crc32(new Uint8Array(0))).toBe(0);
    expect(crc32(new Uint8Array([0]))).toBe(0xd202ef8d);
    expect(crc32(new TextEncoder().encode('The quick brown fox jumps over the lazy dog'))).toBe(0x414fa339);
  });

  it('continues over chunks: crc(a‖b) = crc(b, crc(a))', () => {
    const data = bytes(1000, 7);
    for (const cut of [0, 1, 7, 8, 9, 500, 999, 1000]) {
      expect(crc32(data.subarray(cut), crc32(data.subarray(0, cut)))).toBe(crc32(data));
    }
  });

  it.skipIf(!nodeCrc32)('agrees with zlib.crc32 on every length 0..64 and large unaligned views', () => {
    const data = bytes(70_000, 11);
    for (let n = 0; n <= 64; n++) expect(crc32(data.subarray(0, n))).toBe(nodeCrc32!(data.subarray(0, n)));
    for (const start of [0, 1, 3, 5]) {
      const view = data.subarray(start, 65_537 + start);
      expect(crc32(view)).toBe(nodeCrc32!(view));
    }
  });
});

describe('zip (store only)', () => {
  for (const mode of ['auto', 'always'] as const) {
    it.skipIf(!PYTHON)(`Python's zipfile reads back every entry exactly (zip64: ${mode})`, async () => {
      const path = join(dir, `archive-${mode}.zip`);
      await writeFile(path, zip(ENTRIES, { modified: MODIFIED, zip64: mode }));
      expect(execFileSync('python3', ['-m', 'zipfile', '-t', path], { encoding: 'utf8' })).toMatch(
        /Done testing/,
      );
      const got = JSON.parse(execFileSync('python3', ['-c', READ_BACK, path], { encoding: 'utf8' }));
      expect(got.bad).toBeNull();
      expect(got.entries).toEqual(
        ENTRIES.map((e) => ({
          name: e.name,
          size: e.data.length,
          compressed: e.data.length,
          crc: crc32(e.data),
          method: 0,
          date_time: [2024, 5, 6, 7, 8, 10],
          sha256: sha256(e.data),
        })),
      );
    });

    it.skipIf(!UNZIP)(`unzip -t accepts it (zip64: ${mode})`, async () => {
      const path = join(dir, `unzip-${mode}.zip`);
      await writeFile(path, zip(ENTRIES, { modified: MODIFIED, zip64: mode }));
      const out = execFileSync('unzip', ['-t', path], { encoding: 'utf8' });
      expect(out).toMatch(/No errors detected/);
      expect(out).toContain('tiny-model/model.safetensors');
      const listing = execFileSync('unzip', ['-Z1', path], { encoding: 'utf8' }).trim().split('\n');
      expect(listing).toEqual(ENTRIES.map((e) => e.name));
    });
  }

  it('lays out the records by the book (no ZIP64 records unless asked)', () => {
    const parts = zipParts(ENTRIES, { modified: MODIFIED });
    // Local header + data per entry, one central header per entry, the end record.
    expect(parts.length).toBe(ENTRIES.length * 3 + 1);
    // Each file's bytes are passed through, not copied.
    for (const [i, e] of ENTRIES.entries()) expect(parts[2 * i + 1]).toBe(e.data);
    const all = zip(ENTRIES, { modified: MODIFIED });
    const view = new DataView(all.buffer);
    const end = all.length - 22;
    expect(view.getUint32(end, true)).toBe(0x06054b50);
    expect(view.getUint16(end + 10, true)).toBe(ENTRIES.length);
    const cdSize = view.getUint32(end + 12, true);
    const cdOffset = view.getUint32(end + 16, true);
    expect(cdOffset + cdSize).toBe(end);
    expect(view.getUint32(cdOffset, true)).toBe(0x02014b50);
    expect(view.getUint32(0, true)).toBe(0x04034b50);
    expect(Buffer.from(all).includes(Buffer.from([0x50, 0x4b, 0x06, 0x06]))).toBe(false);
    // Same input, same bytes.
    expect(sha256(zip(ENTRIES, { modified: MODIFIED }))).toBe(sha256(all));
  });

  it('writes a valid empty archive', async () => {
    const empty = zip([], { modified: MODIFIED });
    expect(empty.length).toBe(22);
    if (PYTHON) {
      const path = join(dir, 'empty.zip');
      await writeFile(path, empty);
      const got = JSON.parse(execFileSync('python3', ['-c', READ_BACK, path], { encoding: 'utf8' }));
      expect(got.entries).toEqual([]);
    }
  });

  it('refuses duplicate and unsafe names with a clear error', () => {
    const d = new Uint8Array(1);
    expect(() =>
      zip([
        { name: 'a/b', data: d },
        { name: 'a/b', data: d },
      ]),
    ).toThrow(/two entries are named "a\/b"/);
    for (const name of ['', '/etc/passwd', '../up', 'a/../b', 'a\\b', 'a//b', 'a/']) {
      expect(() => zip([{ name, data: d }])).toThrow(ZipError);
    }
  });
});
