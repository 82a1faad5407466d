// safetensors header reader (MODEL.md §1). Layout: 8-byte little-endian header length N, N bytes
// of JSON, then the data section; each tensor's data_offsets [begin, end) are relative to byte
// 8+N. Every tensor is validated here (known dtype, byte span = numel × dtype size, inside the
// file, no overlaps) and together they must tile the data section to the end of the file, so
// nothing downstream can read a span that disagrees with its shape or sits at a shifted offset.
// Only a regular file is opened (src/files.ts), and only the header is read; tensor data is never
// touched.
import { closeSync } from "node:fs";
import { K3Error } from "../errors.ts";
import { openRegularFile, readAt } from "../files.ts";

/** Bytes per element of every dtype the safetensors format defines. */
export const SAFETENSORS_DTYPE_BYTES: Record<string, number> = {
  BOOL: 1, U8: 1, I8: 1, F8_E5M2: 1, F8_E4M3: 1, F8_E8M0: 1,
  I16: 2, U16: 2, F16: 2, BF16: 2,
  I32: 4, U32: 4, F32: 4,
  I64: 8, U64: 8, F64: 8,
};

/** safetensors caps the header at 100 MB; a larger length is a corrupt or foreign file. */
const MAX_HEADER_BYTES = 100_000_000;

export interface HeaderTensor {
  name: string;
  dtype: string; // a key of SAFETENSORS_DTYPE_BYTES (known, though maybe unexpected for K3)
  shape: number[];
  begin: number; // relative to dataStart
  end: number; // exclusive, relative to dataStart
}

export interface SafetensorsHeader {
  dataStart: number; // absolute file offset of the data section (8 + N)
  fileBytes: number;
  /** Hash of the first 8 + N bytes (length field + header JSON): ties recorded facts (checksums)
   *  to the exact header they were made for. */
  headerHash: string;
  tensors: HeaderTensor[]; // in header order
}

/** Problems beyond this many are summarised, so one broken 5,000-tensor shard stays readable. */
const MAX_LISTED = 30;

function fail(path: string, what: string, problems: string[]): never {
  const shown = problems.length > MAX_LISTED ? [...problems.slice(0, MAX_LISTED), `… and ${problems.length - MAX_LISTED} more`] : problems;
  throw new K3Error("CHECKPOINT", `${path}: ${what}`, shown);
}

export function readSafetensorsHeader(path: string): SafetensorsHeader {
  const { fd, bytes: fileBytes } = openRegularFile(path, "shard", "CHECKPOINT");
  try {
    if (fileBytes < 8) fail(path, "not a safetensors file", [`file is ${fileBytes} bytes; expected at least the 8-byte header length`]);
    const n64 = readAt(fd, 8, 0).readBigUInt64LE(0);
    if (n64 > BigInt(fileBytes - 8))
      fail(path, "truncated or corrupt shard", [`header length ${n64} runs past the end of the file (${fileBytes} bytes, so at most ${fileBytes - 8})`]);
    const headerBytes = Number(n64);
    if (headerBytes > MAX_HEADER_BYTES) fail(path, "corrupt shard", [`header length ${headerBytes} exceeds the safetensors limit ${MAX_HEADER_BYTES}`]);
    const raw = readAt(fd, headerBytes, 8);
    if (raw.length !== headerBytes) fail(path, "short read", [`read ${raw.length} of ${headerBytes} header bytes`]);
    let json: unknown;
    try {
      json = JSON.parse(raw.toString("utf8"));
    } catch (e) {
      fail(path, "header is not valid JSON", [(e as Error).message]);
    }
    const tensors = validateHeader(path, json, 8 + headerBytes, fileBytes);
    // The length field is part of what the tensors' offsets are relative to: hash it too.
    const headerHash = Bun.hash(Buffer.concat([readAt(fd, 8, 0), raw])).toString(16).padStart(16, "0");
    return { dataStart: 8 + headerBytes, fileBytes, headerHash, tensors };
  } catch (e) {
    if (e instanceof K3Error) throw e;
    throw new K3Error("CHECKPOINT", `${path}: cannot read shard`, [(e as Error).message]);
  } finally {
    closeSync(fd);
  }
}

function validateHeader(path: string, json: unknown, dataStart: number, fileBytes: number): HeaderTensor[] {
  if (json === null || typeof json !== "object" || Array.isArray(json)) fail(path, "invalid header", ["expected a JSON object at the top of the header"]);
  const problems: string[] = [];
  const tensors: HeaderTensor[] = [];
  const dataBytes = fileBytes - dataStart;
  for (const [name, v] of Object.entries(json as Record<string, unknown>)) {
    if (name === "__metadata__") continue; // free-form strings; nothing the engine needs
    const t = v as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (t === null || typeof t !== "object") {
      problems.push(`${name}: expected an object with dtype, shape, data_offsets`);
      continue;
    }
    const { dtype, shape, data_offsets: off } = t;
    if (typeof dtype !== "string" || !(dtype in SAFETENSORS_DTYPE_BYTES)) {
      problems.push(`${name}: unknown dtype ${JSON.stringify(dtype)} (expected one of ${Object.keys(SAFETENSORS_DTYPE_BYTES).join(", ")})`);
      continue;
    }
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      problems.push(`${name}: shape ${JSON.stringify(shape)} is not a list of non-negative integers`);
      continue;
    }
    if (!Array.isArray(off) || off.length !== 2 || !off.every((d) => Number.isSafeInteger(d) && d >= 0) || off[0] > off[1]) {
      problems.push(`${name}: data_offsets ${JSON.stringify(off)} is not [begin, end] with 0 ≤ begin ≤ end`);
      continue;
    }
    const [begin, end] = off as [number, number];
    const want = (shape as number[]).reduce((a, b) => a * b, 1) * SAFETENSORS_DTYPE_BYTES[dtype]!;
    if (end - begin !== want) {
      problems.push(`${name}: spans ${end - begin} bytes but ${dtype} ${JSON.stringify(shape)} needs ${want}`);
      continue;
    }
    if (end > dataBytes) {
      problems.push(`${name}: data_offsets [${begin}, ${end}) end past the file (data section is ${dataBytes} bytes; file ${fileBytes} bytes, data starts at ${dataStart})`);
      continue;
    }
    tensors.push({ name, dtype, shape: shape as number[], begin, end });
  }
  // Overlaps: sort by begin; each non-empty tensor must start at or after the furthest end so
  // far (a running maximum, so a tensor nested inside a large one is caught too).
  const byBegin = tensors.filter((t) => t.end > t.begin).sort((a, b) => a.begin - b.begin);
  let reach: HeaderTensor | undefined;
  for (const cur of byBegin) {
    if (reach && cur.begin < reach.end) problems.push(`${cur.name}: bytes [${cur.begin}, ${cur.end}) overlap ${reach.name} [${reach.begin}, ${reach.end})`);
    if (!reach || cur.end > reach.end) reach = cur;
  }
  if (problems.length) fail(path, "invalid safetensors header", problems);
  // The tensors must tile the data section exactly, from its first byte to the end of the file
  // (the safetensors format: "entirely indexed, and cannot contain holes"). This is what catches
  // a header-length field off by a few bytes when the header ends in padding (the JSON still
  // parses, every tensor would be read shifted) and bytes appended after the data.
  let at = 0;
  for (const cur of byBegin) {
    if (cur.begin > at) problems.push(`bytes [${at}, ${cur.begin}) of the data section belong to no tensor (a hole before ${cur.name})`);
    at = cur.end;
  }
  if (at !== dataBytes)
    problems.push(
      at < dataBytes
        ? `the tensors end at byte ${at} of the data section, but the file has ${dataBytes - at} more byte(s) (data section ${dataBytes} bytes from offset ${dataStart}, file ${fileBytes} bytes): bytes appended, or the header length is wrong`
        : `the tensors need ${at} bytes of data, the file has ${dataBytes}`,
    );
  if (problems.length) fail(path, "shard does not match its header", problems);
  return tensors;
}
