// Speculation inside a batched server (issue 27) as a client meets it, on the trained demo model
// (its greedy text loops, so the n-gram drafter really drafts and verify passes keep drafts):
// `--parallel 2`, two requests at once that both speculate — their verify segments share steps —
// then one with `speculate: "off"` beside a seeded one; every answer is the token ids of the same request run alone
// without speculation (greedy and seeded); each answer's `k3` says what it drafted, kept and how
// many verify passes it ran; /k3/stats `batch` lists each step's verify segments and the sessions
// they came from; /metrics counts them.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureDemoModel } from "../src/cli/demo.ts";
import { createSampler, Engine } from "../src/engine.ts";
import type { K3Server } from "../src/server/server.ts";
import { post, serve } from "./server.helpers.ts";

setDefaultTimeout(120_000);

const PROMPTS = ["He said that the man was not in the house. He said that the man was not", "She said that the man was not in the house. She said that the man was not"];
const TOKENS = 48;

const home = mkdtempSync(join(tmpdir(), "k3-server-spec-"));
let engine: Engine;
let server: K3Server;
beforeAll(() => {
  const demo = ensureDemoModel({ HOME: home, XDG_CACHE_HOME: join(home, ".cache") });
  engine = Engine.open(demo, { threads: 1, parallel: 2, speculate: "auto" });
  server = serve(engine);
});
afterAll(() => {
  server?.stop();
  engine?.close();
  rmSync(home, { recursive: true, force: true });
});

/** The request alone on the engine without speculation: its ids (stopping at [EOS] as completions do). */
function alone(prompt: string, seed?: number): number[] {
  const tok = engine.tokenizer();
  const s = engine.createSession();
  const out: number[] = [];
  const sampler = seed === undefined ? undefined : createSampler({ temperature: 0.2, seed });
  try {
    for (const ev of engine.generate(s, tok.encode(prompt), { maxTokens: TOKENS, speculate: "off", sampler, stopIds: [tok.specialId("[EOS]")] })) out.push(ev.id);
  } finally {
    s.close();
  }
  return out;
}

const complete = async (body: Record<string, unknown>) => (await (await post(`${server.url}/v1/completions`, { max_tokens: TOKENS, temperature: 0, ...body })).json()) as any;

describe("k3 serve --parallel 2 speculates inside its batched steps", () => {
  test("two speculating requests at once, then one with speculation off beside a seeded one: each answer is its solo run without speculation; the answers' k3, /k3/stats and /metrics count the drafts", async () => {
    // Two greedy requests that both speculate, then one with speculation off beside a seeded one.
    const [a, b] = await Promise.all([complete({ prompt: PROMPTS[0], speculate: 4 }), complete({ prompt: PROMPTS[1], speculate: 4 })]);
    const [c, d] = await Promise.all([complete({ prompt: PROMPTS[1], speculate: "off" }), complete({ prompt: PROMPTS[0], speculate: 4, temperature: 0.2, seed: 5 })]);
    expect(a.k3.token_ids).toEqual(alone(PROMPTS[0]!));
    expect(b.k3.token_ids).toEqual(alone(PROMPTS[1]!));
    expect(c.k3.token_ids).toEqual(b.k3.token_ids);
    expect(d.k3.token_ids).toEqual(alone(PROMPTS[0]!, 5));
    expect([b.k3.verify_passes, d.k3.verify_passes].every((n) => n > 0)).toBe(true);
    // What each answer says about its own speculation.
    expect(a.k3.verify_passes).toBeGreaterThan(0);
    expect(a.k3.accepted_tokens).toBeGreaterThan(0);
    expect(a.k3.drafted_tokens).toBeGreaterThanOrEqual(a.k3.accepted_tokens);
    expect(c.k3.verify_passes).toBe(0); // its own speculate: "off"
    expect(c.k3.drafted_tokens).toBe(0);

    const st = ((await (await fetch(`${server.url}/k3/stats`)).json()) as any).batch;
    const verified = [a, b, c, d].reduce((x, r) => x + r.k3.drafted_tokens, 0);
    const kept = [a, b, c, d].reduce((x, r) => x + r.k3.accepted_tokens, 0);
    const passes = [a, b, c, d].reduce((x, r) => x + r.k3.verify_passes, 0);
    expect([st.draft_tokens, st.accepted_drafts, st.verify_segments]).toEqual([verified, kept, passes]);
    expect(st.shared_verify_steps).toBeGreaterThan(0); // both sessions' drafts in one step
    expect(st.verify_slots).toEqual({ holding: 0, slots: 2 });
    const segs = st.recent_steps.flatMap((r: any) => r.verify);
    expect(segs.length).toBe(passes);
    expect(new Set(segs.map((v: any) => v.session)).size).toBe(2); // from both sessions
    for (const r of st.recent_steps) {
      expect(r.draft_rows).toBe(r.verify.reduce((x: number, v: any) => x + v.drafts, 0));
      for (const v of r.verify) expect(v.accepted).toBeLessThanOrEqual(v.drafts);
      expect(r.decode_rows + r.prefill_rows + r.draft_rows).toBeLessThanOrEqual(engine.prefillChunk + 1);
    }
    const m = await (await fetch(`${server.url}/metrics`)).text();
    expect(m).toContain(`k3_batch_tokens_total{kind="draft"} ${verified}`);
    expect(m).toContain(`k3_batch_verify_segments_total ${passes}`);
    expect(m).toContain(`k3_batch_drafts_accepted_total ${kept}`);
    expect(m).toMatch(/k3_batch_shared_verify_steps_total [1-9]/);
    const models = ((await (await fetch(`${server.url}/v1/models`)).json()) as any).data[0];
    expect(models.k3.speculation.per_request).toBe(true);
  });
});
