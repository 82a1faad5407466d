// k3_mem_alloc: zeroed, aligned, small (heap) and large (mapped) paths, freed without harm.
import { expect, test } from "bun:test";
import { toArrayBuffer } from "bun:ffi";
import { loadKernels } from "../src/kernels.ts";

test("allocations are zeroed and aligned on both paths; free is safe", () => {
  const k = loadKernels();
  for (const [bytes, align] of [[100, 64], [5000, 4096], [8 << 20, 4096], [(4 << 20) + 3, 64]] as const) {
    const p = Number(k.k3_mem_alloc(bytes, align));
    expect(p).toBeGreaterThan(0);
    expect(p % align).toBe(0);
    const view = new Uint8Array(toArrayBuffer(p as any, 0, bytes));
    expect(view.every((b) => b === 0)).toBe(true);
    view.fill(7); // writable to the last byte
    expect(view[bytes - 1]).toBe(7);
    k.k3_mem_free(p as any);
  }
  expect(Number(k.k3_mem_alloc(16, 3))).toBe(0); // non-power-of-two alignment refused
});
