// `k3 disks`: which drive holds what of the model, what each drive serves per decoded token under
// a memory plan, and what moving which shards to the fastest drive would save (docs/DRIVES.md).
// k3 never moves a user's files: this only says what a move would be worth.
//
// The model of a token's disk time: the forward pass walks the layers in order, and a layer's
// reads come from the shard that holds it, so the drives take turns (they do not overlap: one
// layer's bytes are on one drive). A token costs Σ over shards of its trunk bytes ÷ the trunk
// rate of its drive + its expert bytes ÷ the expert rate; a shard with copies on several drives
// is read from all of them at once (reader.ts routes each read to the copy that finishes first),
// at the sum of their rates. Per-token bytes: the trunk pieces the plan streams (pinned pieces
// are read once, at open), the experts' misses (from a routing trace replayed through the plan's
// expert slots, else uniform routing, K3's trained behaviour: a hit rate of slots ÷ experts),
// one embedding row.
import { statfsSync } from "node:fs";
import { basename, dirname } from "node:path";
import type { Checkpoint } from "../checkpoint/catalogue.ts";
import { expertTensorNames, LM_MODEL_PREFIX } from "../checkpoint/shapes.ts";
import { K3Error } from "../errors.ts";
import { deviceOfFile, type DeviceInfo, type DeviceOf } from "./devices.ts";
import type { MirrorCopies } from "./mirrors.ts";
import { pieceParts } from "./pieces.ts";
import type { MemoryPlan } from "./plan.ts";
import { simulateCache } from "./simulate.ts";
import { trunkLayout } from "./slots.ts";
import type { Trace } from "./trace.ts";

/** Measured read rates of one device, bytes per second (k3's request sizes: disk-probe.ts). */
export interface DeviceRates {
  expert: number; // expert-size reads at random offsets, the queue's depth in flight
  trunk: number; // trunk chunks, sequential
  direct: boolean;
}

export interface ShardLoad {
  file: string; // the shard's name in the model folder
  holds: string; // "layers 3-4", "the head", …
  layers: number[];
  head: boolean;
  fileBytes: number;
  trunkBytesPerToken: number;
  expertBytesPerToken: number;
  devices: string[]; // every device holding a copy (the model folder's first)
}

export interface DriveReport {
  device: DeviceInfo;
  shards: string[]; // shard names it holds a copy of
  fileBytes: number;
  trunkBytesPerToken: number; // its share (a mirrored shard's bytes split by rate)
  expertBytesPerToken: number;
  secondsPerToken: number; // its share of a token's disk time
  rates?: DeviceRates;
  freeBytes: number | null;
}

export interface Move {
  file: string;
  holds: string;
  from: string;
  fileBytes: number;
  savesSecondsPerToken: number;
  fits: boolean; // the fastest drive has room for it (after the moves listed before it)
}

export interface PlacementReport {
  shards: ShardLoad[];
  drives: DriveReport[];
  secondsPerToken: number | null; // null without rates
  fastest: string | null;
  moves: Move[];
  secondsPerTokenAfter: number | null; // with every move that fits
  experts: "trace" | "uniform";
  expertHitRate: number;
}

/** What a shard holds: its layers, and the head's tensors (also in words). */
function holdings(ckpt: Checkpoint): Map<string, { layers: number[]; head: boolean; words: string }> {
  const layers = new Map<string, Set<number>>();
  const head = new Set<string>();
  for (const t of ckpt.tensors.values()) {
    const m = /\.layers\.(\d+)\./.exec(t.name);
    if (m) (layers.get(t.file) ?? layers.set(t.file, new Set()).get(t.file)!).add(Number(m[1]));
    else head.add(t.file);
  }
  const out = new Map<string, { layers: number[]; head: boolean; words: string }>();
  for (const s of ckpt.shards) {
    const ls = [...(layers.get(s.file) ?? [])].sort((a, b) => a - b);
    const parts = [ls.length === 0 ? "" : ls.length === 1 ? `layer ${ls[0]}` : `layers ${ls[0]}-${ls.at(-1)}`, head.has(s.file) ? "the head" : ""];
    out.set(s.file, { layers: ls, head: head.has(s.file), words: parts.filter(Boolean).join(", ") || "nothing of the language model" });
  }
  return out;
}

/** Expected expert misses per token, per model layer: a trace replayed through the plan's slots
 *  (lfru, the engine's default), else uniform routing. */
function expertMisses(ckpt: Checkpoint, plan: MemoryPlan, trace?: Trace): { perLayer: Float64Array; hitRate: number } {
  const cfg = ckpt.config;
  const moe = cfg.numLayers - cfg.firstKDense;
  const perLayer = new Float64Array(cfg.numLayers);
  if (!trace) {
    const hitRate = Math.min(1, plan.expertSlots / plan.expertCount);
    for (let L = cfg.firstKDense; L < cfg.numLayers; L++) perLayer[L] = cfg.topK * (1 - hitRate);
    return { perLayer, hitRate };
  }
  if (trace.layers !== moe || trace.experts > cfg.numExperts)
    throw new K3Error("USAGE", `the routing trace has ${trace.layers} MoE layers and expert ids up to ${trace.experts - 1}; this model has ${moe} MoE layers of ${cfg.numExperts} experts (record one with k3 run --trace)`);
  const misses = new Float64Array(trace.layers);
  const r = simulateCache(trace, Math.max(trace.k, plan.expertSlots), "lfru", undefined, misses);
  misses.forEach((m, l) => (perLayer[cfg.firstKDense + l] = m / trace.tokens));
  return { perLayer, hitRate: r.hitRate };
}

/** Per-token bytes of every shard under `plan`. */
function shardLoads(ckpt: Checkpoint, plan: MemoryPlan, misses: Float64Array, devicesOf: (file: string) => string[]): ShardLoad[] {
  const trunk = new Map<string, number>();
  const expert = new Map<string, number>();
  const add = (m: Map<string, number>, f: string, b: number) => m.set(f, (m.get(f) ?? 0) + b);
  const pinned = new Set(plan.pinnedPieces);
  for (const p of trunkLayout(ckpt).pieces) if (!pinned.has(p.id)) for (const x of pieceParts(p)) add(trunk, x.file, x.bytes);
  const embed = ckpt.tensors.get(`${LM_MODEL_PREFIX}embed_tokens.weight`)!;
  add(trunk, embed.file, ckpt.config.hidden * 2); // one row per token
  const cfg = ckpt.config;
  for (let L = cfg.firstKDense; L < cfg.numLayers; L++)
    for (let e = 0; e < cfg.numExperts; e++)
      for (const n of expertTensorNames(L, e)) {
        const t = ckpt.tensors.get(n)!;
        add(expert, t.file, (t.bytes * misses[L]!) / cfg.numExperts);
      }
  const what = holdings(ckpt);
  return ckpt.shards.map((s) => ({
    file: basename(s.file),
    holds: what.get(s.file)!.words,
    layers: what.get(s.file)!.layers,
    head: what.get(s.file)!.head,
    fileBytes: s.bytes,
    trunkBytesPerToken: trunk.get(s.file) ?? 0,
    expertBytesPerToken: expert.get(s.file) ?? 0,
    devices: devicesOf(s.file),
  }));
}

/** Seconds a shard's per-token bytes take, read from every device in `devices` at once. */
function shardSeconds(s: ShardLoad, devices: string[], rates: Map<string, DeviceRates>): number {
  const sum = (f: (r: DeviceRates) => number) => devices.reduce((a, d) => a + f(rates.get(d)!), 0);
  return s.trunkBytesPerToken / sum((r) => r.trunk) + s.expertBytesPerToken / sum((r) => r.expert);
}

/** The model's files (each shard and its mirror copies), grouped by the device they are on. */
export function filesByDevice(ckpt: Checkpoint, mirrors?: MirrorCopies, deviceOf?: DeviceOf): Map<string, { device: DeviceInfo; files: { file: string; bytes: number }[] }> {
  const out = new Map<string, { device: DeviceInfo; files: { file: string; bytes: number }[] }>();
  for (const s of ckpt.shards)
    for (const f of [s.file, ...(mirrors?.get(s.file) ?? [])]) {
      const device = deviceOfFile(f, deviceOf);
      const g = out.get(device.key) ?? out.set(device.key, { device, files: [] }).get(device.key)!;
      g.files.push({ file: f, bytes: s.bytes });
    }
  return out;
}

export function placementReport(
  ckpt: Checkpoint,
  plan: MemoryPlan,
  opts: { mirrors?: MirrorCopies; deviceOf?: DeviceOf; trace?: Trace; rates?: Map<string, DeviceRates> } = {},
): PlacementReport {
  const infos = new Map<string, DeviceInfo>();
  const firstFile = new Map<string, string>();
  const devicesOf = (file: string) => {
    const keys = [file, ...(opts.mirrors?.get(file) ?? [])].map((f) => {
      const d = deviceOfFile(f, opts.deviceOf);
      infos.set(d.key, d);
      if (!firstFile.has(d.key)) firstFile.set(d.key, f);
      return d.key;
    });
    return [...new Set(keys)];
  };
  const { perLayer, hitRate } = expertMisses(ckpt, plan, opts.trace);
  const shards = shardLoads(ckpt, plan, perLayer, devicesOf);
  const rates = opts.rates;
  const drives: DriveReport[] = [...infos.values()].map((device) => {
    const held = shards.filter((s) => s.devices.includes(device.key));
    // A mirrored shard's bytes go to its copies in proportion to their rates (what routing does).
    const share = (s: ShardLoad, f: (r: DeviceRates) => number) =>
      rates ? f(rates.get(device.key)!) / s.devices.reduce((a, d) => a + f(rates.get(d)!), 0) : 1 / s.devices.length;
    const trunk = held.reduce((a, s) => a + s.trunkBytesPerToken * share(s, (r) => r.trunk), 0);
    const expert = held.reduce((a, s) => a + s.expertBytesPerToken * share(s, (r) => r.expert), 0);
    let freeBytes: number | null = null;
    try {
      const st = statfsSync(dirname(firstFile.get(device.key)!));
      freeBytes = st.bavail * st.bsize;
    } catch {
      /* no statfs here: the moves' sizes are listed without a check */
    }
    const r = rates?.get(device.key);
    return { device, shards: held.map((s) => s.file), fileBytes: held.reduce((a, s) => a + s.fileBytes, 0), trunkBytesPerToken: trunk, expertBytesPerToken: expert, secondsPerToken: r ? trunk / r.trunk + expert / r.expert : 0, rates: r, freeBytes };
  });
  if (!rates) return { shards, drives, secondsPerToken: null, fastest: null, moves: [], secondsPerTokenAfter: null, experts: opts.trace ? "trace" : "uniform", expertHitRate: hitRate };
  return { shards, drives, ...moves(shards, drives, rates), experts: opts.trace ? "trace" : "uniform", expertHitRate: hitRate };
}

/** The fastest drive for this model's mix of reads, and each shard moved there, best first. */
function moves(shards: ShardLoad[], drives: DriveReport[], rates: Map<string, DeviceRates>) {
  const total = (s: ShardLoad, on: string[]) => shardSeconds(s, on, rates);
  const secondsPerToken = shards.reduce((a, s) => a + total(s, s.devices), 0);
  // Fastest: the drive that would read every shard's per-token bytes soonest.
  const fastest = [...drives].sort((a, b) => shards.reduce((x, s) => x + total(s, [a.device.key]), 0) - shards.reduce((x, s) => x + total(s, [b.device.key]), 0))[0]!;
  const F = fastest.device.key;
  const name = (key: string) => drives.find((d) => d.device.key === key)!.device.name;
  const candidates = shards
    .filter((s) => s.devices.length === 1 && s.devices[0] !== F)
    .map((s) => ({ file: s.file, holds: s.holds, from: name(s.devices[0]!), fileBytes: s.fileBytes, savesSecondsPerToken: total(s, s.devices) - total(s, [F]), fits: true }))
    .filter((m) => m.savesSecondsPerToken > 0)
    .sort((a, b) => b.savesSecondsPerToken - a.savesSecondsPerToken);
  let room = fastest.freeBytes ?? Infinity;
  let saved = 0;
  for (const m of candidates) {
    m.fits = m.fileBytes <= room;
    if (m.fits) (room -= m.fileBytes), (saved += m.savesSecondsPerToken);
  }
  return { secondsPerToken, fastest: fastest.device.name, moves: candidates, secondsPerTokenAfter: secondsPerToken - saved };
}
