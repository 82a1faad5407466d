# The exported demo draft in PyTorch float64 (draft_model.py, loaded from the release-format files)
# on a held-out window: the chain's logits at a few rows, with the draft's own greedy tokens, for
# tools/train/draft-check.ts to compare with the float64 reference (tools/reference/draft.ts), an
# independent reading of the same spec. Dev-only.
#
#   /usr/bin/python3 tools/train/draftcheck.py [OUT=tools/train/out]  → OUT/draft/check-torch.json
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from draft_model import load_draft  # noqa: E402
from target import forward_taps, load_demo_target  # noqa: E402
from train import load_tokens  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS, STEPS, LEN = (0, 7, 21), 4, 24


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "out")
    target = load_demo_target(out)
    draft = load_draft(os.path.join(out, "draft", "model"))
    ids = draft.c["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    x = load_tokens(os.path.join(out, "corpus", "val.u16"))[1000 : 1000 + LEN].unsqueeze(0)
    with torch.no_grad():
        _, taps, _ = forward_taps(target, x, ids, recurrent=True)
        steps = list(draft.chain(taps, x, STEPS, lambda i, logits: logits.argmax(-1)))
    rows = [{"t": t, "logits": [s[0, t].tolist() for s in steps], "drafts": [int(s[0, t].argmax()) for s in steps]} for t in ROWS]
    with open(os.path.join(out, "draft", "check-torch.json"), "w") as f:
        json.dump({"tokens": x[0].tolist(), "rows": rows}, f)
    print(f"→ {out}/draft/check-torch.json", flush=True)


if __name__ == "__main__":
    main()
