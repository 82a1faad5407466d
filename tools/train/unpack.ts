// Unpacks the shipped demo model (assets/demo/k3-demo.pack.zst) into a folder, for the dev-only
// tools that train and measure its EAGLE-3 draft (docs/TEST-MODELS.md "Demo draft"): they read the
// target exactly as k3 ships it, not a training checkpoint.
//
//   bun tools/train/unpack.ts [OUT=tools/train/out/demo-target]
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { unpackDemo } from "../../src/cli/demo-pack.ts";

if (import.meta.main) {
  const out = resolve(process.argv[2] ?? join(import.meta.dir, "out", "demo-target"));
  const pack = join(import.meta.dir, "..", "..", "assets", "demo", "k3-demo.pack.zst");
  mkdirSync(out, { recursive: true });
  unpackDemo(new Uint8Array(readFileSync(pack)), out);
  process.stderr.write(`${pack} → ${out}${existsSync(join(out, "config.json")) ? "" : " (no config.json?)"}\n`);
}
