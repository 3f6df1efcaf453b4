// A store-only (no compression) ZIP writer, so the page can hand a whole checkpoint folder to the
// user as one download. Pure functions over bytes: runs in a browser and in Node.
//
// Layout (PKWARE APPNOTE 6.3.x): for each file a local header + the bytes; then the central
// directory; then the end-of-central-directory record. Names are UTF-8 (general purpose bit 11).
// Weights are already dense floats, which deflate shrinks by a few percent at best, so storing is
// the right trade for multi-gigabyte files (and keeps the writer small).
//
// ZIP64: the classic format counts bytes and offsets in 32 bits and entries in 16. An entry of
// 4 GiB - 1 or more, an entry that starts past that offset, or more than 65,534 entries, switch on
// the ZIP64 extensions (extra field 0x0001, ZIP64 end record and locator) for exactly the fields that
// overflow; `zip64: 'always'` writes them for everything (tests use it on small files).

export interface ZipEntry {
  /** Path inside the archive, '/'-separated, relative (e.g. 'tiny-qwen2/config.json'). */
  name: string;
  data: Uint8Array;
}

export interface ZipOptions {
  /** Modification time stored for every entry (MS-DOS resolution: 2 s, years 1980-2107). Default: now. */
  modified?: Date;
  /** 'auto' (default): ZIP64 fields only where a 32/16-bit field overflows. 'always': for every field. */
  zip64?: 'auto' | 'always';
}

export class ZipError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ZipError';
  }
}

// ---------------------------------------------------------------------------------------------
// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), slicing-by-8: eight table lookups per 8
// bytes instead of eight per byte. crc32('123456789') = 0xCBF43926.

const CRC_TABLES = (() => {
  const t = new Uint32Array(8 * 256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  for (let n = 0; n < 256; n++) {
    for (let k = 1; k < 8; k++) {
      const prev = t[(k - 1) * 256 + n];
      t[k * 256 + n] = (prev >>> 8) ^ t[prev & 0xff];
    }
  }
  return t;
})();

/** CRC-32 of `data`; pass a previous result as `crc` to continue over several chunks. */
export function crc32(data: Uint8Array, crc = 0): number {
  const t = CRC_TABLES;
  let c = (crc ^ 0xffffffff) >>> 0;
  let i = 0;
  const n = data.length;
  const end8 = n - (n % 8);
  while (i < end8) {
    const a = (data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)) ^ c;
    const b = data[i + 4] | (data[i + 5] << 8) | (data[i + 6] << 16) | (data[i + 7] << 24);
    c =
      t[1792 + (a & 0xff)] ^
      t[1536 + ((a >>> 8) & 0xff)] ^
      t[1280 + ((a >>> 16) & 0xff)] ^
      t[1024 + (a >>> 24)] ^
      t[768 + (b & 0xff)] ^
      t[512 + ((b >>> 8) & 0xff)] ^
      t[256 + ((b >>> 16) & 0xff)] ^
      t[b >>> 24];
    i += 8;
  }
  while (i < n) c = t[(c ^ data[i++]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// ---------------------------------------------------------------------------------------------
// Records

const LOCAL_HEADER = 0x04034b50;
const CENTRAL_HEADER = 0x02014b50;
const END_OF_CENTRAL_DIR = 0x06054b50;
const ZIP64_END_OF_CENTRAL_DIR = 0x06064b50;
const ZIP64_LOCATOR = 0x07064b50;
const ZIP64_EXTRA_ID = 0x0001;

const U16_MAX = 0xffff;
const U32_MAX = 0xffffffff;
const FLAG_UTF8 = 0x0800;
const METHOD_STORE = 0;
const VERSION_DEFAULT = 20; // 2.0: folders, stored files
const VERSION_ZIP64 = 45; // 4.5: ZIP64
const MADE_BY_UNIX = 3 << 8;
const UNIX_FILE_0644 = (0o100644 << 16) >>> 0; // regular file, rw-r--r--

/** Little-endian writer over a fixed-size buffer. */
class Writer {
  readonly bytes: Uint8Array;
  private readonly view: DataView;
  private at = 0;
  constructor(size: number) {
    this.bytes = new Uint8Array(size);
    this.view = new DataView(this.bytes.buffer);
  }
  u16(v: number): void {
    this.view.setUint16(this.at, v, true);
    this.at += 2;
  }
  u32(v: number): void {
    this.view.setUint32(this.at, v >>> 0, true);
    this.at += 4;
  }
  /** An unsigned integer up to 2^53 as 8 bytes. */
  u64(v: number): void {
    this.u32(v % 2 ** 32);
    this.u32(Math.floor(v / 2 ** 32));
  }
  raw(b: Uint8Array): void {
    this.bytes.set(b, this.at);
    this.at += b.length;
  }
  done(): Uint8Array {
    if (this.at !== this.bytes.length) throw new Error(`zip: wrote ${this.at} of ${this.bytes.length} bytes`);
    return this.bytes;
  }
}

/** MS-DOS date and time of `d` in local time, clamped to the format's 1980-2107 range. */
function dosDateTime(d: Date): { date: number; time: number } {
  const year = d.getFullYear();
  if (year < 1980) return { date: (1 << 5) | 1, time: 0 }; // 1980-01-01 00:00
  if (year > 2107) return { date: (127 << 9) | (12 << 5) | 31, time: (23 << 11) | (59 << 5) | 29 };
  return {
    date: ((year - 1980) << 9) | ((d.getMonth() + 1) << 5) | d.getDate(),
    time: (d.getHours() << 11) | (d.getMinutes() << 5) | Math.floor(d.getSeconds() / 2),
  };
}

function checkName(name: string): Uint8Array {
  if (name === '') throw new ZipError('zip: an entry has an empty name');
  if (name.startsWith('/') || name.includes('\\') || name.includes('\0')) {
    throw new ZipError(`zip: entry name ${JSON.stringify(name)} must be relative and '/'-separated`);
  }
  if (name.split('/').some((part) => part === '..' || part === '.' || part === '')) {
    throw new ZipError(`zip: entry name ${JSON.stringify(name)} has an empty, '.' or '..' path segment`);
  }
  const bytes = new TextEncoder().encode(name);
  if (bytes.length > U16_MAX) throw new ZipError(`zip: entry name is ${bytes.length} bytes (max ${U16_MAX})`);
  return bytes;
}

interface Planned {
  name: Uint8Array;
  data: Uint8Array;
  crc: number;
  offset: number; // of the local header
  zip64Size: boolean; // sizes go in the ZIP64 extra field
  zip64Offset: boolean; // the offset goes in the ZIP64 extra field (central directory only)
}

/**
 * The archive as a list of byte arrays to concatenate in order (each file's bytes are passed
 * through, not copied: hand the list to `new Blob(parts)` to download without one more copy).
 */
export function zipParts(entries: readonly ZipEntry[], options: ZipOptions = {}): Uint8Array[] {
  const always = options.zip64 === 'always';
  const { date, time } = dosDateTime(options.modified ?? new Date());
  const seen = new Set<string>();
  const parts: Uint8Array[] = [];
  const planned: Planned[] = [];
  let offset = 0;

  for (const entry of entries) {
    const name = checkName(entry.name);
    if (seen.has(entry.name)) throw new ZipError(`zip: two entries are named ${JSON.stringify(entry.name)}`);
    seen.add(entry.name);
    const size = entry.data.length;
    const p: Planned = {
      name,
      data: entry.data,
      crc: crc32(entry.data),
      offset,
      zip64Size: always || size >= U32_MAX,
      zip64Offset: always || offset >= U32_MAX,
    };
    planned.push(p);
    // Local header; a ZIP64 entry's local header carries both sizes in the extra field.
    const extraLen = p.zip64Size ? 4 + 16 : 0;
    const w = new Writer(30 + name.length + extraLen);
    w.u32(LOCAL_HEADER);
    w.u16(p.zip64Size ? VERSION_ZIP64 : VERSION_DEFAULT);
    w.u16(FLAG_UTF8);
    w.u16(METHOD_STORE);
    w.u16(time);
    w.u16(date);
    w.u32(p.crc);
    w.u32(p.zip64Size ? U32_MAX : size); // compressed size
    w.u32(p.zip64Size ? U32_MAX : size); // uncompressed size
    w.u16(name.length);
    w.u16(extraLen);
    w.raw(name);
    if (p.zip64Size) {
      w.u16(ZIP64_EXTRA_ID);
      w.u16(16);
      w.u64(size); // original size
      w.u64(size); // compressed size
    }
    const header = w.done();
    parts.push(header, entry.data);
    offset += header.length + size;
  }

  // Central directory.
  const cdOffset = offset;
  for (const p of planned) {
    const size = p.data.length;
    const extraLen = p.zip64Size || p.zip64Offset ? 4 + (p.zip64Size ? 16 : 0) + (p.zip64Offset ? 8 : 0) : 0;
    const w = new Writer(46 + p.name.length + extraLen);
    const version = extraLen > 0 ? VERSION_ZIP64 : VERSION_DEFAULT;
    w.u32(CENTRAL_HEADER);
    w.u16(MADE_BY_UNIX | version);
    w.u16(version);
    w.u16(FLAG_UTF8);
    w.u16(METHOD_STORE);
    w.u16(time);
    w.u16(date);
    w.u32(p.crc);
    w.u32(p.zip64Size ? U32_MAX : size);
    w.u32(p.zip64Size ? U32_MAX : size);
    w.u16(p.name.length);
    w.u16(extraLen);
    w.u16(0); // comment length
    w.u16(0); // disk number start
    w.u16(0); // internal attributes
    w.u32(UNIX_FILE_0644);
    w.u32(p.zip64Offset ? U32_MAX : p.offset);
    w.raw(p.name);
    if (extraLen > 0) {
      // Fixed order: original size, compressed size, local header offset; only the overflowing ones.
      w.u16(ZIP64_EXTRA_ID);
      w.u16(extraLen - 4);
      if (p.zip64Size) {
        w.u64(size);
        w.u64(size);
      }
      if (p.zip64Offset) w.u64(p.offset);
    }
    const header = w.done();
    parts.push(header);
    offset += header.length;
  }
  const cdSize = offset - cdOffset;
  const count = planned.length;

  const needZip64End = always || count >= U16_MAX || cdSize >= U32_MAX || cdOffset >= U32_MAX;
  if (needZip64End) {
    const zip64EndOffset = offset;
    const w = new Writer(56 + 20);
    w.u32(ZIP64_END_OF_CENTRAL_DIR);
    w.u64(44); // size of the rest of this record
    w.u16(MADE_BY_UNIX | VERSION_ZIP64);
    w.u16(VERSION_ZIP64);
    w.u32(0); // this disk
    w.u32(0); // disk with the central directory
    w.u64(count); // entries on this disk
    w.u64(count); // entries in total
    w.u64(cdSize);
    w.u64(cdOffset);
    w.u32(ZIP64_LOCATOR);
    w.u32(0); // disk with the ZIP64 end record
    w.u64(zip64EndOffset);
    w.u32(1); // total disks
    parts.push(w.done());
  }
  const w = new Writer(22);
  w.u32(END_OF_CENTRAL_DIR);
  w.u16(0);
  w.u16(0);
  const count16 = always || count >= U16_MAX ? U16_MAX : count;
  w.u16(count16);
  w.u16(count16);
  w.u32(always || cdSize >= U32_MAX ? U32_MAX : cdSize);
  w.u32(always || cdOffset >= U32_MAX ? U32_MAX : cdOffset);
  w.u16(0); // comment length
  parts.push(w.done());
  return parts;
}

/** The archive as one byte array (Node, tests; in a browser prefer new Blob(zipParts(...))). */
export function zip(entries: readonly ZipEntry[], options: ZipOptions = {}): Uint8Array {
  const parts = zipParts(entries, options);
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
