// Replays a routing trace through a slot cache of N slots under one eviction policy and counts
// hits. The rules (STREAMING.md §4–§5): a hit is a request served from the cache; every miss loads
// the key into a slot (demand paging, no bypass); empty slots fill first; the k experts of the
// layer being served are in use together, so a later request of that layer never evicts an
// earlier one (hence slots ≥ k).
import { K3Error } from "../errors.ts";
import { makePolicy, nextUseTable } from "./policy/index.ts";
import { traceKeys, type Trace } from "./trace.ts";

export interface SimResult {
  policy: string;
  slots: number;
  requests: number;
  hits: number;
  misses: number;
  hitRate: number; // hits / requests
}

/** `missesPerLayer` ([trace.layers], optional) receives each MoE layer's misses (k3 disks weighs
 *  each shard's expert reads by it). */
export function simulateCache(trace: Trace, slots: number, policyName: string, nextUse?: Float64Array, missesPerLayer?: Float64Array): SimResult {
  if (!Number.isInteger(slots) || slots < trace.k)
    throw new K3Error("USAGE", `cache of ${slots} slots cannot hold one layer's ${trace.k} experts at once`);
  const keys = traceKeys(trace);
  const future = policyName === "belady" ? (nextUse ?? nextUseTable(trace.requests, keys)) : undefined;
  const policy = makePolicy(policyName, { slots, keys }, future);

  const keySlot = new Int32Array(keys).fill(-1); // [keys] slot holding the key, −1 if none
  const slotKey = new Int32Array(slots).fill(-1); // [slots]
  const inUseGroup = new Int32Array(slots).fill(-1); // [slots] layer group that last used the slot
  const candidates = new Int32Array(slots);
  let filled = 0;
  let hits = 0;
  const { requests, k } = trace;
  for (let t = 0; t < requests.length; t++) {
    const key = requests[t]!;
    const group = Math.floor(t / k);
    let slot = keySlot[key]!;
    if (slot >= 0) {
      hits++;
      policy.onHit(slot, key, t);
    } else {
      if (missesPerLayer) missesPerLayer[Math.floor(key / trace.experts)]!++;
      if (filled < slots) slot = filled++;
      else {
        let n = 0;
        for (let s = 0; s < slots; s++) if (inUseGroup[s] !== group) candidates[n++] = s;
        slot = policy.victim(candidates, n, t);
        if (inUseGroup[slot] === group || slot < 0 || slot >= slots)
          throw new K3Error("INTERNAL", `policy ${policyName} chose slot ${slot}, not a candidate`);
        keySlot[slotKey[slot]!] = -1;
      }
      slotKey[slot] = key;
      keySlot[key] = slot;
      policy.onInsert(slot, key, t);
    }
    inUseGroup[slot] = group;
  }
  const n = requests.length;
  return { policy: policyName, slots, requests: n, hits, misses: n - hits, hitRate: n ? hits / n : 0 };
}

/**
 * Parse `--slots`: comma-separated counts; `N` is a slot count, `Nx` is N × one token's working
 * set (k · layers of the trace), rounded to the nearest slot.
 */
export function parseSlotList(spec: string, workingSet: number): number[] {
  const out: number[] = [];
  const problems: string[] = [];
  for (const part of spec.split(",").map((s) => s.trim()).filter(Boolean)) {
    const m = /^(\d+(?:\.\d+)?)(x?)$/i.exec(part);
    const value = m ? (m[2] ? Math.round(Number(m[1]) * workingSet) : Number(m[1])) : NaN;
    if (!Number.isInteger(value) || value <= 0) problems.push(`"${part}" is not a slot count (N) or a multiple of the working set (Nx)`);
    else out.push(value);
  }
  if (problems.length || out.length === 0) throw new K3Error("USAGE", "invalid --slots", problems.length ? problems : ["empty"]);
  return out;
}
