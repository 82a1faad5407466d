// The prefix cache's disk tier on real mounts, through `k3 serve` over HTTP (issue 21, item 8):
//  - a full disk (a 160 KiB tmpfs: room for about four entries): the cache evicts its oldest files
//    and retries, so every store still lands; a disk too small for one entry stops the tier's
//    writes with one warning, and the server goes on answering;
//  - a read-only folder (a tmpfs mounted ro) is said at start, and not on every request.
// The mounts live in a private mount namespace (`unshare -Urm`: no root needed where user
// namespaces are allowed); where they are not, these tests are skipped, and say so.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { scratchDir, tinyModel } from "./helpers/models.ts";

const probe = Bun.spawnSync(["unshare", "-Urm", "sh", "-c", `mount -t tmpfs -o size=64k tmpfs "${scratchDir("mount-probe")}"`], { stdout: "pipe", stderr: "pipe" });
const MISSING = probe.exitCode === 0 ? undefined : `no private mount namespace here (unshare -Urm: ${probe.stderr.toString().trim().slice(0, 80) || `exit ${probe.exitCode}`})`;
const SKIP = MISSING ? ` — SKIPPED: ${MISSING}` : "";
if (MISSING) console.warn(`\n[prefix-cache-disk] full-disk and read-only checks SKIPPED: ${MISSING}\n`);

/** `k3 serve` with its prefix-cache folder on a fresh tmpfs (`mountOpts`, e.g. "size=160k"). */
async function serveOnTmpfs(mountOpts: string) {
  const model = await tinyModel("tiny-a");
  const cache = scratchDir("prefix-tmpfs");
  const serve = [process.execPath, join(import.meta.dir, "../src/cli/main.ts"), "serve", model, "--port", "0", "--threads", "1", "--parallel", "1", "--chunk", "16",
    "--prefix-cache-ram", "0", "--prefix-cache-dir", cache];
  const script = 'mount -t tmpfs -o "$1" tmpfs "$2" && shift 2 && exec "$@"';
  const proc = Bun.spawn(["unshare", "-Urm", "sh", "-c", script, "sh", mountOpts, cache, ...serve], { stdout: "pipe", stderr: "pipe" });
  // Its whole log (warnings are counted at the end); the URL once the server says it.
  let log = "";
  const url = await new Promise<string>((resolve, reject) => {
    const reader = proc.stderr.getReader();
    void (async () => {
      for (;;) {
        const r = await reader.read();
        if (r.done) return reject(new Error(`k3 serve exited:\n${log}`));
        log += new TextDecoder().decode(r.value);
        const m = /http:\/\/127\.0\.0\.1:\d+/.exec(log);
        if (m) resolve(m[0]);
      }
    })();
  });
  const complete = async (prompt: number[]) => {
    const r = await fetch(`${url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt, max_tokens: 2 }) });
    expect(r.status).toBe(200);
  };
  const stats = async () => ((await (await fetch(`${url}/k3/stats`)).json()) as any).prefix_cache;
  const stop = async () => {
    proc.kill("SIGTERM");
    expect(await proc.exited).toBe(0);
    return log;
  };
  return { complete, stats, stop };
}

/** Distinct 40-token prompts (each leaves snapshots at position 32 and at its end). */
const prompt = (i: number) => Array.from({ length: 40 }, (_, j) => 20 + ((i * 131 + j * 37) % 500));

describe("the prefix cache's disk tier on a full disk and a read-only folder", () => {
  test.skipIf(!!MISSING)(`a full disk: the oldest files are evicted and the write retried; every entry lands, no warning${SKIP}`, async () => {
    const s = await serveOnTmpfs("size=160k");
    for (let i = 0; i < 6; i++) await s.complete(prompt(i));
    const p = await s.stats();
    const log = await s.stop();
    // Six prompts' entries do not fit 160 KiB: room was made (each store landed), none failed.
    expect(p.stores).toBeGreaterThanOrEqual(6);
    expect(p.write_failures).toBe(0);
    expect(p.evicted_disk).toBeGreaterThan(0);
    expect(p.disk.entries).toBeGreaterThan(0);
    expect(p.disk.writable).toBe(true);
    expect(log).not.toContain("prefix cache:");
  }, 60_000);

  test.skipIf(!!MISSING)(`a disk too small for one entry: one warning, then no more writes; requests still answered${SKIP}`, async () => {
    const s = await serveOnTmpfs("size=8k");
    for (let i = 0; i < 4; i++) await s.complete(prompt(i));
    const p = await s.stats();
    const log = await s.stop();
    expect(p.write_failures).toBe(1);
    expect(p.disk).toMatchObject({ entries: 0, writable: false });
    const warnings = log.split("\n").filter((l) => l.includes("prefix cache:"));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/is full \(.*no space left on (the )?device.*\).*no new entries are written there/i);
  }, 60_000);

  test.skipIf(!!MISSING)(`a read-only folder: said once at start, requests answered, no warning per request${SKIP}`, async () => {
    const s = await serveOnTmpfs("ro,size=64k");
    for (let i = 0; i < 3; i++) await s.complete(prompt(i));
    const p = await s.stats();
    const log = await s.stop();
    expect(p).toMatchObject({ write_failures: 0, disk: { entries: 0, writable: false } });
    const warnings = log.split("\n").filter((l) => l.includes("prefix cache:"));
    expect(warnings).toEqual([expect.stringMatching(/prefix cache: .* is read-only: the entries in it are used, but no new ones are written there/)]);
    expect(log.indexOf(warnings[0]!)).toBeLessThan(log.indexOf("serving "));
  }, 60_000);
});
