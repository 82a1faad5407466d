// The float64 reference of a released EAGLE-3 draft (DRAFTERS.md §3, format A): one MLA decoder
// layer fed by the target's hidden states, its latent cache, the chain of k drafts and the cache
// refill across verify passes (§3.7). The independent check of the engine's drafter: imports
// nothing from src/ or kernels/, only tools/reference's own code (the target is ReferenceModel, so
// the taps come from the target reference too). docs/DRAFT.md documents the API.
//
// Numerics: exact float64 math of the spec, RMSNorm(x; w) = w·x/√(mean x² + ε) with no bf16 cast of
// the normalised value (the engine may cast; the draft's numbers never decide an output, so the
// engine's tolerance against this reference is the engine's to derive). All draft norms use the
// config's rms_norm_eps, the q_a/kv_a LoRA norms included (unlike the target's 1e-6, MODEL.md §4).
import { readDraftConfig, type DraftConfig } from "./draft-config.ts";
import { type LatentRow, mlaLatentAttention, ropeAmplitude, ropeFrequencies, ropeInterleaved, siluMlp, softmaxScale } from "./draft-ops.ts";
import type { ReferenceModel } from "./model.ts";
import { matvec, rmsnorm } from "./ops.ts";
import { SafetensorsDir } from "./safetensors.ts";
import { WeightCache } from "./weights.ts";

export type { DraftConfig } from "./draft-config.ts";
export type { LatentRow } from "./draft-ops.ts";

type Vec = Float64Array;

/** Lowest index of the largest value (greedy ties go to the lowest id, MODEL.md §5). */
export function argmax(v: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i]! > v[best]!) best = i;
  return best;
}

/** The draft's latent cache: row j (position j) = (c_j, rotated k_r,j). Rows are position-indexed. */
export class DraftCache {
  readonly rows: LatentRow[] = [];
  get length(): number {
    return this.rows.length;
  }
  /** Drops every row at position ≥ n (the chain rows of a proposal). */
  truncate(n: number): void {
    this.rows.length = Math.min(this.rows.length, n);
  }
}

/** Everything one draft step computes for one (hidden, token) row at position `pos`. */
export interface DraftStep {
  pos: number;
  token: number; // the input token of this row
  row: LatentRow; // the cache row it wrote
  r2: Vec; // pre-norm residual output (eagle3's feedback state)
  y: Vec; // post-final-norm output (eagle3.1's feedback state; lm_head's input)
  logits: Vec; // [V]
  draft: number; // argmax of logits
}

export class ReferenceDraft {
  private readonly tau: number;
  private readonly freqs: Float64Array;
  private readonly amplitude: number;

  private constructor(
    readonly cfg: DraftConfig,
    private readonly w: WeightCache,
    private readonly embedding: Vec,
  ) {
    this.tau = softmaxScale(cfg);
    this.freqs = ropeFrequencies(cfg.dr, cfg.ropeTheta, cfg.yarn);
    this.amplitude = ropeAmplitude(cfg.yarn);
  }

  /**
   * Opens `dir` (config.json + model.safetensors). `embedding`: the target's table [V·H] to share
   * (DRAFTERS.md §1.4), instead of the draft's own `embed_tokens.weight` (which must then still
   * exist with the right shape).
   */
  static open(dir: string, opts: { embedding?: Float64Array } = {}): ReferenceDraft {
    const cfg = readDraftConfig(dir);
    const w = new WeightCache(SafetensorsDir.open(dir), undefined);
    const own = w.dense("embed_tokens.weight", "BF16", [cfg.vocab, cfg.hidden]);
    if (opts.embedding && opts.embedding.length !== own.length) throw new Error(`${dir}: shared embedding has ${opts.embedding.length} values, want ${cfg.vocab}×${cfg.hidden}`);
    const d = new ReferenceDraft(cfg, w, opts.embedding ?? own);
    d.checkRoster();
    return d;
  }

  private bf16(name: string, shape: number[]): Vec {
    return this.w.dense(name, "BF16", shape);
  }

  /** Every tensor the config implies, by name, shape and dtype (DRAFTERS.md §1.3), and nothing else. */
  roster(): Array<[string, number[]]> {
    const { hidden: H, heads, qRank, kvRank: R, dn, dr, dv, inter: I, vocab: V, layerIds } = this.cfg;
    const a = "layers.0.self_attn.";
    return [
      ["embed_tokens.weight", [V, H]],
      ["fc.weight", [H, layerIds.length * H]],
      ...(this.cfg.fcNorm ? layerIds.map((_, j): [string, number[]] => [`fc_norm.${j}.weight`, [H]]) : []),
      ["layers.0.hidden_norm.weight", [H]],
      ["layers.0.input_layernorm.weight", [H]],
      [a + "q_a_proj.weight", [qRank, 2 * H]],
      [a + "q_a_layernorm.weight", [qRank]],
      [a + "q_b_proj.weight", [heads * (dn + dr), qRank]],
      [a + "kv_a_proj_with_mqa.weight", [R + dr, 2 * H]],
      [a + "kv_a_layernorm.weight", [R]],
      [a + "kv_b_proj.weight", [heads * (dn + dv), R]],
      [a + "o_proj.weight", [H, heads * dv]],
      ["layers.0.post_attention_layernorm.weight", [H]],
      ["layers.0.mlp.gate_proj.weight", [I, H]],
      ["layers.0.mlp.up_proj.weight", [I, H]],
      ["layers.0.mlp.down_proj.weight", [H, I]],
      ["norm.weight", [H]],
      ["lm_head.weight", [V, H]],
    ];
  }

  /** Reads every tensor of the roster (BF16, its shape) and refuses unknown ones, so a bad file fails at open. */
  private checkRoster(): void {
    const want = this.roster();
    for (const [name, shape] of want) this.bf16(name, shape);
    const known = new Set(want.map(([n]) => n));
    const extra = this.w.st.names().filter((n) => !known.has(n));
    if (extra.length) throw new Error(`draft: unexpected tensors ${extra.join(", ")} (fc_norm ${this.cfg.fcNorm} in config.json)`);
  }

  /** The draft's fused hidden h = W_fc·[ĝ_0; …] of one position's taps (§3.2.1; ĝ_j = RMSNorm(g_j) with fc_norm). */
  fuse(taps: Vec[]): Vec {
    const { hidden: H, layerIds, eps } = this.cfg;
    if (taps.length !== layerIds.length) throw new Error(`fuse: ${taps.length} taps, the config names ${layerIds.length}`);
    const g = new Float64Array(H * taps.length);
    taps.forEach((t, j) => g.set(this.cfg.fcNorm ? rmsnorm(t, this.bf16(`fc_norm.${j}.weight`, [H]), eps) : t, j * H));
    return matvec(this.bf16("fc.weight", [H, taps.length * H]), H, taps.length * H, g);
  }

  embed(token: number): Vec {
    const H = this.cfg.hidden;
    if (!Number.isInteger(token) || token < 0 || token >= this.cfg.vocab) throw new Error(`draft: token id ${token} out of range`);
    return this.embedding.subarray(token * H, (token + 1) * H);
  }

  /** u = [RMSNorm(E[x]; w_in) ; RMSNorm(h; w_hid)] (§3.2.2: embedding first). */
  private fusedInput(h: Vec, token: number): Vec {
    const { hidden: H, eps } = this.cfg;
    const u = new Float64Array(2 * H);
    u.set(rmsnorm(this.embed(token), this.bf16("layers.0.input_layernorm.weight", [H]), eps), 0);
    u.set(rmsnorm(h, this.bf16("layers.0.hidden_norm.weight", [H]), eps), H);
    return u;
  }

  /** The cache row of (h, token) at `pos` (§3.2.4–6): c = RMSNorm(c_kv), k_r rotated at pos. It depends on u only. */
  private latentRow(u: Vec, pos: number): LatentRow {
    const { hidden: H, kvRank: R, dr, eps } = this.cfg;
    const kva = matvec(this.bf16("layers.0.self_attn.kv_a_proj_with_mqa.weight", [R + dr, 2 * H]), R + dr, 2 * H, u);
    return {
      c: rmsnorm(kva.slice(0, R), this.bf16("layers.0.self_attn.kv_a_layernorm.weight", [R]), eps),
      kr: ropeInterleaved(kva.slice(R), pos, this.freqs, this.amplitude),
    };
  }

  /** A committed row from target taps (§3.7): only fc, the norms, kv_a and RoPE; no attention. */
  committedRow(taps: Vec[], token: number, pos: number): LatentRow {
    return this.latentRow(this.fusedInput(this.fuse(taps), token), pos);
  }

  /**
   * One draft step for the row (h, token) at position `pos` (§3.2.2–10): writes its cache row at
   * `pos` (the cache must hold exactly the rows 0..pos−1), attends over rows 0..pos, runs the MLP
   * and the head. `absorbed` selects the absorbed MLA form (equal in exact arithmetic).
   */
  step(cache: DraftCache, h: Vec, token: number, pos: number, opts: { absorbed?: boolean } = {}): DraftStep {
    const { hidden: H, heads, qRank, dn, dr, dv, kvRank: R, inter: I, vocab: V, eps } = this.cfg;
    if (cache.length !== pos) throw new Error(`draft step at position ${pos} needs a cache of ${pos} rows, it has ${cache.length}`);
    const u = this.fusedInput(h, token);
    const a = "layers.0.self_attn.";
    const cq = rmsnorm(matvec(this.bf16(a + "q_a_proj.weight", [qRank, 2 * H]), qRank, 2 * H, u), this.bf16(a + "q_a_layernorm.weight", [qRank]), eps);
    const q = matvec(this.bf16(a + "q_b_proj.weight", [heads * (dn + dr), qRank]), heads * (dn + dr), qRank, cq);
    for (let hd = 0; hd < heads; hd++) {
      const at = hd * (dn + dr) + dn; // per head [q_nope | q_rope]: rotate the rope slice
      q.set(ropeInterleaved(q.slice(at, at + dr), pos, this.freqs, this.amplitude), at);
    }
    const row = this.latentRow(u, pos);
    cache.rows.push(row);
    const att = mlaLatentAttention(q, cache.rows, this.bf16(a + "kv_b_proj.weight", [heads * (dn + dv), R]), this.cfg, this.tau, opts.absorbed ?? true);
    const o = matvec(this.bf16(a + "o_proj.weight", [H, heads * dv]), H, heads * dv, att);
    const r1 = h.map((x, i) => x + o[i]); // the residual is h (§3.2.2), no output gate (§3.2.8)
    const z = rmsnorm(r1, this.bf16("layers.0.post_attention_layernorm.weight", [H]), eps);
    const m = siluMlp(z, this.bf16("layers.0.mlp.gate_proj.weight", [I, H]), this.bf16("layers.0.mlp.up_proj.weight", [I, H]), this.bf16("layers.0.mlp.down_proj.weight", [H, I]), H, I);
    const r2 = r1.map((x, i) => x + m[i]);
    const y = rmsnorm(r2, this.bf16("norm.weight", [H]), eps);
    const logits = matvec(this.bf16("lm_head.weight", [V, H]), V, H, y);
    return { pos, token, row, r2, y, logits, draft: argmax(logits) };
  }

  /** The state fed back into the next chain step (§3.5): post-norm y for eagle3.1, pre-norm r2 for eagle3. */
  feedback(s: DraftStep): Vec {
    return this.cfg.normOutput ? s.y : s.r2;
  }

  /**
   * A chain of k drafts from the pending row (its taps, paired with `token`, the target's newest
   * emitted token) at position `pos` = cache.length (§3.7.2): step 1 from the fused taps, steps
   * 2..k from the feedback state and the previous draft. The chain rows are discarded afterwards:
   * the cache is returned as it was.
   */
  propose(cache: DraftCache, pendingTaps: Vec[], token: number, k: number, opts: { absorbed?: boolean } = {}): DraftStep[] {
    const base = cache.length;
    const steps: DraftStep[] = [];
    let h = this.fuse(pendingTaps);
    let tok = token;
    for (let i = 0; i < k; i++) {
      const s = this.step(cache, h, tok, base + i, opts);
      steps.push(s);
      h = this.feedback(s);
      tok = s.draft;
    }
    cache.truncate(base);
    return steps;
  }
}

/**
 * The draft fits the target (DRAFTERS.md §1.6): same hidden size and vocabulary, capture ids
 * one-based completed layers of the target (1..L). Throws naming the field and both values.
 */
export function checkDraftTarget(draft: ReferenceDraft, target: ReferenceModel): void {
  const d = draft.cfg, t = target.cfg;
  const p: string[] = [];
  if (d.hidden !== t.hidden) p.push(`hidden_size ${d.hidden} ≠ the target's ${t.hidden}`);
  if (d.vocab !== t.vocab) p.push(`vocab_size ${d.vocab} ≠ the target's ${t.vocab}`);
  const bad = d.layerIds.filter((id) => id < 1 || id > t.layers);
  if (bad.length) p.push(`eagle_config.eagle_aux_hidden_state_layer_ids ${JSON.stringify(d.layerIds)}: ${bad.join(", ")} outside the target's one-based layers 1..${t.layers}`);
  if (p.length) throw new Error(`draft does not fit the target:\n  - ${p.join("\n  - ")}`);
}

/** The draft cache built from one target pass: rows 0..T−2 from (taps[t], tokens[t+1]) (§3.7.1). */
export function committedCache(draft: ReferenceDraft, taps: Vec[][], tokens: number[]): DraftCache {
  const cache = new DraftCache();
  for (let t = 0; t + 1 < tokens.length; t++) cache.rows.push(draft.committedRow(taps[t]!, tokens[t + 1]!, t));
  return cache;
}

/**
 * After a prefill of `tokens`: the target's taps and logits at every position, its next token
 * (greedy, or `opts.next` to force one: a teacher-forced row, the text's own next token), and a
 * chain of k drafts from the pending row (§3.7.1–2).
 */
export function draftChain(target: ReferenceModel, draft: ReferenceDraft, tokens: number[], k: number, opts: { absorbed?: boolean; next?: number } = {}) {
  checkDraftTarget(draft, target);
  const { logits, taps } = target.forwardAll(tokens, { tapLayers: draft.cfg.layerIds });
  const next = opts.next ?? argmax(logits[tokens.length - 1]!);
  const cache = committedCache(draft, taps, tokens);
  const steps = draft.propose(cache, taps[tokens.length - 1]!, next, k, opts);
  return { taps, targetLogits: logits, next, cache, steps, drafts: steps.map((s) => s.draft) };
}

export interface VerifyPass {
  position: number; // position of the pass's first row (the token emitted before it)
  drafts: number[];
  accepted: number; // a: drafts equal to the target's greedy token at the previous row
  bonus: number; // the target's token after the accepted prefix
}

/**
 * Greedy speculative generation with the draft (§3.7, the reference's own loop; full recompute of
 * the target every pass): n tokens after `prompt`, k drafts per pass. Refill rule: after each
 * verify pass, commit the pending row and the accepted drafts' rows from TARGET taps; chain rows
 * and rejected positions are dropped. The ids equal target.greedy(prompt, n) whatever the draft
 * proposes. `oracle(context, k)` replaces the draft's proposals (tests use it to get accepted
 * drafts from a random-weight draft); the draft's chain still runs.
 */
export function speculateGreedy(
  target: ReferenceModel,
  draft: ReferenceDraft,
  prompt: number[],
  n: number,
  k: number,
  opts: { oracle?: (context: number[], k: number) => number[] } = {},
): { ids: number[]; passes: VerifyPass[]; cache: DraftCache; committed: number[] } {
  checkDraftTarget(draft, target);
  const ids = draft.cfg.layerIds;
  const first = target.forwardAll(prompt, { tapLayers: ids });
  let seq = [...prompt]; // tokens the target has processed
  let next = argmax(first.logits[seq.length - 1]!); // emitted, not yet processed
  let pending = first.taps[seq.length - 1]!;
  const cache = committedCache(draft, first.taps, seq);
  const out = [next];
  const passes: VerifyPass[] = [];
  while (out.length < n) {
    const m = seq.length; // position of `next`
    let drafts = draft.propose(cache, pending, next, k).map((s) => s.draft);
    if (opts.oracle) drafts = opts.oracle([...seq, next], k);
    const v = target.forwardAll([...seq, next, ...drafts], { tapLayers: ids });
    let a = 0;
    while (a < drafts.length && drafts[a] === argmax(v.logits[m + a]!)) a++;
    const bonus = argmax(v.logits[m + a]!);
    cache.rows.push(draft.committedRow(pending, next, m - 1)); // the pending row, now paired with `next`
    for (let i = 0; i < a; i++) cache.rows.push(draft.committedRow(v.taps[m + i]!, drafts[i]!, m + i));
    pending = v.taps[m + a]!;
    seq = [...seq, next, ...drafts.slice(0, a)];
    next = bonus;
    out.push(...drafts.slice(0, a), bonus);
    passes.push({ position: m, drafts, accepted: a, bonus });
  }
  return { ids: out.slice(0, n), passes, cache, committed: seq };
}
