// The CLI as a user runs it: spawned, reading stdout / stderr / exit code.
import { describe, expect, test } from "bun:test";
import pkg from "../package.json";
import { VERSION } from "../src/version.ts";

const CLI = [process.execPath, "src/cli/main.ts"];

function k3(args: string[], stdin?: string) {
  const p = Bun.spawnSync([...CLI, ...args], { stdin: stdin === undefined ? "ignore" : Buffer.from(stdin), env: { ...process.env, NO_COLOR: "1" } });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

describe("cli", () => {
  test("--version prints the package version on stdout", () => {
    expect(VERSION).toBe(pkg.version);
    const r = k3(["--version"]);
    expect(r.code).toBe(0);
    expect(r.out.trim()).toBe(pkg.version);
  });
  test("--help lists the commands and exits 0", () => {
    const r = k3(["--help"]);
    expect(r.code).toBe(0);
    expect(r.out).toContain("info");
  });
  test("an unknown command is a usage error (exit 2) on stderr", () => {
    const r = k3(["bogus"]);
    expect(r.code).toBe(2);
    expect(r.out).toBe("");
    expect(r.err).toContain("bogus");
  });
});

describe("options", () => {
  test("an unknown option is a usage error naming it (citty alone would ignore it)", () => {
    const r = k3(["run", "/nonexistent", "--prompt", "hi", "--temprature", "0.9"]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("--temprature");
    expect(r.out).toBe("");
  });
  test("--no-<boolean> and --name=value forms are known options", () => {
    const r = k3(["run", "/nonexistent", "--prompt=hi", "--no-lookahead"]);
    expect(r.err).not.toContain("unknown option");
    expect(r.code).toBe(4); // the model folder does not exist
  });
});

describe("broken pipe", () => {
  test("`k3 run … | head` ends quietly with 141 when the reader goes away (no stack trace)", async () => {
    // The demo model (no folder given): with this seed it writes thousands of tokens without an
    // end of text, so it is still writing when the reader goes away. (tiny-a ends by itself after
    // 50 tokens in ~0.2 s: under load it had exited 0 before the reader closed its end.)
    const p = Bun.spawn([...CLI, "run", "--prompt", "hello", "--seed", "1", "--gen", "100000", "--threads", "1"], { stdout: "pipe", stderr: "pipe", stdin: "ignore", env: { ...process.env, NO_COLOR: "1" } });
    const reader = p.stdout.getReader();
    await reader.read(); // the first token arrived
    await reader.cancel(); // the reader closes its end, as `head` does
    const code = await p.exited;
    const err = await new Response(p.stderr).text();
    expect(code).toBe(141);
    expect(err).not.toContain("EPIPE");
    expect(err).not.toMatch(/\n\s+at /); // no stack trace
  });
});
