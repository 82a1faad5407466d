// `--trace FILE`: the routing the engine actually used, one JSON line per token in the format of
// reference/traces (`{"tok": n, "layers": [[top-k ids of MoE layer 0], …]}`, MoE layers
// in order, ids in router rank order), so `k3 simulate-cache` can replay real K3 routing.
import { closeSync } from "node:fs";
import { openWriteStream, writeAll } from "../files.ts";

export class TraceWriter {
  private fd: number;
  private rows: number[][][] = []; // [token of the chunk][MoE layer][rank]

  constructor(readonly path: string) {
    // A regular file or a new path only (never a FIFO, device or directory), refused naming it.
    this.fd = openWriteStream(path, "the trace file", "USAGE");
  }

  /** Router output of one MoE layer for the T tokens of the current chunk (idx is [T][K]). */
  record(idx: Int32Array, T: number, K: number): void {
    for (let t = 0; t < T; t++) {
      const row = (this.rows[t] ??= []);
      row.push(Array.from(idx.subarray(t * K, t * K + K)));
    }
  }

  /** The chunk starting at position pos0 is done: write its first `keep` tokens (a speculative
   *  verify pass keeps only its accepted positions; the others never entered the sequence). */
  flush(pos0: number, keep = this.rows.length): void {
    let text = "";
    this.rows.slice(0, keep).forEach((layers, t) => (text += `${JSON.stringify({ tok: pos0 + t, layers })}\n`));
    if (text) writeAll(this.fd, Buffer.from(text));
    this.rows = [];
  }

  close(): void {
    closeSync(this.fd);
  }
}
