// Values a user types that used to mean something else (issue 21, items 6, 7 and 10), each refused
// as a usage error (exit 2) naming the flag or variable:
//  - an empty value for any option of any command (`--ram ""`, `--seed=`, `--api-key ""`: "the
//    default", or no authentication at all), and an option given twice (`--trunk a --trunk b`
//    took the last), unless it is repeatable by design: the parser's class, checked over every
//    command's table, and through the binary for the flags the issue names;
//  - `--ids 5,,6`; an API key no client can send (empty, surrounding spaces, control characters,
//    non-ASCII) or an empty `--host`; `serve --trace` with more than one parallel session;
//  - and messages that say enough: the budget below the floor in digits that differ, the prefix
//    cache's real limit, `K3_KERNELS` naming a missing or non-ELF file.
import { beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { argTable, parseCommandLine } from "../src/cli/args.ts";
import { allCommands } from "../src/cli/registry.ts";
import { Engine } from "../src/engine.ts";
import { K3Error } from "../src/errors.ts";
import { formatBytesApart } from "../src/format.ts";
import { apiKeyChecker } from "../src/server/auth.ts";
import { compiledK3, STACK_FRAME, userEnv } from "./helpers/k3-binary.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

let bin: string;
let model: string;
let home: string;
beforeAll(async () => {
  bin = compiledK3();
  model = await tinyModel("tiny-a");
  home = scratchDir("values-home");
}, 120_000);

function k3(args: string[], env: Record<string, string | undefined> = {}) {
  const p = Bun.spawnSync([bin, ...args], { stdin: "ignore", env: userEnv(home, env), timeout: 20_000 }); // a guard: a serve that starts would run on
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

/** A usage error (exit 2) whose message contains every `parts`, nothing on stdout, no stack. */
function expectUsage(r: ReturnType<typeof k3>, ...parts: string[]) {
  expect({ code: r.code, out: r.out }).toEqual({ code: 2, out: "" });
  for (const p of parts) expect(r.err).toContain(p);
  expect(r.err).not.toMatch(STACK_FRAME);
}

/** parseCommandLine's refusal (its message), or undefined when it accepts. */
function refusal(table: ReturnType<typeof argTable>, argv: string[], name: string): string | undefined {
  try {
    parseCommandLine(table, argv, name);
    return undefined;
  } catch (e) {
    expect(e).toBeInstanceOf(K3Error);
    expect((e as K3Error).code).toBe("USAGE");
    return (e as K3Error).message;
  }
}

describe("the parser's class: every option of every command", () => {
  test("an empty value is refused for every string option, in each spelling (--x \"\", --x=, -x \"\", -x=)", async () => {
    let checked = 0;
    for (const [name, cmd] of await allCommands()) {
      const table = argTable((cmd.args ?? {}) as never);
      for (const o of table.options.filter((x) => x.type === "string")) {
        for (const argv of [[`--${o.name}`, ""], [`--${o.name}=`], ...o.short.flatMap((s) => [[`-${s}`, ""], [`-${s}=`]])]) {
          expect({ name, argv, message: refusal(table, argv, name) }).toEqual({ name, argv, message: `${argv[0]!.split("=")[0]} needs a value, got an empty one` });
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(150); // the class, not a few flags
  });

  test("an option given twice is refused naming it (also across its spellings), unless repeatable by design", async () => {
    const repeatable: string[] = [];
    let checked = 0;
    for (const [name, cmd] of await allCommands()) {
      const table = argTable((cmd.args ?? {}) as never);
      for (const o of table.options) {
        const v = o.type === "string" ? ["x"] : [];
        const twice = [`--${o.name}`, ...v, `--${o.name}`, ...v];
        if (o.repeatable) {
          repeatable.push(`${name} --${o.name}`);
          expect(refusal(table, twice, name)).toBeUndefined();
          continue;
        }
        expect(refusal(table, twice, name)).toStartWith(`--${o.name} given twice: it takes one value; give it once`);
        for (const s of o.short) expect(refusal(table, [`-${s}`, ...v, `--${o.name}`, ...v], name)).toStartWith(`--${o.name} given twice (also as -${s})`);
        if (o.type === "boolean") expect(refusal(table, [`--${o.name}`, `--no-${o.name}`], name)).toStartWith(`--no-${o.name} given twice (also as --${o.name})`);
        checked++;
      }
    }
    expect(repeatable.sort()).toEqual(["bench --mirror", "chat --mirror", "chat --stop", "disks --mirror", "plan --mirror", "run --mirror", "run --stop", "serve --alias", "serve --cors", "serve --mirror"]);
    expect(checked).toBeGreaterThan(100);
  });
});

describe("through the binary", () => {
  test("empty values for the flags that used to mean 'default': --ram --context --threads --chunk --io-threads --temperature --seed", () => {
    for (const flag of ["--ram", "--context", "--threads", "--chunk", "--io-threads", "--temperature", "--seed"]) {
      expectUsage(k3(["run", model, "--ids", "5", "--gen", "2", flag, ""]), `${flag} needs a value, got an empty one`);
      expectUsage(k3(["run", model, "--ids", "5", "--gen", "2", `${flag}=`]), `${flag} needs a value, got an empty one`);
    }
    for (const flag of ["--port", "--queue", "--parallel", "--host", "--api-key"]) expectUsage(k3(["serve", model, flag, ""]), `${flag} needs a value, got an empty one`);
    expectUsage(k3(["serve", model, "--api-key="]), "--api-key needs a value, got an empty one");
  });

  test("a repeated single-valued flag is refused naming it; --stop repeats", () => {
    expectUsage(k3(["run", model, "--ids", "5", "--trunk", "int4", "--trunk", "bf16"]), "--trunk given twice: it takes one value; give it once");
    expectUsage(k3(["run", model, "--ids", "5", "-n", "4", "--gen", "8"]), "--gen given twice (also as -n)");
    expect(k3(["run", model, "--prompt", "hi", "--gen", "2", "--threads", "1", "--stop", "a", "--stop", "b"]).code).toBe(0);
  });

  test("--ids 5,,6 (and a leading or trailing comma) is refused; commas or spaces, one at a time, are ids", () => {
    for (const bad of ["5,,6", ",5", "5,", "5, ,6"]) expectUsage(k3(["run", model, "--ids", bad, "--gen", "1"]), "--ids: an empty id between commas");
    const good = k3(["run", model, "--ids", "5, 6 ,7", "--gen", "2", "--threads", "1", "--json"]);
    expect(good.code).toBe(0);
    expect(JSON.parse(good.out).prompt_ids).toEqual([5, 6, 7]);
  });

  test("an API key no client could send, or an empty host, is refused at start, naming where it came from", () => {
    expectUsage(k3(["serve", model, "--port", "0"], { K3_API_KEY: "" }), "K3_API_KEY: the API key is empty (that would switch authentication off)");
    for (const [key, why] of [[" secret", "spaces or tabs around it"], ["secret\t", "spaces or tabs around it"], ["sec\u0001ret", "control character"], ["clé", "non-ASCII"]] as const) {
      expectUsage(k3(["serve", model, "--port", "0", "--api-key", key]), "--api-key: the API key", why);
      expectUsage(k3(["serve", model, "--port", "0"], { K3_API_KEY: key }), "K3_API_KEY: the API key", why);
    }
    // The library refuses them too (a caller of startServer, no CLI first).
    expect(() => apiKeyChecker("")).toThrow("the API key is empty");
    expect(() => apiKeyChecker(" k")).toThrow("spaces or tabs around it");
    expect(() => apiKeyChecker("s3cret-key")).not.toThrow();
  });

  test("serve --trace with more than one parallel session is refused at start (the default --parallel included); --parallel 1 traces", async () => {
    const trace = join(scratchDir("trace"), "t.jsonl");
    expectUsage(k3(["serve", model, "--port", "0", "--trace", trace]), "--trace records one generation at a time", "add --parallel 1");
    expectUsage(k3(["serve", model, "--port", "0", "--trace", trace, "--parallel", "2"]), "(--parallel 2)");
    for (const parallel of [2, "auto"] as const) expect(() => Engine.open(model, { threads: 1, trace, parallel })).toThrow("--trace records one generation at a time");
    const e = Engine.open(model, { threads: 1, trace, parallel: 1 });
    try {
      for (const _ of e.generate(e.createSession(), [5, 6, 7], { maxTokens: 2 }));
    } finally {
      e.close();
    }
    expect(Bun.file(trace).size).toBeGreaterThan(0);
  });
});

describe("messages that say enough", () => {
  test("a budget just below the floor: the two figures differ as printed", () => {
    const probe = k3(["run", model, "--ids", "5", "--gen", "1", "--ram", "1M"]);
    const floor = Number(/need (\d+) bytes/.exec(probe.err)?.[1]);
    expect(floor).toBeGreaterThan(2 ** 20);
    const r = k3(["run", model, "--ids", "5", "--gen", "1", "--ram", String(floor - 2 ** 20)]);
    expect(r.code).toBe(3);
    const m = /RAM budget (\S+ \S+) is below the floor (\S+ \S+)/.exec(r.err);
    expect(m).not.toBeNull();
    expect(m![1]).not.toBe(m![2]);
    // The rule: the fewest decimals (2 to 6) that tell the figures apart, else bytes.
    expect(formatBytesApart(407896064, 410733056)).toEqual(["0.380 GiB", "0.383 GiB"]);
    expect(formatBytesApart(2 ** 30, 2 ** 30 + 1)).toEqual(["1073741824 bytes", "1073741825 bytes"]);
    expect(formatBytesApart(2 ** 31, 2 ** 31)).toEqual(["2.00 GiB", "2.00 GiB"]);
  });

  test("--prefix-cache-ram past the budget says the real limit (not 'must be ≥ 0 bytes')", () => {
    for (const size of ["99999T", "3G"])
      for (const cmd of [["serve", model, "--port", "0"], ["plan", model]]) {
        const r = k3([...cmd, "--ram", "2G", "--prefix-cache-ram", size]);
        expectUsage(r, "the prefix cache's RAM tier", "is more than the whole RAM budget 2.00 GiB it lives inside");
        expect(r.err).toMatch(/at most \d+\.\d\d GiB \(\d+ bytes\) fits this budget beside the model \(--prefix-cache-ram; 0 = no RAM tier\)/);
      }
  });

  test("K3_KERNELS naming a missing file or one that is not a shared library: a usage error naming it, not 'a bug in k3'", () => {
    const notElf = join(scratchDir("kernels"), "libkernels.so");
    writeFileSync(notElf, "not a library\n".repeat(512));
    for (const [path, why] of [["/nonexistent/libkernels.so", "no such file"], [notElf, "invalid ELF header"]] as const) {
      const r = k3(["run", model, "--ids", "5", "--gen", "1"], { K3_KERNELS: path });
      expectUsage(r, `K3_KERNELS=${path}`, why, "unset K3_KERNELS");
      expect(r.err).not.toContain("this is a bug");
    }
  });
});
