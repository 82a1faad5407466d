// A session's state copied out of its buffers (and back): what the prefix cache keeps, in RAM or
// in a file (src/model/session-file.ts writes the same parts).
//
// Invariants:
//   - a snapshot holds exactly the bytes that carry information at its position: every KDA state
//     and conv history whole, each MLA cache's first `pos` rows (rows past pos are never read:
//     attention reads rows < pos + T of the pass that writes them);
//   - restoring a snapshot into a session of the same model and a context ≥ its position leaves
//     the session bit-identical to the one captured (same bytes, position, history), so the next
//     token's logits are the same bits (test/prefix-cache.test.ts);
//   - a snapshot is checked against the session it is restored into (names, sizes, context)
//     before any byte is copied: a mismatch is a K3Error and the session is unchanged.
import { toArrayBuffer } from "bun:ffi";
import { K3Error } from "../errors.ts";
import type { SessionState } from "./state.ts";

export interface SnapshotPart {
  name: string;
  /** Live bytes of this buffer (see liveBytes). */
  bytes: number;
}

export interface StateSnapshot {
  pos: number;
  /** Token ids the state has processed, in order (history.length = pos). */
  history: number[];
  parts: SnapshotPart[];
  /** The parts' bytes, concatenated in order. */
  data: Uint8Array;
}

/** Bytes of one MLA cache row (f32 [c_kv normed | k_rope]). */
export const mlaRowBytes = (state: SessionState) => 4 * (state.cfg.kvLoraRank + state.cfg.qkRope);

/** Bytes of a state buffer that carry information at position `pos` (MLA rows past pos are unused). */
export function liveBytes(name: string, bytes: number, pos: number, rowBytes: number): number {
  return name.startsWith("mla.") ? pos * rowBytes : bytes;
}

/** The state's live bytes, as views into its C buffers (valid until the state changes or is freed). */
export function liveViews(state: SessionState): { name: string; view: Uint8Array }[] {
  const row = mlaRowBytes(state);
  return state.buffers().map(({ name, buf }) => ({ name, view: new Uint8Array(toArrayBuffer(buf.ptr as any, 0, liveBytes(name, buf.bytes, state.pos, row))) }));
}

/** Bytes a snapshot at `pos` takes (its data). */
export function snapshotBytes(state: SessionState, pos = state.pos): number {
  const row = mlaRowBytes(state);
  return state.buffers().reduce((a, { name, buf }) => a + liveBytes(name, buf.bytes, pos, row), 0);
}

/** Copy the state out (a consistent state only: a dirty or freed one is refused). */
export function captureState(state: SessionState): StateSnapshot {
  if (state.freed) throw new K3Error("INTERNAL", "snapshot of a closed session");
  if (state.dirty) throw new K3Error("INTERNAL", "snapshot of a session an error interrupted");
  const views = liveViews(state);
  const data = new Uint8Array(views.reduce((a, v) => a + v.view.byteLength, 0));
  let off = 0;
  for (const v of views) {
    data.set(v.view, off);
    off += v.view.byteLength;
  }
  return { pos: state.pos, history: state.history.slice(), parts: views.map((v) => ({ name: v.name, bytes: v.view.byteLength })), data };
}

/** Refuse a snapshot that does not fit `state` (other model layout, too long), naming `where`. */
export function checkSnapshotFits(state: SessionState, snap: Pick<StateSnapshot, "pos" | "history" | "parts">, where: string): void {
  if (snap.pos > state.maxContext) throw new K3Error("SESSION", `${where} holds ${snap.pos} tokens, more than this context limit (${state.maxContext}); use --context ${snap.pos} or more`);
  if (snap.history.length !== snap.pos) throw new K3Error("SESSION", `${where}: position ${snap.pos} with ${snap.history.length} history tokens`);
  const row = mlaRowBytes(state);
  const bufs = state.buffers();
  if (bufs.length !== snap.parts.length) throw new K3Error("SESSION", `${where}: ${snap.parts.length} state buffers, this model has ${bufs.length}`);
  bufs.forEach(({ name, buf }, i) => {
    const want = snap.parts[i]!;
    const live = liveBytes(name, buf.bytes, snap.pos, row);
    if (want.name !== name || want.bytes !== live) throw new K3Error("SESSION", `${where}: buffer ${i} is ${want.name} (${want.bytes} bytes), expected ${name} (${live} bytes)`);
  });
}

/** Make `state` exactly the captured one: checked first (nothing changes on a mismatch). */
export function restoreState(state: SessionState, snap: StateSnapshot, where = "snapshot"): void {
  checkSnapshotFits(state, snap, where);
  const total = snap.parts.reduce((a, p) => a + p.bytes, 0);
  if (snap.data.byteLength !== total) throw new K3Error("SESSION", `${where}: ${snap.data.byteLength} bytes of state, its parts add up to ${total}`);
  state.reset();
  const row = mlaRowBytes(state);
  let off = 0;
  for (const { name, buf } of state.buffers()) {
    const live = liveBytes(name, buf.bytes, snap.pos, row);
    new Uint8Array(toArrayBuffer(buf.ptr as any, 0, live)).set(snap.data.subarray(off, off + live));
    off += live;
  }
  state.pos = snap.pos;
  state.history.push(...snap.history);
}
