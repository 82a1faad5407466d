// The float64 reference of the Kimi K3 language model (docs/MODEL.md §4), full recompute.
//
// Independent check of the engine: imports nothing from src/ or kernels/. Every forward recomputes
// the whole sequence from the embeddings, so there is no cache that could hide a state bug; the
// price is O(T²) work per generated token, fine for tiny test checkpoints.
//
// Notation: E hidden, T positions, H/D KDA heads/head dim, P = H·D, Hm MLA heads, R kv rank,
// dn/dr/dv nope/rope/value dims, N latent width of the routed experts.
import { readConfig, type RefConfig } from "./config.ts";
import {
  attnResMix,
  kdaGate,
  kdaStep,
  l2normalize,
  matvec,
  mlaAttention,
  rmsnorm,
  routerTopK,
  shortConvSilu,
  sigmoid,
  situGlu,
} from "./ops.ts";
import { SafetensorsDir } from "./safetensors.ts";
import { TRAP_DESCRIPTIONS, type TrapName } from "./traps.ts";
import { LM_HEAD, PREFIX, WeightCache } from "./weights.ts";

export { ALL_TRAPS, LOUD_TRAPS, type TrapName } from "./traps.ts";

type Vec = Float64Array;

const add = (a: Vec, b: Vec): Vec => {
  const y = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) y[i] = a[i] + b[i];
  return y;
};

export class ReferenceModel {
  private constructor(
    readonly cfg: RefConfig,
    private readonly w: WeightCache,
    readonly trap: TrapName | undefined,
  ) {}

  /** `weights`: tensors (full names) to use instead of the checkpoint's (WeightCache.override). */
  static open(dir: string, opts: { trap?: TrapName; weights?: Map<string, Float64Array> } = {}): ReferenceModel {
    if (opts.trap !== undefined && !(opts.trap in TRAP_DESCRIPTIONS)) throw new Error(`unknown trap ${opts.trap}`);
    const cfg = readConfig(dir);
    const st = SafetensorsDir.open(dir);
    const mx =
      opts.trap === "mxfp4-nibble-swap"
        ? { nibbleSwap: true }
        : opts.trap === "mxfp4-nan-not-zeroed"
          ? { nanNotZeroed: true }
          : undefined;
    const cache = new WeightCache(st, mx);
    for (const [name, w] of opts.weights ?? []) cache.override(name, w);
    const model = new ReferenceModel(cfg, cache, opts.trap);
    model.checkLayerKinds(new Set(st.names()));
    return model;
  }

  /** Each layer's attention tensors must match its kind by the layer lists (fails for layers-zero-based). */
  private checkLayerKinds(names: Set<string>): void {
    for (let l = 0; l < this.cfg.layers; l++) {
      const probe = `${PREFIX}layers.${l}.self_attn.${this.isMLA(l) ? "q_a_proj" : "q_proj"}.weight`;
      if (!names.has(probe))
        throw new Error(`layer ${l} is ${this.isMLA(l) ? "MLA" : "KDA"} by the layer lists${this.trap ? ` (trap ${this.trap})` : ""}, but ${probe} is missing`);
    }
  }

  private is(t: TrapName): boolean {
    return this.trap === t;
  }

  // ── weights by MODEL.md §3 name and shape ──
  private bf16(name: string, shape: number[]): Vec {
    return this.w.dense(PREFIX + name, "BF16", shape);
  }
  private f32(name: string, shape: number[]): Vec {
    return this.w.dense(PREFIX + name, "F32", shape);
  }

  /** Layer ℓ (zero-based) is MLA iff ℓ+1 ∈ full_attn_layers (lists are ONE-based, §7.8). */
  isMLA(l: number): boolean {
    if (this.is("layers-zero-based")) return this.cfg.mlaLayers.includes(l);
    return this.cfg.mlaLayers.includes(l + 1);
  }

  /** Logits [V] of the LAST position of `ids`, recomputing everything from the embeddings. */
  forward(ids: number[]): Float64Array {
    return this.run(ids, { logits: "last" }).logits[ids.length - 1]!;
  }

  /**
   * Logits at EVERY position of `ids` and, for an EAGLE-3 draft (DRAFTERS.md §2.3), the hidden
   * states it reads: `taps[t][j]` is the prefix-sum stream P of token t right after the MLP add of
   * the layer with ONE-based completed-layer id `tapLayers[j]` (zero-based layer id − 1): the value
   * that layer outputs (MODEL.md §4 step 8), not the AttnRes mixture and not the layer's input.
   * `tapStream: "mixture"` is the WRONG stream some DSpark drafts read (vLLM's attn_res_stream:
   * Mix(P, bank) with the next layer's self_attention_res_* weights, the output mixer after the
   * last layer); it exists so tests can show the two differ.
   */
  forwardAll(ids: number[], opts: { tapLayers?: number[]; tapStream?: "prefix" | "mixture" } = {}): { logits: Float64Array[]; taps: Float64Array[][] } {
    return this.run(ids, { logits: "all", ...opts }) as { logits: Float64Array[]; taps: Float64Array[][] };
  }

  private run(ids: number[], opts: { logits: "last" | "all"; tapLayers?: number[]; tapStream?: "prefix" | "mixture" }): { logits: (Float64Array | undefined)[]; taps: Float64Array[][] } {
    const { hidden: E, vocab: V, layers: L, eps, blockSize } = this.cfg;
    if (ids.length === 0) throw new Error("forward: empty input");
    const T = ids.length;
    const tapLayers = opts.tapLayers ?? [];
    for (const id of tapLayers) if (!Number.isInteger(id) || id < 1 || id > L) throw new Error(`tap layer ${id} is not a one-based layer id in 1..${L}`);
    const taps: Float64Array[][] = ids.map(() => tapLayers.map(() => new Float64Array(0)));
    const record = (completed: number, values: (t: number) => Vec) =>
      tapLayers.forEach((id, j) => id === completed && taps.forEach((row, t) => (row[j] = values(t).slice())));
    const mixture = opts.tapStream === "mixture";
    const embed = this.bf16("embed_tokens.weight", [V, E]); // [V][E]
    // Per token t: running sum P[t] (null = "none" right after a block boundary) and bank B[t].
    const P: (Vec | null)[] = ids.map((id) => {
      if (!Number.isInteger(id) || id < 0 || id >= V) throw new Error(`forward: token id ${id} out of range`);
      return embed.slice(id * E, (id + 1) * E); // h = embed_tokens[id], no scaling
    });
    const B: Vec[][] = ids.map(() => []);

    // One sublayer's entry (MODEL.md §4 steps 2–3 and 6): h = mix(P, B) (or P if B is empty), then
    // on a block boundary snapshot P into B and clear it. Returns h for every position.
    const enter = (boundary: boolean, proj: Vec, norm: Vec): Vec[] =>
      P.map((p, t) => {
        const h = B[t].length ? attnResMix(p!, B[t], proj, norm, eps, this.attnResWrong()) : p!;
        if (boundary) {
          B[t].push(p!);
          if (!this.is("attnres-no-clear")) P[t] = null;
        }
        return h;
      });
    const accumulate = (out: Vec[]) => out.forEach((o, t) => (P[t] = P[t] === null ? o : add(P[t]!, o)));
    // Real: boundary before layer ℓ's attention iff ℓ % block == 0, never before the MLP.
    // Trap attnres-count-sublayers: sublayer s = 2ℓ (attn) / 2ℓ+1 (mlp), boundary iff s % block == 0.
    const boundary = (l: number, mlp: boolean) =>
      this.is("attnres-count-sublayers") ? (2 * l + (mlp ? 1 : 0)) % blockSize === 0 : !mlp && l % blockSize === 0;

    for (let l = 0; l < L; l++) {
      const pre = `layers.${l}.`;
      // attention sublayer: a = Attention(RMSNorm(h, input_layernorm)); P = P + a
      const h = enter(boundary(l, false), this.bf16(pre + "self_attention_res_proj.weight", [1, E]), this.bf16(pre + "self_attention_res_norm.weight", [E]));
      if (mixture) record(l, (t) => h[t]); // the stream "after layer l−1" in vLLM's attn_res mode
      const inNorm = this.bf16(pre + "input_layernorm.weight", [E]);
      const xs = h.map((v) => rmsnorm(v, inNorm, eps));
      accumulate(this.isMLA(l) ? this.mla(l, xs) : this.kda(l, xs));
      // FFN sublayer: m = FFN(RMSNorm(h2, post_attention_layernorm)); P = P + m
      const h2 = enter(boundary(l, true), this.bf16(pre + "mlp_res_proj.weight", [1, E]), this.bf16(pre + "mlp_res_norm.weight", [E]));
      const postNorm = this.bf16(pre + "post_attention_layernorm.weight", [E]);
      accumulate(h2.map((v) => this.ffn(l, rmsnorm(v, postNorm, eps))));
      if (!mixture) record(l + 1, (t) => P[t]!); // P after layer l's MLP add = one-based id l + 1
    }

    // After the last layer: h = mix(P, B, output_attn_res_*); logits = lm_head · RMSNorm(h, norm)
    const outProj = this.bf16("output_attn_res_proj.weight", [1, E]);
    const outNorm = this.bf16("output_attn_res_norm.weight", [E]);
    const hFinal = (t: number) => (this.is("attnres-skip-final") ? P[t]! : attnResMix(P[t]!, B[t], outProj, outNorm, eps, this.attnResWrong()));
    if (mixture) record(L, hFinal);
    const head = this.w.dense(LM_HEAD, "BF16", [V, E]);
    const normW = this.bf16("norm.weight", [E]);
    const logits = ids.map((_, t) => (opts.logits === "all" || t === T - 1 ? matvec(head, V, E, rmsnorm(hFinal(t), normW, eps)) : undefined)); // [V]
    return { logits, taps };
  }

  /** n greedy tokens after `ids`, full recompute each step; ties → lowest token id. */
  greedy(ids: number[], n: number): number[] {
    const seq = [...ids];
    const out: number[] = [];
    for (let i = 0; i < n; i++) {
      const logits = this.forward(seq);
      let best = 0;
      for (let v = 1; v < logits.length; v++) if (logits[v] > logits[best]) best = v; // strict: ties keep the lower id
      out.push(best);
      seq.push(best);
    }
    return out;
  }

  private attnResWrong() {
    return this.is("attnres-normed-sources") ? { normedSources: true } : undefined;
  }

  // ───────────── KDA (MODEL.md §4 "KDA"), xs: T × [E] normed inputs → T × [E] ─────────────
  private kda(l: number, xs: Vec[]): Vec[] {
    const { hidden: E, kdaHeads: H, kdaDim: D, convWidth: K, eps, gateLower } = this.cfg;
    const P = H * D;
    const pre = `layers.${l}.self_attn.`;
    const Wq = this.bf16(pre + "q_proj.weight", [P, E]);
    const Wk = this.bf16(pre + "k_proj.weight", [P, E]);
    const Wv = this.bf16(pre + "v_proj.weight", [P, E]);
    const Wg = this.bf16(pre + "g_proj.weight", [P, E]);
    const Wo = this.bf16(pre + "o_proj.weight", [E, P]);
    const Wfa = this.bf16(pre + "f_a_proj.weight", [D, E]);
    const Wfb = this.bf16(pre + "f_b_proj.weight", [P, D]);
    const Wb = this.bf16(pre + "b_proj.weight", [H, E]);
    const conv = (n: string) => this.f32(pre + n + ".weight", [P, 1, K]); // [P][1][K] = [P][K]
    // A_log ships with D entries for H heads; only the first H are used (the trap needs D).
    const aLog = this.w.f32Loose(PREFIX + pre + "A_log", this.is("alog-per-channel") ? D : H);
    const dtBias = this.f32(pre + "dt_bias", [P]);
    const oNorm = this.f32(pre + "o_norm.weight", [D]);

    // 1–2. projections, then depthwise causal conv (zero history at sequence start) + SiLU
    const zeroHist = Array.from({ length: K - 1 }, () => new Float64Array(P));
    const convSeq = (W: Vec, wc: Vec) => {
      const raw = xs.map((x) => matvec(W, P, E, x)); // T × [P]
      if (this.is("kda-no-conv-history")) return raw.map((r) => shortConvSilu([r], wc, zeroHist)[0]);
      return shortConvSilu(raw, wc, zeroHist);
    };
    const qs = convSeq(Wq, conv("q_conv1d"));
    const ks = convSeq(Wk, conv("k_conv1d"));
    const vs = convSeq(Wv, conv("v_conv1d"));

    // 3. per head: x / sqrt(Σx² + 1e-6); q additionally · D^-0.5
    const headNorm = (x: Vec, scale: number) => {
      const y = new Float64Array(P);
      for (let h = 0; h < H; h++) {
        const head = x.subarray(h * D, (h + 1) * D);
        // trap kda-l2-mean: sqrt(mean + eps) = sqrt((Σ + D·eps)/D) → same as l2normalize(·, D·eps)·sqrt(D)
        const n = this.is("kda-l2-mean") ? l2normalize(head, 1e-6 * D).map((v) => v * Math.sqrt(D)) : l2normalize(head, 1e-6);
        for (let d = 0; d < D; d++) y[h * D + d] = n[d] * scale;
      }
      return y;
    };

    const S = new Float64Array(H * D * D); // [H][D(key)][D(value)], zero at start
    const out: Vec[] = [];
    for (let t = 0; t < xs.length; t++) {
      const x = xs[t];
      const q = headNorm(qs[t], 1 / Math.sqrt(D));
      const k = headNorm(ks[t], 1);
      // 4. g = lower · sigmoid(exp(A_log[h]) · (f_b·(f_a·x) + dt_bias)); 5. β = sigmoid(b_proj·x)
      const f = matvec(Wfb, P, D, matvec(Wfa, D, E, x)); // [P]
      const g = kdaGate(f, dtBias, aLog, H, D, gateLower, { perChannel: this.is("alog-per-channel") });
      const beta = matvec(Wb, H, E, x).map(sigmoid); // [H]
      // 6. delta-rule step
      const o = kdaStep(S, q, k, vs[t], g, beta, H, D, { readBeforeUpdate: this.is("kda-read-before-update") });
      // 7. o = RMSNorm(o_h, o_norm) · sigmoid(g_proj·x)   (norm first, then gate)
      const gate = matvec(Wg, P, E, x).map(sigmoid); // [P]
      const og = new Float64Array(P);
      for (let h = 0; h < H; h++) {
        const oh = o.subarray(h * D, (h + 1) * D);
        if (this.is("kda-gate-before-norm")) {
          const gated = oh.map((v, d) => v * gate[h * D + d]);
          og.set(rmsnorm(gated, oNorm, eps), h * D);
        } else {
          const n = rmsnorm(oh, oNorm, eps);
          for (let d = 0; d < D; d++) og[h * D + d] = n[d] * gate[h * D + d];
        }
      }
      out.push(matvec(Wo, E, P, og)); // 8. out = o_proj · o
    }
    return out;
  }

  // ───────────── MLA (MODEL.md §4 "MLA"), xs: T × [E] normed inputs → T × [E] ─────────────
  private mla(l: number, xs: Vec[]): Vec[] {
    const { hidden: E, mlaHeads: Hm, qRank, kvRank: R, dn, dr, dv, eps } = this.cfg;
    const pre = `layers.${l}.self_attn.`;
    const loraEps = this.is("mla-lora-eps-1e-5") ? eps : 1e-6; // released code: 1e-6, not the config eps
    const Wqa = this.bf16(pre + "q_a_proj.weight", [qRank, E]);
    const qaNorm = this.bf16(pre + "q_a_layernorm.weight", [qRank]);
    const Wqb = this.bf16(pre + "q_b_proj.weight", [Hm * (dn + dr), qRank]);
    const Wkva = this.bf16(pre + "kv_a_proj_with_mqa.weight", [R + dr, E]);
    const kvaNorm = this.bf16(pre + "kv_a_layernorm.weight", [R]);
    const Wkvb = this.bf16(pre + "kv_b_proj.weight", [Hm * (dn + dv), R]);
    const Wo = this.bf16(pre + "o_proj.weight", [E, Hm * dv]);
    const Wg = this.bf16(pre + "g_proj.weight", [Hm * dv, E]);

    // 1. q = q_b · RMSNorm(q_a · x, 1e-6) → per head [dn nope | dr "rope"]
    const q = xs.map((x) => matvec(Wqb, Hm * (dn + dr), qRank, rmsnorm(matvec(Wqa, qRank, E, x), qaNorm, loraEps)));
    // 2. [c_kv (R) | k_r (dr)] = kv_a · x; c_kv normed (1e-6), k_r not normed, shared by all heads
    const c = xs.map((x) => matvec(Wkva, R + dr, E, x));
    const ckv = c.map((v) => rmsnorm(v.slice(0, R), kvaNorm, loraEps));
    let kr: Vec[] = c.map((v) => v.slice(R));
    // 3. no rotary embedding anywhere (traps: apply one, or drop the dr dims)
    if (this.is("mla-rope")) {
      kr = kr.map((v, p) => rope(v, p));
      q.forEach((qp, p) => {
        for (let h = 0; h < Hm; h++) qp.set(rope(qp.slice(h * (dn + dr) + dn, (h + 1) * (dn + dr)), p), h * (dn + dr) + dn);
      });
    }
    if (this.is("mla-drop-rope-dims")) kr = kr.map((v) => new Float64Array(v.length));
    // 4. causal softmax, scale (dn+dr)^-0.5
    const scale = this.is("mla-scale-128") ? 1 / Math.sqrt(dn) : 1 / Math.sqrt(dn + dr);
    const att = mlaAttention(q, ckv, kr, Wkvb, Hm, dn, dr, dv, R, scale); // T × [Hm·dv]
    // 5. out = o_proj · (att · sigmoid(g_proj · x))
    return att.map((a, t) => {
      const gate = matvec(Wg, Hm * dv, E, xs[t]);
      return matvec(Wo, E, Hm * dv, a.map((v, i) => v * sigmoid(gate[i])));
    });
  }

  // ───────────── FFN: dense (ℓ < first_k_dense_replace) or LatentMoE; x: [E] normed → [E] ─────────────
  private ffn(l: number, x: Vec): Vec {
    const c = this.cfg;
    const E = c.hidden;
    const pre = `layers.${l}.`;
    if (l < c.firstDense) {
      // down · SiTU(gate · x, up · x)
      const I = c.denseInter;
      const g = matvec(this.bf16(pre + "mlp.gate_proj.weight", [I, E]), I, E, x);
      const u = matvec(this.bf16(pre + "mlp.up_proj.weight", [I, E]), I, E, x);
      return matvec(this.bf16(pre + "mlp.down_proj.weight", [E, I]), E, I, situGlu(g, u, c.situB1, c.situB2));
    }
    const moe = pre + "block_sparse_moe.";
    const N = c.latent;
    const F = c.moeInter;
    // Router: s = sigmoid(W_gate · x); top-k of s + bias; weights from s, renormalised, · scaling
    const logits = matvec(this.bf16(moe + "gate.weight", [c.experts, E]), c.experts, E, x);
    const bias = this.f32(moe + "gate.e_score_correction_bias", [c.experts]);
    const route = routerTopK(logits, bias, c.topK, c.scaling, { biasInWeights: this.is("router-bias-in-weights") });
    // z = routed_expert_down_proj · x  [N]
    const z = matvec(this.bf16(moe + "routed_expert_down_proj.weight", [N, E]), N, E, x);
    const expertNorm = this.bf16(moe + "routed_expert_norm.weight", [N]);
    // y = Σ_e w_e · w2_e · SiTU(w1_e · z, w3_e · z)   [N]; then RMSNorm on the aggregate, once
    let y: Vec = new Float64Array(N);
    route.idx.forEach((e, j) => {
      const ex = `${PREFIX}${moe}experts.${e}.`;
      const g = matvec(this.w.mxfp4(ex + "w1", F, N), F, N, z);
      const u = matvec(this.w.mxfp4(ex + "w3", F, N), F, N, z);
      let ye = matvec(this.w.mxfp4(ex + "w2", N, F), N, F, situGlu(g, u, c.situB1, c.situB2));
      if (this.is("expert-norm-per-expert")) ye = rmsnorm(ye, expertNorm, c.eps);
      for (let i = 0; i < N; i++) y[i] += route.w[j] * ye[i];
    });
    if (!this.is("expert-norm-per-expert")) y = rmsnorm(y, expertNorm, c.eps);
    const routed = matvec(this.bf16(moe + "routed_expert_up_proj.weight", [E, N]), E, N, y);
    // shared(x) = down · SiTU(gate · x, up · x) on the full-width x, unweighted
    const S = c.sharedExperts * F;
    let sx = x;
    if (this.is("shared-on-latent")) {
      sx = new Float64Array(E); // the latent buffer read as if it were x: zero-padded / truncated to E
      sx.set(z.subarray(0, Math.min(N, E)));
    }
    const sg = matvec(this.bf16(moe + "shared_experts.gate_proj.weight", [S, E]), S, E, sx);
    const su = matvec(this.bf16(moe + "shared_experts.up_proj.weight", [S, E]), S, E, sx);
    let shared = matvec(this.bf16(moe + "shared_experts.down_proj.weight", [E, S]), E, S, situGlu(sg, su, c.situB1, c.situB2));
    if (this.is("shared-weighted")) shared = shared.map((v) => v * route.w[0]);
    return add(routed, shared);
  }
}

/** Trap mla-rope only: NeoX-style rotary (pairs i, i+n/2), θ = 10000, at position p. v: [n] → [n]. */
function rope(v: Vec, p: number): Vec {
  const n = v.length;
  const half = n / 2;
  const y = new Float64Array(n);
  for (let i = 0; i < half; i++) {
    const ang = p * 10000 ** ((-2 * i) / n);
    const [c, s] = [Math.cos(ang), Math.sin(ang)];
    y[i] = v[i] * c - v[i + half] * s;
    y[i + half] = v[i] * s + v[i + half] * c;
  }
  return y;
}
