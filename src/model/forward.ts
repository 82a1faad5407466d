// The K3 forward pass (MODEL.md §4): JS walks the layers and orchestrates, C computes.
// Prefill of T tokens and decode of one token are the same code path: every kernel computes a
// token's row exactly as it would alone (k3.h: row results do not depend on T), the KDA
// recurrence and conv run token by token, MLA attends causally from the cache, and expert outputs
// are summed per token in router rank order. So decoding token n equals recomputing the prefix,
// bit for bit (test/model.test.ts).
//
// Buffers (f32, C memory, sized for `chunk` tokens; row t of a [T][n] buffer starts at t·n):
//   P [T][E] running sum · bank [nb][T][E] AttnRes snapshots · h, xn [T][E] · a, m [T][E]
import { K3Error } from "../errors.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import type { Kernels } from "../kernels.ts";
import { CBuffers, type CBuf } from "./cmem.ts";
import type { SessionState } from "./state.ts";
import type { LayerRef, WeightProvider } from "./weights.ts";

const F = 4; // bytes per f32

/** Experts per layer the lookahead asks for (STREAMING.md §2: top-6 right 81% of the time). */
export const LOOKAHEAD_EXPERTS = 6;

export interface ForwardOptions {
  /** Tokens per prefill chunk: the trunk is read once per chunk, each distinct expert once. */
  chunk: number;
  /** Called after each chunk (progress). */
  onChunk?: (done: number, total: number) => void;
}

/** Which experts each token of a chunk uses, as the router decided (for traces and stats). */
export type RoutingRecord = (layer: number, idx: Int32Array, T: number, K: number) => void;

export class Model {
  private mem: CBuffers;
  private b: Record<string, CBuf> = {};
  private logitsView: Float32Array;
  private idxView: Int32Array;
  private wView: Float32Array;
  private yView: Float32Array;
  readonly maxBank: number;
  /** Optional observer of routing decisions (the --trace recorder). */
  onRouting?: RoutingRecord;
  /** Router lookahead during decode (T = 1): exact by construction, it only moves reads earlier. */
  lookahead = false;

  constructor(
    private k: Kernels,
    readonly cfg: ModelConfig,
    private w: WeightProvider,
    readonly chunk: number,
    readonly maxContext: number,
  ) {
    if (!Number.isInteger(chunk) || chunk < 1) throw new K3Error("USAGE", `prefill chunk must be ≥ 1, got ${chunk}`);
    // Kernel preconditions (k3.h): a kernel that is handed sizes outside them does nothing, so
    // they are refused here, by name, before any work (a silent no-op would be a wrong answer).
    const limits: [boolean, string][] = [
      [cfg.numExperts <= 4096, `num_experts ${cfg.numExperts} > 4096 (k3_router_topk's limit)`],
      [Math.ceil(cfg.numLayers / cfg.attnResBlock) + 1 <= 64, `${Math.ceil(cfg.numLayers / cfg.attnResBlock) + 1} AttnRes sources > 64 (k3_attnres_mix's limit)`],
      [cfg.latent % 32 === 0 && cfg.moeInter % 32 === 0, `routed_expert_hidden_size ${cfg.latent} and moe_intermediate_size ${cfg.moeInter} must be multiples of 32 (MXFP4 groups)`],
      [cfg.convKernel === 4, `short_conv_kernel_size ${cfg.convKernel}: the KDA conv kernel is width 4`],
    ];
    const broken = limits.filter(([ok]) => !ok).map(([, why]) => why);
    if (broken.length) throw new K3Error("CONFIG", "this config is outside what the kernels implement", broken);
    this.mem = new CBuffers(k);
    const c = cfg;
    const T = chunk;
    const E = c.hidden;
    const P = c.kdaHeads * c.kdaHeadDim;
    this.maxBank = Math.ceil(c.numLayers / c.attnResBlock);
    const f = (name: string, n: number) => (this.b[name] = this.mem.floats(n, name));
    f("P", T * E);
    f("bank", this.maxBank * T * E);
    f("h", T * E);
    f("xn", T * E);
    f("a", T * E);
    f("m", T * E);
    // KDA
    for (const n of ["q", "k", "v", "g", "gp", "o"]) f(`kda_${n}`, T * P);
    f("kda_fa", T * c.kdaHeadDim);
    f("kda_beta", T * c.kdaHeads);
    // MLA
    const qk = c.qkNope + c.qkRope;
    f("mla_qa", T * c.qLoraRank);
    f("mla_q", T * c.mlaHeads * qk);
    f("mla_c", T * (c.kvLoraRank + c.qkRope));
    f("mla_o", T * c.mlaHeads * c.vHead);
    f("mla_gate", T * c.mlaHeads * c.vHead);
    f("mla_scratch", Number(k.k3_mla_scratch_floats(c.kvLoraRank, maxContext)));
    // FFN
    const sharedInter = c.numSharedExperts * c.moeInter;
    if (c.firstKDense > 0) {
      f("dense_g", T * c.denseInter);
      f("dense_u", T * c.denseInter);
    }
    f("sh_g", T * sharedInter);
    f("sh_u", T * sharedInter);
    f("sh_d", T * E);
    f("router_logits", T * c.numExperts);
    this.b.router_idx = this.mem.alloc(T * c.topK * 4, "router idx");
    f("router_w", T * c.topK);
    f("z", T * c.latent);
    f("xe", T * c.latent);
    f("ge", T * c.moeInter);
    f("ue", T * c.moeInter);
    f("ye", T * c.latent);
    f("yall", T * c.topK * c.latent);
    f("y", T * c.latent);
    // final
    f("final_bank", this.maxBank * E);
    f("final_h", E);
    f("final_x", E);
    f("logits", c.vocab);
    this.logitsView = this.b.logits.f32().subarray(0, c.vocab);
    this.idxView = this.b.router_idx.i32();
    this.wView = this.b.router_w.f32();
    this.yView = this.b.y!.f32();
  }

  /**
   * Run `ids` through the model, appending to `state`. Returns the logits of the last token
   * (a view into a buffer reused by the next call: copy it to keep it).
   */
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
    for (const id of ids)
      if (!Number.isInteger(id) || id < 0 || id >= this.cfg.vocab)
        throw new K3Error("USAGE", `token id ${id} outside the vocabulary [0, ${this.cfg.vocab})`);
  }

  /**
   * Run `ids` through the model in chunks, appending to `state`. Returns the logits of the last
   * token (a view into a buffer reused by the next call: copy it to keep it), or null with
   * `logits: false` (a prefill piece that more tokens will follow: no final mix, no lm_head).
   */
  forward(state: SessionState, ids: number[], opts?: Partial<ForwardOptions> & { logits?: boolean }): Float32Array | null {
    this.check(state, ids);
    const wantLogits = opts?.logits ?? true;
    const chunk = Math.min(opts?.chunk ?? this.chunk, this.chunk);
    try {
      for (let s = 0; s < ids.length; s += chunk) {
        const part = ids.slice(s, s + chunk);
        this.w.setHeadNext?.(wantLogits && s + chunk >= ids.length);
        this.forwardChunk(state, part);
        opts?.onChunk?.(s + part.length, ids.length);
      }
      if (!wantLogits) return null;
      this.finalLogits(this.lastT);
      return this.logitsView;
    } catch (err) {
      // A chunk that failed part-way has moved some layers' recurrent state: never reuse it silently.
      state.dirty = true;
      throw err;
    }
  }

  /** Tokens in the most recent chunk (the final mix reads its last row). */
  private lastT = 0;

  private forwardChunk(state: SessionState, ids: number[]): void {
    const k = this.k;
    const c = this.cfg;
    const T = ids.length;
    const E = c.hidden;
    const b = this.b;
    this.lastT = T;
    // Embed: P = embed_tokens[id] (no scaling).
    for (let t = 0; t < T; t++) this.w.embedRow(ids[t]!, b.P!.ptr + t * E * F);
    let nBank = 0;
    for (let L = 0; L < c.numLayers; L++) {
      const lw = this.w.acquireLayer(L);
      try {
        // 2. h = mix(P, B) if B non-empty, else P.
        if (nBank > 0) this.mix(lw, "self_attention_res", nBank, T, b.h!.ptr);
        else k.k3_mem_copy(b.h!.ptr as any, b.P!.ptr as any, T * E * F);
        // 3. Block boundary: snapshot P into the bank, P becomes "none".
        let pNone = false;
        if (L % c.attnResBlock === 0) {
          k.k3_mem_copy((b.bank!.ptr + nBank * T * E * F) as any, b.P!.ptr as any, T * E * F);
          nBank++;
          pNone = true;
        }
        // 4. a = Attention(RMSNorm(h, input_layernorm))
        this.norm(lw.t("input_layernorm.weight").ptr, b.h!.ptr, b.xn!.ptr, T, c.rmsEps);
        if (c.layerKinds[L] === "kda") this.kda(lw, state, L, T);
        else this.mla(lw, state, L, T);
        // 5. P = (P is none) ? a : P + a
        if (pNone) k.k3_mem_copy(b.P!.ptr as any, b.a!.ptr as any, T * E * F);
        else k.k3_add(b.P!.ptr as any, b.a!.ptr as any, T * E);
        // 6. h2 = mix(P, B) — B is never empty here.
        this.mix(lw, "mlp_res", nBank, T, b.h!.ptr);
        // 7. m = FFN(RMSNorm(h2, post_attention_layernorm))
        this.norm(lw.t("post_attention_layernorm.weight").ptr, b.h!.ptr, b.xn!.ptr, T, c.rmsEps);
        if (L < c.firstKDense) this.denseFfn(lw, T);
        else this.moe(lw, L, T);
        // 8. P = P + m
        k.k3_add(b.P!.ptr as any, b.m!.ptr as any, T * E);
      } finally {
        this.w.releaseLayer(L);
      }
      if (this.lookahead && T === 1) this.lookaheadRouter(L + 1);
    }
    this.nBankFinal = nBank;
    state.pos += T;
    for (const id of ids) state.history.push(id);
  }

  private nBankFinal = 0;

  /**
   * Run layer L's router on the previous layer's output P (instead of its own mixed, normed
   * input) and start reading its likely experts. Only when L's trunk is already in memory; the
   * real router still decides which experts run, so this never changes a bit of the output.
   */
  private lookaheadRouter(L: number): void {
    const c = this.cfg;
    if (L >= c.numLayers || L < c.firstKDense || !this.w.peekLayer || !this.w.hintExperts) return;
    const lw = this.w.peekLayer(L);
    if (!lw) return;
    const b = this.b;
    const p = "block_sparse_moe";
    this.norm(lw.t("post_attention_layernorm.weight").ptr, b.P!.ptr, b.xn!.ptr, 1, c.rmsEps);
    this.mm(lw.t(`${p}.gate.weight`).ptr, b.xn!.ptr, b.router_logits!.ptr, c.numExperts, c.hidden, 1);
    this.k.k3_router_topk(b.router_logits!.ptr as any, lw.t(`${p}.gate.e_score_correction_bias`).ptr as any, c.numExperts, c.topK, 1, c.routedScaling, b.router_idx!.ptr as any, b.router_w!.ptr as any);
    this.w.hintExperts(L, Array.from(this.idxView.subarray(0, Math.min(LOOKAHEAD_EXPERTS, c.topK))));
  }

  /** Final model-level mix, norm and lm_head, for the last token of the last chunk only. */
  private finalLogits(T: number): void {
    const k = this.k;
    const c = this.cfg;
    const E = c.hidden;
    const b = this.b;
    const head = this.w.head();
    const t = T - 1;
    // The bank for one token: gather token t's snapshots into [n][1][E].
    const nb = this.nBankFinal;
    const bank1 = b.final_bank!;
    for (let i = 0; i < nb; i++)
      k.k3_mem_copy((bank1.ptr + i * E * F) as any, (b.bank!.ptr + (i * T + t) * E * F) as any, E * F);
    k.k3_attnres_mix(bank1.ptr as any, nb, (b.P!.ptr + t * E * F) as any, head.outResProj.ptr as any, head.outResNorm.ptr as any, b.final_h!.ptr as any, E, 1, c.rmsEps);
    this.norm(head.norm.ptr, b.final_h!.ptr, b.final_x!.ptr, 1, c.rmsEps);
    k.k3_matmul_bf16(head.lmHead.ptr as any, b.final_x!.ptr as any, b.logits!.ptr as any, c.vocab, E, 1);
    this.w.releaseHead?.();
  }

  private norm(w: number, x: number, y: number, T: number, eps: number): void {
    const E = this.cfg.hidden;
    this.k.k3_rmsnorm_bf16w(x as any, E, w as any, y as any, E, E, T, eps);
  }

  private mix(lw: LayerRef, which: "self_attention_res" | "mlp_res", nBank: number, T: number, out: number): void {
    const b = this.b;
    this.k.k3_attnres_mix(b.bank!.ptr as any, nBank, b.P!.ptr as any, lw.t(`${which}_proj.weight`).ptr as any, lw.t(`${which}_norm.weight`).ptr as any, out as any, this.cfg.hidden, T, this.cfg.rmsEps);
  }

  private mm(W: number, X: number, Y: number, rows: number, cols: number, T: number): void {
    this.k.k3_matmul_bf16(W as any, X as any, Y as any, rows, cols, T);
  }

  /** KDA attention (MODEL.md §4 KDA) on xn → a. */
  private kda(lw: LayerRef, state: SessionState, L: number, T: number): void {
    const k = this.k;
    const c = this.cfg;
    const b = this.b;
    const E = c.hidden;
    const H = c.kdaHeads;
    const D = c.kdaHeadDim;
    const P = H * D;
    const st = state.kda[L];
    if (!st) throw new K3Error("INTERNAL", `layer ${L} has no KDA state`);
    const x = b.xn!.ptr;
    const t = (s: string) => lw.t(`self_attn.${s}`).ptr;
    // 1. q, k, v projections, [T][P]
    this.mm(t("q_proj.weight"), x, b.kda_q!.ptr, P, E, T);
    this.mm(t("k_proj.weight"), x, b.kda_k!.ptr, P, E, T);
    this.mm(t("v_proj.weight"), x, b.kda_v!.ptr, P, E, T);
    // 2. causal short conv (width 4, history carried across calls) + SiLU
    k.k3_kda_conv_silu(b.kda_q!.ptr as any, t("q_conv1d.weight") as any, st.convQ.ptr as any, P, T);
    k.k3_kda_conv_silu(b.kda_k!.ptr as any, t("k_conv1d.weight") as any, st.convK.ptr as any, P, T);
    k.k3_kda_conv_silu(b.kda_v!.ptr as any, t("v_conv1d.weight") as any, st.convV.ptr as any, P, T);
    // 3. per-head L2 norm (a SUM of squares), q additionally × D^-0.5
    k.k3_l2norm_heads(b.kda_q!.ptr as any, H, D, T, 1e-6, 1 / Math.sqrt(D));
    k.k3_l2norm_heads(b.kda_k!.ptr as any, H, D, T, 1e-6, 1);
    // 4. gate g = lower·sigmoid(exp(A_log[h])·(f_b·f_a·x + dt_bias)), A_log per head
    this.mm(t("f_a_proj.weight"), x, b.kda_fa!.ptr, D, E, T);
    this.mm(t("f_b_proj.weight"), b.kda_fa!.ptr, b.kda_g!.ptr, P, D, T);
    k.k3_kda_gate(b.kda_g!.ptr as any, t("dt_bias") as any, t("A_log") as any, b.kda_g!.ptr as any, H, D, T, c.gateLowerBound);
    // 5. β = sigmoid(b_proj·x)
    this.mm(t("b_proj.weight"), x, b.kda_beta!.ptr, H, E, T);
    k.k3_sigmoid(b.kda_beta!.ptr as any, T * H);
    // 6. delta rule: decay, update, then read o from the UPDATED state
    k.k3_kda_recurrent(b.kda_q!.ptr as any, b.kda_k!.ptr as any, b.kda_v!.ptr as any, b.kda_g!.ptr as any, b.kda_beta!.ptr as any, st.S.ptr as any, b.kda_o!.ptr as any, H, D, T);
    // 7. o = RMSNorm_per_head(o, o_norm) · sigmoid(g_proj·x)   (norm first, then gate)
    k.k3_rmsnorm_f32w(b.kda_o!.ptr as any, D, t("o_norm.weight") as any, b.kda_o!.ptr as any, D, D, T * H, c.rmsEps);
    this.mm(t("g_proj.weight"), x, b.kda_gp!.ptr, P, E, T);
    k.k3_mul_sigmoid(b.kda_o!.ptr as any, b.kda_gp!.ptr as any, T * P);
    // 8. out = o_proj·o
    this.mm(t("o_proj.weight"), b.kda_o!.ptr, b.a!.ptr, E, P, T);
  }

  /** Gated NoPE MLA (MODEL.md §4 MLA) on xn → a, appending T latents to the cache. */
  private mla(lw: LayerRef, state: SessionState, L: number, T: number): void {
    const k = this.k;
    const c = this.cfg;
    const b = this.b;
    const E = c.hidden;
    const Hm = c.mlaHeads;
    const R = c.kvLoraRank;
    const dr = c.qkRope;
    const qk = c.qkNope + dr;
    const row = R + dr;
    const st = state.mla[L];
    if (!st) throw new K3Error("INTERNAL", `layer ${L} has no MLA cache`);
    const x = b.xn!.ptr;
    const t = (s: string) => lw.t(`self_attn.${s}`).ptr;
    // 1. q = q_b·RMSNorm(q_a·x, q_a_layernorm, 1e-6)   (1e-6: the released code's default, §7.4)
    this.mm(t("q_a_proj.weight"), x, b.mla_qa!.ptr, c.qLoraRank, E, T);
    k.k3_rmsnorm_bf16w(b.mla_qa!.ptr as any, c.qLoraRank, t("q_a_layernorm.weight") as any, b.mla_qa!.ptr as any, c.qLoraRank, c.qLoraRank, T, 1e-6);
    this.mm(t("q_b_proj.weight"), b.mla_qa!.ptr, b.mla_q!.ptr, Hm * qk, c.qLoraRank, T);
    // 2. c = kv_a·x → [c_kv (R) | k_r (dr)]; cache row = [RMSNorm(c_kv, 1e-6) | k_r (not normed)]
    this.mm(t("kv_a_proj_with_mqa.weight"), x, b.mla_c!.ptr, row, E, T);
    const base = st.cache.ptr + state.pos * row * F;
    k.k3_rmsnorm_bf16w(b.mla_c!.ptr as any, row, t("kv_a_layernorm.weight") as any, base as any, row, R, T, 1e-6);
    for (let i = 0; i < T; i++)
      k.k3_mem_copy((base + (i * row + R) * F) as any, (b.mla_c!.ptr + (i * row + R) * F) as any, dr * F);
    // 3–4. causal attention over positions ≤ p, no rotary, scale (dn+dr)^-0.5, kv_b absorbed
    k.k3_mla_attend(b.mla_q!.ptr as any, t("kv_b_proj.weight") as any, st.cache.ptr as any, b.mla_o!.ptr as any, b.mla_scratch!.ptr as any, Hm, c.qkNope, dr, c.vHead, R, state.pos, T, 1 / Math.sqrt(qk));
    // 5. o · sigmoid(g_proj·x), then o_proj (gate before o_proj, no norm)
    this.mm(t("g_proj.weight"), x, b.mla_gate!.ptr, Hm * c.vHead, E, T);
    k.k3_mul_sigmoid(b.mla_o!.ptr as any, b.mla_gate!.ptr as any, T * Hm * c.vHead);
    this.mm(t("o_proj.weight"), b.mla_o!.ptr, b.a!.ptr, E, Hm * c.vHead, T);
  }

  /** SiTU-GLU FFN: out = down·SiTU(gate·x, up·x). */
  private glu(lw: LayerRef, prefix: string, inter: number, g: CBuf, u: CBuf, out: number, T: number): void {
    const c = this.cfg;
    const E = c.hidden;
    const x = this.b.xn!.ptr;
    this.mm(lw.t(`${prefix}.gate_proj.weight`).ptr, x, g.ptr, inter, E, T);
    this.mm(lw.t(`${prefix}.up_proj.weight`).ptr, x, u.ptr, inter, E, T);
    this.k.k3_situ_glu(g.ptr as any, u.ptr as any, g.ptr as any, T * inter, c.situBeta, c.situLinearBeta);
    this.mm(lw.t(`${prefix}.down_proj.weight`).ptr, g.ptr, out, E, inter, T);
  }

  private denseFfn(lw: LayerRef, T: number): void {
    this.glu(lw, "mlp", this.cfg.denseInter, this.b.dense_g!, this.b.dense_u!, this.b.m!.ptr, T);
  }

  /** LatentMoE with shared experts (MODEL.md §4 Router, LatentMoE). */
  private moe(lw: LayerRef, L: number, T: number): void {
    const k = this.k;
    const c = this.cfg;
    const b = this.b;
    const E = c.hidden;
    const K = c.topK;
    const lat = c.latent;
    const x = b.xn!.ptr;
    const p = "block_sparse_moe";
    // Router on the full-width normed x: top-k of sigmoid + bias, weights from the unbiased scores.
    this.mm(lw.t(`${p}.gate.weight`).ptr, x, b.router_logits!.ptr, c.numExperts, E, T);
    k.k3_router_topk(b.router_logits!.ptr as any, lw.t(`${p}.gate.e_score_correction_bias`).ptr as any, c.numExperts, K, T, c.routedScaling, b.router_idx!.ptr as any, b.router_w!.ptr as any);
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
      this.mm(lw.t(`${p}.routed_expert_down_proj.weight`).ptr, x, b.z!.ptr, lat, E, T);
      // Shared experts on the full-width x, unweighted: sh_d = down·SiTU(gate·x, up·x). Computed
      // now, while the routed experts' reads are in flight; it is added after the routed part below,
      // so the order of the sum (and every bit) is as if it ran last.
      this.glu(lw, `${p}.shared_experts`, c.numSharedExperts * c.moeInter, b.sh_g!, b.sh_u!, b.sh_d!.ptr, T);
      // Each expert runs as soon as it is available; its rows land in yall[t][rank], so the sum
      // below does not depend on arrival order.
      for (let n = 0; n < users.size; n++) {
        const { expert, ref } = this.w.nextExpert(L);
        const slots = users.get(expert);
        if (!slots) throw new K3Error("INTERNAL", `layer ${L}: provider returned unrequested expert ${expert}`);
        const ne = slots.length;
        for (let i = 0; i < ne; i++) {
          const tok = Math.floor(slots[i]! / K);
          k.k3_mem_copy((b.xe!.ptr + i * lat * F) as any, (b.z!.ptr + tok * lat * F) as any, lat * F);
        }
        k.k3_matmul_mxfp4(ref.w1p as any, ref.w1s as any, b.xe!.ptr as any, b.ge!.ptr as any, c.moeInter, lat, ne);
        k.k3_matmul_mxfp4(ref.w3p as any, ref.w3s as any, b.xe!.ptr as any, b.ue!.ptr as any, c.moeInter, lat, ne);
        k.k3_situ_glu(b.ge!.ptr as any, b.ue!.ptr as any, b.ge!.ptr as any, ne * c.moeInter, c.situBeta, c.situLinearBeta);
        k.k3_matmul_mxfp4(ref.w2p as any, ref.w2s as any, b.ge!.ptr as any, b.ye!.ptr as any, lat, c.moeInter, ne);
        for (let i = 0; i < ne; i++)
          k.k3_mem_copy((b.yall!.ptr + slots[i]! * lat * F) as any, (b.ye!.ptr + i * lat * F) as any, lat * F);
      }
    } finally {
      this.w.releaseExperts(L);
    }
    // y = Σ_rank w·y_e (rank order, from zero), then RMSNorm once on the aggregate (§7.9).
    const wv = this.wView;
    this.yView.fill(0, 0, T * lat);
    for (let t = 0; t < T; t++)
      for (let r = 0; r < K; r++)
        k.k3_axpy((b.y!.ptr + t * lat * F) as any, wv[t * K + r]!, (b.yall!.ptr + (t * K + r) * lat * F) as any, lat);
    k.k3_rmsnorm_bf16w(b.y!.ptr as any, lat, lw.t(`${p}.routed_expert_norm.weight`).ptr as any, b.y!.ptr as any, lat, lat, T, c.rmsEps);
    this.mm(lw.t(`${p}.routed_expert_up_proj.weight`).ptr, b.y!.ptr, b.m!.ptr, E, lat, T);
    // m = routed + shared (shared computed above while the expert reads were in flight)
    k.k3_add(b.m!.ptr as any, b.sh_d!.ptr as any, T * E);
  }

  free(): void {
    this.mem.free();
  }
}
