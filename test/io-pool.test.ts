// The I/O pool through the bindings (issue 21 item 9): tickets are never reused, so a stale one
// cannot name a later read; concurrent k3_io_init calls start one pool, not several.
import { afterAll, describe, expect, test } from "bun:test";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { K3_STATUS, loadKernels } from "../src/kernels.ts";

const k = loadKernels();
const dir = mkdtempSync(join(tmpdir(), "k3-io-pool-"));
const file = join(dir, "data");
writeFileSync(file, Buffer.alloc(8192, 7));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const threadCount = () => Number(/^Threads:\s+(\d+)/m.exec(readFileSync("/proc/self/status", "utf8"))![1]);

describe("the I/O pool's tickets", () => {
  test("a ticket from before k3_io_free never names a read submitted after it", () => {
    k.k3_io_free();
    expect(k.k3_io_init(1, 8)).toBe(1);
    const fd = k.k3_file_open(file, 0);
    const buf = k.k3_mem_alloc(4096, 4096)!;
    try {
      const stale = Number(k.k3_io_submit(fd, buf, 4096, 0, 4096));
      expect(Number(k.k3_io_wait(stale))).toBe(4096);
      k.k3_io_free();
      expect(k.k3_io_init(1, 8)).toBe(1);
      const fresh = Number(k.k3_io_submit(fd, buf, 4096, 4096, 4096));
      expect(fresh).not.toBe(stale);
      // The stale ticket is unknown: waiting on it must not collect the new read.
      expect(Number(k.k3_io_wait(stale))).toBe(K3_STATUS.arg);
      expect(k.k3_io_done(stale)).toBe(0);
      expect(Number(k.k3_io_wait(fresh))).toBe(4096);
    } finally {
      k.k3_mem_free(buf);
      k.k3_file_close(fd);
      k.k3_io_free();
    }
  });
});

describe("k3_io_init from several threads at once", () => {
  test("starts one pool: k3_io_free then leaves no I/O thread behind", async () => {
    k.k3_io_free();
    const THREADS = 128;
    const WORKERS = 4;
    for (let round = 0; round < 3; round++) {
      const workers = Array.from({ length: WORKERS }, () => new Worker(new URL("./helpers/io-init-worker.ts", import.meta.url)));
      const gate = new SharedArrayBuffer(8);
      const g = new Int32Array(gate);
      const results = workers.map((w) => new Promise<number>((resolve) => (w.onmessage = (e) => resolve(e.data as number))));
      for (const w of workers) w.postMessage({ gate, threads: THREADS });
      while (Atomics.load(g, 1) < WORKERS) await Bun.sleep(1);
      const before = threadCount();
      Atomics.store(g, 0, 1);
      Atomics.notify(g, 0);
      expect(await Promise.all(results)).toEqual(Array(WORKERS).fill(THREADS));
      const started = threadCount() - before;
      k.k3_io_free();
      const left = threadCount() - before;
      for (const w of workers) w.terminate();
      // One pool of THREADS threads was started (not one per caller: WORKERS × THREADS), and
      // k3_io_free ended them (a few threads of Bun's own may come and go meanwhile: CI saw 127
      // started, one of Bun's having ended, so the floor has the same slack as `left`).
      expect(started).toBeGreaterThan(THREADS - THREADS / 4);
      expect(started).toBeLessThan(2 * THREADS);
      expect(left).toBeLessThan(THREADS / 4);
    }
  });
});
