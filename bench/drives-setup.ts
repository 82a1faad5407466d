// Emulated drives for bench/drives.ts (root only): each drive is a sparse file on this machine's
// disk, attached as a loop device, formatted ext4 and mounted; its read rate is capped with the
// block I/O controller — cgroup v2 `io.max rbps=` where the io controller is on the unified
// hierarchy, else cgroup v1 `blkio.throttle.read_bps_device` — for the processes the bench puts
// in its own cgroup (the arms). Everything made here is undone by teardown(), which the bench
// runs on exit, on an error and on SIGINT/SIGTERM.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, rmdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export interface EmulatedDrive {
  name: string; // "drive1"
  image: string;
  loop: string; // /dev/loopN
  majMin: string; // "7:N"
  mount: string;
}

export interface Throttle {
  kind: string; // how the rate is capped, in words (for the report)
  procs: string; // the cgroup's cgroup.procs: a child writes its pid here before it reads
  /** Cap `drive`'s read rate (bytes/s) for the bench's cgroup; 0 removes the cap. */
  set(drive: EmulatedDrive, bytesPerSecond: number): void;
  remove(): void;
}

const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim();

/** Why drives cannot be emulated here (not root, no loop devices, no block I/O controller), or null. */
export function emulationProblem(): string | null {
  if (process.getuid?.() !== 0) return "not root: loop devices and the block I/O controller need root";
  try {
    sh("losetup", ["-f"]);
  } catch (e) {
    return `no free loop device (losetup -f: ${(e as Error).message.split("\n")[0]})`;
  }
  if (!cgroupV2() && !existsSync("/sys/fs/cgroup/blkio/blkio.throttle.read_bps_device")) return "no block I/O controller (neither cgroup v2 io nor v1 blkio)";
  return null;
}

/** The cgroup v2 root whose controllers include io, if any. */
function cgroupV2(): string | null {
  for (const root of ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]) {
    const c = join(root, "cgroup.controllers");
    if (existsSync(c) && readFileSync(c, "utf8").split(/\s+/).includes("io")) return root;
  }
  return null;
}

/** A cgroup for the bench's arms with read caps per device. */
export function openThrottle(tag: string): Throttle {
  const v2 = cgroupV2();
  const dir = v2 ? join(v2, tag) : join("/sys/fs/cgroup/blkio", tag);
  if (v2) writeFileSync(join(v2, "cgroup.subtree_control"), "+io");
  mkdirSync(dir);
  const file = v2 ? join(dir, "io.max") : join(dir, "blkio.throttle.read_bps_device");
  return {
    kind: v2 ? "cgroup v2 io.max rbps" : "cgroup v1 blkio.throttle.read_bps_device",
    procs: join(dir, "cgroup.procs"),
    set(drive, bps) {
      writeFileSync(file, v2 ? `${drive.majMin} rbps=${bps > 0 ? Math.round(bps) : "max"}` : `${drive.majMin} ${Math.round(bps)}`);
    },
    remove() {
      // Only empty cgroups can go: the arms have exited by now.
      if (existsSync(dir)) rmdirSync(dir);
    },
  };
}

/** `n` drives of `bytes` each under `dir` (sparse images, loop devices, ext4, mounted). */
export function createDrives(dir: string, n: number, bytes: number, made: EmulatedDrive[]): EmulatedDrive[] {
  mkdirSync(dir, { recursive: true });
  for (let i = 1; i <= n; i++) {
    const image = join(dir, `drive${i}.img`);
    const mount = join(dir, `drive${i}`);
    writeFileSync(image, "");
    execFileSync("truncate", ["-s", String(bytes), image]);
    const loop = sh("losetup", ["-f", "--show", image]);
    const d: EmulatedDrive = { name: `drive${i}`, image, loop, majMin: sh("lsblk", ["-dno", "MAJ:MIN", loop]).replace(/\s/g, ""), mount };
    made.push(d);
    // No lazy init: a background inode-table writer would compete with the timed reads.
    sh("mkfs.ext4", ["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop]);
    mkdirSync(mount, { recursive: true });
    sh("mount", [loop, mount]);
  }
  return made;
}

/** Undo createDrives and openThrottle: unmount, detach, delete the images. Never throws. */
export function teardown(drives: EmulatedDrive[], throttle: Throttle | undefined, say: (s: string) => void): void {
  for (const d of drives.splice(0).reverse()) {
    for (const [cmd, args] of [["umount", [d.mount]], ["losetup", ["-d", d.loop]]] as const)
      try {
        sh(cmd, [...args]);
      } catch (e) {
        say(`teardown: ${cmd} ${args.join(" ")}: ${(e as Error).message.split("\n")[0]}`);
      }
    rmSync(d.image, { force: true });
    rmSync(d.mount, { recursive: true, force: true });
  }
  try {
    throttle?.remove();
  } catch (e) {
    say(`teardown: cgroup: ${(e as Error).message}`);
  }
}

/** Bytes a file tree takes (to size the images). */
export function treeBytes(dir: string): number {
  return Number(sh("du", ["-sb", dir]).split(/\s+/)[0]) || statSync(dir).size;
}
