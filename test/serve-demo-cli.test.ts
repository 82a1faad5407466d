// `k3 serve` as a newcomer meets it, through the binary: no model given serves the demo (and says
// so), the chat page at / (and --no-webui), the first request (max_tokens 40 on the demo
// answers with content, not only reasoning), and the access log on stderr in both formats.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { compiledK3, serveUrl, userEnv } from "./helpers/k3-binary.ts";

const home = mkdtempSync(join(tmpdir(), "k3-serve-demo-"));
afterAll(() => rmSync(home, { recursive: true, force: true }));

/** Start `k3 serve --port 0 …args` on the demo; returns its URL, and stop() → all it wrote on stderr. */
async function serveDemo(args: string[] = []) {
  const p = Bun.spawn([compiledK3(), "serve", "--port", "0", "--threads", "1", ...args], { env: userEnv(home), stdout: "pipe", stderr: "pipe" });
  const [forUrl, all] = p.stderr.tee();
  const text = new Response(all).text(); // everything, once the process has exited
  const url = await serveUrl({ stderr: forUrl });
  return {
    url,
    async stop(): Promise<string> {
      p.kill("SIGTERM");
      expect(await p.exited).toBe(0);
      return await text;
    },
  };
}

const chatBody = (extra: Record<string, unknown> = {}) => ({
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ messages: [{ role: "user", content: "Hello" }], max_tokens: 40, ...extra }),
});

describe("k3 serve without a model", () => {
  test("serves the demo and says so; / is the chat page; max_tokens 40 still answers; one access-log line per request", async () => {
    const s = await serveDemo();
    const page = await fetch(`${s.url}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(page.headers.get("content-security-policy")).toMatch(/script-src 'sha256-[A-Za-z0-9+/=]+'/);
    expect(await page.text()).toContain("<title>k3 chat</title>");
    const models = (await (await fetch(`${s.url}/v1/models`)).json()) as any;
    expect(models.data[0].id).toBe("k3-demo");
    expect(models.data[0].k3.demo).toBe(true);
    const r = (await (await fetch(`${s.url}/v1/chat/completions`, chatBody())).json()) as any;
    // The request: before, all 40 tokens went to reasoning and content was "".
    expect(r.choices[0].message.content.length).toBeGreaterThan(0);
    expect(r.k3.reasoning_cut).toBe(true);
    const streamed = await (await fetch(`${s.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 5 }))).text();
    expect(streamed.endsWith("data: [DONE]\n\n")).toBe(true);
    const err = await s.stop();
    expect(err).toContain("NOT Kimi K3");
    expect(err).toMatch(/serving k3-demo \(the built-in demo model\) at http:\/\/127\.0\.0\.1:\d+\/v1/);
    expect(err).toMatch(/k3: GET \/ 200 \d+ ms\n/);
    expect(err).toMatch(/k3: GET \/v1\/models 200 \d+ ms\n/);
    expect(err).toMatch(/k3: POST \/v1\/chat\/completions 200 \d+\+40 tokens \(0 cached, length\) \d+ ms\n/);
    // The stream is logged once, when it ended, with its tokens.
    expect(err.match(/POST \/v1\/chat\/completions 200 \d+\+5 tokens/g)?.length).toBe(1);
  });

  test("--log-format json: one JSON object per request; --no-webui: / is 404", async () => {
    const s = await serveDemo(["--log-format", "json", "--no-webui"]);
    expect((await fetch(`${s.url}/`)).status).toBe(404);
    await (await fetch(`${s.url}/v1/chat/completions`, chatBody({ max_tokens: 3 }))).json();
    const lines = (await s.stop()).split("\n").filter((l) => l.startsWith("{"));
    const logged = lines.map((l) => JSON.parse(l));
    expect(logged.map((l) => [l.method, l.path, l.status])).toEqual([
      ["GET", "/", 404],
      ["POST", "/v1/chat/completions", 200],
    ]);
    expect(logged[1]).toMatchObject({ completion_tokens: 3, cached_tokens: 0, finish_reason: "length" });
    expect(logged[1].prompt_tokens).toBeGreaterThan(0);
    expect(typeof logged[1].ms).toBe("number");
    expect(Number.isNaN(Date.parse(logged[1].time))).toBe(false);
  });

  test("a bad --log-format is refused naming its choices (exit 2)", () => {
    const p = Bun.spawnSync([compiledK3(), "serve", "--log-format", "xml"], { env: userEnv(home), stderr: "pipe" });
    expect(p.exitCode).toBe(2);
    expect(p.stderr.toString()).toContain('--log-format must be text or json, got "xml"');
  });
});
