// safetensors: read and write Hugging Face's tensor file format.
//
// Layout of a file:
//   bytes [0, 8)        N, the header length, u64 little-endian
//   bytes [8, 8+N)      the header: UTF-8 JSON, an object
//                         { "__metadata__": { "format": "pt" },                        (optional, str -> str)
//                           "<tensor name>": { "dtype": "BF16", "shape": [896, 4864],
//                                              "data_offsets": [begin, end] }, ... }
//   bytes [8+N, EOF)    the data section; each tensor's bytes are [begin, end) relative to its start,
//                       little-endian, row-major (C order)
//
// Validation follows the reference Rust crate (huggingface/safetensors, `Metadata::validate` and
// `SafeTensors::read_metadata`): the header is at most 100 MB, tensors tile the data section exactly
// (sorted by offset, each starting where the previous one ends, the last ending at EOF: no gaps, no
// overlaps, no trailing bytes), and every tensor's byte length equals numel(shape) * sizeof(dtype).
//
// The writer reproduces the Rust crate's `serialize` byte for byte: tensors sorted by dtype, largest
// alignment first (the order of its `Dtype` enum, reversed), then by name; the header is compact JSON
// (serde_json, no spaces) with `__metadata__` first and each tensor's keys in the order dtype, shape,
// data_offsets; the header is padded with spaces to a multiple of 8 bytes so every tensor starts
// 8-byte aligned. This is what Python's `safetensors.torch.save_file` and transformers'
// `save_pretrained` (which passes `metadata={"format": "pt"}`) produce. One caveat: the crate keeps
// `__metadata__` in a HashMap, so with two or more metadata keys its order is arbitrary; we sort them.

import { decodeBf16, decodeF16, decodeF32, encodeBf16, encodeF16, encodeF32 } from './dtype.ts';
import { SafetensorsError } from './errors.ts';

export type SafetensorsDtype =
  | 'BOOL'
  | 'U8'
  | 'I8'
  | 'F8_E5M2'
  | 'F8_E4M3'
  | 'I16'
  | 'U16'
  | 'F16'
  | 'BF16'
  | 'I32'
  | 'U32'
  | 'F32'
  | 'F64'
  | 'I64'
  | 'U64';

/** Dtypes in the order of the Rust crate's `Dtype` enum ("in increasing alignment order"). */
const DTYPE_ORDER: readonly SafetensorsDtype[] = [
  'BOOL',
  'U8',
  'I8',
  'F8_E5M2',
  'F8_E4M3',
  'I16',
  'U16',
  'F16',
  'BF16',
  'I32',
  'U32',
  'F32',
  'F64',
  'I64',
  'U64',
];

export const DTYPE_BYTES: Readonly<Record<SafetensorsDtype, number>> = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E5M2: 1,
  F8_E4M3: 1,
  I16: 2,
  U16: 2,
  F16: 2,
  BF16: 2,
  I32: 4,
  U32: 4,
  F32: 4,
  F64: 8,
  I64: 8,
  U64: 8,
};

export function isSafetensorsDtype(s: unknown): s is SafetensorsDtype {
  return typeof s === 'string' && Object.hasOwn(DTYPE_BYTES, s);
}

/** The Rust crate refuses headers above this size (`MAX_HEADER_SIZE`); so do we. */
export const MAX_HEADER_BYTES = 100_000_000;

export interface TensorEntry {
  name: string;
  dtype: SafetensorsDtype;
  shape: number[];
  /** Byte range within the data section (not the file). */
  begin: number;
  end: number;
}

export interface SafetensorsFile {
  fileName: string;
  /** The whole file; tensor bytes are views into it. */
  bytes: Uint8Array;
  /** Header length N (the header occupies bytes [8, 8+N)). */
  headerLength: number;
  /** `__metadata__`, or null when the file has none. */
  metadata: Record<string, string> | null;
  /** Tensors by name, in data-section order. */
  tensors: Map<string, TensorEntry>;
}

/** Number of elements of a shape; the empty shape [] is a scalar with one element. */
export function numElements(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Reading

/**
 * Parse and validate a safetensors file. Throws SafetensorsError (naming `fileName`) for every kind
 * of malformed input and never reads outside `bytes`.
 */
export function parseSafetensors(bytes: Uint8Array, fileName = 'model.safetensors'): SafetensorsFile {
  const fail = (problem: string): never => {
    throw new SafetensorsError(fileName, problem);
  };
  if (bytes.length < 8) {
    fail(`file is ${bytes.length} bytes, too short for the 8-byte header length`);
  }
  // u64 little-endian, read as two u32 halves: a high half > 0 is already beyond any real header.
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const low = view.getUint32(0, true);
  const high = view.getUint32(4, true);
  const headerLength = high * 2 ** 32 + low;
  if (headerLength > MAX_HEADER_BYTES) {
    fail(
      `header length ${headerLength} is above the ${MAX_HEADER_BYTES}-byte limit (not a safetensors file?)`,
    );
  }
  if (8 + headerLength > bytes.length) {
    fail(
      `header length ${headerLength} goes beyond the end of the file ` +
        `(8 + ${headerLength} > ${bytes.length} bytes; truncated download?)`,
    );
  }

  let headerText: string;
  try {
    headerText = new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(8, 8 + headerLength));
  } catch {
    return fail('header is not valid UTF-8');
  }
  let header: unknown;
  try {
    header = JSON.parse(headerText);
  } catch (e) {
    return fail(`header is not JSON (${(e as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    fail('header is not a JSON object');
  }

  const dataLength = bytes.length - 8 - headerLength;
  let metadata: Record<string, string> | null = null;
  const entries: TensorEntry[] = [];
  for (const [name, info] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      metadata = parseMetadata(info, fail);
      continue;
    }
    entries.push(parseTensorInfo(name, info, dataLength, fail));
  }

  // The tensors must tile [0, dataLength) exactly, in offset order.
  entries.sort((a, b) => a.begin - b.begin || a.end - b.end);
  let cursor = 0;
  let previous: TensorEntry | null = null;
  for (const t of entries) {
    if (t.begin < cursor) {
      fail(
        `tensor '${t.name}' data_offsets [${t.begin}, ${t.end}] overlap tensor '${previous!.name}' ` +
          `[${previous!.begin}, ${previous!.end}]`,
      );
    }
    if (t.begin > cursor) {
      fail(
        `gap of ${t.begin - cursor} unused bytes before tensor '${t.name}' (data_offsets start at ${t.begin})`,
      );
    }
    cursor = t.end;
    previous = t;
  }
  if (cursor !== dataLength) {
    fail(
      `data section is ${dataLength} bytes but the tensors cover ${cursor} ` +
        `(${dataLength - cursor} trailing bytes)`,
    );
  }

  const tensors = new Map<string, TensorEntry>();
  for (const t of entries) tensors.set(t.name, t);
  return { fileName, bytes, headerLength, metadata, tensors };
}

function parseMetadata(info: unknown, fail: (problem: string) => never): Record<string, string> {
  if (typeof info !== 'object' || info === null || Array.isArray(info)) {
    return fail('__metadata__ is not an object of strings');
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(info)) {
    if (typeof v !== 'string') fail(`__metadata__['${k}'] is not a string`);
    out[k] = v as string;
  }
  return out;
}

function parseTensorInfo(
  name: string,
  info: unknown,
  dataLength: number,
  fail: (problem: string) => never,
): TensorEntry {
  if (typeof info !== 'object' || info === null || Array.isArray(info)) {
    return fail(`tensor '${name}' header entry is not an object`);
  }
  const { dtype, shape, data_offsets: offsets } = info as Record<string, unknown>;
  if (!isSafetensorsDtype(dtype)) {
    return fail(`tensor '${name}' has unknown dtype ${JSON.stringify(dtype)}`);
  }
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    return fail(`tensor '${name}' shape ${JSON.stringify(shape)} is not a list of non-negative integers`);
  }
  if (
    !Array.isArray(offsets) ||
    offsets.length !== 2 ||
    !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)
  ) {
    return fail(`tensor '${name}' data_offsets ${JSON.stringify(offsets)} is not [begin, end]`);
  }
  const [begin, end] = offsets as [number, number];
  if (end < begin) fail(`tensor '${name}' data_offsets [${begin}, ${end}] end before they begin`);
  if (end > dataLength) {
    fail(
      `tensor '${name}' data_offsets [${begin}, ${end}] are out of range: ` +
        `the data section is ${dataLength} bytes (truncated file?)`,
    );
  }
  // numel * sizeof must equal the byte range; compare in doubles, guarding against overflow.
  const numel = numElements(shape as number[]);
  const expected = numel * DTYPE_BYTES[dtype];
  if (!Number.isSafeInteger(expected)) fail(`tensor '${name}' shape ${JSON.stringify(shape)} is too large`);
  if (end - begin !== expected) {
    fail(
      `tensor '${name}' data_offsets [${begin}, ${end}] hold ${end - begin} bytes but ` +
        `${dtype} x [${(shape as number[]).join(', ')}] needs ${expected}`,
    );
  }
  return { name, dtype, shape: (shape as number[]).slice(), begin, end };
}

/** The tensor's raw little-endian bytes: a view into the file, no copy. */
export function tensorBytes(file: SafetensorsFile, name: string): Uint8Array {
  const t = file.tensors.get(name);
  if (t === undefined) throw new SafetensorsError(file.fileName, `no tensor named '${name}'`);
  const start = file.bytes.byteOffset + 8 + file.headerLength;
  return new Uint8Array(file.bytes.buffer, start + t.begin, t.end - t.begin);
}

/** The float dtypes we compute with; everything else (ints, FP8, F64) is refused for weights. */
export type FloatDtype = 'F32' | 'F16' | 'BF16';

export function isFloatDtype(d: SafetensorsDtype): d is FloatDtype {
  return d === 'F32' || d === 'F16' || d === 'BF16';
}

/**
 * The tensor's values as float32 (exact for F32, F16 and BF16). F32 on a little-endian host is a
 * view into the file when aligned (the writer aligns every tensor), else a copy.
 */
export function tensorToFloat32(file: SafetensorsFile, name: string): Float32Array {
  const t = file.tensors.get(name);
  if (t === undefined) throw new SafetensorsError(file.fileName, `no tensor named '${name}'`);
  const bytes = tensorBytes(file, name);
  switch (t.dtype) {
    case 'F32':
      return decodeF32(bytes);
    case 'F16':
      return decodeF16(bytes);
    case 'BF16':
      return decodeBf16(bytes);
    default:
      throw new SafetensorsError(
        file.fileName,
        `tensor '${name}' has dtype ${t.dtype}; only F32, F16 and BF16 weights can be loaded`,
      );
  }
}

/** float32 values as little-endian bytes of `dtype` (rounding to nearest even for F16/BF16). */
export function encodeFloat32(values: Float32Array, dtype: FloatDtype): Uint8Array {
  if (dtype === 'F32') return encodeF32(values);
  return dtype === 'F16' ? encodeF16(values) : encodeBf16(values);
}

// ---------------------------------------------------------------------------------------------
// Writing

export interface TensorToWrite {
  dtype: SafetensorsDtype;
  shape: readonly number[];
  /** Little-endian bytes, exactly numel(shape) * sizeof(dtype) of them. */
  data: Uint8Array;
}

/** HF transformers' `save_pretrained` writes this metadata into every safetensors file. */
export const PT_FORMAT_METADATA: Readonly<Record<string, string>> = { format: 'pt' };

/**
 * Serialize tensors the way the Rust crate's `serialize` does (see the file comment). Pass
 * `metadata = null` for a file without `__metadata__` (what `safetensors.torch.save_file` writes
 * when given no metadata).
 */
export function serializeSafetensors(
  tensors: ReadonlyMap<string, TensorToWrite> | Readonly<Record<string, TensorToWrite>>,
  metadata: Readonly<Record<string, string>> | null = PT_FORMAT_METADATA,
  fileName = 'model.safetensors',
): Uint8Array {
  const list: [string, TensorToWrite][] =
    tensors instanceof Map
      ? [...tensors.entries()]
      : Object.entries(tensors as Record<string, TensorToWrite>);
  const rank = (d: SafetensorsDtype) => DTYPE_ORDER.indexOf(d);
  // Descending alignment, then name. Names compare as UTF-8 bytes in Rust; for the ASCII names of
  // real checkpoints that is the same as comparing UTF-16 code units.
  list.sort(([an, a], [bn, b]) => rank(b.dtype) - rank(a.dtype) || (an < bn ? -1 : an > bn ? 1 : 0));

  // Header JSON, built by hand so key order is exactly the crate's. JSON.stringify escapes strings as
  // serde_json does (\" \\ \b \f \n \r \t, other control characters as \u00xx).
  const parts: string[] = [];
  if (metadata !== null) {
    const keys = Object.keys(metadata).sort();
    const fields = keys.map((k) => `${JSON.stringify(k)}:${JSON.stringify(metadata[k])}`);
    parts.push(`"__metadata__":{${fields.join(',')}}`);
  }
  let offset = 0;
  for (const [name, t] of list) {
    if (!isSafetensorsDtype(t.dtype as unknown))
      throw new SafetensorsError(fileName, `tensor '${name}' has unknown dtype`);
    if (!t.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new SafetensorsError(fileName, `tensor '${name}' shape [${t.shape.join(', ')}] is invalid`);
    }
    const expected = numElements(t.shape) * DTYPE_BYTES[t.dtype];
    if (t.data.length !== expected) {
      throw new SafetensorsError(
        fileName,
        `tensor '${name}' has ${t.data.length} bytes but ${t.dtype} x [${t.shape.join(', ')}] needs ${expected}`,
      );
    }
    parts.push(
      `${JSON.stringify(name)}:{"dtype":"${t.dtype}","shape":[${t.shape.join(',')}],` +
        `"data_offsets":[${offset},${offset + expected}]}`,
    );
    offset += expected;
  }
  const json = new TextEncoder().encode(`{${parts.join(',')}}`);
  const headerLength = Math.ceil(json.length / 8) * 8;

  const out = new Uint8Array(8 + headerLength + offset);
  const view = new DataView(out.buffer);
  view.setUint32(0, headerLength % 2 ** 32, true);
  view.setUint32(4, Math.floor(headerLength / 2 ** 32), true);
  out.set(json, 8);
  out.fill(0x20, 8 + json.length, 8 + headerLength); // pad with spaces
  let cursor = 8 + headerLength;
  for (const [, t] of list) {
    out.set(t.data, cursor);
    cursor += t.data.length;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints: model.safetensors.index.json
//   { "metadata": { "total_size": <sum of tensor bytes> },
//     "weight_map": { "<tensor name>": "model-00001-of-00002.safetensors", ... } }

export const SHARD_INDEX_FILE = 'model.safetensors.index.json';

export interface ShardIndex {
  metadata: Record<string, unknown>;
  /** Tensor name -> shard file name. */
  weightMap: Map<string, string>;
}

/** A shard file name must be a plain relative path: no '..', no absolute path, no backslashes. */
function isSafeRelativeName(name: string): boolean {
  if (name.length === 0 || name.startsWith('/') || name.includes('\\')) return false;
  return name.split('/').every((seg) => seg !== '' && seg !== '.' && seg !== '..');
}

export function parseShardIndex(text: string, fileName = SHARD_INDEX_FILE): ShardIndex {
  const fail = (problem: string): never => {
    throw new SafetensorsError(fileName, problem);
  };
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return fail(`not JSON (${(e as Error).message})`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return fail('not a JSON object');
  const { metadata, weight_map: weightMap } = json as Record<string, unknown>;
  if (typeof weightMap !== 'object' || weightMap === null || Array.isArray(weightMap)) {
    return fail('has no "weight_map" object');
  }
  const map = new Map<string, string>();
  for (const [tensor, shard] of Object.entries(weightMap)) {
    if (typeof shard !== 'string' || !isSafeRelativeName(shard)) {
      fail(`weight_map['${tensor}'] = ${JSON.stringify(shard)} is not a file name in the checkpoint folder`);
    }
    map.set(tensor, shard as string);
  }
  const meta = typeof metadata === 'object' && metadata !== null ? (metadata as Record<string, unknown>) : {};
  return { metadata: meta, weightMap: map };
}

/** The index JSON as transformers writes it: json.dumps(index, indent=2, sort_keys=True) + "\n". */
export function serializeShardIndex(weightMap: ReadonlyMap<string, string>, totalSize: number): string {
  const sorted: Record<string, string> = {};
  for (const k of [...weightMap.keys()].sort()) sorted[k] = weightMap.get(k)!;
  return `${JSON.stringify({ metadata: { total_size: totalSize }, weight_map: sorted }, null, 2)}\n`;
}
