// Buffers in C memory (k3_mem_alloc): kernels get raw addresses without a ptr() call per use, and
// buffers the C side keeps between calls (model state, caches) can never be moved or collected by
// the JS GC. Each set is freed by its owner (CBuffers.free); the one backstop is the engine's
// finalizer for a session whose owner dropped it without close() (src/engine/session.ts).
import { toArrayBuffer, type Pointer } from "bun:ffi";
import { K3Error } from "../errors.ts";
import type { Kernels } from "../kernels.ts";

/** A C address as the bindings take it (a 48-bit number). */
export type Addr = Pointer;

/** `base` + `bytes` as an address (row t of a [T][n] f32 buffer: at(buf.ptr, t·n·4)). */
export const at = (base: number, bytes = 0): Addr => (base + bytes) as Addr;

export interface CBuf {
  ptr: Addr; // raw address, 64-byte aligned
  bytes: number;
  f32(): Float32Array; // a view (for the few places JS reads results: logits, router output)
  i32(): Int32Array;
}

/** Bytes an allocation of `bytes` takes: whole 64-byte lines, at least one. The planner sums
 *  with this rule too, so its figures are what CBuffers really allocates. */
export const allocationBytes = (bytes: number): number => Math.max(64, Math.ceil(bytes / 64) * 64);

/** `bytes` of `buf` from byte `offset` (64-byte aligned) as a buffer of its own: freed with `buf`,
 *  never by itself (CBuffers.free knows only what it allocated). */
export function viewOf(buf: CBuf, offset: number, bytes: number): CBuf {
  if (offset % 64 !== 0 || offset < 0 || offset + bytes > buf.bytes) throw new K3Error("INTERNAL", `a view of ${bytes} bytes at ${offset} does not fit a ${buf.bytes}-byte buffer`);
  return bufAt(at(buf.ptr, offset), bytes);
}

/** The CBuf of `bytes` at `p`. Views are created on demand: a JS ArrayBuffer over C memory has no finalizer. */
const bufAt = (p: Addr, bytes: number): CBuf => ({
  ptr: p,
  bytes,
  f32: () => new Float32Array(toArrayBuffer(p, 0, bytes)),
  i32: () => new Int32Array(toArrayBuffer(p, 0, bytes)),
});

/** C bytes allocated through CBuffers in this process and not yet freed (every k3 C allocation
 *  goes through CBuffers): tests hold owners to freeing what they allocated. */
let liveBytes = 0;
export const liveCBytes = (): number => liveBytes;

/** A set of C allocations owned together (one model's scratch, one session's state). */
export class CBuffers {
  private bufs: CBuf[] = [];
  constructor(private k: Kernels) {}

  alloc(bytes: number, what: string, align = 64): CBuf {
    const size = allocationBytes(bytes);
    const p = Number(this.k.k3_mem_alloc(size, align)) as Addr; // null → 0
    if (!p) throw new K3Error("INTERNAL", `out of memory allocating ${size} bytes for ${what}`);
    const buf = bufAt(p, size);
    this.bufs.push(buf);
    liveBytes += size;
    return buf;
  }

  floats(n: number, what: string): CBuf {
    return this.alloc(n * 4, what);
  }

  get totalBytes(): number {
    return this.bufs.reduce((s, b) => s + b.bytes, 0);
  }

  free(): void {
    const bufs = this.bufs;
    this.bufs = [];
    let refused = 0;
    for (const b of bufs) {
      if (this.k.k3_mem_free(b.ptr) !== 0) refused++;
      liveBytes -= b.bytes;
    }
    // k3_mem_free refuses a pointer it no longer holds (nothing is touched): a double free here.
    if (refused) throw new K3Error("INTERNAL", `${refused} C buffer${refused > 1 ? "s were" : " was"} freed twice`);
  }
}
