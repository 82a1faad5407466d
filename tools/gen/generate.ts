// Deterministic K3 test-model generator: writes a checkpoint directory in the release's exact
// format (config.json, shards, model.safetensors.index.json, tokenizer folder). Same preset + seed
// → byte-identical files. docs/TEST-MODELS.md describes presets, layout and scaling.
//
//   bun tools/gen/generate.ts --preset tiny-a --out DIR [--seed N] [--break-layout] [--vocab V]
//                             [--layers L] [--experts N] [--dense-inter F]
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { buildConfigJson } from "./config-json.ts";
import { TableCache, tensorChunks } from "./fill.ts";
import { planShards } from "./layout.ts";
import { type GenPreset, PRESETS, validatePreset } from "./presets.ts";
import { type GenDType, SafetensorsStreamWriter, tensorBytes } from "./safetensors-writer.ts";
import { writeTokenizerFolder } from "./tokenizer.ts";

export interface GenerateOptions {
  preset: string;
  seed?: number; // default 1
  breakLayout?: boolean;
  vocab?: number; // overrides the preset's vocab (specials move with it)
  layers?: number; // overrides (mainly for `slice`); MLA layers follow the release rule
  experts?: number; // overrides; topK is clamped to min(preset topK, experts)
  denseInter?: number; // overrides the dense FFN's width (a smaller layer 0: bench/drives.ts)
}

export interface GeneratedTensor {
  file: string; // shard base name
  dtype: GenDType;
  shape: number[];
  data?: Uint8Array; // kept only when the preset's keepData is set (small presets)
}

export interface GenerateResult {
  dir: string;
  preset: GenPreset; // after overrides
  files: string[]; // shard base names, in order
  tensors: Map<string, GeneratedTensor>; // insertion order = write order across shards
  totalBytes: number; // index metadata.total_size: sum of tensor data bytes
}

export function resolvePreset(opts: GenerateOptions): GenPreset {
  const base = PRESETS[opts.preset];
  if (!base) throw new Error(`unknown preset "${opts.preset}" (known: ${Object.keys(PRESETS).join(", ")})`);
  const p: GenPreset = { ...base };
  if (opts.vocab !== undefined) p.vocab = opts.vocab;
  if (opts.layers !== undefined) p.layers = opts.layers;
  if (opts.denseInter !== undefined) p.denseInter = opts.denseInter;
  if (opts.experts !== undefined) {
    p.experts = opts.experts;
    p.topK = Math.min(p.topK, opts.experts);
  }
  validatePreset(opts.preset, p);
  return p;
}

export async function generateModel(dir: string, opts: GenerateOptions): Promise<GenerateResult> {
  const p = resolvePreset(opts);
  const seed = (opts.seed ?? 1) >>> 0;
  mkdirSync(dir, { recursive: true });

  const shards = planShards(p, opts.breakLayout ?? false);
  const tables = new TableCache();
  const tensors = new Map<string, GeneratedTensor>();
  const weightMap: Record<string, string> = {};
  let totalBytes = 0;

  for (const shard of shards) {
    const path = join(dir, shard.file);
    const w = new SafetensorsStreamWriter(path, shard.tensors, { format: "pt" });
    try {
      for (const t of shard.tensors) {
        const parts: Uint8Array[] = [];
        for (const chunk of tensorChunks(t, seed, tables)) {
          // Small presets write synchronously; big ones overlap generation with the disk write.
          if (p.keepData) (w.append(chunk), parts.push(chunk));
          else await w.appendPipelined(chunk);
        }
        tensors.set(t.name, { file: shard.file, dtype: t.dtype, shape: t.shape, data: p.keepData ? concat(parts) : undefined });
        weightMap[t.name] = shard.file;
        totalBytes += tensorBytes(t);
      }
      await w.flush();
      w.close();
    } catch (e) {
      await w.flush().catch(() => {});
      w.abort();
      rmSync(path, { force: true }); // never leave a truncated shard that looks like a checkpoint
      throw e;
    }
  }

  writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: { total_size: totalBytes }, weight_map: weightMap }, null, 2) + "\n");
  writeFileSync(join(dir, "config.json"), JSON.stringify(buildConfigJson(p), null, 2) + "\n");
  writeTokenizerFolder(dir, { vocab: p.vocab });
  return { dir, preset: p, files: shards.map((s) => s.file), tensors, totalBytes };
}

function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(parts.reduce((a, b) => a + b.length, 0));
  let at = 0;
  for (const b of parts) (out.set(b, at), (at += b.length));
  return out;
}

// ---- command line (only when run directly) ----

function parseArgs(argv: string[]): { out: string; opts: GenerateOptions } {
  let out: string | undefined;
  const opts: GenerateOptions = { preset: "" };
  const num = (flag: string, v: string | undefined): number => {
    const n = Number(v);
    if (v === undefined || !Number.isInteger(n) || n < 0) throw new Error(`${flag} needs a non-negative integer, got ${v}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--preset") opts.preset = argv[++i] ?? "";
    else if (a === "--out") out = argv[++i];
    else if (a === "--seed") opts.seed = num(a, argv[++i]);
    else if (a === "--vocab") opts.vocab = num(a, argv[++i]);
    else if (a === "--layers") opts.layers = num(a, argv[++i]);
    else if (a === "--experts") opts.experts = num(a, argv[++i]);
    else if (a === "--dense-inter") opts.denseInter = num(a, argv[++i]);
    else if (a === "--break-layout") opts.breakLayout = true;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!opts.preset || !out) throw new Error("usage: bun tools/gen/generate.ts --preset NAME --out DIR [--seed N] [--break-layout] [--vocab V] [--layers L] [--experts N] [--dense-inter F]");
  return { out, opts };
}

if (import.meta.main) {
  try {
    const { out, opts } = parseArgs(process.argv.slice(2));
    if (existsSync(join(out, "config.json"))) process.stderr.write(`overwriting the model in ${out}\n`);
    const t0 = performance.now();
    const r = await generateModel(out, opts);
    const s = (performance.now() - t0) / 1000;
    process.stderr.write(
      `${opts.preset}: ${r.files.length} shards, ${r.tensors.size} tensors, ${(r.totalBytes / 1e6).toFixed(1)} MB in ${s.toFixed(2)} s ` +
        `(${(r.totalBytes / 1e6 / s).toFixed(0)} MB/s) → ${out}\n`,
    );
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n`);
    process.exit(2);
  }
}
