// The batch scheduler's step rule (src/batch/scheduler.ts), on a fake pass function that records
// what each step carried: at most `parallel` sessions and `rows` rows per step, decode tickets
// before prefill pieces, a verify ticket alone, every ticket run exactly once; and the stats count
// each step by the sessions it really carried (issue 21: the server test's `sessions_per_step`
// length could not fail — it is sized parallel + 1 whatever ran).
import { describe, expect, test } from "bun:test";
import { BatchScheduler, type PassPart, type TicketKind } from "../src/batch/scheduler.ts";
import type { SessionState } from "../src/model/state.ts";
import { zeroStats } from "../src/model/weights.ts";

const state = (n: number) => ({ id: n }) as unknown as SessionState;

function scheduler(parallel: number, rows: number) {
  const carried: { parts: PassPart[] }[] = [];
  const s = new BatchScheduler(
    (parts) => {
      carried.push({ parts: parts.slice() });
      return parts.map((p) => (p.verify ? p.ids.map(() => new Float32Array(1)) : p.logits ? new Float32Array(1) : null));
    },
    rows,
    parallel,
    () => zeroStats("buffered"),
  );
  return { s, carried };
}

describe("what a step carries", () => {
  test("never more than parallel sessions or rows; decode first; every ticket once; stats match the steps", () => {
    const { s, carried } = scheduler(3, 6); // chunk 4 + 3 − 1
    const tickets: { kind: TicketKind; t: ReturnType<BatchScheduler["submit"]> }[] = [];
    // Eight sessions at once, prefill pieces of 4 submitted between five decode rows.
    for (let i = 0; i < 8; i++) {
      const kind: TicketKind = i % 3 === 0 ? "prefill" : "decode";
      tickets.push({ kind, t: s.submit({ state: state(i), ids: kind === "prefill" ? [1, 2, 3, 4] : [9], logits: true }, kind) });
    }
    while (tickets.some((x) => !x.t.done)) s.step();
    for (const { parts } of carried) {
      expect(parts.length).toBeGreaterThanOrEqual(1);
      expect(parts.length).toBeLessThanOrEqual(3);
      expect(parts.reduce((a, p) => a + p.ids.length, 0)).toBeLessThanOrEqual(6);
    }
    // Decode rows went first: the first step took three of the five decode tickets.
    expect(carried[0]!.parts.map((p) => p.ids.length)).toEqual([1, 1, 1]);
    // Every ticket ran exactly once.
    expect(new Set(carried.flatMap((c) => c.parts)).size).toBe(8);
    expect(carried.flatMap((c) => c.parts).length).toBe(8);
    const st = s.stats();
    expect(st.steps).toBe(carried.length);
    expect(st.recent.map((r) => [r.sessions, r.decodeRows + r.prefillRows])).toEqual(carried.map((c) => [c.parts.length, c.parts.reduce((a, p) => a + p.ids.length, 0)]));
    expect(st.sessionsPerStep.reduce((a, b) => a + b, 0)).toBe(st.steps);
    expect(st.sessionsPerStep.length).toBe(4);
  });

  test("a verify ticket runs alone, even with room for more", () => {
    const { s, carried } = scheduler(3, 6);
    const a = s.submit({ state: state(1), ids: [1], logits: true }, "decode");
    const v = s.submit({ state: state(2), ids: [1, 2, 3], logits: true, verify: true }, "verify");
    const b = s.submit({ state: state(3), ids: [1], logits: true }, "decode");
    while (!a.done || !v.done || !b.done) s.step();
    expect(carried.map((c) => c.parts.map((p) => (p.verify ? "verify" : "decode")))).toEqual([["decode", "decode"], ["verify"]]);
  });
});
