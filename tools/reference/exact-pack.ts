// An independent reader of the exact trunk pack (`k3 pack --trunk exact`, issue 25), written from
// its documented layout (docs/TRUNK.md "The exact trunk", kernels/k3.h) and importing nothing from
// src/: it decodes every BX4 matrix of the pack with tools/reference/bx4.ts and compares it with
// the shard's bf16 bytes, compares every copied tensor byte for byte, and codes every matrix again
// from the shard to check that the pack holds exactly what the format says (rows, table order,
// escapes). Small models only (whole tensors in memory, the decode in TypeScript).
//
//   bun tools/reference/exact-pack.ts MODEL_DIR [PACK]     (PACK: default MODEL_DIR/k3-trunk-exact.k3pack)
//
// The container: "K3PACK01" | data | header JSON | u64 LE header length | u32 LE CRC-32C of the
// header | 4 zero bytes | "K3PACK01". The header's `tensors` lists, per unit, each tensor's name,
// dtype, shape, offset and bytes: BX4 (row records), BX4E (a matrix's escape table, named
// `<matrix>#escapes`: u32 [rows + 1] index, then the entries), or a dtype copied from the shards.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { decodeBx4, encodeBx4 } from "./bx4.ts";
import { SafetensorsDir } from "./safetensors.ts";

const MAGIC = "K3PACK01";
const TAIL = 24;

export interface ExactPackCheck {
  coded: number; // BX4 matrices decoded to the shards' bytes and re-coded to the pack's bytes
  copied: number; // tensors equal to the shards' bytes
  weights: number; // weights of the coded matrices
  codedBytes: number; // their rows and escape tables
  escapes: number;
}

interface HeaderTensor {
  name: string;
  dtype: string;
  shape: number[];
  offset: number;
  bytes: number;
}

/** The pack's header (validated only as far as reading it needs). */
export function readExactHeader(pack: Uint8Array): { trunk: string; coding: string; tensors: HeaderTensor[][] } {
  const buf = Buffer.from(pack.buffer, pack.byteOffset, pack.byteLength);
  if (buf.toString("latin1", 0, 8) !== MAGIC || buf.toString("latin1", buf.length - 8) !== MAGIC) throw new Error("not a k3 pack (magic)");
  const hlen = Number(buf.readBigUInt64LE(buf.length - TAIL));
  return JSON.parse(buf.toString("utf8", buf.length - TAIL - hlen, buf.length - TAIL));
}

/** Checks every tensor of the exact pack against the model's shards; throws naming the first difference. */
export function checkExactPack(modelDir: string, packPath = join(modelDir, "k3-trunk-exact.k3pack")): ExactPackCheck {
  const pack = new Uint8Array(readFileSync(packPath));
  const h = readExactHeader(pack);
  if (h.trunk !== "exact" || h.coding !== "BX4") throw new Error(`${packPath}: trunk ${h.trunk}, coding ${h.coding}; want exact, BX4`);
  const model = SafetensorsDir.open(modelDir);
  const all = h.tensors.flat();
  const byName = new Map(all.map((t) => [t.name, t]));
  const bytesOf = (t: HeaderTensor) => pack.slice(t.offset, t.offset + t.bytes);
  const out: ExactPackCheck = { coded: 0, copied: 0, weights: 0, codedBytes: 0, escapes: 0 };
  const equal = (a: Uint8Array, b: Uint8Array) => a.length === b.length && Buffer.from(a).equals(Buffer.from(b));
  for (const t of all) {
    if (t.dtype === "BX4E") continue; // read with its matrix
    const shard = model.read(t.name);
    if (t.dtype !== "BX4") {
      if (!equal(bytesOf(t), shard)) throw new Error(`${t.name}: the pack's copy differs from the shard`);
      out.copied++;
      continue;
    }
    const [rows, cols] = t.shape as [number, number];
    const esc = byName.get(`${t.name}#escapes`);
    if (!esc) throw new Error(`${t.name}: no escape table in the pack`);
    const table = new Uint32Array(bytesOf(esc).buffer);
    const m = { records: bytesOf(t), index: table.subarray(0, rows + 1), entries: table.subarray(rows + 1) };
    const decoded = decodeBx4(m, rows, cols);
    if (!equal(new Uint8Array(decoded.buffer), shard)) {
      const w = new Uint16Array(shard.buffer, shard.byteOffset, rows * cols);
      const i = decoded.findIndex((v, j) => v !== w[j]);
      throw new Error(`${t.name}: weight ${i} (row ${Math.floor(i / cols)}, column ${i % cols}) decodes to 0x${decoded[i]!.toString(16)}, the shard holds 0x${w[i]!.toString(16)}`);
    }
    const again = encodeBx4(new Uint16Array(shard.buffer, shard.byteOffset, rows * cols), rows, cols);
    if (!equal(again.records, m.records) || !equal(new Uint8Array(again.index.buffer), new Uint8Array(m.index.slice().buffer)) || !equal(new Uint8Array(again.entries.buffer), new Uint8Array(m.entries.slice().buffer)))
      throw new Error(`${t.name}: decodes right, but the pack's rows or escapes are not what the format codes it to`);
    out.coded++;
    out.weights += rows * cols;
    out.codedBytes += t.bytes + esc.bytes;
    out.escapes += m.entries.length;
  }
  return out;
}

if (import.meta.main) {
  const [dir, pack] = process.argv.slice(2);
  if (!dir) {
    console.error("usage: bun tools/reference/exact-pack.ts MODEL_DIR [PACK]");
    process.exit(2);
  }
  const r = checkExactPack(dir, pack);
  console.log(`${r.coded} BX4 matrices decode to the shards' bytes and re-code to the pack's; ${r.copied} tensors copied exactly; ${(r.codedBytes / r.weights).toFixed(4)} bytes per coded weight, ${r.escapes} escapes`);
}
