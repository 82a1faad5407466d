// The memory planner on the real release metadata and on hand-made byte figures, usable RAM on
// fake /proc + cgroup trees, and `k3 plan` as a user runs it.
import { beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { catalogueFromMetadata, type MetadataCatalogue } from "../src/checkpoint/catalogue.ts";
import type { ModelConfig } from "../src/checkpoint/types.ts";
import { K3Error } from "../src/errors.ts";
import { censusSlots, DEFAULT_PREFILL_CHUNK, floorBytes, ioBufferBytes, maxContextAt, planMemory, REFERENCE_PROMPT, residentChunk, ROWS_PER_EXPERT_CALL, type PlanInput } from "../src/memory/plan.ts";
import { DEFAULT_PIECE_BYTES, WHOLE_UNITS } from "../src/memory/pieces.ts";
import { metadataSlots } from "../src/memory/slots.ts";
import { parseSize, PRESETS, resolveBudget, usableRam, type RamPaths } from "../src/memory/ram.ts";

const REF = join(import.meta.dir, "../reference/k3");
const CONFIG = `${REF}/config.json`;
const INDEX = `${REF}/model.safetensors.index.json.gz`;
const GiB = 2 ** 30;

let release: MetadataCatalogue;
beforeAll(() => {
  release = catalogueFromMetadata(CONFIG, INDEX);
});
// Without the speculative verify pass's buffers (drafts 0): the layout assertions below are about
// pinning; "speculation buffers are in the default plan" checks what the default adds. The pinning
// tests also fix the chunk at 32 tokens (its scratch is part of what they pin around); "prefill
// chunk" below lets the planner choose it (null).
const releaseInput = (budgetBytes: number, contextTokens = 4096, slots = metadataSlots(release.config), prefillChunk: number | null = DEFAULT_PREFILL_CHUNK): PlanInput => ({
  cfg: release.config,
  ...release.census,
  budgetBytes,
  contextTokens,
  threads: 16,
  drafts: 0,
  slots,
  prefillChunk: prefillChunk ?? undefined,
});
/** The layout before issue 16: each unit one piece (the planner's figures without pieces). */
const wholeUnits = (budgetBytes: number, contextTokens = 4096): PlanInput => ({ ...releaseInput(budgetBytes, contextTokens), slots: censusSlots(release.census) });

describe("plan of the released model", () => {
  test("speculation buffers are in the default plan: 69 KDA layers × 8 drafts × (6P + H) floats of recurrence inputs, and one layer's state", () => {
    const cfg = release.config;
    const P = cfg.kdaHeads * cfg.kdaHeadDim;
    const scratch = (drafts?: number) => planMemory({ ...releaseInput(PRESETS.laptop!), drafts }).items.find((i) => i.name === "scratch")!.bytes;
    const extra = scratch(undefined) - scratch(0);
    const inputs = 69 * 8 * (6 * P + cfg.kdaHeads) * 4;
    const kdaScratch = (cfg.kdaHeads * cfg.kdaHeadDim * cfg.kdaHeadDim + 9 * P) * 4;
    // 8 more logit rows: logits, final mix and norm rows, and each row's gathered AttnRes snapshots
    const logits = 8 * (cfg.vocab + (2 + Math.ceil(cfg.numLayers / cfg.attnResBlock)) * cfg.hidden) * 4;
    expect(extra).toBeGreaterThanOrEqual(inputs + kdaScratch + logits - 3 * 64); // drafts 0: three empty 64-byte buffers
    expect(extra).toBeLessThan(inputs + kdaScratch + logits + 64 * 8); // allocation rounding only
    const p = planMemory({ ...releaseInput(PRESETS.laptop!), drafts: undefined });
    expect(p.totalBytes).toBeLessThanOrEqual(8 * GiB);
  });

  test("laptop (8 GiB) fits: trunk streamed in pieces through 2 ring slots, the largest pieces pinned, ≥ top-k expert slots", () => {
    const p = planMemory(releaseInput(PRESETS.laptop!));
    expect(p.totalBytes).toBeLessThanOrEqual(8 * GiB);
    expect(p.items.reduce((a, i) => a + i.bytes, 0)).toBe(p.totalBytes);
    expect(p.pinnedLayers).toEqual([]);
    expect(p.streamedLayers.length).toBe(93);
    expect([p.ringSlots, p.coreSlots, p.readerMayRunAhead]).toEqual([2, 2, true]);
    // A slot holds one piece (≤ 256 MiB of 32 MiB blocks, each its own aligned read at most).
    expect(p.ringSlotBytes).toBeLessThanOrEqual(DEFAULT_PIECE_BYTES + 8 * 2 * 4096);
    expect(p.pinnedPieces.length).toBeGreaterThan(20); // ~6 GiB of the largest pieces (lm_head and dense slices first)
    expect(p.expertSlots).toBeGreaterThanOrEqual(16);
    expect(p.freeBytes).toBeLessThan(p.expertSlotBytes); // the rest went to experts
    // What the split bought: the same budget with whole units streams every layer (108.81 GB).
    const before = planMemory(wholeUnits(PRESETS.laptop!));
    expect(before.streamedBytesPerToken).toBe(release.census.trunkBytes);
    expect(p.streamedBytesPerToken).toBeLessThan(before.streamedBytesPerToken - 4e9);
    expect(p.pieces.reduce((a, x) => a + x.bytes, 0)).toBe(release.census.trunkBytes + release.census.headBytes + release.census.finalBytes);
  });
  test("server (224 GiB) pins the whole trunk and lm_head; no ring; experts get the rest", () => {
    const p = planMemory(releaseInput(PRESETS.server!));
    expect(p.pinnedLayers).toEqual(Array.from({ length: 93 }, (_, i) => i));
    expect(p.head).toBe("resident");
    expect(p.ringSlots).toBe(0);
    expect(p.streamedBytesPerToken).toBe(0);
    expect(p.expertSlots).toBeGreaterThan(4 * p.expertWorkingSet);
    expect(p.totalBytes).toBeLessThanOrEqual(224 * GiB);
  });
  test("more budget never pins less, never streams more; every plan stays within its budget", () => {
    let lastStreamed = Infinity;
    for (let g = 4; g <= 240; g += 4) {
      const p = planMemory(releaseInput(g * GiB));
      expect(p.totalBytes).toBeLessThanOrEqual(g * GiB);
      expect(p.expertSlots).toBeGreaterThanOrEqual(16);
      expect(p.streamedBytesPerToken).toBeLessThanOrEqual(lastStreamed);
      lastStreamed = p.streamedBytesPerToken;
    }
  });
  test("a budget below the floor is refused with need, usable and the context that would fit", () => {
    try {
      planMemory(releaseInput(4 * GiB, 200_000));
      throw new Error("accepted");
    } catch (e) {
      expect(e).toBeInstanceOf(K3Error);
      const err = e as K3Error;
      expect(err.code).toBe("BUDGET");
      expect(err.message).toMatch(/need \d+ bytes/);
      expect(err.message).toContain(`usable ${4 * GiB} bytes`);
      const max = maxContextAt(releaseInput(4 * GiB));
      expect(err.message).toContain(`--context ${max}`);
      expect(max).toBeGreaterThan(4096);
      expect(() => planMemory(releaseInput(4 * GiB, max))).not.toThrow();
      expect(() => planMemory(releaseInput(4 * GiB, max + 1))).toThrow(/below the floor/);
    }
  });
  test("the floor streams everything through two slots per ring: under 2 GiB at 4096 tokens (3.49 GiB with whole units)", () => {
    const floor = floorBytes(releaseInput(0));
    expect(floor).toBeLessThan(2 * GiB);
    const p = planMemory(releaseInput(floor));
    expect([p.pinnedPieces.length, p.ringSlots, p.coreSlots, p.readerMayRunAhead, p.expertSlots]).toEqual([0, 2, 2, true, 16]);
    expect(() => planMemory(releaseInput(floor - 1))).toThrow(/below the floor/);
    expect(floorBytes(wholeUnits(0))).toBeGreaterThan(3.45 * GiB);
  });
  test("whole units (the old layout), between the 1-slot floor and 2 slots: one ring slot, the reader must not run ahead", () => {
    const p = planMemory(wholeUnits(4 * GiB));
    expect(p.ringSlots).toBe(1);
    expect(p.readerMayRunAhead).toBe(false);
    expect(p.head).toBe("streamed"); // the head (lm_head + final norms) is the largest unit: it sets the slot size
    expect(p.ringSlotBytes).toBe(ioBufferBytes(release.census.headBytes) + ioBufferBytes(release.census.finalBytes));
  });
});

describe("prefill chunk", () => {
  test("on the release, every budget from the floor to 12 GiB: the chosen plan fits, reads fewer modeled bytes per prompt token than 32 tokens, and keeps two ring slots where 32 tokens has them", () => {
    let largerSeen = false;
    for (let g = 5; g <= 12; g += 0.25) {
      const base = planMemory(releaseInput(g * GiB));
      const p = planMemory(releaseInput(g * GiB, 4096, undefined, null));
      const c = p.chunkChoice;
      expect(c.source).toBe("planner");
      expect(p.totalBytes).toBeLessThanOrEqual(g * GiB);
      expect(c.candidates.map((x) => x.chunk)).toEqual([32, 64, 128, 256, 512, 1024].slice(0, c.candidates.length));
      const chosen = c.candidates.find((x) => x.chunk === p.prefillChunk)!;
      expect(chosen.prefillBytesPerToken).toBeLessThanOrEqual(c.candidates[0]!.prefillBytesPerToken);
      // the session model's argmin (within 1%)
      expect(chosen.sessionBytes).toBeLessThanOrEqual(Math.min(...c.candidates.map((x) => x.sessionBytes)) * 1.01);
      if (base.ringSlots === 2) expect(p.ringSlots).toBe(2);
      largerSeen ||= p.prefillChunk > 32;
    }
    expect(largerSeen).toBe(true);
  });
  test("laptop: a 1024-token chunk (15× fewer modeled disk bytes per prompt token than 32); the why names the reference session", () => {
    const p = planMemory(releaseInput(PRESETS.laptop!, 4096, undefined, null));
    expect(p.prefillChunk).toBe(1024);
    const [c32, c1024] = [p.chunkChoice.candidates[0]!, p.chunkChoice.candidates.at(-1)!];
    expect(c32.prefillBytesPerToken / c1024.prefillBytesPerToken).toBeGreaterThan(10);
    expect(p.chunkChoice.why).toContain(`${REFERENCE_PROMPT}-token prompt`);
  });
  test("a given chunk is used as is; a short prompt caps the sizes weighed; the context caps them too", () => {
    const given = planMemory(releaseInput(PRESETS.desktop!, 4096, undefined, 48));
    expect(given.prefillChunk).toBe(48);
    expect(given.chunkChoice.source).toBe("given");
    const short = planMemory({ ...releaseInput(PRESETS.desktop!, 4096, undefined, null), promptTokens: 100 });
    expect(short.chunkChoice.candidates.map((x) => x.chunk)).toEqual([32, 64, 128]);
    const ctx = planMemory(releaseInput(PRESETS.desktop!, 200, undefined, null));
    expect(ctx.chunkChoice.candidates.map((x) => x.chunk)).toEqual([32, 64, 128, 256]);
  });
  test("nothing to read (everything resident): the smallest chunk whose expert matmuls get ≥ 64 rows", () => {
    const cfg = { ...release.config, numExperts: 8, topK: 2 } as ModelConfig;
    expect(residentChunk(cfg, 4096)).toBe(256); // 256·2/8 = 64
    expect((residentChunk(cfg, 4096) * 2) / 8).toBe(ROWS_PER_EXPERT_CALL);
    expect(residentChunk(release.config, 4096)).toBe(1024); // 1024·16/896 < 64: the largest size
    expect(residentChunk(cfg, 100)).toBe(128); // the context caps it
    const all = planMemory(releaseInput(4096 * GiB, 4096, undefined, null));
    expect(all.streamedBytesPerToken).toBe(0);
    expect(all.chunkChoice.why).toContain("everything resident");
    expect(all.prefillChunk).toBe(1024);
  });
});

describe("pinning choice on hand-made byte figures", () => {
  // Three layers + lm_head; everything but the trunk is made tiny so the numbers are readable.
  const tiny = (budgetMB: number): PlanInput => {
    const cfg: ModelConfig = {
      ...release.config,
      numLayers: 3,
      layerKinds: ["kda", "kda", "mla"],
      firstKDense: 1,
      numExperts: 4,
      topK: 2,
      kdaHeads: 1,
      kdaHeadDim: 4,
      mlaHeads: 1,
      hidden: 8,
      vocab: 16,
      denseInter: 8,
      moeInter: 8,
      latent: 8,
    } as unknown as ModelConfig;
    const MB = 2 ** 20;
    return {
      cfg, trunkBytesPerLayer: [100 * MB, 300 * MB, 200 * MB], expertBytes: 10 * MB,
      embedBytes: MB, headBytes: 150 * MB, finalBytes: 1024,
      budgetBytes: budgetMB * MB, contextTokens: 16, threads: 1, prefillChunk: 1,
    };
  };
  test("largest first; a unit that does not fit is skipped and smaller ones still pinned", () => {
    // fixed ≈ 384 MiB runtime + small; experts floor 2 × 10 MiB. Budget 384 + 20 + ~1140 MiB.
    const p = planMemory(tiny(384 + 21 + 200 + 150 + 2 * 200 + 16));
    // Pin 300 (ring then 2 × 200 = 400: 700 ≤ 766), pin 200? 300+200+2×150 = 800 > 766 → skip;
    // pin 150 (head): 300+150+2×200 = 850 > 766 → skip; pin 100: 300+100+400 = 800 > 766 → skip.
    expect(p.pinnedLayers).toEqual([1]);
    expect(p.head).toBe("streamed");
    expect(p.ringSlots).toBe(2);
    expect(p.ringSlotBytes).toBe(ioBufferBytes(200 * 2 ** 20));
  });
  test("everything fits: every layer and lm_head pinned, no ring", () => {
    const p = planMemory(tiny(2000));
    expect(p.pinnedLayers).toEqual([0, 1, 2]);
    expect(p.head).toBe("resident");
    expect(p.ringSlots).toBe(0);
    expect(p.expertSlots).toBe(8); // capped at every expert of the 2 MoE layers
  });
});

describe("usable RAM", () => {
  function fakeRoot(meminfoKB: number | null, cgroupLines: string, files: Record<string, string>): RamPaths {
    const root = mkdtempSync(join(tmpdir(), "k3-ram-"));
    const proc = join(root, "proc");
    mkdirSync(join(proc, "self"), { recursive: true });
    writeFileSync(join(proc, "meminfo"), `MemTotal: 99999999 kB\n${meminfoKB === null ? "" : `MemAvailable: ${meminfoKB} kB\n`}`);
    writeFileSync(join(proc, "self", "cgroup"), cgroupLines);
    const cg = join(root, "cgroup");
    for (const [rel, text] of Object.entries(files)) {
      mkdirSync(join(cg, rel, ".."), { recursive: true });
      writeFileSync(join(cg, rel), text);
    }
    return { meminfo: join(proc, "meminfo"), selfCgroup: join(proc, "self", "cgroup"), cgroupRoot: cg };
  }
  test("v2: the smallest of MemAvailable and every memory.max / memory.high up the tree", () => {
    const paths = fakeRoot(16 * 2 ** 20, "0::/a/b\n", {
      "a/b/memory.max": "max\n",
      "a/b/memory.high": `${12 * GiB}\n`,
      "a/memory.max": `${10 * GiB}\n`,
      "memory.max": "max\n",
    });
    const u = usableRam(paths);
    expect(u.bytes).toBe(10 * GiB);
    expect(u.binding.source).toBe(join(paths.cgroupRoot, "a", "memory.max"));
    expect(u.limits.length).toBe(3); // MemAvailable, a/b high, a max
  });
  test("no limits: MemAvailable decides", () => {
    const paths = fakeRoot(4 * 2 ** 20, "0::/\n", { "memory.max": "max\n" });
    expect(usableRam(paths).bytes).toBe(4 * GiB);
  });
  test("v1 memory controller: limit_in_bytes; the v1 'unlimited' value is ignored", () => {
    const paths = fakeRoot(32 * 2 ** 20, "4:memory:/job/x\n1:cpu:/\n", {
      "memory/job/x/memory.limit_in_bytes": "9223372036854771712\n",
      "memory/job/memory.limit_in_bytes": `${6 * GiB}\n`,
    });
    expect(usableRam(paths).bytes).toBe(6 * GiB);
  });
  test("no MemAvailable: an IO error that says to use --ram", () => {
    expect(() => usableRam(fakeRoot(null, "", {}))).toThrow(/--ram/);
  });
  test("preset auto reads usable RAM; --ram overrides any preset; unknown preset refused", () => {
    const paths = fakeRoot(3 * 2 ** 20, "0::/\n", {});
    expect(resolveBudget("auto", undefined, paths).bytes).toBe(3 * GiB);
    expect(resolveBudget("server", "12G", paths)).toEqual({ bytes: 12 * GiB, source: "--ram 12G" });
    expect(resolveBudget("desktop", undefined, paths).bytes).toBe(32 * GiB);
    expect(() => resolveBudget("phone", undefined, paths)).toThrow(/unknown preset/);
  });
  test("sizes: K/M/G/T binary, KB/MB/GB/TB decimal, bare bytes", () => {
    expect(parseSize("8G")).toBe(8 * GiB);
    expect(parseSize("8gib")).toBe(8 * GiB);
    expect(parseSize("8GB")).toBe(8e9);
    expect(parseSize("1.5K")).toBe(1536);
    expect(parseSize("4096")).toBe(4096);
    expect(parseSize("2T")).toBe(2 * 2 ** 40);
    expect(() => parseSize("8Q")).toThrow(/invalid size/);
    expect(() => parseSize("-1G")).toThrow(/invalid size/);
  });
});

describe("k3 plan", () => {
  const k3 = (args: string[]) => {
    const p = Bun.spawnSync([process.execPath, "src/cli/main.ts", "plan", ...args], { env: { ...process.env, NO_COLOR: "1" } });
    return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
  };
  test("--config/--index --preset laptop --json: a plan that fits 8 GiB", () => {
    const r = k3(["--config", CONFIG, "--index", INDEX, "--preset", "laptop", "--threads", "4", "--json"]);
    expect(r.code).toBe(0);
    const plan = JSON.parse(r.out);
    expect(plan.budget_bytes).toBe(8 * GiB);
    expect(plan.total_bytes).toBeLessThanOrEqual(8 * GiB);
    expect(plan.threads).toBe(4);
  });
  test("a budget below the floor exits 3 with both numbers on stderr, nothing on stdout", () => {
    const r = k3(["--config", CONFIG, "--index", INDEX, "--ram", "1G"]);
    expect(r.code).toBe(3);
    expect(r.out).toBe("");
    expect(r.err).toContain("below the floor");
    expect(r.err).toContain(`usable ${1 * GiB} bytes`);
  });
  test("a checkpoint directory (generated tiny model): plan from its headers", async () => {
    const { generateModel } = await import("../tools/gen/generate.ts");
    const dir = mkdtempSync(join(tmpdir(), "k3-plan-"));
    await generateModel(dir, { preset: "tiny-a" });
    const r = k3([dir, "--ram", "1G", "--context", "64", "--threads", "2", "--json"]);
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
    const plan = JSON.parse(r.out);
    expect(plan.pinned_layers.length).toBe(8); // a tiny model fits whole
    expect(plan.ring_slots).toBe(0);
    expect(plan.context_tokens).toBe(64);
  });
  test("text output shows the prefill chunk, why, and the sizes weighed; --chunk overrides", () => {
    const r = k3(["--config", CONFIG, "--index", INDEX, "--preset", "laptop", "--threads", "4"]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/prefill chunk: 1024 tokens — fewest modeled disk bytes/);
    expect(r.out).toMatch(/\n\s+1024\s.*←/);
    const g = k3(["--config", CONFIG, "--index", INDEX, "--preset", "laptop", "--threads", "4", "--chunk", "48"]);
    expect(g.out).toContain("prefill chunk: 48 tokens — given (--chunk)");
    const both = k3(["--config", CONFIG, "--index", INDEX, "--chunk", "48", "--prompt", "100"]);
    expect(both.code).toBe(2);
  });
  test("neither a directory nor --config/--index is a usage error", () => {
    const r = Bun.spawnSync([process.execPath, "src/cli/main.ts", "plan", "--preset", "laptop"], { env: { ...process.env, NO_COLOR: "1", K3_MODEL: undefined } });
    expect(r.exitCode).toBe(2);
    expect(r.stderr.toString()).toContain("--config");
  });
});
