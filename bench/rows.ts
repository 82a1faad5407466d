// Time per row of the passes that carry several rows after the prompt (issue 23): verify passes
// (1 + k rows: the pending token and k drafts, every row through every matmul and lm_head) and
// batched decode steps (S sessions, one row each), against a plain one-row decode step, per kernel
// library, on one model held resident. Opt-in, never part of `npm test`; the slice uses more than
// 4 GB: run it under the machine's exclusive lock.
//
//   bun bench/rows.ts [--model models/slice] [--old LIB] [--ks 3,4,5,6,7,8] [--sessions 4]
//                     [--tokens 5] [--runs 2] [--threads 2] [--json out.json]
//
// Each library (old = --old via K3_KERNELS, new = the one this checkout loads) runs in its own
// process; rounds alternate their order. In a process: a greedy reference (speculation off) gives
// the one-row step; then for each k a generation whose drafter proposes the reference shifted by
// one (every draft wrong, so every pass verifies exactly 1 + k rows and keeps none), and S
// sessions generating together through the batch scheduler (steps with exactly S sessions and no
// prefill rows). Counters beside the times: passes, rows verified, drafts kept; every
// generation's ids must equal the reference (checked: exit 1 otherwise).
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { Engine, type Drafter } from "../src/engine.ts";
import { streamCompletion } from "../src/conversation.ts";
import { writeFileAtomic, writeTarget } from "../src/files.ts";
import { loadAvg } from "./machine.ts";
import { childMain, spawnChild } from "./child.ts";
import { arg } from "./common.ts";

const ROOT = resolve(import.meta.dir, "..");

interface Spec {
  model: string;
  ks: number[];
  sessions: number;
  tokens: number;
  threads: number;
}
export interface PassTimes {
  /** Rows per pass: 1 (plain step), 1 + k (verify), S (batched). */
  rows: number;
  passes: number;
  ms: number;
  /** Drafts verified and kept (verify arms: every draft is wrong, so kept is 0; 0 and 0 otherwise). */
  drafted: number;
  accepted: number;
  sameIds: boolean;
}
interface Result {
  ok: boolean;
  error?: string;
  load?: string;
  plain?: PassTimes;
  verify?: Record<number, PassTimes>;
  batched?: PassTimes;
}

/** Drafts the reference continuation shifted by one id (the first draft is always wrong); the
 *  drafts it gave are recorded, so every pass's row count is known. */
export function wrongDrafter(ref: readonly number[], vocab: number): Drafter & { given: number[] } {
  const given: number[] = [];
  return {
    name: "wrong",
    given,
    draft: ({ tokens, max }) => {
      const t = ref.slice(tokens.length, tokens.length + max).map((x) => (x + 1) % vocab);
      given.push(t.length);
      return { tokens: t };
    },
  };
}

const same = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((x, i) => x === b[i]);

async function child(spec: Spec): Promise<Result> {
  const longest = Math.max(...spec.ks);
  const engine = Engine.open(spec.model, { resident: true, threads: spec.threads, parallel: spec.sessions, speculate: longest });
  try {
    const prompt = Array.from({ length: 8 }, (_, i) => (i * 7919 + 13) % engine.config.vocab);
    // The first `tokens` decode steps of a generation long enough that each of them has room for
    // k drafts (the engine drafts at most maxTokens − generated − 1); then the generation stops.
    const run = (k: number, opts: { speculate?: number | "off"; drafter?: Drafter }) => {
      const it = engine.generate(engine.createSession(), prompt, { maxTokens: spec.tokens + k + 2, ...opts });
      const ids: number[] = [], ms: number[] = [];
      for (let r = it.next(); !r.done; r = it.next()) {
        ids.push(r.value.id);
        if (r.value.index > 0) ms.push(r.value.ms);
        if (ms.length === spec.tokens) break;
      }
      it.return(undefined as never);
      return { ids, ms };
    };
    const refIt = engine.generate(engine.createSession(), prompt, { maxTokens: spec.tokens + 2 * longest + 4, speculate: "off" });
    const ref: number[] = [];
    for (let r = refIt.next(); !r.done; r = refIt.next()) ref.push(r.value.id);
    const full = [...prompt, ...ref];
    const want = ref.slice(0, spec.tokens + 1);
    const sum = (xs: number[]) => xs.reduce((a, x) => a + x, 0);
    const p = run(0, { speculate: "off" });
    const plain: PassTimes = { rows: 1, passes: p.ms.length, ms: sum(p.ms), drafted: 0, accepted: 0, sameIds: same(p.ids, want) };
    const verify: Record<number, PassTimes> = {};
    for (const k of spec.ks) {
      const d = wrongDrafter(full, engine.config.vocab);
      const r = run(k, { speculate: k, drafter: d });
      // One draft call per pass; a kept draft would give more tokens than passes.
      const rowsOk = d.given.length > 0 && d.given.every((n) => n === k);
      verify[k] = { rows: rowsOk ? 1 + k : NaN, passes: d.given.length, ms: sum(r.ms), drafted: sum(d.given), accepted: r.ms.length - d.given.length, sameIds: same(r.ids, want) };
    }
    // S sessions at once, the same prompt each (so each must give the reference), through the scheduler.
    const seq0 = engine.batchStats().steps;
    const got = await Promise.all(
      Array.from({ length: spec.sessions }, async () => {
        const g = streamCompletion(engine, engine.createSession(), prompt, { maxTokens: spec.tokens + 1, batched: true, speculate: "off" });
        for (;;) {
          const r = g.next();
          if (r.done) return r.value.ids;
          if (r.value.waiting) await engine.turn();
        }
      }),
    );
    const b = engine.batchStats();
    const steps = b.recent.slice(-(b.steps - seq0)).filter((s) => s.sessions === spec.sessions && s.prefillRows === 0);
    const batched: PassTimes = { rows: spec.sessions, passes: steps.length, ms: steps.reduce((a, s) => a + s.ms, 0), drafted: 0, accepted: 0, sameIds: got.every((ids) => same(ids, want)) };
    return { ok: true, plain, verify, batched };
  } finally {
    engine.close();
  }
}

if (import.meta.main && process.argv[2] === "--child") await childMain(child);

// ---------------------------------------------------------------- parent
if (import.meta.main) {
  const spec: Spec = {
    model: resolve(arg("--model", join(ROOT, "models/slice"))),
    ks: arg("--ks", "3,4,5,6,7,8").split(",").map(Number),
    sessions: Number(arg("--sessions", "4")),
    tokens: Number(arg("--tokens", "5")),
    threads: Number(arg("--threads", "2")),
  };
  const oldLib = arg("--old", join(ROOT, "bench/out/old/libkernels.so"));
  const RUNS = Number(arg("--runs", "2"));
  const jsonOut = arg("--json", "");
  if (jsonOut) writeTarget(jsonOut, "the --json output", "USAGE");
  if (!existsSync(oldLib)) throw new Error(`--old ${oldLib}: no such library (the old arm needs it)`);
  if (spec.ks.some((k) => !Number.isInteger(k) || k < 1) || !(spec.tokens >= 2) || !(spec.sessions >= 2)) throw new Error("--ks must be integers ≥ 1, --tokens ≥ 2, --sessions ≥ 2");
  const say = (s: string) => process.stderr.write(`[rows] ${s}\n`);
  const libs = [{ arm: "old", lib: oldLib as string | undefined }, { arm: "new", lib: undefined }];
  const results: Record<string, Result[]> = { old: [], new: [] };
  for (let run = 1; run <= RUNS; run++)
    for (const a of run % 2 ? libs : [...libs].reverse()) {
      const load = loadAvg();
      const r = spawnChild<Result>(import.meta.path, spec, a.lib);
      r.load = load;
      results[a.arm]!.push(r);
      say(`round ${run} ${a.arm}: ${r.ok ? `plain ${(r.plain!.ms / r.plain!.passes).toFixed(0)} ms/step` : r.error} (load ${load})`);
    }
  console.log(`model ${spec.model}, resident, ${spec.threads} threads, ${RUNS} rounds; load at each process start: ${libs.flatMap((l) => results[l.arm]!.map((r) => `${l.arm} ${r.load}`)).join("; ")}\n`);
  console.log("| pass | rows | passes (each round) | drafts verified / kept | ms per pass, old (each round) | ms per pass, new (each round) | ms per row, old (best) | ms per row, new (best) | new / old (best) | per row ÷ plain step (new) | same ids |");
  console.log("|---|---|---|---|---|---|---|---|---|---|---|");
  const pick = (r: Result, key: string) => (key === "plain" ? r.plain : key === "batched" ? r.batched : r.verify?.[Number(key)]);
  const keys = ["plain", ...spec.ks.map(String), "batched"];
  const bestRow = (arm: string, key: string) => Math.min(...results[arm]!.filter((r) => r.ok).map((r) => pick(r, key)!).map((t) => t.ms / t.passes / t.rows));
  let ok = Object.values(results).every((rs) => rs.every((r) => r.ok));
  for (const key of keys) {
    const ts = (arm: string) => results[arm]!.filter((r) => r.ok).map((r) => pick(r, key)!);
    const all = [...ts("old"), ...ts("new")];
    if (!all.length) continue;
    const sameIds = all.every((t) => t.sameIds);
    ok &&= sameIds;
    const name = key === "plain" ? "plain decode step" : key === "batched" ? `batched step, ${spec.sessions} sessions` : `verify, k = ${key}`;
    const perPass = (arm: string) => ts(arm).map((t) => (t.ms / t.passes).toFixed(0)).join(" / ");
    const o = bestRow("old", key), n = bestRow("new", key);
    console.log(`| ${name} | ${all[0]!.rows} | ${all.map((t) => t.passes).join(" / ")} | ${all.map((t) => `${t.drafted}/${t.accepted}`).join(" ")} | ${perPass("old")} | ${perPass("new")} | ${o.toFixed(1)} | ${n.toFixed(1)} | ${(n / o).toFixed(2)} | ${(n / bestRow("new", "plain")).toFixed(2)} | ${sameIds ? "yes" : "NO"} |`);
  }
  if (jsonOut) writeFileAtomic(jsonOut, "the --json output", "USAGE", JSON.stringify({ spec, results }, null, 1));
  process.exit(ok ? 0 : 1);
}
