// Progress bars: drawn on a terminal, silent in pipes, erased when done.
import { expect, test } from "bun:test";
import { barLine, barProgress } from "../src/cli/progress.ts";

test("barLine shows label, fill and counts", () => {
  expect(barLine("indexing shards", 48, 96, 10)).toBe("indexing shards [#####     ] 48/96");
  expect(barLine("x", 0, 0, 4)).toBe("x [    ] 0/0");
});

test("barProgress is silent when stderr is not a TTY and draws then erases on a TTY", () => {
  expect(barProgress({ stream: { isTTY: false, write: () => true } })).toBeUndefined();
  const out: string[] = [];
  let t = 0;
  const bar = barProgress({ stream: { isTTY: true, write: (s: string) => out.push(s) }, now: () => (t += 200) })!;
  bar("loading pinned layers", 1, 4);
  bar("loading pinned layers", 2, 4);
  bar("loading pinned layers", 4, 4);
  expect(out.length).toBe(3);
  expect(out[0]).toContain("loading pinned layers [");
  expect(out[1]).toContain("2/4");
  expect(out[2]).toBe("\r\x1b[2K");
});
