// A model in the Hugging Face cache layout (issue 10): models--org--name/{refs/main, snapshots/
// <commit>/ (symlinks into ../../blobs/), blobs/}. The compiled binary accepts the repo folder
// (picking the snapshot by refs/main, else the only one; several and no refs/main is refused),
// names the model after the repo, and writes nothing inside the download: its catalogue cache and
// checksums go to k3's cache folder.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { compiledK3, serveUrl, STACK_FRAME, userEnv } from "./helpers/k3-binary.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

// Several spawns per test on a loaded 2-core machine; a hang is caught by the spawn guard first.
setDefaultTimeout(120_000);
let bin: string;
let plain: string;
const IDS = ["--ids", "5,6,7", "--gen", "4", "--threads", "1"];
const COMMIT = "0123456789abcdef0123456789abcdef01234567";

beforeAll(async () => {
  bin = compiledK3();
  plain = await tinyModel("tiny-a");
}, 120_000);

/** The generated model laid out as `hf download` leaves it; returns the repo folder. */
function hfDownload(name: string, opts: { commits?: string[]; ref?: string | null } = {}): string {
  const repo = join(scratchDir(name), "models--moonshotai--Kimi-K3");
  const commits = opts.commits ?? [COMMIT];
  mkdirSync(join(repo, "blobs"), { recursive: true });
  for (const c of commits) mkdirSync(join(repo, "snapshots", c), { recursive: true });
  for (const f of readdirSync(plain)) {
    if (f.startsWith("k3-")) continue; // the generator's files only
    const bytes = readFileSync(join(plain, f));
    const blob = new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
    writeFileSync(join(repo, "blobs", blob), bytes);
    symlinkSync(join("..", "..", "blobs", blob), join(repo, "snapshots", commits[0]!, f));
  }
  const ref = opts.ref === undefined ? commits[0]! : opts.ref;
  if (ref !== null) {
    mkdirSync(join(repo, "refs"));
    writeFileSync(join(repo, "refs", "main"), ref);
  }
  return repo;
}

/** Every file name under a folder (recursive), to see that k3 wrote nothing there. */
function listing(dir: string): string[] {
  return (readdirSync(dir, { recursive: true }) as string[]).sort();
}

function k3(args: string[], home: string, env: Record<string, string> = userEnv(home)) {
  const p = Bun.spawnSync([bin, ...args], { stdin: "ignore", env });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

describe("Hugging Face cache layout", () => {
  test("k3 pack writes a download's compact trunk to k3's cache folder, never into the download", () => {
    const home = scratchDir("hf-pack-home");
    const repo = hfDownload("hf-pack");
    const before = listing(repo);
    const made = k3(["pack", repo, "--trunk", "int8"], home);
    expect(made.err).not.toMatch(STACK_FRAME);
    expect([made.code, made.out]).toEqual([0, expect.stringContaining(join(home, ".cache", "k3", "packs"))]);
    const run = k3(["run", repo, ...IDS, "--trunk", "int8", "--json"], home);
    expect([run.code, JSON.parse(run.out || "{}").stats?.trunk]).toEqual([0, "int8"]);
    expect(listing(repo)).toEqual(before);
  });


  test("the repo folder runs like the plain folder, and k3 writes nothing inside the download", () => {
    const home = scratchDir("hf-home");
    const repo = hfDownload("hf-run");
    const before = listing(repo);
    const want = k3(["run", plain, ...IDS], home);
    expect(want.code).toBe(0);
    const got = k3(["run", repo, ...IDS], home);
    expect(got.err).not.toMatch(STACK_FRAME);
    expect(got.code).toBe(0);
    expect(got.out).toBe(want.out);
    // The snapshot named directly is the same model.
    expect(k3(["run", join(repo, "snapshots", COMMIT), ...IDS], home).out).toBe(want.out);

    const rec = k3(["verify", repo, "--record"], home);
    expect(rec.code).toBe(0);
    expect(rec.out).toContain(join(home, ".cache", "k3", "checksums"));
    expect(k3(["verify", repo], home).out).toContain("all match");
    expect(k3(["run", repo, ...IDS, "--verify"], home).out).toBe(want.out);
    expect(k3(["tokenize", repo, "hello world"], home).code).toBe(0);
    expect(listing(repo)).toEqual(before); // no k3-index.json, k3-checksums.json, *.tmp
    expect(readdirSync(join(home, ".cache", "k3", "index")).length).toBe(1);
  });

  test("without XDG_CACHE_HOME, k3's files go under $HOME/.cache/k3 (one cache root for every file: issue 17 item 4)", () => {
    const home = scratchDir("hf-home-only");
    const repo = hfDownload("hf-home-only");
    const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, NO_COLOR: "1" };
    expect(k3(["verify", repo, "--record"], home, env).code).toBe(0);
    expect(k3(["run", repo, ...IDS], home, env).code).toBe(0);
    expect(readdirSync(join(home, ".cache", "k3")).sort()).toEqual(["checksums", "index"]);
  });

  test("named after the repo: the served model id and the session's model name", async () => {
    const home = scratchDir("hf-serve-home");
    const repo = hfDownload("hf-serve");
    const session = join(scratchDir("hf-session"), "s.k3s");
    expect(k3(["run", repo, ...IDS, "--save-session", session], home).code).toBe(0);
    const b = readFileSync(session);
    expect(JSON.parse(b.subarray(12, 12 + b.readUInt32LE(8)).toString()).modelName).toBe("moonshotai/Kimi-K3");

    const p = Bun.spawn([bin, "serve", repo, "--port", "0", "--threads", "1"], { env: userEnv(home), stdout: "pipe", stderr: "pipe" });
    try {
      const url = await serveUrl(p, /serving moonshotai\/Kimi-K3 at (http:\/\/127\.0\.0\.1:\d+)\/v1/);
      const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] };
      expect(models.data.map((m) => m.id)).toEqual(["moonshotai/Kimi-K3"]);
    } finally {
      p.kill("SIGTERM");
      await p.exited;
    }
  });

  test("which snapshot: refs/main wins; several and no refs/main is refused, listing them", () => {
    const home = scratchDir("hf-pick-home");
    const other = "fedcba9876543210fedcba9876543210fedcba98";
    // refs/main names the complete snapshot; the other one (empty, a partial download) is ignored.
    const repo = hfDownload("hf-two", { commits: [COMMIT, other] });
    expect(k3(["run", repo, ...IDS], home).code).toBe(0);

    const ambiguous = hfDownload("hf-ambiguous", { commits: [COMMIT, other], ref: null });
    const r = k3(["run", ambiguous, ...IDS], home);
    expect(r.err).not.toMatch(STACK_FRAME);
    expect(r.code).toBe(4);
    expect(r.err).toContain("2 snapshots and no refs/main to choose between them");
    expect(r.err).toContain(join(ambiguous, "snapshots", COMMIT));
    expect(r.err).toContain(join(ambiguous, "snapshots", other));

    const dangling = hfDownload("hf-dangling", { ref: other });
    const d = k3(["run", dangling, ...IDS], home);
    expect(d.code).toBe(4);
    expect(d.err).toContain("refs/main names snapshot");

    // Without refs/main, the only snapshot is the one.
    expect(k3(["run", hfDownload("hf-one", { ref: null }), ...IDS], home).code).toBe(0);
  });
});
