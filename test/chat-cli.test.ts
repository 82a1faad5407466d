// `k3 chat` as a user runs it (spawned from source): a JSON / JSONL conversation on stdin → the
// reply on stdout or --json; errors; and the interactive REPL driven through a pseudo-terminal.
import { beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConversation } from "../src/cli/chat-options.ts";
import { streamChat } from "../src/conversation.ts";
import { Engine } from "../src/engine.ts";
import { K3Error } from "../src/errors.ts";
import { tinyModel } from "./helpers/models.ts";
import { python, runInPty } from "./helpers/pty.ts";

const CLI = [process.execPath, "src/cli/main.ts"];

function env(extra: Record<string, string> = {}) {
  const e: Record<string, string | undefined> = { ...process.env, NO_COLOR: "1", ...extra };
  delete e.K3_MODEL;
  return e as Record<string, string>;
}

function k3(args: string[], stdin: string) {
  const p = Bun.spawnSync([...CLI, ...args], { stdin: Buffer.from(stdin), env: env() });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

let model: string;
let tmp: string;
beforeAll(async () => {
  model = await tinyModel("tiny-a");
  tmp = mkdtempSync(join(tmpdir(), "k3-chat-cli-"));
});

const convo = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Name a colour." },
];
const jsonl = convo.map((m) => JSON.stringify(m)).join("\n") + "\n";

describe("k3 chat, non-interactive", () => {
  test("JSONL and a JSON array give the same reply; --json matches the library's streamChat", () => {
    const args = ["chat", model, "--gen", "12", "--temperature", "0", "--no-think", "--json"];
    const a = k3(args, jsonl);
    expect(a.code).toBe(0);
    const b = k3(args, JSON.stringify(convo));
    const j = JSON.parse(a.out);
    expect({ ...JSON.parse(b.out), stats: null }).toEqual({ ...j, stats: null });
    expect(Object.keys(j).sort()).toEqual(["content", "finish_reason", "reasoning", "reasoning_cut", "stats", "tool_calls", "usage"]);
    const engine = Engine.open(model, { threads: 1 });
    try {
      const it = streamChat(engine, engine.createSession(), convo, { maxTokens: 12, thinking: false });
      let r = it.next();
      while (!r.done) r = it.next();
      expect(j.content).toBe(r.value.content);
      expect(j.reasoning).toBe("");
      expect(j.usage).toEqual({ prompt_tokens: r.value.usage.promptTokens, completion_tokens: r.value.usage.completionTokens, cached_tokens: 0 });
      expect(j.finish_reason).toBe(r.value.finishReason);
    } finally {
      engine.close();
    }
  });

  test("without --json stdout is the answer alone, then a newline", () => {
    const j = JSON.parse(k3(["chat", model, "--gen", "12", "--no-think", "--json"], jsonl).out);
    const r = k3(["chat", model, "--gen", "12", "--no-think"], jsonl);
    expect(r.code).toBe(0);
    expect(r.out).toBe(`${j.content}\n`);
    expect(r.err).toContain("tokens (prompt");
  });

  test("default sampling (temperature 1.0, seed 0) repeats; another seed or greedy differs", () => {
    const run = (...extra: string[]) => JSON.parse(k3(["chat", model, "--gen", "16", "--json", ...extra], jsonl).out);
    const a = run();
    expect(run()).toEqual({ ...a, stats: expect.anything() });
    const texts = [run("--seed", "5"), run("--temperature", "0")].map((r) => r.reasoning + r.content);
    expect(texts).not.toContain(a.reasoning + a.content);
  });

  test("thinking on (default) puts the text in the reasoning channel until the model closes it", () => {
    const j = JSON.parse(k3(["chat", model, "--gen", "8", "--json", "--temperature", "0"], jsonl).out);
    expect(j.reasoning.length).toBeGreaterThan(0);
  });

  test("bad input is a usage error naming the problem (exit 2)", () => {
    const notJson = k3(["chat", model], "{not json}\n");
    expect(notJson.code).toBe(2);
    expect(notJson.err).toContain("line 1");
    const noRole = k3(["chat", model], '[{"content":"hi"}]');
    expect(noRole.code).toBe(2);
    expect(noRole.err).toContain('"role"');
    expect(k3(["chat", model], "").code).toBe(2);
    expect(k3(["chat", model, "--effort", "medium"], jsonl).code).toBe(2);
    const badRole = k3(["chat", model], '[{"role":"robot","content":"hi"}]');
    expect(badRole.code).toBe(2);
    expect(badRole.err).toContain("robot");
  });
});

describe("parseConversation", () => {
  test("array, {messages}, single object, JSONL with blank lines", () => {
    const m = [{ role: "user", content: "a" }];
    expect(parseConversation(JSON.stringify(m), "x")).toEqual(m);
    expect(parseConversation(JSON.stringify({ messages: m }), "x")).toEqual(m);
    expect(parseConversation(JSON.stringify(m[0]), "x")).toEqual(m);
    expect(parseConversation(`\n${JSON.stringify(m[0])}\n\n${JSON.stringify(m[0])}\n`, "x")).toEqual([...m, ...m]);
    expect(() => parseConversation('{"role":"user"}\n{bad', "f.jsonl")).toThrow(K3Error);
    expect(() => parseConversation("[1]", "x")).toThrow("role");
  });
});

// The REPL needs a terminal (test/helpers/pty.ts); without python3 the test is skipped and says
// so in its name.
describe("k3 chat, interactive", () => {
  test.skipIf(!python)(`REPL on a terminal: a reply, /think, /save, /reset, /load, /stats, Ctrl-C stops a reply, /exit${python ? "" : " (SKIPPED: no python3 for a pty)"}`, () => {
    const saved = join(tmp, "conv.json");
    const r = runInPty(
      [...CLI, "chat", model, "--gen", "1000000", "--context", "1000000", "--threads", "1"],
      env(),
      [
        { text: "/think off\r", then: "> " },
        { text: "/save " + saved + "\r", then: "> " },
        { text: "hello\r" },
        // Ctrl-C while the reply streams (this conversation runs ~600 tokens before the model ends
        // it; we wait for ~40 bytes of it): the reply stops, the REPL stays.
        { text: "\x03", afterBytes: 40, then: "> " },
        { text: "/save " + saved + "\r", then: "> " },
        { text: "/stats\r", then: "> " },
        { text: "/reset\r", then: "> " },
        { text: "/load " + saved + "\r", then: "> " },
        { text: "/nope\r", then: "> " },
        { text: "/exit\r" },
      ],
      "> ",
    );
    expect(r.code).toBe(0);
    const out = r.out;
    expect(out).toContain("thinking off");
    expect(out).toContain("(stopped)");
    expect(out).toContain("last reply:");
    expect(out).toContain("· cancelled");
    expect(out).toContain("conversation cleared");
    expect(out).toContain(`loaded 2 messages from ${saved}`);
    expect(out).toContain("unknown command /nope");
    const conv = JSON.parse(readFileSync(saved, "utf8"));
    expect(conv).toHaveLength(2);
    expect(conv[0]).toEqual({ role: "user", content: "hello" });
    expect(conv[1].role).toBe("assistant");
    expect(conv[1].content.length).toBeGreaterThan(0);
  });
});

describe("REPL input: which line breaks end a message", () => {
  test("Enter alone ends one; breaks inside a bracketed paste (across chunks too) or inside one chunk do not", async () => {
    const { classifyBreaks } = await import("../src/cli/chat-input.ts");
    const st = { inPaste: false };
    expect(classifyBreaks("hello\r", st)).toEqual(["enter"]);
    expect(classifyBreaks("a\rb\r", st)).toEqual(["paste", "enter"]); // no marks: one chunk = a paste, its last Enter sends
    expect(classifyBreaks("a\r\nb", st)).toEqual(["paste"]); // CRLF counts once
    expect(classifyBreaks("\x1b[200~one\rtwo\r", st)).toEqual(["paste", "paste"]);
    expect(st.inPaste).toBe(true); // the paste continues in the next chunk
    expect(classifyBreaks("three\x1b[201~", st)).toEqual([]);
    expect(classifyBreaks("\r", st)).toEqual(["enter"]);
    expect(classifyBreaks("\x1b[200~x\ry\x1b[201~\r", { inPaste: false })).toEqual(["paste", "enter"]);
  });
});
