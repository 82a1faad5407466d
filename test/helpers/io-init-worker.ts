// A Bun Worker (a thread of the test's process, sharing its kernel library) that calls
// k3_io_init when the test releases it: test/io-pool.test.ts starts several at once.
import { loadKernels } from "../../src/kernels.ts";

declare const self: Worker;
self.onmessage = (e: MessageEvent<{ gate: SharedArrayBuffer; threads: number }>) => {
  const k = loadKernels();
  const gate = new Int32Array(e.data.gate);
  Atomics.add(gate, 1, 1); // ready
  while (Atomics.load(gate, 0) === 0) Atomics.wait(gate, 0, 0, 50);
  self.postMessage(k.k3_io_init(e.data.threads, 64));
};
