// Saved sessions (issue 5): save after N tokens, load, continue → the same ids as an
// uninterrupted run; another model's session or a corrupted file is refused.
import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chatPromptIds } from "../src/conversation.ts";
import { Engine } from "../src/engine.ts";
import { streamingBudget } from "./helpers/budgets.ts";
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
    expect(a.plan!.streamedLayers).toEqual([]);
    const whole = take(a, a.createSession(), PROMPT, 12);
    const s = a.createSession();
    const first = take(a, s, PROMPT, 5);
    a.saveSession(s, file);
    a.close();
    expect(first).toEqual(whole.slice(0, 5));

    // Another engine, thread count and budget: the floor (everything streamed through the rings),
    // where the first ran with every layer resident.
    const b = Engine.open(dir, { threads: 2, ram: String(streamingBudget(dir)) });
    try {
      expect({ pinned: b.plan!.pinnedPieces.length, ring: b.plan!.ringSlots }).toEqual({ pinned: 0, ring: 2 });
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
  test("a second turn from a saved session reuses its state and answers exactly like a fresh run", async () => {
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
    // A first turn that ended (random weights never end a reply): its prompt and a complete reply
    // run through the model, then saved with the messages, as `k3 chat --save-session` does.
    const first = [{ role: "user" as const, content: "hello there" }];
    const reply = "<|close|>think<|sep|><|open|>response<|sep|>hi<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";
    const e = Engine.open(dir, { threads: 1 });
    let held: number;
    try {
      const tok = e.tokenizer();
      const s = e.createSession();
      e.prefill(s, [...chatPromptIds(tok, first, {}), ...tok.encodeWithSpecials(reply)]);
      held = s.tokens.length;
      e.saveSession(s, file, { messages: [...first, { role: "assistant", content: "hi" }] });
    } finally {
      e.close();
    }
    const second = [...first, { role: "assistant", content: "hi" }, { role: "user", content: "and then?" }];
    const resumed = chat(second, ["--load-session", file]);
    const fresh = chat(second, []);
    // The loaded state is used: the whole first turn is reused, not recomputed (an ignored
    // --load-session would report 0), and the answer is the fresh run's.
    expect(resumed.usage.cached_tokens).toBe(held);
    expect(held).toBeGreaterThan(20);
    expect(fresh.usage.cached_tokens).toBe(0);
    expect(resumed.content).toBe(fresh.content);
    expect(resumed.reasoning).toBe(fresh.reasoning);
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
