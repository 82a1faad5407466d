# Held-out loss and copying of training checkpoints, all measured the same way (dev-only; no
# training): the unrounded model in f32 (no autocast), held-out loss on all 742 windows of 128
# tokens, and train.py's copy_eval on 256 held-out copy windows (copymix.py: spans 8..64 tokens,
# one repeat). The numbers of docs/TEST-MODELS.md "Copy windows: a negative result" come from here.
#
#   /usr/bin/python3 tools/train/copyeval.py CKPT.pt [CKPT.pt ...]   (paths relative to tools/train/out)
#
# ~1.5 min and ~0.5 GB per checkpoint on one core of this box under load.
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from copymix import heldout_copy_windows  # noqa: E402
from model import K3Tiny  # noqa: E402
from train import HERE, copy_eval, evaluate, load_tokens, set_fake_quant  # noqa: E402


def main():
    torch.set_num_threads(1)
    out = os.path.join(HERE, "out")
    with open(os.path.join(HERE, "model-config.json")) as f:
        cfg = json.load(f)
    val = load_tokens(os.path.join(out, "corpus", "val.u16"))
    windows = heldout_copy_windows(val, 128, 256, 8, 64)
    for name in sys.argv[1:]:
        state = torch.load(os.path.join(out, name), map_location="cpu")
        model = K3Tiny(cfg)
        model.load_state_dict(state["model"])
        model.eval()
        set_fake_quant(model, False)
        loss = evaluate(model, val, 128)
        cp = copy_eval(model, *windows)
        print(json.dumps({"ckpt": name, "step": state["step"], "val_loss": round(loss, 4), "ppl": round(math.exp(loss), 1), "copy": cp}), flush=True)


if __name__ == "__main__":
    main()
