// `k3 serve` as a process: starts on a random port, logs the bound URL on stderr, answers, and
// exits 0 on SIGTERM.
import { expect, test } from "bun:test";
import { tinyModel } from "./helpers/models.ts";

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
