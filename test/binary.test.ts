// The compiled binary, run as a user runs it: spawned, reading stdout / stderr / exit code, piping
// through a shell, and copied alone into an empty folder (no node_modules, no zig-out: the kernel
// library and the demo's BPE table must be inside it). Which binary: test/helpers/k3-binary.ts.
import { beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import pkg from "../package.json";
import { demoDir } from "../src/cli/demo.ts";
import { Tokenizer } from "../src/engine.ts";
import { compiledK3, ROOT, serveUrl, userEnv } from "./helpers/k3-binary.ts";

let bin: string;
let tmp: string;

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "k3-binary-"));
  bin = compiledK3();
}, 120_000);

function k3(args: string[], opts: { stdin?: string; home?: string; cwd?: string; exe?: string } = {}) {
  const home = opts.home ?? join(tmp, "home");
  const p = Bun.spawnSync([opts.exe ?? bin, ...args], {
    stdin: opts.stdin === undefined ? "ignore" : Buffer.from(opts.stdin),
    env: userEnv(home),
    cwd: opts.cwd ?? tmp,
  });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

describe("compiled k3", () => {
  test("--version and --help", () => {
    const v = k3(["--version"]);
    expect(v.code).toBe(0);
    expect(v.out.trim()).toBe(pkg.version);
    const h = k3(["--help"]);
    expect(h.code).toBe(0);
    for (const cmd of ["run", "chat", "tokenize", "info"]) expect(h.out).toContain(cmd);
    const rh = k3(["run", "--help"]);
    expect(rh.code).toBe(0);
    for (const flag of ["--temperature", "--top-k", "--top-p", "--min-p", "--seed", "--stop", "--prompt-file"]) expect(rh.out).toContain(flag);
  });

  test('echo "hi" | k3 run --gen 4: the demo model, text on stdout, notice and stats on stderr', () => {
    const home = join(tmp, "pipe-home");
    const sh = Bun.spawnSync(["sh", "-c", `echo "hi" | "${bin}" run --gen 4`], { env: userEnv(home), cwd: tmp });
    const out = sh.stdout.toString();
    const err = sh.stderr.toString();
    expect(sh.exitCode).toBe(0);
    expect(out.endsWith("\n")).toBe(true);
    expect(out.length).toBeGreaterThan(1);
    expect(err).toContain("NOT Kimi K3");
    expect(err).toMatch(/\d+ tokens \(prompt \d+\)/);
    expect(existsSync(join(demoDir({ HOME: home }), "config.json"))).toBe(true);
    // The same text as --prompt "hi" (echo's newline is not part of the prompt).
    const again = k3(["run", "--prompt", "hi", "--gen", "4"], { home });
    expect(again.out).toBe(out);
  });

  test("run --json on the demo: ids, text, timings, stats", () => {
    const r = k3(["run", "--prompt", "The capital of France is", "--gen", "6", "--json"]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.generated_ids.length).toBeGreaterThan(0);
    expect(typeof j.generated_text).toBe("string");
    expect(j.stats.prompt_tokens).toBe(j.prompt_ids.length); // the prefill covered the prompt
    expect(typeof j.timings.prefill_ms).toBe("number");
    expect(j.stats.generated_tokens).toBe(j.generated_ids.length);
  });

  test("tokenize on the demo model's tokenizer matches the library", () => {
    const home = join(tmp, "home");
    k3(["run", "--prompt", "x", "--gen", "1"], { home }); // make sure the demo exists
    const demo = demoDir({ HOME: home });
    const file = join(tmp, "text.txt");
    const text = "Hello, world! 12345 ünïcödé 日本語 🙂\n\tcode()";
    writeFileSync(file, text);
    const r = k3(["tokenize", demo, "--file", file, "--json"]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out).ids).toEqual(Tokenizer.load(demo).encode(text));
  });

  test("chat reads JSONL on stdin and writes the reply", () => {
    const jsonl = `${JSON.stringify({ role: "user", content: "hi" })}\n`;
    const j = k3(["chat", "--gen", "8", "--json"], { stdin: jsonl });
    expect(j.code).toBe(0);
    const reply = JSON.parse(j.out);
    expect(reply.usage.completion_tokens).toBeGreaterThan(0);
    expect(typeof reply.reasoning).toBe("string");
    const plain = k3(["chat", "--gen", "8"], { stdin: jsonl });
    expect(plain.code).toBe(0);
    expect(plain.out).toBe(`${reply.content}\n`);
  });

  test("a bad model directory: exit 4, nothing on stdout, the path in the message", () => {
    const bad = join(tmp, "no-such-model");
    const r = k3(["run", bad, "--prompt", "hi"]);
    expect(r.code).toBe(4);
    expect(r.out).toBe("");
    expect(r.err).toContain(bad);
    const usage = k3(["run", "--prompt", "hi", "--temperature", "-1"]);
    expect(usage.code).toBe(2);
  });

  test("copied alone into an empty folder, it still unpacks the demo and runs it (same bytes, same text)", () => {
    const alone = mkdtempSync(join(tmpdir(), "k3-alone-"));
    const exe = join(alone, "k3");
    copyFileSync(bin, exe);
    Bun.spawnSync(["chmod", "+x", exe]);
    const home = join(alone, "home");
    const r = k3(["run", "--prompt", "hi", "--gen", "4"], { exe, home, cwd: alone });
    expect(r.err).not.toContain("Cannot find");
    expect(r.code).toBe(0);
    const reference = k3(["run", "--prompt", "hi", "--gen", "4"], { home: join(tmp, "home") });
    expect(r.out).toBe(reference.out);
    // The demo written by the lone binary is byte-identical to the one written next to the repo.
    const a = demoDir({ HOME: home });
    const b = demoDir({ HOME: join(tmp, "home") });
    // Only the generator's files: the engine adds its own cache (k3-index.json, which names paths).
    const generated = (d: string) => readdirSync(d).filter((f) => f !== "k3-index.json").sort();
    const files = generated(b);
    expect(files).toContain("config.json");
    expect(generated(a)).toEqual(files);
    for (const f of files) expect(Bun.hash(readFileSync(join(a, f)))).toBe(Bun.hash(readFileSync(join(b, f))));
  });
});

describe("compiled k3: the inspection and maintenance commands", () => {
  const REF = resolve(ROOT, "reference");

  // The release metadata's figures are checked through the CLI in checkpoint-release.test.ts and
  // plan.test.ts, and the README's info/plan lines through this binary in docs-examples.test.ts
  // (each parse of the 497k-name index costs ~1.8 s of CPU): here a generated model is enough.
  test("info and plan on a generated model", async () => {
    const { tinyModel } = await import("./helpers/models.ts");
    const dir = await tinyModel("tiny-a");
    const info = k3(["info", dir, "--json"]);
    expect(info.code).toBe(0);
    const j = JSON.parse(info.out);
    expect(j.architecture.layers).toBe(8);
    expect(j.layout.contiguous_layers).toBe(8);
    const plan = k3(["plan", "-m", dir, "--ram", "1G", "--json"]);
    expect(plan.code).toBe(0);
    expect(JSON.parse(plan.out).total_bytes).toBeLessThanOrEqual(2 ** 30);
    const below = k3(["plan", dir, "--ram", "1M"]);
    expect(below.code).toBe(3); // budget below the floor
    expect(below.err).toContain("floor");
  });

  test("verify, detokenize, simulate-cache on a generated model and a real trace", async () => {
    const { tinyModel } = await import("./helpers/models.ts");
    const dir = await tinyModel("tiny-b");
    const v = k3(["verify", dir]);
    expect(v.code).toBe(0);
    expect(v.out).toContain("sizes match their headers");
    const ids = k3(["tokenize", dir, "hello world", "--json"]);
    expect(ids.code).toBe(0);
    const d = k3(["detokenize", dir, JSON.parse(ids.out).ids.join(",")]);
    expect(d.code).toBe(0);
    expect(d.out).toContain("hello world");
    const sim = k3(["simulate-cache", join(REF, "traces/olmoe-1b-7b.routing.jsonl"), "--slots", "1x", "--json"]);
    expect(sim.code).toBe(0);
    expect(sim.out.length).toBeGreaterThan(10);
  });

  test("serve answers /health and a completion, then stops on SIGTERM", async () => {
    const { tinyModel } = await import("./helpers/models.ts");
    const dir = await tinyModel("tiny-a");
    const p = Bun.spawn([bin, "serve", dir, "--port", "0", "--threads", "1"], { env: userEnv(join(tmp, "serve-home")), stdout: "pipe", stderr: "pipe" });
    try {
      const url = await serveUrl(p);
      expect((await fetch(`${url}/health`)).status).toBe(200);
      const res = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: [1, 2, 3], max_tokens: 3 }) });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { usage: { completion_tokens: number } };
      expect(body.usage.completion_tokens).toBe(3);
    } finally {
      p.kill("SIGTERM");
      await p.exited;
    }
  });
});
