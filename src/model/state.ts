// Per-sequence state (MODEL.md §6): what persists between forward calls so that decoding one
// token equals recomputing the whole prefix.
//   KDA layer: S [H][D][D] f32 (key × value), conv history for q, k, v: [width − 1][P] each
//   (oldest first).
//   MLA layer: latent cache [maxContext][R + dr] f32 rows = [RMSNorm(c_kv) | k_rope].
//   AttnRes: nothing (the bank is rebuilt from the current token's own values every step).
import { K3Error } from "../errors.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import type { Kernels } from "../kernels.ts";
import { KDA_STATE, mlaCacheElements } from "./buffers.ts";
import { CBuffers, type CBuf } from "./cmem.ts";
import type { DraftState } from "./draft-state.ts";

export interface KdaState {
  S: CBuf;
  convQ: CBuf;
  convK: CBuf;
  convV: CBuf;
}

export interface MlaState {
  cache: CBuf; // [maxContext][R + dr]
}

export class SessionState {
  readonly kda: (KdaState | undefined)[] = [];
  readonly mla: (MlaState | undefined)[] = [];
  /** Number of tokens already processed (the next token's position). */
  pos = 0;
  /** Every token id processed so far, in order. */
  readonly history: number[] = [];
  /** The draft model's cache for this session, when the engine has a draft (src/model/draft.ts):
   *  not part of the saved state (a restored session drafts from its next pass on). */
  draft?: DraftState;
  private mem: CBuffers;

  constructor(
    k: Kernels,
    readonly cfg: ModelConfig,
    readonly maxContext: number,
  ) {
    if (!Number.isInteger(maxContext) || maxContext < 1)
      throw new K3Error("USAGE", `context limit must be a positive integer, got ${maxContext}`);
    this.mem = new CBuffers(k);
    // Sizes from the table the planner sums (src/model/buffers.ts).
    const f = (n: number, what: string) => this.mem.floats(n, what);
    try {
      cfg.layerKinds.forEach((kind, L) => {
        if (kind === "kda") {
          this.kda[L] = {
            S: f(KDA_STATE.S(cfg), `KDA state L${L}`),
            convQ: f(KDA_STATE.convQ(cfg), `q conv history L${L}`),
            convK: f(KDA_STATE.convK(cfg), `k conv history L${L}`),
            convV: f(KDA_STATE.convV(cfg), `v conv history L${L}`),
          };
        } else {
          this.mla[L] = { cache: f(mlaCacheElements(cfg, maxContext), `MLA cache L${L}`) };
        }
      });
    } catch (err) {
      this.mem.free();
      throw err;
    }
  }

  /** All state buffers in a fixed order (for saving / loading sessions). */
  buffers(): { name: string; buf: CBuf }[] {
    const out: { name: string; buf: CBuf }[] = [];
    this.cfg.layerKinds.forEach((kind, L) => {
      const s = this.kda[L];
      if (s) out.push({ name: `kda.${L}.S`, buf: s.S }, { name: `kda.${L}.convQ`, buf: s.convQ }, { name: `kda.${L}.convK`, buf: s.convK }, { name: `kda.${L}.convV`, buf: s.convV });
      const m = this.mla[L];
      if (m) out.push({ name: `mla.${L}.cache`, buf: m.cache });
    });
    return out;
  }

  /** Forget everything: zero state, position 0. */
  reset(): void {
    if (this.freed) throw new K3Error("USAGE", "this session was closed");
    for (const { buf } of this.buffers()) buf.f32().fill(0);
    this.pos = 0;
    this.history.length = 0;
    this.dirty = false;
    this.draft?.reset();
  }

  get bytes(): number {
    return this.mem.totalBytes + (this.draft?.bytes ?? 0);
  }

  /** True once free() ran: the buffers are gone and any use would touch freed memory. */
  freed = false;
  /**
   * True when a forward pass failed part-way (a read error at layer L): layers before L already
   * advanced their KDA state and conv history for tokens that never finished, so the state no
   * longer matches `history`. Only reset() makes the session usable again.
   */
  dirty = false;

  free(): void {
    this.mem.free();
    this.draft?.free();
    this.draft = undefined;
    this.freed = true;
  }
}
