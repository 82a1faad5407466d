// The layering of docs/ARCHITECTURE.md, checked on the import graph: each layer knows only the ones
// below it; the CLI and the server reach the engine only through its public API; the float64
// reference imports nothing from the engine (else it would not be an independent check).
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");

function files(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(ROOT, dir))) {
    const p = join(dir, name);
    if (statSync(join(ROOT, p)).isDirectory()) out.push(...files(p));
    else if (name.endsWith(".ts")) out.push(p);
  }
  return out;
}

/** Repo-relative paths of the local modules a file imports (static and dynamic). */
function imports(file: string): string[] {
  const src = readFileSync(join(ROOT, file), "utf8");
  const specs = [...src.matchAll(/(?:from|import)\s*\(?\s*["']([^"']+)["']/g)].map((m) => m[1]!);
  return specs.filter((s) => s.startsWith(".")).map((s) => relative(ROOT, resolve(ROOT, dirname(file), s)));
}

/** layer → path prefixes it may import (besides itself). */
const ALLOWED: Record<string, string[]> = {
  "src/cache-dir.ts": ["src/errors.ts"], // below everything: where k3 keeps its own files
  "src/files.ts": ["src/errors.ts"], // below everything: opening the files a user names
  "src/kernels.ts": ["zig-out/", "src/cache-dir.ts", "src/errors.ts", "src/files.ts"],
  "src/checkpoint/": ["src/errors.ts", "src/log.ts", "src/cache-dir.ts", "src/files.ts", "src/format.ts"],
  "src/text/": ["src/errors.ts", "src/log.ts", "src/files.ts"],
  "src/speculate/": ["src/text/", "src/errors.ts", "src/log.ts"],
  "src/model/": ["src/kernels.ts", "src/checkpoint/", "src/errors.ts", "src/log.ts", "src/files.ts", "src/format.ts"],
  "src/memory/": ["src/kernels.ts", "src/checkpoint/", "src/model/cmem.ts", "src/model/weights.ts", "src/model/buffers.ts", "src/model/walk.ts", "src/errors.ts", "src/log.ts", "src/cache-dir.ts", "src/files.ts", "src/format.ts"],
  "src/batch/": ["src/kernels.ts", "src/checkpoint/", "src/model/", "src/speculate/", "src/errors.ts", "src/log.ts", "src/files.ts", "src/format.ts"], // many sessions on one model: scheduler (its draft rows placed by speculation's cost rule), prefix cache
  "src/engine.ts": ["src/engine/", "src/kernels.ts", "src/checkpoint/", "src/model/", "src/memory/", "src/batch/", "src/text/", "src/speculate/", "src/errors.ts", "src/log.ts", "src/format.ts"],
  // The engine's own modules (opening, passes, one generation, sessions, threads): below the public
  // API, which they know only by its types (checked below: no import cycle at run time).
  "src/engine/": ["src/engine.ts", "src/kernels.ts", "src/checkpoint/", "src/model/", "src/memory/", "src/batch/", "src/speculate/", "src/errors.ts", "src/log.ts", "src/format.ts"],
  "src/inspect.ts": ["src/checkpoint/", "src/memory/", "src/errors.ts", "src/log.ts"],
  "src/conversation.ts": ["src/engine.ts", "src/errors.ts", "src/log.ts"],
  // The numbers users see (stats JSON, stats line) are built once, for the CLI and the server.
  "src/report.ts": ["src/engine.ts", "src/format.ts"],
  "src/server/": ["src/engine.ts", "src/conversation.ts", "src/report.ts", "src/errors.ts", "src/log.ts", "src/version.ts", "dist/webui/"], // dist/webui: the built chat page
  // The chat page runs in a browser and reaches k3 only over HTTP: it imports none of k3's modules.
  "src/webui/": [],
  "src/cli/": ["src/engine.ts", "src/inspect.ts", "src/conversation.ts", "src/report.ts", "src/format.ts", "src/term.ts", "src/server/", "src/errors.ts", "src/log.ts", "src/version.ts", "src/cache-dir.ts", "src/files.ts", "assets/demo/"], // assets/demo: the embedded trained demo; files.ts: only regular files are written
  "tools/reference/": ["tools/gen/"], // test models only; nothing from src/ or kernels/
};

describe("layering", () => {
  for (const [layer, allowed] of Object.entries(ALLOWED)) {
    test(`${layer} imports only ${allowed.join(", ") || "itself"}`, () => {
      const own = layer.endsWith("/") ? files(layer.slice(0, -1)) : [layer];
      expect(own.length).toBeGreaterThan(0);
      const bad: string[] = [];
      for (const f of own)
        for (const target of imports(f))
          if (!target.startsWith(layer) && !allowed.some((a) => target.startsWith(a))) bad.push(`${f} → ${target}`);
      expect(bad).toEqual([]);
    });
  }

  test("src/engine/ takes only types from src/engine.ts (the public API imports src/engine/, not the other way)", () => {
    const bad: string[] = [];
    for (const f of files("src/engine")) {
      const src = readFileSync(join(ROOT, f), "utf8");
      for (const m of src.matchAll(/^import\s+(type\s+)?[^;]*?from\s+["']\.\.\/engine\.ts["']/gms)) if (!m[1]) bad.push(`${f}: ${m[0]}`);
    }
    expect(bad).toEqual([]);
  });

  test("the check sees imports (a file that imports the engine is reported for a layer that may not)", () => {
    expect(imports("src/cli/commands/run.ts")).toContain("src/engine.ts");
  });
});
