#!/bin/sh
# Dev-only setup of the training tool (docs/TEST-MODELS.md "The trained demo"): PyTorch from
# Debian for /usr/bin/python3 (not the pyenv python3 that may come first on PATH), and OpenBLAS:
# without it Debian's torch links the reference BLAS (measured 5x slower f32 matmuls here).
# The demo's EAGLE-3 draft (retrain-draft.sh, drafteval.py) uses the same. Nothing in the
# product, its build or `npm test` needs this.
set -eu
if ! /usr/bin/python3 -c "import torch" 2>/dev/null || ! dpkg -s libopenblas0-pthread >/dev/null 2>&1; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch libopenblas0-pthread
fi
/usr/bin/python3 -c "import torch; print('torch', torch.__version__)"
