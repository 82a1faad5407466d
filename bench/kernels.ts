// Kernel bench (docs/BENCH-KERNELS.md): every number the kernels are judged by, in one run.
//  - memory read rate (k3_mem_read_sum over 1 GiB) and the f32 peak of the vector units
//    (bench/peak.ts: separate multiply + add, the FP contract's ceiling, and fused multiply-add);
//  - T = 1 (decode): GB/s of weight bytes read from DRAM, against the memory read rate;
//  - T > 1 (prefill, expert batches): GFLOP/s (2 per weight·token), against both peaks;
// per ISA path and thread count, for the library under test and optionally an older build
// (--old path.so: "before" arms, loaded in the same process). Runs are interleaved: round r
// measures every arm once, so drift and other users hit every arm alike; ≥ 3 rounds.
//
//   bun bench/kernels.ts [--runs 3] [--T 1,8,32,64,256] [--threads 1,2] [--isa avx2,avx512,neon]
//                        [--kernels bf16,mxfp4,int4] [--old bench/out/old/libkernels.so] [--json out.json]
//                        [--bf16-shape 2048x7168]   (rows×cols of the bf16 matrices, e.g. decode's 7168x3584)
//                        [--offset 0]   (bytes past a 64-byte line where every weight matrix starts, 0–62, even:
//                                        a tensor read with O_DIRECT keeps its file offset's alignment)
// Output: markdown tables on stdout (progress on stderr); --json writes every raw number.
import { dlopen, FFIType, ptr as addressOf } from "bun:ffi";
import { writeFileAtomic, writeTarget } from "../src/files.ts";
import { loadKernels, ISA, symbols } from "../src/kernels.ts";
import { bf16Set, mxfp4Set, q4Set } from "./weights.ts";
import { peakGflops } from "./peak.ts";
import { cpuInfo, loadAvg } from "./machine.ts";
import { arg } from "./common.ts";

const RUNS = Number(arg("--runs", "3"));
const Ts = arg("--T", "1,8,32,64,256").split(",").map(Number);
const threadCounts = arg("--threads", [...new Set([1, 2, navigator.hardwareConcurrency])].filter((n) => n <= navigator.hardwareConcurrency).join(",")).split(",").map(Number);
const oldPath = arg("--old", "");
const jsonOut = arg("--json", "");
if (jsonOut) writeTarget(jsonOut, "the --json output", "USAGE"); // a FIFO or folder there: refused now, not after the run
const say = (s: string) => process.stderr.write(`[kernels] ${s}\n`);

const { i32, ptr, void: v } = FFIType;
/** The symbols an arm needs: a subset, so an older library (--old) loads too. Libraries before ABI
 *  3 take no strides and return nothing; `matmul` hides the difference. */
const baseSymbols = {
  k3_version: { args: [], returns: i32 },
  k3_isa_set: { args: [i32], returns: i32 },
  k3_isa_supported: { args: [i32], returns: i32 },
  k3_pool_init: { args: [i32], returns: i32 },
} as const;
const abi2Symbols = {
  ...baseSymbols,
  k3_matmul_bf16: { args: [ptr, ptr, ptr, i32, i32, i32], returns: v },
  k3_matmul_mxfp4: { args: [ptr, ptr, ptr, ptr, i32, i32, i32], returns: v },
  k3_matmul_q4: { args: [ptr, ptr, ptr, ptr, i32, i32, i32], returns: v },
} as const;
type Fn = (...a: any[]) => any;
type Grouped = (P: any, S: any, X: Float32Array, Y: Float32Array, rows: number, cols: number, T: number) => void;
type Matmul = { bf16: (W: any, X: Float32Array, Y: Float32Array, rows: number, cols: number, T: number) => void; mxfp4: Grouped; q4: Grouped };
type Lib = { name: string; k: { [K in keyof typeof baseSymbols]: Fn }; mm: Matmul };
const k = loadKernels();
const ok = (st: number) => {
  if (st !== 0) throw new Error(`matmul refused its arguments (status ${st})`);
};
const libs: Lib[] = [{
  name: "new", k,
  mm: abi3(k),
}];
/** The matmuls of an ABI-3 library, in the bench's argument order. */
function abi3(o: Pick<typeof k, "k3_matmul_bf16" | "k3_matmul_mxfp4" | "k3_matmul_q4">): Matmul {
  return {
    bf16: (W, X, Y, r, c, T) => ok(o.k3_matmul_bf16(W, X, c, Y, r, r, c, T)),
    mxfp4: (P, S, X, Y, r, c, T) => ok(o.k3_matmul_mxfp4(P, S, X, c, Y, r, r, c, T)),
    q4: (P, S, X, Y, r, c, T) => ok(o.k3_matmul_q4(P, S, X, c, Y, r, r, c, T)),
  };
}
if (oldPath) {
  const version = dlopen(oldPath, { k3_version: baseSymbols.k3_version }).symbols.k3_version();
  if (version >= 3) { // ABI 3: the matmuls take strides and return a status (later ABIs changed other kernels)
    const o = dlopen(oldPath, { ...baseSymbols, k3_matmul_bf16: symbols.k3_matmul_bf16, k3_matmul_mxfp4: symbols.k3_matmul_mxfp4, k3_matmul_q4: symbols.k3_matmul_q4 }).symbols;
    libs.push({ name: "old", k: o, mm: abi3(o) });
  } else {
    const o = dlopen(oldPath, abi2Symbols).symbols;
    libs.push({ name: "old", k: o, mm: { bf16: (W, X, Y, r, c, T) => o.k3_matmul_bf16(W, X, Y, r, c, T), mxfp4: (P, S, X, Y, r, c, T) => o.k3_matmul_mxfp4(P, S, X, Y, r, c, T), q4: (P, S, X, Y, r, c, T) => o.k3_matmul_q4(P, S, X, Y, r, c, T) } });
  }
}

const isaNames: Record<string, number> = { scalar: ISA.scalar, avx2: ISA.avx2, avx512: ISA.avx512, neon: ISA.neon };
const isas = arg("--isa", "avx2,avx512,neon").split(",").filter((n) => k.k3_isa_supported(isaNames[n]!) === 1);

/** --offset: the weights start that many bytes past a cache line, as a checkpoint's tensors do when
 *  read straight into a slot (O_DIRECT keeps the file offset's alignment; docs/BENCH-KERNELS.md). */
const OFFSET = Number(arg("--offset", "0"));
if (!Number.isInteger(OFFSET) || OFFSET < 0 || OFFSET > 63 || OFFSET % 2) throw new Error(`--offset wants an even byte count 0–62, got ${arg("--offset", "")}`);
function placed<A extends Uint8Array | Uint16Array | Float32Array>(a: A): A {
  const raw = new Uint8Array(a.byteLength + 128);
  const want = OFFSET - (OFFSET % a.BYTES_PER_ELEMENT); // f32 scales stay 4-byte aligned
  const o = (((want - (addressOf(raw) % 64)) % 64) + 64) % 64;
  const out = new (a.constructor as new (b: ArrayBuffer, o: number, n: number) => A)(raw.buffer, o, a.length);
  out.set(a as any);
  return out;
}

// Weight sets. T = 1 reads 512 MiB of distinct matrices per pass (more than this machine's last-
// level cache, so the bytes come from DRAM, as in decode); T > 1 arms reuse them.
const SET_BYTES = 512 * 2 ** 20;
type Kernel = { name: string; rows: number; cols: number; bytes: number; count: number; call: (lib: Lib, i: number, X: Float32Array, Y: Float32Array, T: number) => void };
function bf16Kernel(rows: number, cols: number): Kernel {
  const { bytes, count, Ws: W0 } = bf16Set(rows, cols, SET_BYTES);
  const Ws = W0.map(placed);
  return { name: "bf16", rows, cols, bytes, count, call: (l, i, X, Y, T) => l.mm.bf16(Ws[i % count]!, X, Y, rows, cols, T) };
}
function mxfp4Kernel(rows: number, cols: number, name = "mxfp4"): Kernel {
  const set = mxfp4Set(rows, cols, SET_BYTES), { bytes, count } = set, Ps = set.Ps.map(placed), Ss = set.Ss.map(placed);
  return { name, rows, cols, bytes, count, call: (l, i, X, Y, T) => l.mm.mxfp4(Ps[i % count]!, Ss[i % count]!, X, Y, rows, cols, T) };
}
function q4Kernel(rows: number, cols: number): Kernel {
  const set = q4Set(rows, cols, SET_BYTES), { bytes, count } = set, Qs = set.Qs.map(placed), Ss = set.Ss.map(placed);
  return { name: "int4", rows, cols, bytes, count, call: (l, i, X, Y, T) => l.mm.q4(Qs[i % count]!, Ss[i % count]!, X, Y, rows, cols, T) };
}
const kernelNames = arg("--kernels", "bf16,mxfp4,int4").split(",");
say("generating weight sets…");
// bf16: a 2048-row slice of a 7168×7168 trunk matrix (T = 1 rate is the same per byte; T = 256
// stays ~0.1 s); MXFP4: a K3 expert's up/gate projection (3072 × 3584) and its down projection
// ("mxfp4 down", 3584 × 3072: decode runs 80 of those per token beside 160 up/gate); int4: the
// compact trunk's form of the same bf16 slice.
const bf16Shape = arg("--bf16-shape", "2048x7168").split("x").map(Number);
if (bf16Shape.length !== 2 || !bf16Shape.every((n) => Number.isInteger(n) && n > 0)) throw new Error(`--bf16-shape wants ROWSxCOLS (e.g. 7168x3584), got ${arg("--bf16-shape", "")}`);
const kernels = [
  ...(kernelNames.includes("bf16") ? [bf16Kernel(bf16Shape[0]!, bf16Shape[1]!)] : []),
  ...(kernelNames.includes("mxfp4") ? [mxfp4Kernel(3072, 3584)] : []),
  ...(kernelNames.includes("mxfp4") ? [mxfp4Kernel(3584, 3072, "mxfp4 down")] : []),
  ...(kernelNames.includes("int4") ? [q4Kernel(2048, 7168)] : []),
];

/** Wall seconds and CPU seconds (all threads of the process) of fn. On a machine shared with
 * other work, the rate per CPU-second (÷ threads) still says what a core does when it runs. */
function timed(fn: () => void): { wall: number; cpu: number } {
  const c0 = process.cpuUsage(), t0 = Bun.nanoseconds();
  fn();
  const wall = (Bun.nanoseconds() - t0) / 1e9, c = process.cpuUsage(c0);
  return { wall, cpu: (c.user + c.system) / 1e6 };
}

/** T = 1: GB/s of one pass over the whole set. T > 1: GFLOP/s over ≥ ~2 GFLOP of calls.
 * Returns [rate per wall second, rate per CPU-second × threads]. */
function measure(lib: Lib, kn: Kernel, T: number, threads: number): [number, number] {
  const X = new Float32Array(T * kn.cols).fill(0.01), Y = new Float32Array(T * kn.rows);
  const flopsPerCall = 2 * kn.rows * kn.cols * T;
  const calls = T === 1 ? kn.count : Math.max(2, Math.ceil(2e9 / flopsPerCall));
  kn.call(lib, calls, X, Y, T); // warm (a matrix outside the timed order's start)
  const { wall, cpu } = timed(() => { for (let i = 0; i < calls; i++) kn.call(lib, i, X, Y, T); });
  const work = T === 1 ? kn.bytes * calls : flopsPerCall * calls;
  return [work / wall / 1e9, (work / cpu / 1e9) * threads];
}

function memReadGBs(): { wall: number; cpu: number } {
  const bytes = 2 ** 30;
  const p = k.k3_mem_alloc(bytes, 4096);
  if (!p) throw new Error("k3_mem_alloc(1 GiB) failed");
  k.k3_mem_read_sum(p, bytes);
  const { wall, cpu } = timed(() => k.k3_mem_read_sum(p, bytes));
  k.k3_mem_free(p);
  return { wall: bytes / wall / 1e9, cpu: (bytes / cpu / 1e9) * k.k3_pool_size() };
}

// Every timed value, keyed "isa/threads/what" → one number per round.
const R: Record<string, number[]> = {};
const put = (key: string, x: number) => (R[key] ??= []).push(x);
const loads: string[] = [];
for (let run = 1; run <= RUNS; run++) {
  loads.push(loadAvg());
  say(`round ${run}/${RUNS} (load ${loads.at(-1)})`);
  for (const isa of isas)
    for (const n of threadCounts) {
      const id = isaNames[isa]!;
      k.k3_isa_set(id);
      k.k3_pool_init(n);
      const mem = memReadGBs();
      put(`${isa}/${n}/mem`, mem.wall), put(`${isa}/${n}/mem/cpu`, mem.cpu);
      for (const mode of ["mul+add", "fma"] as const) {
        const p = peakGflops(id, mode, n);
        put(`${isa}/${n}/peak ${mode}`, p.wall), put(`${isa}/${n}/peak ${mode}/cpu`, p.cpu);
      }
      for (const kn of kernels)
        for (const T of Ts)
          for (const lib of run % 2 ? libs : [...libs].reverse()) {
            lib.k.k3_isa_set(id);
            lib.k.k3_pool_init(n);
            const [wall, cpu] = measure(lib, kn, T, n);
            put(`${isa}/${n}/${kn.name}/${T}/${lib.name}`, wall);
            put(`${isa}/${n}/${kn.name}/${T}/${lib.name}/cpu`, cpu);
            lib.k.k3_pool_init(1); // park this library's workers while the other one runs
          }
      k.k3_pool_init(n);
    }
}
loads.push(loadAvg());
for (const lib of libs) lib.k.k3_isa_set(ISA.auto), lib.k.k3_pool_init(1);

const fmt = (xs: number[]) => xs.map((x) => x.toFixed(1)).join(" / ");
const best = (xs: number[] | undefined) => (xs?.length ? Math.max(...xs) : NaN);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const cpu = cpuInfo();
console.log(`CPU: ${cpu.model}; ${navigator.hardwareConcurrency} threads visible; vector flags: ${cpu.vectorFlags.join(" ")}`);
console.log(`${RUNS} rounds, every arm once per round (interleaved); load average (1/5/15 min) at each round start and at the end: ${loads.join(" → ")}`);
console.log(`library: ${process.env.K3_KERNELS ?? "built-in"}${oldPath ? `; old: ${oldPath}` : ""}; weights start ${OFFSET} bytes past a 64-byte line\n`);
console.log("## Machine ceilings (each round; best)\n");
console.log("| ISA | threads | memory read GB/s | peak mul+add GFLOP/s | peak FMA GFLOP/s | mul+add / FMA | per CPU-s × threads: mem / mul+add / FMA (best) |");
console.log("|---|---|---|---|---|---|---|");
for (const isa of isas)
  for (const n of threadCounts) {
    const m = R[`${isa}/${n}/mem`]!, pa = R[`${isa}/${n}/peak mul+add`]!, pf = R[`${isa}/${n}/peak fma`]!;
    const c = ["mem", "peak mul+add", "peak fma"].map((w) => best(R[`${isa}/${n}/${w}/cpu`]).toFixed(1)).join(" / ");
    console.log(`| ${isa} | ${n} | ${fmt(m)} (best ${best(m).toFixed(1)}) | ${fmt(pa)} (best ${best(pa).toFixed(1)}) | ${fmt(pf)} (best ${best(pf).toFixed(1)}) | ${(best(pa) / best(pf)).toFixed(2)} | ${c} |`);
  }
const libCols = libs.map((l) => l.name);
if (Ts.includes(1)) {
  console.log("\n## T = 1 (decode): GB/s of weight bytes from DRAM vs the memory read rate\n");
  console.log(`| kernel | shape | ISA | threads | ${libCols.map((l) => `${l}: each round`).join(" | ")} | best new | best new / median mem |${oldPath ? " new / old (best) |" : ""} per CPU-s × threads: ${libCols.join(" / ")} (best) |`);
  console.log(`|---|---|---|---|${libCols.map(() => "---|").join("")}---|---|${oldPath ? "---|" : ""}---|`);
  for (const kn of kernels)
    for (const isa of isas)
      for (const n of threadCounts) {
        const rs = libs.map((l) => R[`${isa}/${n}/${kn.name}/1/${l.name}`]!);
        const mem = median(R[`${isa}/${n}/mem`]!);
        const cs = libs.map((l) => best(R[`${isa}/${n}/${kn.name}/1/${l.name}/cpu`]).toFixed(1)).join(" / ");
        console.log(`| ${kn.name} | ${kn.rows}×${kn.cols} | ${isa} | ${n} | ${rs.map(fmt).join(" | ")} | ${best(rs[0]).toFixed(1)} | ${(best(rs[0]) / mem).toFixed(2)} |${oldPath ? ` ${(best(rs[0]) / best(rs[1])).toFixed(2)} |` : ""} ${cs} |`);
      }
}
const bigT = Ts.filter((t) => t > 1);
if (bigT.length) {
  console.log("\n## T > 1: GFLOP/s (2 per weight·token) vs the peaks of the same run\n");
  console.log(`| kernel | shape | ISA | threads | T | ${libCols.map((l) => `${l}: each round`).join(" | ")} | best new | / peak mul+add | / peak FMA |${oldPath ? " new / old (best) |" : ""} per CPU-s × threads: ${libCols.join(" / ")} (best) |`);
  console.log(`|---|---|---|---|---|${libCols.map(() => "---|").join("")}---|---|---|${oldPath ? "---|" : ""}---|`);
  for (const kn of kernels)
    for (const isa of isas)
      for (const n of threadCounts)
        for (const T of bigT) {
          const rs = libs.map((l) => R[`${isa}/${n}/${kn.name}/${T}/${l.name}`]!);
          const pa = best(R[`${isa}/${n}/peak mul+add`]), pf = best(R[`${isa}/${n}/peak fma`]);
          const cs = libs.map((l) => best(R[`${isa}/${n}/${kn.name}/${T}/${l.name}/cpu`]).toFixed(1)).join(" / ");
          console.log(`| ${kn.name} | ${kn.rows}×${kn.cols} | ${isa} | ${n} | ${T} | ${rs.map(fmt).join(" | ")} | ${best(rs[0]).toFixed(1)} | ${(best(rs[0]) / pa).toFixed(2)} | ${(best(rs[0]) / pf).toFixed(2)} |${oldPath ? ` ${(best(rs[0]) / best(rs[1])).toFixed(2)} |` : ""} ${cs} |`);
        }
}
if (jsonOut) writeFileAtomic(jsonOut, "the --json output", "USAGE", JSON.stringify({ cpu, loads, runs: RUNS, Ts, threadCounts, isas, libs: libCols, oldPath, results: R }, null, 1));
