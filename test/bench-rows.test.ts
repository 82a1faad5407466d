// bench/rows.ts's drafter: every pass it feeds must verify exactly the rows the bench reports
// (1 + k, every draft wrong, so none is kept and each pass decides one token).
import { expect, test } from "bun:test";
import { wrongDrafter } from "../bench/rows.ts";

test("the wrong drafter proposes the reference shifted by one and records each draft's length", () => {
  const ref = [5, 9, 3, 7, 1, 0, 8, 2];
  const d = wrongDrafter(ref, 10);
  // The sequence so far is ref[0..3]: the drafts continue at ref[4], each one id off.
  expect(d.draft({ tokens: ref.slice(0, 4), max: 3 }).tokens).toEqual([2, 1, 9]);
  // Near the reference's end it gives fewer than asked, and says so.
  expect(d.draft({ tokens: ref.slice(0, 6), max: 5 }).tokens).toEqual([9, 3]);
  expect(d.given).toEqual([3, 2]);
  // No draft ever equals the reference token at its position (so the first one always fails).
  for (let n = 1; n < ref.length; n++) expect(d.draft({ tokens: ref.slice(0, n), max: 8 }).tokens[0]).not.toBe(ref[n]);
});
