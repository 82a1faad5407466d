// Usable RAM: the smallest of MemAvailable (/proc/meminfo) and every memory limit on the path from
// this process's cgroup up to the root (STREAMING.md §6). cgroup v2: memory.max and memory.high at
// <cgroupRoot>/<path>/… ; cgroup v1 (the "memory" controller line of /proc/self/cgroup):
// memory.limit_in_bytes at <cgroupRoot>/memory/<path>/… . A limit a parent sets binds the child
// too, hence the walk. Paths are parameters so tests drive a fake /proc and /sys/fs/cgroup tree.
// macOS has neither /proc nor cgroups: ram-darwin.ts (sysctl hw.memsize, vm_stat).
import { formatBytes } from "../format.ts";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { K3Error } from "../errors.ts";
import { darwinUsableRam } from "./ram-darwin.ts";

export interface RamPaths {
  meminfo: string; // /proc/meminfo
  selfCgroup: string; // /proc/self/cgroup
  cgroupRoot: string; // /sys/fs/cgroup
}
export const SYSTEM_RAM_PATHS: RamPaths = { meminfo: "/proc/meminfo", selfCgroup: "/proc/self/cgroup", cgroupRoot: "/sys/fs/cgroup" };

export interface RamLimit {
  bytes: number;
  source: string; // e.g. "/proc/meminfo MemAvailable", "/sys/fs/cgroup/a/memory.max"
}
export interface UsableRam {
  bytes: number; // min over limits
  binding: RamLimit; // the limit that decided
  limits: RamLimit[]; // every limit found
}

/** v1 writes "no limit" as a page-rounded 2^63−1; anything this large is no limit. */
const UNLIMITED = 2 ** 62;

function readLimit(file: string): number | null {
  if (!existsSync(file)) return null;
  const text = readFileSync(file, "utf8").trim();
  if (text === "max") return null;
  const n = Number(text);
  if (!Number.isFinite(n) || n < 0) throw new K3Error("IO", `${file}: unreadable memory limit "${text}"`);
  return n >= UNLIMITED ? null : n;
}

/** Directories from `leaf` (a cgroup path like /a/b) up to the root, under `base`. */
function ancestors(base: string, leaf: string): string[] {
  const parts = leaf.split("/").filter(Boolean);
  const dirs: string[] = [];
  for (let i = parts.length; i >= 0; i--) dirs.push(join(base, ...parts.slice(0, i)));
  return dirs;
}

export function usableRam(paths: RamPaths = SYSTEM_RAM_PATHS): UsableRam {
  if (paths === SYSTEM_RAM_PATHS && process.platform === "darwin") return darwinUsableRam(); // no /proc, no cgroups
  const limits: RamLimit[] = [];
  let meminfo: string;
  try {
    meminfo = readFileSync(paths.meminfo, "utf8");
  } catch (e) {
    throw new K3Error("IO", `cannot read ${paths.meminfo} to size RAM (use --ram)`, [(e as Error).message]);
  }
  const m = /^MemAvailable:\s+(\d+)\s*kB/m.exec(meminfo);
  if (!m) throw new K3Error("IO", `${paths.meminfo}: no MemAvailable line (use --ram)`);
  limits.push({ bytes: Number(m[1]) * 1024, source: `${paths.meminfo} MemAvailable` });

  const cgroupLines = existsSync(paths.selfCgroup) ? readFileSync(paths.selfCgroup, "utf8").split("\n") : [];
  for (const line of cgroupLines) {
    const [, controllers, path] = /^\d+:([^:]*):(.*)$/.exec(line.trim()) ?? [];
    if (path === undefined) continue;
    const dirs =
      controllers === "" // v2 unified hierarchy
        ? ancestors(paths.cgroupRoot, path).map((d) => [join(d, "memory.max"), join(d, "memory.high")])
        : controllers!.split(",").includes("memory") // v1 memory controller
          ? ancestors(join(paths.cgroupRoot, "memory"), path).map((d) => [join(d, "memory.limit_in_bytes")])
          : [];
    for (const file of dirs.flat()) {
      const bytes = readLimit(file);
      if (bytes !== null) limits.push({ bytes, source: file });
    }
  }
  const binding = limits.reduce((a, b) => (b.bytes < a.bytes ? b : a));
  return { bytes: binding.bytes, binding, limits };
}

const UNITS: Record<string, number> = {
  "": 1, B: 1,
  K: 2 ** 10, KI: 2 ** 10, KIB: 2 ** 10, KB: 1e3,
  M: 2 ** 20, MI: 2 ** 20, MIB: 2 ** 20, MB: 1e6,
  G: 2 ** 30, GI: 2 ** 30, GIB: 2 ** 30, GB: 1e9,
  T: 2 ** 40, TI: 2 ** 40, TIB: 2 ** 40, TB: 1e12,
};

/**
 * Parse a size: a number with an optional suffix. K/M/G/T (and KiB…TiB) are binary (G = 2^30);
 * KB/MB/GB/TB are decimal (GB = 10^9); no suffix = bytes. Case-insensitive; "7.5G" is allowed.
 * `flag` names the option the text came from, for the error.
 */
export function parseSize(text: string, flag?: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = m ? UNITS[m[2]!.toUpperCase()] : undefined;
  if (!m || unit === undefined)
    throw new K3Error("USAGE", `invalid size "${text}"${flag ? ` for ${flag}` : ""}`, ["use a number with K/M/G/T (binary, G = 2^30) or KB/MB/GB/TB (decimal)"]);
  return Math.floor(Number(m[1]) * unit);
}

/** Bytes as GiB with 2 decimals, the unit plans print in (src/format.ts formats every byte count). */
export const gib = (bytes: number): string => formatBytes(bytes, "GiB");

// RAM budget presets and how `--preset` / `--ram` become a byte budget. Presets are budgets for
// k3 itself (what the plan may allocate), in GiB; "auto" is the usable RAM of this machine.

export const PRESETS: Record<string, number> = {
  laptop: 8 * 2 ** 30, // trunk streamed
  desktop: 32 * 2 ** 30,
  workstation: 96 * 2 ** 30,
  server: 224 * 2 ** 30, // whole trunk resident
};

export interface Budget {
  bytes: number;
  source: string; // what decided it, for the printed plan
}

/** --ram wins over --preset; "auto" reads usable RAM (paths are a parameter for tests). */
export function resolveBudget(preset: string | undefined, ram: string | undefined, paths: RamPaths = SYSTEM_RAM_PATHS): Budget {
  if (ram !== undefined && ram !== "") return { bytes: parseSize(ram, "--ram"), source: `--ram ${ram}` };
  const name = preset ?? "auto";
  if (name === "auto") {
    const u = usableRam(paths);
    return { bytes: u.bytes, source: `auto: ${u.binding.source}` };
  }
  const bytes = PRESETS[name];
  if (bytes === undefined) throw new K3Error("USAGE", `unknown preset "${name}"`, [`known: ${Object.keys(PRESETS).join(", ")}, auto`]);
  return { bytes, source: `preset ${name}` };
}
