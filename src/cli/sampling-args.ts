// Sampling flags shared by `run` and `chat`, and their translation into GenOptions. Flag names in
// errors are the ones the user typed (`--top-p`, never `topP`).
import type { ArgsDef } from "citty";
import type { GenOptions } from "../conversation.ts";
import { K3Error } from "../errors.ts";
import { repeatedValues } from "./args.ts";

/** `--stop` may repeat; the parser keeps every occurrence in rawArgs and repeatedValues() reads them. */
export const samplingArgs = {
  temperature: { type: "string", alias: ["temp"], valueHint: "T", description: "sampling temperature (0 = greedy)" },
  "top-k": { type: "string", valueHint: "K", description: "keep the K most likely tokens (0 = off)" },
  "top-p": { type: "string", valueHint: "P", description: "nucleus sampling mass in (0, 1] (1 = off)" },
  "min-p": { type: "string", valueHint: "P", description: "drop tokens below P × the top probability (0 = off)" },
  seed: { type: "string", alias: ["s"], valueHint: "N", description: "sampling seed (default 0: same seed, same text)" },
  stop: { type: "string", valueHint: "TEXT", description: "stop string, matched across tokens, not printed (repeatable)" },
  "accept-rule": {
    type: "string",
    valueHint: "RULE",
    description: "how sampled drafts are kept: exact (default: the seeded output is the same with and without speculation) | rejection (min(1, p/q): the same distribution, more drafts kept, NOT the same seeded ids)",
  },
} satisfies ArgsDef;

export interface SamplingArgs {
  temperature?: string;
  "top-k"?: string;
  "top-p"?: string;
  "min-p"?: string;
  seed?: string;
  stop?: string;
  "accept-rule"?: string;
}

export function samplingOptions(args: SamplingArgs, rawArgs: string[], defaultTemperature: number): Omit<GenOptions, "maxTokens"> {
  const o = {
    temperature: temperatureFlag(args.temperature, "--temperature") ?? defaultTemperature,
    topK: int(args["top-k"], "--top-k"),
    topP: num(args["top-p"], "--top-p"),
    minP: num(args["min-p"], "--min-p"),
    seed: int(args.seed, "--seed"),
    stop: repeatedValues(rawArgs, "--stop"),
    acceptRule: acceptRule(args["accept-rule"]),
  };
  // The sampler checks ranges too, but names its own fields; say the flag here.
  if (o.topK !== undefined && o.topK < 0) throw new K3Error("USAGE", `--top-k must be ≥ 0, got ${args["top-k"]}`);
  if (o.topP !== undefined && !(o.topP > 0 && o.topP <= 1)) throw new K3Error("USAGE", `--top-p must be in (0, 1], got ${args["top-p"]}`);
  if (o.minP !== undefined && !(o.minP >= 0 && o.minP <= 1)) throw new K3Error("USAGE", `--min-p must be in [0, 1], got ${args["min-p"]}`);
  return o;
}

/** --temperature: a number ≥ 0 (0 = greedy), or undefined when not given. */
export function temperatureFlag(v: string | undefined, flag: string): number | undefined {
  const t = num(v, flag);
  if (t !== undefined && t < 0) throw new K3Error("USAGE", `${flag} must be ≥ 0, got ${v}`);
  return t;
}

function acceptRule(v: string | undefined): "exact" | "rejection" | undefined {
  if (v === undefined || v === "") return undefined;
  if (v !== "exact" && v !== "rejection") throw new K3Error("USAGE", `--accept-rule must be exact or rejection, got "${v}"`);
  return v;
}

function num(v: string | undefined, flag: string): number | undefined {
  if (v === undefined || v === "") return undefined;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new K3Error("USAGE", `${flag} must be a number, got "${v}"`);
  return n;
}

function int(v: string | undefined, flag: string): number | undefined {
  const n = num(v, flag);
  if (n !== undefined && !Number.isSafeInteger(n)) throw new K3Error("USAGE", `${flag} must be an integer, got "${v}"`);
  return n;
}
