// Progress lines: drawn on a terminal, silent in pipes, erased when done or cancelled; bars by
// bytes with rate and ETA; the prefill ETA counts attention's growing cost.
import { expect, test } from "bun:test";
import { barLine, barProgress, clearProgressLines, prefillProgress, PrefillFit, progressLine } from "../src/cli/progress.ts";

const tty = () => {
  const out: string[] = [];
  return { out, stream: { isTTY: true, write: (s: string) => out.push(s) } };
};

test("barLine shows label, fill and counts; in bytes with rate and ETA", () => {
  expect(barLine("indexing shards", 48, 96, { width: 10 })).toBe("indexing shards [#####     ] 48/96");
  expect(barLine("x", 0, 0, { width: 4 })).toBe("x [    ] 0/0");
  const GiB = 2 ** 30;
  expect(barLine("loading pinned layers", 2 * GiB, 7 * GiB, { width: 10, unit: "bytes", rate: 256 * 2 ** 20 })).toBe(
    "loading pinned layers [###       ] 2.00 GiB/7.00 GiB · 256.00 MiB/s · ETA 20.0 s",
  );
});

test("barProgress is silent when stderr is not a TTY and draws then erases on a TTY", () => {
  expect(barProgress({ stream: { isTTY: false, write: () => true } })).toBeUndefined();
  const { out, stream } = tty();
  let t = 0;
  const bar = barProgress({ stream, now: () => (t += 200) })!;
  bar("loading pinned layers", 1, 4);
  bar("loading pinned layers", 2, 4);
  bar("loading pinned layers", 4, 4);
  expect(out.length).toBe(3);
  expect(out[0]).toContain("loading pinned layers [");
  expect(out[1]).toContain("2/4");
  expect(out[2]).toBe("\r\x1b[2K");
});

test("a bytes bar advances with the bytes (not per unit) and shows the rate since it began", () => {
  const { out, stream } = tty();
  let t = 0;
  const bar = barProgress({ stream, now: () => t })!;
  const MiB = 2 ** 20;
  bar("loading pinned layers", 0, 700 * MiB, "bytes"); // the step begins
  t = 1000;
  bar("loading pinned layers", 100 * MiB, 700 * MiB, "bytes");
  expect(out.at(-1)).toContain("100.00 MiB/700.00 MiB · 100.00 MiB/s · ETA 6.00 s");
});

test("clearProgressLines erases a line left drawn (an error or Ctrl-C cut the step short)", () => {
  const { out, stream } = tty();
  let t = 0;
  const bar = barProgress({ stream, now: () => (t += 200) })!;
  bar("indexing shards", 3, 10);
  clearProgressLines();
  expect(out.at(-1)).toBe("\r\x1b[2K");
  clearProgressLines(); // nothing shown any more: nothing written
  expect(out).toHaveLength(2);
});

test("prefill: quiet on a non-TTY stream; after a delay draws done/total, percent, bytes, ETA; clear() erases", () => {
  expect(prefillProgress({ stream: { isTTY: false, write: () => {} } })).toBeUndefined();
  const { out, stream } = tty();
  let t = 0;
  let bytes = 1000;
  const cb = prefillProgress({ stream, now: () => t, bytesRead: () => bytes })!;
  t = 100;
  cb(32, 320); // too early: short prefills print nothing
  expect(out).toEqual([]);
  t = 1000;
  bytes = 1000 + 2 * 2 ** 20;
  cb(160, 320);
  expect(out).toHaveLength(1);
  expect(out[0]).toMatch(/^\r\x1b\[2Kprefill 160\/320 tokens · 50% · 2\.00 MiB read · ETA \d/);
  cb.clear(); // Ctrl-C mid-prefill
  expect(out.at(-1)).toBe("\r\x1b[2K");
});

test("prefill ETA follows a cost that grows with position (attention), where a straight line is ~4× short", () => {
  // Each token costs 0.01 ms plus 0.0002 ms per earlier position: t(n) = 0.01·n + 0.0001·n².
  const t = (n: number) => 0.01 * n + 0.0001 * n * n;
  const fit = new PrefillFit();
  for (let n = 32; n <= 256; n += 32) fit.add(n, t(n));
  const truth = t(1024) - t(256);
  expect(Math.abs(fit.remainingMs(256, 1024) - truth) / truth).toBeLessThan(1e-6);
  const linear = ((1024 - 256) * t(256)) / 256; // what a rate-so-far ETA says
  expect(truth / linear).toBeGreaterThan(2.5);
  // A cost that is flat per token stays linear (no invented curvature).
  const flat = new PrefillFit();
  for (let n = 32; n <= 256; n += 32) flat.add(n, 0.5 * n);
  expect(flat.remainingMs(256, 1024)).toBeCloseTo(0.5 * 768, 6);
});

test("progressLine", () => {
  expect(progressLine(25, 100, 6000)).toBe("prefill 25/100 tokens · 25% · ETA 6.00 s");
  expect(progressLine(0, 100, 0)).toBe("prefill 0/100 tokens · 0%");
});

test("the engine reports loading pinned layers in bytes: from 0 to every pinned byte it reads at open", async () => {
  const { Engine } = await import("../src/engine.ts");
  const { tinyModel } = await import("./helpers/models.ts");
  const calls: [string, number, number, string | undefined][] = [];
  const engine = Engine.open(await tinyModel("tiny-a"), { threads: 1, onProgress: (label, done, total, unit) => calls.push([label, done, total, unit]) });
  try {
    const load = calls.filter(([label]) => label === "loading pinned layers");
    expect(load.length).toBeGreaterThan(2);
    expect(load.every(([, , , unit]) => unit === "bytes")).toBe(true);
    expect(load[0]![1]).toBe(0);
    const total = load[0]![2];
    expect(load.at(-1)![1]).toBe(total);
    for (let i = 1; i < load.length; i++) expect(load[i]![1]).toBeGreaterThan(load[i - 1]![1]);
    // The total is what the open read for the pinned units: bytes, not a count of units.
    expect(total).toBe(engine.stats().trunkBytesRead);
  } finally {
    engine.close();
  }
});
