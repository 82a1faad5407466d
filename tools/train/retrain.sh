#!/bin/sh
# Retrains the demo model and replaces the shipped asset (dev-only; docs/TEST-MODELS.md "The
# trained demo"). Arguments go to train.py (e.g. --steps 600, --fresh). Resumable: rerun after an
# interruption and train.py continues from tools/train/out/ckpt.pt. Peak RSS ~1.5 GB (no bigmem
# lock needed); ~45 min on this 2-core box while others were busy, far less on a quiet one.
set -eu
cd "$(dirname "$0")/../.."
BUN=node_modules/.bin/bun
sh tools/train/setup.sh
$BUN tools/train/corpus.ts                 # Brown → tools/train/out/corpus, tokenizer
/usr/bin/python3 tools/train/train.py "$@"  # → out/ckpt.pt, out/export/{weights.safetensors,reference.json,report.json}
$BUN tools/train/export.ts                 # → out/model (release layout)
npm run build:kernels
$BUN tools/train/check.ts                  # tools/reference and k3 vs PyTorch's float64 logits
$BUN tools/train/pack.ts                   # → assets/demo/k3-demo.pack.zst, assets/demo/reference.json
$BUN tools/train/measure.ts                # → out/measure.json (copying, routing, samples)
