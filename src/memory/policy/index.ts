// Policy registry: the names `k3 simulate-cache --policy` and the engine accept.
import { K3Error } from "../../errors.ts";
import { BeladyPolicy } from "./belady.ts";
import { FifoPolicy } from "./fifo.ts";
import { LfruPolicy } from "./lfru.ts";
import { LruPolicy } from "./lru.ts";
import { S3FifoPolicy } from "./s3fifo.ts";
import type { EvictionPolicy, PolicySizes } from "./types.ts";

export type { EvictionPolicy, PolicySizes } from "./types.ts";
export { nextUseTable } from "./belady.ts";

/** Policies usable online (the engine's cache). */
export const ONLINE_POLICIES = ["lru", "fifo", "lfru", "s3fifo"] as const;
/** Every policy the simulator knows; belady needs the future (nextUseTable). */
export const ALL_POLICIES = [...ONLINE_POLICIES, "belady"] as const;
export type PolicyName = (typeof ALL_POLICIES)[number];

export function isPolicyName(name: string): name is PolicyName {
  return (ALL_POLICIES as readonly string[]).includes(name);
}

/** Build a policy. `nextUse` (from nextUseTable over the same request sequence) is required for belady. */
export function makePolicy(name: string, sizes: PolicySizes, nextUse?: Float64Array): EvictionPolicy {
  switch (name) {
    case "lru":
      return new LruPolicy(sizes);
    case "fifo":
      return new FifoPolicy(sizes);
    case "lfru":
      return new LfruPolicy(sizes);
    case "s3fifo":
      return new S3FifoPolicy(sizes);
    case "belady":
      if (!nextUse) throw new K3Error("USAGE", "policy belady needs the future request sequence (simulation only)");
      return new BeladyPolicy(sizes, nextUse);
    default:
      throw new K3Error("USAGE", `unknown cache policy "${name}"`, [`known: ${ALL_POLICIES.join(", ")}`]);
  }
}
