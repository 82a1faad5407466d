// Which device a file lives on: the unit k3 gives its own read queue, direct-I/O probe and
// counters (docs/STREAMING.md "Routing"). A file's device is the file system's st_dev (symlinks
// followed: a model folder of links onto several drives, or a Hugging Face snapshot whose links
// point into blobs/ on another drive, is read where the bytes are), widened on Linux to the whole
// disk behind it (two partitions of one NVMe drive share its bandwidth, so they share a queue).
// File systems with no block device (tmpfs, overlay, NFS) are named by their mount point.
import { readFileSync, readlinkSync, realpathSync, statSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";

export interface DeviceInfo {
  /** What groups files: "259:0" (the whole disk's major:minor), or the test hook's name. */
  key: string;
  /** What to call it: "nvme0n1", "sdb", "tmpfs at /dev/shm", or the test hook's name. */
  name: string;
  /** A spinning disk (from /sys/block/<disk>/queue/rotational): its queue gets fewer threads. */
  rotational: boolean;
}

/** Groups files into devices by another rule (EngineOptions.deviceOf, for tests: one disk, many
 *  "devices"). Returns the device's name; files with the same name share a device. */
export type DeviceOf = (file: string) => string;

/** Linux dev_t → major:minor (glibc's encoding; numbers below 2^53 are exact in a double). */
function majorMinor(dev: number): [number, number] {
  const hi = Math.floor(dev / 2 ** 32);
  const lo = dev >>> 0;
  const major = ((lo >>> 8) & 0xfff) | ((hi & ~0xfff) >>> 0);
  const minor = (lo & 0xff) | ((lo >>> 12) & ~0xff);
  return [major >>> 0, minor >>> 0];
}

function readSys(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8").trim();
  } catch {
    return undefined;
  }
}

/** The whole disk behind a block device's major:minor: its sysfs folder (a partition's parent). */
function wholeDisk(mm: string): string | undefined {
  let dir: string;
  try {
    dir = resolve("/sys/dev/block", readlinkSync(`/sys/dev/block/${mm}`));
  } catch {
    return undefined;
  }
  return readSys(join(dir, "partition")) !== undefined ? dirname(dir) : dir;
}

/** The mount point and file system type of a device id (/proc/self/mountinfo), if listed. */
function mountOf(mm: string): { point: string; fs: string } | undefined {
  const text = readSys("/proc/self/mountinfo");
  if (!text) return undefined;
  for (const line of text.split("\n")) {
    const f = line.split(" ");
    if (f[2] !== mm) continue;
    const sep = f.indexOf("-");
    return { point: f[4]!, fs: f[sep + 1] ?? "?" };
  }
  return undefined;
}

const cache = new Map<number, DeviceInfo>();

/** The device `file` lives on (after symlinks), or by `deviceOf` when given. */
export function deviceOfFile(file: string, deviceOf?: DeviceOf): DeviceInfo {
  if (deviceOf) {
    const name = deviceOf(realpathSync(file)); // where the bytes are, symlinks followed
    return { key: `hook:${name}`, name, rotational: false };
  }
  const dev = statSync(file).dev;
  let info = cache.get(dev);
  if (!info) cache.set(dev, (info = describeDev(dev)));
  return info;
}

function describeDev(dev: number): DeviceInfo {
  const [major, minor] = majorMinor(dev);
  const mm = `${major}:${minor}`;
  const disk = major !== 0 ? wholeDisk(mm) : undefined;
  if (disk) {
    const diskMm = readSys(join(disk, "dev")) ?? mm;
    return { key: diskMm, name: basename(disk), rotational: readSys(join(disk, "queue", "rotational")) === "1" };
  }
  // No block device (tmpfs, overlay, a network file system; or not Linux): one device per file system.
  const mount = mountOf(mm);
  return { key: mm, name: mount ? `${mount.fs} at ${mount.point}` : `device ${mm}`, rotational: false };
}
