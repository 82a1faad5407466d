// Typed bindings to the C kernel library (kernels/k3.h). Each binding keeps its C name.
//
// Loading is explicit (loadKernels), never at import time, so `k3 --help` needs no .so.
// The library is process-wide (one dlopen per process) — that is the only module state here.
//
// Where the .so comes from, in order:
//  1. $K3_KERNELS (a path) — run the suite against another build;
//  2. the embedded file: under `bun run`/`bun test` a real path in zig-out/, in the compiled
//     binary `/$bunfs/root/…`, which bun extracts to $TMPDIR itself;
//  3. if that extraction cannot be mapped (noexec $TMPDIR), a copy in ~/.cache/k3/.
import { dlopen, FFIType, suffix } from "bun:ffi";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import embeddedLib from "../zig-out/lib/libkernels.so" with { type: "file" };

const { ptr, i32, i64, f32, void: v } = FFIType;

/** The symbol table: argument and return types of every exported function (see kernels/k3.h). */
export const symbols = {
  k3_version: { args: [], returns: i32 },
} as const;

export type Kernels = ReturnType<typeof dlopen<typeof symbols>>["symbols"];

let loaded: { k: Kernels; path: string } | undefined;

function openAt(path: string) {
  return dlopen(path, symbols);
}

/** dlopen the kernel library once per process and return its symbols. */
export function loadKernels(): Kernels {
  if (loaded) return loaded.k;
  const override = process.env.K3_KERNELS;
  let lib: ReturnType<typeof openAt>;
  let path: string;
  if (override) {
    lib = openAt(override);
    path = override;
  } else {
    try {
      lib = openAt(embeddedLib);
      path = embeddedLib;
    } catch (err) {
      if (!embeddedLib.startsWith("/$bunfs/")) throw err;
      // noexec $TMPDIR: bun's own extraction cannot be mapped; keep a copy in the user's cache.
      const bytes = readFileSync(embeddedLib);
      const dir = join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "k3");
      path = join(dir, `libkernels-${Bun.hash(bytes).toString(16)}.${suffix}`);
      if (!existsSync(path)) {
        mkdirSync(dir, { recursive: true });
        const tmp = `${path}.${process.pid}.tmp`;
        writeFileSync(tmp, bytes, { mode: 0o755 });
        renameSync(tmp, path);
      }
      lib = openAt(path);
    }
  }
  loaded = { k: lib.symbols, path };
  return loaded.k;
}

/** Where the loaded library came from (for `k3 info`/stats). */
export function kernelsPath(): string | undefined {
  return loaded?.path;
}

void [ptr, i32, i64, f32, v];
