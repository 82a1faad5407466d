// Every saved state is tied to what produced it (issue 21 item 1, docs/CHECKPOINT.md "Bad input"):
// session files and prefix-cache entries carry the model fingerprint and the exact weights — the
// trunk format, the pack's content when packed, each shard's stamp with a content sample — and are
// refused (a session: exit 4, naming why) or never used (a prefix-cache entry: left for the engine
// it belongs to, logged) under anything else: another trunk mode, another pack, a same-shape model
// with other weights (tools/gen --seed 2, even with the first one's mtimes), the same folder after
// its weights were replaced in place, a session saved by an older k3.
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { cpSync, readdirSync, readFileSync, renameSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PREFIX_FILE_SUFFIX, prefixFilePrefix } from "../src/batch/prefix-cache.ts";
import { Engine, packTrunk, type EngineOptions } from "../src/engine.ts";
import { K3Error } from "../src/errors.ts";
import { compiledK3, STACK_FRAME, userEnv } from "./helpers/k3-binary.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";
import { post, serve } from "./server.helpers.ts";

setDefaultTimeout(120_000);

const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20];

/** A scratch copy of a model (its own folder, so packs and edits stay in it). */
function copyOf(src: string, name: string): string {
  const d = scratchDir(name);
  cpSync(src, d, { recursive: true, preserveTimestamps: true });
  return d;
}

/** Give every shard of `dir` the mtime of the same-named shard of `like`. */
function sameTimes(dir: string, like: string): void {
  for (const f of readdirSync(dir).filter((n) => n.endsWith(".safetensors"))) {
    const st = statSync(join(like, f));
    utimesSync(join(dir, f), st.atime, st.mtime);
  }
}

function withEngine<T>(dir: string, opts: EngineOptions, f: (e: Engine) => T): T {
  const e = Engine.open(dir, { threads: 1, ...opts });
  try {
    return f(e);
  } finally {
    e.close();
  }
}

/** Save a session that generated a few tokens after PROMPT; returns the file and the ids. */
function saved(dir: string, opts: EngineOptions, file: string): number[] {
  return withEngine(dir, opts, (e) => {
    const s = e.createSession();
    const ids = [...e.generate(s, PROMPT, { maxTokens: 3 })].map((t) => t.id);
    e.saveSession(s, file);
    return ids;
  });
}

const loadError = (dir: string, opts: EngineOptions, file: string): K3Error | undefined =>
  withEngine(dir, opts, (e) => {
    try {
      e.loadSession(file).close();
      return undefined;
    } catch (err) {
      return err as K3Error;
    }
  });

let A = ""; // tiny-a, seed 1, packed int8 and int4
let B = ""; // tiny-a, seed 2: the same config and shapes, other weights, A's mtimes
let files = "";
beforeAll(async () => {
  A = copyOf(await tinyModel("tiny-a"), "state-a");
  B = copyOf(await tinyModel("tiny-a", { seed: 2 }), "state-b");
  sameTimes(B, A);
  for (const f of ["int8", "int4"] as const) packTrunk(A, f);
  files = scratchDir("state-files");
});

describe("session files", () => {
  test("another trunk mode is refused naming both; the same one loads and continues", () => {
    for (const [trunk, other] of [["bf16", "int4"], ["int4", "bf16"], ["int4", "int8"], ["int8", "int4"]] as const) {
      const file = join(files, `${trunk}.k3session`);
      saved(A, { trunk }, file);
      const err = loadError(A, { trunk: other }, file);
      expect(err?.code).toBe("SESSION");
      expect(err?.message).toContain(`saved by an engine running the ${trunk} trunk; this one runs ${other}`);
      expect(err?.message).toContain(`open the model with --trunk ${trunk} to use it`);
      expect(loadError(A, { trunk }, file)).toBeUndefined();
    }
  });

  test("a same-shape model with other weights (even with the same mtimes): refused, naming the shard whose content differs", () => {
    const file = join(files, "a.k3session");
    saved(A, {}, file);
    const err = loadError(B, {}, file);
    expect(err?.code).toBe("SESSION");
    expect(err?.message).toMatch(/was saved for other weights of this model \(model-\S+\.safetensors's content differs/);
    // Not a false alarm: B's own sessions load in B.
    saved(B, {}, join(files, "b.k3session"));
    expect(loadError(B, {}, join(files, "b.k3session"))).toBeUndefined();
  });

  test("the same folder after its weights were replaced in place (another model's shards copied over): refused", () => {
    const dir = copyOf(A, "state-updated");
    const file = join(files, "before-update.k3session");
    saved(dir, {}, file);
    for (const f of readdirSync(B).filter((n) => n.endsWith(".safetensors"))) cpSync(join(B, f), join(dir, f));
    expect(loadError(dir, {}, file)?.message).toMatch(/saved for other weights of this model/);
  });

  test("the same trunk mode with another pack (packed again from other shard bytes): refused", () => {
    const dir = copyOf(A, "state-repack");
    packTrunk(dir, "int4");
    const file = join(files, "old-pack.k3session");
    saved(dir, { trunk: "int4" }, file);
    for (const f of readdirSync(B).filter((n) => n.endsWith(".safetensors"))) cpSync(join(B, f), join(dir, f));
    packTrunk(dir, "int4");
    expect(loadError(dir, { trunk: "int4" }, file)?.message).toMatch(/saved with another int4 pack of this model/);
  });

  test("a moved session file still loads (nothing ties it to its path)", () => {
    const file = join(files, "here.k3session");
    const ids = saved(A, {}, file);
    const moved = join(scratchDir("state-moved"), "there.k3session");
    renameSync(file, moved);
    withEngine(A, {}, (e) => expect(e.loadSession(moved).tokens).toEqual([...PROMPT, ...ids]));
  });

  test("through the binary: another trunk, other weights, a session of an older k3: exit 4 naming why, no stack trace", () => {
    const home = scratchDir("state-home");
    const run = (args: string[]) => {
      const p = Bun.spawnSync([compiledK3(), "run", ...args, "--threads", "1"], { env: userEnv(home), stdin: "ignore" });
      return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
    };
    const file = join(files, "cli.k3session");
    expect(run([A, "--ids", PROMPT.join(","), "--gen", "2", "--trunk", "int4", "--save-session", file]).code).toBe(0);
    const old = join(files, "format1.k3session");
    writeFileSync(old, asFormat1(readFileSync(file)));
    const refused = (r: { code: number | null; out: string; err: string }, msg: string) => {
      expect(r.code).toBe(4);
      expect(r.err).toContain(msg);
      expect(r.err).not.toMatch(STACK_FRAME);
      expect(r.out).toBe("");
    };
    refused(run([A, "--load-session", file, "--gen", "2"]), "saved by an engine running the int4 trunk; this one runs bf16");
    expect(run([A, "--load-session", file, "--gen", "2", "--trunk", "int4"]).code).toBe(0);
    const bf = join(files, "cli-bf16.k3session");
    expect(run([A, "--ids", PROMPT.join(","), "--gen", "2", "--save-session", bf]).code).toBe(0);
    refused(run([B, "--load-session", bf, "--gen", "2"]), "was saved for other weights of this model");
    refused(run([A, "--load-session", old, "--gen", "2", "--trunk", "int4"]), "was saved by an older k3 (session format 1: not tied to the exact weights");
  });
});

/** The same session file as format 1 (what k3 wrote before issue 21): no `weights` field. */
function asFormat1(buf: Buffer): Buffer {
  const n = buf.readUInt32LE(8);
  const header = JSON.parse(buf.toString("utf8", 12, 12 + n));
  header.format = 1;
  delete header.weights;
  const json = Buffer.from(JSON.stringify(header));
  const head = Buffer.alloc(12);
  buf.copy(head, 0, 0, 8);
  head.writeUInt32LE(json.length, 8);
  return Buffer.concat([head, json, buf.subarray(12 + n)]);
}

describe("prefix-cache entries", () => {
  const open = (dir: string, cache: string, trunk: EngineOptions["trunk"] = "bf16") => Engine.open(dir, { threads: 1, trunk, parallel: 1, chunk: 8, prefixCache: { ramBytes: 0, dir: cache, diskBytes: 2 ** 30 } });
  const entries = (cache: string) => readdirSync(cache).filter((n) => n.endsWith(PREFIX_FILE_SUFFIX));
  const servers: { stop(): Promise<void> | void }[] = [];
  afterAll(async () => {
    for (const s of servers) await s.stop();
  });

  /** One completion through a server on `e`: its ids and cached tokens. */
  const ask = async (e: Engine) => {
    const s = serve(e, { modelName: "tiny-a" });
    servers.push(s);
    const r = (await (await post(`${s.url}/v1/completions`, { prompt: PROMPT, max_tokens: 6 })).json()) as any;
    await s.stop();
    return { ids: r.k3.token_ids as number[], cached: r.usage.prompt_tokens_details?.cached_tokens ?? 0 };
  };

  test("an int4 server's entries are never used by a bf16 server on the same folder (nor the other way), nor deleted", async () => {
    const cache = scratchDir("state-prefix");
    const want = {
      bf16: withEngine(A, { speculate: "off" }, (e) => [...e.generate(e.createSession(), PROMPT, { maxTokens: 6 })].map((t) => t.id)),
      int4: withEngine(A, { trunk: "int4", speculate: "off" }, (e) => [...e.generate(e.createSession(), PROMPT, { maxTokens: 6 })].map((t) => t.id)),
    };
    expect(want.int4).not.toEqual(want.bf16); // else a wrong restore could not show
    const e4 = open(A, cache, "int4");
    expect((await ask(e4)).ids).toEqual(want.int4);
    e4.close(); // persists its entries
    const int4Files = entries(cache);
    expect(int4Files.length).toBeGreaterThan(0);

    const e16 = open(A, cache);
    expect(e16.prefixStats()!.otherWeights).toBe(int4Files.length);
    const first = await ask(e16);
    expect(first).toEqual({ ids: want.bf16, cached: 0 }); // the case: it restored int4 state (cached 16)
    e16.close();
    expect(entries(cache)).toEqual(expect.arrayContaining(int4Files)); // left for the int4 engine

    // Each finds its own again, and only its own.
    const again16 = open(A, cache);
    expect(await ask(again16)).toEqual({ ids: want.bf16, cached: 16 });
    again16.close();
    const again4 = open(A, cache, "int4");
    expect(await ask(again4)).toEqual({ ids: want.int4, cached: 16 });
    again4.close();
  });

  test("a same-shape model with other weights on the same folder: the other's entries are not used", async () => {
    const cache = scratchDir("state-prefix-b");
    const ea = open(A, cache);
    await ask(ea);
    ea.close();
    const eb = open(B, cache);
    try {
      expect(eb.prefixStats()!.otherWeights).toBeGreaterThan(0);
      const wantB = withEngine(B, { speculate: "off" }, (e) => [...e.generate(e.createSession(), PROMPT, { maxTokens: 6 })].map((t) => t.id));
      expect(await ask(eb)).toEqual({ ids: wantB, cached: 0 });
    } finally {
      eb.close();
    }
  });

  test("a file named as this engine's but holding another's state is dropped at the scan, with the reason", async () => {
    const cache = scratchDir("state-prefix-renamed");
    const e4 = open(A, cache, "int4");
    await ask(e4);
    const own16 = withEngine(A, {}, (e) => prefixFilePrefix(e.identity));
    e4.close();
    for (const n of entries(cache)) renameSync(join(cache, n), join(cache, n.replace(/^[0-9a-f]{16}-[0-9a-f]{8}-/, own16)));
    const e16 = open(A, cache);
    try {
      expect(e16.prefixStats()!.dropped).toBeGreaterThan(0);
      expect(entries(cache)).toEqual([]);
    } finally {
      e16.close();
    }
  });
});
