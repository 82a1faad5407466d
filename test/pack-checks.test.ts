// A packed trunk's bytes are checked before they are used (issue 21 item 3; docs/TRUNK.md, "What
// is packed, where, and what is checked"), as a user meets it through the binary:
//   - `run --trunk int4` checks each piece the first time it lands against the pack's own CRC-32Cs:
//     a flipped byte in the payload stops it (exit 4) naming the tensor, before any token;
//   - `k3 verify` reads every pack whole: a flipped payload byte, and a shard edited since packing
//     with its mtime put back (the stamp cannot see it), are each named (exit 4); a sound pack is
//     reported as checked;
//   - a pack written by an older k3 (k3-pack-1: no checksums of its source rows) is refused by name.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { packTrunk } from "../src/engine.ts";
import { loadKernels } from "../src/kernels.ts";
import { compiledK3, STACK_FRAME, userEnv } from "./helpers/k3-binary.ts";
import { flipByte, scratchDir, tinyModel } from "./helpers/models.ts";

setDefaultTimeout(120_000);

const IDS = "5,17,300,42,7,99";
let packed = ""; // tiny-a with an int4 pack, never damaged (copied per test)
let home = "";
beforeAll(async () => {
  packed = scratchDir("pack-checks");
  cpSync(await tinyModel("tiny-a"), packed, { recursive: true, preserveTimestamps: true });
  packTrunk(packed, "int4");
  home = scratchDir("pack-checks-home");
});

const copy = (name: string) => {
  const d = scratchDir(name);
  cpSync(packed, d, { recursive: true, preserveTimestamps: true });
  return d;
};
const k3 = (args: string[]) => {
  const p = Bun.spawnSync([compiledK3(), ...args], { stdin: "ignore", env: userEnv(home) });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
};

/** The pack's header JSON and where it sits (the documented layout, read here independently). */
function packHeader(path: string): { body: any; start: number; hlen: number } {
  const buf = readFileSync(path);
  const hlen = Number(buf.readBigUInt64LE(buf.length - 24));
  const start = buf.length - 24 - hlen;
  return { body: JSON.parse(buf.toString("utf8", start, start + hlen)), start, hlen };
}

/** The int4 engine's floor budget for `d`, as a user learns it (the refusal below it names it):
 *  there the whole trunk streams through the rings. */
function floorOf(d: string): string {
  const r = k3(["run", d, "--ids", IDS, "--gen", "1", "--trunk", "int4", "--ram", "1M"]);
  expect(r.code).toBe(3);
  return /need (\d+) bytes/.exec(r.err)![1]!;
}

/** A quantised matrix of layer 2 in the pack. */
const q4Of = (path: string) => packHeader(path).body.tensors.flat().find((t: any) => t.dtype === "Q4" && t.name.includes("layers.2."));

describe("run --trunk int4", () => {
  test("a flipped byte in the pack's payload: exit 4 naming the tensor, before any token (checked the first time it lands)", () => {
    const d = copy("pack-flip-run");
    const pack = join(d, "k3-trunk-int4.k3pack");
    const t = q4Of(pack);
    flipByte(pack, t.offset + 5);
    for (const ram of ["1G", floorOf(d)]) {
      const r = k3(["run", d, "--ids", IDS, "--gen", "3", "--trunk", "int4", "--threads", "1", "--ram", ram]);
      expect({ ram, code: r.code }).toEqual({ ram, code: 4 });
      expect(r.err).toContain(`${t.name}`);
      expect(r.err).toContain("fails its checksum");
      expect(r.err).not.toMatch(STACK_FRAME);
      expect(r.out).toBe("");
    }
  });

  test("a sound pack: each piece checked once (the stats count its bytes), later re-reads are not checked again", () => {
    const floor = floorOf(packed);
    const run = (gen: number) => JSON.parse(k3(["run", packed, "--ids", IDS, "--gen", String(gen), "--trunk", "int4", "--threads", "1", "--ram", floor, "--json"]).out).stats;
    const one = run(1);
    const six = run(6);
    const trunkBytes = packHeader(join(packed, "k3-trunk-int4.k3pack")).body.tensors.flat().reduce((a: number, t: any) => a + t.bytes + (t.scales?.bytes ?? 0), 0);
    expect(one.verified_bytes).toBe(trunkBytes); // every piece of the pack, once
    expect(six.verified_bytes).toBe(trunkBytes);
    expect(six.trunk_bytes_read).toBeGreaterThan(2 * trunkBytes); // the streamed pieces were read again
  });
});

describe("k3 verify covers packs", () => {
  test("a sound pack is read whole and reported (text and JSON), with or without recorded checksums", () => {
    const r = k3(["verify", packed]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/int4 trunk .*k3-trunk-int4\.k3pack: \d+ blocks match their checksums and the shard bytes they were packed from/);
    const j = JSON.parse(k3(["verify", packed, "--json"]).out);
    expect(j.packs).toHaveLength(1);
    expect(j.packs[0].blocks).toBeGreaterThan(40);
  });

  test("a flipped byte in the pack's payload: exit 4 naming the tensor", () => {
    const d = copy("pack-flip-verify");
    const pack = join(d, "k3-trunk-int4.k3pack");
    const t = q4Of(pack);
    flipByte(pack, t.offset + 5);
    const r = k3(["verify", d]);
    expect(r.code).toBe(4);
    expect(r.err).toContain(`${t.name}: the packed bytes fail their checksum`);
    expect(r.err).not.toMatch(STACK_FRAME);
  });

  test("a shard edited since packing with its mtime put back: the pack is accepted at open (the tie cannot see it) but k3 verify names the stale rows", () => {
    const d = copy("pack-stale-verify");
    const name = q4Of(join(d, "k3-trunk-int4.k3pack")).name;
    const src = openCheckpoint(d).tensors.get(name)!;
    flipByte(src.file, src.offset + 7); // keeps the mtime: size, header and mtime all as packed
    expect(k3(["run", d, "--ids", IDS, "--gen", "2", "--trunk", "int4"]).code).toBe(0); // documented: only k3 verify sees it
    const r = k3(["verify", d]);
    expect(r.code).toBe(4);
    expect(r.err).toMatch(new RegExp(`${name.replace(/\./g, "\\.")}( rows \\d+\\.\\.\\d+)?: made from other bytes of model-\\S+\\.safetensors .*the pack is stale`));
    expect(r.err).toContain(`make it again: k3 pack ${d} --trunk int4`);
  });

  test("a pack written by an older k3 (k3-pack-1) is refused by name", () => {
    const d = copy("pack-old");
    const pack = join(d, "k3-trunk-int4.k3pack");
    const { start, hlen } = packHeader(pack);
    const buf = readFileSync(pack);
    const header = Buffer.from(buf.toString("utf8", start, start + hlen).replace('"format":"k3-pack-2"', '"format":"k3-pack-1"'));
    expect(header.byteLength).toBe(hlen);
    header.copy(buf, start);
    buf.writeUInt32LE(loadKernels().k3_crc32c(0, header, hlen), buf.length - 16); // the header's own CRC, so only the format differs
    writeFileSync(pack, buf);
    for (const args of [["run", d, "--ids", IDS, "--gen", "2", "--trunk", "int4"], ["verify", d]]) {
      const r = k3(args);
      expect(r.code).toBe(4);
      expect(r.err).toContain("made by an older k3 (k3-pack-1");
    }
  });
});
