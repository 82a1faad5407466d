// The K3 forward pass (MODEL.md §4): JS walks the layers and orchestrates, C computes.
// Prefill of T tokens and decode of one token are the same code path: every kernel computes a
// token's row exactly as it would alone (k3.h: row results do not depend on T), the KDA
// recurrence and conv run token by token, MLA attends causally from the cache, and expert outputs
// are summed per token in router rank order. So decoding token n equals recomputing the prefix,
// bit for bit (test/model.test.ts).
//
// Several sessions in one pass (`forwardBatch`, the batch scheduler's pass): the rows of a pass
// are segments, one per session, laid end to end. Every kernel's rows are independent (k3.h), so
// a row computes the same bits whatever else is in the pass; only three things are routed per
// segment: KDA (its session's conv history and recurrent state), MLA (its session's cache and
// position) and the final logits (each segment's last row). The trunk is read once per pass and
// each distinct expert once, whatever the number of sessions. A segment may be a verify segment
// (below): several sessions' drafts are verified in one batched pass, each in its own rollback slot.
//
// Scratch buffers: the typed table of src/model/buffers.ts (the planner sums the same table),
// sized for `chunk` + parallel − 1 rows and a logit row per session or verify row (passShape).
//
// Speculative verify pass (docs/SPECULATION.md): `verify(state, [x, d_1 … d_k])` runs one pass
// over 1 + k positions (the trunk read once, each distinct expert once) with logits at every
// position. The session keeps x at once; each drafted position is kept later by `keep()`, in
// order, as far as the drafts were accepted. Rollback reads no weights and copies no state: the
// drafted rows' KDA conv and recurrence run on scratch copies and their inputs are recorded, so
// keep() re-applies one position from them (src/model/rollback.ts has the bookkeeping and why it
// is bit-identical); MLA rows past the kept ones are never read.
import { K3Error } from "../errors.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import { kernelLimits, K3_STATUS, type Kernels } from "../kernels.ts";
import { allocForwardBuffers, bankSlots, passShape, type ForwardBuffers } from "./buffers.ts";
import { at, CBuffers, type Addr, type CBuf } from "./cmem.ts";
import { checkShape, matmulBx4, matmulRows, matmulStatus } from "./matmul.ts";
import { RECORD, Rollback } from "./rollback.ts";
import type { SessionState } from "./state.ts";
import type { LayerRef, TensorRef, WeightProvider } from "./weights.ts";

const F = 4; // bytes per f32

/** Experts per layer the lookahead asks for (STREAMING.md §2: top-6 right 81% of the time). */
export const LOOKAHEAD_EXPERTS = 6;

/** One session's rows in a pass: its tokens, and whether its last row needs logits; `verify`: a
 *  speculative verify segment [x, d_1 … d_k] (logits at every row, the session keeps x at once and
 *  the drafts through keep()). */
export interface Segment {
  state: SessionState;
  ids: number[];
  logits?: boolean;
  verify?: boolean;
}

/** A segment placed in the pass: rows [row0, row0 + ids.length); `verify`: a speculative verify
 *  segment (rows 1.. are drafts, see the header), by its rollback slot. */
interface Placed extends Omit<Segment, "verify"> {
  row0: number;
  verify?: number;
}

/** One segment of a finished pass, for a draft model: its session (already advanced), tokens, first
 *  row in the pass and first position; a verify segment kept only its first row so far. */
export interface PassRows {
  state: SessionState;
  ids: readonly number[];
  row0: number;
  pos0: number;
  verify: boolean;
}

/** Where a pass left its captured streams: tap j of row r at ptr + (j·tapFloats + r·E)·4. */
export interface PassTaps {
  ptr: Addr;
  tapFloats: number;
}

/** Who reads the captured rows after each pass (src/model/draft.ts keeps its cache in step). */
export interface TapSink {
  afterPass(segments: PassRows[], taps: PassTaps): void;
}

/** Which experts each token of a chunk uses, as the router decided (for traces and stats). */
export type RoutingRecord = (layer: number, idx: Int32Array, T: number, K: number) => void;

/**
 * Refuse a config outside what the kernels implement (their limits, kernels/k3.h), by name and
 * before any work: a kernel handed sizes past its limits refuses the call, and a refusal in the
 * middle of a pass would leave the session half-advanced.
 */
export function checkKernelLimits(k: Kernels, cfg: ModelConfig): void {
  const lim = kernelLimits(k);
  const sources = bankSlots(cfg) + 1;
  const checks: [boolean, string][] = [
    [cfg.numExperts <= lim.routerExperts, `num_experts ${cfg.numExperts} > ${lim.routerExperts} (k3_router_topk's limit)`],
    [sources <= lim.attnResSources, `${sources} AttnRes sources > ${lim.attnResSources} (k3_attnres_mix's limit)`],
    [cfg.latent % lim.mxfp4Group === 0 && cfg.moeInter % lim.mxfp4Group === 0, `routed_expert_hidden_size ${cfg.latent} and moe_intermediate_size ${cfg.moeInter} must be multiples of ${lim.mxfp4Group} (MXFP4 groups)`],
    [cfg.convKernel === lim.kdaConvWidth, `short_conv_kernel_size ${cfg.convKernel}: the KDA conv kernel is width ${lim.kdaConvWidth}`],
    [cfg.kdaHeadDim <= lim.kdaHeadDim, `linear_attn_config.head_dim ${cfg.kdaHeadDim} > ${lim.kdaHeadDim} (k3_kda_recurrent's limit)`],
  ];
  const broken = checks.filter(([ok]) => !ok).map(([, why]) => why);
  if (broken.length) throw new K3Error("CONFIG", "this config is outside what the kernels implement", broken);
}

export class Model {
  private mem: CBuffers;
  private b: ForwardBuffers;
  private logitsView: Float32Array;
  private idxView: Int32Array;
  private wView: Float32Array;
  private yView: Float32Array;
  /** Optional observer of routing decisions (the --trace recorder). */
  onRouting?: RoutingRecord;
  /** Router lookahead during decode (one row per session): exact by construction, it only moves reads earlier. */
  lookahead = false;
  /** Rows one pass holds (src/model/buffers.ts passShape). */
  readonly rows: number;
  /** Rows of one pass whose logits are computed (a session's last row, every verify row). */
  readonly logitRows: number;
  /** Sessions whose verify records are kept at once (rollback slots). */
  readonly verifySlots: number;

  /** The verify segments of the last pass and their recorded inputs (src/model/rollback.ts). */
  private readonly rollback: Rollback;
  /** Per zero-based layer L: which tap its output P fills (−1: none). */
  private readonly tapAfter: number[];
  /** Told after every pass where each segment's captured rows are (a draft model's cache follows the target's). */
  tapSink?: TapSink;

  constructor(
    private k: Kernels,
    readonly cfg: ModelConfig,
    private w: WeightProvider,
    readonly chunk: number,
    readonly maxContext: number,
    /** The most drafted positions one verify pass may check (0: no speculation buffers). */
    readonly drafts = 0,
    /** Sessions one pass may carry (a logit row each, and a decode row each besides a chunk). */
    readonly parallel = 1,
    /** One-based completed-layer ids whose prefix-sum stream every row captures for a draft model
     *  (id k: the stream P after zero-based layer k − 1, DRAFTERS.md §2.3); [] captures nothing. */
    readonly tapLayers: readonly number[] = [],
  ) {
    if (!Number.isInteger(chunk) || chunk < 1) throw new K3Error("USAGE", `prefill chunk must be ≥ 1, got ${chunk}`);
    if (!Number.isInteger(drafts) || drafts < 0) throw new K3Error("USAGE", `drafts per pass must be an integer ≥ 0, got ${drafts}`);
    if (!Number.isInteger(parallel) || parallel < 1) throw new K3Error("USAGE", `parallel sessions must be ≥ 1, got ${parallel}`);
    if (1 + drafts > chunk) throw new K3Error("USAGE", `a verify pass of 1 + ${drafts} positions does not fit a ${chunk}-token chunk`, [`use --chunk ${1 + drafts} or more, or fewer drafts per pass`]);
    checkKernelLimits(k, cfg);
    const bad = tapLayers.filter((id, i) => !Number.isInteger(id) || id < 1 || id > cfg.numLayers || (i > 0 && id <= tapLayers[i - 1]!));
    if (bad.length) throw new K3Error("INTERNAL", `capture layer ids ${JSON.stringify(tapLayers)}: one-based, ascending, within 1..${cfg.numLayers}`);
    this.tapAfter = cfg.layerKinds.map((_, L) => tapLayers.indexOf(L + 1));
    this.mem = new CBuffers(k);
    const shape = passShape(chunk, parallel, maxContext, drafts, tapLayers.length);
    this.rows = shape.rows;
    this.logitRows = shape.logitRows;
    this.verifySlots = shape.verifySlots ?? 0;
    try {
      this.b = allocForwardBuffers(this.mem, cfg, shape);
    } catch (err) {
      this.mem.free();
      throw err;
    }
    this.rollback = new Rollback(k, cfg, this.b, drafts, this.verifySlots);
    this.logitsView = this.b.logits.f32().subarray(0, cfg.vocab);
    this.idxView = this.b.router_idx.i32();
    this.wView = this.b.router_w.f32();
    this.yView = this.b.y.f32();
  }

  /** C memory this model holds (its scratch; sessions and weights hold their own). */
  get allocatedBytes(): number {
    return this.mem.totalBytes;
  }

  /** Refuse ids outside the vocabulary or beyond the context limit, before any state changes. */
  check(state: SessionState, ids: number[]): void {
    if (state.freed) throw new K3Error("USAGE", "this session was closed");
    if (state.dirty)
      throw new K3Error("SESSION", "this session was interrupted by an error inside a forward pass; its state no longer matches its tokens", [
        "reset it (or start a new session) and feed the conversation again",
      ]);
    if (ids.length === 0) throw new K3Error("USAGE", "forward needs at least one token");
    if (state.pos + ids.length > state.maxContext)
      throw new K3Error("CONTEXT", `context limit exceeded: ${state.pos} + ${ids.length} tokens > ${state.maxContext}`);
    // The pass's scratch (MLA's, per position) was sized for this model's context: a session made
    // with a longer one must not run past it.
    if (state.pos + ids.length > this.maxContext)
      throw new K3Error("CONTEXT", `context limit exceeded: ${state.pos} + ${ids.length} tokens > ${this.maxContext}, the context this model's buffers were sized for (the session allows ${state.maxContext})`);
    for (const id of ids)
      if (!Number.isInteger(id) || id < 0 || id >= this.cfg.vocab)
        throw new K3Error("USAGE", `token id ${id} outside the vocabulary [0, ${this.cfg.vocab})`);
  }

  /**
   * Run `ids` through the model in chunks of at most `chunk` tokens, appending to `state`.
   * Returns the logits of the last token (a view into a buffer reused by the next call: copy it
   * to keep it), or null with `logits: false` (a prefill piece that more tokens will follow: no
   * final mix, no lm_head).
   */
  forward(state: SessionState, ids: number[], opts: { logits?: boolean } = {}): Float32Array | null {
    this.check(state, ids);
    this.rollback.newPass([state]);
    const wantLogits = opts.logits ?? true;
    try {
      let lastT = 0;
      for (let s = 0; s < ids.length; s += this.chunk) {
        const part = ids.slice(s, s + this.chunk);
        this.w.setHeadNext?.(wantLogits && s + this.chunk >= ids.length);
        this.forwardSegments([{ state, ids: part, row0: 0 }]);
        lastT = part.length;
      }
      if (!wantLogits) return null;
      this.finalLogits([lastT - 1]);
      return this.logitsView;
    } catch (err) {
      // A chunk that failed part-way has moved some layers' recurrent state: never reuse it silently.
      state.dirty = true;
      throw err;
    }
  }

  /**
   * Speculative verify pass over ids = [x, d_1 … d_k], 1 ≤ 1 + k ≤ 1 + drafts: one pass, logits at
   * every position (row i predicts the token after x, d_1 … d_i). The session keeps x (position
   * and history advance by one); `keep()` keeps d_1, d_2, … one at a time. Returns views into a
   * buffer the next pass reuses. A failure marks the session dirty, like forward().
   */
  verify(state: SessionState, ids: number[]): Float32Array[] {
    const [p] = this.run([{ state, ids, verify: true }]);
    return this.logitRowsOf(p!, (a, b) => this.b.logits.f32().subarray(a, b)) as Float32Array[];
  }

  /** Drafted positions of `state`'s last verify segment not kept yet (0 when there is none). */
  keepable(state: SessionState): number {
    return this.rollback.keepable(state);
  }

  /**
   * Keep the next drafted position of `state`'s last verify segment: its KDA conv and recurrence
   * re-applied to the real state from the inputs the pass recorded (no weights read), position
   * and history advanced. The MLA cache row is already there. Other sessions' passes in between
   * do not matter (the records are in the session's own slot).
   */
  keep(state: SessionState): void {
    this.rollback.keep(state, this.b.kda_o.ptr);
  }

  /** `state` is done with its verify segment (it kept what it will): its rollback slot is free. */
  releaseVerify(state: SessionState): void {
    this.rollback.release(state);
  }

  /** Sessions holding a rollback slot (verify records not released). */
  get verifyHeld(): number {
    return this.rollback.held;
  }

  /**
   * One pass over several sessions' tokens (at most `rows` in all, at most `parallel` sessions,
   * each session once): every segment advances exactly as if it ran alone (same bits). Returns,
   * per segment, its last row's logits (a copy), every row's for a verify segment (copies), or
   * null when it asked for none. Every segment is checked before any state changes; a failure
   * part-way marks every segment's session dirty.
   */
  forwardBatch(segments: Segment[]): (Float32Array | Float32Array[] | null)[] {
    return this.run(segments).map((p) => this.logitRowsOf(p, (a, b) => this.b.logits.f32().slice(a, b)));
  }

  /** A placed segment's logits after its pass: its last row, every row of a verify segment, or null. */
  private logitRowsOf(p: Placed & { logit0: number }, view: (from: number, to: number) => Float32Array): Float32Array | Float32Array[] | null {
    const V = this.cfg.vocab;
    if (p.logit0 < 0) return null;
    if (p.verify === undefined) return view(p.logit0 * V, (p.logit0 + 1) * V);
    return p.ids.map((_, i) => view((p.logit0 + i) * V, (p.logit0 + i + 1) * V));
  }

  /** Check and place `segments`, run their pass and the logits they ask for; each placed segment
   *  with its first logit row (−1: none). */
  private run(segments: Segment[]): (Placed & { logit0: number })[] {
    if (segments.length === 0) return [];
    if (segments.length > this.parallel) throw new K3Error("INTERNAL", `a pass of ${segments.length} sessions, the model has logit rows for ${this.parallel}`);
    const placed: (Placed & { logit0: number })[] = [];
    let rows = 0;
    const logitRows: number[] = [];
    for (const seg of segments) {
      this.check(seg.state, seg.ids);
      if (placed.some((p) => p.state === seg.state)) throw new K3Error("INTERNAL", "one session twice in a pass");
      if (seg.verify && seg.ids.length > 1 + this.drafts) throw new K3Error("INTERNAL", `verify segment of ${seg.ids.length} positions, the model has room for 1 + ${this.drafts}`);
      const wants = seg.verify ? seg.ids.map((_, i) => rows + i) : seg.logits ? [rows + seg.ids.length - 1] : [];
      placed.push({ state: seg.state, ids: seg.ids, logits: seg.logits || seg.verify, row0: rows, logit0: wants.length ? logitRows.length : -1 });
      logitRows.push(...wants);
      rows += seg.ids.length;
    }
    if (rows > this.rows) throw new K3Error("INTERNAL", `a pass of ${rows} rows, the model holds ${this.rows}`);
    if (logitRows.length > this.logitRows) throw new K3Error("INTERNAL", `a pass of ${logitRows.length} logit rows, the model holds ${this.logitRows}`);
    this.rollback.newPass(placed.map((p) => p.state));
    // Slots before any state changes (a refusal leaves every session as it was).
    segments.forEach((seg, i) => {
      if (seg.verify) placed[i]!.verify = this.rollback.open(seg.state, seg.ids);
    });
    try {
      this.w.setHeadNext?.(logitRows.length > 0);
      this.forwardSegments(placed);
      if (logitRows.length > 0) this.finalLogits(logitRows);
    } catch (err) {
      for (const p of placed) p.state.dirty = true;
      this.rollback.newPass(placed.map((p) => p.state));
      throw err;
    }
    return placed;
  }

  /** AttnRes snapshots the last pass left in the bank, and its rows (the final mix reads them). */
  private nBankFinal = 0;
  private rowsFinal = 0;

  /** One pass: the segments' rows end to end (each segment's session advances by its tokens; a
   *  verify segment by its first only: keep() takes the drafted ones). */
  private forwardSegments(segs: Placed[]): void {
    const k = this.k;
    const c = this.cfg;
    const ids = segs.flatMap((s) => s.ids);
    const T = ids.length;
    const E = c.hidden;
    const b = this.b;
    const rowsBytes = T * E * F;
    // Embed: P = embed_tokens[id] (no scaling).
    for (let t = 0; t < T; t++) this.w.embedRow(ids[t]!, at(b.P.ptr, t * E * F));
    let nBank = 0;
    for (let L = 0; L < c.numLayers; L++) {
      const lw = this.w.acquireLayer(L);
      try {
        // 2. h = mix(P, B) if B non-empty, else P.
        if (nBank > 0) this.mix(lw, "self_attention_res", nBank, T, b.h.ptr);
        else k.k3_mem_copy(b.h.ptr, b.P.ptr, rowsBytes);
        // 3. Block boundary: snapshot P into the bank, P becomes "none".
        let pNone = false;
        if (L % c.attnResBlock === 0) {
          k.k3_mem_copy(at(b.bank.ptr, nBank * rowsBytes), b.P.ptr, rowsBytes);
          nBank++;
          pNone = true;
        }
        // 4. a = Attention(RMSNorm(h, input_layernorm))
        this.norm(lw.t("input_layernorm.weight").ptr, b.h.ptr, b.xn.ptr, T);
        if (c.layerKinds[L] === "kda") this.kda(lw, segs, L, T);
        else this.mla(lw, segs, L, T);
        // 5. P = (P is none) ? a : P + a
        if (pNone) k.k3_mem_copy(b.P.ptr, b.a.ptr, rowsBytes);
        else k.k3_add(b.P.ptr, b.a.ptr, T * E);
        // 6. h2 = mix(P, B) — B is never empty here.
        this.mix(lw, "mlp_res", nBank, T, b.h.ptr);
        // 7. m = FFN(RMSNorm(h2, post_attention_layernorm))
        this.norm(lw.t("post_attention_layernorm.weight").ptr, b.h.ptr, b.xn.ptr, T);
        if (L < c.firstKDense) this.glu(lw, "mlp", c.denseInter, b.dense_g, b.dense_u, b.m.ptr, T);
        else this.moe(lw, L, T);
        // 8. P = P + m
        k.k3_add(b.P.ptr, b.m.ptr, T * E);
        // Capture: the layer's output is P, the prefix-sum stream (DRAFTERS.md §2.3: after the MLP
        // add, before the next layer's block boundary resets it; not the AttnRes mix).
        const tap = this.tapAfter[L]!;
        if (tap >= 0) k.k3_mem_copy(at(b.taps.ptr, tap * this.rows * E * F), b.P.ptr, rowsBytes);
      } finally {
        this.w.releaseLayer(L);
      }
      // Lookahead in decode steps only (one row per session): STREAMING.md §3, it does not pay in prefill.
      if (this.lookahead && T === segs.length) this.lookaheadRouter(L + 1, T);
    }
    this.nBankFinal = nBank;
    this.rowsFinal = T;
    const passed: PassRows[] = [];
    for (const seg of segs) {
      // A verify segment keeps its first position now, the drafted ones through keep().
      const kept = seg.verify !== undefined ? 1 : seg.ids.length;
      passed.push({ state: seg.state, ids: seg.ids, row0: seg.row0, pos0: seg.state.pos, verify: seg.verify !== undefined });
      seg.state.pos += kept;
      for (let t = 0; t < kept; t++) seg.state.history.push(seg.ids[t]!);
    }
    if (this.tapSink && this.tapLayers.length) this.tapSink.afterPass(passed, { ptr: b.taps.ptr, tapFloats: this.rows * E });
  }

  /**
   * Run layer L's router on the previous layer's output P (instead of its own mixed, normed
   * input) for the pass's T decode rows and start reading their likely experts (the union of each
   * row's top LOOKAHEAD_EXPERTS, in row order). Only when L's trunk is already in memory; the real
   * router still decides which experts run, so this never changes a bit of the output.
   */
  private lookaheadRouter(L: number, T: number): void {
    const c = this.cfg;
    if (L >= c.numLayers || L < c.firstKDense || !this.w.peekLayer || !this.w.hintExperts) return;
    const lw = this.w.peekLayer(L);
    if (!lw) return;
    this.norm(lw.t("post_attention_layernorm.weight").ptr, this.b.P.ptr, this.b.xn.ptr, T);
    this.route(lw, T);
    const n = Math.min(LOOKAHEAD_EXPERTS, c.topK);
    const hint = new Set<number>();
    for (let t = 0; t < T; t++) for (const e of this.idxView.subarray(t * c.topK, t * c.topK + n)) hint.add(e);
    this.w.hintExperts(L, [...hint]);
  }

  /**
   * Final model-level mix, norm and lm_head for the given rows of the last pass (each segment's
   * last row; every row of a verify pass): logits row i is rows[i]'s. Rows are gathered first
   * (bank snapshots into final_bank [n][R][E], P into final_x), so each is computed exactly as it
   * would be alone.
   */
  private finalLogits(rows: number[]): void {
    const k = this.k;
    const c = this.cfg;
    const E = c.hidden;
    const b = this.b;
    const head = this.w.head();
    const R = rows.length;
    const T = this.rowsFinal;
    const nb = this.nBankFinal;
    rows.forEach((t, r) => {
      for (let i = 0; i < nb; i++) k.k3_mem_copy(at(b.final_bank.ptr, (i * R + r) * E * F), at(b.bank.ptr, (i * T + t) * E * F), E * F);
      k.k3_mem_copy(at(b.final_x.ptr, r * E * F), at(b.P.ptr, t * E * F), E * F);
    });
    const status = k.k3_attnres_mix(b.final_bank.ptr, nb, b.final_x.ptr, head.outResProj.ptr, head.outResNorm.ptr, b.final_h.ptr, E, R, c.rmsEps);
    this.checked("k3_attnres_mix", status, "the final mix");
    this.norm(head.norm.ptr, b.final_h.ptr, b.final_x.ptr, R);
    this.mm(head.lmHead, b.final_x.ptr, b.logits.ptr, c.vocab, E, R);
    this.w.releaseHead?.();
  }

  /** A kernel's status: non-finite input is broken weights (named), anything else a bug here. */
  private checked(kernel: string, status: number, where: string): void {
    if (status === K3_STATUS.ok) return;
    if (status === K3_STATUS.nonfinite)
      throw new K3Error("CHECKPOINT", `${where}: ${kernel} was given NaN or infinite values, so the answer would be wrong`, [
        "a weight of this model is NaN or infinite (or produces such values): check the checkpoint (k3 verify, or a fresh download)",
      ]);
    throw new K3Error("INTERNAL", `${where}: ${kernel} refused its arguments (status ${status}): checkKernelLimits missed a limit`);
  }

  /** RMSNorm over the hidden size, T rows, bf16 weight. */
  private norm(w: Addr, x: Addr, y: Addr, T: number): void {
    const E = this.cfg.hidden;
    this.k.k3_rmsnorm_bf16w(x, E, w, y, E, E, T, this.cfg.rmsEps);
  }

  private mix(lw: LayerRef, which: "self_attention_res" | "mlp_res", nBank: number, T: number, out: Addr): void {
    const b = this.b;
    const status = this.k.k3_attnres_mix(b.bank.ptr, nBank, b.P.ptr, lw.t(`${which}_proj.weight`).ptr, lw.t(`${which}_norm.weight`).ptr, out, this.cfg.hidden, T, this.cfg.rmsEps);
    this.checked("k3_attnres_mix", status, `layer ${lw.layer}`);
  }

  /**
   * Y[T][rows] = W·X[T][cols] for a trunk matrix, whatever its format (bf16, the exact pack's BX4, or a packed int8/int4
   * trunk) and however the provider holds it (whole, or row slices streamed in turn:
   * src/memory/pieces.ts). Every row is computed alone in the kernels' fixed order, so slices give
   * the same bits as the whole: a slice [r0, r1) is one call for all T tokens, writing its columns
   * of Y (ldy = rows). The shape the pass multiplies by must be the tensor's.
   */
  private mm(W: TensorRef, X: Addr, Y: Addr, rows: number, cols: number, T: number): void {
    checkShape(W, rows, cols, "the forward pass");
    if (W.dtype === "BX4") return matmulBx4(this.k, W, X, Y, rows, cols, T);
    if (!W.rowSlices) return matmulRows(this.k, W, W.ptr, W.scales, X, Y, rows, rows, T);
    W.rowSlices.forEach((_, i) => {
      const s = W.slice!(i);
      matmulRows(this.k, W, s.ptr, s.scales, X, at(Y, s.r0 * F), rows, s.r1 - s.r0, T);
    });
  }

  /**
   * KDA attention (MODEL.md §4 KDA) on xn → a. Projections, norms and gates run on every row of
   * the pass; the conv and the recurrence run per segment, on that session's state. A verify
   * segment's drafted rows run on scratch copies of its conv history and state, and keep their
   * inputs for keep() (the header).
   */
  private kda(lw: LayerRef, segs: Placed[], L: number, T: number): void {
    const k = this.k;
    const c = this.cfg;
    const b = this.b;
    const E = c.hidden;
    const H = c.kdaHeads;
    const D = c.kdaHeadDim;
    const P = H * D;
    const x = b.xn.ptr;
    const t = (s: string) => lw.t(`self_attn.${s}`).ptr;
    const w = (s: string) => lw.t(`self_attn.${s}`); // a matrix: asked for right before its product
    // 1. q, k, v projections, [T][P]
    this.mm(w("q_proj.weight"), x, b.kda_q.ptr, P, E, T);
    this.mm(w("k_proj.weight"), x, b.kda_k.ptr, P, E, T);
    this.mm(w("v_proj.weight"), x, b.kda_v.ptr, P, E, T);
    // A verify segment's drafted rows (row0 + 1 …) record their inputs (rollback.ts).
    const save = (seg: Placed, from: Addr, field: number, width = P) => {
      if (seg.verify !== undefined) this.rollback.save(seg.verify, L, field, from, seg.row0, seg.ids.length, width);
    };
    for (const seg of segs) {
      save(seg, b.kda_q.ptr, RECORD.q);
      save(seg, b.kda_k.ptr, RECORD.k);
      save(seg, b.kda_v.ptr, RECORD.v);
    }
    // 2. causal short conv (width 4, history carried across calls) + SiLU, per session
    this.kdaConv(segs, L, t);
    // 3. per-head L2 norm (a SUM of squares), q additionally × D^-0.5
    k.k3_l2norm_heads(b.kda_q.ptr, H, D, T, 1e-6, 1 / Math.sqrt(D));
    k.k3_l2norm_heads(b.kda_k.ptr, H, D, T, 1e-6, 1);
    // 4. gate g = lower·sigmoid(exp(A_log[h])·(f_b·f_a·x + dt_bias)), A_log per head
    this.mm(w("f_a_proj.weight"), x, b.kda_fa.ptr, D, E, T);
    this.mm(w("f_b_proj.weight"), b.kda_fa.ptr, b.kda_g.ptr, P, D, T);
    k.k3_kda_gate(b.kda_g.ptr, t("dt_bias"), t("A_log"), b.kda_g.ptr, H, D, T, c.gateLowerBound);
    // 5. β = sigmoid(b_proj·x)
    this.mm(w("b_proj.weight"), x, b.kda_beta.ptr, H, E, T);
    k.k3_sigmoid(b.kda_beta.ptr, T * H);
    for (const seg of segs) {
      save(seg, b.kda_k.ptr, RECORD.kHat);
      save(seg, b.kda_v.ptr, RECORD.vHat);
      save(seg, b.kda_g.ptr, RECORD.g);
      save(seg, b.kda_beta.ptr, RECORD.beta, H);
    }
    // 6. delta rule: decay, update, then read o from the UPDATED state — per session
    this.kdaRecurrence(segs, L);
    // 7. o = RMSNorm_per_head(o, o_norm) · sigmoid(g_proj·x)   (norm first, then gate)
    k.k3_rmsnorm_f32w(b.kda_o.ptr, D, t("o_norm.weight"), b.kda_o.ptr, D, D, T * H, c.rmsEps);
    this.mm(w("g_proj.weight"), x, b.kda_gp.ptr, P, E, T);
    k.k3_mul_sigmoid(b.kda_o.ptr, b.kda_gp.ptr, T * P);
    // 8. out = o_proj·o
    this.mm(w("o_proj.weight"), b.kda_o.ptr, b.a.ptr, E, P, T);
  }

  /** KDA step 2 on each segment's rows: the short conv over its session's history (a verify
   *  segment's drafted rows on a scratch copy of it, so the session's stays as the first row left it). */
  private kdaConv(segs: Placed[], L: number, t: (s: string) => Addr): void {
    const k = this.k;
    const b = this.b;
    const P = this.cfg.kdaHeads * this.cfg.kdaHeadDim;
    const rowBytes = P * F;
    const conv = (t0: number, rows: number, hq: Addr, hk: Addr, hv: Addr) => {
      k.k3_kda_conv_silu(at(b.kda_q.ptr, t0 * rowBytes), t("q_conv1d.weight"), hq, P, rows);
      k.k3_kda_conv_silu(at(b.kda_k.ptr, t0 * rowBytes), t("k_conv1d.weight"), hk, P, rows);
      k.k3_kda_conv_silu(at(b.kda_v.ptr, t0 * rowBytes), t("v_conv1d.weight"), hv, P, rows);
    };
    for (const seg of segs) {
      const st = this.kdaState(seg.state, L);
      const drafted = seg.verify !== undefined ? seg.ids.length - 1 : 0;
      if (drafted === 0) conv(seg.row0, seg.ids.length, st.convQ.ptr, st.convK.ptr, st.convV.ptr);
      else {
        conv(seg.row0, 1, st.convQ.ptr, st.convK.ptr, st.convV.ptr);
        conv(seg.row0 + 1, drafted, ...this.rollback.scratchConv(st));
      }
    }
  }

  /** KDA step 6 on each segment's rows: the delta rule on its session's state (a verify segment's
   *  drafted rows on a scratch copy of it, as in kdaConv). */
  private kdaRecurrence(segs: Placed[], L: number): void {
    const k = this.k;
    const b = this.b;
    const H = this.cfg.kdaHeads;
    const D = this.cfg.kdaHeadDim;
    const P = H * D;
    for (const seg of segs) {
      const st = this.kdaState(seg.state, L);
      const row = (buf: CBuf, r: number, width = P) => at(buf.ptr, r * width * F);
      const rec = (r: number, n: number, S: Addr) =>
        this.checked("k3_kda_recurrent", k.k3_kda_recurrent(row(b.kda_q, r), row(b.kda_k, r), row(b.kda_v, r), row(b.kda_g, r), row(b.kda_beta, r, H), S, row(b.kda_o, r), H, D, n), `layer ${L}`);
      const drafted = seg.verify !== undefined ? seg.ids.length - 1 : 0;
      if (drafted === 0) rec(seg.row0, seg.ids.length, st.S.ptr);
      else {
        rec(seg.row0, 1, st.S.ptr);
        rec(seg.row0 + 1, drafted, this.rollback.scratchState(st));
      }
    }
  }

  private kdaState(state: SessionState, L: number) {
    const st = state.kda[L];
    if (!st) throw new K3Error("INTERNAL", `layer ${L} has no KDA state`);
    return st;
  }

  /** Gated NoPE MLA (MODEL.md §4 MLA) on xn → a, appending each segment's latents to its
   *  session's cache at its position; attention runs per segment over that cache. */
  private mla(lw: LayerRef, segs: Placed[], L: number, T: number): void {
    const k = this.k;
    const c = this.cfg;
    const b = this.b;
    const E = c.hidden;
    const Hm = c.mlaHeads;
    const R = c.kvLoraRank;
    const dr = c.qkRope;
    const qk = c.qkNope + dr;
    const row = R + dr;
    const x = b.xn.ptr;
    const t = (s: string) => lw.t(`self_attn.${s}`).ptr;
    const w = (s: string) => lw.t(`self_attn.${s}`); // a matrix: asked for right before its product
    // 1. q = q_b·RMSNorm(q_a·x, q_a_layernorm, 1e-6)   (1e-6: the released code's default, §7.4)
    this.mm(w("q_a_proj.weight"), x, b.mla_qa.ptr, c.qLoraRank, E, T);
    k.k3_rmsnorm_bf16w(b.mla_qa.ptr, c.qLoraRank, t("q_a_layernorm.weight"), b.mla_qa.ptr, c.qLoraRank, c.qLoraRank, T, 1e-6);
    this.mm(w("q_b_proj.weight"), b.mla_qa.ptr, b.mla_q.ptr, Hm * qk, c.qLoraRank, T);
    // 2. c = kv_a·x → [c_kv (R) | k_r (dr)]; cache row = [RMSNorm(c_kv, 1e-6) | k_r (not normed)]
    this.mm(w("kv_a_proj_with_mqa.weight"), x, b.mla_c.ptr, row, E, T);
    // MLA's kv_b: bf16 and whole (walk.ts: never sliced, never packed); valid through the loop,
    // which asks for no other matrix.
    const kvb = w("kv_b_proj.weight");
    if (kvb.dtype !== "BF16") throw new K3Error("INTERNAL", `layer ${L}: kv_b_proj is ${kvb.dtype}, the MLA kernel takes bf16`);
    for (const seg of segs) {
      const st = seg.state.mla[L];
      if (!st) throw new K3Error("INTERNAL", `layer ${L} has no MLA cache`);
      const n = seg.ids.length;
      const pos = seg.state.pos;
      const c0 = seg.row0 * row * F; // this segment's rows of mla_c
      const base = st.cache.ptr + pos * row * F;
      k.k3_rmsnorm_bf16w(at(b.mla_c.ptr, c0), row, t("kv_a_layernorm.weight"), at(base), row, R, n, 1e-6);
      for (let i = 0; i < n; i++) k.k3_mem_copy(at(base, (i * row + R) * F), at(b.mla_c.ptr, c0 + (i * row + R) * F), dr * F);
      // 3–4. causal attention over positions ≤ p, no rotary, scale (dn+dr)^-0.5, kv_b absorbed
      // The cache rows and scratch floats allocated: the kernel refuses a pass that would run past either.
      const status = k.k3_mla_attend(at(b.mla_q.ptr, seg.row0 * Hm * qk * F), kvb.ptr, st.cache.ptr, at(b.mla_o.ptr, seg.row0 * Hm * c.vHead * F), b.mla_scratch.ptr, Hm, c.qkNope, dr, c.vHead, R, pos, n, 1 / Math.sqrt(qk), Math.floor(st.cache.bytes / (row * F)), b.mla_scratch.bytes / F);
      this.checked("k3_mla_attend", status, `layer ${L}`);
    }
    // 5. o · sigmoid(g_proj·x), then o_proj (gate before o_proj, no norm)
    this.mm(w("g_proj.weight"), x, b.mla_gate.ptr, Hm * c.vHead, E, T);
    k.k3_mul_sigmoid(b.mla_o.ptr, b.mla_gate.ptr, T * Hm * c.vHead);
    this.mm(w("o_proj.weight"), b.mla_o.ptr, b.a.ptr, E, Hm * c.vHead, T);
  }

  /** SiTU-GLU FFN on xn: out = down·SiTU(gate·x, up·x) (dense layers and shared experts). */
  private glu(lw: LayerRef, prefix: string, inter: number, g: CBuf, u: CBuf, out: Addr, T: number): void {
    const c = this.cfg;
    const x = this.b.xn.ptr;
    this.mm(lw.t(`${prefix}.gate_proj.weight`), x, g.ptr, inter, c.hidden, T);
    this.mm(lw.t(`${prefix}.up_proj.weight`), x, u.ptr, inter, c.hidden, T);
    this.k.k3_situ_glu(g.ptr, u.ptr, g.ptr, T * inter, c.situBeta, c.situLinearBeta);
    this.mm(lw.t(`${prefix}.down_proj.weight`), g.ptr, out, c.hidden, inter, T);
  }

  /** Router on xn (T rows): top-k of sigmoid + bias into router_idx, weights from the unbiased scores. */
  private route(lw: LayerRef, T: number): void {
    const c = this.cfg;
    const b = this.b;
    const p = "block_sparse_moe";
    this.mm(lw.t(`${p}.gate.weight`), b.xn.ptr, b.router_logits.ptr, c.numExperts, c.hidden, T);
    const status = this.k.k3_router_topk(b.router_logits.ptr, lw.t(`${p}.gate.e_score_correction_bias`).ptr, c.numExperts, c.topK, T, c.routedScaling, b.router_idx.ptr, b.router_w.ptr);
    this.checked("k3_router_topk", status, `layer ${lw.layer}'s router`);
  }

  /** LatentMoE with shared experts (MODEL.md §4 Router, LatentMoE). */
  private moe(lw: LayerRef, L: number, T: number): void {
    const k = this.k;
    const c = this.cfg;
    const b = this.b;
    const E = c.hidden;
    const K = c.topK;
    const lat = c.latent;
    const p = "block_sparse_moe";
    this.route(lw, T);
    const idx = this.idxView;
    this.onRouting?.(L, idx, T, K);
    // Distinct experts of this chunk in first-use order, with the (token, rank) slots each serves.
    const users = new Map<number, number[]>();
    for (let i = 0; i < T * K; i++) {
      const e = idx[i]!;
      let list = users.get(e);
      if (!list) users.set(e, (list = []));
      list.push(i);
    }
    // Reads start now; everything until the experts are consumed is inside the try, so the
    // provider always gets releaseExperts (slots in use are freed even when a read fails).
    try {
      this.w.requestExperts(L, [...users.keys()]);
      // z = routed_expert_down_proj·x  (latent)
      this.mm(lw.t(`${p}.routed_expert_down_proj.weight`), b.xn.ptr, b.z.ptr, lat, E, T);
      // Shared experts on the full-width x, unweighted: sh_d = down·SiTU(gate·x, up·x). Computed
      // now, while the routed experts' reads are in flight; it is added after the routed part below,
      // so the order of the sum (and every bit) is as if it ran last.
      this.glu(lw, `${p}.shared_experts`, c.numSharedExperts * c.moeInter, b.sh_g, b.sh_u, b.sh_d.ptr, T);
      // Each expert runs as soon as it is available; its rows land in yall[t][rank], so the sum
      // below does not depend on arrival order.
      for (let n = 0; n < users.size; n++) {
        const { expert, ref } = this.w.nextExpert(L);
        const slots = users.get(expert);
        if (!slots) throw new K3Error("INTERNAL", `layer ${L}: provider returned unrequested expert ${expert}`);
        const ne = slots.length;
        for (let i = 0; i < ne; i++) {
          const tok = Math.floor(slots[i]! / K);
          k.k3_mem_copy(at(b.xe.ptr, i * lat * F), at(b.z.ptr, tok * lat * F), lat * F);
        }
        const ex = (w: string, rows: number, cols: number) => `layer ${L} expert ${expert} ${w} (MXFP4 [${rows}, ${cols}])`;
        matmulStatus(k.k3_matmul_mxfp4(ref.w1p, ref.w1s, b.xe.ptr, lat, b.ge.ptr, c.moeInter, c.moeInter, lat, ne), ex("w1", c.moeInter, lat), ne);
        matmulStatus(k.k3_matmul_mxfp4(ref.w3p, ref.w3s, b.xe.ptr, lat, b.ue.ptr, c.moeInter, c.moeInter, lat, ne), ex("w3", c.moeInter, lat), ne);
        k.k3_situ_glu(b.ge.ptr, b.ue.ptr, b.ge.ptr, ne * c.moeInter, c.situBeta, c.situLinearBeta);
        matmulStatus(k.k3_matmul_mxfp4(ref.w2p, ref.w2s, b.ge.ptr, c.moeInter, b.ye.ptr, lat, lat, c.moeInter, ne), ex("w2", lat, c.moeInter), ne);
        for (let i = 0; i < ne; i++) k.k3_mem_copy(at(b.yall.ptr, slots[i]! * lat * F), at(b.ye.ptr, i * lat * F), lat * F);
      }
    } finally {
      this.w.releaseExperts(L);
    }
    // y = Σ_rank w·y_e (rank order, from zero), then RMSNorm once on the aggregate (§7.9).
    const wv = this.wView;
    this.yView.fill(0, 0, T * lat);
    for (let t = 0; t < T; t++)
      for (let r = 0; r < K; r++) k.k3_axpy(at(b.y.ptr, t * lat * F), wv[t * K + r]!, at(b.yall.ptr, (t * K + r) * lat * F), lat);
    k.k3_rmsnorm_bf16w(b.y.ptr, lat, lw.t(`${p}.routed_expert_norm.weight`).ptr, b.y.ptr, lat, lat, T, c.rmsEps);
    this.mm(lw.t(`${p}.routed_expert_up_proj.weight`), b.y.ptr, b.m.ptr, E, lat, T);
    // m = routed + shared (shared computed above while the expert reads were in flight)
    k.k3_add(b.m.ptr, b.sh_d.ptr, T * E);
  }

  free(): void {
    this.mem.free();
  }
}
