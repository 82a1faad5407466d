// Typed bindings to the C kernel library (kernels/k3.h). Each binding keeps its C name.
//
// Loading is explicit (loadKernels), never at import time, so `k3 --help` needs no .so.
// The library is process-wide (one dlopen per process) — that is the only module state here.
//
// Where the .so comes from, in order:
//  1. $K3_KERNELS (a path) — run the suite against another build;
//  2. the embedded file: under `bun run`/`bun test` a real path in zig-out/, in the compiled
//     binary `/$bunfs/root/…`, which bun extracts to $TMPDIR itself;
//  3. if that extraction cannot be mapped (noexec $TMPDIR), a copy in k3's cache folder
//     (src/cache-dir.ts: $XDG_CACHE_HOME/k3, else ~/.cache/k3).
import { dlopen, FFIType, suffix } from "bun:ffi";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ensureCacheDir } from "./cache-dir.ts";
import { K3Error } from "./errors.ts";
import { writeFileAtomic } from "./files.ts";
import embeddedLib from "../zig-out/lib/libkernels.so" with { type: "file" };

const { ptr, i32, i64, i64_fast, u32, f32, f64, cstring, void: v } = FFIType;

/** The symbol table: argument and return types of every exported function (see kernels/k3.h). */
export const symbols = {
  k3_version: { args: [], returns: i32 },
  k3_limit: { args: [i32], returns: i32 }, // (K3_LIMIT_* id) → value; see kernelLimits()

  // ISA dispatch (process-wide): -1 auto, 0 scalar, 1 AVX2, 2 AVX-512, 3 NEON (aarch64)
  k3_isa_set: { args: [i32], returns: i32 },
  k3_isa_get: { args: [], returns: i32 },
  k3_isa_supported: { args: [i32], returns: i32 },

  // compute thread pool (process-wide; the caller takes part)
  k3_pool_init: { args: [i32], returns: i32 },
  k3_pool_size: { args: [], returns: i32 },
  k3_pool_free: { args: [], returns: v },

  // memory (i64 returns are BigInt; k3_mem_alloc returns a pointer number or null)
  k3_mem_alloc: { args: [i64, i64], returns: ptr },
  k3_mem_free: { args: [ptr], returns: i32 }, // K3_OK / K3_ERR_ARG (not a live allocation: freed twice, or never ours)
  k3_mem_copy: { args: [ptr, ptr, i64], returns: v },
  k3_mem_read_sum: { args: [ptr, i64], returns: i64 },

  // matmuls (kernels/k3.h): (W, X, ldx, Y, ldy, rows, cols, T): row t of X at X + t·ldx, of Y at
  // Y + t·ldy (floats; ldx ≥ cols, ldy ≥ rows) → K3_OK, or K3_ERR_ARG with nothing written
  k3_matmul_bf16: { args: [ptr, ptr, i32, ptr, i32, i32, i32, i32], returns: i32 },
  k3_matmul_f32: { args: [ptr, ptr, i32, ptr, i32, i32, i32, i32], returns: i32 },
  // (packed, scales, X, ldx, Y, ldy, rows, cols, T); cols a multiple of 32
  k3_matmul_mxfp4: { args: [ptr, ptr, ptr, i32, ptr, i32, i32, i32, i32], returns: i32 },
  // compact trunk (kernels/k3_matmul_q.c): (q, scales, X, ldx, Y, ldy, rows, cols, T); quantiser (W, rows, cols, bits, Q, scales)
  k3_matmul_q8: { args: [ptr, ptr, ptr, i32, ptr, i32, i32, i32, i32], returns: i32 },
  k3_matmul_q4: { args: [ptr, ptr, ptr, i32, ptr, i32, i32, i32, i32], returns: i32 },
  k3_quantize_bf16: { args: [ptr, i32, i32, i32, ptr, ptr], returns: i32 }, // K3_OK / K3_ERR_ARG / K3_ERR_NONFINITE
  k3_quant_error: { args: [ptr, i32, i32, i32, ptr, ptr, ptr], returns: v }, // (W, rows, cols, bits, Q, scales, double out[3])
  // exact compact trunk (kernels/k3_bx4.c): (B, eidx, ent, nent, X, ldx, Y, ldy, rows, cols, T) → status;
  // encoder (W, rows, cols, out, eidx, ent, cap, base) → escapes (or < 0); decoder (B, eidx, ent, nent, rows, cols, out) → status
  k3_matmul_bx4: { args: [ptr, ptr, ptr, i64, ptr, i32, ptr, i32, i32, i32, i32], returns: i32 },
  k3_bx4_encode: { args: [ptr, i32, i32, ptr, ptr, ptr, i64, i64], returns: i64_fast },
  k3_bx4_decode: { args: [ptr, ptr, ptr, i64, i32, i32, ptr], returns: i32 },

  // elementwise
  k3_bf16_to_f32: { args: [ptr, ptr, i64], returns: v },
  k3_add: { args: [ptr, ptr, i64], returns: v },
  k3_axpy: { args: [ptr, f32, ptr, i64], returns: v },
  k3_sigmoid: { args: [ptr, i64], returns: v },
  k3_mul_sigmoid: { args: [ptr, ptr, i64], returns: v },
  k3_situ_glu: { args: [ptr, ptr, ptr, i64, f32, f32], returns: v },
  k3_expf_n: { args: [ptr, i64], returns: v },
  k3_tanhf_n: { args: [ptr, i64], returns: v },
  k3_argmax: { args: [ptr, i32], returns: i32 }, // index, or K3_ERR_NONFINITE / K3_ERR_ARG
  // (x, ldx, w, y, ldy, n, T, eps)
  k3_rmsnorm_bf16w: { args: [ptr, i32, ptr, ptr, i32, i32, i32, f32], returns: v },
  k3_rmsnorm_f32w: { args: [ptr, i32, ptr, ptr, i32, i32, i32, f32], returns: v },

  // KDA
  k3_kda_conv_silu: { args: [ptr, ptr, ptr, i32, i32], returns: v }, // (X, w, hist, C, T)
  k3_l2norm_heads: { args: [ptr, i32, i32, i32, f32, f32], returns: v }, // (X, H, D, T, eps, scale)
  k3_kda_gate: { args: [ptr, ptr, ptr, ptr, i32, i32, i32, f32], returns: v }, // (f, dt_bias, A_log, g, H, D, T, lower)
  k3_kda_recurrent: { args: [ptr, ptr, ptr, ptr, ptr, ptr, ptr, i32, i32, i32], returns: i32 }, // (q,k,v,g,beta,S,o,H,D,T) → K3_OK / K3_ERR_ARG

  // MLA
  k3_mla_scratch_floats: { args: [i32, i32], returns: i64 }, // (R, npos) → BigInt
  // (q, kv_b, cache, out, scratch, Hm, dn, dr, dv, R, pos0, T, scale, cache_rows, scratch_floats) → K3_OK / K3_ERR_ARG
  k3_mla_attend: { args: [ptr, ptr, ptr, ptr, ptr, i32, i32, i32, i32, i32, i32, i32, f32, i32, i64], returns: i32 },

  // AttnRes: (bank, n, P, proj, norm, out, E, T, eps)
  k3_attnres_mix: { args: [ptr, i32, ptr, ptr, ptr, ptr, i32, i32, f32], returns: i32 }, // K3_OK / K3_ERR_ARG

  // draft model (kernels/k3_draft.c): interleaved RoPE (x, ldx, heads, hstride, dr, freq f64[dr/2], pos0, T, mscale),
  // the library's own sin/cos (x, f64 out[2]), SiLU-GLU (g, u, out, n); each → K3_OK / K3_ERR_ARG
  k3_rope_interleaved: { args: [ptr, i32, i32, i32, i32, ptr, i32, i32, f32], returns: i32 },
  k3_sincos: { args: [f64, ptr], returns: i32 },
  k3_silu_glu: { args: [ptr, ptr, ptr, i64], returns: i32 },

  // router: (logits, bias, N, K, T, scaling, idx, w)
  k3_router_topk: { args: [ptr, ptr, i32, i32, i32, f32, ptr, ptr], returns: i32 }, // K3_OK / K3_ERR_ARG

  // I/O (kernels/k3_io.h): files, direct-I/O probe, the I/O thread pool, CRC-32
  k3_direct_mode: { args: [], returns: i32 }, // what direct opens use here: 1 O_DIRECT, 2 F_NOCACHE (macOS), 0 none
  k3_file_open: { args: [cstring, i32], returns: i32 }, // (path, direct) → fd or −errno
  k3_file_close: { args: [i32], returns: i32 },
  k3_file_size: { args: [i32], returns: i64_fast },
  k3_direct_probe: { args: [cstring], returns: i32 },
  k3_read_full: { args: [i32, ptr, i64, i64, i64], returns: i64_fast }, // (fd, buf, len, off, need)
  // I/O queues: one per device (src/memory/reader.ts), each its own threads; tickets never reused
  k3_io_queue_open: { args: [i32, i32], returns: i32 }, // (threads, max tickets held) → queue id ≥ 0
  k3_io_queue_close: { args: [i32], returns: i32 },
  k3_io_submit_to: { args: [i32, i32, ptr, i64, i64, i64], returns: i64_fast }, // (queue, fd, buf, len, off, need) → ticket > 0
  k3_io_cancel: { args: [i64], returns: i32 }, // 1 taken back before it started (nothing written), 0 running or done
  k3_io_queue_stats: { args: [i32, ptr], returns: i32 }, // (queue, BigInt64Array[IO_STAT.count])
  k3_io_done: { args: [i64], returns: i32 },
  k3_io_wait: { args: [i64], returns: i64_fast }, // → bytes, or K3_ERR_SHORT / −errno
  k3_io_wait_any: { args: [ptr, i32], returns: i32 }, // (BigInt64Array tickets, n) → index
  k3_io_wait_any_for: { args: [ptr, i32, i64], returns: i32 }, // (…, timeout ns) → index, −1 none valid, −2 timed out
  // the default queue (tools, benchmarks): opened once per process
  k3_io_init: { args: [i32, i32], returns: i32 }, // (threads, max in flight)
  k3_io_free: { args: [], returns: v },
  k3_io_submit: { args: [i32, ptr, i64, i64, i64], returns: i64_fast }, // → ticket > 0
  // fault injection (tests): (queue or −1, n-th request from now, kind 1 EIO / 2 stall then poison)
  k3_io_fault: { args: [i32, i64, i32], returns: v },
  k3_io_release: { args: [i32], returns: v },
  k3_io_hold: { args: [i32, i32], returns: v }, // (queue, on): start nothing while on
  k3_io_fail_nth: { args: [i64], returns: v },
  k3_crc32: { args: [u32, ptr, i64], returns: u32 },
  k3_crc32c: { args: [u32, ptr, i64], returns: u32 }, // hardware (SSE4.2 / ARMv8 CRC32) or tables, same value
  k3_crc32c_path: { args: [u32, ptr, i64, i32], returns: u32 }, // (…, path: 0 tables, 1 hardware, -1 auto)
} as const;

/** What k3_direct_mode() returns, by code (kernels/k3_io.h): the mechanism behind a direct open. */
export const DIRECT_MODES = ["buffered", "O_DIRECT", "F_NOCACHE"] as const;

/** Indices of k3_io_queue_stats' output (kernels/k3_io.h K3_IO_STAT_*). */
export const IO_STAT = { outstanding: 0, outstandingBytes: 1, queued: 2, reads: 3, bytes: 4, errors: 5, busyNs: 6, threads: 7, count: 8 } as const;

/** k3_io_wait_any_for's answer when the time ran out. */
export const IO_TIMED_OUT = -2;

/** ISA ids of k3_isa_set / k3_isa_get (kernels/k3.h). */
export const ISA = { auto: -1, scalar: 0, avx2: 1, avx512: 2, neon: 3 } as const;

/** Status codes kernels return (kernels/k3.h). */
export const K3_STATUS = { ok: 0, arg: -1, nomem: -2, io: -3, short: -4, nonfinite: -5, data: -6 } as const;

export type Kernels = ReturnType<typeof dlopen<typeof symbols>>["symbols"];

/** The kernels' size limits, declared once in kernels/k3.h and read from the library. */
export interface KernelLimits {
  routerExperts: number; // k3_router_topk: num_experts
  attnResSources: number; // k3_attnres_mix: AttnRes snapshots + the running sum
  poolThreads: number; // k3_pool_init
  ioThreads: number; // k3_io_queue_open, k3_io_init (threads per queue)
  mxfp4Group: number; // k3_matmul_mxfp4: columns are a multiple of this
  kdaConvWidth: number; // k3_kda_conv_silu: the only conv width implemented
  kdaHeadDim: number; // k3_kda_recurrent: the largest head dim (its stack arrays)
  ropePairs: number; // k3_rope_interleaved: rope dims / 2
  ropeAngle: number; // k3_rope_interleaved: |position · frequency| below this (radians)
}

/** Ids of k3_limit (K3_LIMIT_* in kernels/k3.h), in KernelLimits' field order. */
const LIMIT_IDS: Record<keyof KernelLimits, number> = { routerExperts: 0, attnResSources: 1, poolThreads: 2, ioThreads: 3, mxfp4Group: 4, kdaConvWidth: 5, kdaHeadDim: 6, ropePairs: 7, ropeAngle: 8 };

export function kernelLimits(k: Kernels = loadKernels()): KernelLimits {
  const out = {} as KernelLimits;
  for (const [name, id] of Object.entries(LIMIT_IDS) as [keyof KernelLimits, number][]) {
    const v = k.k3_limit(id);
    if (v <= 0) throw new Error(`kernel library has no limit ${name} (id ${id}): library older than these bindings`);
    out[name] = v;
  }
  return out;
}

/** The library ABI these bindings are written for (k3_version, kernels/k3_version.c). */
export const KERNELS_ABI = 7;

let loaded: Kernels | undefined;

/** dlopen the kernel library once per process and return its symbols. A library of another ABI
 *  (an old build through $K3_KERNELS) is refused: its functions take other arguments. */
export function loadKernels(): Kernels {
  if (loaded) return loaded;
  const lib = open();
  const abi = lib.symbols.k3_version();
  if (abi !== KERNELS_ABI) {
    lib.close();
    const override = process.env.K3_KERNELS;
    const where = override ? `K3_KERNELS=${override}` : "the built-in kernel library";
    // $K3_KERNELS is the user's setting (exit 2); a built-in library of another ABI is a bad build.
    throw new K3Error(override ? "USAGE" : "INTERNAL", `${where} has ABI version ${abi}, these bindings need version ${KERNELS_ABI}`, ["rebuild it (npm run build:kernels) or point K3_KERNELS at a matching build"]);
  }
  return (loaded = lib.symbols);
}

function open() {
  const override = process.env.K3_KERNELS;
  if (override) return openOverride(override);
  try {
    return dlopen(embeddedLib, symbols);
  } catch (err) {
    if (!embeddedLib.startsWith("/$bunfs/")) throw err;
    // noexec $TMPDIR: bun's own extraction cannot be mapped; keep a copy in the user's cache.
    const bytes = readFileSync(embeddedLib);
    const dir = ensureCacheDir("");
    const path = join(dir, `libkernels-${Bun.hash(bytes).toString(16)}.${suffix}`);
    if (!existsSync(path)) writeFileAtomic(path, "a copy of the kernel library", "IO", bytes, 0o755);
    return dlopen(path, symbols);
  }
}

/** $K3_KERNELS names the library to load: one that is missing, not a shared library, or lacks a
 *  symbol is the user's setting, said as such (exit 2), not a k3 bug. */
function openOverride(path: string) {
  const hint = "unset K3_KERNELS to use the kernel library built into k3 (or point it at a libkernels.so that `npm run build:kernels` made)";
  if (!existsSync(path)) throw new K3Error("USAGE", `K3_KERNELS=${path}: no such file`, [hint]);
  try {
    return dlopen(path, symbols);
  } catch (err) {
    const why = (err as Error).message.replace(/^Failed to open library "[^"]*": /, "").replace(`${path}: `, "");
    throw new K3Error("USAGE", `K3_KERNELS=${path}: cannot load it as the kernel library (${why})`, [hint]);
  }
}

