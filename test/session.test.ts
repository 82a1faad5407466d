// Saved sessions (issue 5): save after N tokens, load, continue → the same ids as an
// uninterrupted run; another model's session or a corrupted file is refused.
import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Engine } from "../src/engine.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

const PROMPT = [5, 17, 300, 42, 7, 99, 3, 250];

function take(engine: Engine, session: ReturnType<Engine["createSession"]>, prompt: number[], n: number): number[] {
  const out: number[] = [];
  for (const t of engine.generate(session, prompt, { maxTokens: n })) out.push(t.id);
  return out;
}

describe("sessions", () => {
  test("save after N tokens, load in a fresh engine, continue: same ids and bits as never stopping", async () => {
    const dir = await tinyModel("tiny-a");
    const file = join(scratchDir("sess"), "s.k3session");
    const a = Engine.open(dir, { threads: 1 });
    const whole = take(a, a.createSession(), PROMPT, 12);
    const s = a.createSession();
    const first = take(a, s, PROMPT, 5);
    a.saveSession(s, file);
    a.close();
    expect(first).toEqual(whole.slice(0, 5));

    const b = Engine.open(dir, { threads: 2, ram: "1G" }); // another engine, budget and thread count
    try {
      const restored = b.loadSession(file);
      expect(restored.tokens).toEqual([...PROMPT, ...first]);
      const rest = take(b, restored, [], 7);
      expect([...first, ...rest]).toEqual(whole);
    } finally {
      b.close();
    }
  });

  test("a session from another model is refused, naming both", async () => {
    const file = join(scratchDir("sess-other"), "s.k3session");
    const a = Engine.open(await tinyModel("tiny-a"), { threads: 1 });
    const s = a.createSession();
    take(a, s, PROMPT, 2);
    a.saveSession(s, file);
    a.close();
    const b = Engine.open(await tinyModel("tiny-b"), { threads: 1 });
    try {
      expect(() => b.loadSession(file)).toThrow(/belongs to another model/);
    } finally {
      b.close();
    }
  });

  test("corrupted, truncated or foreign files are refused", async () => {
    const d = scratchDir("sess-bad");
    const file = join(d, "s.k3session");
    const a = Engine.open(await tinyModel("tiny-a"), { threads: 1 });
    try {
      const s = a.createSession();
      take(a, s, PROMPT, 3);
      a.saveSession(s, file);
      const bytes = readFileSync(file);
      const flipped = Buffer.from(bytes);
      flipped[flipped.length - 5] ^= 0xff;
      writeFileSync(join(d, "flip"), flipped);
      expect(() => a.loadSession(join(d, "flip"))).toThrow(/checksum mismatch/);
      writeFileSync(join(d, "short"), bytes.subarray(0, bytes.length - 100));
      expect(() => a.loadSession(join(d, "short"))).toThrow(/truncated/);
      writeFileSync(join(d, "junk"), "hello world, not a session");
      expect(() => a.loadSession(join(d, "junk"))).toThrow(/not a k3 session file/);
      expect(() => a.loadSession(join(d, "missing"))).toThrow(/cannot open session file/);
    } finally {
      a.close();
    }
  });
});

describe("k3 run --save-session / --load-session", () => {
  test("a run saved after 5 tokens and continued for 7 prints the same ids as one run of 12", async () => {
    const dir = await tinyModel("tiny-a");
    const file = join(scratchDir("sess-cli"), "s.k3session");
    const cli = (args: string[]) => {
      const p = Bun.spawnSync([process.execPath, "src/cli/main.ts", "run", dir, "--threads", "1", "--json", ...args], { stdin: "ignore", env: { ...process.env, NO_COLOR: "1" } });
      expect(p.exitCode).toBe(0);
      return JSON.parse(p.stdout.toString()).generated_ids as number[];
    };
    const whole = cli(["--ids", "5,17,300", "--gen", "12"]);
    const first = cli(["--ids", "5,17,300", "--gen", "5", "--save-session", file]);
    const rest = cli(["--load-session", file, "--gen", "7"]);
    expect([...first, ...rest]).toEqual(whole);
  });
});

describe("k3 chat --save-session / --load-session", () => {
  test("a second turn from a saved session answers exactly like a fresh run of the whole conversation", async () => {
    const dir = await tinyModel("tiny-a");
    const file = join(scratchDir("sess-chat"), "c.k3session");
    const chat = (messages: unknown[], extra: string[]) => {
      const p = Bun.spawnSync([process.execPath, "src/cli/main.ts", "chat", dir, "--json", "--gen", "6", "--temperature", "0", "--threads", "1", ...extra], {
        stdin: Buffer.from(JSON.stringify(messages)),
        env: { ...process.env, NO_COLOR: "1" },
      });
      expect(p.exitCode).toBe(0);
      return JSON.parse(p.stdout.toString());
    };
    const first = [{ role: "user", content: "hello there" }];
    const r1 = chat(first, ["--save-session", file]);
    const second = [...first, { role: "assistant", content: r1.content, reasoning_content: r1.reasoning || undefined }, { role: "user", content: "and then?" }];
    const resumed = chat(second, ["--load-session", file]);
    const fresh = chat(second, []);
    expect(resumed.content).toBe(fresh.content);
    expect(resumed.reasoning).toBe(fresh.reasoning);
    expect(fresh.usage.cached_tokens).toBe(0);
  });

  test("the saved messages come back with the session (what the REPL restores)", async () => {
    const dir = await tinyModel("tiny-a");
    const file = join(scratchDir("sess-meta"), "m.k3session");
    const e = Engine.open(dir, { threads: 1 });
    try {
      const s = e.createSession();
      e.prefill(s, PROMPT.slice(0, 3));
      const messages = [{ role: "user", content: "hi" }];
      e.saveSession(s, file, { messages });
      expect(e.loadSession(file).meta).toEqual({ messages });
    } finally {
      e.close();
    }
  });
});
