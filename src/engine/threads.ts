// The compute pool an engine runs on (its size, and why) and the kernel paths it may force.
// engineLimits, ISA_NAMES, defaultThreads and ComputeThreads are public: src/engine.ts re-exports them.
import { K3Error } from "../errors.ts";
import { ISA, kernelLimits, type Kernels } from "../kernels.ts";

/** The most compute and I/O threads an engine accepts (the kernel library's pools). */
export function engineLimits(): { threads: number; ioThreads: number } {
  const l = kernelLimits();
  return { threads: l.poolThreads, ioThreads: l.ioThreads };
}

/** The kernel paths EngineOptions.isa can force (besides "auto"). */
export const ISA_NAMES = (Object.keys(ISA) as (keyof typeof ISA)[]).filter((n) => n !== "auto");

/** The compute pool's size for an engine, and why (reported in stats). */
export interface ComputeThreads {
  threads: number;
  hardwareThreads: number;
  /** The pool's limit (kernels/k3.h); the default is capped by it on bigger machines. */
  limit: number;
}

/** The compute threads an engine uses when none are asked for: every hardware thread, up to the
 *  pool's limit (`k3 plan` assumes the same). */
export function defaultThreads(hardwareThreads = navigator.hardwareConcurrency ?? 1): number {
  return Math.max(1, Math.min(hardwareThreads, kernelLimits().poolThreads));
}

/**
 * Size the process-wide compute pool: `requested`, or defaultThreads(). A request past the
 * pool's limit is a usage error, not a silent cap.
 */
export function computeThreads(k: Kernels, requested: number | undefined, hardwareThreads = navigator.hardwareConcurrency ?? 1): ComputeThreads {
  const limit = kernelLimits(k).poolThreads;
  if (requested !== undefined && (!Number.isInteger(requested) || requested < 1 || requested > limit))
    throw new K3Error("USAGE", `--threads must be an integer from 1 to ${limit} (the compute pool's limit), got ${requested}`);
  const threads = requested ?? defaultThreads(hardwareThreads);
  const got = k.k3_pool_init(threads);
  if (got !== threads) throw new K3Error("INTERNAL", `the compute pool started ${got} threads, asked for ${threads} (the OS refused a thread)`);
  return { threads, hardwareThreads, limit };
}
