// A minimal, strict safetensors reader for the float64 reference (MODEL.md §1). Independent of
// src/checkpoint/ on purpose: two readers written from the same spec must agree.
//
// File layout: u64 LE header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [a, b)},
// "__metadata__": {...}}, then the data section; offsets are relative to byte 8 + N.
// Every tensor is validated when its shard is opened: known dtype, (b − a) = numel × dtype size,
// 8 + N + b ≤ file size, and no two tensors overlap.
import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync, readdirSync } from "node:fs";
import { join } from "node:path";

export const DTYPE_BYTES: Record<string, number> = {
  BOOL: 1, U8: 1, I8: 1, F8_E4M3: 1, F8_E5M2: 1,
  U16: 2, I16: 2, F16: 2, BF16: 2,
  U32: 4, I32: 4, F32: 4,
  U64: 8, I64: 8, F64: 8,
};

export interface TensorEntry {
  name: string;
  dtype: string;
  shape: number[];
  file: string; // absolute path of the shard
  offset: number; // absolute byte offset of the first element in `file`
  bytes: number;
}

/** Parse and validate one shard's header. Throws an Error naming the file and tensor. */
export function readShardHeader(file: string): TensorEntry[] {
  const fd = openSync(file, "r");
  try {
    const size = fstatSync(fd).size;
    const lenBuf = Buffer.alloc(8);
    if (readSync(fd, lenBuf, 0, 8, 0) !== 8) throw new Error(`${file}: shorter than 8 bytes`);
    const n = Number(lenBuf.readBigUInt64LE(0));
    if (8 + n > size) throw new Error(`${file}: header length ${n} runs past the file (${size} bytes)`);
    const json = Buffer.alloc(n);
    if (readSync(fd, json, 0, n, 8) !== n) throw new Error(`${file}: short read of the header`);
    const header = JSON.parse(json.toString("utf8")) as Record<string, any>;
    const entries: TensorEntry[] = [];
    for (const [name, t] of Object.entries(header)) {
      if (name === "__metadata__") continue;
      const elt = DTYPE_BYTES[t?.dtype];
      if (!elt) throw new Error(`${file}: tensor ${name} has unknown dtype ${t?.dtype}`);
      const shape = t.shape as number[];
      const [a, b] = t.data_offsets as [number, number];
      const numel = shape.reduce((p, d) => p * d, 1);
      if (b - a !== numel * elt)
        throw new Error(`${file}: tensor ${name} spans ${b - a} bytes, shape [${shape}] ${t.dtype} needs ${numel * elt}`);
      if (a < 0 || 8 + n + b > size) throw new Error(`${file}: tensor ${name} [${a}, ${b}) runs past the file`);
      entries.push({ name, dtype: t.dtype, shape, file, offset: 8 + n + a, bytes: b - a });
    }
    const sorted = [...entries].sort((x, y) => x.offset - y.offset);
    for (let i = 1; i < sorted.length; i++)
      if (sorted[i].offset < sorted[i - 1].offset + sorted[i - 1].bytes)
        throw new Error(`${file}: tensors ${sorted[i - 1].name} and ${sorted[i].name} overlap`);
    return entries;
  } finally {
    closeSync(fd);
  }
}

/** All tensors of a checkpoint directory: via model.safetensors.index.json, else every *.safetensors. */
export class SafetensorsDir {
  private constructor(private readonly byName: Map<string, TensorEntry>) {}

  static open(dir: string): SafetensorsDir {
    const indexPath = join(dir, "model.safetensors.index.json");
    let shards: string[];
    let weightMap: Record<string, string> | undefined;
    if (existsSync(indexPath)) {
      weightMap = JSON.parse(readFileSync(indexPath, "utf8")).weight_map;
      if (!weightMap) throw new Error(`${indexPath}: no weight_map`);
      shards = [...new Set(Object.values(weightMap))];
    } else {
      shards = readdirSync(dir).filter((f) => f.endsWith(".safetensors"));
    }
    if (shards.length === 0) throw new Error(`${dir}: no safetensors shards`);
    const byName = new Map<string, TensorEntry>();
    for (const shard of shards.sort()) {
      for (const e of readShardHeader(join(dir, shard))) {
        if (byName.has(e.name)) throw new Error(`${dir}: tensor ${e.name} appears in two shards`);
        byName.set(e.name, e);
      }
    }
    if (weightMap) {
      for (const [name, shard] of Object.entries(weightMap)) {
        const e = byName.get(name);
        if (!e || e.file !== join(dir, shard)) throw new Error(`${indexPath}: ${name} is not in ${shard}`);
      }
    }
    return new SafetensorsDir(byName);
  }

  names(): string[] {
    return [...this.byName.keys()];
  }

  entry(name: string): TensorEntry {
    const e = this.byName.get(name);
    if (!e) throw new Error(`tensor ${name} is missing from the checkpoint`);
    return e;
  }

  /** Raw little-endian bytes of one tensor (a fresh, private buffer). */
  read(name: string): Uint8Array {
    const e = this.entry(name);
    const out = new Uint8Array(e.bytes);
    const fd = openSync(e.file, "r");
    try {
      let done = 0;
      while (done < e.bytes) {
        const got = readSync(fd, out, done, e.bytes - done, e.offset + done);
        if (got <= 0) throw new Error(`${e.file}: short read of ${name}`);
        done += got;
      }
    } finally {
      closeSync(fd);
    }
    return out;
  }
}
