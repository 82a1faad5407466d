// What Engine.open refuses, and what it reports, before any weight is read (issue 9 items 13, 14;
// issue 17 item 7; the context limit):
//  - compute and I/O thread counts outside the kernels' limits are usage errors (exit 2), not
//    internal ones; the default on a machine with more hardware threads than the pool takes is
//    the pool's limit, and stats say so;
//  - a budget above this machine's usable RAM is refused unless allowOverRam;
//  - the I/O pool is process-wide: a later engine that asks for another size is refused (one that
//    does not ask joins it), and each engine counts its own reads and I/O wait;
//  - a context past the model's max_position_embeddings is a usage error naming both numbers
//    (the default is lowered to it).
import { afterEach, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Engine } from "../src/engine.ts";
import { K3Error } from "../src/errors.ts";
import { PRESETS, usableRam } from "../src/memory/ram.ts";
import { engineStatsJson, threadsWords } from "../src/report.ts";
import { liveCBytes } from "../src/model/cmem.ts";
import { streamingBudget } from "./helpers/budgets.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

setDefaultTimeout(120_000);
const CLI = [process.execPath, "src/cli/main.ts"];

let dir = "";
beforeAll(async () => {
  dir = await tinyModel("tiny-a");
});

function refusal(f: () => unknown): K3Error {
  try {
    f();
  } catch (err) {
    if (err instanceof K3Error) return err;
    throw err;
  }
  throw new Error("not refused");
}

function k3(args: string[]) {
  const p = Bun.spawnSync([...CLI, ...args], { stdin: "ignore", env: { ...process.env, NO_COLOR: "1" } });
  return { code: p.exitCode, err: p.stderr.toString() };
}

describe("thread counts", () => {
  test("--threads past the pool's limit (or below 1) is a usage error naming the limit", () => {
    for (const threads of [65, 1000, 0]) {
      const err = refusal(() => Engine.open(dir, { threads }));
      expect(err.code).toBe("USAGE");
      expect(err.message).toContain("from 1 to 64");
    }
    const r = k3(["run", dir, "--ids", "1,2", "--gen", "1", "--threads", "1000"]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("--threads must be an integer from 1 to 64");
  });

  test("--io-threads outside 1..256 is a usage error (exit 2)", () => {
    expect(refusal(() => Engine.open(dir, { threads: 1, ioThreads: 100000 })).code).toBe("USAGE");
    const r = k3(["run", dir, "--ids", "1,2", "--gen", "1", "--threads", "1", "--io-threads", "100000"]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("--io-threads must be an integer from 1 to 256");
  });

  describe("more hardware threads than the pool takes", () => {
    const real = Object.getOwnPropertyDescriptor(navigator, "hardwareConcurrency");
    afterEach(() => {
      if (real) Object.defineProperty(navigator, "hardwareConcurrency", real);
      else delete (navigator as { hardwareConcurrency?: number }).hardwareConcurrency;
    });
    test("128 hardware threads: the default is the pool's 64, and stats say why", () => {
      Object.defineProperty(navigator, "hardwareConcurrency", { value: 128, configurable: true });
      const e = Engine.open(dir, { resident: true });
      try {
        expect(e.threads).toBe(64);
        const s = e.stats();
        expect({ threads: s.threads, hardwareThreads: s.hardwareThreads, limit: s.limit }).toEqual({ threads: 64, hardwareThreads: 128, limit: 64 });
        // The stats JSON (/k3/stats, the REPL's /stats) and the stats line say it too.
        expect(engineStatsJson(s)).toMatchObject({ threads: 64, hardware_threads: 128, thread_limit: 64 });
        expect(threadsWords(e.computeThreads)).toBe("64 threads (the pool's limit; 128 hardware threads)");
      } finally {
        e.close();
      }
    });
  });
});

test("below the limit the stats line names the count alone", () => {
  expect(threadsWords({ threads: 2, hardwareThreads: 2, limit: 64 })).toBe("2 threads");
  expect(threadsWords({ threads: 64, hardwareThreads: 64, limit: 64 })).toBe("64 threads");
});

describe("budget above usable RAM", () => {
  test("refused at open, naming both figures; allowOverRam opens anyway", () => {
    const usable = usableRam().bytes;
    const ram = String(usable * 2);
    const err = refusal(() => Engine.open(dir, { ram, threads: 1 }));
    expect(err.code).toBe("BUDGET");
    expect(err.message).toMatch(/is more than this machine's usable RAM .* it would swap/);
    const e = Engine.open(dir, { ram, threads: 1, allowOverRam: true });
    e.close();
    // A preset is a budget like any other (the server preset is 224 GiB).
    if (usable < PRESETS.server!) expect(refusal(() => Engine.open(dir, { preset: "server", threads: 1 })).code).toBe("BUDGET");
  });
});

describe("each engine reads through its own device queues", () => {
  test("two engines may ask for different --io-threads; each device's queue has what its engine asked for", () => {
    const a = Engine.open(dir, { threads: 1, ioThreads: 2 });
    try {
      const b = Engine.open(dir, { threads: 1, ioThreads: 3 });
      try {
        expect(a.stats().ioThreads).toBe(2);
        expect(b.stats().ioThreads).toBe(3);
        expect(a.stats().devices.map((d) => d.threads)).toEqual([2]);
        expect(b.stats().devices.map((d) => d.threads)).toEqual([3]);
      } finally {
        b.close();
      }
    } finally {
      a.close();
    }
  });

  test("each engine counts its own reads and I/O wait", () => {
    const ram = String(streamingBudget(dir)); // nothing pinned: open reads nothing
    const a = Engine.open(dir, { ram, threads: 1 });
    const b = Engine.open(dir, { ram, threads: 1 });
    try {
      for (const _ of a.generate(a.createSession(), [5, 17, 300], { maxTokens: 4 }));
      expect(a.stats().reads).toBeGreaterThan(0);
      expect(a.stats().ioWaitMs).toBeGreaterThan(0);
      expect(b.stats().reads).toBe(0);
      expect(b.stats().ioWaitMs).toBe(0);
    } finally {
      a.close();
      b.close();
    }
  });
});

describe("the context limit and the model's max_position_embeddings", () => {
  test("a context past it is a usage error naming both numbers (Engine.open, run, plan); the default is lowered to it", () => {
    const d = scratchDir("positions-64");
    cpSync(dir, d, { recursive: true });
    const cfgPath = join(d, "config.json");
    const cfg = JSON.parse(readFileSync(cfgPath, "utf8"));
    cfg.text_config.max_position_embeddings = 64;
    writeFileSync(cfgPath, JSON.stringify(cfg));
    const err = refusal(() => Engine.open(d, { threads: 1, context: 65 }));
    expect(err.code).toBe("USAGE");
    expect(err.message).toContain("--context 65 is more than this model's max_position_embeddings (64)");
    const at = Engine.open(d, { threads: 1, context: 64 });
    expect(at.context).toBe(64);
    at.close();
    const byDefault = Engine.open(d, { threads: 1 }); // 4096 by default: lowered to 64
    expect(byDefault.context).toBe(64);
    byDefault.close();
    for (const args of [["run", d, "--ids", "1,2", "--gen", "1", "--threads", "1", "--context", "100"], ["plan", d, "--context", "100"]]) {
      const r = k3(args);
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(r.err).toContain("--context 100 is more than this model's max_position_embeddings (64)");
    }
  });
});

describe("close", () => {
  test("a generation resumed after its engine closed stops with a usage error (never a read of freed memory)", () => {
    const e = Engine.open(dir, { threads: 1, resident: true });
    const gen = e.generate(e.createSession(), [5, 6, 7], { maxTokens: 4 });
    expect(gen.next().done).toBe(false);
    e.close();
    expect(() => gen.next()).toThrow("this engine was closed");
  });
});

describe("an open that can be interrupted (Engine.openAsync; the CLI's Ctrl-C while loading)", () => {
  const PROMPT = [5, 6, 7];
  const greedy = (e: Engine) => [...e.generate(e.createSession(), PROMPT, { maxTokens: 4 })].map((t) => t.id);

  test("without a signal it opens the same engine as open(): same plan, same ids", async () => {
    const a = Engine.open(dir, { threads: 1, ram: "1G" }); // a fixed budget: "auto" follows free RAM
    const b = await Engine.openAsync(dir, { threads: 1, ram: "1G" });
    try {
      expect(b.plan).toEqual(a.plan!);
      expect(greedy(b)).toEqual(greedy(a));
    } finally {
      a.close();
      b.close();
    }
  });

  test("aborted while the pinned layers load: no piece lands after the abort, CANCELLED, nothing held; the next open works", async () => {
    const ids = (() => {
      const e = Engine.open(dir, { threads: 1 });
      try {
        expect(e.plan!.pinnedLayers.length).toBeGreaterThan(2); // several pieces to stop between
        return greedy(e);
      } finally {
        e.close();
      }
    })();
    const before = liveCBytes();
    const stop = new AbortController();
    const landed: number[] = [];
    let total = 0;
    let afterAbort = 0;
    const err = await Engine.openAsync(dir, {
      threads: 1,
      signal: stop.signal,
      onProgress: (label, done, all) => {
        if (label !== "loading pinned layers" || done === 0) return;
        total = all;
        if (stop.signal.aborted) afterAbort++;
        landed.push(done);
        if (landed.length === 1) stop.abort(); // Ctrl-C as the first piece lands
      },
    }).then(
      () => new Error("opened"),
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(K3Error);
    expect((err as K3Error).code).toBe("CANCELLED");
    expect({ landed: landed.length, afterAbort }).toEqual({ landed: 1, afterAbort: 0 });
    expect(landed[0]!).toBeLessThan(total);
    // Every buffer freed (reads still in flight were waited for first). A finalizer freeing a
    // session another test dropped can only lower the figure.
    expect(liveCBytes()).toBeLessThanOrEqual(before);
    const again = Engine.open(dir, { threads: 1 });
    try {
      expect(greedy(again)).toEqual(ids);
    } finally {
      again.close();
    }
  });

  test("the CLI's open: a real SIGINT while loading → CANCELLED, the bar erased, the handler removed", () => {
    // In a child process: the signal goes to it, not to the test runner.
    const script = join(scratchDir("sigint-open"), "open.ts");
    writeFileSync(
      script,
      `import { openEngine } from ${JSON.stringify(join(import.meta.dir, "../src/cli/common.ts"))};
import { barProgress } from ${JSON.stringify(join(import.meta.dir, "../src/cli/progress.ts"))};
const out: string[] = [];
const bar = barProgress({ stream: { isTTY: true, write: (s: string) => out.push(s) }, force: true })!;
let sent = false;
let afterSignal = 0;
const listeners = process.listenerCount("SIGINT");
try {
  await openEngine(${JSON.stringify(dir)}, { threads: 1, onProgress: (label, done, total, unit) => {
    bar(label, done, total, unit);
    if (label !== "loading pinned layers" || done === 0) return;
    if (sent) afterSignal++;
    else { sent = true; process.kill(process.pid, "SIGINT"); }
  } });
  console.log(JSON.stringify({ opened: true }));
} catch (e) {
  console.log(JSON.stringify({ code: (e as { code?: string }).code, afterSignal, drawn: out.some((s) => s.includes("loading pinned layers [")), last: out.at(-1), listeners: process.listenerCount("SIGINT") - listeners }));
}
`,
    );
    const p = Bun.spawnSync([process.execPath, script], { stdin: "ignore", env: { ...process.env, NO_COLOR: "1" } });
    expect(p.exitCode).toBe(0);
    const r = JSON.parse(p.stdout.toString());
    // The signal is handled on the event loop's next turn, which the load gives it after each piece.
    expect(r).toEqual({ code: "CANCELLED", afterSignal: expect.any(Number), drawn: true, last: "\r\x1b[2K", listeners: 0 });
    expect(r.afterSignal).toBeLessThanOrEqual(1);
  });
});
