// The traps of MODEL.md §7, one switch each. ReferenceModel.open(dir, { trap }) builds the WRONG
// model a trap describes, so tests can prove that an engine with that trap would fail its
// comparison against the true reference. See docs/REFERENCE.md for the exact wrong math of each.

export const TRAP_DESCRIPTIONS = {
  "alog-per-channel": "§7.1 KDA gate indexes A_log by channel d instead of head h",
  "router-bias-in-weights": "§7.2 combine weights from sigmoid+bias instead of the unbiased sigmoid",
  "mla-rope": "§7.3 rotary embedding (NeoX halves, θ=10000) applied to q_r and k_r",
  "mla-drop-rope-dims": "§7.3 the 64 q_r·k_r dims dropped from the score",
  "mla-scale-128": "§7.3 score scale qk_nope_head_dim^-0.5 instead of (nope+rope)^-0.5",
  "mla-lora-eps-1e-5": "§7.4 q_a/kv_a layernorms use rms_norm_eps instead of 1e-6",
  "kda-read-before-update": "§7.5 o = Sᵀq read from the state before this token's decay+update",
  "kda-l2-mean": "§7.5 q/k normalised by sqrt(mean(x²)+1e-6) instead of sqrt(Σx²+1e-6)",
  "kda-no-conv-history": "§7.5 conv history reset every token (simulated in full recompute)",
  "kda-gate-before-norm": "§7.5 output gate applied before the o_norm RMSNorm",
  "mxfp4-nibble-swap": "§7.6 element 2j taken from the high nibble",
  "mxfp4-nan-not-zeroed": "§7.6 E8M0 scale 255 read as 2^128 instead of zeroing the group",
  "attnres-normed-sources": "§7.7 AttnRes mixes the RMS-normed sources instead of the raw ones",
  "attnres-no-clear": "§7.7 P kept (not cleared) after it is snapshotted at a block boundary",
  "attnres-count-sublayers": "§7.7 block boundary when sublayer index (2ℓ attn, 2ℓ+1 mlp) % block == 0",
  "attnres-skip-final": "§7.7 final model-level AttnRes mix skipped (h = P)",
  "layers-zero-based": "§7.8 kda_layers/full_attn_layers read as zero-based (MLA iff i ∈ full_attn_layers)",
  "expert-norm-per-expert": "§7.9 routed_expert_norm applied to each expert output, not the aggregate",
  "shared-on-latent": "§7.9 shared experts read the latent z (zero-padded/truncated to E) instead of x",
  "shared-weighted": "§7.9 shared output multiplied by the top-1 routed combine weight",
} as const;

export type TrapName = keyof typeof TRAP_DESCRIPTIONS;

/**
 * Traps whose wrong model cannot even be built from a valid checkpoint: ReferenceModel.open throws
 * (naming the first layer whose tensors do not fit), exactly as an engine with the trap would fail
 * at load. Reading the one-based lists as zero-based always moves some layer to the other kind
 * (a proper subset of 0..L-1 is never equal to itself shifted by one), whose tensors are absent.
 */
export const LOUD_TRAPS: TrapName[] = ["layers-zero-based"];

/** Every trap whose wrong model runs and gives different logits (all but LOUD_TRAPS). */
export const ALL_TRAPS: TrapName[] = (Object.keys(TRAP_DESCRIPTIONS) as TrapName[]).filter((t) => !LOUD_TRAPS.includes(t));
