// `npm run bench:drives` (root only): a model on 1, 2 and 3 emulated drives (issue 26). Drives are
// loop devices over sparse files on this machine's disk, each capped to a read rate with the
// block I/O controller for the arms' cgroup (bench/drives-setup.ts); everything is set up and torn
// down here. docs/BENCH.md "Several drives" says what each number means.
//
//   bun bench/drives.ts [--rate MB/s] [--slow MB/s] [--tokens N] [--rounds N] [--seconds S] [--no-docs]
//
// Arms (each `k3 run --json` in its own process, in the cgroup; rounds interleave the arms):
//   1 drive                      the model on drive1
//   2 / 3 drives, mirrored       drive1 + full copies on drive2 (and drive3): --mirror
//   2 / 3 drives, split          the shards alternated over the drives, joined by symlinks
//   fast + slow mirror           drive1 at the rate, a copy on drive2 at --slow
// Measured: decode bytes/s (bytes read per decoded token ÷ s/token), per device its rate while
// busy and busy fraction (the engine's own counters), and a probe of each drive at the engine's
// request sizes and depth (bench/drives-probe.ts) with the router's prediction error (lateness).
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { floorBytes, planInputFromCensus } from "../src/memory/plan.ts";
import { HEDGE_BUFFERS } from "../src/memory/reader.ts";
import { MIRRORED_READ_BYTES, streamSlots, TRUNK_READ_BYTES } from "../src/memory/slots.ts";
import { ROOT, updateDocSection, writeReport } from "./common.ts";
import { createDrives, emulationProblem, openThrottle, teardown, type EmulatedDrive, type Throttle } from "./drives-setup.ts";
import { renderDrives, summarizeDrives, type ArmRun, type DrivesReport, type ProbeRun } from "./drives-report.ts";

const BUN = process.execPath;
const K3 = join(ROOT, "dist/k3");
const MB = 1e6;
const say = (s: string) => process.stderr.write(`[drives] ${s}\n`);

export interface DrivesArgs {
  rate: number; // bytes/s of each equal drive
  slow: number; // bytes/s of the slow drive
  tokens: number;
  rounds: number;
  seconds: number;
  docs: boolean;
}

function parseArgs(argv: string[]): DrivesArgs {
  const a: DrivesArgs = { rate: 300 * MB, slow: 75 * MB, tokens: 4, rounds: 2, seconds: 3, docs: true };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const num = () => {
      const v = Number(argv[++i]);
      if (!(v > 0)) throw new Error(`${flag} needs a positive number`);
      return v;
    };
    if (flag === "--rate") a.rate = num() * MB;
    else if (flag === "--slow") a.slow = num() * MB;
    else if (flag === "--tokens") a.tokens = Math.round(num());
    else if (flag === "--rounds") a.rounds = Math.round(num());
    else if (flag === "--seconds") a.seconds = num();
    else if (flag === "--no-docs") a.docs = false;
    else throw new Error(`unknown argument ${flag} (usage: bench/drives.ts [--rate MB/s] [--slow MB/s] [--tokens N] [--rounds N] [--seconds S] [--no-docs])`);
  }
  return a;
}

export interface ArmSpec {
  name: string;
  model: string;
  mirrors: string[];
  rates: number[]; // per drive (bytes/s)
}

/** The bench model on drive1 (the slice's real widths; 3 layers, 16 experts: ~3.9 GB), copied to
 *  the other drives with its times kept, and the split folders of symlinks. */
async function makeModels(drives: EmulatedDrive[], work: string): Promise<{ copies: string[]; split2: string; split3: string }> {
  const copies = drives.map((d) => join(d.mount, "model"));
  say("generating the bench model on drive1 (slice widths, 3 layers, 16 experts, vocab 8192, dense FFN 3072)…");
  const gen = Bun.spawn([BUN, join(ROOT, "tools/gen/generate.ts"), "--preset", "slice", "--layers", "3", "--experts", "16", "--vocab", "8192", "--dense-inter", "3072", "--out", copies[0]!], { stdout: "inherit", stderr: "inherit" });
  if ((await gen.exited) !== 0) throw new Error("generating the bench model failed");
  for (const c of copies.slice(1)) execFileSync("cp", ["-a", copies[0]!, c]);
  const split = (n: number) => {
    const dir = join(work, `split${n}`);
    mkdirSync(dir);
    let shard = 0; // shard i (in name order: layer i, then the head, then the stubs) on drive i mod n
    for (const f of readdirSync(copies[0]!).sort()) {
      if (f.endsWith(".safetensors")) symlinkSync(join(copies[shard++ % n]!, f), join(dir, f));
      else if (!f.startsWith("k3-")) copyFileSync(join(copies[0]!, f), join(dir, f));
    }
    return dir;
  };
  const out = { copies, split2: split(2), split3: split(3) };
  execFileSync("sync");
  return out;
}

/** Run `cmd` inside the bench's cgroup (the drives' caps apply to it); stdout. */
function inCgroup(throttle: Throttle, cmd: string[], timeoutMs: number): { code: number; out: string; err: string; wallMs: number } {
  const t0 = performance.now();
  const p = Bun.spawnSync(["sh", "-c", `echo $$ > ${throttle.procs} && exec "$@"`, "sh", ...cmd], { stdin: "ignore", timeout: timeoutMs });
  return { code: p.exitCode ?? -1, out: p.stdout.toString(), err: p.stderr.toString().slice(-2000), wallMs: performance.now() - t0 };
}

function runArm(spec: ArmSpec, drives: EmulatedDrive[], throttle: Throttle, budget: number, args: DrivesArgs, round: number): ArmRun {
  drives.forEach((d, i) => throttle.set(d, spec.rates[i] ?? args.rate));
  const loadavg = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).map(Number);
  const cmd = [K3, "run", spec.model, "--ids", "5,17,300,42", "--gen", String(args.tokens), "--ram", String(budget), "--threads", "2", "--json", ...spec.mirrors.flatMap((m) => ["--mirror", m])];
  const r = inCgroup(throttle, cmd, 20 * 60_000);
  if (r.code !== 0) return { arm: spec.name, round, ok: false, error: `exit ${r.code}: ${r.err}`, loadavg, wallMs: r.wallMs };
  const j = JSON.parse(r.out);
  return { arm: spec.name, round, ok: true, ids: j.generated_ids, stats: j.stats, loadavg, wallMs: r.wallMs };
}

function runProbe(drive: EmulatedDrive, rate: number, drives: EmulatedDrive[], throttle: Throttle, expertBytes: number, args: DrivesArgs, round: number): ProbeRun {
  throttle.set(drive, rate);
  const dir = join(drive.mount, "model");
  const files = readdirSync(dir).filter((f) => f.endsWith(".safetensors")).map((f) => ({ file: join(dir, f), bytes: Bun.file(join(dir, f)).size }));
  const spec = { files, expertBytes, trunkBytes: [MIRRORED_READ_BYTES, TRUNK_READ_BYTES], depth: 4, seconds: args.seconds, lateness: drive === drives[0] };
  const r = inCgroup(throttle, [BUN, join(ROOT, "bench/drives-probe.ts"), JSON.stringify(spec)], 10 * 60_000);
  if (r.code !== 0) throw new Error(`probe of ${drive.name} failed: ${r.err}`);
  return { drive: drive.name, loop: drive.loop, capBytesPerSecond: rate, round, ...JSON.parse(r.out) };
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const problem = emulationProblem();
  if (problem) {
    say(`cannot emulate drives on this machine: ${problem}`);
    process.exit(2);
  }
  if (!existsSync(K3)) throw new Error("dist/k3 is missing: npm run build first");
  const work = join(ROOT, "models", "drives-bench");
  if (existsSync(work)) throw new Error(`${work} exists (a run that did not clean up?): check \`losetup -a\` and mounts under it, then remove it`);
  mkdirSync(work, { recursive: true });
  const drives: EmulatedDrive[] = [];
  let throttle: Throttle | undefined;
  const cleanup = () => {
    teardown(drives, throttle, say);
    rmSync(work, { recursive: true, force: true });
  };
  process.on("exit", cleanup);
  for (const sig of ["SIGINT", "SIGTERM"] as const) process.on(sig, () => process.exit(130));
  try {
    await bench(args, work, drives, (t) => (throttle = t));
  } finally {
    cleanup();
  }
}

async function bench(args: DrivesArgs, work: string, drives: EmulatedDrive[], setThrottle: (t: Throttle) => void): Promise<void> {
  createDrives(work, 3, 6 * 2 ** 30, drives);
  const throttle = openThrottle(`k3-drives-${process.pid}`);
  setThrottle(throttle);
  const m = await makeModels(drives, work);
  const ck = openCheckpoint(m.copies[0]!);
  // A streaming budget: the floor of a mirrored engine (hedge buffers included), every arm alike.
  const input = planInputFromCensus(ck.config, ck.layout.census, 0, 4096, 2, undefined, streamSlots(ck));
  input.hedgeBuffers = HEDGE_BUFFERS;
  const budget = floorBytes(input) + 64 * 2 ** 20;
  const { rate: R, slow: S } = args;
  const arms: ArmSpec[] = [
    { name: "1 drive", model: m.copies[0]!, mirrors: [], rates: [R, R, R] },
    { name: "2 drives, mirrored", model: m.copies[0]!, mirrors: [m.copies[1]!], rates: [R, R, R] },
    { name: "3 drives, mirrored", model: m.copies[0]!, mirrors: [m.copies[1]!, m.copies[2]!], rates: [R, R, R] },
    { name: "2 drives, split", model: m.split2, mirrors: [], rates: [R, R, R] },
    { name: "3 drives, split", model: m.split3, mirrors: [], rates: [R, R, R] },
    { name: "fast + slow mirror", model: m.copies[0]!, mirrors: [m.copies[1]!], rates: [R, S, R] },
  ];
  const runs: ArmRun[] = [];
  const probes: ProbeRun[] = [];
  for (let round = 1; round <= args.rounds; round++) {
    // Rotate the order each round, so drift hits every arm alike.
    const order = arms.map((_, i) => arms[(i + round - 1) % arms.length]!);
    for (const d of drives) probes.push(runProbe(d, R, drives, throttle, ck.layout.experts.bytes, args, round));
    probes.push({ ...runProbe(drives[1]!, S, drives, throttle, ck.layout.experts.bytes, args, round), drive: `${drives[1]!.name} (slow)` });
    for (const a of order) {
      say(`round ${round}: ${a.name}…`);
      const r = runArm(a, drives, throttle, budget, args, round);
      say(r.ok ? `  ${(r.stats.bytes_read_per_token / (r.stats.ms_per_token / 1000) / 1e6).toFixed(0)} MB/s decode, ${r.stats.ms_per_token.toFixed(0)} ms/token` : `  failed: ${r.error}`);
      runs.push(r);
    }
  }
  const report: DrivesReport = {
    when: new Date().toISOString(),
    how: { throttle: throttle.kind, drives: drives.map((d) => ({ name: d.name, loop: d.loop, majMin: d.majMin })), image: "sparse file on this machine's disk, loop device, ext4", rateBytesPerSecond: R, slowBytesPerSecond: S, budgetBytes: budget, tokens: args.tokens, rounds: args.rounds, model: "slice widths, 3 layers, 16 experts, vocab 8192, dense FFN 3072" },
    arms: arms.map((a) => a.name),
    runs,
    probes,
    summary: summarizeDrives(runs, probes),
  };
  const md = renderDrives(report);
  const stamp = report.when.replace(/[:.]/g, "-");
  writeReport("drives", stamp, report, md, say);
  if (args.docs) updateDocSection("docs/BENCH.md", "drives-bench", md, say);
}

if (import.meta.main) await main();
