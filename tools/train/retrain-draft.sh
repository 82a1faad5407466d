#!/bin/sh
# Retrains the demo's EAGLE-3 draft against the shipped demo model and replaces its asset (dev-only;
# docs/TEST-MODELS.md "Demo draft"). Arguments go to train_draft.py (e.g. --steps 800 --fresh).
# Resumable: rerun after an interruption and train_draft.py continues from tools/train/out/draft/ckpt.pt.
# ~30 min of training and ~8 min of measurement on this 2-core box (load 2–7); peak RSS ~2 GB.
set -eu
cd "$(dirname "$0")/../.."
BUN=node_modules/.bin/bun
sh tools/train/setup.sh
$BUN tools/train/corpus.ts                          # Brown → tools/train/out/corpus (held-out split)
$BUN tools/train/unpack.ts                          # the shipped demo → out/demo-target (the target)
$BUN tools/train/draft-export.ts config             # draft-config.json → out/draft/config.json
/usr/bin/python3 tools/train/train_draft.py "$@"    # → out/draft/{ckpt.pt,weights.safetensors,train.json}
$BUN tools/train/draft-export.ts                    # → out/draft/model (the released format)
/usr/bin/python3 tools/train/draftcheck.py          # PyTorch float64 chain on the exported files
$BUN tools/train/draft-check.ts                     # … equals tools/reference/draft.ts
/usr/bin/python3 tools/train/drafteval.py           # → out/drafteval/heldout-{greedy,sampled}.json
$BUN tools/train/pack-draft.ts                      # → assets/demo/{k3-demo-draft.pack.zst,draft.json,draft-eval/}
