// A model on more than one drive (issue 26): shards split over folders by symlinks, a Hugging
// Face cache whose blobs live on two drives, and mirrors (`--mirror`) give the ids of the plain
// folder; per-device counters add up to the engine's; a failing or silent drive is an error naming
// the file, or (with a mirror) a retry or a move to the other copy that the stats show.
//
// One disk here, so the "devices" are injected: EngineOptions.deviceOf names the device of each
// file from the folder its bytes are in (after symlinks). The routing, queues and counters are
// the real ones; only the grouping is the test's.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, symlinkSync, truncateSync, utimesSync } from "node:fs";
import { join } from "node:path";
import { toArrayBuffer } from "bun:ffi";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { Engine, type EngineOptions } from "../src/engine.ts";
import { loadKernels } from "../src/kernels.ts";
import { CBuffers } from "../src/model/cmem.ts";
import { findMirrorCopies } from "../src/memory/mirrors.ts";
import { ShardReader } from "../src/memory/reader.ts";
import { expertReadPlan, expertSlotBytes } from "../src/memory/slots.ts";
import type { WeightStats } from "../src/model/weights.ts";
import { statsJson, statsLine } from "../src/report.ts";
import { streamingBudget } from "./helpers/budgets.ts";
import { compiledK3, STACK_FRAME } from "./helpers/k3-binary.ts";
import { flipByte, scratchDir, tinyModel } from "./helpers/models.ts";

setDefaultTimeout(120_000);
const k = loadKernels();
const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250];
const GEN = 8;
let plain = "";
let budget = "";
let want: number[] = [];

const isShard = (f: string) => f.endsWith(".safetensors");

/** The device of a file: the name of the scratch folder ("drive-a", …) its bytes are in. */
const deviceOf = (file: string) => /\/(drive-[a-z])(-[^/]*)?\//.exec(file)?.[1] ?? "model";

function generate(dir: string, opts: EngineOptions): { ids: number[]; stats: WeightStats; engine: WeightStats } {
  const e = Engine.open(dir, { threads: 1, ram: budget, deviceOf, ...opts });
  try {
    const ids: number[] = [];
    for (const t of e.generate(e.createSession(), PROMPT, { maxTokens: GEN })) ids.push(t.id);
    return { ids, stats: e.stats(), engine: e.stats() };
  } finally {
    e.close();
  }
}

/** Σ over devices equals the engine's own counters (payload bytes and reads, second reads included). */
function expectDevicesAddUp(s: WeightStats): void {
  const sum = (f: (d: WeightStats["devices"][number]) => number) => s.devices.reduce((a, d) => a + f(d), 0);
  expect(sum((d) => d.bytesRead)).toBe(s.trunkBytesRead + s.expertBytesRead + s.extraBytesRead);
  expect(sum((d) => d.reads)).toBe(s.reads + s.extraReads);
  expect(sum((d) => d.hedgesWon)).toBe(s.hedgesWon);
  expect(sum((d) => d.retries)).toBe(s.retries);
}

/** A copy of a shard that keeps its modification time (what cp -p does). */
function copyKeepingTime(from: string, to: string): void {
  copyFileSync(from, to);
  const st = statSync(from);
  utimesSync(to, st.atime, st.mtime);
}

/** `plain` split over drive-a and drive-b (alternate shards), joined by a folder of symlinks. */
function splitModel(name: string): { model: string; a: string; b: string } {
  const root = realpathSync(scratchDir(name));
  const [model, a, b] = ["model", "drive-a", "drive-b"].map((d) => join(root, d));
  for (const d of [model, a, b]) mkdirSync(d!);
  readdirSync(plain).forEach((f, i) => {
    if (!isShard(f)) return copyFileSync(join(plain, f), join(model!, f));
    const drive = i % 2 ? a! : b!;
    copyKeepingTime(join(plain, f), join(drive, f));
    symlinkSync(join(drive, f), join(model!, f));
  });
  return { model: model!, a: a!, b: b! };
}

/** A folder holding copies of every shard of `plain` (times kept), on "drive-b". */
function mirrorOf(name: string): string {
  const dir = join(realpathSync(scratchDir(name)), "drive-b");
  mkdirSync(dir);
  for (const f of readdirSync(plain).filter(isShard)) copyKeepingTime(join(plain, f), join(dir, f));
  return dir;
}

beforeAll(async () => {
  const src = await tinyModel("tiny-a");
  // The plain model lives on "drive-a" too, so its own reads are named (not "model").
  plain = join(realpathSync(scratchDir("plain")), "drive-a");
  mkdirSync(plain);
  for (const f of readdirSync(src)) copyKeepingTime(join(src, f), join(plain, f));
  // The floor plus the hedge buffers a mirrored engine holds: every plan streams.
  const ck = openCheckpoint(plain);
  budget = String(streamingBudget(plain) + 2 * expertSlotBytes(ck));
  want = generate(plain, {}).ids;
});

describe("shards on several drives", () => {
  test("split over two folders by symlinks: the plain folder's ids; each drive reads its own shards; the counters add up", () => {
    const { model } = splitModel("split");
    const got = generate(model, {});
    expect(got.ids).toEqual(want);
    expect(got.stats.devices.map((d) => d.name).sort()).toEqual(["drive-a", "drive-b"]);
    for (const d of got.stats.devices) expect(d.bytesRead).toBeGreaterThan(0);
    expect(got.stats.devices.map((d) => d.files).reduce((a, b) => a + b)).toBe(readdirSync(plain).filter(isShard).length);
    expectDevicesAddUp(got.stats);
  });

  test("a Hugging Face cache whose blobs are on two drives (snapshot → blobs → another drive): the plain folder's ids", () => {
    const root = realpathSync(scratchDir("hf-two"));
    const repo = join(root, "models--moonshotai--Kimi-K3");
    const snap = join(repo, "snapshots", "0123456789abcdef0123456789abcdef01234567");
    const far = join(root, "drive-b");
    for (const d of [join(repo, "blobs"), snap, far]) mkdirSync(d, { recursive: true });
    readdirSync(plain).forEach((f, i) => {
      const blob = join(repo, "blobs", `blob${i}`);
      if (isShard(f) && i % 2) {
        // This blob was moved to another drive and linked back.
        copyKeepingTime(join(plain, f), join(far, `blob${i}`));
        symlinkSync(join(far, `blob${i}`), blob);
      } else copyKeepingTime(join(plain, f), blob);
      symlinkSync(join("..", "..", "blobs", `blob${i}`), join(snap, f));
    });
    const got = generate(repo, {});
    expect(got.ids).toEqual(want);
    expect(got.stats.devices.map((d) => d.name).sort()).toEqual(["drive-b", "model"]);
    expectDevicesAddUp(got.stats);
  });
});

describe("what the stats say about the drives", () => {
  test("the stats line names each drive's rate and busy fraction; --json lists the devices, adding up", () => {
    const { model } = splitModel("split-stats");
    const e = Engine.open(model, { threads: 1, ram: budget, deviceOf });
    try {
      const it = e.generate(e.createSession(), PROMPT, { maxTokens: GEN });
      let r = it.next();
      while (!r.done) r = it.next();
      const line = statsLine(r.value, e.computeThreads);
      expect(line).toMatch(/ · drives drive-[ab] \d+\.\d\d GB\/s \d+% busy, drive-[ab] \d+\.\d\d GB\/s \d+% busy · /);
      const j = statsJson(r.value);
      expect(j.devices.map((d) => d.name).sort()).toEqual(["drive-a", "drive-b"]);
      expect(j.devices.reduce((a, d) => a + d.bytes_read, 0)).toBe(j.bytes_read + j.extra_bytes_read);
      for (const d of j.devices) expect(d.busy_fraction! > 0 && d.busy_fraction! <= 1).toBe(true);
    } finally {
      e.close();
    }
    // One drive, no hedge: the line says nothing about drives.
    const one = Engine.open(plain, { threads: 1, ram: budget });
    try {
      const it = one.generate(one.createSession(), PROMPT, { maxTokens: 2 });
      let r = it.next();
      while (!r.done) r = it.next();
      expect(statsLine(r.value, one.computeThreads)).not.toContain("drives");
    } finally {
      one.close();
    }
  });

  test("k3 run --mirror --json: the same ids as without; the devices' bytes add up to the engine's", () => {
    const mirror = mirrorOf("mirror-cli");
    const run = (...extra: string[]) => {
      const p = Bun.spawnSync([compiledK3(), "run", plain, "--ids", "5,17,300", "--gen", "4", "--threads", "1", "--json", ...extra], { stdin: "ignore" });
      expect(p.stderr.toString()).not.toMatch(STACK_FRAME);
      expect(p.exitCode).toBe(0);
      return JSON.parse(p.stdout.toString());
    };
    const a = run();
    const b = run("--mirror", mirror);
    expect(b.generated_ids).toEqual(a.generated_ids);
    expect(a.generated_ids.length).toBe(4);
    const s = b.stats;
    expect(s.devices.reduce((n: number, d: { bytes_read: number }) => n + d.bytes_read, 0)).toBe(s.bytes_read + s.extra_bytes_read);
  });
});

describe("mirrors", () => {
  test("a full mirror: the plain folder's ids; both copies serve reads; the counters add up", () => {
    const mirror = mirrorOf("mirror");
    const got = generate(plain, { mirrors: [mirror] });
    expect(got.ids).toEqual(want);
    expect(got.stats.devices.map((d) => d.name)).toEqual(["drive-a", "drive-b"]);
    expectDevicesAddUp(got.stats);
  });

  test("hedging and moving at once (hedgeAfter 0: every read still unfinished when waited for is late): the same ids", () => {
    const mirror = mirrorOf("mirror-eager");
    const got = generate(plain, { mirrors: [mirror], hedgeAfter: 0, ioThreads: 1 });
    expect(got.ids).toEqual(want);
    expectDevicesAddUp(got.stats);
  });

  test("a mirror's drive that answers nothing: every read given to it is moved to the other copy; the same ids", () => {
    const mirror = mirrorOf("mirror-silent");
    const e = Engine.open(plain, { threads: 1, ram: budget, deviceOf, mirrors: [mirror] });
    const silent = e.stats().devices.find((d) => d.name === "drive-b")!;
    // The plan holds the spare buffers a hedge reads into (k3 plan --mirror shows them too).
    expect(e.plan!.items.find((i) => i.name === "hedge buffers")?.count).toBe(2);
    k.k3_io_hold(silent.queue, 1);
    try {
      const ids: number[] = [];
      for (const t of e.generate(e.createSession(), PROMPT, { maxTokens: GEN })) ids.push(t.id);
      expect(ids).toEqual(want);
      const s = e.stats();
      const b = s.devices.find((d) => d.name === "drive-b")!;
      // Whatever was routed there was taken back before it started: it read nothing.
      expect([b.reads, b.bytesRead]).toEqual([0, 0]);
      expectDevicesAddUp(s);
    } finally {
      k.k3_io_hold(silent.queue, 0);
      e.close();
    }
  });

  test("a partial mirror (some shards) serves only what it holds", () => {
    const dir = join(realpathSync(scratchDir("mirror-part")), "drive-b");
    mkdirSync(dir);
    const shards = readdirSync(plain).filter(isShard);
    for (const f of shards.slice(0, 2)) copyKeepingTime(join(plain, f), join(dir, f));
    const got = generate(plain, { mirrors: [dir] });
    expect(got.ids).toEqual(want);
    expect(got.stats.devices.find((d) => d.name === "drive-b")!.files).toBe(2);
    expectDevicesAddUp(got.stats);
  });
});

describe("a mirror that is not the same bytes is refused, naming the shard", () => {
  const cases: [string, (f: string) => void, RegExp][] = [
    ["a byte more", (f) => truncateSync(f, statSync(f).size + 1), /is \d+ bytes, the model's is \d+/],
    ["its header edited, size and time kept", (f) => flipByte(f, readFileSync(f).indexOf('"pt"') + 2), /its header differs/],
    ["its header broken", (f) => flipByte(f, 9), /its header cannot be read/],
    ["copied without its time (touched)", (f) => utimesSync(f, new Date(), new Date(2001, 1, 1)), /modified at another time/],
  ];
  for (const [name, damage, why] of cases)
    test(name, () => {
      const mirror = mirrorOf(`mirror-bad-${name.length}`);
      const victim = readdirSync(mirror).sort()[1]!;
      damage(join(mirror, victim));
      const r = Bun.spawnSync([compiledK3(), "run", plain, "--mirror", mirror, "--ids", "5,6", "--gen", "1", "--threads", "1"], { stdin: "ignore" });
      const err = r.stderr.toString();
      expect(err).not.toMatch(STACK_FRAME);
      expect(r.exitCode).toBe(4);
      expect(err).toContain(`--mirror ${mirror}: ${victim} is not a copy of the model's shard`);
      expect(err).toMatch(why);
    });

  test("the model folder itself, a folder with none of the shards, one given twice, --resident: usage errors (exit 2)", () => {
    const mirror = mirrorOf("mirror-usage");
    const empty = scratchDir("mirror-empty");
    const k3 = (...args: string[]) => Bun.spawnSync([compiledK3(), "run", plain, "--ids", "5", "--gen", "1", "--threads", "1", ...args], { stdin: "ignore" });
    const cases: [string[], string][] = [
      [["--mirror", plain], "is the model folder itself"],
      [["--mirror", empty], "holds none of the model's"],
      [["--mirror", mirror, "--mirror", mirror], "is given twice"],
      [["--mirror", join(empty, "nope")], "not a folder"],
    ];
    for (const [args, msg] of cases) {
      const r = k3(...args);
      expect([r.exitCode, r.stderr.toString()]).toEqual([2, expect.stringContaining(msg)]);
    }
    expect(() => Engine.open(plain, { resident: true, mirrors: [mirror] })).toThrow(/--mirror is for streamed reads/);
  });
});

// Direct I/O is probed per device: each device reports what a probe of a file on it says, and
// the engine reports direct I/O only when every device has it. With a mirror on /dev/shm (tmpfs,
// another device than the scratch folder): before Linux 6.6 tmpfs refuses O_DIRECT, so there the
// two devices differ; on newer kernels both take it. Skipped without a tmpfs /dev/shm.
const shm = "/dev/shm";
const tmpfsShm = existsSync(shm) && readFileSync("/proc/self/mounts", "utf8").split("\n").some((l) => l.split(" ")[1] === shm && l.split(" ")[2] === "tmpfs");
describe("direct I/O per device", () => {
  test.skipIf(!tmpfsShm)("a mirror on tmpfs: each device reports its own probe; the engine's direct I/O is every device's", () => {
    const mirror = mkdtempSync(join(shm, "k3-mirror-"));
    try {
      const shards = readdirSync(plain).filter(isShard);
      for (const f of shards) copyKeepingTime(join(plain, f), join(mirror, f));
      const probe = (dir: string) => k.k3_direct_probe(join(dir, shards[0]!)) === 1;
      const e = Engine.open(plain, { threads: 1, ram: budget, mirrors: [mirror] });
      try {
        const ids: number[] = [];
        for (const t of e.generate(e.createSession(), PROMPT, { maxTokens: GEN })) ids.push(t.id);
        expect(ids).toEqual(want);
        const s = e.stats();
        const mode = (direct: boolean) => (direct ? "O_DIRECT" : "buffered");
        expect(s.devices.map((d) => [d.name === `tmpfs at ${shm}`, d.directIo, d.ioMode])).toEqual([
          [false, probe(plain), mode(probe(plain))],
          [true, probe(mirror), mode(probe(mirror))],
        ]);
        expect(s.directIo).toBe(probe(plain) && probe(mirror));
      } finally {
        e.close();
      }
    } finally {
      rmSync(mirror, { recursive: true, force: true });
    }
  });
});

describe("a drive that fails a read", () => {
  test("without a mirror: an error naming the file on that drive", () => {
    const { model, b } = splitModel("split-fail");
    const e = Engine.open(model, { threads: 1, ram: budget, deviceOf });
    try {
      const drive = e.stats().devices.find((d) => d.name === "drive-b")!;
      k.k3_io_fault(drive.queue, 1, 1);
      expect(() => {
        for (const _ of e.generate(e.createSession(), PROMPT, { maxTokens: GEN }));
      }).toThrow(new RegExp(`read of .* failed: ${model}/(model-\\d+-of-\\d+\\.safetensors) \\(${b}/\\1\\) on drive-b at offset \\d+ \\(errno 5\\)`));
    } finally {
      e.close();
    }
  });

  test("with a mirror: the read is retried on the other copy, the stats show it, the ids are the plain folder's", () => {
    const mirror = mirrorOf("mirror-retry");
    const e = Engine.open(plain, { threads: 1, ram: budget, deviceOf, mirrors: [mirror] });
    try {
      const a = e.stats().devices.find((d) => d.name === "drive-a")!;
      k.k3_io_fault(a.queue, 1, 1);
      const ids: number[] = [];
      for (const t of e.generate(e.createSession(), PROMPT, { maxTokens: GEN })) ids.push(t.id);
      expect(ids).toEqual(want);
      const s = e.stats();
      expect(s.devices.find((d) => d.name === "drive-a")!.errors).toBe(1);
      expect(s.devices.find((d) => d.name === "drive-b")!.retries).toBe(1);
      expect(s.retries).toBe(1);
      expectDevicesAddUp(s);
    } finally {
      k.k3_io_fault(-1, 0, 0);
      e.close();
    }
  });
});

describe("hedged reads", () => {
  test("a running read late on its drive is hedged into a spare: the hedge's answer wins, and the late read writes only its own buffer", () => {
    const mirror = mirrorOf("mirror-hedge");
    const ckpt = openCheckpoint(plain);
    const reader = new ShardReader(k, ckpt, { direct: false, ioThreads: 1, mirrors: findMirrorCopies(ckpt, [mirror]), deviceOf });
    const mem = new CBuffers(k);
    try {
      const plan = expertReadPlan(ckpt, 1, 0);
      expect(plan.reads.length).toBe(1);
      const [slot, spare] = [mem.alloc(expertSlotBytes(ckpt), "slot", 4096), mem.alloc(expertSlotBytes(ckpt), "spare", 4096)];
      reader.addSpares([spare]);
      const [a, b] = reader.drives;
      expect([a!.name, b!.name]).toEqual(["drive-a", "drive-b"]);
      // The next read on drive-a starts, then stalls; when released it scribbles 0xA5 over its range.
      k.k3_io_fault(a!.queue, 1, 2);
      const f = reader.start(plan, slot.ptr, "expert 0 of layer 1", slot);
      expect(f.ops[0]!.at).toBe(0); // both idle: the first copy
      reader.finish(f); // late → hedged on drive-b, which answers
      expect(f.won).toBe(spare);
      const r = plan.reads[0]!;
      const file = readFileSync(r.file).subarray(r.off, r.off + r.need);
      const bytes = (buf: typeof slot) => Buffer.from(new Uint8Array(k3Memory(buf.ptr, r.need)));
      expect(bytes(spare).equals(file)).toBe(true);
      const [sa, sb] = reader.deviceStats();
      k.k3_io_release(a!.queue);
      reader.close(); // waits for the late read
      expect(bytes(slot).every((x) => x === 0xa5)).toBe(true); // it wrote where it was told: the old buffer
      expect(bytes(spare).equals(file)).toBe(true); // the answer handed out was never touched
      expect([sa!.hedgesIssued, sb!.hedgesIssued, sb!.hedgesWon, reader.hedgesWon, reader.extraReads]).toEqual([0, 1, 1, 1, 1]);
    } finally {
      k.k3_io_fault(-1, 0, 0);
      k.k3_io_release(reader.drives[0]?.queue ?? -1); // a failed check must not leave the read stalled
      reader.close();
      mem.free();
    }
  });
});

/** The bytes at a C address (a copy). */
function k3Memory(ptr: number, n: number): ArrayBuffer {
  return toArrayBuffer(ptr as never, 0, n).slice(0);
}
