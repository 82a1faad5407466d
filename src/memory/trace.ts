// Routing traces: JSONL, one line per token, `{"tok": n, "layers": [[top-k ids of MoE layer 0], …]}`
// (the format of reference/traces/*.routing.jsonl; the engine writes it with --trace, MoE
// layers only, in layer order). A trace is flattened into the request sequence the cache sees:
// token by token, layer by layer, the k experts of a layer in listed order.
import { K3Error } from "../errors.ts";

export interface Trace {
  tokens: number;
  layers: number; // MoE layers per token
  k: number; // experts per layer per token
  experts: number; // 1 + the largest expert id seen (the key space per layer)
  /** [tokens · layers · k] keys, key = layer · experts + id. Request t belongs to group ⌊t / k⌋. */
  requests: Int32Array;
}

/** Number of distinct keys a trace can name. */
export const traceKeys = (trace: Trace): number => trace.layers * trace.experts;

/** Parse trace text; every malformed line is reported at once (by line number). */
export function parseTrace(text: string, source = "trace"): Trace {
  const rows: number[][][] = [];
  const problems: string[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "") continue;
    let obj: unknown;
    try {
      obj = JSON.parse(line);
    } catch {
      problems.push(`line ${i + 1}: not JSON`);
      continue;
    }
    const layers = (obj as { layers?: unknown })?.layers;
    if (!Array.isArray(layers) || layers.length === 0 || !layers.every((l) => Array.isArray(l))) {
      problems.push(`line ${i + 1}: "layers" must be a non-empty array of arrays`);
      continue;
    }
    const ids = layers as unknown[][];
    const bad = ids.findIndex(
      (l) => l.length === 0 || !l.every((e) => Number.isInteger(e) && (e as number) >= 0) || new Set(l).size !== l.length,
    );
    if (bad >= 0) {
      problems.push(`line ${i + 1}: layer ${bad} must list distinct non-negative integer expert ids`);
      continue;
    }
    rows.push(ids as number[][]);
  }
  if (rows.length === 0 && problems.length === 0) problems.push("no tokens");
  const layers = rows[0]?.length ?? 0;
  const k = rows[0]?.[0]?.length ?? 0;
  rows.forEach((r, t) => {
    if (r.length !== layers) problems.push(`token ${t}: ${r.length} layers, the first token has ${layers}`);
    else if (r.some((l) => l.length !== k)) problems.push(`token ${t}: a layer does not list k=${k} experts`);
  });
  if (problems.length) throw new K3Error("USAGE", `invalid routing trace ${source}`, problems.slice(0, 20));

  let maxId = 0;
  for (const r of rows) for (const l of r) for (const e of l) if (e > maxId) maxId = e;
  const experts = maxId + 1;
  const requests = new Int32Array(rows.length * layers * k);
  let t = 0;
  for (const r of rows) for (let l = 0; l < layers; l++) for (const e of r[l]!) requests[t++] = l * experts + e;
  return { tokens: rows.length, layers, k, experts, requests };
}

/** One trace line for token `tok` (what the engine's --trace writes). */
export function formatTraceLine(tok: number, layers: ArrayLike<number>[]): string {
  return `${JSON.stringify({ tok, layers: layers.map((l) => Array.from(l)) })}\n`;
}
