// The pieces of the ports (docs/PORTS.md) that can be checked on this x86-64 Linux machine without
// emulation: macOS RAM detection (parsing recorded `vm_stat` / `sysctl` output), the I/O mode the
// stats report, the Mach-O signature check and ad-hoc signer used by `npm run release`, and the
// target table. linux-arm64 itself: test/arm64.test.ts.
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { Engine } from "../src/engine.ts";
import { DIRECT_MODES, loadKernels } from "../src/kernels.ts";
import { darwinRamFromText, parseVmStat } from "../src/memory/ram-darwin.ts";
import { adhocSign, parseMachO, verifySignature } from "../tools/release/macho.ts";
import { binaryCpu, TARGETS } from "../tools/release/targets.ts";
import { tinyModel } from "./helpers/models.ts";

const ROOT = resolve(import.meta.dir, "..");

// Recorded on an Apple Silicon Mac (16 KiB pages), numbers edited to round values.
const VM_STAT = `Mach Virtual Memory Statistics: (page size of 16384 bytes)
Pages free:                               40000.
Pages active:                            500000.
Pages inactive:                          480000.
Pages speculative:                        10000.
Pages throttled:                              0.
Pages wired down:                        200000.
Pages purgeable:                           5000.
"Translation faults":                 123456789.
Pages copy-on-write:                    1234567.
Pages zero filled:                     98765432.
Pages reactivated:                        12345.
Pages purged:                              6789.
File-backed pages:                       300000.
Anonymous pages:                         690000.
Pages stored in compressor:               80000.
Pages occupied by compressor:             30000.
Decompressions:                           11111.
Compressions:                             22222.
Pageins:                                 333333.
Pageouts:                                   444.
Swapins:                                      0.
Swapouts:                                     0.
`;
const SYSCTL = "hw.memsize: 34359738368\nkern.memorystatus_level: 62\n";

describe("macOS usable RAM (no /proc, no cgroups)", () => {
  test("vm_stat: page size and counts, the quoted label included", () => {
    const v = parseVmStat(VM_STAT);
    expect(v.pageSize).toBe(16384);
    expect(v.pages.get("Pages free")).toBe(40000);
    expect(v.pages.get("File-backed pages")).toBe(300000);
    expect(v.pages.get("Translation faults")).toBe(123456789);
  });

  test("the smaller of free + file-backed + purgeable pages and memorystatus_level × hw.memsize binds", () => {
    const u = darwinRamFromText(VM_STAT, SYSCTL);
    const pages = (40000 + 300000 + 5000) * 16384; // 5.26 GiB
    const level = Math.floor((34359738368 * 62) / 100); // 19.8 GiB
    expect(u.limits.map((l) => l.bytes)).toEqual([pages, level]);
    expect(u.bytes).toBe(pages);
    expect(u.binding.source).toContain("vm_stat");
    // Under pressure the kernel's own level binds.
    const tight = darwinRamFromText(VM_STAT, "hw.memsize: 34359738368\nkern.memorystatus_level: 10\n");
    expect(tight.bytes).toBe(Math.floor(34359738368 / 10));
    expect(tight.binding.source).toContain("kern.memorystatus_level");
  });

  test("a missing figure is a clear error naming the command; a missing level is skipped", () => {
    expect(() => darwinRamFromText(VM_STAT.replace(/^File-backed.*$/m, ""), SYSCTL)).toThrow(/vm_stat: no "File-backed pages" line/);
    expect(() => darwinRamFromText("Pages free: 1.\n", SYSCTL)).toThrow(/page size/);
    expect(() => darwinRamFromText(VM_STAT, "kern.memorystatus_level: 50\n")).toThrow(/hw\.memsize/);
    expect(darwinRamFromText(VM_STAT, "hw.memsize: 34359738368\n").limits.length).toBe(1);
  });
});

describe("stats name the read mode in effect", () => {
  test("this build: O_DIRECT (Linux); a direct open that the probe refuses, or --no-direct, reads buffered", async () => {
    const k = loadKernels();
    expect(DIRECT_MODES[k.k3_direct_mode()]).toBe(process.platform === "darwin" ? "F_NOCACHE" : "O_DIRECT");
    const dir = await tinyModel("tiny-a");
    const shard = readdirSync(dir).filter((f) => f.endsWith(".safetensors")).sort()[0]!;
    const probe = k.k3_direct_probe(join(dir, shard)); // tmpfs refuses O_DIRECT; ext4 takes it
    for (const direct of [true, false]) {
      const e = Engine.open(dir, { threads: 1, direct });
      try {
        const s = e.stats();
        expect({ direct, mode: s.ioMode, on: s.directIo }).toEqual({ direct, mode: direct && probe === 1 ? "O_DIRECT" : "buffered", on: direct && probe === 1 });
      } finally {
        e.close();
      }
    }
  });
});

/** A minimal arm64 Mach-O executable: __TEXT (2 pages), __LINKEDIT, a signature slot at the end. */
function fakeMachO(): Uint8Array {
  const textBytes = 8192, linkStart = textBytes, sigOff = linkStart + 100, sigSize = 64;
  const b = new Uint8Array(sigOff + sigSize);
  for (let i = 0; i < b.length; i++) b[i] = (i * 7919) & 0xff;
  const v = new DataView(b.buffer);
  const cmds = [72, 72, 16];
  v.setUint32(0, 0xfeedfacf, true);
  v.setUint32(4, 0x0100000c, true);
  v.setUint32(8, 0, true);
  v.setUint32(12, 2, true); // MH_EXECUTE
  v.setUint32(16, cmds.length, true);
  v.setUint32(20, cmds.reduce((a, c) => a + c), true);
  v.setUint32(24, 0, true);
  v.setUint32(28, 0, true);
  const seg = (off: number, name: string, fileoff: number, filesize: number) => {
    v.setUint32(off, 0x19, true);
    v.setUint32(off + 4, 72, true);
    b.fill(0, off + 8, off + 24);
    b.set(new TextEncoder().encode(name), off + 8);
    v.setBigUint64(off + 24, BigInt(0x100000000 + fileoff), true);
    v.setBigUint64(off + 32, BigInt(filesize), true);
    v.setBigUint64(off + 40, BigInt(fileoff), true);
    v.setBigUint64(off + 48, BigInt(filesize), true);
    v.setUint32(off + 56, 5, true);
    v.setUint32(off + 60, 5, true);
    v.setUint32(off + 64, 0, true);
    v.setUint32(off + 68, 0, true);
  };
  seg(32, "__TEXT", 0, textBytes);
  seg(104, "__LINKEDIT", linkStart, b.length - linkStart);
  v.setUint32(176, 0x1d, true);
  v.setUint32(180, 16, true);
  v.setUint32(184, sigOff, true);
  v.setUint32(188, sigSize, true);
  return b;
}

describe("Mach-O signatures (npm run release, darwin artifacts)", () => {
  test("an ad-hoc signature written here verifies; one changed byte or a stale tail is caught", () => {
    const raw = fakeMachO();
    expect(verifySignature(raw).ok).toBe(false); // garbage where the signature goes
    const signed = adhocSign(raw);
    const ok = verifySignature(signed);
    expect(ok).toEqual({ ok: true, problems: [], identifier: "a.out", flags: 0x20002, pages: 3 });
    const m = parseMachO(signed);
    expect(m.signature!.dataoff + m.signature!.datasize).toBe(signed.length);
    expect(m.segments[1]!.filesize).toBe(signed.length - 8192); // __LINKEDIT grew to hold it

    const flipped = signed.slice();
    flipped[5000] ^= 1;
    expect(verifySignature(flipped).problems).toEqual(["1 of 3 page hashes do not match the file"]);
    const tail = new Uint8Array(signed.length + 10);
    tail.set(signed);
    expect(verifySignature(tail).problems[0]).toMatch(/10 bytes after the signature/);
    expect(adhocSign(signed)).toEqual(signed); // deterministic: re-signing a signed file changes nothing
  });

  test("the target table: four artifacts; the host library is an x86-64 ELF", () => {
    expect(TARGETS.map((t) => t.name)).toEqual(["k3-linux-x64", "k3-linux-arm64", "k3-darwin-arm64", "k3-darwin-x64"]);
    const host = new Uint8Array(readFileSync(join(ROOT, "zig-out", "lib", "libkernels.so")));
    expect(binaryCpu(host)).toEqual({ format: "elf", cpu: "x64" });
    expect(binaryCpu(fakeMachO())).toEqual({ format: "macho", cpu: "arm64" });
  });
});
