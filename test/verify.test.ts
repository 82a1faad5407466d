// `k3 verify` and `--verify`: shard sizes against headers, recorded checksums, and a corrupted
// expert that must stop generation with an error naming its tensors before any token comes out.
import { describe, expect, test } from "bun:test";
import { appendFileSync, cpSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { Engine, verifyModel } from "../src/engine.ts";
import { expertTensorNames } from "../src/checkpoint/shapes.ts";
import { flipByte, scratchDir, tinyModel } from "./helpers/models.ts";

const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250];
const CLI = [process.execPath, "src/cli/main.ts"];

function copyModel(name: string, src: string): string {
  const d = scratchDir(name);
  cpSync(src, d, { recursive: true });
  return d;
}

describe("k3 verify", () => {
  test("a clean model passes; --record writes one checksum per expert and trunk block (a tiny model's tensors are whole blocks)", async () => {
    const d = copyModel("verify-ok", await tinyModel("tiny-b"));
    const r = verifyModel(d, { record: true });
    const ck = openCheckpoint(d);
    expect(r.shards.every((s) => s.ok)).toBe(true);
    expect(r.recorded!.experts).toBe(ck.layout.census.expertCount);
    expect(r.recorded!.trunkBlocks).toBe(ck.layout.census.trunkTensors + ck.layout.census.globalTensors - 1); // every trunk tensor and the head's, not the embedding
    const body = JSON.parse(readFileSync(r.recorded!.path, "utf8"));
    expect(Object.keys(body.experts).length).toBe(ck.layout.census.expertCount);
  });

  test("a shard with bytes appended after its data is refused, naming the shard (exit 4)", async () => {
    const d = copyModel("verify-long", await tinyModel("tiny-b"));
    const shard = readdirSync(d).filter((f) => f.endsWith(".safetensors")).sort()[2]!;
    appendFileSync(join(d, shard), Buffer.alloc(10));
    const p = Bun.spawnSync([...CLI, "verify", d], { env: { ...process.env, NO_COLOR: "1" } });
    expect(p.exitCode).toBe(4);
    expect(p.stderr.toString()).toContain(shard);
    expect(p.stdout.toString()).toBe("");
  });

  test("--verify without recorded checksums is refused", async () => {
    const d = copyModel("verify-none", await tinyModel("tiny-b"));
    expect(() => Engine.open(d, { verify: true, threads: 1 })).toThrow(/no checksums recorded .*k3 verify/);
  });

  test("a corrupted expert stops generation with a VERIFY error naming its tensors, before any token", async () => {
    const d = copyModel("verify-bad", await tinyModel("tiny-b"));
    verifyModel(d, { record: true });
    // Flip one byte inside every expert's w2.weight_packed of layer 1: whichever experts the
    // router picks, the first expert read of layer 1 is corrupt.
    const ck = openCheckpoint(d);
    for (let e = 0; e < ck.config.numExperts; e++) {
      const te = ck.tensors.get(expertTensorNames(1, e).find((n) => n.endsWith("w2.weight_packed"))!)!;
      flipByte(te.file, te.offset + 7);
    }
    const engine = Engine.open(d, { verify: true, threads: 1, ram: "1G" });
    try {
      const got: number[] = [];
      expect(() => {
        for (const t of engine.generate(engine.createSession(), PROMPT, { maxTokens: 4 })) got.push(t.id);
      }).toThrow(/expert \d+ of layer 1 \(language_model\.model\.layers\.1\.block_sparse_moe\.experts\.\d+\.w1\.weight_packed.*fails its checksum/);
      expect(got).toEqual([]);
      // What was checked is counted (bytes, not time): every pinned unit at open, then rows and experts.
      const s = engine.stats();
      expect(s.verifiedBytes).toBeGreaterThan(0);
      expect(s.verifiedBytes).toBeLessThanOrEqual(s.trunkBytesRead + s.expertBytesRead);
    } finally {
      engine.close();
    }
  });
});

describe("--trace", () => {
  test("writes one line per token with top-k ids of every MoE layer, replayable by simulate-cache", async () => {
    const d = await tinyModel("tiny-a");
    const trace = join(scratchDir("trace"), "t.jsonl");
    const engine = Engine.open(d, { trace, threads: 1, chunk: 3 });
    const cfg = engine.config;
    try {
      for (const _ of engine.generate(engine.createSession(), PROMPT, { maxTokens: 5 }));
    } finally {
      engine.close();
    }
    const lines = readFileSync(trace, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    // prompt tokens + 4 decode steps (the 5th token is emitted, not yet fed)
    expect(lines.map((l) => l.tok)).toEqual([...Array(PROMPT.length + 4).keys()]);
    for (const l of lines) {
      expect(l.layers.length).toBe(cfg.numLayers - cfg.firstKDense);
      for (const ids of l.layers) {
        expect(ids.length).toBe(cfg.topK);
        expect(new Set(ids).size).toBe(cfg.topK);
        for (const e of ids) expect(e >= 0 && e < cfg.numExperts).toBe(true);
      }
    }
    const p = Bun.spawnSync([...CLI, "simulate-cache", trace, "--slots", "1x", "--json"], { env: { ...process.env, NO_COLOR: "1" } });
    expect(p.exitCode).toBe(0);
    expect(JSON.parse(p.stdout.toString())).toBeTruthy();
  });
});

describe("--verify reports its cost", () => {
  test("run --verify --json reports what it checked (verified_bytes) and the time (verify_ms)", async () => {
    const d = copyModel("verify-cost", await tinyModel("tiny-b"));
    verifyModel(d, { record: true });
    const p = Bun.spawnSync([...CLI, "run", d, "--ids", "1,2", "--gen", "3", "--verify", "--json", "--threads", "1"], { stdin: "ignore", env: { ...process.env, NO_COLOR: "1" } });
    expect(p.exitCode).toBe(0);
    const stats = JSON.parse(p.stdout.toString()).stats;
    expect(typeof stats.verify_ms).toBe("number");
    // The prompt's embedding rows at least were read and checked during the generation.
    expect(stats.verified_bytes).toBeGreaterThan(0);
    expect(stats.verified_bytes).toBeLessThanOrEqual(stats.bytes_read);
    // Without --verify nothing is checked, and nothing is reported.
    const plain = Bun.spawnSync([...CLI, "run", d, "--ids", "1,2", "--gen", "3", "--json", "--threads", "1"], { stdin: "ignore", env: { ...process.env, NO_COLOR: "1" } });
    expect(plain.exitCode).toBe(0);
    expect(JSON.parse(plain.stdout.toString()).stats).toMatchObject({ verify_ms: 0, verified_bytes: 0 });
  });
});
