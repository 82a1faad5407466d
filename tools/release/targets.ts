// The release artifacts (docs/PORTS.md): one executable per OS × CPU, each with the kernel
// library built for that target embedded in it.
//  - zig: the Zig target triple. Linux pins glibc 2.17 symbols (runs on any glibc ≥ 2.17) and the
//    baseline CPU of the architecture (x86-64: SSE2, AVX2/AVX-512 chosen at run time; aarch64:
//    ARMv8-A, NEON always present). macOS 13.0 is the oldest release Bun 1.4.5's runtime runs on
//    (its LC_BUILD_VERSION), so the library asks for no older one.
//  - bun: the `bun build --compile` target; Bun fetches that runtime from the npm registry
//    (@oven/bun-<os>-<cpu>) on first use and caches it in ~/.bun/install/cache. linux-x64 takes
//    the *baseline* runtime (x86-64-v2, Nehalem 2008+): the default one is built for Haswell and
//    dies with SIGILL on CPUs or VMs without AVX2, while the kernels pick AVX2/AVX-512 at run time
//    anyway. darwin-x64 keeps the default: every Intel Mac that runs macOS 13 has AVX2.
export interface Target {
  name: string; // the file in dist/release/
  os: "linux" | "darwin";
  cpu: "x64" | "arm64";
  zig: string;
  bun: Bun.Build.CompileTarget;
  lib: string; // what zig builds: libkernels.so / libkernels.dylib
}

export const TARGETS: Target[] = [
  { name: "k3-linux-x64", os: "linux", cpu: "x64", zig: "x86_64-linux-gnu.2.17", bun: "bun-linux-x64-baseline", lib: "libkernels.so" },
  { name: "k3-linux-arm64", os: "linux", cpu: "arm64", zig: "aarch64-linux-gnu.2.17", bun: "bun-linux-arm64", lib: "libkernels.so" },
  { name: "k3-darwin-arm64", os: "darwin", cpu: "arm64", zig: "aarch64-macos.13.0", bun: "bun-darwin-arm64", lib: "libkernels.dylib" },
  { name: "k3-darwin-x64", os: "darwin", cpu: "x64", zig: "x86_64-macos.13.0", bun: "bun-darwin-x64", lib: "libkernels.dylib" },
];

/** The CPU a native library or executable was built for, from its header (ELF or Mach-O). */
export function binaryCpu(b: Uint8Array): { format: "elf" | "macho"; cpu: "x64" | "arm64" | "other" } | undefined {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  if (b.byteLength >= 20 && v.getUint32(0) === 0x7f454c46) {
    const machine = v.getUint16(18, true); // e_machine (little-endian ELF)
    return { format: "elf", cpu: machine === 0x3e ? "x64" : machine === 0xb7 ? "arm64" : "other" };
  }
  if (b.byteLength >= 8 && v.getUint32(0, true) === 0xfeedfacf) {
    const t = v.getUint32(4, true);
    return { format: "macho", cpu: t === 0x01000007 ? "x64" : t === 0x0100000c ? "arm64" : "other" };
  }
  return undefined;
}
