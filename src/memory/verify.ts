// `k3 verify`: is every shard exactly as long as its header says, and (optionally) a CRC-32C per
// routed expert and per trunk unit, recorded once so `--verify` can check each read during
// generation (STREAMING.md §7: a truncated or spliced file must stop generation and name the
// tensor, never answer from the wrong bytes).
import { accessSync, constants, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { readSafetensorsHeader } from "../checkpoint/safetensors.ts";
import { expertTensorNames } from "../checkpoint/shapes.ts";
import { K3Error } from "../errors.ts";
import type { Kernels } from "../kernels.ts";
import { CBuffers } from "../model/cmem.ts";
import { ALIGN, buildReadPlan, type ReadPlan } from "./readplan.ts";
import { trunkUnitEntries } from "./units.ts";

export const CHECKSUM_FILE = "k3-checksums.json";
/** -2: CRC-32C per expert and trunk unit (-1 was the zlib CRC-32). */
const CHECKSUM_FORMAT = "k3-checksums-2";

export interface ShardCheck {
  file: string;
  bytes: number;
  expected: number; // 8 + header + end of the last tensor
  ok: boolean;
}

export interface Checksums {
  /** "layer:expert" → CRC-32C of the expert's six tensors' payload, in read-plan order. */
  experts: Map<string, number>;
  /** trunk unit (layer index; numLayers = head) → CRC-32C of its payload, in read-plan order. */
  trunk: Map<number, number>;
}

/** Each shard's size must be exactly the end of its data section (no truncation, no splice). */
export function checkShardSizes(ckpt: Checkpoint): ShardCheck[] {
  return ckpt.shards.map((s) => {
    const h = readSafetensorsHeader(s.file);
    const end = h.tensors.reduce((m, t) => Math.max(m, t.end), 0);
    const expected = h.dataStart + end;
    return { file: s.file, bytes: h.fileBytes, expected, ok: h.fileBytes === expected };
  });
}

/** Where the checksums of a model live: next to it, or in the cache when the folder is read-only. */
export function checksumPath(dir: string, forWrite: boolean): string {
  const local = join(dir, CHECKSUM_FILE);
  const cache = join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "k3", "checksums", `${Bun.hash(resolve(dir)).toString(16)}.json`);
  if (!forWrite) return existsSync(local) ? local : cache;
  try {
    accessSync(dir, constants.W_OK);
    return local;
  } catch {
    return cache;
  }
}

/** CRC-32C of a read plan's payload inside a buffer (the bytes the model will use). CRC-32C, not
 *  the zlib CRC-32: SSE4.2 computes it at ~10 GB/s here against ~2 GB/s for tables, so checking
 *  every read keeps up with the disk. */
export function payloadCrc(k: Kernels, plan: ReadPlan, base: number): number {
  let crc = 0;
  for (const r of plan.reads) crc = k.k3_crc32c(crc, (base + r.dst + (r.need - r.payload)) as any, r.payload);
  return crc;
}

/** Read every expert and trunk unit once and record their CRC-32s. */
export function recordChecksums(k: Kernels, ckpt: Checkpoint, onProgress?: (done: number, total: number) => void): { path: string; sums: Checksums } {
  const cfg = ckpt.config;
  const mem = new CBuffers(k);
  const fds = new Map<string, number>();
  const fd = (f: string) => {
    let d = fds.get(f);
    if (d === undefined) {
      d = k.k3_file_open(f, 0);
      if (d < 0) throw new K3Error("IO", `cannot open ${f} (errno ${-d})`);
      fds.set(f, d);
    }
    return d;
  };
  const sums: Checksums = { experts: new Map(), trunk: new Map() };
  try {
    const units = trunkUnitEntries(ckpt).map((list) => buildReadPlan(list));
    const experts: [number, number][] = [];
    for (let L = cfg.firstKDense; L < cfg.numLayers; L++) for (let e = 0; e < cfg.numExperts; e++) experts.push([L, e]);
    const total = units.length + experts.length;
    const largest = Math.max(...units.map((p) => p.slotBytes), Math.ceil(ckpt.layout.census.expertBytes / ALIGN) * ALIGN + 7 * ALIGN);
    const buf = mem.alloc(largest, "verify buffer", ALIGN);
    const readAll = (plan: ReadPlan, what: string) => {
      for (const r of plan.reads) {
        const res = Number(k.k3_read_full(fd(r.file), (buf.ptr + r.dst) as any, r.len, r.off, r.need));
        if (res < r.need) throw new K3Error("IO", `short or failed read of ${what}: ${r.file} at offset ${r.off} (result ${res})`);
      }
      return payloadCrc(k, plan, buf.ptr);
    };
    let done = 0;
    units.forEach((plan, u) => {
      sums.trunk.set(u, readAll(plan, u === cfg.numLayers ? "the head" : `layer ${u}'s trunk`));
      onProgress?.(++done, total);
    });
    for (const [L, e] of experts) {
      const plan = buildReadPlan(expertTensorNames(L, e).map((n) => ckpt.tensors.get(n)!));
      sums.experts.set(`${L}:${e}`, readAll(plan, `expert ${e} of layer ${L}`));
      onProgress?.(++done, total);
    }
  } finally {
    for (const d of fds.values()) k.k3_file_close(d);
    mem.free();
  }
  const path = checksumPath(ckpt.dir, true);
  mkdirSync(join(path, ".."), { recursive: true });
  const body = {
    format: CHECKSUM_FORMAT,
    model: resolve(ckpt.dir),
    shards: ckpt.shards.map((s) => ({ file: s.file, bytes: s.bytes })),
    trunk: Object.fromEntries(sums.trunk),
    experts: Object.fromEntries(sums.experts),
  };
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(body));
  renameSync(tmp, path);
  return { path, sums };
}

/** The recorded checksums of a model; refuses when none exist or they belong to other shards. */
export function loadChecksums(ckpt: Checkpoint): Checksums {
  const path = checksumPath(ckpt.dir, false);
  if (!existsSync(path)) throw new K3Error("VERIFY", `no checksums recorded for ${ckpt.dir}: run \`k3 verify ${ckpt.dir} --record\` first`);
  let body: any;
  try {
    body = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new K3Error("VERIFY", `${path}: not a k3 checksum file (${(err as Error).message})`);
  }
  if (body?.format === "k3-checksums-1") throw new K3Error("VERIFY", `${path} was recorded by an older k3 (CRC-32): re-run \`k3 verify ${ckpt.dir} --record\``);
  if (body?.format !== CHECKSUM_FORMAT) throw new K3Error("VERIFY", `${path}: not a k3 checksum file`);
  const recorded = new Map<string, number>((body.shards ?? []).map((s: any) => [s.file, s.bytes]));
  for (const s of ckpt.shards)
    if (recorded.get(s.file) !== s.bytes) throw new K3Error("VERIFY", `${path} was recorded for other shards (${s.file} changed): re-run k3 verify --record`);
  return {
    experts: new Map(Object.entries(body.experts ?? {}).map(([k, v]) => [k, Number(v)])),
    trunk: new Map(Object.entries(body.trunk ?? {}).map(([k, v]) => [Number(k), Number(v)])),
  };
}
