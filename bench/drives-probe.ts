// One emulated drive measured the way the engine reads it (bench/drives.ts runs this in the arms'
// cgroup, so the drive's cap applies): expert-size reads at random offsets and trunk-size reads in
// sequence, at the engine's depth (src/memory/disk-probe.ts); and, with `lateness`, how far the
// router's prediction of a read's finish (src/memory/drive.ts: bytes queued there ÷ the rate it
// has been reading at) is from when it really finished, for reads issued a layer at a time: the
// margin a read must exceed before it counts as late (reader.ts DEFAULT_HEDGE_AFTER).
//
//   bun bench/drives-probe.ts '{"files":[…],"expertBytes":N,"trunkBytes":N,"depth":4,"seconds":3,"lateness":true}'
import { loadKernels } from "../src/kernels.ts";
import { probeReadRate } from "../src/memory/disk-probe.ts";
import { Drive } from "../src/memory/drive.ts";
import { ALIGN } from "../src/memory/readplan.ts";

interface Spec {
  files: { file: string; bytes: number }[];
  expertBytes: number;
  trunkBytes: number[];
  depth: number;
  seconds: number;
  lateness?: boolean;
}

const spec = JSON.parse(process.argv[2]!) as Spec;
const k = loadKernels();
const seed = Date.now() >>> 0;
const expert = probeReadRate(k, spec.files, { readBytes: spec.expertBytes, depth: spec.depth, pattern: "random", seconds: spec.seconds, warmupSeconds: 1, direct: true, seed });
const trunk = spec.trunkBytes.map((b, i) => probeReadRate(k, spec.files, { readBytes: b, depth: spec.depth, pattern: "sequential", seconds: spec.seconds, warmupSeconds: 1, direct: true, seed: seed + 17 * (i + 1) }));

/** Ratio actual ÷ predicted time for reads issued 16 at a time (a layer's experts), on a Drive. */
function lateness(): { reads: number; p50: number; p90: number; p99: number; max: number } {
  const drive = new Drive(k, { key: "probe", name: "probe", rotational: false }, spec.depth, true, "O_DIRECT");
  const len = Math.ceil(spec.expertBytes / ALIGN) * ALIGN;
  const big = spec.files.filter((f) => f.bytes >= len);
  const fds = big.map((f) => k.k3_file_open(f.file, 1));
  const bufs = Array.from({ length: 16 }, () => k.k3_mem_alloc(len, ALIGN)!);
  const ratios: number[] = [];
  let x = seed;
  const rnd = () => (x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  const tickets = new BigInt64Array(16);
  const t0 = performance.now();
  // Two bursts to measure the rate, then at least eight (or `seconds`) that count.
  for (let burst = 0; burst < 10 || (performance.now() - t0) / 1000 < spec.seconds; burst++) {
    const sent: { t: number; predicted: number; at: number }[] = [];
    for (let i = 0; i < 16; i++) {
      const f = Math.floor(rnd() * big.length);
      const off = Math.floor((rnd() * (big[f]!.bytes - len)) / ALIGN) * ALIGN;
      const predicted = drive.predictMs(len);
      const t = Number(k.k3_io_submit_to(drive.queue, fds[f]!, bufs[i]!, len, off, len));
      sent.push({ t, predicted, at: performance.now() });
      tickets[i] = BigInt(t);
    }
    for (let left = 16; left > 0; left--) {
      const i = k.k3_io_wait_any(tickets, 16);
      const now = performance.now();
      k.k3_io_wait(sent[i]!.t);
      tickets[i] = 0n;
      // The first bursts run on the prior rate: only measured predictions count.
      if (burst >= 2) ratios.push((now - sent[i]!.at) / sent[i]!.predicted);
    }
  }
  drive.close();
  for (const fd of fds) k.k3_file_close(fd);
  for (const b of bufs) k.k3_mem_free(b);
  ratios.sort((a, b) => a - b);
  const q = (p: number) => ratios[Math.min(ratios.length - 1, Math.floor(p * ratios.length))] ?? NaN;
  return { reads: ratios.length, p50: q(0.5), p90: q(0.9), p99: q(0.99), max: ratios.at(-1) ?? NaN };
}

process.stdout.write(`${JSON.stringify({ expert, trunk, lateness: spec.lateness ? lateness() : undefined })}\n`);
