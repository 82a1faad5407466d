// What the pack writers (pack.ts: int8/int4, pack-exact.ts: exact) and `k3 verify`'s reading of a
// pack (pack.ts verifyPack) share: walking a pack layout block by block (pieces.ts's grid, the
// checksum unit) with the shard rows each block is made from read into C memory.
import { closeSync, openSync, readSync } from "node:fs";
import { toArrayBuffer } from "bun:ffi";
import type { ModelConfig } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import type { Kernels } from "../kernels.ts";
import { CBuffers, type Addr } from "../model/cmem.ts";
import { unitWalk } from "../model/walk.ts";
import { blocksOf, DEFAULT_BLOCK_BYTES, type TrunkBlock, type TrunkTensor } from "./pieces.ts";

/** A C buffer's first `bytes` as a Uint8Array (valid while the buffer lives). */
export const cView = (ptr: Addr | number, bytes: number): Uint8Array => (bytes > 0 ? new Uint8Array(toArrayBuffer(ptr as Addr, 0, bytes)) : new Uint8Array(0));

/** One block of a pack's grid: the packed tensor, its exact source, and the block. */
export interface PackBlock {
  t: TrunkTensor;
  b: TrunkBlock;
  /** Where its exact rows are in the shards; undefined for a tensor made from no one block of
   *  them (the exact pack's escape tables). */
  src?: { file: string; offset: number; bytes: number };
}

/**
 * Every block of the pack layout `tensors` (pieces.ts's grid: the checksum unit the engine checks)
 * with the shard bytes it is made from, and two buffers big enough for any block's source and
 * packed bytes: what writing a pack and verifying one both walk. `each` gets the source rows
 * read into `src` (ptr, view; undefined when the block has no source); a short read is an IO
 * error naming the tensor.
 */
export function walkPackBlocks(
  k: Kernels,
  cfg: ModelConfig,
  exact: TrunkTensor[][],
  tensors: TrunkTensor[][],
  each: (blk: PackBlock, src: { ptr: Addr; view: Uint8Array } | undefined, dst: Addr, view: (ptr: number, bytes: number) => Uint8Array) => void,
): void {
  const source = new Map(exact.flat().map((t) => [t.name, t]));
  const sliceable = new Set(exact.flatMap((_, u) => unitWalk(cfg, u).filter((m) => m.sliceable).map((m) => m.suffix)));
  const blocks: PackBlock[] = tensors.flat().flatMap((t) => {
    const s = source.get(t.name);
    const rowSrc = s ? s.bytes / (t.shape[0] ?? 1) : 0;
    return blocksOf(t, sliceable.has(t.name), DEFAULT_BLOCK_BYTES).map((b) => ({ t, b, src: s && { file: s.file, offset: s.offset + b.r0 * rowSrc, bytes: (b.r1 - b.r0) * rowSrc } }));
  });
  const mem = new CBuffers(k);
  const fds = new Map<string, number>();
  const fd = (f: string) => {
    let d = fds.get(f);
    if (d === undefined) fds.set(f, (d = openSync(f, "r")));
    return d;
  };
  try {
    const src = mem.alloc(Math.max(64, ...blocks.map((x) => x.src?.bytes ?? 0)), "pack source rows");
    const dst = mem.alloc(Math.max(64, ...blocks.map((x) => x.b.parts.reduce((a, p) => a + p.bytes, 0))), "pack output rows");
    for (const blk of blocks) {
      if (!blk.src) {
        each(blk, undefined, dst.ptr, cView);
        continue;
      }
      const v = cView(src.ptr, blk.src.bytes);
      const got = readSync(fd(blk.src.file), v, 0, blk.src.bytes, blk.src.offset);
      if (got !== blk.src.bytes) throw new K3Error("IO", `${blk.src.file}: short read of ${blk.t.name} at offset ${blk.src.offset} (${got} of ${blk.src.bytes} bytes)`);
      each(blk, { ptr: src.ptr, view: v }, dst.ptr, cView);
    }
  } finally {
    for (const d of fds.values()) closeSync(d);
    mem.free();
  }
}
