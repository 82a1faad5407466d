// `k3 serve` as a process: starts on a random port, logs the bound URL on stderr, answers, and
// exits 0 on SIGTERM; its batching flags (--parallel, the prefix cache's) are checked, and the
// prefix cache's disk tier serves the next process.
import { expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { serveUrl } from "./helpers/k3-binary.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

test("k3 serve --port 0 prints its URL, serves, and stops on SIGTERM", async () => {
  const dir = await tinyModel("tiny-a");
  const page = "https://app.example.com";
  const proc = Bun.spawn([process.execPath, "src/cli/main.ts", "serve", dir, "--port", "0", "--threads", "1", "--model-name", "demo", "--alias", "kimi-k3", "--alias=moonshotai/Kimi-K3", "--cors", page], {
    stdout: "pipe",
    stderr: "pipe",
  });
  const reader = proc.stderr.getReader();
  let err = "";
  let url: string | undefined;
  while (!url) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`k3 serve exited early:\n${err}`);
    err += new TextDecoder().decode(value);
    url = /serving demo at (http:\/\/127\.0\.0\.1:\d+)\/v1/.exec(err)?.[1];
  }
  const models = (await (await fetch(`${url}/v1/models`)).json()) as any;
  expect(models.data[0].id).toBe("demo");
  const r = await fetch(`${url}/v1/completions`, { method: "POST", body: JSON.stringify({ model: "demo", prompt: "hi", max_tokens: 3 }) });
  expect(((await r.json()) as any).usage.completion_tokens).toBeGreaterThan(0);
  // Every --alias, in any case; --cors answers that origin's preflight.
  for (const name of ["KIMI-K3", "moonshotai/kimi-k3"]) expect((await fetch(`${url}/v1/models/${name}`)).status).toBe(200);
  expect((await fetch(`${url}/v1/models/other`)).status).toBe(404);
  const pf = await fetch(`${url}/v1/chat/completions`, { method: "OPTIONS", headers: { Origin: page, "Access-Control-Request-Method": "POST" } });
  expect(pf.status).toBe(204);
  expect(pf.headers.get("access-control-allow-origin")).toBe(page);
  proc.kill("SIGTERM");
  expect(await proc.exited).toBe(0);
  expect(await new Response(proc.stdout).text()).toBe(""); // stdout carries no logs
}, 30_000);

test("k3 serve refuses a bad --port with a usage error", async () => {
  const dir = await tinyModel("tiny-a");
  const proc = Bun.spawn([process.execPath, "src/cli/main.ts", "serve", dir, "--port", "http"], { stdout: "pipe", stderr: "pipe" });
  expect(await proc.exited).toBe(2);
  expect(await new Response(proc.stderr).text()).toContain("--port");
});

test("k3 serve refuses a --cors that is not an origin with a usage error", async () => {
  const dir = await tinyModel("tiny-a");
  const proc = Bun.spawn([process.execPath, "src/cli/main.ts", "serve", dir, "--port", "0", "--cors", "https://ok.example", "--cors", "app.example.com"], { stdout: "pipe", stderr: "pipe" });
  expect(await proc.exited).toBe(2);
  expect(await new Response(proc.stderr).text()).toContain(`--cors must be '*' or an origin such as https://app.example.com (scheme://host[:port], no path), got "app.example.com"`);
});

test("k3 serve refuses a bad --parallel, --prefix-cache-ram or --prefix-cache-disk with a usage error naming it", async () => {
  const dir = await tinyModel("tiny-a");
  for (const [flag, value] of [["--parallel", "0"], ["--parallel", "two"], ["--prefix-cache-ram", "1Q"], ["--prefix-cache-disk", "lots"]] as const) {
    const proc = Bun.spawn([process.execPath, "src/cli/main.ts", "serve", dir, "--port", "0", flag, value], { stdout: "pipe", stderr: "pipe" });
    expect(await proc.exited).toBe(2);
    const err = await new Response(proc.stderr).text();
    expect(err).toContain(flag);
    expect(err).toContain(value);
  }
});

test("k3 serve --parallel 2 --prefix-cache-dir: the disk tier outlives the process; the next server resends the prompt from it (cached_tokens), same reply", async () => {
  const dir = await tinyModel("tiny-a");
  const cache = scratchDir("serve-prefix-dir");
  // 70 tokens at --chunk 16: a snapshot at position 64 (the planner's chunk would be longer than
  // the prompt, and a prompt within one chunk leaves no snapshot).
  const prompt = Array.from({ length: 70 }, (_, i) => 20 + ((i * 37) % 500));
  const once = async () => {
    const proc = Bun.spawn([process.execPath, "src/cli/main.ts", "serve", dir, "--port", "0", "--threads", "1", "--parallel", "2", "--chunk", "16", "--prefix-cache-dir", cache], { stdout: "pipe", stderr: "pipe" });
    const url = await serveUrl(proc);
    const r = (await (await fetch(`${url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt, max_tokens: 4, temperature: 0 }) })).json()) as any;
    proc.kill("SIGTERM");
    expect(await proc.exited).toBe(0);
    return { ids: r.k3.token_ids as number[], cached: r.usage.prompt_tokens_details?.cached_tokens ?? 0 };
  };
  const first = await once();
  expect(first.cached).toBe(0);
  expect(readdirSync(cache).length).toBeGreaterThan(0); // closing the engine wrote its snapshots
  const second = await once();
  expect(second.ids).toEqual(first.ids);
  expect(second.cached).toBeGreaterThan(0);
  expect(second.cached).toBeLessThan(prompt.length);
}, 60_000);
