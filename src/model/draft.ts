// The EAGLE-3 draft model inside the engine (DRAFTERS.md §3, format A; docs/DRAFT.md): one MLA
// decoder layer with interleaved YaRN RoPE and a SiLU MLP, fed by the target's hidden states.
// JS orchestrates, C computes (the target's matmuls and norms, the target's absorbed MLA kernel
// over the draft's latent cache, and the draft's own kernels: k3_rope_interleaved, k3_silu_glu).
//
// Three jobs:
//   - keep each session's draft cache in step with what the target committed (afterPass, the
//     target's TapSink): row j is built from the TARGET's taps at j and the token at j + 1 —
//     only fc, the norms, kv_a and RoPE (a committed row's cache entry depends on nothing else);
//     the taps wait in the session's ring until the draft proposes (or would lose them), so the
//     rows are built in batches and an idle draft costs little (draft-state.ts);
//   - propose a chain of k drafts (propose): step 1 from the pending row's taps (it writes that row,
//     whose inputs are exact: it is committed), steps 2..k from the previous step's feedback state
//     (eagle3.1: the post-norm output; eagle3: the pre-norm residual) and its argmax; chain rows
//     are written past the committed ones and dropped (overwritten) afterwards;
//   - never decide an output: a draft is only a guess the target verifies (src/speculate/).
//
// Numerics: f32 throughout from the stored weights (no bf16 casts of activations); every kernel
// in its fixed order, so the draft's logits are the same bits at any thread count and budget.
import type { DraftCheckpoint } from "../checkpoint/draft.ts";
import type { DraftConfig } from "../checkpoint/draft-config.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import { K3Error } from "../errors.ts";
import { K3_STATUS, type Kernels } from "../kernels.ts";
import { at, CBuffers, type Addr } from "./cmem.ts";
import { ropeAmplitude, ropeFrequencies, softmaxScale } from "../checkpoint/draft-rope.ts";
import { checkShape, matmulRows } from "./matmul.ts";
import { allocDraftBuffers, DRAFT_REFILL_ROWS, draftRowFloats, draftWindow, type DraftBuffers } from "./buffers.ts";
import { DraftState } from "./draft-state.ts";
import type { DraftWeights } from "./draft-weights.ts";
import type { PassRows, PassTaps, TapSink } from "./forward.ts";
import type { SessionState } from "./state.ts";
import type { TensorRef } from "./weights.ts";

const F = 4;
const L0 = "layers.0.";
const A = "layers.0.self_attn.";

/** Where rows of captured taps are: tap j of row i at ptr + (j·tapFloats + (row0 + i)·E)·4. */
interface TapRows {
  ptr: Addr;
  tapFloats: number;
  row0: number;
}

/** One proposal: the drafted tokens, and the draft's logits of each (views valid until the next step). */
export interface Proposal {
  tokens: number[];
  /** The draft's logits per drafted token, copied (for a sampled acceptance rule's q). */
  logits: Float32Array[];
}

export class DraftModel implements TapSink {
  readonly cfg: DraftConfig;
  private mem: CBuffers;
  private b: DraftBuffers;
  private readonly freq: Float64Array;
  private readonly amplitude: number;
  private readonly tau: number;
  private readonly E: number;
  private readonly nTaps: number;
  private readonly logitsView: Float32Array;

  constructor(
    private readonly k: Kernels,
    readonly target: ModelConfig,
    readonly checkpoint: DraftCheckpoint,
    private readonly w: DraftWeights,
    /** A token's embedding row as f32 (the target's rows when shared, else the draft's own). */
    private readonly embedRow: (id: number, dst: Addr) => void,
    /** Positions a session's draft cache holds (the engine's context). */
    readonly context: number,
    /** Drafted positions one verify pass may check (sizes each session's taps store). */
    readonly maxDrafts: number,
  ) {
    this.cfg = checkpoint.config;
    const d = this.cfg;
    this.E = d.hidden;
    this.nTaps = d.captureLayers.length;
    this.freq = ropeFrequencies(d);
    this.amplitude = ropeAmplitude(d);
    this.tau = softmaxScale(d);
    this.mem = new CBuffers(k);
    try {
      this.b = allocDraftBuffers(this.mem, d, { refillRows: DRAFT_REFILL_ROWS, context });
    } catch (err) {
      this.mem.free();
      throw err;
    }
    this.logitsView = this.b.logits.f32().subarray(0, d.vocab);
  }

  /** Positions one session's taps ring holds: a verify pass's rows fit many times over. */
  get window(): number {
    return draftWindow(this.maxDrafts);
  }

  /** A new session's draft state (the engine attaches it to the session). */
  newState(): DraftState {
    return new DraftState(this.k, this.cfg, this.context, this.window);
  }

  /** C memory of the draft's scratch (weights and sessions report their own). */
  get allocatedBytes(): number {
    return this.mem.totalBytes;
  }

  /** What stats and /v1/models say about it. */
  get info(): { name: string; dir: string; variant: string; format: "bf16" | "int8" | "int4"; captureLayers: number[]; sharedEmbedding: boolean } {
    return { name: this.checkpoint.name, dir: this.checkpoint.dir, variant: this.cfg.variant, format: this.w.format, captureLayers: [...this.cfg.captureLayers], sharedEmbedding: !this.w.hasOwnEmbedding };
  }

  /** C memory of its weights (what one draft step multiplies, its own embedding table aside). */
  get weightBytes(): number {
    return this.w.allocatedBytes;
  }

  // ---- keeping the cache in step with the target (TapSink) ----

  /**
   * After every target pass: its rows' taps go into the session's ring (a verify pass's too: the
   * session keeps its drafted positions later, one at a time); rows whose taps would leave the
   * ring are committed first, so none is lost. Everything else waits for propose() (lazy: an
   * idle draft builds its rows in batches, draft-state.ts).
   */
  afterPass(segments: PassRows[], taps: PassTaps): void {
    for (const seg of segments) {
      const ds = seg.state.draft;
      if (!ds) continue;
      const p = seg.pos0;
      const m = seg.ids.length;
      const W = ds.window;
      const keepFrom = Math.max(p + m - W, 0); // the first position the ring keeps after this pass
      // Rows before this pass that would leave the ring (or that it cannot reach: a gap before p).
      this.catchUp(ds, seg.state.history, Math.min(keepFrom, p));
      if (ds.storeEnd < p) this.gap(ds, p); // no taps for [storeEnd, p): rows there cannot be built
      // Rows of this pass that do not fit the ring: committed now, from the pass's own taps.
      if (keepFrom > p) {
        if (ds.rows === p) this.commit(ds, { ptr: taps.ptr, tapFloats: taps.tapFloats, row0: seg.row0 }, keepFrom - p, seg.ids.slice(1, keepFrom - p + 1), p);
        else ds.rows = ds.validFrom = keepFrom;
        ds.rows = Math.max(ds.rows, keepFrom);
      }
      this.storeRowsOf(ds, taps, seg.row0, p, Math.max(keepFrom, p), p + m);
    }
  }

  /** Rows [ds.validFrom, upTo) cannot exist: no taps reach them. The draft attends from upTo on. */
  private gap(ds: DraftState, upTo: number): void {
    if (ds.rows < upTo) ds.rows = ds.validFrom = upTo;
    ds.storeFrom = ds.storeEnd = upTo;
  }

  /** Commit rows [ds.rows, upTo) from the ring (successor tokens from the session's history). */
  private catchUp(ds: DraftState, history: readonly number[], upTo: number): void {
    if (ds.rows > history.length) ds.reset(); // the session went back (a reset or restore)
    if (ds.rows >= upTo) return;
    if (ds.rows < ds.storeFrom) ds.rows = ds.validFrom = Math.min(ds.storeFrom, upTo); // older taps are gone
    const end = Math.min(upTo, ds.storeEnd);
    const W = ds.window;
    while (ds.rows < end) {
      const j = ds.rows;
      const n = Math.min(end - j, W - (j % W)); // a contiguous run of ring slots
      if (j + n >= history.length) throw new K3Error("INTERNAL", `draft catch-up to ${upTo} with ${history.length} tokens`);
      this.commit(ds, { ptr: ds.store.ptr, tapFloats: W * this.E, row0: j % W }, n, history.slice(j + 1, j + 1 + n), j);
    }
    if (ds.rows < upTo) this.gap(ds, upTo);
  }

  /** Copy the pass rows of positions [from, to) (the pass starts at p, row row0) into the ring. */
  private storeRowsOf(ds: DraftState, taps: PassTaps, row0: number, p: number, from: number, to: number): void {
    const E = this.E;
    const W = ds.window;
    for (let pos = from; pos < to; ) {
      const n = Math.min(to - pos, W - (pos % W));
      for (let j = 0; j < this.nTaps; j++) this.k.k3_mem_copy(ds.tapAt(j, pos), at(taps.ptr, (j * taps.tapFloats + (row0 + pos - p) * E) * F), n * E * F);
      pos += n;
    }
    if (ds.storeEnd < from) ds.storeFrom = from;
    ds.storeEnd = to;
    ds.storeFrom = Math.max(ds.storeFrom, to - W);
  }

  /**
   * Committed rows pos0..pos0 + n − 1 from target taps and their successor tokens: the cache entry
   * of each (RMSNorm(c_kv), k_r rotated at its position). Only fc, the norms and kv_a run.
   */
  private commit(ds: DraftState, src: TapRows, n: number, tokens: readonly number[], pos0: number): void {
    for (let i0 = 0; i0 < n; i0 += DRAFT_REFILL_ROWS) {
      const T = Math.min(DRAFT_REFILL_ROWS, n - i0);
      this.fuse({ ...src, row0: src.row0 + i0 }, T, this.b.h.ptr);
      this.input(this.b.h.ptr, tokens.slice(i0, i0 + T), T);
      this.cacheRows(ds, pos0 + i0, T);
    }
    ds.rows = pos0 + n;
  }

  // ---- the draft's pieces ----

  /** h[T][E] = W_fc · [ĝ_0; …] of T rows of taps (ĝ_j = RMSNorm(g_j; fc_norm.j) for eagle3.1). */
  private fuse(src: TapRows, T: number, h: Addr): void {
    const { k, E, nTaps } = this;
    const b = this.b;
    for (let j = 0; j < nTaps; j++) {
      const from = at(src.ptr, (j * src.tapFloats + src.row0 * E) * F);
      const to = at(b.fcin.ptr, j * E * F);
      if (this.cfg.fcNorm) k.k3_rmsnorm_bf16w(from, E, this.w.t(`fc_norm.${j}.weight`).ptr, to, nTaps * E, E, T, this.cfg.rmsEps);
      else for (let t = 0; t < T; t++) k.k3_mem_copy(at(to, t * nTaps * E * F), at(from, t * E * F), E * F);
    }
    this.mm("fc.weight", b.fcin.ptr, h, E, nTaps * E, T);
  }

  /** u[T][2E] = [RMSNorm(E[token]; input_layernorm) | RMSNorm(h; hidden_norm)] (embedding first). */
  private input(h: Addr, tokens: readonly number[], T: number): void {
    const { k, E } = this;
    const b = this.b;
    const eps = this.cfg.rmsEps;
    for (let t = 0; t < T; t++) this.embedRow(tokens[t]!, at(b.emb.ptr, t * E * F));
    k.k3_rmsnorm_bf16w(b.emb.ptr, E, this.w.t(`${L0}input_layernorm.weight`).ptr, b.u.ptr, 2 * E, E, T, eps);
    k.k3_rmsnorm_bf16w(h, E, this.w.t(`${L0}hidden_norm.weight`).ptr, at(b.u.ptr, E * F), 2 * E, E, T, eps);
  }

  /** Cache rows pos0.. of T rows of u: [RMSNorm(c_kv; kv_a_layernorm) | k_r rotated at the row's position]. */
  private cacheRows(ds: DraftState, pos0: number, T: number): void {
    const { k } = this;
    const d = this.cfg;
    const b = this.b;
    const R = d.kvLoraRank;
    const row = draftRowFloats(d);
    if (pos0 + T > this.context) throw new K3Error("INTERNAL", `draft cache rows ${pos0}..${pos0 + T - 1} past its ${this.context} positions`);
    this.mm(`${A}kv_a_proj_with_mqa.weight`, b.u.ptr, b.ckv.ptr, row, 2 * d.hidden, T);
    const base = at(ds.cache.ptr, pos0 * row * F);
    k.k3_rmsnorm_bf16w(b.ckv.ptr, row, this.w.t(`${A}kv_a_layernorm.weight`).ptr, base, row, R, T, d.rmsEps);
    for (let t = 0; t < T; t++) k.k3_mem_copy(at(base, (t * row + R) * F), at(b.ckv.ptr, (t * row + R) * F), d.qkRope * F);
    this.rope(at(base, R * F), row, 1, 0, pos0, T);
  }

  private rope(x: Addr, ldx: number, heads: number, hstride: number, pos0: number, T: number): void {
    const status = this.k.k3_rope_interleaved(x, ldx, heads, hstride, this.cfg.qkRope, this.freq, pos0, T, this.amplitude);
    if (status !== K3_STATUS.ok) throw new K3Error("INTERNAL", `k3_rope_interleaved refused position ${pos0 + T - 1} (status ${status}): the engine's context check missed the draft's RoPE limit`);
  }

  /**
   * One draft step for the query row (hidden hq, token) at position `pos`: writes that position's
   * cache row, attends over the session's rows [validFrom, pos], the MLP, the head; leaves the
   * logits in b.logits and the feedback state in b.hq. Returns the argmax (or −1: non-finite logits).
   */
  private step(ds: DraftState, token: number, pos: number): number {
    const { k, E } = this;
    const d = this.cfg;
    const b = this.b;
    const eps = d.rmsEps;
    const qk = d.qkNope + d.qkRope;
    this.input(b.hq.ptr, [token], 1);
    this.cacheRows(ds, pos, 1);
    this.mm(`${A}q_a_proj.weight`, b.u.ptr, b.qa.ptr, d.qLoraRank, 2 * E, 1);
    k.k3_rmsnorm_bf16w(b.qa.ptr, d.qLoraRank, this.w.t(`${A}q_a_layernorm.weight`).ptr, b.qa.ptr, d.qLoraRank, d.qLoraRank, 1, eps);
    this.mm(`${A}q_b_proj.weight`, b.qa.ptr, b.q.ptr, d.heads * qk, d.qLoraRank, 1);
    this.rope(at(b.q.ptr, d.qkNope * F), d.heads * qk, d.heads, qk, pos, 1);
    // Attention over rows [validFrom, pos]: the kernel attends rows 0..pos0 of the cache it is given.
    const kvb = this.w.t(`${A}kv_b_proj.weight`);
    if (kvb.dtype !== "BF16") throw new K3Error("INTERNAL", `draft kv_b_proj is ${kvb.dtype}, the MLA kernel takes bf16`);
    const from = ds.validFrom;
    const rowFloats = draftRowFloats(d);
    const status = k.k3_mla_attend(b.q.ptr, kvb.ptr, at(ds.cache.ptr, from * rowFloats * F), b.att.ptr, b.mla_scratch.ptr, d.heads, d.qkNope, d.qkRope, d.vHead, d.kvLoraRank, pos - from, 1, this.tau, ds.context - from, b.mla_scratch.bytes / F);
    if (status !== K3_STATUS.ok) throw new K3Error("INTERNAL", `draft attention at position ${pos} refused (k3_mla_attend status ${status}): the draft's cache or scratch is smaller than its context`);
    this.mm(`${A}o_proj.weight`, b.att.ptr, b.o.ptr, E, d.heads * d.vHead, 1);
    k.k3_add(b.hq.ptr, b.o.ptr, E); // r1 = h + o (the residual is h; no output gate)
    k.k3_rmsnorm_bf16w(b.hq.ptr, E, this.w.t(`${L0}post_attention_layernorm.weight`).ptr, b.z.ptr, E, E, 1, eps);
    this.mm(`${L0}mlp.gate_proj.weight`, b.z.ptr, b.g.ptr, d.intermediate, E, 1);
    this.mm(`${L0}mlp.up_proj.weight`, b.z.ptr, b.up.ptr, d.intermediate, E, 1);
    k.k3_silu_glu(b.g.ptr, b.up.ptr, b.g.ptr, d.intermediate);
    this.mm(`${L0}mlp.down_proj.weight`, b.g.ptr, b.mlp.ptr, E, d.intermediate, 1);
    k.k3_add(b.hq.ptr, b.mlp.ptr, E); // r2 = r1 + MLP
    k.k3_rmsnorm_bf16w(b.hq.ptr, E, this.w.t("norm.weight").ptr, b.y.ptr, E, E, 1, eps);
    this.mm("lm_head.weight", b.y.ptr, b.logits.ptr, d.vocab, E, 1);
    if (d.normOutput) k.k3_mem_copy(b.hq.ptr, b.y.ptr, E * F); // eagle3.1 feeds back the post-norm state
    return k.k3_argmax(this.logitsView, d.vocab);
  }

  // ---- proposing ----

  /**
   * Up to `max` drafts after the session's pending token `token` (the one the next pass feeds, at
   * position state.pos). Empty when the draft has no taps for the position before it (a session
   * restored from a snapshot drafts after its first pass). `logits`: copy each step's logits.
   * `pick(logits, position)`: the draft token of a step from its logits, for the token at
   * `position` — default the argmax (lowest id on ties); a seeded sampler applied to the draft's
   * logits with the target's random number of that position proposes what the target would draw
   * if its distribution were the draft's (docs/DRAFT.md "Sampled drafts").
   */
  propose(state: SessionState, token: number, max: number, opts: { logits?: boolean; pick?: (logits: Float32Array, position: number) => number } = {}): Proposal {
    const ds = state.draft;
    const out: Proposal = { tokens: [], logits: [] };
    if (!ds || max < 1 || state.pos < 1) return out;
    const pending = state.pos - 1;
    if (ds.rows > pending) ds.rows = pending; // a proposal's chain rows, or step 1 of one never verified
    this.catchUp(ds, state.history, pending);
    if (ds.rows !== pending || !ds.stored(pending)) return out;
    // Step 1: the pending row (its taps, the token the target emitted after it): committed.
    this.fuse({ ptr: ds.store.ptr, tapFloats: ds.window * this.E, row0: pending % ds.window }, 1, this.b.hq.ptr);
    let tok = token;
    for (let i = 0; i < max; i++) {
      const pos = pending + i;
      if (pos + 1 > this.context) break;
      const best = this.step(ds, tok, pos);
      if (i === 0) ds.rows = pending + 1;
      if (best < 0) break; // non-finite draft logits: no draft from here (the target decides every token anyway)
      // The step at `pos` predicts the token at pos + 2 (its row pairs the hidden of pos with the token of pos + 1).
      const d = opts.pick ? opts.pick(this.logitsView, pos + 2) : best;
      out.tokens.push(d);
      if (opts.logits) out.logits.push(this.logitsView.slice());
      tok = d;
    }
    return out;
  }

  /** Y = W·X for a draft matrix, bf16 or packed. */
  private mm(name: string, X: Addr, Y: Addr, rows: number, cols: number, T: number): void {
    const W: TensorRef = this.w.t(name);
    checkShape(W, rows, cols, "the draft model");
    matmulRows(this.k, W, W.ptr, W.scales, X, Y, rows, rows, T);
  }

  free(): void {
    this.mem.free();
    this.w.free();
  }
}
