// Tests of the test-model generator (tools/gen/). Each check reads the written files back with a
// tiny independent safetensors parser below, not with the generator's own code.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { f32ToBf16 } from "../tools/gen/bf16.ts";
import { generateModel, type GenerateResult } from "../tools/gen/generate.ts";
import { PRESETS } from "../tools/gen/presets.ts";
import { SafetensorsStreamWriter, writeSafetensors } from "../tools/gen/safetensors-writer.ts";
import { MXFP4_SENTINEL } from "../tools/gen/tensor-plan.ts";

const SIZES: Record<string, number> = { BF16: 2, F32: 4, U8: 1 };
interface Entry { name: string; dtype: string; shape: number[]; begin: number; end: number } // absolute offsets

/** Independent parse: 8-byte LE length, JSON, offsets must tile [0, data section) exactly. */
function parseShard(path: string): { entries: Entry[]; bytes: Uint8Array } {
  const bytes = new Uint8Array(readFileSync(path));
  const n = Number(new DataView(bytes.buffer).getBigUint64(0, true));
  expect(n % 8).toBe(0);
  expect(8 + n).toBeLessThanOrEqual(bytes.length);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
  const entries: Entry[] = [];
  for (const [name, v] of Object.entries<any>(header)) {
    if (name === "__metadata__") continue;
    const [a, b] = v.data_offsets as [number, number];
    const numel = (v.shape as number[]).reduce((x, y) => x * y, 1);
    expect(SIZES[v.dtype]).toBeDefined();
    expect(b - a).toBe(numel * SIZES[v.dtype]!);
    entries.push({ name, dtype: v.dtype, shape: v.shape, begin: 8 + n + a, end: 8 + n + b });
  }
  const sorted = [...entries].sort((x, y) => x.begin - y.begin);
  let at = 8 + n;
  for (const e of sorted) {
    expect(e.begin).toBe(at); // no gap, no overlap
    at = e.end;
  }
  expect(at).toBe(bytes.length); // data section fully used, nothing trailing
  return { entries, bytes };
}

function shardFiles(dir: string): string[] {
  return readdirSync(dir).filter((f) => f.endsWith(".safetensors")).sort();
}

/** Are these byte ranges one contiguous run (in some order)? */
function contiguous(es: Entry[]): boolean {
  const s = [...es].sort((a, b) => a.begin - b.begin);
  return s.every((e, i) => i === 0 || e.begin === s[i - 1]!.end);
}

let root: string;
let a1: GenerateResult, a2: GenerateResult, broken: GenerateResult;
beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "k3-gen-"));
  a1 = await generateModel(join(root, "a1"), { preset: "tiny-a", seed: 7 });
  a2 = await generateModel(join(root, "a2"), { preset: "tiny-a", seed: 7 });
  broken = await generateModel(join(root, "broken"), { preset: "tiny-a", seed: 7, breakLayout: true });
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("determinism", () => {
  test("same preset + seed → byte-identical files", () => {
    const names = readdirSync(a1.dir).sort();
    expect(names).toEqual(readdirSync(a2.dir).sort());
    for (const f of names) expect(Buffer.compare(readFileSync(join(a1.dir, f)), readFileSync(join(a2.dir, f)))).toBe(0);
  });
  test("another seed → different weights, same config", async () => {
    const b = await generateModel(join(root, "seed8"), { preset: "tiny-a", seed: 8 });
    expect(readFileSync(join(b.dir, "config.json"), "utf8")).toBe(readFileSync(join(a1.dir, "config.json"), "utf8"));
    const f = a1.files[1]!;
    expect(Buffer.compare(readFileSync(join(a1.dir, f)), readFileSync(join(b.dir, f)))).not.toBe(0);
  });
});

describe("format", () => {
  test("every shard parses; tensor bytes equal what the generator reports", () => {
    let seen = 0;
    for (const f of shardFiles(a1.dir)) {
      const { entries, bytes } = parseShard(join(a1.dir, f));
      for (const e of entries) {
        const t = a1.tensors.get(e.name)!;
        expect(t).toBeDefined();
        expect(t.file).toBe(f);
        expect(t.dtype).toBe(e.dtype as any);
        expect(t.shape).toEqual(e.shape);
        expect(Buffer.compare(Buffer.from(bytes.subarray(e.begin, e.end)), Buffer.from(t.data!))).toBe(0);
        seen++;
      }
    }
    expect(seen).toBe(a1.tensors.size);
  });

  test("shard names and placement mimic the release", () => {
    const L = PRESETS["tiny-a"]!.layers;
    const files = shardFiles(a1.dir);
    expect(files.length).toBe(L + 3);
    expect(L).toBe(8); // tiny-a: 11 shards, named with 5 / 6 digits like the release's model-00094-of-000096
    expect(files[0]).toBe("model-00001-of-000011.safetensors");
    expect(files[L]).toBe("model-00009-of-000011.safetensors");
    expect(files[0]).toMatch(/^model-\d{5}-of-\d{6}\.safetensors$/);
    for (const [name, t] of a1.tensors) {
      const m = /^language_model\.model\.layers\.(\d+)\./.exec(name);
      if (m) expect(t.file).toBe(files[Number(m[1])]!);
      else if (name.startsWith("language_model.")) expect(t.file).toBe(files[L]!);
      else if (name.startsWith("mm_projector.")) expect(t.file).toBe(files[L + 1]!);
      else expect(t.file).toBe(files[L + 2]!), expect(name.startsWith("vision_tower.")).toBe(true);
    }
    expect(a1.tensors.has("vision_tower.patch_embed.proj.weight")).toBe(true);
  });

  test("index is consistent with the shards", () => {
    const idx = JSON.parse(readFileSync(join(a1.dir, "model.safetensors.index.json"), "utf8"));
    const fromShards = new Map<string, string>();
    let total = 0;
    for (const f of shardFiles(a1.dir))
      for (const e of parseShard(join(a1.dir, f)).entries) (fromShards.set(e.name, f), (total += e.end - e.begin));
    expect(Object.keys(idx.weight_map).length).toBe(fromShards.size);
    for (const [n, f] of fromShards) expect(idx.weight_map[n]).toBe(f);
    expect(idx.metadata.total_size).toBe(total);
  });

  test("config is the release's nested shape; specials at the top of the vocab", () => {
    const cfg = JSON.parse(readFileSync(join(a1.dir, "config.json"), "utf8"));
    const tc = cfg.text_config, la = tc.linear_attn_config, V = tc.vocab_size;
    expect(cfg.model_type).toBe("kimi_k3");
    expect(tc.model_type).toBe("kimi_linear");
    expect([cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id]).toEqual([V - 256, V - 254, V - 1]);
    expect(cfg.vision_config).toBeDefined();
    const L = tc.num_hidden_layers;
    expect(la.full_attn_layers).toContain(L);
    expect(la.full_attn_layers).toContain(L - 1);
    expect([...la.full_attn_layers, ...la.kda_layers].sort((x: number, y: number) => x - y)).toEqual(Array.from({ length: L }, (_, i) => i + 1));
    expect(la.num_heads).toBeLessThan(la.head_dim);
    const embed = a1.tensors.get("language_model.model.embed_tokens.weight")!;
    expect(embed.shape).toEqual([V, tc.hidden_size]);
    expect(a1.tensors.get("language_model.model.layers.1.self_attn.A_log")!.shape).toEqual([la.head_dim]);
    expect(existsSync(join(a1.dir, "tiktoken.model")) && existsSync(join(a1.dir, "tokenizer_config.json"))).toBe(true);
  });

  test("dtypes per MODEL.md §3", () => {
    const dt = (suffix: string) => a1.tensors.get(`language_model.model.layers.1.${suffix}`)!.dtype;
    expect(dt("self_attn.q_conv1d.weight")).toBe("F32");
    expect(dt("self_attn.A_log")).toBe("F32");
    expect(dt("self_attn.dt_bias")).toBe("F32");
    expect(dt("self_attn.o_norm.weight")).toBe("F32");
    expect(dt("block_sparse_moe.gate.e_score_correction_bias")).toBe("F32");
    expect(dt("block_sparse_moe.gate.weight")).toBe("BF16");
    expect(dt("block_sparse_moe.experts.3.w2.weight_packed")).toBe("U8");
  });
});

describe("MXFP4", () => {
  const S = MXFP4_SENTINEL;
  const E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6];
  const decode = (nib: number, s: number) => (s === 255 ? 0 : (nib & 8 ? -1 : 1) * E2M1[nib & 7]! * 2 ** (s - 127));

  test("shapes: w1/w3 [F, Z/2] + [F, Z/32], w2 [Z, F/2] + [Z, F/32]", () => {
    const p = PRESETS["tiny-a"]!;
    const t = (s: string) => a1.tensors.get(`language_model.model.layers.2.block_sparse_moe.experts.5.${s}`)!.shape;
    expect(t("w1.weight_packed")).toEqual([p.moeInter, p.latent / 2]);
    expect(t("w3.weight_scale")).toEqual([p.moeInter, p.latent / 32]);
    expect(t("w2.weight_packed")).toEqual([p.latent, p.moeInter / 2]);
    expect(t("w2.weight_scale")).toEqual([p.latent, p.moeInter / 32]);
  });

  test("the sentinel element decodes low nibble first: W[0][0] = 3, W[0][1] = −2", () => {
    const pre = `language_model.model.layers.${S.layer}.block_sparse_moe.experts.${S.expert}.${S.proj}.`;
    const packed = a1.tensors.get(pre + "weight_packed")!.data!;
    const scale = a1.tensors.get(pre + "weight_scale")!.data!;
    expect(packed[0]).toBe(0xa3);
    expect(scale[0]).toBe(128);
    expect(decode(packed[0]! & 15, scale[0]!)).toBe(S.w00);
    expect(decode(packed[0]! >> 4, scale[0]!)).toBe(S.w01);
  });

  test("E8M0 scales span 120..130 with a few 255 (NaN)", () => {
    const counts = new Map<number, number>();
    let total = 0;
    for (const [n, t] of a1.tensors)
      if (n.endsWith(".weight_scale")) for (const b of t.data!) (counts.set(b, (counts.get(b) ?? 0) + 1), total++);
    for (const b of counts.keys()) expect(b === 255 || (b >= 120 && b <= 130)).toBe(true);
    for (let s = 120; s <= 130; s++) expect(counts.get(s) ?? 0).toBeGreaterThan(0);
    const nan = counts.get(255) ?? 0;
    expect(nan).toBeGreaterThan(0);
    expect(nan / total).toBeLessThan(0.03);
  });
});

describe("layout", () => {
  function layerFacts(r: GenerateResult, layer: number) {
    const { entries } = parseShard(join(r.dir, r.files[layer]!));
    const trunk = entries.filter((e) => !e.name.includes(".experts."));
    const expert = (i: number) => entries.filter((e) => e.name.includes(`.experts.${i}.`));
    return { trunk: contiguous(trunk), experts: Array.from({ length: PRESETS["tiny-a"]!.experts }, (_, i) => contiguous(expert(i)) && expert(i).length === 6) };
  }
  test("release layout: each layer's trunk is one run, each expert's six tensors adjacent", () => {
    for (let l = 0; l < PRESETS["tiny-a"]!.layers; l++) {
      const f = layerFacts(a1, l);
      expect(f.trunk).toBe(true);
      if (l > 0) expect(f.experts.every(Boolean)).toBe(true);
    }
  });
  test("breakLayout breaks both facts in MoE layers and keeps every tensor's bytes", () => {
    for (let l = 1; l < PRESETS["tiny-a"]!.layers; l++) {
      const f = layerFacts(broken, l);
      expect(f.trunk).toBe(false);
      expect(f.experts[0]).toBe(false);
    }
    expect([...broken.tensors.keys()].sort()).toEqual([...a1.tensors.keys()].sort());
    for (const [n, t] of broken.tensors) expect(Buffer.compare(Buffer.from(t.data!), Buffer.from(a1.tensors.get(n)!.data!))).toBe(0);
  });
});

describe("writers and rounding", () => {
  test("stream writer (sync and pipelined) with chunks spanning tensors = whole writer; refuses short or long data", async () => {
    const tensors = [
      { name: "a", dtype: "BF16" as const, shape: [3], data: new Uint8Array([1, 2, 3, 4, 5, 6]) },
      { name: "b", dtype: "U8" as const, shape: [2, 2], data: new Uint8Array([7, 8, 9, 10]) },
    ];
    const p1 = join(root, "w1.safetensors"), p2 = join(root, "w2.safetensors");
    writeSafetensors(p1, tensors, { format: "pt" });
    const w = new SafetensorsStreamWriter(p2, tensors, { format: "pt" });
    w.append(new Uint8Array([1, 2, 3, 4]));
    w.append(new Uint8Array([5, 6, 7, 8, 9]));
    w.append(new Uint8Array([10]));
    w.close();
    expect(Buffer.compare(readFileSync(p1), readFileSync(p2))).toBe(0);
    const { entries } = parseShard(p1);
    expect(entries.map((e) => e.name)).toEqual(["a", "b"]);
    const p3 = join(root, "w-pipe.safetensors");
    const pipe = new SafetensorsStreamWriter(p3, tensors, { format: "pt" });
    for (const c of [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]) await pipe.appendPipelined(new Uint8Array(c));
    await pipe.flush();
    pipe.close();
    expect(Buffer.compare(readFileSync(p1), readFileSync(p3))).toBe(0);
    const short = new SafetensorsStreamWriter(join(root, "w3.safetensors"), tensors);
    short.append(new Uint8Array(9));
    expect(() => short.close()).toThrow(/9 of 10/);
    const long = new SafetensorsStreamWriter(join(root, "w4.safetensors"), tensors);
    expect(() => long.append(new Uint8Array(11))).toThrow(/overflows/);
    long.abort();
  });

  test("bf16 rounds to nearest even", () => {
    const x = new Float32Array([1, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -2.5, NaN]);
    const b = f32ToBf16(x);
    expect(Array.from(b.subarray(0, 5))).toEqual([0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020]);
    expect((b[5]! & 0x7f80) === 0x7f80 && (b[5]! & 0x7f) !== 0).toBe(true);
  });
});

describe("presets", () => {
  test("tiny presets show the §8 traps in their config", () => {
    for (const name of ["tiny-a", "tiny-b", "tiny-c"]) {
      const p = PRESETS[name]!;
      expect(p.hidden).not.toBe(p.latent);
      expect(p.kdaHeads).toBeLessThan(p.kdaHeadDim);
      expect(p.experts).toBeGreaterThanOrEqual(8);
      expect(p.topK).toBeGreaterThanOrEqual(2);
      expect(p.topK).toBeLessThanOrEqual(4);
      expect(Math.floor(p.layers / p.attnResBlock)).toBeGreaterThanOrEqual(2);
    }
    expect(["tiny-a", "tiny-b", "tiny-c"].map((n) => PRESETS[n]!.aLogTail).sort()).toEqual(["random", "random", "zero"]);
    expect(["tiny-a", "tiny-b", "tiny-c"].some((n) => PRESETS[n]!.routedScaling !== 1)).toBe(true);
    expect(["tiny-a", "tiny-b", "tiny-c"].some((n) => PRESETS[n]!.qkNope !== PRESETS[n]!.vHead)).toBe(true);
  });

  test("A_log tail: random in tiny-a, zero in tiny-b", async () => {
    const tail = (r: GenerateResult) => {
      const d = r.tensors.get("language_model.model.layers.1.self_attn.A_log")!.data!;
      return Array.from(new Float32Array(d.buffer, d.byteOffset, d.length / 4).subarray(r.preset.kdaHeads));
    };
    expect(tail(a1).every((v) => v !== 0)).toBe(true);
    const b = await generateModel(join(root, "b"), { preset: "tiny-b" });
    expect(tail(b).every((v) => v === 0)).toBe(true);
  });

  test("demo stays small", async () => {
    const d = await generateModel(join(root, "demo"), { preset: "demo" });
    const bytes = shardFiles(d.dir).reduce((a, f) => a + statSync(join(d.dir, f)).size, 0);
    expect(bytes).toBeLessThan(20e6);
    expect(d.preset.vocab).toBeGreaterThanOrEqual(4096);
  });
});
