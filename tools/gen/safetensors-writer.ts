// Writes safetensors files exactly as the release's shards are laid out (MODEL.md §1):
// 8-byte little-endian header length N, N bytes of JSON (padded with spaces to a multiple of 8,
// as the reference `safetensors` library does), then the data section; each tensor's
// `data_offsets` [a, b) is relative to byte 8 + N. Tensors are written IN THE GIVEN ORDER and
// tile the data section with no gaps: the order is the layout the engine's contiguity checks see.
//
// Two writers: `writeSafetensors` for tensors already in memory, and `SafetensorsStreamWriter`
// for multi-GB shards (`slice` preset): the header is computed from shapes alone, then data is
// appended chunk by chunk, so memory stays bounded by one chunk.
import { closeSync, openSync, write, writeSync } from "node:fs";

export type GenDType = "BF16" | "F32" | "U8";

export interface GenTensor {
  name: string;
  dtype: GenDType;
  shape: number[];
  data: Uint8Array; // numel × dtype size bytes, little-endian
}

/** A tensor's header entry, before its data exists. */
export interface GenTensorHeader {
  name: string;
  dtype: GenDType;
  shape: number[];
}

export const DTYPE_BYTES: Record<GenDType, number> = { BF16: 2, F32: 4, U8: 1 };

export function tensorBytes(t: GenTensorHeader): number {
  let n = DTYPE_BYTES[t.dtype];
  for (const d of t.shape) n *= d;
  return n;
}

/** The full header (8-byte length + padded JSON) for tensors laid out in order; also each
 *  tensor's [begin, end) within the data section. */
export function buildHeader(
  tensors: GenTensorHeader[],
  metadata?: Record<string, string>,
): { header: Uint8Array; offsets: Array<[number, number]>; dataBytes: number } {
  const json: Record<string, unknown> = {};
  if (metadata) json.__metadata__ = metadata;
  const offsets: Array<[number, number]> = [];
  const seen = new Set<string>();
  let at = 0;
  for (const t of tensors) {
    if (seen.has(t.name)) throw new Error(`duplicate tensor name ${t.name}`);
    if (t.name === "__metadata__") throw new Error("a tensor cannot be named __metadata__");
    seen.add(t.name);
    const n = tensorBytes(t);
    offsets.push([at, at + n]);
    json[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + n] };
    at += n;
  }
  let text = JSON.stringify(json);
  const raw = new TextEncoder().encode(text);
  const padded = Math.ceil(raw.length / 8) * 8;
  text += " ".repeat(padded - raw.length);
  const body = new TextEncoder().encode(text);
  const header = new Uint8Array(8 + body.length);
  new DataView(header.buffer).setBigUint64(0, BigInt(body.length), true);
  header.set(body, 8);
  return { header, offsets, dataBytes: at };
}

/** Writes a whole safetensors file from in-memory tensors, in the given order. */
export function writeSafetensors(path: string, tensors: GenTensor[], metadata?: Record<string, string>): void {
  const w = new SafetensorsStreamWriter(path, tensors, metadata);
  try {
    for (const t of tensors) w.append(t.data);
    w.close();
  } catch (e) {
    w.abort();
    throw e;
  }
}

/**
 * Streams one safetensors file: header first (from shapes), then tensor data appended in header
 * order, in chunks of any size (a chunk may span tensors). `close()` refuses to finish a file
 * whose data does not exactly fill the header's layout.
 */
export class SafetensorsStreamWriter {
  private fd: number | null;
  private written = 0; // data-section bytes written (or queued, for appendPipelined) so far
  private pending: Promise<void> = Promise.resolve();
  readonly dataBytes: number;
  readonly headerBytes: number;
  readonly offsets: Array<[number, number]>;

  constructor(
    readonly path: string,
    readonly tensors: GenTensorHeader[],
    metadata?: Record<string, string>,
  ) {
    const { header, offsets, dataBytes } = buildHeader(tensors, metadata);
    this.offsets = offsets;
    this.dataBytes = dataBytes;
    this.headerBytes = header.length;
    this.fd = openSync(path, "w");
    this.writeAll(header);
  }

  /** Index of the tensor the next appended byte belongs to (tensors.length when full). */
  get currentTensor(): number {
    let i = 0;
    while (i < this.offsets.length && this.offsets[i]![1] <= this.written) i++;
    return i;
  }

  append(chunk: Uint8Array): void {
    if (this.written + chunk.length > this.dataBytes)
      throw new Error(`${this.path}: appending ${chunk.length} bytes overflows the data section (${this.written}/${this.dataBytes})`);
    this.writeAll(chunk);
    this.written += chunk.length;
  }

  /**
   * Pipelined append for big files: starts writing `chunk` (positional, on the I/O thread pool)
   * once the previous pipelined write has finished, and returns then, so the caller generates the
   * next chunk while this one is written. At most two chunks are alive at a time. Call `flush()`
   * before `close()`. Do not mix with `append` on the same writer.
   */
  async appendPipelined(chunk: Uint8Array): Promise<void> {
    if (this.written + chunk.length > this.dataBytes)
      throw new Error(`${this.path}: appending ${chunk.length} bytes overflows the data section (${this.written}/${this.dataBytes})`);
    const position = this.headerBytes + this.written;
    this.written += chunk.length;
    await this.pending;
    const fd = this.fd;
    if (fd === null) throw new Error(`${this.path}: writer is closed`);
    this.pending = writeAllAt(fd, chunk, position);
  }

  /** Waits for the last pipelined write. */
  async flush(): Promise<void> {
    await this.pending;
  }

  close(): void {
    if (this.fd === null) return;
    if (this.written !== this.dataBytes) {
      this.abort();
      throw new Error(`${this.path}: closed after ${this.written} of ${this.dataBytes} data bytes`);
    }
    closeSync(this.fd);
    this.fd = null;
  }

  /** Closes without the completeness check (the file is left truncated; callers delete or rewrite it). */
  abort(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  private writeAll(bytes: Uint8Array): void {
    if (this.fd === null) throw new Error(`${this.path}: writer is closed`);
    let off = 0;
    while (off < bytes.length) off += writeSync(this.fd, bytes, off, bytes.length - off);
  }
}

/** Writes all of `bytes` at `position`, retrying short writes. */
function writeAllAt(fd: number, bytes: Uint8Array, position: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const step = (off: number) => {
      if (off >= bytes.length) return resolve();
      write(fd, bytes, off, bytes.length - off, position + off, (err, n) => (err ? reject(err) : step(off + n)));
    };
    step(0);
  });
}
