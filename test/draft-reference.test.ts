// Tests of the float64 EAGLE-3 draft reference (tools/reference/draft.ts) and of the target
// reference's capture taps (ReferenceModel.forwardAll): identities that hold in exact arithmetic
// (absorbed = plain MLA, a cache refilled pass by pass = one built at once, the final logits rebuilt
// from the taps), hand-computed YaRN values for the release's config (DRAFTERS.md §3.3), and the
// switches that must matter (norm_output, RoPE) or must not (a plain RoPE spelled as a dict).
import { describe, expect, test } from "bun:test";
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { YarnParams } from "../tools/reference/draft-config.ts";
import { ropeAmplitude, ropeFrequencies, ropeInterleaved, softmaxScale, yarnCorrection, yarnRange } from "../tools/reference/draft-ops.ts";
import { argmax, committedCache, draftChain, ReferenceDraft, speculateGreedy } from "../tools/reference/draft.ts";
import { ReferenceModel } from "../tools/reference/model.ts";
import { attnResMix, decodeBF16, matvec, rmsnorm } from "../tools/reference/ops.ts";
import { SafetensorsDir } from "../tools/reference/safetensors.ts";
import { scratchDir, tinyDraft, tinyModel } from "./helpers/models.ts";

const RELEASE_YARN: YarnParams = { factor: 32, originalMax: 32768, betaFast: 32, betaSlow: 1, mscale: 1, mscaleAllDim: 1 };
const PROMPT = [5, 17, 300, 42, 7, 99, 3, 700, 12, 64];

const maxAbs = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
};

describe("YaRN and RoPE: hand-computed values for the release's config (DRAFTERS.md §3.3)", () => {
  test("correction range, frequencies, amplitude and softmax scale (d = 64, θ = 50000, s = 32, L₀ = 32768)", () => {
    // numbers computed by hand (Python, float64) from the formulas of §3.3, not by this code
    expect(yarnCorrection(64, 50000, 32768, 32)).toBeCloseTo(15.064544519265745, 12);
    expect(yarnCorrection(64, 50000, 32768, 1)).toBeCloseTo(25.314620442668634, 12);
    expect(yarnRange(64, 50000, RELEASE_YARN)).toEqual({ lo: 15, hi: 26 });
    const w = ropeFrequencies(64, 50000, RELEASE_YARN);
    const want: Array<[number, number]> = [[0, 1.0], [1, 0.713111084911932], [15, 0.00627130337702138], [16, 0.0040782830725990486], [20, 0.0006472429221761893], [25, 2.5446983665530005e-05], [26, 4.752661605335366e-06], [31, 8.764412911589874e-07]];
    for (const [i, v] of want) expect(w[i]! / v).toBeCloseTo(1, 12);
    expect(ropeAmplitude(RELEASE_YARN)).toBe(1);
    expect(softmaxScale({ dn: 128, dr: 64, yarn: RELEASE_YARN })).toBeCloseTo(0.13086079996295008, 14);
    expect(softmaxScale({ dn: 128, dr: 64, yarn: undefined })).toBeCloseTo(0.07216878364870323, 14);
    const plain = ropeFrequencies(64, 50000, undefined);
    expect(plain[1]! / 50000 ** (-2 / 64)).toBeCloseTo(1, 14);
    expect(plain[31]! / 50000 ** (-62 / 64)).toBeCloseTo(1, 14);
  });

  test("the small drafts' 16 rope dims hit all three regimes: pairs 0–3 original, 4–6 blended, 7 divided by 32", () => {
    const w = ropeFrequencies(16, 50000, RELEASE_YARN);
    const extra = (i: number) => 50000 ** ((-2 * i) / 16);
    expect(yarnRange(16, 50000, RELEASE_YARN)).toEqual({ lo: 3, hi: 7 });
    expect(w[3]! / extra(3)).toBeCloseTo(1, 14);
    expect(w[5]! / 0.000596317717639484).toBeCloseTo(1, 12); // ramp 0.5
    expect(w[7]! / (extra(7) / 32)).toBeCloseTo(1, 14);
  });

  test("interleaved pairs (x₂ᵢ, x₂ᵢ₊₁) rotate by pos·ωᵢ (DeepSeek's non-NeoX convention)", () => {
    const y = ropeInterleaved(Float64Array.from([1, 0, 0, 1]), 2, Float64Array.from([1, 0.5]), 1);
    const want = [-0.4161468365471424, 0.9092974268256817, -0.8414709848078965, 0.5403023058681398]; // cos 2, sin 2, −sin 1, cos 1
    expect(maxAbs(y, want)).toBeLessThan(1e-15);
  });
});

describe("target reference: the taps are the prefix-sum stream after the completed layer (DRAFTERS.md §2.3)", () => {
  /** The last layer's logits rebuilt from taps alone: mix(P after layer L, [E[x], P after each block]). */
  async function rebuild(stream: "prefix" | "mixture", shift = 0) {
    const dir = await tinyModel("tiny-a"); // 8 layers, AttnRes block 3: snapshots before layers 0, 3, 6
    const ref = ReferenceModel.open(dir);
    const all = [1, 2, 3, 4, 5, 6, 7, 8];
    const { logits, taps } = ref.forwardAll(PROMPT, { tapLayers: all, tapStream: stream });
    const st = SafetensorsDir.open(dir);
    const w = (n: string) => decodeBF16(st.read(`language_model.${n}`));
    const E = ref.cfg.hidden, V = ref.cfg.vocab;
    const embed = w("model.embed_tokens.weight");
    const tap = (t: number, id: number) => taps[t]![id - 1 - shift]!;
    let worst = 0;
    PROMPT.forEach((x, t) => {
      const bank = [embed.slice(x * E, (x + 1) * E), tap(t, 3), tap(t, 6)]; // P after zero-based 2 and 5
      const h = attnResMix(tap(t, 8), bank, w("model.output_attn_res_proj.weight"), w("model.output_attn_res_norm.weight"), ref.cfg.eps);
      const got = matvec(w("lm_head.weight"), V, E, rmsnorm(h, w("model.norm.weight"), ref.cfg.eps));
      worst = Math.max(worst, maxAbs(got, logits[t]!));
    });
    return { worst, taps, logits };
  }

  test("prefix taps rebuild every position's logits exactly; the forwardAll logits are forward()'s", async () => {
    const r = await rebuild("prefix");
    expect(r.worst).toBe(0);
    const ref = ReferenceModel.open(await tinyModel("tiny-a"));
    expect(maxAbs(r.logits.at(-1)!, ref.forward(PROMPT))).toBe(0);
    expect(maxAbs(r.logits[3]!, ref.forward(PROMPT.slice(0, 4)))).toBe(0);
  });

  test("the AttnRes mixture and the neighbouring layer are different streams (either rebuilds nothing)", async () => {
    const p = await rebuild("prefix");
    const mix = await rebuild("mixture");
    expect(mix.worst).toBeGreaterThan(0.1);
    const t = 4;
    for (const id of [2, 4, 5]) expect(maxAbs(p.taps[t]![id - 1]!, mix.taps[t]![id - 1]!)).toBeGreaterThan(0.05);
    expect(maxAbs(p.taps[t]![3]!, p.taps[t]![4]!)).toBeGreaterThan(0.05); // ids 4 and 5: off by one
  });

  test("every tap is what the next layer mixes from: Mix(tap, bank) is that layer's input (the mixture stream)", async () => {
    // zero-based layer ℓ's attention input is Mix(P after layer ℓ−1, bank before ℓ) with layer ℓ's
    // self_attention_res weights; the bank holds the embedding and the P at every block boundary < ℓ
    const dir = await tinyModel("tiny-a"); // block 3
    const ref = ReferenceModel.open(dir);
    const ids = [1, 2, 3, 4, 5, 6, 7];
    const p = ref.forwardAll(PROMPT, { tapLayers: ids }).taps;
    const mix = ref.forwardAll(PROMPT, { tapLayers: ids, tapStream: "mixture" }).taps;
    const st = SafetensorsDir.open(dir);
    const w = (n: string) => decodeBF16(st.read(`language_model.model.${n}`));
    const embed = w("embed_tokens.weight");
    const E = ref.cfg.hidden;
    PROMPT.forEach((x, t) => {
      for (const id of ids) {
        const bank = [embed.slice(x * E, (x + 1) * E), ...[3, 6].filter((b) => b < id).map((b) => p[t]![b - 1]!)];
        const h = attnResMix(p[t]![id - 1]!, bank, w(`layers.${id}.self_attention_res_proj.weight`), w(`layers.${id}.self_attention_res_norm.weight`), ref.cfg.eps);
        expect([t, id, maxAbs(h, mix[t]![id - 1]!)]).toEqual([t, id, 0]);
      }
    });
  });

  test("tap ids outside 1..L are refused, naming the range", async () => {
    const ref = ReferenceModel.open(await tinyModel("tiny-a"));
    expect(() => ref.forwardAll(PROMPT, { tapLayers: [0] })).toThrow("tap layer 0 is not a one-based layer id in 1..8");
    expect(() => ref.forwardAll(PROMPT, { tapLayers: [9] })).toThrow("tap layer 9 is not a one-based layer id in 1..8");
  });
});

describe("draft reference: identities and switches", () => {
  test("the absorbed MLA form equals the plain (up-projected) one", async () => {
    const target = ReferenceModel.open(await tinyModel("tiny-b"));
    const draft = ReferenceDraft.open(await tinyDraft("tiny-b"));
    const a = draftChain(target, draft, PROMPT, 4, { absorbed: true });
    const p = draftChain(target, draft, PROMPT, 4, { absorbed: false });
    expect(p.drafts).toEqual(a.drafts);
    a.steps.forEach((s, i) => {
      const scale = Math.max(...s.logits.map(Math.abs));
      expect(maxAbs(s.logits, p.steps[i]!.logits) / scale).toBeLessThan(1e-12);
      expect(maxAbs(s.y, p.steps[i]!.y)).toBeLessThan(1e-12);
    });
  });

  test("a chain leaves the cache as it was; its step-1 row equals the committed row of the same inputs", async () => {
    const target = ReferenceModel.open(await tinyModel("tiny-a"));
    const draft = ReferenceDraft.open(await tinyDraft("tiny-a"));
    const r = draftChain(target, draft, PROMPT, 3);
    expect(r.cache.length).toBe(PROMPT.length - 1);
    expect(r.steps.map((s) => s.pos)).toEqual([9, 10, 11]);
    const again = draft.propose(r.cache, r.taps.at(-1)!, r.next, 3);
    expect(again.map((s) => s.draft)).toEqual(r.drafts);
    expect(maxAbs(again[2]!.logits, r.steps[2]!.logits)).toBe(0);
    const row = draft.committedRow(r.taps.at(-1)!, r.next, PROMPT.length - 1);
    expect([maxAbs(row.c, r.steps[0]!.row.c), maxAbs(row.kr, r.steps[0]!.row.kr)]).toEqual([0, 0]);
    expect(() => draft.step(r.cache, new Float64Array(64), 1, 3)).toThrow("needs a cache of 3 rows, it has 9");
  });

  test("speculation: the ids are the target's greedy ids; the cache refilled from verify taps equals one built at once", async () => {
    const target = ReferenceModel.open(await tinyModel("tiny-a"));
    const draft = ReferenceDraft.open(await tinyDraft("tiny-a"));
    const want = target.greedy(PROMPT, 14);
    // an oracle that proposes the target's own greedy tokens, wrong from the (pass % 4)-th on:
    // accepted counts 0..k, so rows of every kind are refilled
    let pass = 0;
    const oracle = (ctx: number[], k: number) => {
      const right = target.greedy(ctx, k);
      const wrongFrom = pass++ % (k + 1);
      return right.map((id, i) => (i < wrongFrom ? id : (id + 1) % target.cfg.vocab));
    };
    const r = speculateGreedy(target, draft, PROMPT, 14, 3, { oracle });
    expect(r.ids).toEqual(want);
    expect([...new Set(r.passes.map((p) => p.accepted))].sort()).toEqual([0, 1, 2, 3]);
    const once = committedCache(draft, target.forwardAll(r.committed, { tapLayers: draft.cfg.layerIds }).taps, r.committed);
    expect(r.cache.length).toBe(r.committed.length - 1);
    r.cache.rows.forEach((row, j) => expect([j, maxAbs(row.c, once.rows[j]!.c), maxAbs(row.kr, once.rows[j]!.kr)]).toEqual([j, 0, 0]));
    const own = speculateGreedy(target, draft, PROMPT, 8, 3); // the random draft's own drafts: same ids
    expect(own.ids).toEqual(want.slice(0, 8));
  });

  test("norm_output changes only the chain's feedback: step 1 identical, step 2 on differs", async () => {
    const target = ReferenceModel.open(await tinyModel("tiny-a"));
    const src = await tinyDraft("tiny-a"); // eagle3.1
    const dir = scratchDir("draft-pre-norm");
    cpSync(src, dir, { recursive: true });
    const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
    writeFileSync(join(dir, "config.json"), JSON.stringify({ ...cfg, norm_output: false }));
    const post = draftChain(target, ReferenceDraft.open(src), PROMPT, 3);
    const pre = draftChain(target, ReferenceDraft.open(dir), PROMPT, 3);
    expect(maxAbs(post.steps[0]!.logits, pre.steps[0]!.logits)).toBe(0);
    expect(maxAbs(post.steps[1]!.logits, pre.steps[1]!.logits)).toBeGreaterThan(0.1);
    expect(maxAbs(ReferenceDraft.open(dir).feedback(post.steps[0]!), post.steps[0]!.r2)).toBe(0);
  });

  test("YaRN vs plain RoPE changes the drafts' numbers; a plain RoPE spelled {rope_type: default} is plain", async () => {
    const target = ReferenceModel.open(await tinyModel("tiny-a"));
    const yarn = draftChain(target, ReferenceDraft.open(await tinyDraft("tiny-a")), PROMPT, 2);
    const plain = draftChain(target, ReferenceDraft.open(await tinyDraft("tiny-a", { rope: "plain" })), PROMPT, 2);
    const dict = draftChain(target, ReferenceDraft.open(await tinyDraft("tiny-a", { rope: "default-dict" })), PROMPT, 2);
    expect(maxAbs(yarn.steps[0]!.logits, plain.steps[0]!.logits)).toBeGreaterThan(1e-3);
    dict.steps.forEach((s, i) => expect(maxAbs(s.logits, plain.steps[i]!.logits)).toBe(0));
  });

  test("eagle3 (no fc_norm, pre-norm feedback) and a shared embedding that differs from the draft's own", async () => {
    const target = ReferenceModel.open(await tinyModel("tiny-c"));
    const e3 = ReferenceDraft.open(await tinyDraft("tiny-c", { variant: "eagle3" }));
    expect([e3.cfg.fcNorm, e3.cfg.normOutput]).toEqual([false, false]);
    const r = draftChain(target, e3, PROMPT, 2);
    expect(e3.feedback(r.steps[0]!)).toBe(r.steps[0]!.r2);
    const own = await tinyDraft("tiny-c", { embedding: "differ" });
    const st = SafetensorsDir.open(await tinyModel("tiny-c"));
    const shared = ReferenceDraft.open(own, { embedding: decodeBF16(st.read("language_model.model.embed_tokens.weight")) });
    const same = ReferenceDraft.open(await tinyDraft("tiny-c"));
    const a = draftChain(target, shared, PROMPT, 2), b = draftChain(target, same, PROMPT, 2);
    expect(maxAbs(a.steps[1]!.logits, b.steps[1]!.logits)).toBe(0); // the shared table is what counts
    expect(maxAbs(draftChain(target, ReferenceDraft.open(own), PROMPT, 2).steps[0]!.logits, b.steps[0]!.logits)).toBeGreaterThan(1e-3);
  });
});
