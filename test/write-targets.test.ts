// k3 writes only regular files or new paths (issue 21, items 5 and 8): a device node, FIFO, socket
// or directory where k3 would write (--save-session, --trace, a pack, the checksums, a prefix-cache
// entry, a conversation saved from the REPL, a benchmark's --json) is refused, naming the path and
// what it is, and left as it was. Before, `--save-session F` renamed a temp file over F: a FIFO
// became a regular file, and as root `--save-session /dev/null` would have replaced the system's.
// A FIFO at a pack's path no longer hangs `run` / `plan --trunk int4` (it is never opened
// blocking). One helper does it for every writer (src/files.ts); the binary is checked as a user
// meets it, and the helper for the rest.
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync, type Stats } from "node:fs";
import { join } from "node:path";
import { Engine } from "../src/engine.ts";
import { K3Error } from "../src/errors.ts";
import { openWriteStream, writeFileAtomic } from "../src/files.ts";
import { compiledK3, STACK_FRAME, userEnv } from "./helpers/k3-binary.ts";
import { scratchDir, tinyModel } from "./helpers/models.ts";

/** A guard against hangs (a FIFO opened blocking), not a timing assertion. */
const HANG_GUARD_MS = 30_000;
const isRoot = process.getuid?.() === 0;
setDefaultTimeout(120_000);

let bin: string;
let model: string;
let home: string;
beforeAll(async () => {
  bin = compiledK3();
  model = await tinyModel("tiny-a");
  home = scratchDir("write-home");
});

function k3(args: string[], stdin?: string) {
  const p = Bun.spawnSync([bin, ...args], { stdin: stdin === undefined ? "ignore" : Buffer.from(stdin), env: userEnv(home), timeout: HANG_GUARD_MS });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

/** What a path is, to check that a refused write left it as it was. */
const kindOf = (st: Stats) => (st.isFIFO() ? "fifo" : st.isCharacterDevice() ? "device" : st.isSocket() ? "socket" : st.isDirectory() ? "dir" : st.isFile() ? "file" : "other");

/**
 * A folder holding one of each thing that is not a regular file. The device is a copy of
 * /dev/null's node made here when root; otherwise /dev/null itself (a user who is not root could
 * not replace it, so the check is still seen refusing, and nothing is at stake).
 */
async function oddPaths(): Promise<{ path: string; what: RegExp; kind: string; stop?: () => void }[]> {
  const dir = scratchDir("odd");
  const fifo = join(dir, "fifo");
  expect(Bun.spawnSync(["mkfifo", fifo]).exitCode).toBe(0);
  const device = isRoot ? join(dir, "null") : "/dev/null";
  if (isRoot) expect(Bun.spawnSync(["mknod", device, "c", "1", "3"]).exitCode).toBe(0);
  const sock = join(dir, "sock");
  const listener = Bun.listen({ unix: sock, socket: { data() {} } });
  const folder = join(dir, "folder");
  mkdirSync(folder);
  return [
    { path: fifo, what: /it is a FIFO \(named pipe\)/, kind: "fifo" },
    { path: device, what: /it is a device/, kind: "device" },
    { path: sock, what: /it is a socket/, kind: "socket", stop: () => listener.stop(true) },
    { path: folder, what: /is a (folder|directory)/, kind: "dir" },
  ];
}

/** Refused as a usage error naming the path, nothing on stdout, no stack trace, the path as it was. */
function expectRefused(r: ReturnType<typeof k3>, p: { path: string; what: RegExp; kind: string }, code = 2) {
  expect({ code: r.code, out: r.out }).toEqual({ code, out: "" });
  expect(r.err).toContain(p.path);
  expect(r.err).toMatch(p.what);
  expect(r.err).not.toMatch(STACK_FRAME);
  expect(r.err).not.toContain(".tmp");
  expect(kindOf(lstatSync(p.path))).toBe(p.kind);
}

describe("the binary writes only regular files or new paths", () => {
  test("run and chat --save-session, and --trace: a FIFO, a device, a socket or a directory is refused by name, left as it was", async () => {
    const odd = await oddPaths();
    try {
      for (const p of odd) {
        expectRefused(k3(["run", model, "--ids", "5,6", "--gen", "2", "--threads", "1", "--save-session", p.path]), p);
        expectRefused(k3(["chat", model, "--gen", "2", "--threads", "1", "--save-session", p.path], "hi"), p);
        expectRefused(k3(["run", model, "--ids", "5,6", "--gen", "2", "--threads", "1", "--trace", p.path]), p);
      }
    } finally {
      for (const p of odd) p.stop?.();
    }
    // A regular file and a new path are written (the class is not "refuse everything").
    const dir = scratchDir("save-ok");
    const file = join(dir, "old.k3s");
    writeFileSync(file, "to be replaced");
    for (const path of [file, join(dir, "new.k3s")]) {
      const r = k3(["run", model, "--ids", "5,6", "--gen", "2", "--threads", "1", "--save-session", path]);
      expect(r.code).toBe(0);
      expect(readFileSync(path).toString("latin1", 0, 8)).toBe("K3SESS01");
    }
  });

  test("k3 pack: a directory or FIFO at the pack's path is refused naming that path (not its .tmp); the path left as it was", async () => {
    for (const kind of ["dir", "fifo"]) {
      const d = scratchDir("pack-odd");
      cpSync(model, d, { recursive: true });
      const at = join(d, "k3-trunk-int4.k3pack");
      if (kind === "dir") mkdirSync(at);
      else expect(Bun.spawnSync(["mkfifo", at]).exitCode).toBe(0);
      const r = k3(["pack", d, "--trunk", "int4"]);
      expectRefused(r, { path: at, what: kind === "dir" ? /it is a directory/ : /it is a FIFO/, kind }, 4);
      expect(readdirSync(d).filter((n) => n.endsWith(".tmp"))).toEqual([]);
    }
  });

  test("a FIFO at the pack's path: run and plan --trunk int4 refuse it by name at once (they used to hang)", async () => {
    const d = scratchDir("pack-fifo");
    cpSync(model, d, { recursive: true });
    const at = join(d, "k3-trunk-int4.k3pack");
    expect(Bun.spawnSync(["mkfifo", at]).exitCode).toBe(0);
    for (const args of [["run", d, "--ids", "5,6", "--gen", "2", "--threads", "1", "--trunk", "int4"], ["plan", d, "--trunk", "int4"]]) {
      const r = k3(args);
      expect({ args, code: r.code, out: r.out }).toEqual({ args, code: 4, out: "" }); // null: killed by the guard, a hang
      expect(r.err).toContain(`${at}: packed trunk is a FIFO (named pipe), expected a regular file`);
    }
  });
});

describe("src/files.ts: the one write helper every writer uses", () => {
  test("writeFileAtomic and openWriteStream refuse each odd path with a K3Error naming it, touching nothing", async () => {
    const odd = await oddPaths();
    try {
      for (const p of odd) {
        for (const write of [() => writeFileAtomic(p.path, "the test file", "IO", "x"), () => openWriteStream(p.path, "the test file", "IO")]) {
          let err: unknown;
          try {
            write();
          } catch (e) {
            err = e;
          }
          expect(err).toBeInstanceOf(K3Error);
          expect((err as K3Error).message).toContain(`${p.path}: cannot write the test file there: it is`);
          expect(kindOf(lstatSync(p.path))).toBe(p.kind);
        }
      }
      expect(readdirSync(join(odd[0]!.path, "..")).filter((n) => n.endsWith(".tmp"))).toEqual([]);
    } finally {
      for (const p of odd) p.stop?.();
    }
  });

  test("a symlink to a regular file writes its target (the link stays a link); a dangling one is refused", () => {
    const dir = scratchDir("links");
    const target = join(dir, "real.json");
    writeFileSync(target, "old");
    symlinkSync(target, join(dir, "link.json"));
    writeFileAtomic(join(dir, "link.json"), "the test file", "IO", "new");
    expect(readFileSync(target, "utf8")).toBe("new");
    expect(lstatSync(join(dir, "link.json")).isSymbolicLink()).toBe(true);
    symlinkSync(join(dir, "nowhere"), join(dir, "dangling"));
    expect(() => writeFileAtomic(join(dir, "dangling"), "the test file", "IO", "x")).toThrow("it is a symlink to nothing");
    expect(existsSync(join(dir, "nowhere"))).toBe(false);
  });

  test("the engine's own writer refuses too (a library caller, no CLI check first): saveSession to a FIFO", () => {
    const dir = scratchDir("engine-fifo");
    const fifo = join(dir, "s.k3s");
    expect(Bun.spawnSync(["mkfifo", fifo]).exitCode).toBe(0);
    const engine = Engine.open(model, { threads: 1, context: 64 });
    try {
      const s = engine.createSession();
      engine.prefill(s, [5, 6, 7]);
      expect(() => engine.saveSession(s, fifo)).toThrow(`${fifo}: cannot write session file there: it is a FIFO (named pipe)`);
      expect(lstatSync(fifo).isFIFO()).toBe(true);
      expect(readdirSync(dir)).toEqual(["s.k3s"]);
    } finally {
      engine.close();
    }
  });
});
