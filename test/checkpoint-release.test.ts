// The real release metadata (config.json + model.safetensors.index.json.gz, no shards): the
// catalogue accounts for every index name and the census matches MODEL.md §3 to the byte.
// Also drives `k3 info` end to end as a user runs it.
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { catalogueFromMetadata } from "../src/checkpoint/catalogue.ts";
import { tempDir, tinyConfigJson, writeCheckpoint } from "./helpers/checkpoint-fixture.ts";

const REF = join(import.meta.dir, "../reference/k3");
const CONFIG = `${REF}/config.json`;
const INDEX = `${REF}/model.safetensors.index.json.gz`;

function k3(args: string[]) {
  const p = Bun.spawnSync([process.execPath, "src/cli/main.ts", ...args], { env: { ...process.env, NO_COLOR: "1" } });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

describe("release metadata", () => {
  const m = catalogueFromMetadata(CONFIG, INDEX);
  test("every index name is accounted for: LM tensors expected, vision ignored", () => {
    expect(m.indexNames).toBe(497_220);
    expect(m.specs.length + m.ignored.length).toBe(497_220);
    expect(m.ignored.length).toBe(168);
    expect(m.ignored.every((n) => n.startsWith("vision_tower.") || n.startsWith("mm_projector."))).toBe(true);
    expect(m.shards.length).toBe(96);
    expect(m.indexTotalBytes).toBe(1_560_860_324_864);
  });
  test("census: 2,460 + 494,592 tensors; trunk, experts, embedding + lm_head to the byte", () => {
    const c = m.census;
    expect(c.nonExpertTensors).toBe(2_460);
    expect(c.expertTensors).toBe(494_592);
    expect(c.trunkBytes).toBe(108_811_877_376);
    expect(c.expertCount).toBe(82_432);
    expect(c.expertBytes).toBe(17_547_264);
    expect(c.embedBytes + c.headBytes).toBe(4_697_620_480);
    // Layer L lives in shard L+1 (MODEL.md §1).
    expect(m.shardOf.get("language_model.model.layers.92.self_attn.o_proj.weight")).toBe("model-00093-of-000096.safetensors");
  });
});

describe("k3 info", () => {
  test("--config/--index --json prints one JSON object with the release numbers", () => {
    const r = k3(["info", "--config", CONFIG, "--index", INDEX, "--json"]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.tensors).toEqual({ non_expert: 2460, expert: 494592, ignored: 168, listed: 497220, shards: 96 });
    expect(j.census.trunk_bytes).toBe(108_811_877_376);
    expect(j.census.expert_count * j.census.expert_bytes).toBe(82_432 * 17_547_264);
    expect(j.layer_map.mla.slice(-2)).toEqual([91, 92]);
    expect(j.layout).toBeNull();
  });
  test("text output names the layer map compressed and the census", () => {
    const r = k3(["info", "--config", CONFIG, "--index", INDEX]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("KDA 0-2,4-6,8-10,");
    expect(r.out).toContain("MLA 3,7,11,");
    expect(r.out).toContain(",87,91-92");
    expect(r.out).toContain("experts 82,432 × 17,547,264");
    expect(r.out).toContain("trunk 108,811,877,376");
    expect(r.out).toContain("embedding + lm_head 2,348,810,240 + 2,348,810,240 = 4,697,620,480");
  });
  test("a checkpoint directory reports layout facts", () => {
    const dir = tempDir("info");
    writeCheckpoint(dir, { vision: true });
    const r = k3(["info", dir, "--json"]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.layout).toEqual({ contiguous_layers: 5, layers: 5, adjacent_experts: 16, experts: 16, non_contiguous_layers: [] });
    expect(j.tensors.ignored).toBe(2);
    expect(k3(["info", dir]).out).toContain("contiguous trunk runs: 5/5 layers");
  });
  test("a bad config exits 2 and names the field on stderr; stdout stays empty", () => {
    const dir = tempDir("info-bad");
    writeCheckpoint(dir, {});
    const cfg = tinyConfigJson();
    cfg.text_config.num_experts_per_token = 99;
    writeFileSync(join(dir, "config.json"), JSON.stringify(cfg));
    const r = k3(["info", dir]);
    expect(r.code).toBe(2);
    expect(r.out).toBe("");
    expect(r.err).toContain("text_config.num_experts_per_token");
  });
  test("a checkpoint problem exits 4; usage mistakes exit 2", () => {
    const dir = tempDir("info-ck");
    writeCheckpoint(dir, { edit: (ts) => ts.slice(1) });
    const r = k3(["info", dir]);
    expect(r.code).toBe(4);
    expect(r.err).toContain("embed_tokens.weight: missing");
    expect(k3(["info"]).code).toBe(2);
    expect(k3(["info", "--config", CONFIG]).code).toBe(2);
  });
});
