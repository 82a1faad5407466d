// The demo's EAGLE-3 draft in the released format (dev-only; docs/TEST-MODELS.md "Demo draft"):
//
//   bun tools/train/draft-export.ts config [OUT=tools/train/out]  → OUT/draft/config.json (for train_draft.py)
//   bun tools/train/draft-export.ts [OUT=tools/train/out]         → OUT/draft/model/ (config.json + model.safetensors)
//
// The config comes from tools/train/draft-config.json through tools/gen's draftConfigJson, the file
// is written like tools/gen's drafts (tensors sorted by name, release metadata), so the shipped
// draft and the test drafts share one definition of the format. The export refuses a dump whose
// tensors differ from that roster, checks that embed_tokens is byte-identical to the target's, and
// opens the result with the float64 reference's reader against the target.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { type DraftSpec, draftConfigJson, draftTensors } from "../gen/draft-plan.ts";
import { DRAFT_METADATA } from "../gen/draft.ts";
import { SafetensorsStreamWriter, tensorBytes } from "../gen/safetensors-writer.ts";
import { checkDraftTarget, ReferenceDraft } from "../reference/draft.ts";
import { ReferenceModel } from "../reference/model.ts";
import { readSafetensors } from "./export.ts";

export function demoDraftSpec(): DraftSpec {
  const raw = JSON.parse(readFileSync(join(import.meta.dir, "draft-config.json"), "utf8")) as DraftSpec & { comment?: string };
  const { comment: _c, ...spec } = raw;
  return spec;
}

function targetEmbedding(targetDir: string): Uint8Array {
  const index = JSON.parse(readFileSync(join(targetDir, "model.safetensors.index.json"), "utf8")) as { weight_map: Record<string, string> };
  const name = "language_model.model.embed_tokens.weight";
  return readSafetensors(join(targetDir, index.weight_map[name]!)).get(name)!.data;
}

export function exportDraft(out: string): string {
  const spec = demoDraftSpec();
  const dump = readSafetensors(join(out, "draft", "weights.safetensors"));
  const plan = draftTensors(spec);
  const problems: string[] = [];
  for (const t of plan) {
    const d = dump.get(t.name);
    if (!d) problems.push(`${t.name}: missing from the dump`);
    else if (d.dtype !== t.dtype || d.shape.join() !== t.shape.join() || d.data.length !== tensorBytes(t)) problems.push(`${t.name}: dump has ${d.dtype} [${d.shape}], the format wants ${t.dtype} [${t.shape}]`);
  }
  for (const n of dump.keys()) if (!plan.some((t) => t.name === n)) problems.push(`${n}: in the dump but not in the format`);
  const targetDir = join(out, "demo-target");
  if (Buffer.compare(dump.get("embed_tokens.weight")?.data ?? new Uint8Array(), targetEmbedding(targetDir)) !== 0) problems.push("embed_tokens.weight: not byte-identical to the target's embedding");
  if (problems.length) throw new Error(`draft export: the dump does not match the released format:\n  - ${problems.join("\n  - ")}`);
  const dir = join(out, "draft", "model");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const w = new SafetensorsStreamWriter(join(dir, "model.safetensors"), plan, DRAFT_METADATA);
  for (const t of plan) w.append(dump.get(t.name)!.data);
  w.close();
  writeFileSync(join(dir, "config.json"), JSON.stringify(draftConfigJson(spec), null, 2) + "\n");
  checkDraftTarget(ReferenceDraft.open(dir), ReferenceModel.open(targetDir));
  return dir;
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const configOnly = args[0] === "config";
  const out = resolve((configOnly ? args[1] : args[0]) ?? join(import.meta.dir, "out"));
  try {
    if (configOnly) {
      mkdirSync(join(out, "draft"), { recursive: true });
      writeFileSync(join(out, "draft", "config.json"), JSON.stringify(draftConfigJson(demoDraftSpec()), null, 2) + "\n");
      process.stderr.write(`→ ${join(out, "draft", "config.json")}\n`);
    } else process.stderr.write(`exported the demo draft → ${exportDraft(out)}\n`);
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n`);
    process.exit(2);
  }
}
