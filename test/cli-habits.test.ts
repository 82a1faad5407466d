// What llama.cpp and ollama users type, through the binary, as they meet it (issue 24): `-ngl 99`
// accepted and ignored with a note, `-n -1` until the end, tokens/s in the stats line, one exit
// status (4) and one message for a model folder that does not exist however it is named,
// `k3 tokenize` / `detokenize` on the demo, `k3 --help` true about the demo, and in the chat REPL
// `/bye` and a Ctrl-D that leaves the shell's prompt on a line of its own.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { compiledK3, userEnv } from "./helpers/k3-binary.ts";
import { python, runInPty } from "./helpers/pty.ts";

const home = mkdtempSync(join(tmpdir(), "k3-habits-"));
afterAll(() => rmSync(home, { recursive: true, force: true }));

function k3(args: string[], opts: { stdin?: string; env?: Record<string, string | undefined> } = {}) {
  const p = Bun.spawnSync([compiledK3(), ...args], { stdin: opts.stdin === undefined ? "ignore" : Buffer.from(opts.stdin), env: userEnv(home, opts.env), stdout: "pipe", stderr: "pipe" });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

describe("llama.cpp's flags", () => {
  test("-ngl 99 is accepted and ignored with a note: the same text as without it", () => {
    const plain = k3(["run", "The capital of France is", "-n", "6"]);
    const ngl = k3(["run", "-ngl", "99", "The capital of France is", "-n", "6"]);
    expect([plain.code, ngl.code]).toEqual([0, 0]);
    expect(ngl.out).toBe(plain.out);
    expect(ngl.err).toContain("k3: -ngl 99 ignored: k3 runs on the CPU");
    expect(k3(["run", "--n-gpu-layers=all", "Hi", "-n", "2"]).code).toBe(0);
    const bad = k3(["run", "-ngl", "lots", "Hi"]);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('-ngl / --n-gpu-layers must be a number of layers (or -1, auto, all), got "lots"');
  });

  test("-n -1 generates until the end: here the context (64 tokens) fills", () => {
    const r = k3(["run", "Once upon a time", "-n", "-1", "--context", "64", "--json"]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.finish_reason).toBe("context");
    expect(j.prompt_ids.length + j.generated_ids.length).toBeGreaterThanOrEqual(64);
    const chat = k3(["chat", "--json", "-n", "-1", "--context", "96"], { stdin: "Hello" });
    expect(chat.code).toBe(0);
    expect(["context", "stop"]).toContain(JSON.parse(chat.out).finish_reason);
    expect(k3(["run", "Hi", "-n", "-2"]).err).toContain('--gen must be a positive integer, got "-2"');
  });

  test("the stats line gives tokens/s beside s/token", () => {
    const r = k3(["run", "Hello", "-n", "4"]);
    expect(r.err).toMatch(/· [\d.]+ s\/token · [\d.]+ tokens\/s ·/);
  });
});

describe("a model folder that does not exist: exit 4 and the same words, however it is named", () => {
  const missing = join(home, "no-such-model");
  const cases: [string, string[], Record<string, string>?][] = [
    ["DIR operand", ["run", missing, "Hello"]],
    ["-m DIR", ["run", "-m", missing, "-p", "Hello"]],
    ["one operand that looks like a path", ["run", missing]],
    ["$K3_MODEL", ["run", "Hello"], { K3_MODEL: missing }],
    ["k3 chat DIR", ["chat", missing]],
    ["k3 serve DIR", ["serve", missing, "--port", "0"]],
    ["k3 tokenize DIR", ["tokenize", missing, "Hello"]],
    ["k3 bench DIR", ["bench", missing]],
  ];
  for (const [name, args, env] of cases)
    test(name, () => {
      const r = k3(args, { stdin: "Hello", env });
      expect(r.code).toBe(4);
      expect(r.err).toContain(`k3: error: ${missing}: no such model folder (it does not exist)`);
    });
});

describe("k3 tokenize and detokenize without a model folder: $K3_MODEL's tokenizer, else the demo's", () => {
  test("the same ids as with the demo's folder named, and back to the text", () => {
    const implicit = k3(["tokenize", "Hello, world"]);
    expect(implicit.code).toBe(0);
    expect(implicit.err).toContain("NOT Kimi K3");
    // The demo's folder, not its draft's (demo-draft-…, unpacked beside it by k3 run and chat).
    const demo = join(home, ".cache", "k3", readdirSync(join(home, ".cache", "k3")).find((d) => d.startsWith("demo-") && !d.startsWith("demo-draft-"))!);
    expect(implicit.out).toBe(k3(["tokenize", demo, "Hello, world"]).out);
    expect(implicit.out).toMatch(/^\d+( \d+)*\n$/);
    const back = k3(["detokenize", implicit.out.trim()]);
    expect([back.code, back.out]).toEqual([0, "Hello, world"]);
    expect(k3(["tokenize", "--json"], { stdin: "Hello, world" }).out).toBe(`${JSON.stringify({ ids: implicit.out.trim().split(" ").map(Number) })}\n`);
  });
});

describe("help", () => {
  test("k3 --help says what the demo is (a tiny trained model, not K3), not 'random weights'", () => {
    const r = k3(["--help"]);
    expect(r.out).not.toContain("random weights");
    expect(r.out).toContain("the built-in demo, a tiny model trained on English text, not K3");
    expect(k3(["serve", "--help"]).out).toContain("no model = the built-in demo");
  });
});

describe("the chat REPL", () => {
  test.skipIf(!python)(`/bye leaves (ollama's word); Ctrl-D at the prompt ends its line first${python ? "" : " (SKIPPED: no python3 for a pty)"}`, () => {
    const env = userEnv(home);
    const bye = runInPty([compiledK3(), "chat", "--threads", "1"], env, [{ text: "/bye\r" }], "> ");
    expect(bye.code).toBe(0);
    const eof = runInPty([compiledK3(), "chat", "--threads", "1"], env, [{ text: "\x04" }], "> ");
    expect(eof.code).toBe(0);
    // The terminal shows the prompt (readline moves the cursor after it), then the newline k3 wrote
    // for it, then bracketed paste is switched off: the shell starts on a fresh line.
    expect(eof.out).toMatch(/> (\x1b\[\d+G)?\r?\n(\x1b\[\?2004l)?$/);
  });
});
