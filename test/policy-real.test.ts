// Policies on the real routing traces (reference/traces, vendored from the release): Belady is the ceiling.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ALL_POLICIES, nextUseTable } from "../src/memory/policy/index.ts";
import { simulateCache } from "../src/memory/simulate.ts";
import { parseTrace, traceKeys } from "../src/memory/trace.ts";

const DIR = join(import.meta.dir, "../reference/traces");
const TRACES = [
  { file: "kimi-linear-48b.routing.jsonl", tokens: 300, layers: 26, experts: 256 },
  { file: "olmoe-1b-7b.routing.jsonl", tokens: 299, layers: 16, experts: 64 },
];

for (const t of TRACES) {
  const path = `${DIR}/${t.file}`;
  describe(t.file, () => {
    test("parses with the expected shape", () => {
      const tr = parseTrace(readFileSync(path, "utf8"), path);
      expect([tr.tokens, tr.layers, tr.k, tr.experts]).toEqual([t.tokens, t.layers, 8, t.experts]);
    });
    test("Belady ≥ every policy; LRU hits 0 below one token's working set", () => {
      const tr = parseTrace(readFileSync(path, "utf8"), path);
      const ws = tr.k * tr.layers;
      const nextUse = nextUseTable(tr.requests, traceKeys(tr));
      for (const slots of [ws / 2, ws, 4 * ws]) {
        const rates = Object.fromEntries(ALL_POLICIES.map((p) => [p, simulateCache(tr, slots, p, nextUse).hits]));
        for (const p of ALL_POLICIES) expect(rates.belady!).toBeGreaterThanOrEqual(rates[p]!);
        if (slots < ws) expect(rates.lru).toBe(0);
      }
    });
  });
}
