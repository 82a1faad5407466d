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
