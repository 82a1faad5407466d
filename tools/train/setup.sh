#!/bin/sh
# Dev-only setup of the training tool (tools/train/README in docs/TEST-MODELS.md): PyTorch from
# Debian for /usr/bin/python3 (not the pyenv python3 that may come first on PATH). Nothing in the
# product, its build or `npm test` needs this.
set -eu
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "python3-torch already installed: $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
  exit 0
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch
/usr/bin/python3 -c "import torch; print('torch', torch.__version__)"
