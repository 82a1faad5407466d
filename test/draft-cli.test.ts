// `--draft DIR|none` as a user reaches it: `k3 run` and `k3 plan` (spawned from source) and
// `k3 serve`'s /v1/models and /k3/stats. The JSON stats name the draft and count per drafter; a
// broken draft is refused before any weight is read, naming the field or tensor, with the exit
// status docs/CLI.md gives its error (CONFIG 2, CHECKPOINT 4), never a stack trace.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { Engine } from "../src/engine.ts";
import { k3Source } from "./helpers/cli.ts";
import { tinyDraft, tinyModel } from "./helpers/models.ts";
import { serve } from "./server.helpers.ts";

setDefaultTimeout(120_000);

const k3 = k3Source;

let model = "";
let draft = "";
beforeAll(async () => {
  model = await tinyModel("tiny-a");
  draft = await tinyDraft("tiny-a", { variant: "eagle3.1", rope: "yarn" });
});

const RUN = ["--ids", "5,17,300,42,7", "--gen", "10", "--threads", "1", "--json", "--context", "256"];

describe("k3 run --draft", () => {
  test("the same ids as without it; the stats name the draft and count what each drafter drafted", () => {
    const off = JSON.parse(k3(["run", model, ...RUN, "--draft", "none"]).out);
    const r = k3(["run", model, ...RUN, "--draft", draft, "--speculate", "3"]);
    expect(r.code).toBe(0);
    const on = JSON.parse(r.out);
    expect(on.generated_ids).toEqual(off.generated_ids);
    expect(on.stats.draft).toEqual({ name: expect.stringContaining("draft-tiny-a"), variant: "eagle3.1", format: "bf16", capture_layers: [2, 4, 5], shared_embedding: true });
    expect(off.stats.draft).toBeNull();
    const m = on.stats.drafters.model;
    expect(m.drafted_tokens).toBeGreaterThan(0);
    expect(m.verify_passes).toBe(on.stats.verify_passes);
    expect(m.tokens_per_verify_pass).toBe(Math.round(((m.accepted_tokens + m.verify_passes) / m.verify_passes) * 100) / 100);
    expect(on.stats.tokens_per_verify_pass).toBe(m.tokens_per_verify_pass);
    expect(typeof on.stats.bytes_read_per_token).toBe("number");
  });

  test("a broken draft: exit 2 (config) or 4 (tensors), naming what is wrong, no stack trace", async () => {
    const cases: [string, number, RegExp][] = [
      ["ids-out-of-range", 2, /eagle_aux_hidden_state_layer_ids: 9 outside the target's completed layers 1\.\.8/],
      ["missing-field", 2, /qk_rope_head_dim: missing/],
      ["missing-tensor", 4, /layers\.0\.self_attn\.kv_b_proj\.weight: missing/],
      ["format-b", 4, /format B/],
    ];
    for (const [brk, code, names] of cases) {
      const r = k3(["run", model, ...RUN, "--draft", await tinyDraft("tiny-a", { break: brk as never })]);
      expect({ brk, code: r.code }).toEqual({ brk, code });
      expect(r.err).toMatch(names);
      expect(r.err).not.toMatch(/\n\s+at .*\.ts:\d+/);
    }
  });

  test("--draft with --speculate off is a usage error (the draft would never run)", () => {
    const r = k3(["run", model, ...RUN, "--draft", draft, "--speculate", "off"]);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--speculate off turns off/);
  });
});

describe("k3 plan --draft", () => {
  test("the draft's weights, state and scratch are items of the plan, and the pass's scratch grows by the capture", () => {
    const plan = (extra: string[]) => JSON.parse(k3(["plan", model, "--ram", "1G", "--context", "256", "--threads", "1", "--chunk", "32", "--json", ...extra]).out);
    const without = plan([]);
    const withDraft = plan(["--draft", draft]);
    const item = (p: { items: { name: string; bytes: number }[] }, n: string) => p.items.find((i) => i.name === n)?.bytes ?? 0;
    for (const n of ["draft", "draft state", "draft scratch"]) expect(item(withDraft, n)).toBeGreaterThan(0);
    expect(item(without, "draft")).toBe(0);
    // The target's scratch also grows: the pass captures the draft's layers.
    expect(item(withDraft, "scratch")).toBeGreaterThan(item(without, "scratch"));
  });

  test("what the draft's share costs the target: more bytes per token at the same budget, none at the budget it names", () => {
    type Cost = { share_bytes: number; bytes_per_token_without: number; extra_bytes_per_token: number };
    const at = (ram: number, json = true) => k3(["plan", model, "--ram", String(ram), "--context", "256", "--threads", "1", "--chunk", "32", "--draft", draft, ...(json ? ["--json"] : [])]).out;
    const cost = (ram: number) => (JSON.parse(at(ram)) as { draft_cost: Cost }).draft_cost;
    // Just above the floor (the trunk partly streamed), the draft's share displaces pins.
    const budget = 405_000_000;
    const tight = cost(budget);
    expect(tight.extra_bytes_per_token).toBeGreaterThan(0);
    expect(at(budget, false)).toContain("more disk per decoded token");
    // With its share on top, the target's plan is the one it has without the draft.
    const more = cost(budget + tight.share_bytes);
    expect(more.bytes_per_token_without + more.extra_bytes_per_token).toBe(tight.bytes_per_token_without);
    // Everything resident: the draft fits beside.
    expect(cost(2 ** 30).extra_bytes_per_token).toBe(0);
    expect(at(2 ** 30, false)).toContain("fit beside the target's plan");
  });
});

describe("k3 serve --draft", () => {
  test("/v1/models and /k3/stats name the draft; the model drafter is one of the drafters a client is told of", async () => {
    const engine = Engine.open(model, { threads: 1, context: 256, draft });
    const server = serve(engine);
    try {
      type ModelEntry = { draft: { name: string; variant: string }; k3: { speculation: { drafters: string[] } } };
      const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: ModelEntry[] };
      expect(models.data[0]!.draft).toMatchObject({ variant: "eagle3.1" });
      expect(models.data[0]!.k3.speculation.drafters).toEqual(["ngram", "model"]);
      const stats = (await (await fetch(`${server.url}/k3/stats`)).json()) as { draft: { name: string }; engine: { draft: { name: string } } };
      expect(stats.draft.name).toContain("draft-tiny-a");
      expect(stats.engine.draft.name).toBe(stats.draft.name);
    } finally {
      await server.stop();
      engine.close();
    }
  });
});
