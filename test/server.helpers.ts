// Shared by test/server*.test.ts: one tiny engine per test file, servers on random loopback ports,
// the engine's own greedy output for cross-checks, and a small SSE reader.
import { afterAll, beforeAll } from "bun:test";
import { connect } from "node:net";
import { Engine, parseAssistantOutput, renderChat, segmentsToIds, type AssistantOutput, type ChatMessage, type Session } from "../src/engine.ts";
import { startServer, type K3Server, type ServerOptions } from "../src/server/server.ts";
import { log } from "../src/log.ts";
import { tinyModel } from "./helpers/models.ts";

/** One compute thread: what the server tests prove does not depend on the count (outputs are
 *  bit-identical at any), and on a busy 2-core machine a second thread mostly waits for a core
 *  (measured: 2.5x the CPU time per request of tiny-a, load ~9). */
export async function openTinyEngine(): Promise<Engine> {
  return Engine.open(await tinyModel("tiny-a"), { threads: 1 });
}

/** Every session `engine` creates from now on (a server's own included), until `stop()`. C memory
 *  is counted process-wide and sessions other tests dropped are freed by a finalizer at any GC,
 *  so a server's sessions are checked by name, not by a global figure. */
export function watchSessions(engine: Engine): { sessions: Session[]; stop(): void } {
  const sessions: Session[] = [];
  const create = engine.createSession;
  engine.createSession = function (this: Engine) {
    const s = create.call(this);
    sessions.push(s);
    return s;
  };
  return { sessions, stop: () => void (engine.createSession = create) };
}

/** RSS once freed memory has gone back: the lowest of a few samples after full GCs. Bun's allocator
 *  returns pages on a background scavenger, so a sample right after one GC still counts some
 *  freed memory (in the full suite the load soak's growth read 35–57 MB in some runs, −20 MB in
 *  others). Both soaks (test/server-load, test/server-batch) read it at their start and end. */
export async function settledRss(): Promise<number> {
  let low = Infinity;
  for (let i = 0; i < 5; i++) {
    Bun.gc(true);
    await Bun.sleep(100);
    low = Math.min(low, process.memoryUsage().rss);
  }
  return low;
}

/** A server on `engine` as `k3 serve --temperature 0 --reasoning-budget none` starts one: requests
 *  that name no temperature are greedy and reasoning has no budget, so the tests here compare
 *  with the engine's own greedy output. The defaults clients meet (temperature from the model
 *  folder or 1.0, a fresh seed, half of max_tokens for reasoning) are tested with `defaults: true`
 *  (test/server-defaults.test.ts) and through the binary. */
export function serve(engine: Engine, opts: Partial<ServerOptions> & { defaults?: boolean } = {}): K3Server {
  const { defaults, ...rest } = opts;
  return startServer(engine, { modelName: "tiny-a", port: 0, ...(defaults ? {} : { temperature: 0, reasoningBudget: null }), ...rest });
}

/** A tiny engine and a server on it for the tests of the enclosing describe block (opened before
 *  its first test, closed after its last). */
export function tinyServerFixture(): { engine: () => Engine; server: () => K3Server } {
  let engine: Engine;
  let server: K3Server;
  beforeAll(async () => {
    engine = await openTinyEngine();
    server = serve(engine);
  });
  afterAll(async () => {
    await server.stop();
    engine.close();
  });
  return { engine: () => engine, server: () => server };
}

/** What the engine itself generates greedily for `prompt` in a fresh session, decoded the way
 *  the server decodes (streaming UTF-8), stopping at [EOS] like a completion does. */
export function directGreedy(engine: Engine, prompt: string | number[], maxTokens: number): { text: string; ids: number[] } {
  const tok = engine.tokenizer();
  const ids = typeof prompt === "string" ? tok.encode(prompt) : prompt;
  const session = engine.createSession();
  const dec = tok.decoder();
  const out: number[] = [];
  let text = "";
  for (const ev of engine.generate(session, ids, { maxTokens, stopIds: [tok.specialId("[EOS]")] })) {
    out.push(ev.id);
    text += dec.push(ev.id);
  }
  return { text: text + dec.flush(), ids: out };
}

/** What the engine itself answers greedily to a chat in a fresh session: the K3 chat format
 *  rendered and encoded, generation until <|end_of_msg|> / [EOS], the text parsed into reasoning
 *  and content. Uses nothing the server or src/conversation.ts use to do the same. */
export function directChatGreedy(engine: Engine, messages: ChatMessage[], maxTokens: number, thinking: boolean): AssistantOutput {
  const tok = engine.tokenizer();
  const ids = segmentsToIds(renderChat({ messages, thinking, add_generation_prompt: true }), tok);
  const stopIds = [tok.specialId("<|end_of_msg|>"), tok.specialId("[EOS]")];
  const out: number[] = [];
  for (const ev of engine.generate(engine.createSession(), ids, { maxTokens, stopIds })) out.push(ev.id);
  return parseAssistantOutput(tok.decode(out), thinking);
}

export interface SseEvent {
  data: any;
  /** Receive time (performance.now()) — used only for ORDER, never compared to a duration. */
  at: number;
}

/** Reads an SSE response to the end (or until `stopAfter` events), parsing each `data:` line.
 *  "[DONE]" comes back as the string "[DONE]". */
export async function readSse(res: Response, stopAfter = Infinity): Promise<SseEvent[]> {
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  const events: SseEvent[] = [];
  let buf = "";
  while (events.length < stopAfter) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut: number;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of frame.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const payload = line.slice(6);
        events.push({ data: payload === "[DONE]" ? "[DONE]" : JSON.parse(payload), at: performance.now() });
      }
    }
  }
  if (events.length >= stopAfter) await reader.cancel();
  // One network read can carry several frames: hand back exactly what was asked for.
  return Number.isFinite(stopAfter) ? events.slice(0, stopAfter) : events;
}

export const post = (url: string, body: unknown, init: RequestInit = {}) =>
  fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body), ...init });

/**
 * Polls `cond` on the event loop (the server runs in this process) until it holds. The limit only
 * turns a hang into an error that names what never happened; it is far above what any wait takes
 * on a busy machine (a few ms quiet), so it never decides a result.
 */
export async function until(cond: () => boolean, what: string, limitMs = 60_000): Promise<void> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > limitMs) throw new Error(`still waiting after ${limitMs / 1000} s (a hang) for: ${what}`);
    await Bun.sleep(1);
  }
}

export interface RawAnswer {
  /** Everything the server sent. */
  text: string;
  status: number;
  /** The JSON body, when there is one. */
  json: any;
  /** A socket error seen (e.g. ECONNRESET, EPIPE), if any. */
  error?: string;
}

/** Writes `data` on a fresh TCP connection to 127.0.0.1:port and collects what the server sends
 *  until it closes the connection (send `Connection: close` to make a keep-alive answer end). */
export function rawRequest(port: number, data: string | Uint8Array): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let error: string | undefined;
    const s = connect(port, "127.0.0.1", () => s.write(data));
    s.on("data", (d: Buffer) => chunks.push(d));
    s.on("error", (e) => (error = (e as NodeJS.ErrnoException).code ?? e.message));
    s.on("close", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const body = text.slice(text.indexOf("\r\n\r\n") + 4);
      let json: any;
      try {
        json = JSON.parse(body);
      } catch {
        json = undefined;
      }
      resolve({ text, status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? NaN), json, error });
    });
  });
}

/** What k3 logs (level and text) while `fn` runs, instead of writing it to the test's stderr: a
 *  negative test checks the server's error lines rather than printing them into a passing run. */
export async function capturedLog<T>(fn: () => Promise<T>): Promise<{ result: T; lines: { level: number; text: string }[] }> {
  const lines: { level: number; text: string }[] = [];
  const reporters = log.options.reporters;
  log.setReporters([{ log: (o) => lines.push({ level: o.level, text: o.args.map(String).join(" ") }) }]);
  try {
    return { result: await fn(), lines };
  } finally {
    log.setReporters(reporters);
  }
}
