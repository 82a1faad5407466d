// The draft model's weights in C memory: every tensor of the draft read once at open (it is small
// next to the target: 3.43 GiB bf16 on K3, 0.9 GiB as int4), as released (bf16) or from a packed
// draft (`k3 pack --draft int8|int4`: its matrices in the compact trunk's int8/int4 groups,
// src/memory/draft-pack.ts). The draft's numbers never decide an output, only which drafts are
// tried, so a lossy pack changes speed, never a token.
//
// The embedding: the target's rows are shared when the draft's table equals the target's
// (src/checkpoint/draft.ts), else the draft's own table is read here too.
import { closeSync, openSync, readSync } from "node:fs";
import { toArrayBuffer } from "bun:ffi";
import type { TensorEntry } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import type { Kernels } from "../kernels.ts";
import { at, CBuffers, type Addr } from "./cmem.ts";
import type { DraftTensorSource, TensorRef } from "./weights.ts";

export class DraftWeights {
  private mem: CBuffers;
  private refs = new Map<string, TensorRef>();
  /** Bytes read at open. */
  readonly bytesRead: number;

  constructor(
    private k: Kernels,
    sources: DraftTensorSource[],
    /** The draft's own embedding table, when it does not share the target's. */
    ownEmbedding?: TensorEntry,
    /** CRC-32C each tensor (and `name:scales`) must have as read: a pack's table; none for the released file. */
    crcs?: Record<string, number>,
  ) {
    this.mem = new CBuffers(k);
    let read = 0;
    const fds = new Map<string, number>();
    const check = (key: string, file: string, ptr: Addr, bytes: number) => {
      const want = crcs?.[key];
      if (want !== undefined && k.k3_crc32c(0, ptr, bytes) !== want)
        throw new K3Error("CHECKPOINT", `${file}: ${key} fails its checksum (the packed draft is damaged)`, ["make it again: k3 pack DRAFT_DIR --draft int8|int4"]);
    };
    const fill = (file: string, ptr: Addr, bytes: number, offset: number, what: string) => {
      let fd = fds.get(file);
      if (fd === undefined) fds.set(file, (fd = openSync(file, "r")));
      const view = new Uint8Array(toArrayBuffer(ptr, 0, bytes));
      for (let done = 0; done < bytes; ) {
        const n = readSync(fd, view, done, bytes - done, offset + done);
        if (n <= 0) throw new K3Error("IO", `${file}: short read of ${what} at offset ${offset + done} (wanted ${bytes - done} more bytes)`);
        done += n;
      }
      read += bytes;
    };
    try {
      const all = ownEmbedding ? [...sources, { ...ownEmbedding, dtype: ownEmbedding.dtype as TensorRef["dtype"] }] : sources;
      for (const t of all) {
        const buf = this.mem.alloc(t.bytes, `draft ${t.name}`);
        fill(t.file, buf.ptr, t.bytes, t.offset, `draft tensor ${t.name}`);
        check(t.name, t.file, buf.ptr, t.bytes);
        let scales: Addr | undefined;
        if ("scales" in t && t.scales) {
          const sb = this.mem.alloc(t.scales.bytes, `draft ${t.name} scales`);
          fill(t.file, sb.ptr, t.scales.bytes, t.scales.offset, `draft tensor ${t.name}'s scales`);
          check(`${t.name}:scales`, t.file, sb.ptr, t.scales.bytes);
          scales = sb.ptr;
        }
        this.refs.set(t.name, { name: `draft ${t.name}`, ptr: buf.ptr, dtype: t.dtype, shape: t.shape, bytes: t.bytes, scales });
      }
    } catch (err) {
      this.mem.free();
      throw err;
    } finally {
      for (const fd of fds.values()) closeSync(fd);
    }
    this.bytesRead = read;
  }

  t(name: string): TensorRef {
    const r = this.refs.get(name);
    if (!r) throw new K3Error("INTERNAL", `draft tensor ${name} is not loaded`);
    return r;
  }

  /** Row `id` of the draft's own embedding as E f32 at dst (only when it keeps its own). */
  embedRow(id: number, dst: Addr): void {
    const e = this.t("embed_tokens.weight");
    const E = e.shape[1]!;
    this.k.k3_bf16_to_f32(at(e.ptr, id * E * 2), dst, E);
  }

  get hasOwnEmbedding(): boolean {
    return this.refs.has("embed_tokens.weight");
  }

  /** Format of the draft's matrices: "bf16" as released, or the pack's. */
  get format(): "bf16" | "int8" | "int4" {
    const d = this.t("fc.weight").dtype;
    return d === "Q8" ? "int8" : d === "Q4" ? "int4" : "bf16";
  }

  get allocatedBytes(): number {
    return this.mem.totalBytes;
  }

  free(): void {
    this.mem.free();
    this.refs.clear();
  }
}
