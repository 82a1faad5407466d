// The demo pack format (assets/demo/k3-demo.pack.zst, and the demo's EAGLE-3 draft in
// assets/demo/k3-demo-draft.pack.zst): written by tools/train/pack.ts, read by src/cli/demo.ts. zstd( DEMO_PACK_MAGIC · u32 LE header length · header JSON · file bytes in
// header order ), header = {files: [{name, bytes, sha256}]}. Unpacking checks every size and hash.
// Inside the pack each .safetensors file's data section is stored as two byte planes (all even
// bytes, then all odd bytes): the high bytes of bf16 weights (sign + exponent) are very repetitive
// apart from the noisy low bytes, so zstd packs the planes ~13% smaller (measured on the demo's
// embedding shard: 2.10 MB vs 2.42 MB). Sizes and hashes are of the original files.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export const DEMO_PACK_MAGIC = "K3DEMO1\n";

export interface DemoPackHeader {
  files: Array<{ name: string; bytes: number; sha256: string }>;
}

export function sha256Hex(bytes: Uint8Array): string {
  return new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
}

/** Files a model folder ships with (the engine's own caches, e.g. k3-index.json, are left out);
 *  `model.safetensors` is the single file of the demo's EAGLE-3 draft (assets/demo/k3-demo-draft.pack.zst). */
const SHIPPED = /^(config\.json|model\.safetensors\.index\.json|model-\d{5}-of-\d{6}\.safetensors|model\.safetensors|tiktoken\.model|tokenizer_config\.json)$/;

/** A model folder → the compressed pack (zstd level 22). */
export function packDemo(modelDir: string): Uint8Array {
  const names = readdirSync(modelDir).filter((f) => SHIPPED.test(f)).sort();
  if (!names.includes("config.json")) throw new Error(`${modelDir}: no config.json`);
  const bodies: Uint8Array[] = names.map((n) => new Uint8Array(readFileSync(join(modelDir, n))));
  const header: DemoPackHeader = { files: names.map((name, i) => ({ name, bytes: bodies[i]!.length, sha256: sha256Hex(bodies[i]!) })) };
  names.forEach((n, i) => (bodies[i] = n.endsWith(".safetensors") ? bytePlanes(bodies[i]!, true) : bodies[i]!));
  const h = new TextEncoder().encode(JSON.stringify(header));
  const len = new Uint8Array(4);
  new DataView(len.buffer).setUint32(0, h.length, true);
  return Bun.zstdCompressSync(Buffer.concat([new TextEncoder().encode(DEMO_PACK_MAGIC), len, h, ...bodies]), { level: 22 });
}

/** Writes the pack's files into `dir` (existing), checking the format, sizes and SHA-256 of each. */
export function unpackDemo(compressed: Uint8Array, dir: string): void {
  const fail = (what: string): never => {
    throw new Error(`the embedded demo model is damaged (${what}): rebuild k3 (npm run build)`);
  };
  let raw: Uint8Array;
  try {
    raw = Bun.zstdDecompressSync(compressed);
  } catch (err) {
    return fail(`zstd: ${(err as Error).message}`);
  }
  const magic = new TextEncoder().encode(DEMO_PACK_MAGIC);
  if (raw.length < magic.length + 4 || !magic.every((b, i) => raw[i] === b)) fail("bad magic");
  const headerLen = new DataView(raw.buffer, raw.byteOffset, raw.byteLength).getUint32(magic.length, true);
  let at = magic.length + 4 + headerLen;
  if (at > raw.length) fail("header past the end");
  let header: DemoPackHeader;
  try {
    header = JSON.parse(new TextDecoder().decode(raw.subarray(magic.length + 4, at))) as DemoPackHeader;
  } catch {
    return fail("header JSON");
  }
  for (const f of header.files) {
    if (!/^[\w.-]+$/.test(f.name)) fail(`file name ${JSON.stringify(f.name)}`);
    let body = raw.subarray(at, at + f.bytes);
    if (body.length === f.bytes && f.name.endsWith(".safetensors")) body = bytePlanes(body, false);
    if (body.length !== f.bytes || sha256Hex(body) !== f.sha256) fail(`${f.name}: size or SHA-256`);
    writeFileSync(join(dir, f.name), body);
    at += f.bytes;
  }
  if (at !== raw.length) fail(`${raw.length - at} trailing bytes`);
}

/**
 * A safetensors file with its data section split into byte planes (`split`) or joined back. The
 * 8-byte length and the header stay as they are; an odd last byte stays last. Same length out.
 */
function bytePlanes(file: Uint8Array, split: boolean): Uint8Array {
  if (file.length < 8) return file;
  const start = 8 + Number(new DataView(file.buffer, file.byteOffset, 8).getBigUint64(0, true));
  if (start > file.length) return file; // not a safetensors file: stored as is (the hash check decides)
  const out = new Uint8Array(file);
  const half = (file.length - start) >> 1;
  for (let i = 0; i < half; i++) {
    if (split) (out[start + i] = file[start + 2 * i]!, (out[start + half + i] = file[start + 2 * i + 1]!));
    else (out[start + 2 * i] = file[start + i]!, (out[start + 2 * i + 1] = file[start + half + i]!));
  }
  return out;
}
