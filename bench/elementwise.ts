// Elementwise kernel bench (docs/BENCH-KERNELS.md, "SiTU-GLU and sigmoid"): ns per element of
// k3_situ_glu, k3_sigmoid and k3_mul_sigmoid per ISA path and thread count, for the library under
// test and optionally an older build (--old path.so, loaded in the same process). Rounds are
// interleaved (round r measures every arm once, the arms' order alternating), ≥ 3 rounds; inputs
// are activation-like (|x| mostly < 6, a prefill chunk's sizes), so no lane takes the scalar
// fallback. Every arm's output bits are compared with the scalar path's (and the old library's)
// before any time is kept.
//
//   bun bench/elementwise.ts [--runs 3] [--n 1048576] [--threads 1,2] [--isa scalar,avx2,avx512]
//                            [--old path/libkernels.so]
import { dlopen, FFIType } from "bun:ffi";
import { loadKernels, ISA } from "../src/kernels.ts";
import { cpuInfo, loadAvg } from "./machine.ts";
import { arg } from "./common.ts";

const RUNS = Number(arg("--runs", "3"));
const N = Number(arg("--n", String(1 << 20)));
const threadCounts = arg("--threads", "1,2").split(",").map(Number);
const isaNames: Record<string, number> = { scalar: ISA.scalar, avx2: ISA.avx2, avx512: ISA.avx512, neon: ISA.neon };
const oldPath = arg("--old", "");
const say = (s: string) => process.stderr.write(`[elementwise] ${s}\n`);

const { i32, i64, f32, ptr, void: v } = FFIType;
const symbols = {
  k3_isa_set: { args: [i32], returns: i32 },
  k3_isa_supported: { args: [i32], returns: i32 },
  k3_pool_init: { args: [i32], returns: i32 },
  k3_sigmoid: { args: [ptr, i64], returns: v },
  k3_mul_sigmoid: { args: [ptr, ptr, i64], returns: v },
  k3_situ_glu: { args: [ptr, ptr, ptr, i64, f32, f32], returns: v },
} as const;
type Lib = { name: string; k: Pick<ReturnType<typeof loadKernels>, keyof typeof symbols> };
const k = loadKernels();
const libs: Lib[] = [{ name: "new", k }];
if (oldPath) libs.push({ name: "old", k: dlopen(oldPath, symbols).symbols as unknown as Lib["k"] });
const isas = arg("--isa", "scalar,avx2,avx512,neon").split(",").filter((n) => k.k3_isa_supported(isaNames[n] ?? -9) === 1);

// Activation-like inputs: a smooth mix of scales (SiTU-GLU's g and u in the slice are within ±8).
const g = new Float32Array(N), u = new Float32Array(N), out = new Float32Array(N), x = new Float32Array(N);
for (let i = 0; i < N; i++) { g[i] = 6 * Math.sin(i * 0.37) * Math.cos(i * 0.011); u[i] = 4 * Math.cos(i * 0.23); }
// sigmoid and mul_sigmoid work in place: x is reset before each arm's timed calls (not timed);
// five more sigmoids of x stay in (0, 1), five more products by sigmoid(g) far above subnormals.
const ops: Record<string, { reset: () => void; run: (l: Lib) => Float32Array }> = {
  situ_glu: { reset: () => {}, run: (l) => { l.k.k3_situ_glu(g, u, out, N, 8, 8); return out; } },
  sigmoid: { reset: () => x.set(g), run: (l) => { l.k.k3_sigmoid(x, N); return x; } },
  mul_sigmoid: { reset: () => x.set(u), run: (l) => { l.k.k3_mul_sigmoid(x, g, N); return x; } },
};

// Bits first: every arm, ISA and thread count gives the scalar path's output.
const ref: Record<string, string> = {};
for (const [name, op] of Object.entries(ops)) {
  k.k3_isa_set(ISA.scalar), k.k3_pool_init(1);
  op.reset();
  ref[name] = Bun.hash(op.run(libs[0]!)).toString(16);
  for (const l of libs) for (const isa of isas) for (const n of threadCounts) {
    l.k.k3_isa_set(isaNames[isa]!), l.k.k3_pool_init(n);
    op.reset();
    const h = Bun.hash(op.run(l)).toString(16);
    if (h !== ref[name]) throw new Error(`${name}: ${l.name} ${isa} ${n} threads gives other bits (${h} vs scalar ${ref[name]})`);
    l.k.k3_pool_init(1);
  }
}

const R: Record<string, number[]> = {};
const loads: string[] = [];
for (let run = 1; run <= RUNS; run++) {
  loads.push(loadAvg());
  say(`round ${run}/${RUNS} (load ${loads.at(-1)})`);
  for (const isa of isas) for (const n of threadCounts) for (const [name, op] of Object.entries(ops))
    for (const l of run % 2 ? libs : [...libs].reverse()) {
      l.k.k3_isa_set(isaNames[isa]!), l.k.k3_pool_init(n);
      op.reset();
      op.run(l);
      let bestNs = Infinity;
      for (let rep = 0; rep < 5; rep++) {
        const t = Bun.nanoseconds();
        op.run(l);
        bestNs = Math.min(bestNs, Bun.nanoseconds() - t);
      }
      (R[`${isa}/${n}/${name}/${l.name}`] ??= []).push(bestNs / N);
      l.k.k3_pool_init(1); // park this library's workers while the other one runs
    }
}
loads.push(loadAvg());
for (const l of libs) l.k.k3_isa_set(ISA.auto);

const best = (xs: number[]) => Math.min(...xs);
const cpu = cpuInfo();
console.log(`CPU: ${cpu.model}; vector flags: ${cpu.vectorFlags.join(" ")}`);
console.log(`${RUNS} rounds of best-of-5, n = ${N}; load (1/5/15 min) at each round start and at the end: ${loads.join(" → ")}`);
console.log(`library: ${process.env.K3_KERNELS ?? "built-in"}${oldPath ? `; old: ${oldPath}` : ""}; output bits = the scalar path's in every arm\n`);
const cols = libs.map((l) => l.name);
console.log(`| kernel | ISA | threads | ${cols.map((c) => `${c} ns/element, each round`).join(" | ")} | best new |${oldPath ? " old / new (best) |" : ""} scalar / this (new, best) |`);
console.log(`|---|---|---|${cols.map(() => "---|").join("")}---|${oldPath ? "---|" : ""}---|`);
for (const name of Object.keys(ops)) for (const isa of isas) for (const n of threadCounts) {
  const rs = cols.map((c) => R[`${isa}/${n}/${name}/${c}`]!);
  const sc = best(R[`scalar/${n}/${name}/new`] ?? [NaN]);
  console.log(`| ${name} | ${isa} | ${n} | ${rs.map((r) => r.map((x) => x.toFixed(2)).join(" / ")).join(" | ")} | ${best(rs[0]!).toFixed(2)} |${oldPath ? ` ${(best(rs[1]!) / best(rs[0]!)).toFixed(2)} |` : ""} ${(sc / best(rs[0]!)).toFixed(2)} |`);
}
