// What machine a benchmark ran on: CPU, cores, RAM, the disk under the model, kernel, bun.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { release } from "node:os";

export interface MachineInfo {
  cpu: string;
  cores: number; // logical CPUs this process may use
  memTotalBytes: number;
  memAvailableBytes: number;
  disk: { device: string; fsType: string; rotational: string; model: string; size: string };
  kernel: string;
  bun: string;
}

const read = (p: string) => (existsSync(p) ? readFileSync(p, "utf8").trim() : "?");

function meminfo(key: string): number {
  const m = new RegExp(`^${key}:\\s+(\\d+)\\s*kB`, "m").exec(read("/proc/meminfo"));
  return m ? Number(m[1]) * 1024 : NaN;
}

export function machineInfo(modelDir: string): MachineInfo {
  const cpu = /model name\s*:\s*(.*)/.exec(read("/proc/cpuinfo"))?.[1] ?? "?";
  let device = "?";
  let fsType = "?";
  let size = "?";
  try {
    // df -T: Filesystem Type 1K-blocks Used Available Use% Mounted on
    const line = execFileSync("df", ["-T", modelDir], { encoding: "utf8" }).trim().split("\n")[1]!.split(/\s+/);
    device = line[0]!;
    fsType = line[1]!;
    size = `${(Number(line[2]) / 1024 ** 2).toFixed(0)} GiB`;
  } catch {
    /* df missing: leave "?" */
  }
  const blk = device.replace(/^\/dev\//, "").replace(/p?\d+$/, "");
  return {
    cpu,
    cores: navigator.hardwareConcurrency,
    memTotalBytes: meminfo("MemTotal"),
    memAvailableBytes: meminfo("MemAvailable"),
    disk: {
      device,
      fsType,
      rotational: read(`/sys/block/${blk}/queue/rotational`),
      model: read(`/sys/block/${blk}/device/model`),
      size,
    },
    kernel: release(),
    bun: Bun.version,
  };
}

/** CPU model and the vector-ISA flags that decide the kernel paths (from /proc/cpuinfo). */
export function cpuInfo(): { model: string; vectorFlags: string[] } {
  const text = read("/proc/cpuinfo");
  const model = /model name\s*:\s*(.*)/.exec(text)?.[1] ?? "?";
  const flags = new Set((/^flags\s*:\s*(.*)$/m.exec(text)?.[1] ?? "").split(/\s+/));
  const wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_bf16", "amx_tile"];
  return { model, vectorFlags: wanted.filter((f) => flags.has(f)) };
}

/** This process's anonymous memory and the part of it on transparent huge pages (kernels/k3_mem.c
 *  does not ask for them, refused twice: see its comment; a system set to THP "always" may still
 *  give some), from /proc/self/smaps_rollup;
 *  "unknown" where that file is missing (not Linux). */
export function hugePages(): string {
  if (!existsSync("/proc/self/smaps_rollup")) return "unknown";
  const text = read("/proc/self/smaps_rollup");
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0);
  return `${(kb("AnonHugePages") / 2 ** 20).toFixed(2)} GiB of ${(kb("Anonymous") / 2 ** 20).toFixed(2)} GiB anonymous`;
}

/** The 1, 5 and 15 minute load averages, as `uptime` prints them. */
export function loadAvg(): string {
  return read("/proc/loadavg").split(" ").slice(0, 3).join(" ");
}
