# How well the demo's EAGLE-3 draft predicts the demo target, measured in PyTorch on held-out text
# (dev-only; docs/TEST-MODELS.md "Demo draft", docs/DRAFT.md). Writes one JSON per text set, with
# the token ids, so the engine's own measurement can run on the same text and settings:
#
#   heldout-greedy: windows of held-out Brown text. At every row t the context is the text
#     x_0..x_{t+1} (x_{t+1} is the newest committed token, the one the target "emitted"), the draft's
#     cache holds rows 0..t−1 from the target's taps of the text, and the draft proposes a chain of
#     k = 5 greedy drafts from the pending row (taps of t, token x_{t+1}). The target verifies them
#     greedily: d_i is accepted while it equals the target's argmax after x_0..x_{t+1}, d_1..d_{i−1}
#     (one target pass over that sequence). first_draft_agreement = P(d_1 = the target's argmax at
#     t+1); tokens_per_pass[k] = mean of 1 + min(accepted, k) (the bonus token counted).
#   heldout-sampled: the first --prompt tokens of held-out windows, continued by the TARGET at
#     temperature 0.8 under the issue-21 sampling contract (the draw of the token at absolute position
#     m is uniformAt(seed, m): SplitMix64, the inverse CDF walked in ascending id order; seed = window
#     index + 1), so the text is what k3 would sample. Rows whose committed token is sampled:
#       exact_match: greedy drafts, accepted while equal to the text (with the contract, the target's
#         draw along an accepted prefix IS the text's next token);
#       exact_match_coupled: the draft draws its own tokens from softmax(draft logits / 0.8) with the
#         SAME uniformAt(seed, position) as the target (a drafter the contract allows: it is what a
#         draft that matched the target exactly would pick);
#       min_p_over_q: the speculative-sampling rule: d_i ~ q_i (seeded), accepted with probability
#         min(1, p_i(d_i)/q_i(d_i)), p and q at temperature 0.8 (distribution-exact, not seed-exact;
#         one target pass over the sampled chain per row); first_step_expected = mean Σ min(p_1, q_1).
#
#   /usr/bin/python3 tools/train/drafteval.py [--out tools/train/out] [--draft DIR] [--windows N]
import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from draft_model import load_draft  # noqa: E402
from target import forward_taps, load_demo_target  # noqa: E402
from train import load_tokens  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def uniform_at(seed, position):
    """The issue-21 contract's draw for `position` under `seed` (src/text/sampling.ts uniformAt)."""
    start = mix64(seed & M64)
    return (mix64((start + (position + 1) * GOLDEN) & M64) >> 11) / 2.0**53


def draw(logits, temperature, u):
    """The contract's temperature draw: w = exp((l − max)/T) in float64, the first id in ascending
    order whose running sum exceeds u·Σw (the last kept id if rounding leaves none)."""
    w = torch.exp((logits.double() - logits.double().max()) / temperature)
    c = torch.cumsum(w, 0)
    i = int(torch.searchsorted(c, u * c[-1], right=True))
    return min(i, logits.numel() - 1)


def verify_greedy(target, x, t_rows, drafts, layer_ids):
    """For each row t: target argmax after x_0..x_{t+1}, d_1..d_{j} for j = 0..k−1 (one pass per row,
    rows batched and right-padded: the model is causal). x [T], drafts [R, k] → argmax [R, k]."""
    k = drafts.shape[1]
    T = x.numel()
    seqs = torch.zeros(len(t_rows), T + k, dtype=torch.long)
    for r, t in enumerate(t_rows):
        seqs[r, : t + 2] = x[: t + 2]
        seqs[r, t + 2 : t + 2 + k] = drafts[r]
    out = []
    for i0 in range(0, len(t_rows), 32):
        logits, _, _ = forward_taps(target, seqs[i0 : i0 + 32], layer_ids)
        idx = torch.tensor([t + 1 for t in t_rows[i0 : i0 + 32]]).unsqueeze(1) + torch.arange(k)
        out.append(torch.gather(logits, 1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1])))
    return torch.cat(out)  # [R, k, V] target logits predicting d_1..d_k


def accepted(match):
    """match [R, k] bool → leading run length per row."""
    return torch.cumprod(match.long(), 1).sum(1)


def summary(acc, k):
    """accepted counts (chain of k drafts) → tokens per verify pass for budgets 1..k."""
    return {str(j): round(float((1 + acc.clamp(max=j)).double().mean()), 4) for j in range(1, k + 1)}


@torch.no_grad()
def eval_greedy(target, draft, val, args):
    ids = draft.c["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    k, T = args.k, args.seq
    first, acc_all, texts = [], [], []
    for w in range(args.windows):
        x = val[w * T : (w + 1) * T]
        texts.append(x.tolist())
        tlogits, taps, _ = forward_taps(target, x.unsqueeze(0), ids)
        steps = list(draft.chain(taps, x.unsqueeze(0), k, lambda i, lg: lg.argmax(-1)))
        d = torch.stack([s[0].argmax(-1) for s in steps], 1)  # [T−1, k]
        rows = list(range(T - 1))
        first.append(d[:, 0] == tlogits[0, 1:].argmax(-1))
        v = verify_greedy(target, x, rows, d[rows], ids).argmax(-1)
        acc_all.append(accepted(d[rows] == v))
    first, acc = torch.cat(first), torch.cat(acc_all)
    return {
        "text_set": "heldout-greedy",
        "settings": {"windows": args.windows, "seq": T, "k": k, "verification": "greedy", "rows": "every row t = 0..seq−2 of each window; context = the text up to x_{t+1}"},
        "positions": int(first.numel()),
        "first_draft_agreement": round(float(first.double().mean()), 4),
        "tokens_per_pass": summary(acc, k),
        "accepted_per_position": acc.tolist(),
        "texts": texts,
    }


@torch.no_grad()
def sample_texts(target, val, args):
    """Held-out prompts continued by the target at temperature T under the seeded contract (window
    w uses seed w + 1); full recompute per token, all windows in one batch."""
    seqs = torch.stack([val[w * args.seq : w * args.seq + args.prompt] for w in range(args.windows)])
    while seqs.shape[1] < args.seq:
        logits, _, _ = forward_taps(target, seqs, [1])
        m = seqs.shape[1]  # absolute position of the token being drawn
        nxt = torch.tensor([draw(logits[w, -1], args.temperature, uniform_at(w + 1, m)) for w in range(args.windows)])
        seqs = torch.cat([seqs, nxt.unsqueeze(1)], 1)
    return seqs.tolist()


@torch.no_grad()
def eval_sampled(target, draft, texts, args):
    ids = draft.c["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    k, T, temp = args.k, args.seq, args.temperature
    rows = list(range(args.prompt - 1, T - 1 - k))  # the committed token x_{t+1} is sampled; k text tokens follow
    exact, coupled, mpq, beta = [], [], [], []
    for w, seq in enumerate(texts):
        x = torch.tensor(seq)
        seed = w + 1
        _, taps, _ = forward_taps(target, x.unsqueeze(0), ids)
        greedy = torch.stack([s[0].argmax(-1) for s in draft.chain(taps, x.unsqueeze(0), k, lambda i, lg: lg.argmax(-1))], 1)
        text_next = torch.stack([x[torch.tensor(rows) + 2 + j] for j in range(k)], 1)
        exact.append(accepted(greedy[rows] == text_next))

        def coupled_choice(i, lg):  # step i's logits [1, R, V] → the draft's draw at each row's position
            return torch.tensor([[draw(lg[0, t], temp, uniform_at(seed, t + 2 + i)) for t in range(lg.shape[1])]])

        cp = torch.stack([s[0] for s in draft.chain(taps, x.unsqueeze(0), k, coupled_choice)], 1)  # [R, k, V] logits
        cd = torch.stack([torch.tensor([draw(cp[t, j], temp, uniform_at(seed, t + 2 + j)) for j in range(k)]) for t in rows])
        coupled.append(accepted(cd == text_next))

        g = torch.Generator().manual_seed(1_000_003 * seed)
        uq = torch.rand(T, k, generator=g, dtype=torch.float64)  # draws of the drafts from q
        ua = torch.rand(T, k, generator=g, dtype=torch.float64)  # acceptance draws

        def q_choice(i, lg):
            return torch.tensor([[draw(lg[0, t], temp, float(uq[t, i])) for t in range(lg.shape[1])]])

        ql = torch.stack([s[0] for s in draft.chain(taps, x.unsqueeze(0), k, q_choice)], 1)[rows]  # [R, k, V]
        qd = torch.stack([torch.tensor([draw(ql[r, j], temp, float(uq[t, j])) for j in range(k)]) for r, t in enumerate(rows)])
        pl = verify_greedy(target, x, rows, qd, ids)  # [R, k, V] target logits at the drafts' positions
        p = torch.softmax(pl.double() / temp, -1)
        q = torch.softmax(ql.double() / temp, -1)
        pd, qdp = torch.gather(p, 2, qd.unsqueeze(-1))[..., 0], torch.gather(q, 2, qd.unsqueeze(-1))[..., 0]
        mpq.append(accepted(ua[rows] < torch.clamp(pd / qdp, max=1.0)))
        beta.append(torch.minimum(p[:, 0], q[:, 0]).sum(-1))
    exact, coupled, mpq, beta = torch.cat(exact), torch.cat(coupled), torch.cat(mpq), torch.cat(beta)
    return {
        "text_set": "heldout-sampled",
        "settings": {"windows": args.windows, "seq": T, "prompt": args.prompt, "k": k, "temperature": temp, "seeds": "window index + 1", "sampler": "issue-21 contract: uniformAt(seed, position), inverse CDF in ascending id order, no top-k/top-p", "rows": f"t = prompt−1 .. seq−2−k of each window"},
        "positions": int(exact.numel()),
        "exact_match": {"tokens_per_pass": summary(exact, k), "first_draft_acceptance": round(float((exact > 0).double().mean()), 4)},
        "exact_match_coupled": {"tokens_per_pass": summary(coupled, k), "first_draft_acceptance": round(float((coupled > 0).double().mean()), 4)},
        "min_p_over_q": {"tokens_per_pass": summary(mpq, k), "first_draft_acceptance": round(float((mpq > 0).double().mean()), 4), "first_step_expected": round(float(beta.mean()), 4)},
        "accepted_per_position": {"exact_match": exact.tolist(), "exact_match_coupled": coupled.tolist(), "min_p_over_q": mpq.tolist()},
        "texts": texts,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(HERE, "out"))
    p.add_argument("--draft", default=None, help="draft folder (default OUT/draft/model)")
    p.add_argument("--windows", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--threads", type=int, default=int(os.environ.get("K3_TRAIN_THREADS", "2")))
    p.add_argument("--only", choices=["greedy", "sampled"], default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    target = load_demo_target(args.out).float()
    draft = load_draft(args.draft or os.path.join(args.out, "draft", "model"), dtype=torch.float32)
    val = load_tokens(os.path.join(args.out, "corpus", "val.u16"))
    os.makedirs(os.path.join(args.out, "drafteval"), exist_ok=True)
    for name in ("greedy", "sampled"):
        if args.only and args.only != name:
            continue
        t0 = time.time()
        r = eval_greedy(target, draft, val, args) if name == "greedy" else eval_sampled(target, draft, sample_texts(target, val, args), args)
        r["seconds"] = round(time.time() - t0, 1)
        path = os.path.join(args.out, "drafteval", f"{r['text_set']}.json")
        with open(path, "w") as f:
            json.dump(r, f)
        brief = {k: v for k, v in r.items() if k not in ("texts", "accepted_per_position")}
        print(json.dumps(brief), flush=True)
        print(f"→ {path}", flush=True)


if __name__ == "__main__":
    main()
