// CRC-32C: the standard check value, and the SSE4.2 and table paths give the same value on every
// length and alignment (both are exact; a difference would make recorded checksums machine-bound).
import { expect, test } from "bun:test";
import { loadKernels } from "../src/kernels.ts";

test("CRC-32C check value and CRC-32 check value", () => {
  const k = loadKernels();
  const s = new TextEncoder().encode("123456789");
  expect(k.k3_crc32c(0, s, 9)).toBe(0xe3069283);
  expect(k.k3_crc32c_path(0, s, 9, 0)).toBe(0xe3069283);
  expect(k.k3_crc32(0, s, 9)).toBe(0xcbf43926);
});

test("hardware and table paths agree on random data, odd lengths and offsets, and when chained", () => {
  const k = loadKernels();
  const data = new Uint8Array(70_001);
  let x = 12345;
  for (let i = 0; i < data.length; i++) data[i] = (x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 24;
  for (const [off, len] of [[0, 0], [1, 1], [3, 7], [5, 64], [7, 4099], [0, 70_001], [13, 69_000]] as const) {
    const view = data.subarray(off, off + len);
    expect(k.k3_crc32c_path(0, view, len, 1)).toBe(k.k3_crc32c_path(0, view, len, 0));
  }
  // chaining (crc of a then b == crc of a‖b), as verify does across a plan's reads
  const a = data.subarray(0, 1000), b = data.subarray(1000, 5001);
  expect(k.k3_crc32c(k.k3_crc32c(0, a, a.length), b, b.length)).toBe(k.k3_crc32c(0, data.subarray(0, 5001), 5001));
});
