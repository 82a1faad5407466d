// What the model allocates in C memory, declared once: the forward pass's scratch buffers and one
// session's state. The model allocates from these tables and the planner (src/memory/plan.ts)
// sums them, so the plan's "scratch", "KDA state" and "MLA cache" figures are what the model
// really takes (test/plan-allocations.test.ts checks it for every preset and chunk size).
//
// Every buffer holds 4-byte elements (f32, or i32 for router ids). A per-row buffer of width n is
// [rows][n]: row t starts at t·n. The shape is a parameter, not a constant of the model:
//   rows      tokens in one forward pass (the prefill chunk; 1 for decode). Rows are independent
//             in every kernel (k3.h), so rows may come from different sessions;
//   logitRows rows whose final mix, norm and lm_head are computed (a session's last row; every
//             row of a speculative verify segment: 1 + its drafts);
//   context   positions the MLA cache holds;
//   drafts    the most drafted positions one verify pass checks (0: speculation off, nothing
//             allocated for it). A verify pass keeps the recurrence inputs of its drafted positions
//             per KDA layer and runs their recurrence on one scratch copy of a layer's state, so
//             rejected drafts are rolled back by not re-applying them (src/model/forward.ts);
//   verifySlots  sessions whose drafted positions' inputs are kept at once (src/model/rollback.ts:
//             a slot each, held until the session has kept its accepted drafts).
import type { DraftConfig } from "../checkpoint/draft-config.ts";
import type { ModelConfig } from "../checkpoint/types.ts";
import { loadKernels } from "../kernels.ts";
import { allocationBytes, viewOf, type CBuf, type CBuffers } from "./cmem.ts";

export interface ForwardShape {
  rows: number;
  logitRows: number;
  context: number;
  drafts?: number;
  /** Sessions whose verify records are kept at once (one slot each; 0 without drafts). */
  verifySlots?: number;
  /** Layers whose output (the prefix-sum stream) every row captures for a draft model (0: none). */
  taps?: number;
}

/** Drafts per verify pass the planner and the engine assume unless told (`--speculate auto`). */
export const DEFAULT_MAX_DRAFTS = 8;

/** Drafts per pass `--speculate auto` has room for: a verify pass (1 + drafts rows) fits a chunk. */
export const autoDrafts = (chunk: number): number => Math.max(0, Math.min(DEFAULT_MAX_DRAFTS, chunk - 1));

/**
 * The shape of a model's passes: a prefill chunk plus one decode row for each other session
 * (a newcomer's chunk rides with the running streams' decode steps: src/batch/scheduler.ts); a
 * logit row per session, and with speculation every row of every session's verify segment
 * (1 + drafts each, at most the pass's rows: several sessions' segments share a batched step),
 * and a rollback slot per session. One session without speculation: `chunk` rows, one logit row.
 */
export function passShape(chunk: number, parallel: number, context: number, drafts = 0, taps = 0): ForwardShape {
  const rows = chunk + parallel - 1;
  const logitRows = drafts > 0 ? Math.max(parallel, Math.min(rows, parallel * (1 + drafts))) : parallel;
  return { rows, logitRows, context, drafts, verifySlots: drafts > 0 ? parallel : 0, taps };
}

type Elements = (c: ModelConfig, s: ForwardShape) => number;
/**
 * Parts of a layer whose scratch is never live at the same time: a layer runs one attention
 * (KDA or MLA) and then one FFN (dense or MoE), each reading xn and leaving its result in `a` or
 * `m` (buffers of no phase), so the four share one region (PHASE_REGION): each phase's buffers lie
 * end to end from its start. Only what a phase writes and reads inside itself belongs to it (the
 * router stays apart: the decode lookahead runs it between layers; so do the verify records,
 * which outlive the pass). Without the sharing the phases' scratch is ~2.3× larger (the slice
 * model: 1.34 against 0.59 MB per row), which the planner would take from pinned trunk and expert
 * slots, or from the prefill chunk (docs/BENCH-KERNELS.md, "Streamed prefill").
 */
export type Phase = "kda" | "mla" | "dense" | "moe";
interface Spec {
  elements: Elements;
  i32?: true;
  phase?: Phase;
}

const kdaWidth = (c: ModelConfig) => c.kdaHeads * c.kdaHeadDim;
/** AttnRes block snapshots a pass can hold (the running sum P is the extra source). */
export const bankSlots = (c: ModelConfig) => Math.ceil(c.numLayers / c.attnResBlock);
const perRow = (n: (c: ModelConfig) => number, phase?: Phase): Spec => ({ elements: (c, s) => s.rows * n(c), phase });
const perLogitRow = (n: (c: ModelConfig) => number): Spec => ({ elements: (c, s) => s.logitRows * n(c) });
const kdaLayerCount = (c: ModelConfig) => c.layerKinds.filter((k) => k === "kda").length;
/** Speculation only: n elements when the shape has drafts, else nothing. */
const ifDrafts = (n: (c: ModelConfig, drafts: number) => number): Spec => ({ elements: (c, s) => ((s.drafts ?? 0) > 0 ? n(c, s.drafts!) : 0) });
/**
 * Floats one drafted position keeps per KDA layer: the conv inputs (raw q, k, v: the conv history
 * is the last width − 1 of them) and the recurrence inputs (k̂, v̂ after conv and norm, the decay
 * gate g, β): [q | k | v | k̂ | v̂ | g] of P each, then β of H.
 */
export const draftInputWidth = (c: ModelConfig) => 6 * kdaWidth(c) + c.kdaHeads;

/** The forward pass's scratch (src/model/forward.ts), in allocation order. */
export const FORWARD_BUFFERS = {
  // residual stream and AttnRes
  P: perRow((c) => c.hidden), // running sum of the current block
  bank: perRow((c) => bankSlots(c) * c.hidden), // [bankSlots][rows][E] block snapshots
  h: perRow((c) => c.hidden), // AttnRes mix (layer input)
  xn: perRow((c) => c.hidden), // normed h
  a: perRow((c) => c.hidden), // attention output
  m: perRow((c) => c.hidden), // FFN output
  // KDA
  kda_q: perRow(kdaWidth, "kda"),
  kda_k: perRow(kdaWidth, "kda"),
  kda_v: perRow(kdaWidth, "kda"),
  kda_g: perRow(kdaWidth, "kda"), // decay gate
  kda_gp: perRow(kdaWidth, "kda"), // output gate
  kda_o: perRow(kdaWidth, "kda"),
  kda_fa: perRow((c) => c.kdaHeadDim, "kda"), // f_a projection
  kda_beta: perRow((c) => c.kdaHeads, "kda"),
  // MLA
  mla_qa: perRow((c) => c.qLoraRank, "mla"),
  mla_q: perRow((c) => c.mlaHeads * (c.qkNope + c.qkRope), "mla"),
  mla_c: perRow((c) => c.kvLoraRank + c.qkRope, "mla"), // [c_kv | k_rope] before the norm
  mla_o: perRow((c) => c.mlaHeads * c.vHead, "mla"),
  mla_gate: perRow((c) => c.mlaHeads * c.vHead, "mla"),
  mla_scratch: { elements: (c, s) => Number(loadKernels().k3_mla_scratch_floats(c.kvLoraRank, s.context)), phase: "mla" },
  // dense FFN (layers before first_k_dense_replace; none when there are none)
  dense_g: perRow((c) => (c.firstKDense > 0 ? c.denseInter : 0), "dense"),
  dense_u: perRow((c) => (c.firstKDense > 0 ? c.denseInter : 0), "dense"),
  // shared experts
  sh_g: perRow((c) => c.numSharedExperts * c.moeInter, "moe"),
  sh_u: perRow((c) => c.numSharedExperts * c.moeInter, "moe"),
  sh_d: perRow((c) => c.hidden, "moe"),
  // router
  router_logits: perRow((c) => c.numExperts),
  router_idx: { ...perRow((c) => c.topK), i32: true },
  router_w: perRow((c) => c.topK),
  // routed experts (latent space): one expert runs on at most `rows` rows at a time
  z: perRow((c) => c.latent, "moe"), // routed_expert_down_proj · x
  xe: perRow((c) => c.latent, "moe"), // the rows one expert serves, gathered
  ge: perRow((c) => c.moeInter, "moe"),
  ue: perRow((c) => c.moeInter, "moe"),
  ye: perRow((c) => c.latent, "moe"),
  yall: perRow((c) => c.topK * c.latent, "moe"), // [rows][topK][latent]: each expert's output by rank
  y: perRow((c) => c.latent, "moe"), // Σ_rank w·y_e
  // final mix, norm, lm_head (logit rows only)
  final_bank: perLogitRow((c) => bankSlots(c) * c.hidden), // [bankSlots][logitRows][E]: the logit rows' snapshots, gathered
  final_h: perLogitRow((c) => c.hidden),
  final_x: perLogitRow((c) => c.hidden),
  logits: perLogitRow((c) => c.vocab),
  // speculative verify pass (drafts > 0): one KDA layer's state and conv history as scratch, and
  // per verify slot and KDA layer the conv and recurrence inputs of every drafted position:
  // [verifySlots][kdaLayers][drafts][6P + H] (src/model/rollback.ts)
  spec_S: ifDrafts((c) => c.kdaHeads * c.kdaHeadDim * c.kdaHeadDim),
  spec_conv: ifDrafts((c) => 3 * (c.convKernel - 1) * kdaWidth(c)), // q, k, v histories
  spec_inputs: { elements: (c, s) => (s.verifySlots ?? 0) * kdaLayerCount(c) * (s.drafts ?? 0) * draftInputWidth(c) },
  // a draft model's capture (taps > 0): the prefix-sum stream P after each tapped layer, for every
  // row of the pass: [taps][rows][E] (src/model/forward.ts; the draft reads it after the pass)
  taps: { elements: (c, s) => (s.taps ?? 0) * s.rows * c.hidden },
} satisfies Record<string, Spec>;

export type ForwardBufferName = keyof typeof FORWARD_BUFFERS;
export type ForwardBuffers = { readonly [K in ForwardBufferName]: CBuf };

/** Bytes of one buffer as the model asks for it. */
const specBytes = (spec: Spec, cfg: ModelConfig, shape: ForwardShape) => 4 * spec.elements(cfg, shape);

/** Where each phase's buffers lie in the shared region (byte offsets from its start), and the
 *  region's size: the largest phase. Deterministic, so the planner's sum is what the model takes. */
function phaseLayout(cfg: ModelConfig, shape: ForwardShape): { offsets: Map<ForwardBufferName, number>; regionBytes: number } {
  const offsets = new Map<ForwardBufferName, number>();
  const end = new Map<Phase, number>();
  for (const [name, spec] of Object.entries(FORWARD_BUFFERS) as [ForwardBufferName, Spec][]) {
    if (!spec.phase) continue;
    const at = end.get(spec.phase) ?? 0;
    offsets.set(name, at);
    end.set(spec.phase, at + allocationBytes(specBytes(spec, cfg, shape)));
  }
  return { offsets, regionBytes: Math.max(0, ...end.values()) };
}

/** Name of the shared region in allocation messages (and the planner's tests). */
export const PHASE_REGION = "phase scratch (KDA | MLA | dense FFN | MoE)";

export function allocForwardBuffers(mem: CBuffers, cfg: ModelConfig, shape: ForwardShape): ForwardBuffers {
  const out: Partial<Record<ForwardBufferName, CBuf>> = {};
  const { offsets, regionBytes } = phaseLayout(cfg, shape);
  const region = mem.alloc(regionBytes, PHASE_REGION);
  for (const [name, spec] of Object.entries(FORWARD_BUFFERS) as [ForwardBufferName, Spec][]) {
    const bytes = specBytes(spec, cfg, shape);
    out[name] = spec.phase ? viewOf(region, offsets.get(name)!, allocationBytes(bytes)) : mem.alloc(bytes, name);
  }
  return out as ForwardBuffers;
}

/** Bytes allocForwardBuffers takes (allocation granularity included). */
export function forwardBufferBytes(cfg: ModelConfig, shape: ForwardShape): number {
  let total = allocationBytes(phaseLayout(cfg, shape).regionBytes);
  for (const spec of Object.values(FORWARD_BUFFERS) as Spec[]) if (!spec.phase) total += allocationBytes(specBytes(spec, cfg, shape));
  return total;
}

// ---- per-session state (src/model/state.ts; MODEL.md §6) ----

/** One KDA layer: S [H][D][D] (key × value) and the conv history of q, k, v: [width − 1][P] each. */
export const KDA_STATE = {
  S: (c: ModelConfig) => c.kdaHeads * c.kdaHeadDim * c.kdaHeadDim,
  convQ: (c: ModelConfig) => (c.convKernel - 1) * kdaWidth(c),
  convK: (c: ModelConfig) => (c.convKernel - 1) * kdaWidth(c),
  convV: (c: ModelConfig) => (c.convKernel - 1) * kdaWidth(c),
} as const;

/** One MLA layer's latent cache: [context][kv_lora_rank + qk_rope] rows of [RMSNorm(c_kv) | k_rope]. */
export const mlaCacheElements = (c: ModelConfig, context: number) => context * (c.kvLoraRank + c.qkRope);

/** Bytes of one KDA layer's state as allocated. */
export function kdaStateBytes(cfg: ModelConfig): number {
  return Object.values(KDA_STATE).reduce((a, n) => a + allocationBytes(4 * n(cfg)), 0);
}

/** Bytes of one MLA layer's cache as allocated. */
export function mlaCacheBytes(cfg: ModelConfig, context: number): number {
  return allocationBytes(4 * mlaCacheElements(cfg, context));
}

// ---- the draft model (src/model/draft.ts, draft-state.ts): its scratch and one session's draft state ----

/** The draft's scratch sizes: refill rows per batch (committed rows are built this many at a time),
 *  one query row (the chain is sequential), the context its attention may span. */
export interface DraftShape {
  refillRows: number;
  context: number;
}

/** Committed rows are built in batches of this many (the matmuls' efficient range; bounds the scratch). */
export const DRAFT_REFILL_ROWS = 32;
/** Positions a session's taps ring holds at least (draft-state.ts): an idle draft commits its rows
 *  once per this many tokens. */
export const DRAFT_WINDOW = 64;

type Size = (d: DraftConfig, s: DraftShape) => number;
const perRefill = (n: (d: DraftConfig) => number): Size => (d, s) => s.refillRows * n(d);
const one = (n: (d: DraftConfig) => number): Size => (d) => n(d);
const taps = (d: DraftConfig) => d.captureLayers.length;

/** The draft's scratch (src/model/draft.ts), in allocation order. */
export const DRAFT_BUFFERS = {
  fcin: perRefill((d) => taps(d) * d.hidden), // [rows][taps·E]: the (normed) taps, fc's input
  h: perRefill((d) => d.hidden), // fc's output (the row's hidden)
  emb: perRefill((d) => d.hidden), // the rows' token embeddings
  u: perRefill((d) => 2 * d.hidden), // [RMSNorm(e) | RMSNorm(h)]
  ckv: perRefill((d) => d.kvLoraRank + d.qkRope), // kv_a's output, before the norm
  hq: one((d) => d.hidden), // the query row's residual stream (h, r1, r2; the chain's feedback)
  qa: one((d) => d.qLoraRank),
  q: one((d) => d.heads * (d.qkNope + d.qkRope)),
  att: one((d) => d.heads * d.vHead),
  o: one((d) => d.hidden),
  z: one((d) => d.hidden),
  g: one((d) => d.intermediate),
  up: one((d) => d.intermediate),
  mlp: one((d) => d.hidden),
  y: one((d) => d.hidden),
  logits: one((d) => d.vocab),
  mla_scratch: (d, s) => Number(loadKernels().k3_mla_scratch_floats(d.kvLoraRank, s.context)), // the target's MLA kernel, one slot per pool thread
} satisfies Record<string, Size>;

export type DraftBufferName = keyof typeof DRAFT_BUFFERS;
export type DraftBuffers = { readonly [K in DraftBufferName]: CBuf };

export function allocDraftBuffers(mem: CBuffers, d: DraftConfig, s: DraftShape): DraftBuffers {
  const out: Partial<Record<DraftBufferName, CBuf>> = {};
  for (const [name, size] of Object.entries(DRAFT_BUFFERS) as [DraftBufferName, Size][]) out[name] = mem.floats(size(d, s), `draft ${name}`);
  return out as DraftBuffers;
}

/** Bytes allocDraftBuffers takes. */
export function draftScratchBytes(d: DraftConfig, s: DraftShape): number {
  return (Object.values(DRAFT_BUFFERS) as Size[]).reduce((a, size) => a + allocationBytes(4 * size(d, s)), 0);
}

/** Floats of one cache row: [c (R) | k_r (dr)]. */
export const draftRowFloats = (d: DraftConfig) => d.kvLoraRank + d.qkRope;

/** Positions of a session's taps ring for verify passes of up to `drafts` drafts. */
export const draftWindow = (drafts: number) => Math.max(DRAFT_WINDOW, 2 * (1 + drafts));

/** Bytes one session's draft state takes: the cache for `context` positions and the taps ring. */
export function draftStateBytes(d: DraftConfig, context: number, drafts: number): number {
  return allocationBytes(4 * context * draftRowFloats(d)) + allocationBytes(4 * taps(d) * draftWindow(drafts) * d.hidden);
}
