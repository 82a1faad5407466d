// Rollback of a speculative verify pass without reading weights (docs/SPECULATION.md §3): the
// bookkeeping that lets a session keep exactly the drafted positions that were accepted, one at a
// time, and nothing else. The KDA math stays in forward.ts; this module owns what it needs:
//
//   - per verify segment (one session's rows [x, d_1 … d_k] in a pass), the inputs of each drafted
//     row per KDA layer: raw q, k, v before the conv (the conv history is the last width − 1 of
//     them) and the recurrence inputs k̂, v̂, g, β — `spec_inputs`, one slot per segment a pass
//     may verify;
//   - one layer's scratch copy of a state and conv history (`spec_S`, `spec_conv`), on which a
//     segment's drafted rows run so the session's own state advances by x alone;
//   - which segments may still be kept: a session's segment holds its slot until the session's next
//     pass (which replaces it), until it is released (its generation kept what it will), or — the
//     slots all held — until a newer segment takes the oldest slot (only when more sessions verify
//     unbatched, interleaved, than there are slots: the batch scheduler never lets a step need a
//     slot that is held); and it is valid only while its session is where the pass left it.
//
// keep() re-applies one drafted position to the session's real state from its recorded inputs
// (shift the conv histories, one delta-rule step): the same kernel on the same inputs, so the state
// is bit for bit what plain decoding of the kept tokens leaves. MLA needs nothing: the pass wrote
// cache rows for every position, and rows past the kept ones are never read (attention reads
// rows < pos + T of the pass that rewrites them) nor saved (session files hold rows < pos).
//
// State per segment, no globals: several sessions' verify segments share one batched pass (issue
// 27), each in its own slot, and each session keeps its accepted drafts whenever its generation
// gets to them — other sessions' passes in between touch only their own slots.
import { K3Error } from "../errors.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import { K3_STATUS, type Kernels } from "../kernels.ts";
import { draftInputWidth, type ForwardBuffers } from "./buffers.ts";
import { at, type Addr } from "./cmem.ts";
import type { KdaState, SessionState } from "./state.ts";

const F = 4;

/** The recorded inputs of a drafted row: [q | k | v | k̂ | v̂ | g] (P floats each), then β (H). */
export const RECORD = { q: 0, k: 1, v: 2, kHat: 3, vHat: 4, g: 5, beta: 6 } as const;

/** One session's verify segment of the last pass: what keep() needs. */
interface VerifySegment {
  state: SessionState;
  ids: number[];
  /** The session's position before the pass (x's position). */
  pos0: number;
  /** Drafted positions kept so far. */
  kept: number;
  slot: number;
  /** The pass that opened it (the oldest one gives its slot up first). */
  pass: number;
}

export class Rollback {
  private segments = new Map<SessionState, VerifySegment>();
  private readonly kdaIndex: number[];
  private passes = 0;

  constructor(
    private readonly k: Kernels,
    private readonly cfg: ModelConfig,
    private readonly b: ForwardBuffers,
    /** Drafted positions one segment may hold (0: no speculation buffers). */
    readonly drafts: number,
    /** Verify segments one pass may carry. */
    readonly slots = 1,
  ) {
    let kdas = 0;
    this.kdaIndex = cfg.layerKinds.map((kind) => (kind === "kda" ? kdas++ : -1));
  }

  private get kdaLayers(): number {
    return this.kdaIndex.filter((i) => i >= 0).length;
  }

  /** A pass over `states` is starting: what they verified before is void (their state moves on);
   *  other sessions' segments stay where they are. */
  newPass(states: readonly SessionState[]): void {
    this.passes++;
    for (const s of states) this.segments.delete(s);
  }

  /** `state` has kept what it will of its segment (or stopped): its slot is free. */
  release(state: SessionState): void {
    this.segments.delete(state);
  }

  /** Sessions holding a slot now. */
  get held(): number {
    return this.segments.size;
  }

  /** A verify segment of the pass about to run (after newPass) records its drafted rows: its slot
   *  is a free one, else the oldest segment's of an earlier pass (see the header). */
  open(state: SessionState, ids: number[]): number {
    if (ids.length - 1 > this.drafts) throw new K3Error("INTERNAL", `verify segment of ${ids.length} positions, the model has room for 1 + ${this.drafts}`);
    const used = new Map([...this.segments.values()].map((v) => [v.slot, v]));
    let slot = Array.from({ length: this.slots }, (_, i) => i).find((i) => !used.has(i));
    if (slot === undefined) {
      const oldest = [...used.values()].filter((v) => v.pass < this.passes).sort((a, b) => a.pass - b.pass)[0];
      if (!oldest) throw new K3Error("INTERNAL", `a pass of ${this.segments.size + 1} verify segments, the model has slots for ${this.slots}`);
      this.segments.delete(oldest.state);
      slot = oldest.slot;
    }
    this.segments.set(state, { state, ids: ids.slice(), pos0: state.pos, kept: 0, slot, pass: this.passes });
    return slot;
  }

  /** Where drafted position j of slot `slot` keeps KDA layer L's inputs. */
  record(slot: number, L: number, j: number): Addr {
    const li = this.kdaIndex[L]!;
    if (li < 0) throw new K3Error("INTERNAL", `layer ${L} is not a KDA layer`);
    return at(this.b.spec_inputs.ptr, (((slot * this.kdaLayers + li) * this.drafts + j) * draftInputWidth(this.cfg)) * F);
  }

  /** Copy rows [row0 + 1, row0 + n) of a pass buffer (drafted rows) into field `field` of the slot's records. */
  save(slot: number, L: number, field: number, from: Addr, row0: number, n: number, rowFloats: number): void {
    const P = this.cfg.kdaHeads * this.cfg.kdaHeadDim;
    for (let j = 0; j + 1 < n; j++) this.k.k3_mem_copy(at(this.record(slot, L, j), field * P * F), at(from, (row0 + j + 1) * rowFloats * F), rowFloats * F);
  }

  /** The scratch conv histories (q, k, v), loaded with `st`'s: the drafted rows' conv runs on them. */
  scratchConv(st: KdaState): [Addr, Addr, Addr] {
    const hb = (this.cfg.convKernel - 1) * this.cfg.kdaHeads * this.cfg.kdaHeadDim * F;
    const scratch = (n: number) => at(this.b.spec_conv.ptr, n * hb);
    [st.convQ, st.convK, st.convV].forEach((h, n) => this.k.k3_mem_copy(scratch(n), h.ptr, hb));
    return [scratch(0), scratch(1), scratch(2)];
  }

  /** The scratch recurrent state, loaded with `st`'s: the drafted rows' delta rule runs on it. */
  scratchState(st: KdaState): Addr {
    const c = this.cfg;
    this.k.k3_mem_copy(this.b.spec_S.ptr, st.S.ptr, c.kdaHeads * c.kdaHeadDim * c.kdaHeadDim * F);
    return this.b.spec_S.ptr;
  }

  /** Drafted positions of the last pass `state` may still keep (0 when there is none). */
  keepable(state: SessionState): number {
    const v = this.segments.get(state);
    if (!v || state.freed || state.dirty || state.pos !== v.pos0 + 1 + v.kept) return 0;
    return v.ids.length - 1 - v.kept;
  }

  /**
   * Keep the next drafted position of `state`'s verify segment: re-apply its KDA conv and
   * recurrence to the real state from the recorded inputs (no weights read), then advance
   * position and history. `o` is scratch for the recurrence's (unused) output.
   */
  keep(state: SessionState, o: Addr): void {
    if (this.keepable(state) < 1) throw new K3Error("INTERNAL", "no verified position left to keep (another pass ran, or the session changed)");
    const v = this.segments.get(state)!;
    const { k, cfg: c } = this;
    const H = c.kdaHeads;
    const D = c.kdaHeadDim;
    const P = H * D;
    const hist = c.convKernel - 1;
    const j = v.kept; // draft index: row j + 1 of the segment
    for (let L = 0; L < c.numLayers; L++) {
      const st = state.kda[L];
      if (!st) continue;
      const rec = this.record(v.slot, L, j);
      // Conv history ← the last `hist` raw inputs (what k3_kda_conv_silu leaves), oldest first.
      [st.convQ, st.convK, st.convV].forEach((h, n) => {
        for (let r = 0; r + 1 < hist; r++) k.k3_mem_copy(at(h.ptr, r * P * F), at(h.ptr, (r + 1) * P * F), P * F);
        k.k3_mem_copy(at(h.ptr, (hist - 1) * P * F), at(rec, n * P * F), P * F);
      });
      // S ← one delta-rule step with k̂, v̂, g, β of this position (the output is not needed: k̂
      // stands in for q, and o lands in scratch).
      const kHat = at(rec, RECORD.kHat * P * F);
      const status = k.k3_kda_recurrent(kHat, kHat, at(rec, RECORD.vHat * P * F), at(rec, RECORD.g * P * F), at(rec, RECORD.beta * P * F), st.S.ptr, o, H, D, 1);
      if (status !== K3_STATUS.ok) throw new K3Error("INTERNAL", `layer ${L}: k3_kda_recurrent refused a kept position (status ${status}): checkKernelLimits missed a limit`);
    }
    v.kept++;
    state.pos++;
    state.history.push(v.ids[j + 1]!);
  }
}
