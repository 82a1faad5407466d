// The trained EAGLE-3 draft that ships beside the demo model (assets/demo/k3-demo-draft.pack.zst,
// made by tools/train; docs/TEST-MODELS.md "Demo draft"): it unpacks to the files its description
// names, is in the released format and fits the demo target, shares the target's embedding byte
// for byte, the float64 reference computes the chain PyTorch computed on the same files, and it
// predicts the target (a random draft of the same format does not).
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packDemo, sha256Hex, unpackDemo } from "../src/cli/demo-pack.ts";
import { createSampler } from "../src/text/sampling.ts";
import { generateDraft } from "../tools/gen/draft.ts";
import { argmax, checkDraftTarget, committedCache, DraftCache, draftChain, ReferenceDraft } from "../tools/reference/draft.ts";
import { ReferenceModel } from "../tools/reference/model.ts";
import { SafetensorsDir } from "../tools/reference/safetensors.ts";

setDefaultTimeout(120_000);

const ASSETS = join(import.meta.dir, "..", "assets", "demo");
const desc = JSON.parse(readFileSync(join(ASSETS, "draft.json"), "utf8"));
const tmp = mkdtempSync(join(tmpdir(), "k3-demo-draft-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function unpack(pack: string, name: string): string {
  const dir = join(tmp, name);
  mkdirSync(dir, { recursive: true });
  unpackDemo(new Uint8Array(readFileSync(join(ASSETS, pack))), dir);
  return dir;
}
const targetDir = unpack("k3-demo.pack.zst", "target");
const draftDir = unpack("k3-demo-draft.pack.zst", "draft");
const target = ReferenceModel.open(targetDir);

/** Teacher-forced first-draft agreement on `tokens`: row t (cache rows 0..t−1, pending taps of t
 *  with the text's x_{t+1}) proposes one draft; it agrees when it is the target's argmax at t+1. */
function firstDraftAgreement(draft: ReferenceDraft, tokens: number[]): number {
  const { logits, taps } = target.forwardAll(tokens, { tapLayers: draft.cfg.layerIds });
  const all = committedCache(draft, taps, tokens);
  let agree = 0;
  for (let t = 0; t + 1 < tokens.length; t++) {
    const cache = new DraftCache();
    cache.rows.push(...all.rows.slice(0, t));
    if (draft.propose(cache, taps[t]!, tokens[t + 1]!, 1)[0]!.draft === argmax(logits[t + 1]!)) agree++;
  }
  return agree;
}

describe("the demo's trained EAGLE-3 draft (assets/demo)", () => {
  test("unpacks to the files draft.json names; released format (eagle3.1, YaRN) fitting the demo target", () => {
    for (const f of desc.files) {
      const b = new Uint8Array(readFileSync(join(draftDir, f.name)));
      expect([f.name, b.length, sha256Hex(b)]).toEqual([f.name, f.bytes, f.sha256]);
    }
    const draft = ReferenceDraft.open(draftDir);
    expect(() => checkDraftTarget(draft, target)).not.toThrow();
    expect([draft.cfg.fcNorm, draft.cfg.normOutput, draft.cfg.yarn !== undefined, draft.cfg.layerIds]).toEqual([true, true, true, desc.config.capture_layer_ids_one_based]);
    expect(desc.target.pack_sha256).toBe(sha256Hex(new Uint8Array(readFileSync(join(ASSETS, "k3-demo.pack.zst")))));
  });

  test("a draft folder packs and unpacks whole (model.safetensors is a shipped file name)", () => {
    const again = join(tmp, "repacked");
    mkdirSync(again);
    unpackDemo(packDemo(draftDir), again);
    for (const f of desc.files) expect(sha256Hex(new Uint8Array(readFileSync(join(again, f.name))))).toBe(f.sha256);
  });

  test("embed_tokens is byte-identical to the target's embedding", () => {
    const own = SafetensorsDir.open(draftDir).read("embed_tokens.weight");
    const theirs = SafetensorsDir.open(targetDir).read("language_model.model.embed_tokens.weight");
    expect(Buffer.compare(own, theirs)).toBe(0);
    expect(sha256Hex(own)).toBe(desc.target.embedding_sha256);
  });

  test("the float64 reference's chain equals PyTorch's float64 chain on the same files (three rows, four steps)", () => {
    const draft = ReferenceDraft.open(draftDir);
    const tokens: number[] = desc.check.tokens;
    for (const row of desc.check.rows as Array<{ t: number; drafts: number[]; logits_head: number[][] }>) {
      const r = draftChain(target, draft, tokens.slice(0, row.t + 1), row.drafts.length, { next: tokens[row.t + 1] });
      expect(r.drafts).toEqual(row.drafts);
      r.steps.forEach((s, i) => row.logits_head[i]!.forEach((v, j) => expect(Math.abs(s.logits[j]! - v)).toBeLessThan(1e-9)));
    }
  });

  test("it predicts the target: teacher-forced first-draft agreement well above a random draft's", async () => {
    const tokens: number[] = desc.check.tokens;
    const random = join(tmp, "random-draft");
    await generateDraft(random, { target: { dir: targetDir }, layerIds: desc.config.capture_layer_ids_one_based });
    const trained = firstDraftAgreement(ReferenceDraft.open(draftDir), tokens);
    const untrained = firstDraftAgreement(ReferenceDraft.open(random), tokens);
    expect(trained).toBeGreaterThanOrEqual(8); // of 23 rows (drafteval.py measured 0.62 on 4,064)
    expect(untrained).toBeLessThanOrEqual(2);
  });

  test("drafteval.py's greedy chain acceptance is the reference's on the first rows of its first window", () => {
    // assets/demo/draft-eval/heldout-greedy.json: accepted drafts of a 5-draft chain at every row,
    // verified greedily by the target over x_0..x_{t+1}, d_1..; recomputed here in float64
    const ev = JSON.parse(readFileSync(join(ASSETS, "draft-eval", "heldout-greedy.json"), "utf8"));
    const draft = ReferenceDraft.open(draftDir);
    const x: number[] = ev.texts[0];
    for (let t = 0; t < 6; t++) {
      const r = draftChain(target, draft, x.slice(0, t + 1), 5, { next: x[t + 1] });
      const seq = [...x.slice(0, t + 2), ...r.drafts];
      const { logits } = target.forwardAll(seq);
      let a = 0;
      while (a < 5 && r.drafts[a] === argmax(logits[t + 1 + a]!)) a++;
      expect([t, a]).toEqual([t, ev.accepted_per_position[t]]);
    }
  });

  test("drafteval.py's sampled text is what k3's seeded sampler draws from the target (first tokens of window 0)", () => {
    // the issue-21 contract (src/text/sampling.ts): window w was sampled with seed w + 1
    const ev = JSON.parse(readFileSync(join(ASSETS, "draft-eval", "heldout-sampled.json"), "utf8"));
    const sampler = createSampler({ temperature: ev.settings.temperature, seed: 1 });
    const x: number[] = ev.texts[0];
    const prompt: number = ev.settings.prompt;
    const { logits } = target.forwardAll(x.slice(0, prompt + 6));
    for (let m = prompt; m < prompt + 6; m++) expect([m, sampler.sample(Float32Array.from(logits[m - 1]!), m)]).toEqual([m, x[m]]);
  });
});
