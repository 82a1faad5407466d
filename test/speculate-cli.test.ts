// `--speculate` as a user reaches it: `k3 run` (spawned from source) and the server's per-request
// `speculate` field. Output is identical with speculation on and off; bad values are usage errors.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { k3Source } from "./helpers/cli.ts";
import { tinyModel } from "./helpers/models.ts";
import { post, tinyServerFixture } from "./server.helpers.ts";

// Spawning the CLI takes seconds on a busy 2-core machine: bun's 5 s default is too tight.
setDefaultTimeout(120_000);

const k3 = k3Source;

// A prompt on which the default (strict n-gram) drafter drafts on tiny-a: "5 17 300 65 42" twice
// and "5 17 300" again, whose greedy continuation is 65 (found by search over the 4th token), so
// after the first token the last 4-gram occurred twice before, both times followed by 42.
const REPEATING = [5, 17, 300, 65, 42, 5, 17, 300, 65, 42, 5, 17, 300];

// The JSON stats speculation adds (bytes_read_per_token: per generated token). Checked with
// typeof, not toMatchObject(expect.any(…)): bun 1.4.5's toMatchObject writes the matchers into
// the received object, so reading a field after it sees an ExpectAny, not the number.
const STATS = ["drafted_tokens", "accepted_tokens", "verify_passes", "bytes_read_per_token"];

let model: string;
beforeAll(async () => {
  model = await tinyModel("tiny-a");
});

describe("k3 run --speculate", () => {
  test("off, auto and 4 print the same ids; --json carries drafted/accepted/verify_passes and bytes per generated token", () => {
    const run = (spec: string[]) => {
      const r = k3(["run", model, "--ids", REPEATING.join(","), "--gen", "12", "--threads", "1", "--json", ...spec]);
      expect(r.code).toBe(0);
      return JSON.parse(r.out);
    };
    const off = run(["--speculate", "off"]);
    for (const spec of [[], ["--speculate", "auto"], ["--speculate", "4"]]) {
      const on = run(spec);
      expect(on.generated_ids).toEqual(off.generated_ids);
      for (const f of STATS) expect(typeof on.stats[f]).toBe("number");
      // The drafter had something to draft here: the setting reached the engine.
      expect(on.stats.drafted_tokens).toBeGreaterThan(0);
      expect(on.stats.verify_passes).toBeGreaterThan(0);
    }
    expect(off.stats.drafted_tokens).toBe(0);
    expect(off.stats.verify_passes).toBe(0);
    for (const f of STATS) expect(typeof off.stats[f]).toBe("number");
  });

  test("a bad value, or more drafts than the chunk can verify, is a usage error (exit 2)", () => {
    const bad = k3(["run", model, "--ids", "1,2,3", "--gen", "2", "--speculate", "lots"]);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain("--speculate must be auto, off or a number");
    // --chunk 32: the planner's own chunk for this tiny model (256) would verify 40 drafts
    const big = k3(["run", model, "--ids", "1,2,3", "--gen", "2", "--speculate", "40", "--chunk", "32"]);
    expect(big.code).toBe(2);
    expect(big.err).toContain("--chunk 41");
  });
});

describe("server: per-request speculate", () => {
  const fx = tinyServerFixture();
  const complete = (extra: Record<string, unknown>) => post(`${fx.server().url}/v1/completions`, { prompt: REPEATING, max_tokens: 6, ...extra });

  test('"off", "auto" and a number within the server\'s room: the same ids, each request drafts as it asked, k3 stats carry the counters', async () => {
    const ids: unknown[] = [];
    // The server runs with the default (auto, room for 8); each request overrides it.
    for (const [speculate, most] of [["off", 0], ["auto", 8], [3, 3], ["2", 2], ["off", 0]] as const) {
      const res = await complete({ speculate });
      expect(res.status).toBe(200);
      const body = (await res.json()) as any;
      ids.push(body.k3.token_ids);
      for (const f of STATS) expect(typeof body.k3[f]).toBe("number");
      if (most === 0) expect(body.k3.drafted_tokens).toBe(0);
      else expect(body.k3.drafted_tokens).toBeGreaterThan(0);
      expect(body.k3.drafted_tokens).toBeLessThanOrEqual(most * body.k3.verify_passes);
    }
    for (const x of ids) expect(x).toEqual(ids[0]);
  });

  test("a bad value or more drafts than the server has room for is a 400 naming the field", async () => {
    for (const [speculate, msg] of [["maybe", "must be auto, off or a number"], [-1, "must be auto, off or a number"], [99, "room for 8 drafts"]] as const) {
      const res = await complete({ speculate });
      expect(res.status).toBe(400);
      const body = (await res.json()) as any;
      expect(body.error.message).toContain(msg);
      if (speculate !== 99) expect(body.error.param).toBe("speculate");
    }
  });
});
