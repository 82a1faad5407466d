// `k3 tokenize` / `k3 detokenize` as a user runs them (spawned; input through files and stdin).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Tokenizer } from "../src/text/tokenizer.ts";
import { writeTokenizerFolder } from "../tools/gen/tokenizer.ts";

const CLI = [process.execPath, join(import.meta.dir, "../src/cli/main.ts")];
let root: string;
let dir: string;
let tok: Tokenizer;
const TEXT = "Hello <|open|> wörld 中文 👍🏽\r\n\ttabs  and   spaces\n";

function k3(args: string[], stdin?: string | Uint8Array) {
  const p = Bun.spawnSync([...CLI, ...args], {
    stdin: stdin === undefined ? "ignore" : typeof stdin === "string" ? Buffer.from(stdin) : stdin,
    env: { ...process.env, NO_COLOR: "1" },
  });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "k3-tokcli-"));
  dir = join(root, "tok");
  writeTokenizerFolder(dir, { vocab: 4096 });
  tok = Tokenizer.load(dir);
  writeFileSync(join(root, "in.txt"), TEXT);
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("k3 tokenize", () => {
  test("--file prints space-separated ids, specials disabled", () => {
    const r = k3(["tokenize", dir, "--file", join(root, "in.txt")]);
    expect(r.code).toBe(0);
    expect(r.out).toBe(`${tok.encode(TEXT).join(" ")}\n`);
    expect(r.out.split(" ").map(Number)).not.toContain(tok.specialId("<|open|>"));
  });
  test("stdin with --json and --specials", () => {
    const r = k3(["tokenize", dir, "-", "--json", "--specials"], TEXT);
    expect(r.code).toBe(0);
    const { ids } = JSON.parse(r.out);
    expect(ids).toEqual(tok.encodeWithSpecials(TEXT));
    expect(ids).toContain(tok.specialId("<|open|>"));
  });
  test("no text given: stdin is the text when it is not a terminal, like k3 run", () => {
    const r = k3(["tokenize", dir, "--json"], TEXT);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out).ids).toEqual(Tokenizer.load(dir).encode(TEXT));
  });
  test("both an argument and --file is a usage error (exit 2)", () => {
    expect(k3(["tokenize", dir, "-", "--file", join(root, "in.txt")]).code).toBe(2);
  });
  test("a folder without tokenizer files exits 2 and names the files", () => {
    const r = k3(["tokenize", root, "-"], "x");
    expect(r.code).toBe(2);
    expect(r.out).toBe("");
    expect(r.err).toContain("tiktoken.model");
  });
});

describe("k3 detokenize", () => {
  test("tokenize --json | detokenize - reproduces the file byte for byte", () => {
    const ids = k3(["tokenize", dir, "--file", join(root, "in.txt"), "--json"]).out;
    const r = k3(["detokenize", dir, "-"], ids);
    expect(r.code).toBe(0);
    expect(r.out).toBe(TEXT);
  });
  test("comma and space separated ids from --file", () => {
    const ids = tok.encode("split, ids");
    writeFileSync(join(root, "ids.txt"), `${ids.slice(0, 2).join(",")}\n${ids.slice(2).join("  ")}\n`);
    const r = k3(["detokenize", dir, "--file", join(root, "ids.txt")]);
    expect(r.code).toBe(0);
    expect(r.out).toBe("split, ids");
  });
  test("non-ids are a usage error; unknown ids a tokenizer error", () => {
    expect(k3(["detokenize", dir, "-"], "1 2 x").code).toBe(2);
    const r = k3(["detokenize", dir, "-"], "999999");
    expect(r.code).toBe(2);
    expect(r.err).toContain("not in the vocabulary");
  });
});
