// `k3 run` as a user runs it (spawned from source): prompt sources, sampling flags, stop strings,
// JSON output, Ctrl-C, the demo default, errors (progress lines: test/progress.test.ts).
import { beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { Tokenizer } from "../src/engine.ts";
import { demoDir } from "../src/cli/demo.ts";
import { tinyModel } from "./helpers/models.ts";

const CLI = [process.execPath, "src/cli/main.ts"];

function env(extra: Record<string, string | undefined> = {}) {
  const e: Record<string, string | undefined> = { ...process.env, NO_COLOR: "1", K3_MODEL: undefined, ...extra };
  for (const k of Object.keys(e)) if (e[k] === undefined) delete e[k];
  return e as Record<string, string>;
}

function k3(args: string[], opts: { stdin?: string; env?: Record<string, string | undefined> } = {}) {
  const p = Bun.spawnSync([...CLI, ...args], {
    stdin: opts.stdin === undefined ? "ignore" : Buffer.from(opts.stdin),
    env: env(opts.env),
  });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

let model: string;
let tmp: string;
beforeAll(async () => {
  model = await tinyModel("tiny-a");
  tmp = mkdtempSync(join(tmpdir(), "k3-run-cli-"));
});

const PROMPT = "The capital of France is";

describe("k3 run: prompt sources", () => {
  test("--prompt, --prompt-file, --prompt-file -, stdin and `-` give the same text", () => {
    const file = join(tmp, "prompt.txt");
    writeFileSync(file, PROMPT);
    const a = k3(["run", model, "--prompt", PROMPT, "--gen", "6", "--threads", "1"]);
    expect(a.code).toBe(0);
    expect(a.out.length).toBeGreaterThan(1);
    expect(a.err).toContain(`tokens (prompt ${Tokenizer.load(model).encode(PROMPT).length})`);
    const b = k3(["run", model, "--prompt-file", file, "--gen", "6", "--threads", "1"]);
    const c = k3(["run", model, "--prompt-file", "-", "--gen", "6", "--threads", "1"], { stdin: PROMPT });
    const d = k3(["run", model, "--gen", "6", "--threads", "1"], { stdin: `${PROMPT}\n` }); // echo's newline is dropped
    const e = k3(["run", "-", "--gen", "6", "--threads", "1"], { stdin: PROMPT, env: { K3_MODEL: model } });
    for (const r of [b, c, d, e]) {
      expect(r.code).toBe(0);
      expect(r.out).toBe(a.out);
    }
  });

  test("--json holds prompt ids, generated ids and text, timings and stats; text matches the streamed run", () => {
    const plain = k3(["run", model, "--prompt", PROMPT, "--gen", "6"]);
    const r = k3(["run", model, "--prompt", PROMPT, "--gen", "6", "--json"]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.prompt_ids).toEqual(Tokenizer.load(model).encode(PROMPT));
    expect(j.generated_ids.length).toBeGreaterThan(0);
    expect(j.generated_ids.length).toBeLessThanOrEqual(6);
    expect(`${j.generated_text}\n`).toBe(plain.out);
    // The prefill covered the whole prompt (a count, not a time: timings are not asserted).
    expect(j.stats.prompt_tokens).toBe(j.prompt_ids.length);
    expect(Object.keys(j.timings).sort()).toEqual(["decode_ms", "decode_tokens_per_s", "ms_per_token", "prefill_ms", "prefill_tokens_per_s", "total_ms"]);
    expect(j.stats.generated_tokens).toBe(j.generated_ids.length);
    expect(j.stats.peak_rss_bytes).toBeGreaterThan(0);
  });

  test("--ids prints ids, the same ones --json reports for the same ids", () => {
    const r = k3(["run", model, "--ids", "10,20,30", "--gen", "5"]);
    expect(r.code).toBe(0);
    const j = JSON.parse(k3(["run", model, "--ids", "10 20 30", "--gen", "5", "--json"]).out);
    expect(r.out.trim().split(" ").map(Number)).toEqual(j.generated_ids);
    expect(j.prompt_ids).toEqual([10, 20, 30]);
  });
});

describe("k3 run: sampling", () => {
  test("greedy is the default; a seed makes sampling repeatable; another seed changes it", () => {
    const greedy = k3(["run", model, "--prompt", PROMPT, "--gen", "12", "--json"]);
    const zero = k3(["run", model, "--prompt", PROMPT, "--gen", "12", "--json", "--temperature", "0"]);
    expect(JSON.parse(zero.out).generated_ids).toEqual(JSON.parse(greedy.out).generated_ids);
    const s = (seed: string) => JSON.parse(k3(["run", model, "--prompt", PROMPT, "--gen", "12", "--json", "--temperature", "1.5", "--top-k", "50", "--top-p", "0.95", "--min-p", "0.01", "--seed", seed]).out).generated_ids;
    const a = s("42");
    expect(s("42")).toEqual(a);
    expect(s("43")).not.toEqual(a);
  });

  test("--stop (repeatable) ends the text before the first stop string, never printing it", () => {
    const full = JSON.parse(k3(["run", model, "--prompt", PROMPT, "--gen", "24", "--json"]).out).generated_text as string;
    // A two-character stop somewhere past the start, first occurring there.
    let at = -1;
    for (let i = 3; i + 2 <= full.length; i++) {
      const s = full.slice(i, i + 2);
      if (full.indexOf(s) === i && s.trim().length === 2) {
        at = i;
        break;
      }
    }
    expect(at).toBeGreaterThan(0);
    const stop = full.slice(at, at + 2);
    const r = k3(["run", model, "--prompt", PROMPT, "--gen", "24", "--json", "--stop", "never-appears-xyz", "--stop", stop]);
    const j = JSON.parse(r.out);
    expect(j.generated_text).toBe(full.slice(0, at));
    expect(j.finish_reason).toBe("stop");
    const plain = k3(["run", model, "--prompt", PROMPT, "--gen", "24", `--stop=${stop}`]);
    expect(plain.out).toBe(`${full.slice(0, at)}\n`);
  });

  test("bad sampling values are usage errors (exit 2)", () => {
    for (const args of [["--temperature", "hot"], ["--top-p", "1.5"], ["--top-k", "2.5"], ["--seed", "x"]]) {
      const r = k3(["run", model, "--prompt", PROMPT, ...args]);
      expect(r.code).toBe(2);
      expect(r.out).toBe("");
    }
  });
});

describe("k3 run: errors, Ctrl-C", () => {
  test("two prompt sources, an empty prompt, a missing prompt file: exit 2", () => {
    expect(k3(["run", model, "--prompt", "a", "--ids", "1"]).code).toBe(2);
    expect(k3(["run", model, "--gen", "2"], { stdin: "" }).code).toBe(2);
    const missing = k3(["run", model, "--prompt-file", join(tmp, "nope.txt")]);
    expect(missing.code).toBe(2);
    expect(missing.err).toContain("nope.txt");
  });

  test("a directory that is not a model: non-zero exit and a message naming it", () => {
    const bad = join(tmp, "not-a-model");
    const r = k3(["run", bad, "--prompt", "hi"]);
    expect(r.code).not.toBe(0);
    expect(r.out).toBe("");
    expect(r.err).toContain(bad);
  });

  test("a prompt over the context limit is refused (exit 2)", () => {
    const r = k3(["run", model, "--prompt", "word ".repeat(200), "--context", "64"]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("exceeds the context limit");
  });

  test("SIGINT during generation keeps the printed text, prints the stats line, exits 130", async () => {
    const p = Bun.spawn([...CLI, "run", model, "--ids", "1,2,3", "--gen", "1000000", "--context", "1000000", "--threads", "1"], {
      stdout: "pipe",
      stderr: "pipe",
      env: env(),
    });
    const reader = p.stdout.getReader();
    let out = "";
    while (out.split(" ").length < 5) {
      const { value, done } = await reader.read();
      if (done) break;
      out += new TextDecoder().decode(value);
    }
    p.kill("SIGINT");
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      out += new TextDecoder().decode(value);
    }
    const code = await p.exited;
    const err = await new Response(p.stderr).text();
    expect(code).toBe(130);
    expect(err).toContain("· cancelled");
    const n = Number(/(\d+) tokens \(prompt/.exec(err)![1]);
    expect(out.trim().split(" ")).toHaveLength(n); // every generated id was printed, none lost
  });
});

describe("k3 run: the embedded demo model", () => {
  test("with no model and no $K3_MODEL, the demo is unpacked once into the cache and says it is a tiny trained model, not K3", async () => {
    const cache = mkdtempSync(join(tmpdir(), "k3-cache-"));
    const e = { XDG_CACHE_HOME: cache };
    // Two processes at once on an empty cache: both succeed with the same text, one copy remains.
    const spawn = () => Bun.spawn([...CLI, "run", "--prompt", "hi", "--gen", "4"], { stdout: "pipe", stderr: "pipe", env: env(e) });
    const [p1, p2] = [spawn(), spawn()];
    const [o1, o2] = await Promise.all([new Response(p1.stdout).text(), new Response(p2.stdout).text()]);
    const err1 = await new Response(p1.stderr).text();
    expect([await p1.exited, await p2.exited]).toEqual([0, 0]);
    expect(o1).toBe(o2);
    expect(err1).toContain("NOT Kimi K3");
    // The folder is named by the embedded pack's hash: a new demo never opens an old cached one;
    // its trained draft (the default drafter on the demo) the same way, beside it.
    const dir = demoDir(e);
    expect(dir).toMatch(/\/k3\/demo-[0-9a-f]{16}$/);
    const folders = readdirSync(join(cache, "k3")).sort();
    expect(folders).toHaveLength(2); // one copy each, whichever process won the race
    expect(folders[0]).toBe(basename(dir));
    expect(folders[1]).toMatch(/^demo-draft-[0-9a-f]{16}$/);
    expect(existsSync(join(dir, "config.json"))).toBe(true);
    const again = k3(["run", "--prompt", "hi", "--gen", "4"], { env: e });
    expect(again.code).toBe(0);
    expect(again.out).toBe(o1);
    expect(again.err).not.toContain("unpacked the demo model");
    expect(again.err).not.toContain("unpacked the demo's draft");
  });
});
