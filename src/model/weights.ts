// How the forward pass reaches weights. The walk never knows where bytes come from: everything
// resident (ResidentWeights, below in resident.ts) or streamed from disk within a RAM budget
// (src/memory/). Both hand out raw C addresses (numbers) that stay valid between acquire and
// release; kernels read straight from them.
import type { DType } from "../checkpoint/types.ts";
import type { Addr } from "./cmem.ts";

/** Weight formats: as released, or a compact trunk packed by `k3 pack`: int8 / int4 in groups of
 *  32 columns with an f32 scale each (kernels/k3_matmul_q.c, lossy), or BX4, the release's bf16
 *  coded exactly in 12 bits plus escapes (kernels/k3_bx4.c), whose escape tables are BX4E. */
export type WeightDType = DType | "Q8" | "Q4" | "BX4" | "BX4E";

/** A BX4 matrix's escape table in memory (kernels/k3.h): [rows + 1] u32 index, then `count` entries. */
export interface EscapeTable {
  ptr: Addr;
  rows: number;
  count: number;
}

/** Rows [r0, r1) of a matrix in memory (Q8/Q4: with their scales; BX4: with the matrix's escape table). */
export interface MatrixSlice {
  r0: number;
  r1: number;
  ptr: Addr;
  scales?: Addr;
  escapes?: EscapeTable;
}

/** A tensor in C memory: raw address, dtype and shape as in the checkpoint (or the pack file). */
export interface TensorRef {
  /** Full tensor name (errors name it). */
  name: string;
  ptr: Addr;
  dtype: WeightDType;
  shape: number[];
  bytes: number;
  /** Q8/Q4: the f32 group scales [rows][cols/32]. */
  scales?: Addr;
  /** BX4: the escape table (in the layer's core). */
  escapes?: EscapeTable;
  /**
   * Set when the provider streams this matrix in row slices (a matrix larger than one trunk piece,
   * src/memory/pieces.ts): `ptr` is then unusable, and slice(i) brings slice i into memory (valid
   * until the next matrix or slice is asked for). Every row is computed alone, so slices give the
   * same bits as the whole matrix.
   */
  rowSlices?: { r0: number; r1: number }[];
  slice?(i: number): MatrixSlice;
}

/** The six tensors of one routed expert (MXFP4: packed nibbles + E8M0 scales). */
export interface ExpertRef {
  w1p: Addr; // gate  [moeInter][latent/2]
  w1s: Addr; //       [moeInter][latent/32]
  w2p: Addr; // down  [latent][moeInter/2]
  w2s: Addr; //       [latent][moeInter/32]
  w3p: Addr; // up    [moeInter][latent/2]
  w3s: Addr; //       [moeInter][latent/32]
}

/** Non-expert tensors of one layer, by name below `layers.L.` (e.g. "self_attn.q_proj.weight"). */
export interface LayerRef {
  layer: number;
  t(suffix: string): TensorRef; // throws naming the tensor if absent
}

/** Counters every provider keeps (STREAMING.md §5: a hit is a demand request served without disk). */
export interface WeightStats {
  trunkBytesRead: number;
  expertBytesRead: number;
  reads: number;
  expertRequests: number;
  expertHits: number; // served without any read during this token (prefetched-this-token is not a hit)
  lookaheadIssued: number;
  lookaheadUsed: number;
  ioWaitMs: number;
  verifyMs: number; // time spent checking checksums (--verify)
  verifiedBytes: number; // payload bytes checked against recorded checksums (--verify): a count, not a time
  /** Reads and payload bytes read a second time (a hedge on a mirror, a retry after a failed
   *  read): Σ devices' reads = reads + extraReads, Σ their bytes = trunk + expert + extraBytes. */
  extraReads: number;
  extraBytesRead: number;
  hedgesIssued: number; // late reads re-issued on another copy (STREAMING.md "Routing")
  hedgesWon: number; // … that answered first
  retries: number; // failed reads read again from another copy
  directIo: boolean; // ioMode !== "buffered" (on every device)
  ioMode: IoMode;
  /** Per device the provider reads from (docs/STREAMING.md "Routing"); empty when resident. */
  devices: DeviceStats[];
}

/** One device's share of a provider's reads. Counters add; the last four describe the device. */
export interface DeviceStats {
  name: string; // "nvme0n1", "tmpfs at /dev/shm"
  bytesRead: number; // payload bytes of the reads it served (hedges and retries included)
  reads: number;
  errors: number; // reads that failed on it
  retries: number; // reads it served after another copy failed
  rerouted: number; // late reads moved to it before they started elsewhere
  hedgesIssued: number; // hedges it was asked to read
  hedgesWon: number; // … that answered first
  busyMs: number; // time it had a read of this provider queued or running
  threads: number; // its queue's I/O threads
  directIo: boolean;
  ioMode: IoMode;
  files: number; // shard files (and copies) opened on it
  queue: number; // its read queue in this process (kernels/k3_io.h; tests inject faults by it)
}

/** How shards are read: O_DIRECT (Linux), F_NOCACHE + read-ahead off (macOS), or through the page cache. */
export type IoMode = "O_DIRECT" | "F_NOCACHE" | "buffered";

/** All counters at zero (a provider's starting point). */
export function zeroStats(ioMode: IoMode): WeightStats {
  return {
    trunkBytesRead: 0, expertBytesRead: 0, reads: 0, expertRequests: 0, expertHits: 0, lookaheadIssued: 0, lookaheadUsed: 0, ioWaitMs: 0, verifyMs: 0, verifiedBytes: 0,
    extraReads: 0, extraBytesRead: 0, hedgesIssued: 0, hedgesWon: 0, retries: 0, directIo: ioMode !== "buffered", ioMode, devices: [],
  };
}

/** Counters a − b (what happened between two snapshots of a provider's counters). */
export function diffStats(a: WeightStats, b: WeightStats): WeightStats {
  return combine(a, b, (x, y) => x - y);
}

/** Counters a + b (a generation's share of several passes). */
export function addStats(a: WeightStats, b: WeightStats): WeightStats {
  return combine(a, b, (x, y) => x + y);
}

/** Counters ÷ n (one session's share of a pass n sessions shared). */
export function divideStats(a: WeightStats, n: number): WeightStats {
  return combine(a, a, (x) => x / n);
}

const COUNTERS = ["trunkBytesRead", "expertBytesRead", "reads", "expertRequests", "expertHits", "lookaheadIssued", "lookaheadUsed", "ioWaitMs", "verifyMs", "verifiedBytes", "extraReads", "extraBytesRead", "hedgesIssued", "hedgesWon", "retries"] as const;
const DEVICE_COUNTERS = ["bytesRead", "reads", "errors", "retries", "rerouted", "hedgesIssued", "hedgesWon", "busyMs"] as const;

/** Counters combined field by field; the I/O mode is a's (one provider's mode never changes).
 *  Devices are matched by name (a zero starting point has none: the other side's are used). */
function combine(a: WeightStats, b: WeightStats, f: (x: number, y: number) => number): WeightStats {
  const out = { ...a };
  for (const c of COUNTERS) out[c] = f(a[c], b[c]);
  const names = [...new Set([...a.devices.map((d) => d.name), ...b.devices.map((d) => d.name)])];
  out.devices = names.map((name) => {
    const x = a.devices.find((d) => d.name === name);
    const y = b.devices.find((d) => d.name === name);
    const d = { ...(x ?? y)! };
    for (const c of DEVICE_COUNTERS) d[c] = f(x?.[c] ?? 0, y?.[c] ?? 0);
    return d;
  });
  return out;
}

export interface WeightProvider {
  /** Embedding row of token `id` as f32 into dst (E floats). */
  embedRow(id: number, dst: Addr): void;
  /** lm_head, final norm, output AttnRes mix tensors (resident or streamed like a layer). */
  head(): { lmHead: TensorRef; norm: TensorRef; outResProj: TensorRef; outResNorm: TensorRef };
  /** Blocks until layer L's non-expert tensors are in memory; may start reading layer L+1. */
  acquireLayer(L: number): LayerRef;
  releaseLayer(L: number): void;
  /**
   * Declare the experts layer L needs (deduplicated, in first-use order) and start their reads.
   * Returns them in the order they become available, via `nextExpert`.
   */
  requestExperts(L: number, experts: number[]): void;
  /** Wait for any requested expert of layer L not yet handed out; returns its id and tensors. */
  nextExpert(L: number): { expert: number; ref: ExpertRef };
  /** All experts of layer L are done; their slots may be reused. */
  releaseExperts(L: number): void;
  /** Optional: hint that layer L's router predicts these experts (lookahead; exact by design). */
  hintExperts?(L: number, experts: number[]): void;
  /** Optional: layer L's trunk if it is in memory now, without waiting (for lookahead). */
  peekLayer?(L: number): LayerRef | null;
  /** Optional: the head's tensors are no longer needed this token. */
  releaseHead?(): void;
  /** Optional: whether the pass about to run ends with the head (false for non-final prefill chunks). */
  setHeadNext?(yes: boolean): void;
  stats(): WeightStats;
  /** C memory the provider holds (what the planner's weight items must cover). */
  readonly allocatedBytes: number;
  /** Threads of each device's read queue (none for an all-resident provider). */
  readonly ioThreads?: number;
  close(): void;
}

/** A draft model's tensor in a file (its safetensors, or a draft pack), read resident at open
 *  (src/model/draft-weights.ts; the planner sums the same list, src/memory/draft-plan.ts). */
export interface DraftTensorSource {
  name: string;
  file: string;
  offset: number;
  bytes: number;
  dtype: TensorRef["dtype"];
  shape: number[];
  /** Q8/Q4: the scales' range in the same file. */
  scales?: { offset: number; bytes: number };
}
