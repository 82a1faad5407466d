// Failure paths found in review (each test fails on the code before its fix):
//  - a server-sized expert cache asked for hundreds of distinct experts at once must not overflow
//    the I/O queue;
//  - a trunk layer landed by the lookahead's peek is verified like any other read (--verify);
//  - an error inside a forward pass marks the session, which refuses reuse until reset, and the
//    conversation layer resets it (a retry gives the clean answer, never a wrong one);
//  - closed sessions and engines refuse use instead of touching freed memory;
//  - a session file whose header tokens were altered is refused.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { closeSync, cpSync, openSync, readFileSync, readSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { streamCompletion } from "../src/conversation.ts";
import { Engine, verifyModel } from "../src/engine.ts";
import { loadKernels } from "../src/kernels.ts";
import { StreamingWeights } from "../src/memory/stream.ts";
import { trunkUnitEntries } from "../src/memory/units.ts";
import { loadChecksums } from "../src/memory/verify.ts";
import { generateModel } from "../tools/gen/generate.ts";
import { streamingBudget } from "./helpers/budgets.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

setDefaultTimeout(120_000);
const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250];

let dir = "";
beforeAll(async () => {
  dir = await tinyModel("tiny-a");
});

function complete(e: Engine, s: ReturnType<Engine["createSession"]>, prompt: number[]) {
  const g = streamCompletion(e, s, prompt, { maxTokens: 6 });
  let r = g.next();
  while (!r.done) r = g.next();
  return r.value;
}

describe("expert reads stay within the I/O queue", () => {
  test("300 distinct experts requested at once with 1024 slots: all arrive", async () => {
    const many = scratchDir("many");
    await generateModel(many, { preset: "tiny-a", seed: 3, experts: 512, layers: 3 });
    const k = loadKernels();
    const ck = openCheckpoint(many);
    const w = new StreamingWeights(k, ck, { pinnedPieces: [], ringSlots: 2, coreSlots: 2, expertSlots: 1024, prefetch: true, direct: true, policy: "lfru" });
    try {
      const L = ck.config.firstKDense;
      const experts = Array.from({ length: 300 }, (_, i) => i);
      w.acquireLayer(L);
      w.requestExperts(L, experts);
      const got = new Set<number>();
      for (let i = 0; i < experts.length; i++) got.add(w.nextExpert(L).expert);
      w.releaseExperts(L);
      w.releaseLayer(L);
      expect(got.size).toBe(300);
      expect(w.stats().expertBytesRead).toBe(300 * ck.layout.census.expertBytes);
    } finally {
      w.close();
    }
  });
});

describe("--verify covers lookahead landings", () => {
  test("a streamed layer damaged on disk is refused when the lookahead's peek lands it (no acquire)", async () => {
    const d = scratchDir("peekverify");
    cpSync(dir, d, { recursive: true });
    verifyModel(d, { record: true });
    const ck = openCheckpoint(d);
    const checksums = loadChecksums(ck); // loaded before the damage, as by an engine already open
    // A small tensor of the last layer (its core, which the lookahead lands) that the lookahead
    // router does not read, damaged before any read.
    const L = ck.config.numLayers - 1;
    const te = trunkUnitEntries(ck)[L]!.find((t) => t.name.endsWith("routed_expert_norm.weight"))!;
    const fd = openSync(te.file, "r+");
    const b = Buffer.alloc(64);
    readSync(fd, b, 0, 64, te.offset);
    for (let i = 0; i < 64; i++) b[i]! ^= 0x55;
    writeSync(fd, b, 0, 64, te.offset);
    closeSync(fd);
    const w = new StreamingWeights(loadKernels(), ck, { pinnedPieces: [], ringSlots: 2, coreSlots: 2, expertSlots: 8, prefetch: true, direct: true, policy: "lfru", checksums });
    try {
      w.acquireLayer(L - 1); // prefetches layer L's core into the other core slot
      // Only the lookahead's path from here: peek until the read has landed. It must be checked
      // on landing; a peek that handed out the damaged layer would return it.
      expect(() => {
        for (;;) if (w.peekLayer(L)) break;
      }).toThrow(new RegExp(`layers\\.${L}\\.block_sparse_moe\\.routed_expert_norm\\.weight \\(in layer ${L}'s core .*fails its checksum`));
      w.releaseLayer(L - 1);
    } finally {
      w.close();
    }
  });
});

describe("an error inside a forward pass", () => {
  test("marks the session: reuse is refused until reset; the conversation layer resets and answers cleanly", () => {
    const k = loadKernels();
    const e = Engine.open(dir, { ram: String(streamingBudget(dir, { chunk: 4, ringSlots: 2 })), threads: 1, chunk: 4 });
    try {
      expect(e.plan!.ringSlots).toBe(2);
      const clean = complete(e, e.createSession(), PROMPT).ids;
      const s = e.createSession();
      k.k3_io_fail_nth(25); // inside the prefill
      expect(() => complete(e, s, PROMPT)).toThrow(/failed/);
      k.k3_io_fail_nth(0);
      expect(s.dirty).toBe(true);
      expect(() => e.prefill(s, [1, 2])).toThrow(/interrupted by an error/);
      expect(() => e.saveSession(s, join(scratchDir("dirty"), "x"))).toThrow(/interrupted/);
      expect(complete(e, s, PROMPT).ids).toEqual(clean); // streamCompletion reset it first
      expect(s.dirty).toBe(false);
    } finally {
      k.k3_io_fail_nth(0);
      e.close();
    }
  });
});

describe("closed objects refuse use", () => {
  test("a closed session and a closed engine throw instead of touching freed memory", () => {
    const e = Engine.open(dir, { threads: 1 });
    const s = e.createSession();
    s.close();
    expect(() => e.prefill(s, PROMPT)).toThrow(/session was closed/);
    expect(() => e.saveSession(s, join(scratchDir("closed"), "x"))).toThrow(/closed session/);
    const s2 = e.createSession();
    e.close();
    expect(() => e.prefill(s2, PROMPT)).toThrow(/engine was closed/);
    expect(() => e.createSession()).toThrow(/engine was closed/);
    e.close(); // twice is fine
  });
});

describe("session files", () => {
  test("altered header tokens are refused", () => {
    const d = scratchDir("sess-hdr");
    const e = Engine.open(dir, { threads: 1 });
    try {
      const s = e.createSession();
      e.prefill(s, PROMPT.slice(0, 4));
      const file = join(d, "s.k3session");
      e.saveSession(s, file);
      const raw = readFileSync(file);
      const n = raw.readUInt32LE(8);
      const rewrite = (edit: (h: any) => void, name: string) => {
        const hdr = JSON.parse(raw.subarray(12, 12 + n).toString());
        edit(hdr);
        const js = Buffer.from(JSON.stringify(hdr));
        const head = Buffer.alloc(12);
        raw.copy(head, 0, 0, 8);
        head.writeUInt32LE(js.length, 8);
        writeFileSync(join(d, name), Buffer.concat([head, js, raw.subarray(12 + n)]));
        return join(d, name);
      };
      expect(() => e.loadSession(rewrite((h) => (h.history = [5, 17, 301, 42, 99, 98]), "count"))).toThrow(/inconsistent/);
      expect(() => e.loadSession(rewrite((h) => (h.history[2] = 301), "token"))).toThrow(/checksum mismatch/);
      expect(() => e.loadSession(rewrite((h) => (h.pending = [10 ** 9]), "vocab"))).toThrow(/outside this model's vocabulary/);
      expect(e.loadSession(file).tokens).toEqual(PROMPT.slice(0, 4)); // the untouched file loads
    } finally {
      e.close();
    }
  });
});
