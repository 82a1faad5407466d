// Checks the exported demo draft: PyTorch's float64 chain (draftcheck.py, draft_model.py on the
// exported files) against the float64 reference (tools/reference/draft.ts, written from the spec
// independently of draft_model.py): two readings of the released format must agree to ~1e-9 (both
// read the same bf16 weights; the difference is float64 rounding and summation order). Dev-only.
//
//   bun tools/train/draft-check.ts [OUT=tools/train/out]
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { draftChain, ReferenceDraft } from "../reference/draft.ts";
import { ReferenceModel } from "../reference/model.ts";

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

if (import.meta.main) {
  const out = resolve(process.argv[2] ?? join(import.meta.dir, "out"));
  const torch = JSON.parse(readFileSync(join(out, "draft", "check-torch.json"), "utf8")) as { tokens: number[]; rows: Array<{ t: number; logits: number[][]; drafts: number[] }> };
  const target = ReferenceModel.open(join(out, "demo-target"));
  const draft = ReferenceDraft.open(join(out, "draft", "model"));
  let worst = 0;
  let same = true;
  for (const row of torch.rows) {
    const r = draftChain(target, draft, torch.tokens.slice(0, row.t + 1), row.logits.length, { next: torch.tokens[row.t + 1] });
    const d = Math.max(...r.steps.map((s, i) => maxAbsDiff(s.logits, row.logits[i]!)));
    worst = Math.max(worst, d);
    same &&= r.drafts.join() === row.drafts.join();
    process.stderr.write(`row ${row.t}: max |Δlogit| ${d.toExponential(2)}, drafts reference ${r.drafts} / torch ${row.drafts}\n`);
  }
  if (worst > 1e-8 || !same) {
    process.stderr.write("draft check FAILED\n");
    process.exit(1);
  }
  process.stderr.write(`draft check passed (max |Δlogit| ${worst.toExponential(2)})\n`);
}
