// Proof that the vector paths of expf, tanhf and sigmoid (kernels/k3_math_vec.h: AVX-512, AVX2)
// give the scalar functions' bits (kernels/k3_math.c) for every float input: runs all 2^32 bit
// patterns (NaN payloads, subnormals and ±inf included) through k3_expf_n, k3_tanhf_n and
// k3_sigmoid on the scalar path and on each vector ISA this host has, and counts the inputs whose
// output bits differ (must be 0). The result, command and time are in docs/NUMERICS.md §1.1.
//
//   bun tools/libm-vector-check.ts [--step 1] [--threads 2] [--isa avx512,avx2] [--fn expf,tanhf,sigmoid]
//
// --step S checks every S-th bit pattern only (a quick look; the proof is --step 1). Exit 1 on
// any mismatch, with the first few listed.
import { parseArgs } from "node:util";
import { ISA, loadKernels } from "../src/kernels.ts";

/** A usage error: one line naming the option, exit 2 (no stack trace). */
function fail(msg: string): never {
  console.error(`libm-vector-check: ${msg}`);
  process.exit(2);
}
let values: { step?: string; threads?: string; isa?: string; fn?: string };
try {
  ({ values } = parseArgs({
    options: {
      step: { type: "string", default: "1" }, threads: { type: "string", default: "2" },
      isa: { type: "string", default: "" }, fn: { type: "string", default: "expf,tanhf,sigmoid" },
    },
  }));
} catch (e) {
  fail((e as Error).message);
}
const step = Number(values.step), threads = Number(values.threads);
if (!Number.isInteger(threads) || threads < 1) fail(`--threads: want a positive integer, got ${values.threads}`);
if (!Number.isInteger(step) || step < 1) fail(`--step: want a positive integer, got ${values.step}`);
const k = loadKernels();
const names: Record<string, number> = { avx512: ISA.avx512, avx2: ISA.avx2 };
const wanted = values.isa ? values.isa.split(",") : Object.keys(names);
for (const n of wanted) if (!(n in names)) fail(`--isa: unknown ISA ${n} (want avx512, avx2)`);
const isas = wanted.filter((n) => k.k3_isa_supported(names[n]!) === 1);
if (isas.length === 0) fail(`this host runs none of ${wanted.join(", ")}`);
k.k3_pool_init(threads);

const allFns: Record<string, (x: Float32Array) => void> = {
  expf: (x) => k.k3_expf_n(x, x.length),
  tanhf: (x) => k.k3_tanhf_n(x, x.length),
  sigmoid: (x) => k.k3_sigmoid(x, x.length),
};
const fns: typeof allFns = {};
for (const f of values.fn!.split(",")) {
  if (!(f in allFns)) fail(`--fn: unknown function ${f} (want expf, tanhf, sigmoid)`);
  fns[f] = allFns[f]!;
}
const CHUNK = 1 << 22;
const total = Math.ceil(2 ** 32 / step);
const bad: Record<string, number> = {};
const firsts: string[] = [];
const input = new Uint32Array(CHUNK);
const t0 = performance.now();
for (let done = 0; done < total; done += CHUNK) {
  const m = Math.min(CHUNK, total - done);
  for (let i = 0; i < m; i++) input[i] = ((done + i) * step) >>> 0;
  const x = new Float32Array(input.buffer, 0, m);
  for (const [fn, run] of Object.entries(fns)) {
    k.k3_isa_set(ISA.scalar);
    const want = x.slice();
    run(want);
    const wantBits = new Uint32Array(want.buffer);
    for (const isa of isas) {
      k.k3_isa_set(names[isa]!);
      const got = x.slice();
      run(got);
      if (Buffer.from(got.buffer).equals(Buffer.from(want.buffer))) continue;
      const gotBits = new Uint32Array(got.buffer);
      for (let i = 0; i < m; i++) {
        if (gotBits[i] === wantBits[i]) continue;
        const key = `${isa} ${fn}`;
        bad[key] = (bad[key] ?? 0) + 1;
        if (firsts.length < 20) firsts.push(`${key}(0x${input[i]!.toString(16)}): vector 0x${gotBits[i]!.toString(16)}, scalar 0x${wantBits[i]!.toString(16)}`);
      }
    }
  }
  if ((done / CHUNK) % 64 === 63) console.error(`${((done + m) / total * 100).toFixed(0)} % (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
}
k.k3_isa_set(ISA.auto);
const secs = ((performance.now() - t0) / 1000).toFixed(0);
console.log(`${total} inputs (every ${step}. bit pattern), ISAs ${isas.join(", ")}, ${threads} threads, ${secs} s`);
for (const isa of isas) for (const fn of Object.keys(fns)) console.log(`${isa} ${fn}: ${bad[`${isa} ${fn}`] ?? 0} mismatches`);
for (const f of firsts) console.log(`  ${f}`);
process.exit(Object.keys(bad).length ? 1 : 0);
