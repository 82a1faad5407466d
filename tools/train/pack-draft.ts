// Packs the demo's exported EAGLE-3 draft into the asset k3 ships beside the demo model (dev-only;
// docs/TEST-MODELS.md "Demo draft"):
//   assets/demo/k3-demo-draft.pack.zst  the draft folder (config.json + model.safetensors) in the demo
//                                       pack format (src/cli/demo-pack.ts: unpackDemo unpacks it);
//   assets/demo/draft.json              a loader-independent description: files and hashes, the
//                                       target it belongs to, its config, how it was trained, what
//                                       tools/train/drafteval.py measured, and PyTorch's float64
//                                       chain logits at three rows (test/demo-draft.test.ts);
//   assets/demo/draft-eval/*.json       drafteval.py's reports (token ids included), for the
//                                       engine's own measurement on the same text.
//
//   bun tools/train/pack-draft.ts [OUT=tools/train/out]
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { packDemo, sha256Hex } from "../../src/cli/demo-pack.ts";
import { readSafetensors } from "./export.ts";

const ROOT = resolve(import.meta.dir, "../..");
const ASSETS = join(ROOT, "assets", "demo");

function brief(report: Record<string, unknown>): Record<string, unknown> {
  const { texts: _t, accepted_per_position: _a, ...rest } = report;
  return rest;
}

if (import.meta.main) {
  const out = resolve(process.argv[2] ?? join(import.meta.dir, "out"));
  const dir = join(out, "draft", "model");
  const packed = packDemo(dir);
  writeFileSync(join(ASSETS, "k3-demo-draft.pack.zst"), packed);
  const files = readdirSync(dir).sort().map((name) => {
    const b = new Uint8Array(readFileSync(join(dir, name)));
    return { name, bytes: b.length, sha256: sha256Hex(b) };
  });
  const config = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
  const emb = readSafetensors(join(dir, "model.safetensors")).get("embed_tokens.weight")!.data;
  const train = JSON.parse(readFileSync(join(out, "draft", "train.json"), "utf8"));
  const check = JSON.parse(readFileSync(join(out, "draft", "check-torch.json"), "utf8")) as { tokens: number[]; rows: Array<{ t: number; logits: number[][]; drafts: number[] }> };
  mkdirSync(join(ASSETS, "draft-eval"), { recursive: true });
  const measured: Record<string, unknown> = {};
  for (const f of readdirSync(join(out, "drafteval")).filter((f) => f.endsWith(".json")).sort()) {
    copyFileSync(join(out, "drafteval", f), join(ASSETS, "draft-eval", f));
    measured[f.replace(/\.json$/, "")] = brief(JSON.parse(readFileSync(join(out, "drafteval", f), "utf8")));
  }
  const last = train.log.at(-1);
  const description = {
    comment: "The demo's EAGLE-3 draft (docs/TEST-MODELS.md 'Demo draft', docs/DRAFT.md). Written by tools/train/pack-draft.ts; checked by test/demo-draft.test.ts.",
    format: "EAGLE-3 draft in the released format A (DRAFTERS.md §1; docs/DRAFT.md): config.json + model.safetensors, every tensor BF16",
    pack: { file: "k3-demo-draft.pack.zst", bytes: packed.length, sha256: sha256Hex(packed), unpack: "src/cli/demo-pack.ts unpackDemo(bytes, dir) writes the files below into dir" },
    files,
    target: {
      pack: "k3-demo.pack.zst",
      pack_sha256: sha256Hex(new Uint8Array(readFileSync(join(ASSETS, "k3-demo.pack.zst")))),
      embedding: "embed_tokens.weight is byte-identical to the target's language_model.model.embed_tokens.weight (shared, frozen in training)",
      embedding_sha256: sha256Hex(emb),
    },
    config: {
      variant: config.fc_norm && config.norm_output ? "eagle3.1" : "eagle3",
      capture_layer_ids_one_based: config.eagle_config.eagle_aux_hidden_state_layer_ids,
      hidden: config.hidden_size,
      vocab: config.vocab_size,
      heads: config.num_attention_heads,
      q_kv_rank: [config.q_lora_rank, config.kv_lora_rank],
      nope_rope_v: [config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim],
      intermediate: config.intermediate_size,
      rope_scaling: config.rope_scaling ?? "plain",
    },
    training: {
      tool: "tools/train/train_draft.py",
      steps: train.steps,
      tokens: last?.tokens,
      seconds: train.train_sec,
      trained_parameters: train.trained_params,
      ttt_steps: train.args.ttt,
      loss_decay: train.args.decay,
      heldout_teacher_forced_agreement_per_step: train.rounded.val_acc,
    },
    measured,
    check: {
      comment: "PyTorch float64 (draft_model.py on the exported files) chain on held-out tokens: row t = pending row at position t with the text's token x_{t+1}, then the draft's own greedy drafts; the first 32 logits of each step",
      tokens: check.tokens,
      rows: check.rows.map((r) => ({ t: r.t, drafts: r.drafts, logits_head: r.logits.map((l) => l.slice(0, 32)) })),
    },
  };
  writeFileSync(join(ASSETS, "draft.json"), JSON.stringify(description, null, 1) + "\n");
  process.stderr.write(`${dir} → ${join(ASSETS, "k3-demo-draft.pack.zst")} (${(packed.length / 1e6).toFixed(2)} MB), draft.json, draft-eval/\n`);
}
