// The repository is self-contained: a user clones it alone and everything in src/, test/, bench/,
// tools/, build.zig and the README works without the developers' shared folder beside the checkout.
//
// Two checks: (1) no file names a path outside the repository (the way it used to break: tests read
// the release metadata from the developers' shared folder, which exists only on their machine); (2) a copy of the
// tracked tree in an empty temporary folder, with nothing beside it, builds its own binary from its
// own sources and runs the README's examples that need no model download with it. The copy's
// binary embeds the kernel library this checkout built (a Zig build of the copy would cost ~10 CPU
// seconds); that the kernel sources it came from are all tracked is checked instead.
import { describe, expect, test } from "bun:test";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, statSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");
const SCANNED = ["src", "test", "bench", "tools", "README.md", "build.zig", "package.json"];

function files(p: string): string[] {
  const abs = join(ROOT, p);
  if (!statSync(abs).isDirectory()) return [p];
  return readdirSync(abs, { withFileTypes: true }).flatMap((e) => (e.name === "node_modules" || e.name === "out" ? [] : files(join(p, e.name))));
}

// What reaching outside looks like: the developers' shared folder by any route, or an absolute path
// into the developers' workspace (their checkout, or their shared machine's lock scripts); and
// (checked separately) a quoted relative path that climbs above the repository root from the file
// that names it.
// The folder's name is spelled in pieces so this file never names the path it forbids.
const DEV = "shared";
const OUTSIDE = [new RegExp(`\\.\\./${DEV}\\b`), new RegExp(`/work/(${DEV}|main|bin|locks)\\b`)];
const RELATIVE = /["'`](\.\.\/[^"'`\s]*)/g;

function escapes(file: string, line: string): boolean {
  if (OUTSIDE.some((re) => re.test(line))) return true;
  const base = file.endsWith(".md") ? ROOT : dirname(join(ROOT, file));
  for (const m of line.matchAll(RELATIVE)) {
    const target = resolve(base, m[1]!);
    if (target !== ROOT && !target.startsWith(ROOT + "/")) return true;
  }
  return false;
}

/** kernels/ sources in the working tree that git does not track (build.zig compiles every
 *  kernels/*.c it finds: one left untracked builds here and breaks a clone). */
function untrackedKernelSources(tracked: string[]): string[] {
  const known = new Set(tracked);
  return readdirSync(join(ROOT, "kernels")).filter((n) => /\.(c|h)$/.test(n) && !known.has(`kernels/${n}`));
}

describe("self-contained repository", () => {
  test("nothing in src/, test/, bench/, tools/, build.zig, package.json or the README names a path outside the repository", () => {
    const me = "test/self-contained.test.ts";
    const hits: string[] = [];
    for (const f of SCANNED.flatMap(files)) {
      if (f === me || !/\.(ts|js|json|md|sh|py|zig|c|h)$/.test(f)) continue;
      const lines = readFileSync(join(ROOT, f), "utf8").split("\n");
      lines.forEach((line, i) => {
        if (escapes(f, line)) hits.push(`${f}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(hits).toEqual([]);
  });

  test("the scan finds a path outside the repository when one is there", () => {
    // The patterns must match the forms that broke before (proof that the scan above can fail).
    const up = "..";
    for (const bad of [`join(import.meta.dir, "${up}/${up}/${DEV}/reference/k3/config.json")`, `const REF = "/work/${DEV}/reference/k3";`, `dist/k3 info --config ${up}/${DEV}/reference/k3/config.json`])
      expect(escapes("test/x.test.ts", bad)).toBe(true);
    expect(escapes("test/x.test.ts", `const p = join(import.meta.dir, "../../x.json");`)).toBe(true);
    // Bench headers once told users to run under the developers' machine-lock scripts.
    for (const bad of ["// run it under `flock /work/locks/bigmem` on a shared machine.", "// Opt-in; run under /work/bin/cpu-exclusive for figures."])
      expect(escapes("bench/x.ts", bad)).toBe(true);
    // build.zig is scanned too: its header comment once pointed at the shared docs.
    expect(SCANNED).toContain("build.zig");
    expect(escapes("build.zig", `// Zig 0.11.0 … 0.12+ changed this API; see\n// ${up}/${DEV}/docs/TOOLCHAIN.md §2.`.split("\n")[1]!)).toBe(true);
    // ...and leaves imports inside the repository alone.
    expect(escapes("test/helpers/models.ts", `import { generateModel } from "../../tools/gen/generate.ts";`)).toBe(false);
  });

  test("a copy of the tracked tree, alone in a temp folder, runs the README's model-free examples", () => {
    const tracked = Bun.spawnSync(["git", "ls-files", "-z"], { cwd: ROOT }).stdout.toString().split("\0").filter(Boolean);
    expect(tracked.length).toBeGreaterThan(50);
    const clone = join(mkdtempSync(join(tmpdir(), "k3-clone-")), "k3");
    for (const f of tracked) {
      try {
        statSync(join(ROOT, f));
      } catch {
        continue; // deleted in the working tree, not yet committed
      }
      mkdirSync(dirname(join(clone, f)), { recursive: true });
      cpSync(join(ROOT, f), join(clone, f));
    }
    // The copy builds its own binary, as the README's first command does (`npm run build:webui` and `build:cli`, after
    // npm ci: node_modules is the one thing linked in, and the kernel library this checkout built).
    expect(untrackedKernelSources(tracked)).toEqual([]);
    symlinkSync(join(ROOT, "node_modules"), join(clone, "node_modules"));
    mkdirSync(join(clone, "zig-out", "lib"), { recursive: true });
    cpSync(join(ROOT, "zig-out", "lib", "libkernels.so"), join(clone, "zig-out", "lib", "libkernels.so"));
    const pkg = JSON.parse(readFileSync(join(clone, "package.json"), "utf8"));
    // build:webui (the chat page the binary embeds), then build:cli.
    const script = ["build:webui", "build:cli"].map((s) => pkg.scripts[s].replace(/^bun /, `"${process.execPath}" `)).join(" && ");
    const build = Bun.spawnSync(["sh", "-c", script], { cwd: clone, stdout: "pipe", stderr: "pipe" });
    expect({ code: build.exitCode, err: build.stderr.toString().slice(-400) }).toEqual({ code: 0, err: expect.any(String) });
    const bin = join(clone, "dist", "k3");
    const readme = readFileSync(join(clone, "README.md"), "utf8");
    const examples = [...readme.matchAll(/^dist\/k3 (info|plan) (--config [^\n#]*?)\s*(#.*)?$/gm)].map((m) => `${m[1]} ${m[2]}`.trim());
    expect(examples.length).toBeGreaterThanOrEqual(2);
    for (const ex of examples) {
      const p = Bun.spawnSync(["sh", "-c", `"${bin}" ${ex}`], { cwd: clone, env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: join(clone, ".home"), NO_COLOR: "1" } });
      expect({ ex, code: p.exitCode, err: p.stderr.toString().slice(0, 400) }).toEqual({ ex, code: 0, err: expect.any(String) });
      expect(p.stdout.toString().length).toBeGreaterThan(100);
    }
  });
});
