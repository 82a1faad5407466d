// Read-probe A/B (docs/BENCH-KERNELS.md, "Issue 23, round five"): the GB/s of k3_mem_read_sum over
// one 1 GiB buffer, for several builds of the kernel library loaded side by side in one process,
// interleaved: round r runs every arm once (the order reversed every other round), so drift and
// other users hit every arm alike. Each arm's own thread pool has the same size; the arms not
// running are parked at one thread. Every arm must return the same sum (checked each pass).
//
//   bun bench/read-probe.ts [--libs new=zig-out/lib/libkernels.so,old=bench/out/old/libkernels.so]
//                           [--rounds 12] [--threads 2] [--mib 1024] [--json out.json]
// Build the "old" arm from a checkout of the commit to compare: `npm run build:kernels` there, then
// copy its zig-out/lib/libkernels.so to bench/out/old/. Time it with nothing else running.
import { dlopen, toArrayBuffer } from "bun:ffi";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { symbols } from "../src/kernels.ts";
import { writeFileAtomic, writeTarget } from "../src/files.ts";
import { cpuInfo, loadAvg } from "./machine.ts";
import { arg, median, ROOT } from "./common.ts";

const ROUNDS = Number(arg("--rounds", "12"));
const THREADS = Number(arg("--threads", String(navigator.hardwareConcurrency)));
const BYTES = Number(arg("--mib", "1024")) * 2 ** 20;
const jsonOut = arg("--json", "");
if (jsonOut) writeTarget(jsonOut, "the --json output", "USAGE");
const libSpec = arg("--libs", "new=zig-out/lib/libkernels.so,old=bench/out/old/libkernels.so");
const say = (s: string) => process.stderr.write(`[read-probe] ${s}\n`);

const wanted = { k3_pool_init: symbols.k3_pool_init, k3_mem_alloc: symbols.k3_mem_alloc, k3_mem_free: symbols.k3_mem_free, k3_mem_read_sum: symbols.k3_mem_read_sum } as const;
const arms = libSpec.split(",").map((s) => {
  const [name, path] = s.split("=") as [string, string | undefined];
  const file = resolve(ROOT, path ?? "");
  if (!path || !existsSync(file)) {
    process.stderr.write(`--libs: arm "${name}" names ${path ? file : "no library"}; want name=path.so for each arm\n`);
    process.exit(2);
  }
  return { name, file, k: dlopen(file, wanted).symbols, gbs: [] as number[] };
});

// One buffer for every arm, allocated by the first, filled with a pattern so the sum checks something.
const buf = arms[0]!.k.k3_mem_alloc(BYTES, 4096);
if (!buf) throw new Error(`k3_mem_alloc(${BYTES}) failed`);
const words = new Uint32Array(toArrayBuffer(buf, 0, BYTES));
for (let i = 0; i < words.length; i++) words[i] = Math.imul(i, 2654435761) >>> 0;
let want: bigint | undefined;
for (const a of arms) {
  a.k.k3_pool_init(THREADS);
  const s = a.k.k3_mem_read_sum(buf, BYTES) as bigint; // warm: first touch of this arm's pool and code
  if (want !== undefined && s !== want) throw new Error(`arm ${a.name}: sum ${s}, first arm ${want}`);
  want = s;
  a.k.k3_pool_init(1);
}

const loads: string[] = [];
for (let r = 1; r <= ROUNDS; r++) {
  loads.push(loadAvg());
  for (const a of r % 2 ? arms : [...arms].reverse()) {
    a.k.k3_pool_init(THREADS);
    const t0 = Bun.nanoseconds();
    const s = a.k.k3_mem_read_sum(buf, BYTES) as bigint;
    a.gbs.push(BYTES / ((Bun.nanoseconds() - t0) / 1e9) / 1e9);
    if (s !== want) throw new Error(`arm ${a.name}, round ${r}: sum ${s}, want ${want}`);
    a.k.k3_pool_init(1);
  }
  say(`round ${r}/${ROUNDS}: ${arms.map((a) => `${a.name} ${a.gbs.at(-1)!.toFixed(1)}`).join(", ")}`);
}
loads.push(loadAvg());
arms[0]!.k.k3_mem_free(buf);

const cpu = cpuInfo();
console.log(`CPU: ${cpu.model}; ${THREADS} threads; ${BYTES / 2 ** 20} MiB buffer; ${ROUNDS} rounds, every arm once per round; sum ${want} in every pass`);
console.log(`load average (1/5/15 min) at the first round's start and at the end: ${loads[0]} → ${loads.at(-1)}\n`);
const first = arms[0]!.name;
console.log(`| arm | library | best GB/s | median GB/s | min GB/s | best / ${first} | median / ${first} | median of the rounds' ${first}-paired ratios |\n|---|---|---|---|---|---|---|---|`);
const b0 = Math.max(...arms[0]!.gbs), m0 = median(arms[0]!.gbs);
for (const a of arms) {
  const b = Math.max(...a.gbs), m = median(a.gbs);
  const paired = median(a.gbs.map((x, r) => x / arms[0]!.gbs[r]!));
  console.log(`| ${a.name} | ${a.file.replace(`${ROOT}/`, "")} | ${b.toFixed(1)} | ${m.toFixed(1)} | ${Math.min(...a.gbs).toFixed(1)} | ${(b / b0).toFixed(2)} | ${(m / m0).toFixed(2)} | ${paired.toFixed(3)} |`);
}
console.log(`\neach pass, GB/s: ${arms.map((a) => `${a.name}: ${a.gbs.map((x) => x.toFixed(1)).join(" ")}`).join("; ")}`);
if (jsonOut) writeFileAtomic(jsonOut, "the --json output", "USAGE", JSON.stringify({ cpu, threads: THREADS, bytes: BYTES, rounds: ROUNDS, loads, arms: arms.map(({ name, file, gbs }) => ({ name, file, gbs })) }, null, 1));
