// Writes the trained demo in the release's format (dev-only; docs/TEST-MODELS.md "The trained
// demo"): reads the dump train.py wrote (OUT/export/weights.safetensors: every language-model
// tensor under its official name, already bf16 / f32 / MXFP4+E8M0) and lays it out exactly like the
// tools/gen test models (same shard plan, tensor order, config.json, index, tokenizer folder), so
// the demo exercises the same reader paths as the release. The vision stubs are the generator's.
//
//   bun tools/train/export.ts [OUT=tools/train/out]   → OUT/model/
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { buildConfigJson } from "../gen/config-json.ts";
import { TableCache, tensorData } from "../gen/fill.ts";
import { planShards } from "../gen/layout.ts";
import { SafetensorsStreamWriter, tensorBytes } from "../gen/safetensors-writer.ts";
import { writeTokenizerFolder } from "../gen/tokenizer.ts";
import { loadModelConfig } from "./shared.ts";

interface DumpEntry {
  dtype: string;
  shape: number[];
  data: Uint8Array;
}

/** A whole safetensors file → name → entry (small files only; the dump is a few MB). */
export function readSafetensors(path: string): Map<string, DumpEntry> {
  const buf = readFileSync(path);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8")) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const out = new Map<string, DumpEntry>();
  for (const [name, h] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [a, b] = h.data_offsets;
    out.set(name, { dtype: h.dtype, shape: h.shape, data: new Uint8Array(buf.buffer, buf.byteOffset + 8 + n + a, b - a) });
  }
  return out;
}

export function exportModel(outRoot: string): string {
  const p = loadModelConfig();
  const dump = readSafetensors(join(outRoot, "export", "weights.safetensors"));
  const dir = join(outRoot, "model");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const used = new Set<string>();
  const problems: string[] = [];
  const weightMap: Record<string, string> = {};
  let total = 0;
  const tables = new TableCache();
  for (const shard of planShards(p, false)) {
    const w = new SafetensorsStreamWriter(join(dir, shard.file), shard.tensors, { format: "pt" });
    for (const t of shard.tensors) {
      let data: Uint8Array;
      if (t.role === "vision") data = tensorData(t, 1, tables); // stubs: the engine ignores the vision tower
      else {
        const d = dump.get(t.name);
        if (!d) {
          problems.push(`${t.name}: missing from the dump`);
          data = new Uint8Array(tensorBytes(t));
        } else {
          if (d.dtype !== t.dtype || d.shape.join(",") !== t.shape.join(",")) problems.push(`${t.name}: dump has ${d.dtype} [${d.shape}], the release layout wants ${t.dtype} [${t.shape}]`);
          data = d.data;
          used.add(t.name);
        }
      }
      if (data.length !== tensorBytes(t)) problems.push(`${t.name}: ${data.length} bytes, want ${tensorBytes(t)}`);
      else w.append(data);
      weightMap[t.name] = shard.file;
      total += tensorBytes(t);
    }
    if (problems.length) w.abort();
    else w.close();
  }
  for (const name of dump.keys()) if (!used.has(name)) problems.push(`${name}: in the dump but not in the release layout`);
  if (problems.length) throw new Error(`export: the dump does not match the release layout:\n  - ${problems.join("\n  - ")}`);
  writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2) + "\n");
  writeFileSync(join(dir, "config.json"), JSON.stringify(buildConfigJson(p), null, 2) + "\n");
  writeTokenizerFolder(dir, { vocab: p.vocab });
  return dir;
}

if (import.meta.main) {
  const out = resolve(process.argv[2] ?? join(import.meta.dir, "out"));
  if (!existsSync(join(out, "export", "weights.safetensors"))) {
    process.stderr.write(`${out}/export/weights.safetensors is missing: run train.py first\n`);
    process.exit(2);
  }
  const dir = exportModel(out);
  process.stderr.write(`exported the trained demo → ${dir}\n`);
}
