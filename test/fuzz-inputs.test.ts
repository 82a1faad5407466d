// Fuzzing what a user hands k3 (issue 9): safetensors headers, config.json and session files of
// a tiny model, mutated at random, each run through the compiled binary as a user would. Every
// case must end one of two ways:
//   - refused: a k3 error, exit 2/3/4, nothing on stdout, no stack trace; or
//   - harmless: exit 0 with exactly the clean model's ids (the mutation touched nothing the model
//     reads, e.g. __metadata__ or an unused config field).
// Never different ids with exit 0, never exit 1 (a k3 bug), never a hang. And each kind must be
// refused at least a minimum share of the time (MIN_REFUSED): "harmless" is allowed case by case,
// but a check that quietly became a no-op turns refusals into harmless cases, and only this
// minimum sees that when the mutation happens not to change the ids.
//
// Seeded and reproducible: case i uses seed BASE + i. A failure prints the seed and the mutation;
// `K3_FUZZ_SEED=<seed> K3_FUZZ_CASES=1 bun test test/fuzz-inputs.test.ts` replays that one case.
// K3_FUZZ_CASES raises the count for a longer hunt (the default keeps `npm test` to seconds);
// K3_FUZZ_VERBOSE=1 prints every case's mutation and exit code.
import { beforeAll, describe, expect, test } from "bun:test";
import { cpSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Xoshiro128 } from "../tools/gen/prng.ts";
import { compiledK3, STACK_FRAME, userEnv } from "./helpers/k3-binary.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

const BASE = Number(process.env.K3_FUZZ_SEED ?? 20261130);
const CASES = Number(process.env.K3_FUZZ_CASES ?? 16); // per input kind
const RUN = ["--ids", "5,6,7", "--gen", "4", "--threads", "1"];
const RESUME = ["--ids", "8", "--gen", "3", "--threads", "1"];
/** The share of cases of each kind that must be refused (from runs of the default seeds: headers
 *  16 of 16, config 9 of 16, sessions 16 of 16), checked when a run has at least MIN_CASES cases
 *  (a one-seed replay has no share to speak of). */
const MIN_REFUSED: Record<string, number> = { "safetensors headers": 0.75, "config.json": 0.4, "session files": 0.75 };
const MIN_CASES = 8;
/** A guard against hangs, not a timing assertion. */
const HANG_GUARD_MS = 60_000;

let bin: string;
let clean: string;
let home: string;
let session: string; // saved after RUN on the clean model
const want = { run: "", resume: "" };

beforeAll(async () => {
  bin = compiledK3();
  clean = await tinyModel("tiny-a");
  home = scratchDir("fuzz-home");
  session = join(scratchDir("fuzz-session"), "clean.k3s");
  const a = k3(["run", clean, ...RUN, "--save-session", session]);
  const b = k3(["run", clean, "--load-session", session, ...RESUME]);
  if (a.code !== 0 || b.code !== 0) throw new Error(`the clean model does not run:\n${a.err}\n${b.err}`);
  want.run = a.out;
  want.resume = b.out;
}, 120_000);

function k3(args: string[]) {
  const p = Bun.spawnSync([bin, ...args], { stdin: "ignore", env: userEnv(home), timeout: HANG_GUARD_MS });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

class Rng {
  private x: Xoshiro128;
  constructor(seed: number) {
    this.x = new Xoshiro128(seed >>> 0, 0x46555a5a);
  }
  int(n: number): number {
    return this.x.nextInt(n);
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!;
  }
}

/** The verdict on one case; null when it ended one of the two allowed ways. */
function judge(r: ReturnType<typeof k3>, clean: string): string | null {
  if (r.code === 0) return r.out === clean ? null : `exit 0 with different output: ${JSON.stringify(r.out)} (clean: ${JSON.stringify(clean)})`;
  if (r.code === null) return "no exit (killed: a hang?)";
  if (![2, 3, 4].includes(r.code)) return `exit ${r.code}: ${r.err.slice(0, 400)}`;
  if (STACK_FRAME.test(r.err)) return `a stack trace reached the user: ${r.err.slice(0, 400)}`;
  if (r.out !== "") return `refused (exit ${r.code}) but printed ${JSON.stringify(r.out)}`;
  return null;
}

// ---- mutations (each returns a description; all randomness from the case's Rng) ----

/** Values that break a field's type or range, or nudge it. */
function wildValue(rng: Rng, v: unknown): unknown {
  const pool: unknown[] = [null, true, false, "x", "", [], {}, [1, 2], 0, -1, 1.5, 1e6, 1e9, 2 ** 53, -(2 ** 31), Number.MAX_VALUE];
  if (typeof v === "number") pool.push(v + 1, v - 1, v * 2, Math.floor(v / 2));
  return rng.pick(pool);
}

/**
 * The config's free parameters: any valid value is a different model whose ids may differ, so
 * the fuzz gives them only values that must be refused (wrong type, zero, missing); every other
 * field either sizes a tensor (a change is a shape mismatch), must hold one exact value, or is
 * not read at all (any change leaves the ids as they were).
 */
const FREE = new Set([
  "text_config.rms_norm_eps", "text_config.routed_scaling_factor", "text_config.activation_situ_beta",
  "text_config.activation_situ_linear_beta", "text_config.linear_attn_config.gate_lower_bound",
  "text_config.num_experts_per_token", "text_config.attn_res_block_size", "bos_token_id", "eos_token_id", "pad_token_id",
]);
const REFUSED_FOR_FREE: unknown[] = [null, "x", [], {}, true, 0, undefined];
/** Token ids: 0 is a valid id, so out-of-vocabulary and negative values instead. */
const REFUSED_FOR_IDS: unknown[] = [null, "x", [], -1, 1e9, 1.5, undefined];

function leaves(o: any, path: string[] = []): string[][] {
  if (o === null || typeof o !== "object") return [path];
  const keys = Array.isArray(o) ? o.map((_, i) => String(i)) : Object.keys(o);
  return keys.length ? keys.flatMap((k) => leaves(o[k], [...path, k])) : [path];
}

function mutateConfig(rng: Rng, dir: string): string {
  const f = join(dir, "config.json");
  const j = JSON.parse(readFileSync(f, "utf8"));
  const all = leaves(j);
  // Three times in four, a field of the kind the reader checks (a number or boolean of the model,
  // not vision_config, label maps or auto_map), so the cases are not mostly unread fields.
  const read = all.filter((p) => p[0] !== "vision_config" && !["auto_map", "id2label", "label2id", "architectures"].includes(p[1] ?? p[0]!) && typeof p.reduce((o: any, k) => o?.[k], j) !== "string");
  const path = rng.int(4) ? rng.pick(read) : rng.pick(all);
  let parent = j;
  for (const k of path.slice(0, -1)) parent = parent[k];
  const key = path.at(-1)!;
  const name = path.join(".");
  const free = FREE.has(name);
  const v = free ? rng.pick(name.endsWith("token_id") ? REFUSED_FOR_IDS : REFUSED_FOR_FREE) : rng.int(8) === 0 ? undefined : wildValue(rng, parent[key]);
  if (v === undefined && !Array.isArray(parent)) delete parent[key];
  else parent[key] = v ?? null;
  writeFileSync(f, JSON.stringify(j, null, 2));
  return `config ${name} = ${v === undefined ? "(deleted)" : JSON.stringify(v)}`;
}

/** A shard's header as [length field, JSON bytes, data bytes]. */
function splitShard(b: Buffer): { n: number; header: Buffer; data: Buffer } {
  const n = Number(b.readBigUInt64LE(0));
  return { n, header: b.subarray(8, 8 + n), data: b.subarray(8 + n) };
}

function joinShard(n: number, header: Buffer, data: Buffer): Buffer {
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(n));
  return Buffer.concat([len, header, data]);
}

function mutateHeader(rng: Rng, dir: string): string {
  const shards = readdirSync(dir).filter((s) => s.endsWith(".safetensors")).sort();
  const name = rng.pick(shards);
  const f = join(dir, name);
  const b = readFileSync(f);
  const { n, header, data } = splitShard(b);
  // Weights (of 20): 4 a bit flip, 6 the length field, 3 the end of the file, 7 one tensor entry.
  const roll = rng.int(20);
  switch (roll < 4 ? 0 : roll < 10 ? 1 : roll < 13 ? 2 : 3) {
    case 0: {
      // A byte of the length field or the header JSON.
      const at = rng.int(8 + n);
      const out = Buffer.from(b);
      out[at] = out[at]! ^ (1 << rng.int(8));
      writeFileSync(f, out);
      return `${name}: bit flip at header byte ${at}`;
    }
    case 1: {
      // The length field off by a little. Mostly short, over padding spaces, so the JSON still
      // parses and only the tiling rule can tell the data section moved (the subtle case).
      const delta = rng.int(4) ? -(1 + rng.int(3)) : 1 + rng.int(3);
      const pad = Math.max(0, -delta) + rng.int(6);
      const padded = Buffer.concat([header, Buffer.alloc(pad, 0x20)]);
      writeFileSync(f, joinShard(padded.length + delta, padded, data));
      return `${name}: header padded by ${pad}, length field off by ${delta}`;
    }
    case 2: {
      // Bytes cut from or added to the end of the data.
      const k = 1 + rng.int(64);
      writeFileSync(f, rng.int(2) ? b.subarray(0, b.length - k) : Buffer.concat([b, Buffer.alloc(k)]));
      return `${name}: ${k} bytes cut or appended at the end`;
    }
    default: {
      // One field of one tensor entry, re-serialised; padded back to the same length when it
      // fits, so the data section does not move (the subtle case).
      const j = JSON.parse(header.toString("utf8"));
      const names = Object.keys(j);
      const t = rng.pick(names);
      const field = rng.pick(["dtype", "shape", "data_offsets", "name", "delete", "shape-dim"]);
      const e = j[t];
      let what: string;
      if (field === "delete") {
        delete j[t];
        what = "deleted";
      } else if (field === "name") {
        const other = rng.pick(names);
        j[other === t ? `${t}.x` : other] = e;
        if (other !== t) delete j[t];
        what = `renamed to ${other === t ? `${t}.x` : other}`;
      } else if (t === "__metadata__" || e === null || typeof e !== "object") {
        j[t] = wildValue(rng, e);
        what = `set to ${JSON.stringify(j[t])}`;
      } else if (field === "shape-dim" && Array.isArray(e.shape) && e.shape.length) {
        const i = rng.int(e.shape.length);
        e.shape[i] = rng.pick([e.shape[i] + 1, e.shape[i] - 1, e.shape[i] * 2, 0, 1]);
        what = `shape[${i}] = ${e.shape[i]}`;
      } else if (field === "data_offsets" && Array.isArray(e.data_offsets)) {
        const i = rng.int(2);
        e.data_offsets[i] = rng.pick([e.data_offsets[i] + 1, e.data_offsets[i] - 1, 0, e.data_offsets[1 - i]]);
        what = `data_offsets[${i}] = ${e.data_offsets[i]}`;
      } else if (field === "dtype") {
        e.dtype = rng.pick(["F16", "BF16", "F32", "U8", "I8", "F64", "X", 7]);
        what = `dtype = ${JSON.stringify(e.dtype)}`;
      } else {
        e[field] = wildValue(rng, e[field]);
        what = `${field} = ${JSON.stringify(e[field])}`;
      }
      let json = Buffer.from(JSON.stringify(j));
      if (json.length <= n) json = Buffer.concat([json, Buffer.alloc(n - json.length, 0x20)]);
      writeFileSync(f, joinShard(json.length, json, data));
      return `${name}: tensor ${t} ${what}`;
    }
  }
}

function mutateSession(rng: Rng, file: string): string {
  const b = readFileSync(session);
  const n = b.readUInt32LE(8);
  switch (rng.int(4)) {
    case 0: {
      const at = rng.int(b.length);
      const out = Buffer.from(b);
      out[at] = out[at]! ^ (1 << rng.int(8));
      writeFileSync(file, out);
      return `session: bit flip at byte ${at} of ${b.length} (header ends at ${12 + n})`;
    }
    case 1: {
      const k = 1 + rng.int(64);
      writeFileSync(file, rng.int(2) ? b.subarray(0, b.length - k) : Buffer.concat([b, Buffer.alloc(k)]));
      return `session: ${k} bytes cut or appended`;
    }
    default: {
      const h = JSON.parse(b.subarray(12, 12 + n).toString("utf8"));
      const path = rng.pick(leaves(h).filter((p) => p[0] !== "history" || rng.int(4) === 0));
      let parent = h;
      for (const k of path.slice(0, -1)) parent = parent[k];
      const key = path.at(-1)!;
      const v = rng.int(8) === 0 ? undefined : wildValue(rng, parent[key]);
      if (v === undefined && !Array.isArray(parent)) delete parent[key];
      else parent[key] = v ?? null;
      const json = Buffer.from(JSON.stringify(h));
      const head = Buffer.from(b.subarray(0, 12));
      head.writeUInt32LE(json.length, 8);
      writeFileSync(file, Buffer.concat([head, json, b.subarray(12 + n)]));
      return `session header ${path.join(".")} = ${v === undefined ? "(deleted)" : JSON.stringify(v)}`;
    }
  }
}

function modelCopy(): string {
  const d = scratchDir("fuzz");
  cpSync(clean, d, { recursive: true });
  rmSync(join(d, "k3-index.json"), { force: true });
  return d;
}

describe(`fuzzed inputs through the compiled binary (seeds ${BASE}…, ${CASES} per kind)`, () => {
  const kinds: [string, (rng: Rng) => { what: string; result: ReturnType<typeof k3>; clean: string; cleanup: string }][] = [
    ["safetensors headers", (rng) => {
      const d = modelCopy();
      const what = mutateHeader(rng, d);
      return { what, result: k3(["run", d, ...RUN]), clean: want.run, cleanup: d };
    }],
    ["config.json", (rng) => {
      const d = modelCopy();
      const what = mutateConfig(rng, d);
      return { what, result: k3(["run", d, ...RUN]), clean: want.run, cleanup: d };
    }],
    ["session files", (rng) => {
      const d = scratchDir("fuzz-s");
      const f = join(d, "s.k3s");
      const what = mutateSession(rng, f);
      return { what, result: k3(["run", clean, "--load-session", f, ...RESUME]), clean: want.resume, cleanup: d };
    }],
  ];
  for (const [k, [kind, run]] of kinds.entries())
    test(kind, () => {
      const failures: string[] = [];
      let refused = 0;
      for (let i = 0; i < CASES; i++) {
        const seed = BASE + k * 100_000 + i;
        const { what, result, clean, cleanup } = run(new Rng(seed));
        const bad = judge(result, clean);
        if (!bad && result.code !== 0) refused++;
        if (process.env.K3_FUZZ_VERBOSE) console.error(`${seed} exit ${result.code}: ${what}`);
        if (bad) failures.push(`seed ${seed} (K3_FUZZ_SEED=${seed - k * 100_000} K3_FUZZ_CASES=1 replays it): ${what} → ${bad}`);
        else rmSync(cleanup, { recursive: true, force: true });
      }
      expect(failures).toEqual([]);
      const least = Math.ceil(MIN_REFUSED[kind]! * CASES);
      if (CASES >= MIN_CASES) expect({ kind, refused, atLeast: refused >= least }).toEqual({ kind, refused, atLeast: true });
    }, 120_000);
});
