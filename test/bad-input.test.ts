// Bad input meets the compiled binary (issue 9 items 2, 3, 5, 6, 11, 12; issue 17 item 3): each
// case is refused with a k3 error naming the file or field, the documented exit code (2 usage /
// config, 4 bad model or data), nothing on stdout and no stack trace — never a hang, never ids
// from the wrong bytes. docs/CHECKPOINT.md § "Bad input" lists the same cases.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openCheckpoint } from "../src/checkpoint/catalogue.ts";
import { expertTensorNames, LM_MODEL_PREFIX } from "../src/checkpoint/shapes.ts";
import { compiledK3, STACK_FRAME, userEnv } from "./helpers/k3-binary.ts";
import { flipByte, scratchDir, tinyModel } from "./helpers/models.ts";

// Several spawns per test on a loaded 2-core machine; a hang is caught by the spawn guard first.
setDefaultTimeout(120_000);
let bin: string;
let clean: string; // tiny-a, never modified
let home: string;
const IDS = ["--ids", "5,6,7", "--gen", "4", "--threads", "1"];
/** A guard against hangs (a FIFO), not a timing assertion: generous for a loaded machine. */
const HANG_GUARD_MS = 60_000;

beforeAll(async () => {
  bin = compiledK3();
  clean = await tinyModel("tiny-a");
  home = scratchDir("bad-input-home");
}, 120_000);

function k3(args: string[], opts: { env?: Record<string, string>; shell?: string } = {}) {
  const cmd = opts.shell ? ["bash", "-c", `${opts.shell}; exec "$0" "$@"`, bin, ...args] : [bin, ...args];
  const p = Bun.spawnSync(cmd, { stdin: "ignore", env: opts.env ?? userEnv(home), timeout: HANG_GUARD_MS });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

/** A refusal as a user must see it: this exit code, the message, nothing on stdout, no stack. */
function expectRefused(r: ReturnType<typeof k3>, code: number, message: string | RegExp): void {
  expect(r.err).not.toMatch(STACK_FRAME);
  if (typeof message === "string") expect(r.err).toContain(message);
  else expect(r.err).toMatch(message);
  expect(r.out).toBe("");
  expect(r.code).toBe(code);
}

function copyModel(name: string): string {
  const d = scratchDir(name);
  cpSync(clean, d, { recursive: true });
  rmSync(join(d, "k3-index.json"), { force: true }); // the copy's own catalogue cache, if any
  return d;
}

function shards(d: string): string[] {
  return readdirSync(d).filter((f) => f.endsWith(".safetensors")).sort();
}

function editConfig(d: string, edit: (j: any) => void): void {
  const j = JSON.parse(readFileSync(join(d, "config.json"), "utf8"));
  edit(j);
  writeFileSync(join(d, "config.json"), JSON.stringify(j));
}

describe("a shard whose header does not describe its bytes is refused at open (issue 9 item 2)", () => {
  test("header-length field one byte short (the header ends in padding, so the JSON still parses)", () => {
    const d = copyModel("len-short");
    const f = join(d, shards(d)[1]!);
    const b = readFileSync(f);
    const n = Number(b.readBigUInt64LE(0));
    const header = Buffer.concat([b.subarray(8, 8 + n), Buffer.from("  ")]); // safetensors pads with spaces
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(header.length - 1));
    writeFileSync(f, Buffer.concat([len, header, b.subarray(8 + n)]));
    // Before the fix: every tensor of the shard read one byte off, ids printed, exit 0.
    expectRefused(k3(["run", d, ...IDS]), 4, `${f}: shard does not match its header`);
    expectRefused(k3(["serve", d, "--port", "0", "--threads", "1"]), 4, "the file has 1 more byte(s)");
    expectRefused(k3(["verify", d]), 4, f);
  });

  test("bytes appended after the data section", () => {
    const d = copyModel("appended");
    const f = join(d, shards(d)[2]!);
    writeFileSync(f, Buffer.concat([readFileSync(f), Buffer.alloc(10)]));
    expectRefused(k3(["run", d, ...IDS]), 4, "the file has 10 more byte(s)");
  });
});

describe("a shard, config or session that is not a regular file is refused, never a hang (items 11, 12)", () => {
  test("a FIFO named as a shard", () => {
    const d = copyModel("fifo-shard");
    const f = join(d, shards(d)[3]!);
    rmSync(f);
    expect(Bun.spawnSync(["mkfifo", f]).exitCode).toBe(0);
    expectRefused(k3(["run", d, ...IDS]), 4, `${f}: shard is a FIFO (named pipe), expected a regular file`);
  });

  test("a FIFO as config.json (exit 2: a config problem)", () => {
    const d = copyModel("fifo-config");
    rmSync(join(d, "config.json"));
    expect(Bun.spawnSync(["mkfifo", join(d, "config.json")]).exitCode).toBe(0);
    expectRefused(k3(["run", d, ...IDS]), 2, "config is a FIFO (named pipe)");
  });

  test("a FIFO as the tokenizer (exit 2: a tokenizer problem)", () => {
    const d = copyModel("fifo-tokenizer");
    rmSync(join(d, "tiktoken.model"));
    expect(Bun.spawnSync(["mkfifo", join(d, "tiktoken.model")]).exitCode).toBe(0);
    expectRefused(k3(["run", d, "--prompt", "hi", "--gen", "2", "--threads", "1"]), 2, "tokenizer file is a FIFO (named pipe)");
  });

  test("a FIFO in place of k3's own files: the catalogue cache is rebuilt, the checksum file refused", () => {
    const d = copyModel("fifo-k3-files");
    const want = k3(["run", clean, ...IDS]);
    expect(Bun.spawnSync(["mkfifo", join(d, "k3-index.json")]).exitCode).toBe(0);
    const r = k3(["run", d, ...IDS]);
    expect(r.code).toBe(0);
    expect(r.out).toBe(want.out);
    expect(Bun.spawnSync(["mkfifo", join(d, "k3-checksums.json")]).exitCode).toBe(0);
    expectRefused(k3(["verify", d]), 4, "checksum file is a FIFO (named pipe)");
  });

  test("a directory named as a shard (EISDIR)", () => {
    const d = copyModel("dir-shard");
    const f = join(d, shards(d)[0]!);
    rmSync(f);
    mkdirSync(f);
    expectRefused(k3(["run", d, ...IDS]), 4, `${f}: shard is a directory, expected a regular file`);
  });

  test("--load-session naming a directory, or a FIFO", () => {
    const dir = scratchDir("session-dir");
    expectRefused(k3(["run", clean, "--load-session", dir, ...IDS]), 4, `${dir}: session file is a directory`);
    const fifo = join(dir, "s.k3s");
    expect(Bun.spawnSync(["mkfifo", fifo]).exitCode).toBe(0);
    expectRefused(k3(["run", clean, "--load-session", fifo, ...IDS]), 4, "session file is a FIFO");
  });
});

describe("a session header with a field of the wrong type names the field (item 12)", () => {
  let saved = "";
  beforeAll(() => {
    saved = join(scratchDir("sessions"), "ok.k3s");
    const r = k3(["run", clean, ...IDS, "--save-session", saved]);
    expect(r.code).toBe(0);
  });

  /** The saved session with its header JSON rewritten (payload unchanged). */
  function withHeader(edit: (h: any) => void): string {
    const b = readFileSync(saved);
    const n = b.readUInt32LE(8);
    const h = JSON.parse(b.subarray(12, 12 + n).toString("utf8"));
    edit(h);
    const json = Buffer.from(JSON.stringify(h));
    const head = Buffer.from(b.subarray(0, 12));
    head.writeUInt32LE(json.length, 8);
    const out = join(scratchDir("session-edit"), "s.k3s");
    writeFileSync(out, Buffer.concat([head, json, b.subarray(12 + n)]));
    return out;
  }

  const cases: [string, (h: any) => void, string][] = [
    ["model is a number", (h) => (h.model = 5), "model: expected the model fingerprint"],
    ["history is a string", (h) => (h.history = "abc"), "history: expected a list of token ids"],
    ["pos is a string", (h) => (h.pos = "3"), "pos: expected a non-negative integer"],
    ["pending is null", (h) => (h.pending = null), "pending: expected a list of token ids"],
    ["buffers hold numbers", (h) => (h.buffers = h.buffers.map(() => 1)), "buffers: expected a list of {name, bytes}"],
    ["crc32 is a string", (h) => (h.crc32 = "x"), "crc32: expected a 32-bit checksum"],
  ];
  for (const [name, edit, message] of cases)
    test(name, () => expectRefused(k3(["run", clean, "--load-session", withHeader(edit), ...IDS]), 4, message));

  test("the header is a list, not an object", () => {
    const f = withHeader(() => {});
    const b = readFileSync(f);
    const json = Buffer.from("[1,2]");
    const head = Buffer.from(b.subarray(0, 12));
    head.writeUInt32LE(json.length, 8);
    writeFileSync(f, Buffer.concat([head, json, b.subarray(12 + b.readUInt32LE(8))]));
    expectRefused(k3(["run", clean, "--load-session", f, ...IDS]), 4, "unknown session format (the header is not a JSON object)");
  });
});

describe("every config dimension is bounded, special ids inside the vocabulary (item 6, issue 17 item 3)", () => {
  const cases: [string, (j: any) => void, string][] = [
    ["num_experts 1e6 (once 9 GB RSS, then out of memory)", (j) => (j.text_config.num_experts = 1e6), "text_config.num_experts: 1000000 is implausible"],
    ["num_experts 1e9 (once an abort)", (j) => (j.text_config.num_experts = 1e9), "text_config.num_experts: 1000000000 is implausible"],
    ["max_position_embeddings 0", (j) => (j.text_config.max_position_embeddings = 0), "text_config.max_position_embeddings: expected an integer from 1"],
    ["eos_token_id outside the vocabulary", (j) => (j.eos_token_id = j.text_config.vocab_size), "eos_token_id: 1024 is outside the vocabulary"],
    ["moe_renormalize false", (j) => (j.text_config.moe_renormalize = false), "text_config.moe_renormalize: false is not supported"],
  ];
  for (const [name, edit, message] of cases)
    test(name, () => {
      const d = copyModel("config");
      editConfig(d, edit);
      expectRefused(k3(["run", d, ...IDS]), 2, message);
    });
});

describe("k3 verify checks what was recorded (item 5)", () => {
  test("without --record: a flipped expert byte, a flipped embedding row and a touched shard are refused", () => {
    const d = copyModel("verify-recorded");
    const rec = k3(["verify", d, "--record"]);
    expect(rec.code).toBe(0);
    expect(rec.out).toContain("embedding-row checksums");
    const ok = k3(["verify", d]);
    expect(ok.code).toBe(0);
    expect(ok.out).toContain("all match");

    const ck = openCheckpoint(d);
    const expert = ck.tensors.get(expertTensorNames(2, 3)[2]!)!;
    flipByte(expert.file, expert.offset + 5);
    // Before the fix: "sizes match their headers", exit 0.
    expectRefused(k3(["verify", d]), 4, /1 checksum\(s\) differ[\s\S]*expert 3 of layer 2/);
    flipByte(expert.file, expert.offset + 5); // restored
    expect(k3(["verify", d]).code).toBe(0);

    const embed = ck.tensors.get(`${LM_MODEL_PREFIX}embed_tokens.weight`)!;
    const row = 700;
    flipByte(embed.file, embed.offset + row * ck.config.hidden * 2 + 3);
    expectRefused(k3(["verify", d]), 4, `embedding row ${row} (${LM_MODEL_PREFIX}embed_tokens.weight)`);

    // Tied to the exact shard bytes: a shard modified since recording makes the record stale.
    const f = join(d, shards(d)[4]!);
    utimesSync(f, new Date(), new Date(Date.now() + 10_000));
    expectRefused(k3(["verify", d]), 4, `was recorded for other shard bytes (${shards(d)[4]} was modified after the checksums were recorded)`);
    expectRefused(k3(["run", d, ...IDS, "--verify"]), 4, "was recorded for other shard bytes");
  });

  test("a shard whose header changed with its size and mtime kept is refused too (the header hash)", () => {
    const d = copyModel("verify-header");
    expect(k3(["verify", d, "--record"]).code).toBe(0);
    expect(k3(["run", d, ...IDS]).code).toBe(0); // caches the catalogue
    // A header that ends in padding: a space turned into a tab is still valid JSON, so the
    // catalogue opens as before; only the recorded header hash can tell.
    const name = shards(d).find((s) => {
      const b = readFileSync(join(d, s));
      return b[8 + Number(b.readBigUInt64LE(0)) - 1] === 0x20;
    })!;
    const f = join(d, name);
    const b = readFileSync(f);
    b[8 + Number(b.readBigUInt64LE(0)) - 1] = 0x09;
    // The times put back to the nanosecond (`touch -r`): utimes from JS loses the sub-millisecond
    // part, which the catalogue cache would notice.
    const times = join(d, "times");
    writeFileSync(times, "");
    expect(Bun.spawnSync(["touch", "-r", f, times]).exitCode).toBe(0);
    writeFileSync(f, b);
    expect(Bun.spawnSync(["touch", "-r", times, f]).exitCode).toBe(0);
    expectRefused(k3(["verify", d]), 4, `was recorded for other shard bytes (${name}'s header changed)`);
    // run --verify too, though the catalogue cache (keyed by size and mtime) still holds the old header.
    expect(existsSync(join(d, "k3-index.json"))).toBe(true);
    expectRefused(k3(["run", d, ...IDS, "--verify"]), 4, `was recorded for other shard bytes (${name}'s header changed)`);
  });
});

describe("run --verify covers embedding rows (item 3)", () => {
  test("a flipped byte in the row of a prompt token stops generation naming the row, before any token", () => {
    const d = copyModel("verify-embed");
    expect(k3(["verify", d, "--record"]).code).toBe(0);
    const ck = openCheckpoint(d);
    const embed = ck.tensors.get(`${LM_MODEL_PREFIX}embed_tokens.weight`)!;
    flipByte(embed.file, embed.offset + 6 * ck.config.hidden * 2 + 11); // token 6 of --ids 5,6,7
    // Before the fix: different ids, exit 0 (an expert byte was caught, an embedding byte not).
    expectRefused(k3(["run", d, ...IDS, "--verify"]), 4, `embedding row 6 (${LM_MODEL_PREFIX}embed_tokens.weight) fails its checksum`);
  });
});

describe("verify --record when the model folder cannot take the file (item 12)", () => {
  test("a full disk everywhere: a clear error, no *.tmp left in the model folder or the cache", () => {
    const d = copyModel("full-disk");
    // RLIMIT_FSIZE stands in for a full disk: every write past 2 KiB fails (EFBIG), in both places.
    const r = k3(["verify", d, "--record"], { shell: "ulimit -f 2" });
    expectRefused(r, 4, "cannot write the checksums");
    expect(r.err).toContain("XDG_CACHE_HOME");
    expect(readdirSync(d).filter((f) => f.endsWith(".tmp"))).toEqual([]);
    const cache = join(home, ".cache", "k3", "checksums");
    expect(existsSync(cache) ? readdirSync(cache).filter((f) => f.endsWith(".tmp")) : []).toEqual([]);
  });

  test("the model folder refuses the file: it goes to the cache folder, and --verify finds it there", () => {
    const d = copyModel("blocked");
    mkdirSync(join(d, "k3-checksums.json")); // a directory in the way (chmod does not stop root)
    const r = k3(["verify", d, "--record"]);
    expect(r.code).toBe(0);
    expect(r.out).toContain(join(home, ".cache", "k3", "checksums"));
    expect(readdirSync(d).filter((f) => f.endsWith(".tmp"))).toEqual([]);
    expect(k3(["verify", d]).out).toContain("all match");
    expect(k3(["run", d, ...IDS, "--verify"]).code).toBe(0);
  });
});

describe("a cache folder that cannot be created (item 12)", () => {
  test("HOME pointing nowhere usable: a k3 error that says to set XDG_CACHE_HOME", () => {
    const dir = scratchDir("no-home");
    const file = join(dir, "a-file");
    writeFileSync(file, "");
    // HOME below a regular file: no one (not even root) can create it. No XDG_CACHE_HOME.
    const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: join(file, "home"), NO_COLOR: "1" };
    const r = k3(["run", "--prompt", "hi", "--gen", "2"], { env });
    expectRefused(r, 2, "set XDG_CACHE_HOME");
    expect(r.err).toContain(`cannot create k3's cache folder ${join(file, "home", ".cache", "k3")}`);
  });
});
