// A minimal reader for store-only ZIP archives, written independently of src/agent/model/zip.ts
// (from the APPNOTE record layouts), that checks each entry's CRC with Node's zlib.crc32. Enough to
// open what the page downloads; it refuses compressed entries and ZIP64 archives.
import { crc32 } from 'node:zlib';

export function readStoredZip(zip: Uint8Array): Map<string, Uint8Array> {
  const view = new DataView(zip.buffer, zip.byteOffset, zip.byteLength);
  // The end-of-central-directory record: the last "PK\x05\x06" (a comment may follow it).
  let end = -1;
  for (let i = zip.length - 22; i >= Math.max(0, zip.length - 22 - 0xffff); i--) {
    if (view.getUint32(i, true) === 0x06054b50) {
      end = i;
      break;
    }
  }
  if (end < 0) throw new Error('not a zip: no end-of-central-directory record');
  const count = view.getUint16(end + 10, true);
  const cdOffset = view.getUint32(end + 16, true);
  if (count === 0xffff || cdOffset === 0xffffffff) throw new Error('ZIP64 archives are not supported here');
  const files = new Map<string, Uint8Array>();
  let at = cdOffset;
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  for (let n = 0; n < count; n++) {
    if (view.getUint32(at, true) !== 0x02014b50) throw new Error(`bad central header at ${at}`);
    const method = view.getUint16(at + 10, true);
    const crc = view.getUint32(at + 16, true);
    const size = view.getUint32(at + 20, true);
    const nameLen = view.getUint16(at + 28, true);
    const extraLen = view.getUint16(at + 30, true);
    const commentLen = view.getUint16(at + 32, true);
    const local = view.getUint32(at + 42, true);
    const name = utf8.decode(zip.subarray(at + 46, at + 46 + nameLen));
    if (method !== 0) throw new Error(`${name}: compression method ${method}, expected 0 (stored)`);
    if (view.getUint32(local, true) !== 0x04034b50) throw new Error(`${name}: bad local header`);
    const dataStart = local + 30 + view.getUint16(local + 26, true) + view.getUint16(local + 28, true);
    const data = zip.subarray(dataStart, dataStart + size);
    if (data.length !== size) throw new Error(`${name}: truncated`);
    if (crc32(data) >>> 0 !== crc) throw new Error(`${name}: CRC mismatch`);
    files.set(name, data);
    at += 46 + nameLen + extraLen + commentLen;
  }
  return files;
}
