// safetensors header validation: every malformed file is a K3Error("CHECKPOINT") naming the
// file and the tensor. Fixtures are written to a temp dir.
import { describe, expect, test } from "bun:test";
import { truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readSafetensorsHeader } from "../src/checkpoint/safetensors.ts";
import { catchK3, tempDir, writeRawShard, writeShard } from "./helpers/checkpoint-fixture.ts";

const dir = tempDir("st");
let n = 0;
const fresh = () => join(dir, `s${n++}.safetensors`);

function refused(path: string) {
  const e = catchK3(() => readSafetensorsHeader(path));
  expect(e.code).toBe("CHECKPOINT");
  expect(e.message).toContain(path);
  return `${e.message}\n${e.problems.join("\n")}`;
}

describe("safetensors header", () => {
  test("a valid file: offsets, sizes, dtypes; __metadata__ skipped", () => {
    const p = fresh();
    writeShard(p, [
      { name: "a", dtype: "BF16", shape: [2, 3] },
      { name: "b", dtype: "F32", shape: [4] },
      { name: "c", dtype: "U8", shape: [5, 1] },
    ], { format: "pt" });
    const h = readSafetensorsHeader(p);
    expect(h.tensors.map((t) => [t.name, t.dtype, t.shape, t.begin, t.end])).toEqual([
      ["a", "BF16", [2, 3], 0, 12],
      ["b", "F32", [4], 12, 28],
      ["c", "U8", [5, 1], 28, 33],
    ]);
    expect(h.fileBytes).toBe(h.dataStart + 33);
  });
  test("a file shorter than 8 bytes", () => {
    const p = fresh();
    writeFileSync(p, "abc");
    expect(refused(p)).toContain("expected at least the 8-byte header length");
  });
  test("header length past the end of the file", () => {
    const p = fresh();
    writeRawShard(p, { a: { dtype: "U8", shape: [1], data_offsets: [0, 1] } }, new Uint8Array(1), 10_000n);
    expect(refused(p)).toContain("header length 10000 runs past the end of the file");
  });
  test("a truncated shard: tensor data cut off", () => {
    const p = fresh();
    writeShard(p, [{ name: "big", dtype: "F32", shape: [64] }, { name: "tail", dtype: "U8", shape: [8] }]);
    truncateSync(p, Bun.file(p).size - 4);
    const msg = refused(p);
    expect(msg).toContain("tail: data_offsets [256, 264) end past the file");
    expect(msg).not.toContain("big:");
  });
  test("tensor offsets outside the file", () => {
    const p = fresh();
    writeRawShard(p, { x: { dtype: "U8", shape: [4], data_offsets: [100, 104] } }, new Uint8Array(8));
    expect(refused(p)).toContain("x: data_offsets [100, 104) end past the file");
  });
  test("overlapping tensors (also one nested inside another)", () => {
    const p = fresh();
    writeRawShard(p, {
      a: { dtype: "U8", shape: [8], data_offsets: [0, 8] },
      b: { dtype: "U8", shape: [2], data_offsets: [2, 4] },
      c: { dtype: "U8", shape: [2], data_offsets: [5, 7] },
      d: { dtype: "U8", shape: [2], data_offsets: [8, 10] },
    }, new Uint8Array(10));
    const msg = refused(p);
    expect(msg).toContain("b: bytes [2, 4) overlap a [0, 8)");
    expect(msg).toContain("c: bytes [5, 7) overlap a [0, 8)");
    expect(msg).not.toContain("d: bytes");
  });
  test("unknown dtype", () => {
    const p = fresh();
    writeRawShard(p, { q: { dtype: "Q4_K", shape: [2], data_offsets: [0, 2] } }, new Uint8Array(2));
    expect(refused(p)).toContain('q: unknown dtype "Q4_K"');
  });
  test("known-but-unexpected dtypes are read (the catalogue refuses them for K3 tensors)", () => {
    const p = fresh();
    writeShard(p, [{ name: "h", dtype: "F16", shape: [3] }, { name: "i", dtype: "I64", shape: [1] }]);
    expect(readSafetensorsHeader(p).tensors.map((t) => t.dtype)).toEqual(["F16", "I64"]);
  });
  test("byte span that disagrees with shape × dtype", () => {
    const p = fresh();
    writeRawShard(p, { w: { dtype: "BF16", shape: [3, 2], data_offsets: [0, 6] } }, new Uint8Array(12));
    expect(refused(p)).toContain("w: spans 6 bytes but BF16 [3,2] needs 12");
  });
  test("malformed entries: bad shape, bad offsets, header not JSON", () => {
    const p = fresh();
    writeRawShard(p, {
      s: { dtype: "U8", shape: [-1], data_offsets: [0, 1] },
      o: { dtype: "U8", shape: [1], data_offsets: [3, 2] },
    }, new Uint8Array(4));
    const msg = refused(p);
    expect(msg).toContain("s: shape [-1]");
    expect(msg).toContain("o: data_offsets [3,2]");
    const q = fresh();
    const body = Buffer.from("{oops");
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(body.length));
    writeFileSync(q, Buffer.concat([len, body]));
    expect(refused(q)).toContain("header is not valid JSON");
  });
  test("a missing file is a CHECKPOINT error naming it", () => {
    expect(refused(join(dir, "nope.safetensors"))).toContain("cannot open shard");
  });
});
