// Arguments and helpers shared by the commands that open a model (run, chat, serve, bench).
import type { ArgsDef } from "citty";
import { K3Error } from "../errors.ts";
import type { EngineOptions } from "../engine.ts";
import { barProgress } from "./progress.ts";

export const engineArgs = {
  threads: { type: "string", description: "compute threads (default: all cores)" },
  context: { type: "string", description: "context limit in tokens (default 4096)" },
  chunk: { type: "string", description: "prefill chunk in tokens (default 32)" },
  isa: { type: "string", description: "force a kernel path: auto | scalar | avx2 | avx512" },
  preset: { type: "string", description: "RAM budget: laptop (8G) | desktop (32G) | workstation (96G) | server (224G) | auto" },
  ram: { type: "string", description: "RAM budget as a size, e.g. 12G (wins over --preset)" },
  prefetch: { type: "boolean", default: true, description: "read the next layer while one computes (--no-prefetch to disable)" },
  lookahead: { type: "boolean", default: true, description: "router lookahead during decode (--no-lookahead to disable)" },
  "direct-io": { type: "boolean", default: true, description: "O_DIRECT reads (--no-direct-io for the page cache)" },
  policy: { type: "string", description: "expert cache policy: lfru (default) | lru | fifo | s3fifo" },
  "io-threads": { type: "string", description: "I/O threads (default 4)" },
  verify: { type: "boolean", description: "check every expert read against the checksums `k3 verify --record` wrote" },
  trace: { type: "string", description: "write per-token expert routing (JSONL) to this file" },
} satisfies ArgsDef;

export function positiveInt(v: string | undefined, flag: string): number | undefined {
  if (v === undefined || v === "") return undefined;
  if (!/^\d+$/.test(v) || Number(v) < 1) throw new K3Error("USAGE", `${flag} must be a positive integer, got "${v}"`);
  return Number(v);
}

export interface EngineArgs {
  threads?: string;
  context?: string;
  chunk?: string;
  isa?: string;
  preset?: string;
  ram?: string;
  prefetch?: boolean;
  lookahead?: boolean;
  "direct-io"?: boolean;
  policy?: string;
  "io-threads"?: string;
  verify?: boolean;
  trace?: string;
}

export function engineOptions(args: EngineArgs): EngineOptions {
  const isa = args.isa ?? "auto";
  if (!["auto", "scalar", "avx2", "avx512"].includes(isa)) throw new K3Error("USAGE", `--isa must be auto, scalar, avx2 or avx512, got "${isa}"`);
  const policy = args.policy ?? "lfru";
  if (!["lfru", "lru", "fifo", "s3fifo"].includes(policy)) throw new K3Error("USAGE", `--policy must be lfru, lru, fifo or s3fifo, got "${policy}"`);
  return {
    threads: positiveInt(args.threads, "--threads"),
    context: positiveInt(args.context, "--context"),
    chunk: positiveInt(args.chunk, "--chunk"),
    isa: isa as EngineOptions["isa"],
    preset: args.preset,
    ram: args.ram,
    prefetch: args.prefetch ?? true,
    lookahead: args.lookahead ?? true,
    direct: args["direct-io"] ?? true,
    policy: policy as EngineOptions["policy"],
    ioThreads: positiveInt(args["io-threads"], "--io-threads"),
    verify: args.verify ?? false,
    trace: args.trace,
    onProgress: barProgress(),
  };
}

/** The model directory: the argument, else $K3_MODEL. */
export function resolveModelDir(arg: string | undefined): string {
  const dir = arg || process.env.K3_MODEL;
  if (!dir) throw new K3Error("USAGE", "no model directory: pass one or set $K3_MODEL");
  return dir;
}

/** Read all of stdin as UTF-8 text. */
export async function readStdin(): Promise<string> {
  return await new Response(Bun.stdin.stream()).text();
}

/** Parse "1,2,3" / "1 2 3" into ids. */
export function parseIds(s: string): number[] {
  const parts = s.split(/[\s,]+/).filter(Boolean);
  if (parts.length === 0) throw new K3Error("USAGE", "--ids needs at least one token id");
  return parts.map((p) => {
    if (!/^\d+$/.test(p)) throw new K3Error("USAGE", `bad token id "${p}" (expected a non-negative integer)`);
    return Number(p);
  });
}

export function formatBytes(n: number): string {
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) {
    n /= 1000;
    i++;
  }
  return `${n.toFixed(i === 0 ? 0 : 2)} ${u[i]}`;
}
