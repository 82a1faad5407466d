// The opt-in compact trunk (issue 16, src/memory/pack.ts): `k3 pack` writes int8/int4 matrices and
// exact copies of the rest, tied to the shard bytes they came from; an engine with `trunk` reads
// it. Checked: the engine with a packed trunk computes the model whose matrices are the pack's
// decoded values (float64 reference on exactly those weights, tools/reference/quant.ts decodes
// the file on its own), bit-identical at every budget and cut; and every stale or damaged pack is
// refused with a named reason, never used.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { appendFileSync, closeSync, cpSync, existsSync, openSync, readFileSync, readSync, truncateSync, utimesSync, statSync } from "node:fs";
import { join } from "node:path";
import { Engine, packTrunk, verifyModel } from "../src/engine.ts";
import { decodeQ } from "../tools/reference/quant.ts";
import { ReferenceModel } from "../tools/reference/model.ts";
import { SPLIT_PIECES, streamingBudget } from "./helpers/budgets.ts";
import { flipByte, scratchDir, tinyModel } from "./helpers/models.ts";
import { tolerance } from "./helpers/tolerance.ts";
import { compiledK3, STACK_FRAME, userEnv } from "./helpers/k3-binary.ts";
import { serve } from "./server.helpers.ts";

setDefaultTimeout(120_000);
const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250];

function run(dir: string, opts: Parameters<typeof Engine.open>[1]) {
  const engine = Engine.open(dir, { threads: 1, ...opts });
  try {
    const ids: number[] = [];
    for (const t of engine.generate(engine.createSession(), PROMPT, { maxTokens: 6 })) ids.push(t.id);
    const logits = Float32Array.from(engine.prefill(engine.createSession(), PROMPT));
    return { ids, logits, hex: Buffer.from(logits.buffer).toString("hex"), plan: engine.plan!, stats: engine.stats() };
  } finally {
    engine.close();
  }
}

/** The pack file's own header (read here from the documented layout, not through src/). */
function packHeader(path: string): any {
  const buf = readFileSync(path);
  expect(buf.toString("latin1", 0, 8)).toBe("K3PACK01");
  const hlen = Number(buf.readBigUInt64LE(buf.length - 24)); // tail: length, CRC, 4 zeros, magic
  return JSON.parse(buf.toString("utf8", buf.length - 24 - hlen, buf.length - 24));
}

/** Every quantised matrix of a pack, decoded exactly to float64 (for the reference). */
function decodedMatrices(path: string): Map<string, Float64Array> {
  const h = packHeader(path);
  const buf = readFileSync(path);
  const out = new Map<string, Float64Array>();
  for (const t of h.tensors.flat()) {
    if (t.dtype !== "Q8" && t.dtype !== "Q4") continue;
    const [rows, cols] = t.shape;
    const q = new Uint8Array(buf.buffer, buf.byteOffset + t.offset, t.bytes);
    const s = new Float32Array(buf.buffer.slice(buf.byteOffset + t.scales.offset, buf.byteOffset + t.scales.offset + t.scales.bytes));
    out.set(t.name, decodeQ(t.dtype === "Q8" ? 8 : 4, q, s, rows, cols));
  }
  return out;
}

const maxAbs = (a: ArrayLike<number>) => Array.from(a).reduce((m, x) => Math.max(m, Math.abs(x)), 0);

let dir = "";
const packs: Record<string, string> = {};
beforeAll(async () => {
  dir = scratchDir("pack");
  cpSync(await tinyModel("tiny-a"), dir, { recursive: true });
  for (const f of ["int8", "int4"] as const) packs[f] = packTrunk(dir, f).path;
});

describe("k3 pack", () => {
  test("writes next to the model: quantised matrices, exact copies of the rest, a CRC per block", () => {
    for (const [f, path] of Object.entries(packs)) {
      expect(path).toBe(join(dir, `k3-trunk-${f}.k3pack`));
      const h = packHeader(path);
      const all = h.tensors.flat();
      const q = all.filter((t: any) => t.dtype === (f === "int8" ? "Q8" : "Q4"));
      expect(q.length).toBeGreaterThan(40);
      expect(all.some((t: any) => t.name.endsWith("kv_b_proj.weight") && t.dtype === "BF16")).toBe(true); // the MLA kernel reads bf16
      expect(all.some((t: any) => t.name.endsWith("block_sparse_moe.gate.weight") && t.dtype === "BF16")).toBe(true); // the router stays exact
      expect(Object.keys(h.crcs).length).toBe(all.length); // tiny tensors: one block each
    }
    expect(statSync(packs.int4!).size).toBeLessThan(statSync(packs.int8!).size);
  });
});

describe("an engine on a packed trunk", () => {
  for (const f of ["int8", "int4"] as const)
    test(`${f}: the model of the pack's decoded weights (float64 reference within the derived tolerance)`, () => {
      const want = ReferenceModel.open(dir, { weights: decodedMatrices(packs[f]!) }).forward(PROMPT);
      const got = run(dir, { trunk: f });
      const tol = tolerance(Engine.open(dir, { threads: 1, resident: true }).config, maxAbs(want));
      let diff = 0;
      for (let i = 0; i < want.length; i++) diff = Math.max(diff, Math.abs(got.logits[i]! - want[i]!));
      expect(diff).toBeLessThanOrEqual(tol);
      // ...and not the exact model: the pack really was used (the difference is far above tol).
      const exact = ReferenceModel.open(dir).forward(PROMPT);
      let off = 0;
      for (let i = 0; i < want.length; i++) off = Math.max(off, Math.abs(got.logits[i]! - exact[i]!));
      expect(off).toBeGreaterThan(10 * tol);
      expect(got.stats.trunk).toBe(f);
    });

  test("int4: bit-identical at the floor, half, everything × default and tiny pieces × 1/2 threads, prefetch on/off", () => {
    const base = run(dir, { trunk: "int4", resident: false, ram: "1G" });
    for (const pieces of [undefined, SPLIT_PIECES]) {
      const floor = streamingBudget(dir, { pieces }); // the exact trunk's floor: the pack's is lower
      for (const ram of [floor, floor + 200_000, 2 ** 30])
        for (const threads of [1, 2])
          for (const prefetch of [true, false]) {
            const r = run(dir, { trunk: "int4", ram: String(ram), threads, prefetch, trunkPieces: pieces });
            expect({ ram, threads, prefetch, pieces: !!pieces, ids: r.ids, hex: r.hex }).toEqual({ ram, threads, prefetch, pieces: !!pieces, ids: base.ids, hex: base.hex });
          }
    }
  });

  test("--verify checks the packed trunk against the pack's own checksums: a flipped byte is refused by name", () => {
    const d = scratchDir("pack-verify");
    cpSync(dir, d, { recursive: true, preserveTimestamps: true });
    verifyModel(d, { record: true }); // experts and embedding rows (the trunk comes from the pack)
    const path = join(d, "k3-trunk-int4.k3pack");
    expect(run(d, { trunk: "int4", verify: true }).ids).toEqual(run(dir, { trunk: "int4" }).ids);
    const h = packHeader(path);
    const t = h.tensors.flat().find((x: any) => x.dtype === "Q4" && x.name.includes("layers.2."));
    flipByte(path, t.offset + 3);
    expect(() => run(d, { trunk: "int4", verify: true, ram: "1G" })).toThrow(new RegExp(`${t.name.replace(/\./g, "\\.")}.*fails its checksum`));
  });
});

describe("refused, never used", () => {
  test("no pack: a usage error that says how to make one", () => {
    const d = scratchDir("pack-none");
    cpSync(dir, d, { recursive: true, preserveTimestamps: true, filter: (src) => !src.endsWith(".k3pack") });
    expect(() => run(d, { trunk: "int8" })).toThrow(/no int8 trunk packed .* k3 pack .* --trunk int8/s);
    expect(() => run(d, { trunk: "int8", resident: true })).toThrow(/--resident reads the release's bf16 trunk from the shards/);
  });

  test("a shard changed since packing (same size, new bytes): refused, naming the shard", () => {
    const d = scratchDir("pack-stale");
    cpSync(dir, d, { recursive: true, preserveTimestamps: true });
    const shard = join(d, "model-00003-of-000011.safetensors");
    const st = statSync(shard);
    flipByte(shard, st.size - 10); // data bytes; flipByte keeps the mtime…
    utimesSync(shard, st.atime, new Date(st.mtimeMs + 5000)); // …a real rewrite does not
    expect(() => run(d, { trunk: "int4" })).toThrow(/packed from other shard bytes \(model-00003-of-000011\.safetensors was modified after the trunk was packed\)/);
  });

  test("a pack cut short, grown, or with a damaged header: refused by name", () => {
    const cases: [string, (p: string) => void, RegExp][] = [
      ["cut", (p) => truncateSync(p, statSync(p).size - 100), /not a k3 packed trunk \(or cut short\)|header length/],
      ["grown", (p) => appendFileSync(p, Buffer.alloc(10)), /not a k3 packed trunk|bytes added or cut/],
      ["header", (p) => flipByte(p, statSync(p).size - 40), /damaged header \(its checksum does not match\)/],
    ];
    for (const [name, damage, why] of cases) {
      const d = scratchDir(`pack-${name}`);
      cpSync(dir, d, { recursive: true, preserveTimestamps: true });
      const p = join(d, "k3-trunk-int8.k3pack");
      damage(p);
      expect(() => run(d, { trunk: "int8" })).toThrow(why);
    }
  });

  test("a pack made for another model is refused", async () => {
    const other = scratchDir("pack-other");
    cpSync(await tinyModel("tiny-a", { seed: 2 }), other, { recursive: true });
    cpSync(packs.int8!, join(other, "k3-trunk-int8.k3pack"));
    expect(() => run(other, { trunk: "int8" })).toThrow(/packed from (another model|other shard bytes)/);
    expect(existsSync(join(other, "k3-trunk-int4.k3pack"))).toBe(false);
    const fd = openSync(packs.int8!, "r");
    const head = Buffer.alloc(8);
    readSync(fd, head, 0, 8, 0);
    closeSync(fd);
    expect(head.toString("latin1")).toBe("K3PACK01");
  });
});

describe("as a user meets it", () => {
  const k3 = (args: string[], home: string) => {
    const p = Bun.spawnSync([compiledK3(), ...args], { stdin: "ignore", env: userEnv(home) });
    return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
  };

  test("k3 pack needs --trunk int8|int4 (exit 2); run --json and the stats line say which trunk answered", () => {
    const home = scratchDir("pack-home");
    const d = scratchDir("pack-cli");
    cpSync(dir, d, { recursive: true, preserveTimestamps: true, filter: (src) => !src.endsWith(".k3pack") });
    expect(k3(["pack", d], home).code).toBe(2);
    expect(k3(["pack", d, "--trunk", "int3"], home).code).toBe(2);
    const none = k3(["run", d, "--ids", "5,6,7", "--gen", "3", "--trunk", "int4"], home);
    expect([none.code, none.err]).toEqual([2, expect.stringContaining(`k3 pack ${d} --trunk int4`)]);
    const made = k3(["pack", d, "--trunk", "int4"], home);
    expect(made.err).not.toMatch(STACK_FRAME);
    expect([made.code, made.out]).toEqual([0, expect.stringContaining(join(d, "k3-trunk-int4.k3pack"))]);
    const packed = k3(["run", d, "--ids", "5,6,7", "--gen", "3", "--trunk", "int4", "--json"], home);
    expect(packed.code).toBe(0);
    expect(JSON.parse(packed.out).stats.trunk).toBe("int4");
    expect(k3(["run", d, "--ids", "5,6,7", "--gen", "3", "--trunk", "int4"], home).err).toContain("int4 trunk (lossy)");
    expect(JSON.parse(k3(["run", d, "--ids", "5,6,7", "--gen", "3", "--json"], home).out).stats.trunk).toBe("bf16");
    const plan = JSON.parse(k3(["plan", d, "--ram", "1G", "--trunk", "int4", "--json"], home).out);
    expect(plan.trunk).toBe("int4");
  });

  test("GET /v1/models names the trunk that answers", async () => {
    for (const trunk of ["bf16", "int8"] as const) {
      const engine = Engine.open(dir, { threads: 1, trunk, ram: "1G" });
      const server = serve(engine);
      try {
        const body = (await (await fetch(`${server.url}/v1/models`)).json()) as any;
        expect(body.data[0].trunk).toBe(trunk);
      } finally {
        server.stop();
        engine.close();
      }
    }
  });
});
