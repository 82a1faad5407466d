// Preloaded by bun test (bunfig.toml): every temporary file of one `bun test` run goes under one
// folder, removed when the run ends. Tests make their folders with mkdtempSync(tmpdir()) and the
// binaries they start inherit TMPDIR, so a run no longer leaves its clones, models and ptys in
// /tmp (a full suite left ~350 folders, 120 MB of them per self-contained clone). bun test does
// not run process "exit" handlers; an afterAll in a preload runs once, after every file.
import { afterAll } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = mkdtempSync(join(tmpdir(), "k3-test-"));
process.env.TMPDIR = root;
afterAll(() => rmSync(root, { recursive: true, force: true }));
