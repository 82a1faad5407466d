// Usable RAM on macOS, where there is no /proc/meminfo and no cgroup (docs/PORTS.md §2).
// Two figures, the smaller one binds:
//  - `vm_stat`: pages the kernel can hand out without swapping or compressing anyone's memory —
//    free + file-backed (page cache, reclaimable by dropping clean pages) + purgeable (volatile
//    memory its owners agreed to lose). Inactive *anonymous* pages are not counted: reclaiming
//    them means compressing or swapping another process's data.
//  - `kern.memorystatus_level` × `hw.memsize`: the kernel's own "percent of memory available"
//    figure, the one its memory-pressure levels are computed from.
// Both commands are part of every macOS install (/usr/bin/vm_stat, /usr/sbin/sysctl). Parsing is
// separate from running them, so tests drive it with recorded output on any OS.
import { K3Error } from "../errors.ts";
import type { RamLimit, UsableRam } from "./ram.ts";

export const VM_STAT = "/usr/bin/vm_stat";
export const SYSCTL = "/usr/sbin/sysctl";
export const SYSCTL_KEYS = ["hw.memsize", "kern.memorystatus_level"] as const;

/** `vm_stat` output → page size and the page counts by label ("Pages free" → 12345). */
export function parseVmStat(text: string): { pageSize: number; pages: Map<string, number> } {
  const size = /page size of (\d+) bytes/.exec(text);
  if (!size) throw new K3Error("IO", `${VM_STAT}: no "page size of N bytes" header (use --ram)`);
  const pages = new Map<string, number>();
  for (const line of text.split("\n")) {
    const m = /^"?([^":]+)"?:\s+(\d+)\.?\s*$/.exec(line.trim());
    if (m) pages.set(m[1]!.trim(), Number(m[2]));
  }
  return { pageSize: Number(size[1]), pages };
}

/** `sysctl hw.memsize kern.memorystatus_level` output ("key: value" lines) → values by key. */
export function parseSysctl(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    const m = /^([\w.]+)\s*[:=]\s*(\d+)\s*$/.exec(line.trim());
    if (m) out.set(m[1]!, Number(m[2]));
  }
  return out;
}

/** The limits and the binding one, from the two commands' output. */
export function darwinRamFromText(vmStat: string, sysctl: string): UsableRam {
  const { pageSize, pages } = parseVmStat(vmStat);
  const page = (label: string) => {
    const n = pages.get(label);
    if (n === undefined) throw new K3Error("IO", `${VM_STAT}: no "${label}" line (use --ram)`);
    return n;
  };
  const limits: RamLimit[] = [
    {
      bytes: (page("Pages free") + page("File-backed pages") + page("Pages purgeable")) * pageSize,
      source: `${VM_STAT} free + file-backed + purgeable pages`,
    },
  ];
  const values = parseSysctl(sysctl);
  const memsize = values.get("hw.memsize");
  if (memsize === undefined) throw new K3Error("IO", `${SYSCTL}: no hw.memsize (use --ram)`);
  const level = values.get("kern.memorystatus_level"); // absent on old releases: that limit is skipped
  if (level !== undefined) limits.push({ bytes: Math.floor((memsize * level) / 100), source: `${SYSCTL} kern.memorystatus_level ${level}% of hw.memsize` });
  const binding = limits.reduce((a, b) => (b.bytes < a.bytes ? b : a));
  return { bytes: binding.bytes, binding, limits };
}

function run(cmd: string[]): string {
  let out: string, err: string, code: number | null;
  try {
    const p = Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
    [out, err, code] = [p.stdout.toString(), p.stderr.toString(), p.exitCode];
  } catch (e) {
    throw new K3Error("IO", `cannot run ${cmd[0]} to size RAM (use --ram)`, [(e as Error).message]);
  }
  // sysctl exits non-zero when one of several keys is unknown but still prints the others.
  if (out.trim() === "") throw new K3Error("IO", `${cmd.join(" ")} printed nothing (exit ${code}; use --ram)`, [err.trim()]);
  return out;
}

/** Usable RAM of this Mac (not run in this project's CI: no macOS machine; the parsing is tested). */
export function darwinUsableRam(): UsableRam {
  return darwinRamFromText(run([VM_STAT]), run([SYSCTL, ...SYSCTL_KEYS]));
}
