// How far each MODEL.md §7 trap moves the reference's last-position logits on a checkpoint:
// max |logit_trap − logit_true| over the vocabulary. docs/REFERENCE.md reports the table.
//
//   bun tools/reference/margins.ts            (generates tiny-a/b/c in a temp dir, prints markdown)
import { ALL_TRAPS, ReferenceModel, type TrapName } from "./model.ts";

/**
 * The prompt the margins are measured on (ids < every tiny vocab). 16 positions, because the MLA
 * traps grow with the number of attended positions (one position makes softmax scale-free).
 */
export const MARGIN_PROMPT = [5, 300, 17, 640, 2, 99, 512, 41, 7, 250, 66, 700, 13, 401, 88, 3];

export function maxAbsDiff(a: Float64Array, b: Float64Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** margin per trap (max |Δlogit| at the last position of `ids`) against the true reference. */
export function trapMargins(dir: string, ids: number[], truth?: Float64Array): Map<TrapName, number> {
  const base = truth ?? ReferenceModel.open(dir).forward(ids);
  return new Map(ALL_TRAPS.map((trap) => [trap, maxAbsDiff(ReferenceModel.open(dir, { trap }).forward(ids), base)]));
}

if (import.meta.main) {
  const { mkdtempSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { generateModel } = await import("../gen/generate.ts");
  const ids = MARGIN_PROMPT;
  const presets = ["tiny-a", "tiny-b", "tiny-c"];
  const cols: Map<TrapName, number>[] = [];
  for (const preset of presets) {
    const dir = mkdtempSync(join(tmpdir(), `k3-ref-margins-${preset}-`));
    await generateModel(dir, { preset });
    cols.push(trapMargins(dir, ids));
  }
  console.log(`| trap | ${presets.join(" | ")} |\n|---|${presets.map(() => "---:").join("|")}|`);
  for (const trap of ALL_TRAPS) console.log(`| ${trap} | ${cols.map((c) => c.get(trap)!.toFixed(3)).join(" | ")} |`);
}
