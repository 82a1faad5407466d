// `k3 serve` as a process: starts on a random port, logs the bound URL on stderr, answers, and
// exits 0 on SIGTERM.
import { expect, test } from "bun:test";
import { tinyModel } from "./helpers/models.ts";

test("k3 serve --port 0 prints its URL, serves, and stops on SIGTERM", async () => {
  const dir = await tinyModel("tiny-a");
  const proc = Bun.spawn([process.execPath, "src/cli/main.ts", "serve", dir, "--port", "0", "--threads", "1", "--model-name", "demo"], {
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
