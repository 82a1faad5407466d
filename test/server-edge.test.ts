// k3 serve at the HTTP edge, driven with raw sockets where a client library would hide the
// behaviour: old and odd requests (HTTP/1.0 without Host, HEAD, OPTIONS), browser CORS, and the
// bounds on receiving bodies (too large → 413 that the client can read, never finishing → 408,
// too many at once → 503, a client that leaves mid-upload is not an error), and a prompt refused
// by its byte size before it is encoded or queued.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect, type Socket } from "node:net";
import type { K3Server } from "../src/server/server.ts";
import { post, rawRequest, serve, tinyServerFixture, until } from "./server.helpers.ts";

const fx = tinyServerFixture();

const stats = async (s: K3Server) => ((await (await fetch(`${s.url}/k3/stats`)).json()) as any).server;

describe("old and odd requests", () => {
  test("HTTP/1.0 without a Host header is answered (GET and POST)", async () => {
    const models = await rawRequest(fx.server().port, "GET /v1/models HTTP/1.0\r\n\r\n");
    expect(models.status).toBe(200);
    expect(models.json.data[0].id).toBe("tiny-a");
    const body = JSON.stringify({ prompt: [5, 6, 7], max_tokens: 2 });
    const cmpl = await rawRequest(fx.server().port, `POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    expect(cmpl.status).toBe(200);
    expect(cmpl.json.object).toBe("text_completion");
  });

  test("HEAD is answered like GET, without a body", async () => {
    for (const path of ["/health", "/v1/models", "/v1/models/tiny-a", "/metrics", "/k3/stats"]) {
      const res = await fetch(`${fx.server().url}${path}`, { method: "HEAD" });
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toBe((await fetch(`${fx.server().url}${path}`)).headers.get("content-type"));
    }
    // On the wire: the GET's headers (its length included), then nothing.
    const get = await (await fetch(`${fx.server().url}/v1/models`)).text();
    const raw = await rawRequest(fx.server().port, "HEAD /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    expect(raw.status).toBe(200);
    expect(raw.text.toLowerCase()).toContain(`content-length: ${get.length}\r\n`);
    expect(raw.text.endsWith("\r\n\r\n")).toBe(true);
  });

  test("OPTIONS that is not a preflight lists the methods; a wrong method is 405 with Allow", async () => {
    const opt = await fetch(`${fx.server().url}/v1/chat/completions`, { method: "OPTIONS" });
    expect(opt.status).toBe(204);
    expect(opt.headers.get("allow")).toBe("POST, OPTIONS");
    const del = await fetch(`${fx.server().url}/v1/models`, { method: "DELETE" });
    expect(del.status).toBe(405);
    expect(del.headers.get("allow")).toBe("GET, HEAD, OPTIONS");
    expect(((await del.json()) as any).error.code).toBe("method_not_allowed");
  });
});

describe("CORS (opt-in)", () => {
  const page = "https://app.example.com";
  const preflight = (s: K3Server, origin: string, path = "/v1/chat/completions") =>
    fetch(`${s.url}${path}`, {
      method: "OPTIONS",
      headers: { Origin: origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os" },
    });

  test("off by default: no CORS headers, and a preflight is refused saying how to allow it", async () => {
    const res = await fetch(`${fx.server().url}/v1/models`, { headers: { Origin: page } });
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    const pf = await preflight(fx.server(), page);
    expect(pf.status).toBe(403);
    expect(pf.headers.get("access-control-allow-origin")).toBeNull();
    const body = (await pf.json()) as any;
    expect(body.error.code).toBe("cors_origin_not_allowed");
    expect(body.error.message).toContain(`--cors ${page}`);
  });

  describe("--cors ORIGIN with an API key", () => {
    let s: K3Server;
    beforeAll(() => {
      s = serve(fx.engine(), { cors: [page], apiKey: "k3y" });
    });
    afterAll(() => s.stop());

    test("the preflight from that origin needs no key and allows the asked headers", async () => {
      const pf = await preflight(s, page);
      expect(pf.status).toBe(204);
      expect(pf.headers.get("access-control-allow-origin")).toBe(page);
      expect(pf.headers.get("access-control-allow-methods")).toBe("GET, HEAD, POST, OPTIONS");
      expect(pf.headers.get("access-control-allow-headers")).toBe("authorization, content-type, x-stainless-os");
      expect(pf.headers.get("access-control-max-age")).toBe("600");
      expect(pf.headers.get("vary")).toContain("Origin");
    });

    test("answers to that origin carry Allow-Origin, errors included; other origins get none", async () => {
      const ok = await post(`${s.url}/v1/completions`, { prompt: [1, 2], max_tokens: 1 }, { headers: { Origin: page, Authorization: "Bearer k3y" } });
      expect(ok.status).toBe(200);
      expect(ok.headers.get("access-control-allow-origin")).toBe(page);
      expect(ok.headers.get("vary")).toBe("Origin");
      const noKey = await fetch(`${s.url}/v1/models`, { headers: { Origin: page } });
      expect(noKey.status).toBe(401);
      expect(noKey.headers.get("access-control-allow-origin")).toBe(page); // the page can read why
      const other = await fetch(`${s.url}/v1/models`, { headers: { Origin: "https://evil.example", Authorization: "Bearer k3y" } });
      expect(other.headers.get("access-control-allow-origin")).toBeNull();
      const pf = await preflight(s, "https://evil.example");
      expect(pf.status).toBe(403);
      expect(((await pf.json()) as any).error.message).toContain("add --cors https://evil.example");
    });
  });

  test("--cors '*' allows any origin", async () => {
    const s = serve(fx.engine(), { cors: ["*"] });
    try {
      const pf = await preflight(s, "http://localhost:3000");
      expect(pf.status).toBe(204);
      expect(pf.headers.get("access-control-allow-origin")).toBe("*");
      const res = await fetch(`${s.url}/v1/models`, { headers: { Origin: "http://localhost:3000" } });
      expect(res.headers.get("access-control-allow-origin")).toBe("*");
    } finally {
      await s.stop();
    }
  });

  test("an origin that is not one is refused at start", () => {
    expect(() => serve(fx.engine(), { cors: ["app.example.com"] })).toThrow(/--cors must be '\*' or an origin/);
    expect(() => serve(fx.engine(), { cors: ["https://app.example.com/path"] })).toThrow(/no path/);
  });
});

describe("request bodies", () => {
  test("over the limit → 413 with an OpenAI body, which a client that sends everything first can read", async () => {
    const s = serve(fx.engine(), { bodies: { maxBytes: 64 << 10 } });
    try {
      const big = Buffer.alloc(1 << 20, 0x61);
      // Content-Length declared: the whole body is written before the answer is read, as
      // Python's http.client does (a server that closes early resets it: EPIPE / ECONNRESET).
      const declared = await rawRequest(s.port, Buffer.concat([Buffer.from(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${big.length}\r\n\r\n`), big]));
      expect(declared.error).toBeUndefined();
      expect(declared.status).toBe(413);
      expect(declared.json.error).toMatchObject({ code: "request_too_large", type: "invalid_request_error" });
      expect(declared.json.error.message).toBe(`the request body (${big.length} bytes) is over the server's limit of ${64 << 10} bytes`);
      // Chunked, no length: refused once the limit is passed.
      const chunked = await rawRequest(s.port, Buffer.concat([Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n${big.length.toString(16)}\r\n`), big, Buffer.from("\r\n0\r\n\r\n")]));
      expect(chunked.status).toBe(413);
      expect(chunked.json.error.message).toBe(`the request body (more than ${64 << 10} bytes) is over the server's limit of ${64 << 10} bytes`);
      expect(s.bodies.tooLarge).toBe(2);
    } finally {
      await s.stop();
    }
  });

  test("a 100 MB prompt is refused with 413 at the default limit, and the server answers on", async () => {
    const res = await post(`${fx.server().url}/v1/chat/completions`, { messages: [{ role: "user", content: "a".repeat(100e6) }] });
    expect(res.status).toBe(413);
    expect(((await res.json()) as any).error.code).toBe("request_too_large");
    expect((await fetch(`${fx.server().url}/health`)).status).toBe(200);
  });

  test("a body that never finishes → 408 and the connection is closed", async () => {
    const s = serve(fx.engine(), { bodies: { timeoutMs: 200 } });
    try {
      const r = await rawRequest(s.port, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{");
      expect(r.status).toBe(408);
      expect(r.json.error).toMatchObject({ code: "request_timeout", message: "the request body did not arrive within 0.2 s" });
      expect(s.bodies.timedOut).toBe(1);
      expect(s.bodies.receiving).toBe(0);
    } finally {
      await s.stop();
    }
  });

  test("stop() does not wait for a body that is still arriving: the connection is cut", async () => {
    // A body deadline longer than this test's timeout: a stop that waited for it would time out.
    const s = serve(fx.engine(), { bodies: { timeoutMs: 600_000 } });
    const answer = rawRequest(s.port, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{");
    await until(() => s.bodies.receiving === 1, "upload started");
    await s.stop();
    const r = await answer; // the server closed the connection
    expect(r.text).toBe("");
    expect(s.bodies.timedOut).toBe(0);
  });

  test("250 bodies that never finish: 64 are held, 186 get 503 and are closed at once; /health and GETs answer", async () => {
    const s = serve(fx.engine());
    const sockets: Socket[] = [];
    const answers: string[] = [];
    let closed = 0;
    try {
      for (let i = 0; i < 250; i++) {
        const sock = connect(s.port, "127.0.0.1", () => sock.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"));
        let got = "";
        sock.on("data", (d) => (got += d.toString()));
        sock.on("error", () => {});
        sock.on("close", () => {
          closed++;
          answers.push(got);
        });
        sockets.push(sock);
      }
      await until(() => s.bodies.receiving + s.bodies.tooMany === 250, "every request seen");
      await until(() => closed === 186, "refused connections closed");
      expect(s.bodies.receiving).toBe(64);
      expect(s.bodies.tooMany).toBe(186);
      expect(answers.every((a) => a.startsWith("HTTP/1.1 503 ") && a.includes('"code":"too_many_connections"') && /retry-after: 1\r\n/i.test(a))).toBe(true);
      expect((await fetch(`${s.url}/health`)).status).toBe(200);
      expect((await fetch(`${s.url}/v1/models`)).status).toBe(200);
      // Another body now is refused the same way, with the time to retry.
      const busy = await post(`${s.url}/tokenize`, { content: "hi" });
      expect(busy.status).toBe(503);
      expect(busy.headers.get("retry-after")).toBe("1");
    } finally {
      for (const sock of sockets) sock.destroy();
    }
    await until(() => s.bodies.receiving === 0, "held bodies released");
    expect((await post(`${s.url}/tokenize`, { content: "hi" })).status).toBe(200);
    await s.stop();
  }, 120_000);

  test("a client that leaves mid-upload is answered 499, not counted or logged as an error", async () => {
    const s = serve(fx.engine());
    try {
      const sock = connect(s.port, "127.0.0.1", () => sock.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mess"));
      sock.on("error", () => {});
      await until(() => s.bodies.receiving === 1, "upload started");
      sock.destroy();
      await until(() => s.bodies.receiving === 0, "upload given up");
      expect((await stats(s)).errors).toBe(0);
      const metrics = await (await fetch(`${s.url}/metrics`)).text();
      expect(metrics).toContain('k3_requests_total{route="/v1/chat/completions",code="499"} 1\n');
    } finally {
      await s.stop();
    }
  });
});

describe("a prompt too long for the context, by its bytes", () => {
  test("is refused before it is encoded or queued (the engine is busy meanwhile)", async () => {
    const maxTok = fx.engine().tokenizer().maxTokenBytes;
    const url = fx.server().url;
    const long = new AbortController();
    const running = post(`${url}/v1/completions`, { prompt: [1, 2], max_tokens: 4000, stream: true }, { signal: long.signal });
    await until(() => fx.server().queue.running > 0, "long generation running");
    try {
      const text = "x".repeat(1 << 20); // 1 MiB: under the body limit, far over 4096 tokens of any text
      const atLeast = Math.ceil((1 << 20) / maxTok);
      for (const [path, body, param] of [
        ["/v1/completions", { prompt: text }, "prompt"],
        ["/v1/chat/completions", { messages: [{ role: "user", content: text }] }, "messages"],
      ] as const) {
        let answer: Response | undefined;
        post(`${url}${path}`, body).then((r) => (answer = r));
        await until(() => answer !== undefined || fx.server().queue.waiting > 0, "answered or queued");
        expect(fx.server().queue.waiting).toBe(0);
        expect(answer!.status).toBe(400);
        const e = ((await answer!.json()) as any).error;
        expect(e.code).toBe("context_length_exceeded");
        expect(e.param).toBe(param);
        expect(e.message).toContain(`bytes: at least ${path === "/v1/completions" ? atLeast : ""}`);
        expect(e.message).toContain("exceeds the context limit (4096 tokens)");
      }
    } finally {
      long.abort();
      await running.catch(() => {});
      await until(() => fx.server().queue.running === 0, "idle");
    }
  });
});
