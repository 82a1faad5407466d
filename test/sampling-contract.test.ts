// The sampling contract as a user meets it (docs/CHAT.md "The sampling contract", issue 21 item 2):
// a seeded request gives the same ids whatever else differs — `k3 run` (the compiled binary) at the
// demo's floor budget and with everything resident, with speculation off, auto and 8; `k3 serve`
// (over HTTP) with --parallel 1 and 2, with and without a prefix-cache hit, and after other users'
// traffic on the same server. The trained demo model repeats itself, so the default n-gram drafter
// really drafts there and verify passes keep sampled drafts (checked: the case could fail).
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureDemoModel } from "../src/cli/demo.ts";
import { streamCompletion } from "../src/conversation.ts";
import { Engine } from "../src/engine.ts";
import type { K3Server } from "../src/server/server.ts";
import { compiledK3, userEnv } from "./helpers/k3-binary.ts";
import { post, serve } from "./server.helpers.ts";

setDefaultTimeout(120_000);

// A copy-style prompt on which the demo loops: with this seed and temperature the n-gram drafter
// drafts and sampled drafts are kept (found by a search over seeds; the asserts below re-check it).
const PROMPT = "He said that the man was not in the house. He said that the man was not";
const SAMPLING = { temperature: 0.2, seed: 5 };
const TOKENS = 64;

const home = mkdtempSync(join(tmpdir(), "k3-sampling-contract-"));
afterAll(() => rmSync(home, { recursive: true, force: true }));
let demo: string;
beforeAll(() => {
  demo = ensureDemoModel({ HOME: home, XDG_CACHE_HOME: join(home, ".cache") });
});

function k3run(extra: string[]): { ids: number[]; stats: Record<string, number> } {
  const args = ["run", demo, "--prompt", PROMPT, "-n", String(TOKENS), "--json", "--threads", "1", "--temperature", String(SAMPLING.temperature), "--seed", String(SAMPLING.seed), ...extra];
  const p = Bun.spawnSync([compiledK3(), ...args], { env: userEnv(home), stdin: "ignore" });
  if (p.exitCode !== 0) throw new Error(`k3 ${args.join(" ")}: exit ${p.exitCode}\n${p.stderr.toString()}`);
  const j = JSON.parse(p.stdout.toString());
  return { ids: j.generated_ids, stats: j.stats };
}

describe("k3 run: one seed, one output", () => {
  test("--ram at the demo's floor and 2G (everything resident) × --speculate off, auto, 8: the same ids; drafts were kept", () => {
    // The floor as a user finds it: the refusal of a budget below it says what is needed.
    const below = Bun.spawnSync([compiledK3(), "run", demo, "--prompt", "x", "-n", "1", "--ram", "1M", "--speculate", "8"], { env: userEnv(home), stdin: "ignore" });
    expect(below.exitCode).toBe(3);
    const floor = /need (\d+) bytes/.exec(below.stderr.toString())?.[1];
    expect(floor).toBeDefined();
    const want = k3run(["--speculate", "off", "--ram", "2G"]);
    let kept = 0;
    let streamed = 0;
    for (const ram of [floor!, "2G"])
      for (const speculate of ["off", "auto", "8"]) {
        const r = k3run(["--speculate", speculate, "--ram", ram]);
        expect({ ram, speculate, ids: r.ids }).toEqual({ ram, speculate, ids: want.ids });
        kept += r.stats.accepted_tokens!;
        if (ram === floor) streamed += r.stats.trunk_bytes_read!;
      }
    expect(kept).toBeGreaterThan(0); // sampled drafts were verified and kept: speculation ran
    expect(streamed).toBeGreaterThan(want.stats.trunk_bytes_read! * 6); // the floor really streamed
  });
});

describe("k3 serve: one seed, one output", () => {
  const engines: Engine[] = [];
  const servers: K3Server[] = [];
  afterAll(async () => {
    for (const s of servers) await s.stop();
    for (const e of engines) e.close();
  });
  const open = (parallel: number) => {
    // chunk 16: the prompt (18 tokens) leaves a prefix-cache snapshot at 16
    const e = Engine.open(demo, { threads: 1, parallel, chunk: 16, prefixCache: { ramBytes: "auto" } });
    engines.push(e);
    const s = serve(e, { modelName: "demo", queue: 8 });
    servers.push(s);
    return { e, url: `${s.url}/v1/completions` };
  };
  const complete = async (url: string, body: Record<string, unknown>) => {
    const r = await post(url, { prompt: PROMPT, max_tokens: TOKENS, ...SAMPLING, ...body });
    expect(r.status).toBe(200);
    return ((await r.json()) as any).k3 as { token_ids: number[]; drafted_tokens: number; accepted_tokens: number };
  };
  const usage = async (url: string) => {
    const r = await post(url, { prompt: PROMPT, max_tokens: TOKENS, ...SAMPLING });
    const j = (await r.json()) as any;
    return { ids: j.k3.token_ids as number[], cached: j.usage.prompt_tokens_details?.cached_tokens as number };
  };

  let want: number[];
  beforeAll(() => {
    // The reference: the library alone, unbatched, speculation off, a fresh session.
    const e = Engine.open(demo, { threads: 1, speculate: "off" });
    try {
      const g = streamCompletion(e, e.createSession(), e.tokenizer().encode(PROMPT), { maxTokens: TOKENS, ...SAMPLING });
      for (;;) {
        const r = g.next();
        if (r.done) {
          want = r.value.ids;
          break;
        }
      }
    } finally {
      e.close();
    }
  });

  test("--parallel 1: speculation off / auto / 4, a prefix-cache hit, and after other users' traffic: the same ids", async () => {
    const { url } = open(1);
    const first = await complete(url, {});
    expect(first.token_ids).toEqual(want);
    expect(first.accepted_tokens).toBeGreaterThan(0); // the default (auto) speculated, and kept drafts
    expect((await complete(url, { speculate: "off" })).token_ids).toEqual(want);
    expect((await complete(url, { speculate: 4 })).token_ids).toEqual(want);
    // Other users: drafts kept and rejected (greedy loops, other seeds, other prompts) change the
    // session's cost model and the prefix cache; then the same request again.
    await complete(url, { temperature: 0, max_tokens: 96 });
    await complete(url, { prompt: "The jury said it did find that the court had been given full power to act. The jury said it did find", seed: 9 });
    await complete(url, { prompt: "In the first place", temperature: 1.1, seed: 2 });
    const again = await usage(url);
    expect(again.ids).toEqual(want);
    expect(again.cached).toBeGreaterThan(0); // restored from the prefix cache, not recomputed
  });

  test("--parallel 2: alone, and side by side with another request in the same steps: the same ids", async () => {
    const { e, url } = open(2);
    expect((await complete(url, {})).token_ids).toEqual(want);
    const s0 = e.batchStats().sessionsPerStep[2] ?? 0;
    const [a, b] = await Promise.all([complete(url, {}), complete(url, { prompt: "In the first place, the committee", seed: 3 })]);
    expect(a.token_ids).toEqual(want);
    expect(b.token_ids.length).toBeGreaterThan(0);
    expect((e.batchStats().sessionsPerStep[2] ?? 0) - s0).toBeGreaterThan(5); // they really shared steps
  });
});
