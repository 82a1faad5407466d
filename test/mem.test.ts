// k3_mem_alloc: zeroed, aligned, small (heap) and large (mapped) paths, freed without harm.
import { expect, test } from "bun:test";
import { toArrayBuffer } from "bun:ffi";
import { existsSync, readFileSync } from "node:fs";
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

/** The /proc/self/smaps entry of the mapping that holds address p: its start and VmFlags. */
function mappingOf(p: number): { start: number; flags: string[] } | undefined {
  const text = readFileSync("/proc/self/smaps", "utf8");
  for (const entry of text.split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)) {
    const [range] = entry.split(" ", 1);
    const [lo, hi] = range!.split("-").map((h) => parseInt(h, 16));
    if (p >= lo! && p < hi!) return { start: lo!, flags: /VmFlags:(.*)/.exec(entry)?.[1]!.trim().split(/\s+/) ?? [] };
  }
  return undefined;
}

// Large buffers (the resident weights among them) ask for transparent huge pages: decode's matmuls
// stream them (kernels/k3_mem.c). The flag is what the kernel records for madvise(MADV_HUGEPAGE),
// set whether or not it found huge pages free, so the test does not depend on fragmentation.
const thp = process.platform === "linux" && existsSync("/sys/kernel/mm/transparent_hugepage/enabled");
test.skipIf(!thp)("large allocations are 2 MiB-aligned mappings that ask for huge pages; small ones are not", () => {
  const k = loadKernels();
  const big = Number(k.k3_mem_alloc((8 << 20) + 3, 4096));
  const small = Number(k.k3_mem_alloc(100_000, 64));
  try {
    const m = mappingOf(big)!;
    expect(m.start % (2 << 20)).toBe(0);
    expect(m.flags).toContain("hg");
    expect(mappingOf(small)?.flags ?? []).not.toContain("hg");
  } finally {
    k.k3_mem_free(big as any);
    k.k3_mem_free(small as any);
  }
});
