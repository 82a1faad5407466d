// `--trace FILE`: the routing the engine actually used, one JSON line per token in the format of
// reference/traces (`{"tok": n, "layers": [[top-k ids of MoE layer 0], …]}`, MoE layers
// in order, ids in router rank order), so `k3 simulate-cache` can replay real K3 routing.
import { closeSync, openSync, writeSync } from "node:fs";
import { K3Error } from "../errors.ts";

export class TraceWriter {
  private fd: number;
  private rows: number[][][] = []; // [token of the chunk][MoE layer][rank]

  constructor(readonly path: string) {
    try {
      this.fd = openSync(path, "w");
    } catch (err) {
      throw new K3Error("USAGE", `cannot write the trace file ${path}: ${(err as Error).message}`);
    }
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
    if (text) writeSync(this.fd, text);
    this.rows = [];
  }

  close(): void {
    closeSync(this.fd);
  }
}
