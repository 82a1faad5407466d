// The chat page in a real browser: Debian's chromium (installed by tools/setup/browser.sh, which
// `npm test` runs first), driven by playwright-core, against `k3 serve` on the demo model, as a
// person uses it: load /, send a message and watch the reply stream, stop a generation, reload
// and find the conversation, edit and resend, copy; and with --api-key: the page asks for the key,
// keeps it in the browser and sends it as a bearer header, never in a URL. A missing browser is a
// failure naming the setup script, never a skip.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, statSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { compiledK3, ROOT, serveUrl, userEnv } from "./helpers/k3-binary.ts";

// The callbacks given to page.evaluate run in the browser; these name its globals for the type
// checker here (this module only: the project's types have no DOM).
declare const document: any;
declare const navigator: any;
declare const localStorage: any;

const CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];

function chromiumPath(): string {
  const p = Bun.which("chromium") ?? Bun.which("chromium-browser");
  if (!p) throw new Error("no chromium on PATH: the chat page's browser test needs it (sudo sh tools/setup/browser.sh installs Debian's)");
  return p;
}

/** The page the binary embeds must be built from the sources as they are (npm run build). */
function checkPageCurrent(): void {
  const built = statSync(join(ROOT, "dist", "webui", "page.txt")).mtimeMs;
  const src = join(ROOT, "src", "webui");
  const newest = Math.max(...readdirSync(src).map((f) => statSync(join(src, f)).mtimeMs));
  if (built < newest) throw new Error("dist/webui/page.txt is older than src/webui/: run npm run build");
}

interface Served {
  url: string;
  stop(): Promise<void>;
}

async function startServe(home: string, env: Record<string, string> = {}): Promise<Served> {
  const p = Bun.spawn([compiledK3(), "serve", "--port", "0", "--threads", "1"], { env: userEnv(home, env), stdout: "pipe", stderr: "pipe" });
  const url = await serveUrl(p);
  return {
    url,
    stop: async () => {
      p.kill("SIGTERM");
      await p.exited;
    },
  };
}

let browser: Browser;
const home = mkdtempSync(join(tmpdir(), "k3-webui-"));

beforeAll(async () => {
  checkPageCurrent();
  browser = await chromium.launch({ executablePath: chromiumPath(), args: CHROMIUM_FLAGS });
});
afterAll(async () => {
  await browser?.close();
  rmSync(home, { recursive: true, force: true });
});

const assistantText = (page: Page, i: number) =>
  page.evaluate((i) => {
    const m = document.querySelectorAll(".msg.assistant")[i];
    return ((m?.querySelector(".reasoning-text")?.textContent ?? "") + (m?.querySelector(".content")?.textContent ?? "")).trim();
  }, i);

async function setMaxTokens(page: Page, v: string): Promise<void> {
  await page.click("#open-settings");
  await page.fill("#set-max-tokens", v);
  await page.dispatchEvent("#set-max-tokens", "change");
  await page.click("#settings-close");
}

async function send(page: Page, text: string): Promise<void> {
  await page.fill("#prompt", text);
  await page.click("#send");
}

describe("the chat page at / (k3 serve on the demo, no key)", () => {
  let served: Served;
  let page: Page;
  const urls: string[] = [];
  beforeAll(async () => {
    served = await startServe(home);
    const context = await browser.newContext({ viewport: { width: 1100, height: 720 } });
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: served.url });
    page = await context.newPage();
    page.on("request", (r) => urls.push(r.url()));
    await page.goto(`${served.url}/`);
  });
  afterAll(async () => {
    await page?.context().close();
    await served?.stop();
  });

  test("loads with the model's name and the demo notice, and makes no request to another origin", async () => {
    await page.waitForFunction(() => document.getElementById("model")?.textContent === "k3-demo");
    expect(await page.isVisible("#demo-badge")).toBe(true);
    expect(urls.every((u) => u.startsWith(served.url) || u.startsWith("data:"))).toBe(true);
  });

  test("a message gets a streamed reply: reasoning collapsed, then the numbers of the reply", async () => {
    await setMaxTokens(page, "16");
    await send(page, "Hello");
    await page.waitForSelector(".msg.assistant .stats");
    const stats = await page.textContent(".msg.assistant .stats");
    expect(stats).toMatch(/tokens\/s/);
    expect(stats).toMatch(/first token \d/);
    expect(stats).toMatch(/read [\d.]+ [KMG]iB\/token/);
    expect(stats).toMatch(/16 tokens \(prompt \d+, 0 cached\)/);
    expect(stats).toMatch(/seed \d+/);
    expect((await assistantText(page, 0)).length).toBeGreaterThan(0);
    // The reasoning (the demo always thinks first) is there, collapsed.
    expect(await page.$eval(".msg.assistant details.reasoning", (d) => (d as any).open)).toBe(false);
  });

  test("Copy puts the reply's text on the clipboard", async () => {
    await page.click(".msg.assistant .copy");
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    // The reply as the model wrote it (its markdown source), from the conversation the page keeps.
    const kept = await page.evaluate(() => JSON.parse(localStorage.getItem("k3.conversations")!)[0].messages[1].content);
    expect(kept.length).toBeGreaterThan(0);
    expect(copied).toBe(kept);
  });

  test("Stop ends a reply while it streams; the server cancels the generation", async () => {
    await setMaxTokens(page, "");
    await send(page, "Tell me a long story.");
    // Text on the page while the reply is still running: it streams.
    await page.waitForFunction(() => {
      const last = [...document.querySelectorAll(".msg.assistant")].at(-1);
      const text = (last?.querySelector(".reasoning-text")?.textContent ?? "") + (last?.querySelector(".content")?.textContent ?? "");
      return document.getElementById("send")?.textContent === "Stop" && text.trim().length > 0;
    });
    await page.click("#send");
    await page.waitForFunction(() => document.getElementById("send")?.textContent === "Send");
    expect(await page.textContent(".msg.assistant:last-of-type .stats")).toBe("stopped");
    // The page's request ended as cancelled on the server (the client went away): the generation
    // is recorded once it has wound down, within a token.
    const stats = async () => (await (await fetch(`${served.url}/k3/stats`)).json()) as any;
    let s = await stats();
    for (let i = 0; i < 200 && s.server.queue.running > 0; i++) s = await (Bun.sleep(25).then(stats));
    const last = s.recent.at(-1);
    expect(last.finish_reason).toBe("cancelled");
  });

  test("after a reload the conversation is still there, stopped reply included", async () => {
    const before = [await assistantText(page, 0), await assistantText(page, 1)];
    await page.reload();
    await page.waitForFunction(() => document.querySelectorAll(".msg").length === 4);
    expect(await page.$$eval("#conversations li", (l) => l.map((x) => x.firstChild?.textContent))).toEqual(["Hello"]);
    expect([await assistantText(page, 0), await assistantText(page, 1)]).toEqual(before);
    // K3_SCREENSHOT=docs/webui.png: the picture in docs/SERVER.md.
    if (process.env.K3_SCREENSHOT) await page.screenshot({ path: process.env.K3_SCREENSHOT });
  });

  test("Edit and resend replaces the rest of the conversation; Regenerate gives a new reply", async () => {
    await setMaxTokens(page, "8");
    await page.click(".msg.user .edit");
    await page.fill(".edit-text", "Good morning");
    await page.click(".edit-send");
    await page.waitForFunction(() => document.querySelectorAll(".msg").length === 2 && document.querySelector(".msg.assistant .stats") !== null);
    expect(await page.textContent(".msg.user .user-text")).toBe("Good morning");
    const seed = (await page.textContent(".msg.assistant .stats"))!.match(/seed (\d+)/)![1];
    await page.click(".msg.assistant .regenerate");
    await page.waitForFunction((old) => {
      const s = document.querySelector(".msg.assistant .stats")?.textContent ?? "";
      return /seed \d+/.test(s) && !s.includes(`seed ${old}`);
    }, seed);
    expect(await page.$$eval(".msg", (m) => m.length)).toBe(2);
  });
});

describe("the chat page with --api-key", () => {
  const KEY = "page-test-key-3141";
  let served: Served;
  beforeAll(async () => {
    served = await startServe(home, { K3_API_KEY: KEY });
  });
  afterAll(async () => {
    await served?.stop();
  });

  test("asks for the key, keeps it in the browser, sends it as a bearer header and never in a URL", async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    const seen: { url: string; auth: string | undefined }[] = [];
    page.on("request", (r) => seen.push({ url: r.url(), auth: r.headers()["authorization"] }));
    await page.goto(`${served.url}/`);
    await page.waitForSelector("#key-dialog[open]");
    await page.fill("#key-input", KEY);
    await page.click("#key-save");
    await page.waitForFunction(() => document.getElementById("model")?.textContent === "k3-demo");
    await setMaxTokens(page, "8");
    await send(page, "Hi");
    await page.waitForSelector(".msg.assistant .stats");
    expect((await assistantText(page, 0)).length).toBeGreaterThan(0);
    // A reload remembers the key: no dialog, the model loads.
    await page.reload();
    await page.waitForFunction(() => document.getElementById("model")?.textContent === "k3-demo");
    expect(await page.isVisible("#key-dialog")).toBe(false);
    expect(seen.some((r) => r.url.includes(KEY))).toBe(false);
    const api = seen.filter((r) => new URL(r.url).pathname.startsWith("/v1/"));
    expect(api.length).toBeGreaterThan(2);
    expect(api.filter((r) => r.auth === `Bearer ${KEY}`).length).toBe(api.length - 1); // all but the first, refused /v1/models

    await context.close();
  });

  test("without the key the API refuses the page's calls (401), while the page itself loads", async () => {
    expect((await fetch(`${served.url}/`)).status).toBe(200);
    expect((await fetch(`${served.url}/v1/models`)).status).toBe(401);
  });
});
