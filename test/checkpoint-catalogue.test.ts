// openCheckpoint on tiny checkpoints written to temp dirs: a valid one opens with exact offsets
// and layout facts; every mismatch with the config is a K3Error("CHECKPOINT") naming the tensor.
import { describe, expect, test } from "bun:test";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { catalogueFromMetadata, openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { expertExtent } from "../src/checkpoint/layout.ts";
import { expertBytes, expertTensorNames } from "../src/checkpoint/shapes.ts";
import { catchK3, fillOf, tempDir, tinyConfig, tinyConfigJson, writeCheckpoint, writeShard, type FixtureTensor } from "./helpers/checkpoint-fixture.ts";

const L = "language_model.model.";

function refused(opts: Parameters<typeof writeCheckpoint>[1], prep?: (dir: string) => void) {
  const dir = tempDir("cat");
  writeCheckpoint(dir, opts);
  prep?.(dir);
  const e = catchK3(() => openCheckpoint(dir));
  expect(e.code).toBe("CHECKPOINT");
  return `${e.message}\n${e.problems.join("\n")}`;
}

describe("catalogue: a valid checkpoint", () => {
  const dir = tempDir("cat-ok");
  writeCheckpoint(dir, { vision: true });
  const ck = openCheckpoint(dir);
  const cfg = tinyConfig();

  test("every LM tensor is catalogued; vision tensors are listed as ignored", () => {
    const nonExpert = 5 + 5 * 6 + 3 * 14 + 2 * 8 + 3 + 4 * 8; // globals, common, KDA, MLA, dense, MoE
    expect(ck.tensors.size).toBe(nonExpert + 4 * 4 * 6);
    expect(ck.ignored.sort()).toEqual(["mm_projector.proj.0.weight", "vision_tower.encoder.blocks.0.wo.weight"]);
    expect(ck.shards.length).toBe(6);
    expect(ck.index).toBe(join(dir, "model.safetensors.index.json"));
  });
  test("offsets point at the tensor's own bytes", () => {
    for (const name of [`${L}embed_tokens.weight`, `${L}layers.2.self_attn.A_log`, expertTensorNames(4, 3)[5]!]) {
      const t = ck.tensors.get(name)!;
      const bytes = readFileSync(t.file).subarray(t.offset, t.offset + t.bytes);
      expect(bytes[0]).toBe(fillOf(name));
      expect(bytes[t.bytes - 1]).toBe((fillOf(name) + t.bytes - 1) & 255);
    }
  });
  test("layout: every trunk is one run and every expert one read", () => {
    const lay = ck.layout;
    expect(lay.contiguousLayers).toBe(5);
    expect(lay.adjacentExperts).toBe(16);
    const x = expertExtent(lay, 2, 1)!;
    const w1 = ck.tensors.get(expertTensorNames(2, 1)[0]!)!;
    expect(x).toEqual({ file: w1.file, offset: w1.offset, bytes: expertBytes(cfg) });
    expect(expertExtent(lay, 0, 0)).toBeNull(); // dense layer has no experts
    const t0 = lay.layers[0]!;
    expect(t0.trunkExtent!.bytes).toBe(t0.trunkBytes);
    expect(lay.layers.map((l) => l.kind)).toEqual(["kda", "kda", "kda", "mla", "mla"]);
  });
  test("a shard the index lists only with non-LM tensors (vision) may be absent: k3 never reads it; an LM shard may not", () => {
    const d3 = tempDir("cat-novision");
    writeCheckpoint(d3, { vision: "own-shard" });
    const last = "model-00007-of-000007.safetensors";
    expect(openCheckpoint(d3).ignored.length).toBe(2); // the vision shard is there: its tensors are noted
    rmSync(join(d3, last));
    const c3 = openCheckpoint(d3);
    expect(c3.tensors.size).toBe(ck.tensors.size);
    expect(c3.ignored).toEqual([]);
    expect(c3.shards.map((s) => s.file)).not.toContain(join(d3, last));
    rmSync(join(d3, "model-00003-of-000007.safetensors"));
    const e = catchK3(() => openCheckpoint(d3));
    expect(e.code).toBe("CHECKPOINT");
    expect(e.problems).toEqual([`${join(d3, "model-00003-of-000007.safetensors")}: not found`]);
  });
  test("without an index, shards come from the directory listing", () => {
    const d2 = tempDir("cat-noidx");
    writeCheckpoint(d2, { index: false });
    const c2 = openCheckpoint(d2);
    expect(c2.index).toBeNull();
    expect(c2.tensors.size).toBe(ck.tensors.size);
  });
  test("metadata-only catalogue agrees on names and census", () => {
    const m = catalogueFromMetadata(join(dir, "config.json"), join(dir, "model.safetensors.index.json"));
    expect(m.specs.length).toBe(ck.tensors.size);
    expect(m.ignored.length).toBe(2);
    expect(m.census).toEqual(ck.layout.census);
  });
});

describe("catalogue: layout facts when the release layout does not hold", () => {
  test("a foreign tensor inside an expert and inside a trunk breaks exactly those runs", () => {
    const dir = tempDir("cat-lay");
    // Non-LM tensors placed (layer: …) in the same shard, between LM tensors.
    const intruder = (name: string, layer: number): FixtureTensor => ({ name, dtype: "U8", shape: [1], layer });
    writeCheckpoint(dir, {
      edit: (ts) => {
        const out: FixtureTensor[] = [];
        for (const t of ts) {
          out.push(t);
          if (t.name === expertTensorNames(3, 2)[1]) out.push(intruder("vision_tower.x", 3));
          if (t.name === `${L}layers.1.input_layernorm.weight`) out.push(intruder("mm_projector.y", 1));
        }
        return out;
      },
    });
    const ck = openCheckpoint(dir);
    expect(ck.layout.adjacentExperts).toBe(15);
    expect(expertExtent(ck.layout, 3, 2)).toBeNull();
    expect(expertExtent(ck.layout, 3, 1)).not.toBeNull();
    expect(ck.layout.layers.filter((l) => !l.trunkExtent).map((l) => l.layer)).toEqual([1]);
  });
  test("an expert split across two shards is not adjacent; order inside a run does not matter", () => {
    const dir = tempDir("cat-split");
    const moved = expertTensorNames(1, 0)[4]!;
    writeCheckpoint(dir, {
      edit: (ts) => {
        const six = expertTensorNames(2, 3);
        const rest = ts.filter((t) => !six.includes(t.name));
        const at = rest.findIndex((t) => t.name === `${L}layers.2.block_sparse_moe.experts.4.w1.weight_packed`);
        const reversed = six.map((n) => ts.find((t) => t.name === n)!).reverse();
        return [...rest.slice(0, at), ...reversed, ...rest.slice(at)];
      },
    });
    // Rewrite: move one tensor of expert (1,0) into the globals shard by editing the index+shards.
    const d2 = tempDir("cat-split2");
    const { shards } = writeCheckpoint(d2, {});
    const s0 = [...shards.keys()][0]!, s2 = [...shards.keys()][2]!; // globals, layer 1
    const t = shards.get(s2)!.find((x) => x.name === moved)!;
    writeShard(join(d2, s0), [...shards.get(s0)!, t]);
    writeShard(join(d2, s2), shards.get(s2)!.filter((x) => x.name !== moved));
    const idx = JSON.parse(readFileSync(join(d2, "model.safetensors.index.json"), "utf8"));
    idx.weight_map[moved] = s0;
    writeFileSync(join(d2, "model.safetensors.index.json"), JSON.stringify(idx));
    const split = openCheckpoint(d2);
    expect(expertExtent(split.layout, 1, 0)).toBeNull();
    expect(split.layout.adjacentExperts).toBe(15);
    const rev = openCheckpoint(dir);
    expect(rev.layout.adjacentExperts).toBe(16); // reversed order still tiles one range
  });
});

describe("catalogue: refusals", () => {
  test("missing tensor", () => {
    const name = `${L}layers.3.self_attn.kv_b_proj.weight`;
    expect(refused({ index: false, edit: (ts) => ts.filter((t) => t.name !== name) })).toContain(`${name}: missing (expected BF16 [14,6])`);
  });
  test("wrong shape names the tensor, its file and both shapes", () => {
    const name = `${L}layers.1.self_attn.A_log`;
    const msg = refused({ edit: (ts) => ts.map((t) => (t.name === name ? { ...t, shape: [3] } : t)) });
    expect(msg).toMatch(/layers\.1\.self_attn\.A_log in .*model-00003-of-000006\.safetensors: is F32 \[3\], expected F32 \[4\]/);
  });
  test("wrong dtype", () => {
    const name = `${L}layers.1.self_attn.dt_bias`;
    expect(refused({ edit: (ts) => ts.map((t) => (t.name === name ? { ...t, dtype: "BF16" } : t)) })).toContain("is BF16 [12], expected F32 [12]");
  });
  test("known-but-unexpected dtype (F16) for a K3 tensor", () => {
    const name = `${L}norm.weight`;
    expect(refused({ edit: (ts) => ts.map((t) => (t.name === name ? { ...t, dtype: "F16" } : t)) })).toContain("norm.weight in");
  });
  test("duplicate across shards", () => {
    const name = `${L}norm.weight`;
    const msg = refused({ index: false }, (dir) => writeShard(join(dir, "model-extra.safetensors"), [{ name, dtype: "BF16", shape: [16] }]));
    expect(msg).toContain(`${name}: duplicate tensor, in`);
    expect(msg).toContain("model-extra.safetensors");
  });
  test("extra language-model tensor", () => {
    const name = `${L}layers.0.self_attn.rotary_emb.inv_freq`;
    const msg = refused({ edit: (ts) => [...ts, { name, dtype: "F32", shape: [2] }] });
    expect(msg).toContain(`${name} in`);
    expect(msg).toContain("unexpected language-model tensor");
  });
  test("an expert beyond num_experts is an extra tensor", () => {
    const msg = refused({ edit: (ts) => [...ts, { name: `${L}layers.1.block_sparse_moe.experts.4.w1.weight_scale`, dtype: "U8", shape: [32, 2] }] });
    expect(msg).toContain("experts.4.w1.weight_scale in");
  });
  test("a shard named by the index is missing", () => {
    const msg = refused({}, (dir) => rmSync(join(dir, "model-00004-of-000006.safetensors")));
    expect(msg).toContain("shards named by the index are missing");
    expect(msg).toContain("model-00004-of-000006.safetensors: not found");
  });
  test("index and headers disagree both ways", () => {
    const msg = refused({}, (dir) => {
      const p = join(dir, "model.safetensors.index.json");
      const idx = JSON.parse(readFileSync(p, "utf8"));
      idx.weight_map[`${L}norm.weight`] = "model-00002-of-000006.safetensors";
      delete idx.weight_map[`${L}layers.0.mlp.up_proj.weight`];
      idx.weight_map["vision_tower.ghost"] = "model-00001-of-000006.safetensors";
      writeFileSync(p, JSON.stringify(idx));
    });
    expect(msg).toContain(`${L}norm.weight: model.safetensors.index.json says model-00002-of-000006.safetensors, but it is in`);
    expect(msg).toContain(`${L}layers.0.mlp.up_proj.weight: in `);
    expect(msg).toContain("not listed in model.safetensors.index.json");
    expect(msg).toContain("vision_tower.ghost: listed in model.safetensors.index.json");
  });
  test("an index shard name that is a path is refused", () => {
    const msg = refused({}, (dir) => {
      const p = join(dir, "model.safetensors.index.json");
      const idx = JSON.parse(readFileSync(p, "utf8"));
      idx.weight_map[`${L}norm.weight`] = "../elsewhere.safetensors";
      writeFileSync(p, JSON.stringify(idx));
    });
    expect(msg).toContain("expected a shard file name");
  });
  test("a truncated shard fails with the shard's name", () => {
    const msg = refused({}, (dir) => {
      const p = join(dir, "model-00002-of-000006.safetensors");
      writeFileSync(p, readFileSync(p).subarray(0, 200));
    });
    expect(msg).toContain("model-00002-of-000006.safetensors");
  });
  test("a bad config stops the open with a CONFIG error", () => {
    const dir = tempDir("cat-cfg");
    const cfg = tinyConfigJson();
    delete cfg.text_config.hidden_size;
    writeCheckpoint(dir, {});
    writeFileSync(join(dir, "config.json"), JSON.stringify(cfg));
    const e = catchK3(() => openCheckpoint(dir));
    expect(e.code).toBe("CONFIG");
    expect(e.problems.join("\n")).toContain("text_config.hidden_size: missing");
  });
  test("many problems are listed, capped, with a count of the rest", () => {
    const msg = refused({ edit: (ts) => ts.filter((t) => !t.name.includes(".experts.")) });
    expect(msg).toContain("… and 66 more"); // 96 missing expert tensors, 30 listed
  });
  test("metadata catalogue: index missing an LM tensor", () => {
    const dir = tempDir("cat-meta");
    writeCheckpoint(dir, {});
    const p = join(dir, "model.safetensors.index.json");
    const idx = JSON.parse(readFileSync(p, "utf8"));
    delete idx.weight_map[`${L}embed_tokens.weight`];
    idx.weight_map[`${L}extra.weight`] = "x.safetensors";
    writeFileSync(p, JSON.stringify(idx));
    const e = catchK3(() => catalogueFromMetadata(join(dir, "config.json"), p));
    expect(e.code).toBe("CHECKPOINT");
    expect(e.problems.join("\n")).toContain(`${L}embed_tokens.weight: missing from the index`);
    expect(e.problems.join("\n")).toContain(`${L}extra.weight: unexpected language-model tensor`);
  });
});
