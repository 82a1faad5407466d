// Arguments and helpers shared by the commands that open a model (run, chat, serve, bench).
import type { ArgsDef } from "citty";
import { K3Error } from "../errors.ts";
import type { EngineOptions } from "../engine.ts";

export const engineArgs = {
  threads: { type: "string", description: "compute threads (default: all cores)" },
  context: { type: "string", description: "context limit in tokens (default 4096)" },
  chunk: { type: "string", description: "prefill chunk in tokens (default 32)" },
  isa: { type: "string", description: "force a kernel path: auto | scalar | avx2 | avx512" },
} satisfies ArgsDef;

export function positiveInt(v: string | undefined, flag: string): number | undefined {
  if (v === undefined || v === "") return undefined;
  if (!/^\d+$/.test(v) || Number(v) < 1) throw new K3Error("USAGE", `${flag} must be a positive integer, got "${v}"`);
  return Number(v);
}

export function engineOptions(args: { threads?: string; context?: string; chunk?: string; isa?: string }): EngineOptions {
  const isa = args.isa ?? "auto";
  if (!["auto", "scalar", "avx2", "avx512"].includes(isa)) throw new K3Error("USAGE", `--isa must be auto, scalar, avx2 or avx512, got "${isa}"`);
  return {
    threads: positiveInt(args.threads, "--threads"),
    context: positiveInt(args.context, "--context"),
    chunk: positiveInt(args.chunk, "--chunk"),
    isa: isa as EngineOptions["isa"],
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
