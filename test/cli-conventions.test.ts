// The command line as people who know llama.cpp and ollama use it, through the compiled binary
// with the exact flags and answers (issue 10's CLI section, issue 9 items 4, 12, 13): strict
// options and llama.cpp short forms, a positional prompt, colour only where it belongs, help /
// version / completion, chat input (piped text, pastes, """ blocks), the reasoning budget, one
// naming style for JSON, checks that fail early, and no stack trace ever.
//
// To see which of these fail without the changes: K3_TEST_BIN=/path/to/old/k3 bun test <this file>.
import { beforeAll, describe, expect, test } from "bun:test";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import pkg from "../package.json";
import { compiledK3, serveUrl, STACK_FRAME, userEnv } from "./helpers/k3-binary.ts";
import { tinyModel } from "./helpers/models.ts";
import { python, runInPty } from "./helpers/pty.ts";

let bin: string;
let tmp: string;
let model: string;
const PROMPT = "The capital of France is";

beforeAll(async () => {
  bin = compiledK3();
  tmp = mkdtempSync(join(tmpdir(), "k3-conventions-"));
  model = await tinyModel("tiny-a");
}, 120_000);

interface Opts {
  stdin?: string;
  env?: Record<string, string | undefined>;
  home?: string;
}

function k3(args: string[], o: Opts = {}) {
  const p = Bun.spawnSync([bin, ...args], {
    stdin: o.stdin === undefined ? "ignore" : Buffer.from(o.stdin),
    env: userEnv(o.home ?? join(tmp, "home"), o.env),
    cwd: tmp,
  });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

const ids = (r: { out: string }) => JSON.parse(r.out).generated_ids as number[];

describe("options: strict, with llama.cpp's short forms", () => {
  test("an unknown short option is refused like a long one (exit 2, named), before any model work", () => {
    const r = k3(["run", model, "--prompt", "hi", "-c", "3", "-t", "1", "-n", "4", "-zzz"]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("unknown option -zzz");
    expect(r.out).toBe("");
    expect(k3(["run", model, "-p", "hi", "-q"]).err).toContain("unknown option -q");
    const extra = k3(["run", model, "hi", "there"].concat(["again"]));
    expect(extra.code).toBe(2);
    expect(extra.err).toContain('unexpected arguments "there", "again"');
  });

  test("-m -p -n -c -t -b --temp -s mean --model --prompt --gen --context --threads --chunk --temperature --seed", () => {
    const long = k3(["run", "--model", model, "--prompt", PROMPT, "--gen", "5", "--context", "64", "--threads", "1", "--chunk", "4", "--temperature", "0.9", "--seed", "3", "--json"]);
    const short = k3(["run", "-m", model, "-p", PROMPT, "-n", "5", "-c", "64", "-t", "1", "-b", "4", "--temp", "0.9", "-s", "3", "--json"]);
    expect(long.code).toBe(0);
    expect(ids(short)).toEqual(ids(long));
    expect(ids(short)).toHaveLength(5);
    // Each short form is taken, not ignored: another seed changes the text, -n the count, -c the limit.
    expect(ids(k3(["run", "-m", model, "-p", PROMPT, "-n", "5", "--temp", "0.9", "-s", "4", "--json"]))).not.toEqual(ids(long));
    expect(ids(k3(["run", model, "-p", PROMPT, "-n2", "--json"]))).toHaveLength(2);
    const ctx = k3(["run", model, "-p", "word ".repeat(40), "-c", "16"]);
    expect(ctx.code).toBe(2);
    expect(ctx.err).toContain("exceeds the context limit (16 tokens)");
  });

  test('k3 run DIR "text": the second operand is the prompt; one operand is the prompt unless it is a folder', () => {
    const flag = k3(["run", model, "--prompt", PROMPT, "-n", "6"]);
    expect(flag.code).toBe(0);
    const positional = k3(["run", model, PROMPT, "-n", "6"]);
    expect(positional.code).toBe(0);
    expect(positional.out).toBe(flag.out);
    // One operand, model from $K3_MODEL or -m: the operand is the prompt.
    expect(k3(["run", PROMPT, "-n", "6"], { env: { K3_MODEL: model } }).out).toBe(flag.out);
    expect(k3(["run", "-m", model, PROMPT, "-n", "6"]).out).toBe(flag.out);
    // One operand that is a folder: the model (prompt on stdin).
    expect(k3(["run", model, "-n", "6"], { stdin: PROMPT }).out).toBe(flag.out);
    // Ambiguous single operands are refused with what to type instead.
    const file = join(tmp, "prompt.txt");
    writeFileSync(file, PROMPT);
    const f = k3(["run", file]);
    expect(f.code).toBe(2);
    expect(f.err).toContain("is a file, not a model folder");
    expect(f.err).toContain(`--prompt-file ${file}`);
    // A path that does not exist: the missing model folder it names (exit 4, as with -m DIR).
    const missing = k3(["run", "/models/Kimi-K3x"]);
    expect(missing.code).toBe(4);
    expect(missing.err).toContain("/models/Kimi-K3x: no such model folder (it does not exist)");
    expect(missing.err).toContain('k3 run --prompt "/models/Kimi-K3x"');
    const two = k3(["run", "-m", model, "a", "b"]);
    expect(two.code).toBe(2);
  });
});

describe("colour only on a terminal, and never when NO_COLOR or FORCE_COLOR=0 says no", () => {
  const ESC = "\x1b[";
  test("help and errors written to a pipe carry no escape codes; FORCE_COLOR=1 forces them", () => {
    const plain = { NO_COLOR: undefined };
    const help = k3(["run", "--help"], { env: plain });
    expect(help.code).toBe(0);
    expect(help.out).not.toContain(ESC);
    const err = k3(["run", "--bogus"], { env: plain });
    expect(err.code).toBe(2);
    expect(err.err).not.toContain(ESC);
    expect(k3(["run", "--help"], { env: { NO_COLOR: undefined, FORCE_COLOR: "1" } }).out).toContain(ESC);
  });

  test.skipIf(!python)(`on a terminal: colour by default, none with FORCE_COLOR=0 or NO_COLOR=1${python ? "" : " (SKIPPED: no python3 for a pty)"}`, () => {
    const env = (e: Record<string, string>) => ({ ...userEnv(join(tmp, "home"), { NO_COLOR: undefined }), ...e });
    expect(runInPty([bin, "run", "--help"], env({})).out).toContain(ESC);
    expect(runInPty([bin, "run", "--help"], env({ FORCE_COLOR: "0" })).out).not.toContain(ESC);
    expect(runInPty([bin, "run", "--help"], env({ NO_COLOR: "1" })).out).not.toContain(ESC);
    expect(runInPty([bin, "run", "--bogus"], env({ FORCE_COLOR: "0" })).out).not.toContain(ESC);
    // k3 chat shows reasoning on the terminal dimmed, but not with NO_COLOR.
    const chat = (e: Record<string, string>) =>
      runInPty(["sh", "-c", `echo '{"role":"user","content":"hi"}' | "${bin}" chat "${model}" --gen 4 --threads 1`], env(e)).out;
    expect(chat({})).toContain("\x1b[2m");
    expect(chat({ NO_COLOR: "1" })).not.toContain("\x1b[2m");
  });
});

describe("progress", () => {
  test.skipIf(!python)(`on a terminal the load bar counts bytes and is erased; a pipe gets no bar${python ? "" : " (SKIPPED: no python3 for a pty)"}`, () => {
    const r = runInPty([bin, "run", model, "--prompt", "hi", "--gen", "2"], userEnv(join(tmp, "home")));
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/\r\x1b\[2Kloading pinned layers \[[# ]+\] [\d.]+ (B|KiB|MiB)\/[\d.]+ (KiB|MiB)[^\r]*\r\x1b\[2K/);
    expect(k3(["run", model, "--prompt", "hi", "--gen", "2"]).err).not.toContain("loading pinned layers");
  });
});

describe("help, version, completion", () => {
  test("k3 help and k3 version; --help has examples, environment variables and exit codes", () => {
    const main = k3(["--help"]);
    expect(main.code).toBe(0);
    expect(k3(["help"]).out).toBe(main.out);
    const run = k3(["run", "--help"]);
    expect(k3(["help", "run"]).out).toBe(run.out);
    for (const part of ["Examples:", 'k3 run "The capital of France is"', "Environment:", "K3_MODEL", "Exit codes:", "130", "-n, --gen, --n-predict N"]) expect(run.out).toContain(part);
    for (const part of ["Commands:", "Environment:", "Exit codes:"]) expect(main.out).toContain(part);
    expect(k3(["version"]).out).toBe(`${pkg.version}\n`);
    expect(k3(["--version"]).out).toBe(`${pkg.version}\n`);
    expect(k3(["help", "nope"]).code).toBe(2);
  });

  test("k3 completion bash: a working completion function (commands, options, fixed choices)", () => {
    const script = join(tmp, "k3.bash");
    const c = k3(["completion", "bash"]);
    expect(c.code).toBe(0);
    writeFileSync(script, c.out);
    const complete = (...words: string[]) =>
      Bun.spawnSync(["bash", "-c", `source "${script}"; COMP_WORDS=(${words.map((w) => `"${w}"`).join(" ")}); COMP_CWORD=${words.length - 1}; _k3; echo "\${COMPREPLY[*]}"`]).stdout.toString().trim();
    expect(complete("k3", "ru")).toBe("run");
    expect(complete("k3", "run", "--to")).toBe("--top-k --top-p");
    expect(complete("k3", "chat", "--effort", "")).toBe("low high max none");
    expect(complete("k3", "run", "--isa", "avx")).toBe("avx2 avx512");
    expect(k3(["completion", "tcsh"]).code).toBe(2);
  });

  const zsh = Bun.which("zsh");
  const fish = Bun.which("fish");
  test("k3 completion zsh and fish: scripts those shells accept, naming every command and option", () => {
    const z = k3(["completion", "zsh"]).out;
    const f = k3(["completion", "fish"]).out;
    for (const s of [z, f]) for (const word of ["run", "chat", "serve", "top-p", "reasoning-budget", "avx512"]) expect(s).toContain(word);
    const checked: string[] = [];
    if (zsh) {
      writeFileSync(join(tmp, "_k3"), z);
      expect(Bun.spawnSync([zsh, "-n", join(tmp, "_k3")]).exitCode).toBe(0);
      checked.push("zsh");
    }
    if (fish) {
      writeFileSync(join(tmp, "k3.fish"), f);
      const r = Bun.spawnSync([fish, "-c", `source ${join(tmp, "k3.fish")}; complete -C "k3 run --to"`]);
      expect(r.exitCode).toBe(0);
      expect(r.stdout.toString()).toContain("--top-p");
      checked.push("fish");
    }
    // Say what was not run, rather than pass silently.
    if (checked.length < 2) console.log(`completion: ${["zsh", "fish"].filter((s) => !checked.includes(s)).join(", ")} not installed: script content checked, shell not run`);
  });
});

describe("chat input: piped text, pastes, \"\"\" blocks", () => {
  test("plain text piped into k3 chat is one user message (JSON still works)", () => {
    const args = ["chat", model, "--json", "--no-think", "--temperature", "0", "--gen", "8"];
    const asJson = k3(args, { stdin: `${JSON.stringify({ role: "user", content: "Name a colour.\nJust one." })}\n` });
    const asText = k3(args, { stdin: "Name a colour.\nJust one.\n" });
    expect(asText.code).toBe(0);
    expect(JSON.parse(asText.out)).toEqual({ ...JSON.parse(asJson.out), stats: expect.anything() });
    const braces = k3([...args, "--text"], { stdin: "{not json} is fine as text\n" });
    expect(braces.code).toBe(0);
  });

  test.skipIf(!python)(`REPL: a paste is one message, lines typed during a reply are kept, """ blocks${python ? "" : " (SKIPPED: no python3 for a pty)"}`, () => {
    const saved = join(tmp, "pasted.json");
    const r = runInPty(
      [bin, "chat", model, "--gen", "3", "--threads", "1"],
      userEnv(join(tmp, "home")),
      [
        // A bracketed paste (what terminals send), then Enter.
        { text: "\x1b[200~line one\rline two\x1b[201~" },
        { text: "\r", then: "> " },
        // A terminal without bracketed paste: several lines in one chunk of input.
        { text: "a\rb\r", then: "> " },
        // A """ block typed line by line.
        { text: '"""\r', then: "... " },
        { text: "x\r", then: "... " },
        { text: "y\r", then: "... " },
        { text: '"""\r', then: "> " },
        { text: `/save ${saved}\r`, then: "> " },
        { text: "/stats\r", then: "> " },
        { text: "/exit\r" },
      ],
      "> ",
    );
    expect(r.code).toBe(0);
    const conv = JSON.parse(readFileSync(saved, "utf8")) as { role: string; content: string }[];
    expect(conv.filter((m) => m.role === "user").map((m) => m.content)).toEqual(["line one\nline two", "a\nb", "x\ny"]);
    expect(conv.filter((m) => m.role === "assistant")).toHaveLength(3);
    // /stats prints the engine's counters as JSON with snake_case keys.
    const statsLine = r.out.split(/\r?\n/).find((l) => l.startsWith('{"bytes_read"'));
    expect(statsLine).toBeDefined();
    expect(badKeys(JSON.parse(statsLine!))).toEqual([]);
  });
});

describe("reasoning budget: the reply always has room for its answer", () => {
  const hi = `${JSON.stringify({ role: "user", content: "hi" })}\n`;
  test("by default half of --gen; the reasoning is cut there, said so, and the answer follows", () => {
    const r = k3(["chat", model, "--json", "--gen", "16"], { stdin: hi });
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.reasoning_cut).toBe(true);
    expect(j.content.length).toBeGreaterThan(0);
    expect(j.usage.completion_tokens).toBe(16);
    const plain = k3(["chat", model, "--gen", "16"], { stdin: hi });
    expect(plain.err).toContain("reasoning cut at 8 tokens (--reasoning-budget)");
    expect(plain.out).toBe(`${j.content}\n`);
    // The reasoning before the cut is what the model wrote without a budget (same seed, same start).
    const free = JSON.parse(k3(["chat", model, "--json", "--gen", "16", "--reasoning-budget", "none"], { stdin: hi }).out);
    expect(free.reasoning_cut).toBe(false);
    expect(free.reasoning.startsWith(j.reasoning)).toBe(true);
    expect(free.reasoning.length).toBeGreaterThan(j.reasoning.length);
    // 0: the think channel is closed in the prompt; the model answers at once.
    const zero = JSON.parse(k3(["chat", model, "--json", "--gen", "4", "--reasoning-budget", "0"], { stdin: hi }).out);
    expect(zero.reasoning).toBe("");
    expect(zero.content.length).toBeGreaterThan(0);
  });
});

/** Keys anywhere in a JSON value that are not snake_case. */
function badKeys(v: unknown, path = ""): string[] {
  if (Array.isArray(v)) return v.flatMap((x, i) => badKeys(x, `${path}[${i}]`));
  if (v && typeof v === "object")
    return Object.entries(v).flatMap(([k, x]) => [...(/^[a-z0-9_]+$/.test(k) ? [] : [`${path}.${k}`]), ...badKeys(x, `${path}.${k}`)]);
  return [];
}

describe("consistency", () => {
  test("one naming style (snake_case) for JSON keys: run, chat, bench, the server's /k3/stats", async () => {
    const run = JSON.parse(k3(["run", model, "--ids", "1,2,3", "--gen", "3", "--json"]).out);
    const chat = JSON.parse(k3(["chat", model, "--json", "--gen", "4"], { stdin: "hi" }).out);
    const bench = k3(["bench", model, "--runs", "1", "--tokens", "2", "--json"]);
    expect(bench.code).toBe(0);
    expect({ run: badKeys(run), chat: badKeys(chat), bench: badKeys(JSON.parse(bench.out)) }).toEqual({ run: [], chat: [], bench: [] });
    // The same stats object everywhere: the server's `k3` object has the CLI's fields.
    const p = Bun.spawn([bin, "serve", model, "--port", "0", "--threads", "1"], { env: userEnv(join(tmp, "home")), stdout: "pipe", stderr: "pipe" });
    try {
      const url = await serveUrl(p);
      const done = (await (await fetch(`${url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: [1, 2, 3], max_tokens: 3 }) })).json()) as { k3: object };
      expect(Object.keys(done.k3).sort()).toEqual([...Object.keys(run.stats), "token_ids", "seed"].sort());
      const stats = await (await fetch(`${url}/k3/stats`)).json();
      expect(badKeys(stats)).toEqual([]);
    } finally {
      p.kill("SIGTERM");
      await p.exited;
    }
  });

  test("the other commands' --json too: info, plan, verify (with -m, like run), simulate-cache, tokenize", () => {
    const trace = join(tmp, "consistency.jsonl");
    expect(k3(["run", model, "--ids", "1,2,3", "--gen", "2", "--trace", trace]).code).toBe(0);
    const outputs = {
      info: k3(["info", "-m", model, "--json"]),
      plan: k3(["plan", "-m", model, "--json"]),
      verify: k3(["verify", "-m", model, "--json"]),
      simulate: k3(["simulate-cache", trace, "--slots", "1x", "--json"]),
      tokenize: k3(["tokenize", model, "hi", "--json"]),
    };
    const bad = Object.fromEntries(Object.entries(outputs).map(([cmd, r]) => [cmd, r.code === 0 ? badKeys(JSON.parse(r.out)) : [`exit ${r.code}: ${r.err}`]]));
    expect(bad).toEqual({ info: [], plan: [], verify: [], simulate: [], tokenize: [] });
  });

  test("errors name the flag as typed; the stats line says how a run ended in words", () => {
    const r = k3(["run", model, "--prompt", "hi", "--top-p", "1.5"]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("--top-p");
    expect(r.err).not.toContain("topP");
    const full = JSON.parse(k3(["run", model, "--prompt", PROMPT, "--gen", "12", "--json"]).out).generated_text as string;
    const stop = full.trim().slice(2, 4);
    const stopped = k3(["run", model, "--prompt", PROMPT, "--gen", "12", "--stop", stop]);
    expect(stopped.err).toContain("ended by the model or a stop string");
    expect(stopped.err).not.toContain("stop: stop");
  });

  test("--ram 12 (12 bytes) is refused with a hint; K3_LOG_LEVEL takes names; --threads over the cores warns", () => {
    const ram = k3(["run", model, "--prompt", "hi", "--ram", "12"]);
    expect(ram.code).toBe(2);
    expect(ram.err).toContain("did you mean --ram 12G");
    const silent = k3(["run", model, "--prompt", "hi", "--gen", "2"], { env: { K3_LOG_LEVEL: "silent" } });
    expect(silent.code).toBe(0);
    expect(silent.err).toBe("");
    const debug = k3(["run", model, "--prompt", "hi", "--gen", "2"], { env: { K3_LOG_LEVEL: "debug" } });
    expect(debug.code).toBe(0);
    expect(debug.err).toContain("tokens (prompt");
    const bad = k3(["run", model, "--prompt", "hi"], { env: { K3_LOG_LEVEL: "loud" } });
    expect(bad.code).toBe(2);
    expect(bad.err).toContain("K3_LOG_LEVEL");
    const cores = availableParallelism();
    if (cores < 64) {
      const over = k3(["run", model, "--prompt", "hi", "--gen", "2", "--threads", String(cores + 1)]);
      expect(over.code).toBe(0);
      expect(over.err).toContain(`--threads ${cores + 1} is more than this machine's ${cores} cores`);
    }
  });
});

describe("issue 9: ids from a tokenizer-less session, checks that come first", () => {
  test("run --load-session with an empty non-terminal stdin on a model without a tokenizer prints ids", () => {
    const bare = join(tmp, "no-tokenizer");
    cpSync(model, bare, { recursive: true });
    for (const f of ["tiktoken.model", "tokenizer_config.json"]) rmSync(join(bare, f));
    const session = join(tmp, "bare.k3s");
    const first = k3(["run", bare, "--ids", "1,2,3", "--gen", "2", "--save-session", session]);
    expect(first.code).toBe(0);
    const r = k3(["run", bare, "--load-session", session, "--gen", "3"], { stdin: "" });
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^\d+ \d+ \d+\n$/);
  });

  test("--threads 1000, --io-threads 100000, --gen 99999999999999999999, --save-session DIR: exit 2 before any work", () => {
    for (const [flag, value, says] of [
      ["--threads", "1000", "--threads must be an integer from 1 to 64"],
      ["--io-threads", "100000", "--io-threads must be an integer from 1 to"],
      ["--gen", "99999999999999999999", "--gen must be at most"],
      ["--save-session", tmp, "is a folder"],
    ] as const) {
      const r = k3(["run", model, "--prompt", "hi", ...(flag === "--gen" ? [] : ["--gen", "2"]), flag, value]); // --gen once (a repeat is refused too)
      expect({ flag, code: r.code }).toEqual({ flag, code: 2 });
      expect(r.err).toContain(says);
      expect(r.err).not.toContain("tokens (prompt"); // nothing was generated
    }
  });

  test("--ram past this machine's usable RAM: run, chat and serve refuse it (exit 3) unless --allow-over-ram; plan answers the what-if", () => {
    const over = ["--ram", "2000G"];
    for (const args of [["run", model, "--prompt", "hi", "--gen", "2"], ["chat", model, "--gen", "2"], ["serve", model, "--port", "0"]]) {
      const r = k3([...args, ...over], { stdin: "hi" });
      expect({ args, code: r.code }).toEqual({ args, code: 3 });
      expect(r.err).toContain("--allow-over-ram");
    }
    expect(k3(["run", model, "--prompt", "hi", "--gen", "2", ...over, "--allow-over-ram"]).code).toBe(0);
    expect(k3(["plan", model, ...over]).code).toBe(0);
  });

  test("no stack trace reaches a user: a folder as a shard, a folder as a session, a bad session header, an uncreatable cache, a folder as --trace", () => {
    const broken = join(tmp, "dir-shard");
    cpSync(model, broken, { recursive: true });
    const shard = readFileSync(join(model, "model.safetensors.index.json"), "utf8").match(/model-[^"]+\.safetensors/)![0];
    rmSync(join(broken, shard));
    mkdirSync(join(broken, shard));
    rmSync(join(broken, "k3-index.json"), { force: true });
    const session = join(tmp, "good.k3s");
    expect(k3(["run", model, "--ids", "1,2", "--gen", "2", "--save-session", session]).code).toBe(0);
    const bytes = readFileSync(session);
    const n = bytes.readUInt32LE(8);
    const header = JSON.parse(bytes.subarray(12, 12 + n).toString());
    const badHeader = join(tmp, "bad-header.k3s");
    const json = Buffer.from(JSON.stringify({ ...header, pending: { not: "a list" } }));
    const len = Buffer.alloc(4);
    len.writeUInt32LE(json.length);
    writeFileSync(badHeader, Buffer.concat([bytes.subarray(0, 8), len, json, bytes.subarray(12 + n)]));
    const cases: [string, string[], Opts][] = [
      ["a shard path that is a folder", ["run", broken, "--ids", "1,2", "--gen", "2"], {}],
      ["--load-session DIR", ["run", model, "--load-session", tmp, "--gen", "2"], { stdin: "" }],
      ["a session header with wrong field types", ["run", model, "--load-session", badHeader, "--gen", "2"], { stdin: "" }],
      ["a cache folder that cannot be created", ["run", "--prompt", "hi", "--gen", "2"], { env: { HOME: "/dev/null", XDG_CACHE_HOME: undefined } }],
      ["--trace naming a folder", ["run", model, "--ids", "1,2", "--gen", "2", "--trace", tmp], {}],
    ];
    for (const [what, args, o] of cases) {
      const r = k3(args, o);
      expect({ what, failed: r.code !== 0, stack: STACK_FRAME.test(r.err) }).toEqual({ what, failed: true, stack: false });
      expect(r.err).toContain("k3: error:");
    }
    expect(statSync(broken).isDirectory()).toBe(true);
  });
});
