// The exact compact trunk (issue 25; src/memory/pack-exact.ts, kernels/k3_bx4.c): `k3 pack --trunk
// exact` codes the trunk's bf16 matrices as BX4, tied to the shard bytes like the lossy packs.
// Checked: an independent reader (tools/reference/exact-pack.ts) finds the shards' bytes in it and
// codes them to the same bytes; an engine on it gives the bf16 trunk's ids and logits bit for bit
// at every budget, cut, thread count, ISA path, prefill chunk, with speculation and batching, on
// the tiny models (one with escapes planted in its matrices) and the trained demo; the default
// ("auto") picks it exactly where it reads fewer bytes; every damaged, stale or foreign pack is
// refused naming why, and `k3 verify` reads it in full.
import { beforeAll, describe, expect, setDefaultTimeout, spyOn, test } from "bun:test";
import { appendFileSync, cpSync, mkdirSync, openSync, readFileSync, statSync, truncateSync, utimesSync, writeFileSync, writeSync, closeSync } from "node:fs";
import { join } from "node:path";
import { unpackDemo } from "../src/cli/demo-pack.ts";
import { Engine, packTrunk, verifyModel, type Drafter, type EngineOptions } from "../src/engine.ts";
import { K3Error } from "../src/errors.ts";
import { loadKernels } from "../src/kernels.ts";
import { log } from "../src/log.ts";
import { checkExactPack, readExactHeader } from "../tools/reference/exact-pack.ts";
import { SafetensorsDir } from "../tools/reference/safetensors.ts";
import { SPLIT_PIECES, streamingBudget } from "./helpers/budgets.ts";
import { flipByte, scratchDir, tinyModel } from "./helpers/models.ts";
import { compiledK3, STACK_FRAME, userEnv } from "./helpers/k3-binary.ts";
import { supported } from "./kernels.helpers.ts";
import { serve } from "./server.helpers.ts";

setDefaultTimeout(120_000);
const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250];
const LONG = Array.from({ length: 70 }, (_, i) => (i * 37 + 11) % 500); // batched kernels from 8 rows on

interface Run {
  ids: number[];
  hex: string;
  trunk: string;
  trunkBytesRead: number;
}

function run(dir: string, opts: EngineOptions, prompt = PROMPT, gen: { drafter?: Drafter; speculate?: number | "off" } = {}): Run {
  const engine = Engine.open(dir, { threads: 1, ...opts });
  try {
    const ids: number[] = [];
    for (const t of engine.generate(engine.createSession(), prompt, { maxTokens: 6, ...gen })) ids.push(t.id);
    const logits = Float32Array.from(engine.prefill(engine.createSession(), prompt));
    const s = engine.stats();
    return { ids, hex: Bun.hash(new Uint8Array(logits.buffer)).toString(16), trunk: s.trunk, trunkBytesRead: s.trunkBytesRead };
  } finally {
    engine.close();
  }
}
const bits = (r: Run) => ({ ids: r.ids, hex: r.hex });
/** A budget both trunks fit with nothing pinned (on a tiny model the exact pack's floor can be the
 *  higher one: its cores hold the escape tables, and its matrices are too small to matter). */
const floorOf = (dir: string, pieces?: typeof SPLIT_PIECES) => Math.max(streamingBudget(dir, { pieces }), streamingBudget(dir, { pieces, trunk: "exact" }));

/** Every bf16 weight of the walk's matrices of `layer` (and lm_head) gets, in each row, 24
 *  columns set to tiny powers of two with distinct exponents: more high bytes than a row's table
 *  holds, so the exact pack has escapes (a trained matrix has ~1e-4 of them; a tiny random one
 *  none). Small enough not to disturb the model. */
function plantEscapes(dir: string, names: string[]): void {
  const st = SafetensorsDir.open(dir);
  for (const name of names) {
    const e = st.entry(name);
    const [rows, cols] = e.shape as [number, number];
    const w = new Uint16Array(st.read(name).buffer);
    for (let r = 0; r < rows; r++)
      for (let j = 0; j < Math.min(24, cols); j++) {
        const c = (j * 7 + r * 3) % cols;
        w[r * cols + c] = ((127 - 30 - j) << 7) | ((j & 1) << 15); // ±2^-(30+j): exponent 97 − j
      }
    const fd = openSync(e.file, "r+");
    writeSync(fd, new Uint8Array(w.buffer), 0, e.bytes, e.offset);
    closeSync(fd);
  }
}

let escaped = ""; // tiny-a with escapes planted, packed exact
const plain: Record<string, string> = {}; // tiny-b, tiny-c packed exact
let demo = "";
beforeAll(async () => {
  escaped = scratchDir("exact-escaped");
  cpSync(await tinyModel("tiny-a"), escaped, { recursive: true });
  plantEscapes(escaped, ["language_model.model.layers.1.self_attn.q_proj.weight", "language_model.model.layers.2.block_sparse_moe.shared_experts.down_proj.weight", "language_model.lm_head.weight"].filter((n) => SafetensorsDir.open(escaped).names().includes(n)));
  packTrunk(escaped, "exact");
  for (const p of ["tiny-b", "tiny-c"]) {
    plain[p] = scratchDir(`exact-${p}`);
    cpSync(await tinyModel(p), plain[p]!, { recursive: true });
    packTrunk(plain[p]!, "exact");
  }
  demo = scratchDir("exact-demo");
  unpackDemo(new Uint8Array(readFileSync(join(import.meta.dir, "..", "assets", "demo", "k3-demo.pack.zst"))), demo);
  packTrunk(demo, "exact");
});

describe("k3 pack --trunk exact", () => {
  test("BX4 matrices with escape tables in the core, MLA's kv_b and the router copied; the independent reader finds the shards' bytes and the format's coding", () => {
    for (const dir of [escaped, ...Object.values(plain), demo]) {
      const path = join(dir, "k3-trunk-exact.k3pack");
      const h = readExactHeader(readFileSync(path));
      const all = h.tensors.flat();
      expect(h.coding).toBe("BX4");
      const coded = all.filter((t) => t.dtype === "BX4");
      expect(coded.length).toBeGreaterThan(20);
      for (const t of coded) expect(all.some((e) => e.name === `${t.name}#escapes` && e.dtype === "BX4E")).toBe(true);
      expect(all.some((t) => t.name.endsWith("kv_b_proj.weight") && t.dtype === "BF16")).toBe(true);
      expect(all.some((t) => t.name.endsWith("block_sparse_moe.gate.weight") && t.dtype === "BF16")).toBe(true);
      const r = checkExactPack(dir);
      expect(r.coded).toBe(coded.length);
      if (dir === escaped) expect(r.escapes).toBeGreaterThan(1000);
    }
  });

  test("the reader catches a pack that does not hold the shards' values (its own check can fail)", () => {
    const d = scratchDir("exact-reader");
    cpSync(escaped, d, { recursive: true, preserveTimestamps: true });
    const path = join(d, "k3-trunk-exact.k3pack");
    const t = readExactHeader(readFileSync(path)).tensors.flat().find((x) => x.dtype === "BX4")!;
    flipByte(path, t.offset + 16 + 3); // a code nibble of row 0
    expect(() => checkExactPack(d)).toThrow(new RegExp(`${t.name.replace(/\./g, "\\.")}: weight \\d+`));
  });
});

describe("the engine on the exact pack: the bf16 trunk's bits", () => {
  test("tiny-a with escapes: floor, between, everything × default and tiny pieces × 1/2 threads × prefetch on/off", () => {
    const want = bits(run(escaped, { resident: true }));
    for (const pieces of [undefined, SPLIT_PIECES]) {
      const floor = floorOf(escaped, pieces);
      for (const ram of [floor, floor + 200_000, 2 ** 30])
        for (const threads of [1, 2])
          for (const prefetch of [true, false]) {
            const r = run(escaped, { trunk: "exact", ram: String(ram), threads, prefetch, trunkPieces: pieces });
            expect({ ram, pieces: !!pieces, threads, prefetch, trunk: r.trunk, ...bits(r) }).toEqual({ ram, pieces: !!pieces, threads, prefetch, trunk: "exact", ...want });
          }
    }
  });

  test("every ISA path, prefill chunks 1, 16, 64 and the planner's, on a 70-token prompt (batched kernels): every tiny preset and the demo", () => {
    const isas = (["scalar", "avx2", "avx512", "neon"] as const).filter((i) => supported[i]);
    for (const dir of [escaped, ...Object.values(plain), demo]) {
      const want = bits(run(dir, { resident: true }, LONG));
      const cases: [string | undefined, number | undefined][] = [...isas.map((isa): [string, undefined] => [isa, undefined]), ...(dir === escaped ? [1, 16, 64] : [16]).map((c): [undefined, number] => [undefined, c])];
      for (const [isa, chunk] of cases) {
        const r = run(dir, { trunk: "exact", ram: "1G", isa: isa as EngineOptions["isa"], chunk, threads: 2 }, LONG);
        expect({ dir, isa, chunk, ...bits(r) }).toEqual({ dir, isa, chunk, ...want });
      }
    }
  });

  test("speculation (verify passes keep some drafts, reject others) and batched generations: the same ids", async () => {
    const want = run(escaped, { resident: true, speculate: "off" });
    const ref = [...PROMPT, ...want.ids];
    const oracle: Drafter = { name: "oracle", draft: ({ tokens, max }) => ({ tokens: ref.slice(tokens.length, tokens.length + max).map((t, j) => (j === 2 ? (t + 1) % 1000 : t)) }) };
    const spec = run(escaped, { trunk: "exact", ram: String(floorOf(escaped)), speculate: 4 }, PROMPT, { drafter: oracle, speculate: 4 });
    expect(bits(spec)).toEqual(bits(want));
    const e = Engine.open(escaped, { trunk: "exact", ram: "1G", threads: 2, chunk: 8, parallel: 2, speculate: "off" });
    try {
      const gen = async (prompt: number[]) => {
        const g = e.generate(e.createSession(), prompt, { maxTokens: 6, batched: true, speculate: "off" });
        const ids: number[] = [];
        for (let r = g.next(); !r.done; r = g.next()) if (r.value.wait) await e.turn();
        else ids.push(r.value.id);
        return ids;
      };
      const other = [9, 8, 7, 6, 5, 4];
      const [a, b] = await Promise.all([gen(PROMPT), gen(other)]);
      expect(a).toEqual(want.ids);
      expect(b).toEqual(run(escaped, { resident: true, speculate: "off" }, other).ids);
      expect(e.batchStats().sessionsPerStep[2]).toBeGreaterThan(0);
    } finally {
      e.close();
    }
  });
});

describe("the default trunk (auto)", () => {
  test("the exact pack where it reads fewer bytes (a streaming budget), bf16 where both read nothing; the same bits", () => {
    const floor = String(floorOf(escaped));
    const bf16 = run(escaped, { trunk: "bf16", ram: floor });
    const auto = run(escaped, { ram: floor });
    expect(auto.trunk).toBe("exact");
    expect(auto.trunkBytesRead).toBeLessThan(bf16.trunkBytesRead);
    expect(bits(auto)).toEqual(bits(bf16));
    expect(run(escaped, { ram: "1G" }).trunk).toBe("bf16"); // everything resident either way
    expect(run(escaped, { resident: true }).trunk).toBe("bf16");
  });

  test("a stale exact pack: auto warns by name and the shards answer; asked for, it is refused", () => {
    const d = scratchDir("exact-stale");
    cpSync(escaped, d, { recursive: true, preserveTimestamps: true });
    const shard = join(d, "model-00003-of-000011.safetensors");
    const st = statSync(shard);
    utimesSync(shard, st.atime, new Date(st.mtimeMs + 5000)); // rewritten since packing
    const warn = spyOn(log, "warn").mockImplementation((() => {}) as any);
    try {
      const r = run(d, { ram: String(floorOf(escaped)) });
      expect(r.trunk).toBe("bf16");
      expect(warn.mock.calls.map((c) => String(c[0])).join("\n")).toMatch(/not using the exact trunk pack: .*k3-trunk-exact\.k3pack: packed from other shard bytes \(model-00003-of-000011\.safetensors/);
    } finally {
      warn.mockRestore();
    }
    expect(() => run(d, { trunk: "exact" })).toThrow(/k3-trunk-exact\.k3pack: packed from other shard bytes \(model-00003-of-000011\.safetensors was modified after the trunk was packed\)/);
  });
});

describe("refused, never used", () => {
  const copy = (name: string) => {
    const d = scratchDir(name);
    cpSync(escaped, d, { recursive: true, preserveTimestamps: true });
    return { d, path: join(d, "k3-trunk-exact.k3pack") };
  };

  test("cut short, grown, a damaged header, another model's pack: refused by name", async () => {
    const cases: [string, (p: string) => void, RegExp][] = [
      ["cut", (p) => truncateSync(p, statSync(p).size - 100), /not a k3 packed trunk \(or cut short\)|header length/],
      ["grown", (p) => appendFileSync(p, Buffer.alloc(10)), /not a k3 packed trunk|bytes added or cut/],
      ["header", (p) => flipByte(p, statSync(p).size - 40), /damaged header \(its checksum does not match\)/],
    ];
    for (const [name, damage, why] of cases) {
      const { d, path } = copy(`exact-${name}`);
      damage(path);
      expect(() => run(d, { trunk: "exact" })).toThrow(why);
    }
    const other = scratchDir("exact-other");
    cpSync(await tinyModel("tiny-a", { seed: 2 }), other, { recursive: true });
    cpSync(join(escaped, "k3-trunk-exact.k3pack"), join(other, "k3-trunk-exact.k3pack"));
    expect(() => run(other, { trunk: "exact" })).toThrow(/packed from (another model|other shard bytes)/);
  });

  /** Rewrites the pack's header with `name`'s recorded CRC-32C made to match its bytes as they are
   *  now (and the header's own CRC): a forged pack, past every checksum, for the kernel's checks. */
  const reseal = (path: string, name: string) => {
    const file = readFileSync(path);
    const hlen = Number(file.readBigUInt64LE(file.length - 24));
    const header = JSON.parse(file.toString("utf8", file.length - 24 - hlen, file.length - 24));
    const t = (header.tensors as { name: string; offset: number; bytes: number }[][]).flat().find((x) => x.name === name)!;
    const k = loadKernels();
    header.crcs[name] = k.k3_crc32c(0, file.subarray(t.offset, t.offset + t.bytes), t.bytes);
    const body = Buffer.from(JSON.stringify(header));
    const tail = Buffer.alloc(24);
    tail.writeBigUInt64LE(BigInt(body.length), 0);
    tail.writeUInt32LE(k.k3_crc32c(0, body, body.length), 8);
    tail.write("K3PACK01", 16, "latin1");
    writeFileSync(path, Buffer.concat([file.subarray(0, header.dataEnd), body, tail]));
  };

  test("an escape table out of range: refused by its checksum as it first lands (no --verify needed); forged past the checksum, the kernel refuses it and the engine names the matrix", () => {
    const { d, path } = copy("exact-escapes");
    const all = readExactHeader(readFileSync(path)).tensors.flat();
    const m = all.find((t) => t.dtype === "BX4" && t.name.includes("layers.1.self_attn.q_proj"))!;
    const e = all.find((t) => t.name === `${m.name}#escapes`)!;
    const fd = openSync(path, "r+");
    writeSync(fd, Buffer.from(new Uint32Array([0xffffff]).buffer), 0, 4, e.offset + 4); // idx[1]: far past the entries
    closeSync(fd);
    expect(() => run(d, { trunk: "exact", ram: "1G" })).toThrow(new RegExp(`${e.name.replace(/[.#]/g, "\\$&")}.*fails its checksum`));
    reseal(path, e.name);
    expect(() => run(d, { trunk: "exact", ram: "1G" })).toThrow(new RegExp(`${m.name.replace(/\./g, "\\.")}: its escape table in the exact trunk pack is damaged`));
  });

  test("k3 verify reads the pack in full: a flipped byte names its block; a shard edited with its mtime kept (the tie cannot see it) is caught against the shards", () => {
    const ok = verifyModel(escaped).packs;
    expect(ok.map((p) => p.format)).toEqual(["exact"]);
    const header = readExactHeader(readFileSync(join(escaped, "k3-trunk-exact.k3pack")));
    expect(ok[0]!.packBytes).toBe(header.tensors.flat().reduce((a, t) => a + t.bytes, 0)); // every byte of the payload
    const refusal = (dir: string) => {
      try {
        verifyModel(dir);
      } catch (err) {
        return err as K3Error;
      }
    };
    const a = copy("exact-verify-flip");
    const m = header.tensors.flat().find((t) => t.dtype === "BX4" && t.name.includes("layers.2."))!;
    flipByte(a.path, m.offset + 100);
    const flipped = refusal(a.d);
    expect(flipped?.message).toMatch(/block\(s\) of the exact trunk differ from what was packed/);
    expect(flipped?.problems.join("\n")).toMatch(new RegExp(`${m.name.replace(/\./g, "\\.")}.*the packed bytes fail their checksum`));
    const b = copy("exact-verify-shard");
    const st = SafetensorsDir.open(b.d).entry(m.name);
    flipByte(st.file, st.offset + 10); // keeps the mtime: the pack's tie still holds
    expect(run(b.d, { trunk: "exact" }).trunk).toBe("exact"); // nothing else could know
    const edited = refusal(b.d);
    expect(edited?.message).toMatch(/block\(s\) of the exact trunk differ from what was packed/);
    expect(edited?.problems.join("\n")).toMatch(new RegExp(`${m.name.replace(/\./g, "\\.")}.*made from other bytes of .*the pack is stale`));
  });
});

describe("as a user meets it", () => {
  test("GET /v1/models names the exact trunk when it answers", async () => {
    const engine = Engine.open(escaped, { threads: 1, ram: String(floorOf(escaped)) });
    const server = serve(engine);
    try {
      const body = (await (await fetch(`${server.url}/v1/models`)).json()) as any;
      expect(body.data[0].trunk).toBe("exact");
    } finally {
      server.stop();
      engine.close();
    }
  });

  const k3 = (args: string[], home: string) => {
    const p = Bun.spawnSync([compiledK3(), ...args], { stdin: "ignore", env: userEnv(home) });
    return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
  };

  test("k3 pack --trunk exact, run and plan on it (--json names the trunk; plan shows both), k3 verify", () => {
    const home = scratchDir("exact-home");
    const d = scratchDir("exact-cli");
    cpSync(escaped, d, { recursive: true, preserveTimestamps: true, filter: (src) => !src.endsWith(".k3pack") });
    mkdirSync(join(home, ".cache"), { recursive: true });
    const floor = String(floorOf(escaped));
    const before = JSON.parse(k3(["plan", d, "--ram", floor, "--json"], home).out);
    expect([before.trunk, before.trunk_choice.options.map((o: any) => [o.trunk, o.packed])]).toEqual(["bf16", [["bf16", null], ["exact", false]]]);
    const made = k3(["pack", d, "--trunk", "exact"], home);
    expect(made.err).not.toMatch(STACK_FRAME);
    expect([made.code, made.out]).toEqual([0, expect.stringMatching(/exact: \d+ matrices coded in [\d.]+ bytes per weight \(\d+ escapes\).*decoded back.*k3-trunk-exact\.k3pack/)]);
    const plan = k3(["plan", d, "--ram", floor], home);
    expect(plan.out).toMatch(/trunk: auto → exact \(the exact pack reads .* per decoded token, the bf16 trunk .*\)/);
    expect(plan.out).toMatch(/\n {2}bf16 .*read per decoded token \(modeled\)\n {2}exact .*read per decoded token \(modeled\)/);
    const auto = k3(["run", d, "--ids", "5,6,7", "--gen", "3", "--ram", floor, "--json"], home);
    const bf16 = k3(["run", d, "--ids", "5,6,7", "--gen", "3", "--ram", floor, "--trunk", "bf16", "--json"], home);
    expect([auto.code, JSON.parse(auto.out).stats.trunk, JSON.parse(bf16.out).stats.trunk]).toEqual([0, "exact", "bf16"]);
    expect(JSON.parse(auto.out).generated_ids).toEqual(JSON.parse(bf16.out).generated_ids);
    expect(k3(["run", d, "--ids", "5,6,7", "--gen", "3", "--ram", floor], home).err).toContain("exact trunk");
    const v = k3(["verify", d], home);
    expect(v.err).not.toMatch(STACK_FRAME);
    expect([v.code, v.out]).toEqual([0, expect.stringMatching(/exact trunk .*: \d+ blocks match their checksums and the shard bytes they were packed from/)]);
    // a stale pack: plan and run (auto) still answer from the shards, naming it; asked for, refused
    const shard = join(d, "model-00003-of-000011.safetensors");
    const st = statSync(shard);
    utimesSync(shard, st.atime, new Date(st.mtimeMs + 5000));
    const stale = k3(["plan", d, "--ram", floor], home);
    expect([stale.code, stale.out]).toEqual([0, expect.stringMatching(/trunk: auto → bf16 .*\n {2}bf16 .*\n {2}exact {2}not usable: .*packed from other shard bytes/)]);
    const asked = k3(["run", d, "--ids", "5,6,7", "--gen", "3", "--trunk", "exact"], home);
    expect([asked.code, asked.err]).toEqual([4, expect.stringContaining("packed from other shard bytes")]);
  });
});
