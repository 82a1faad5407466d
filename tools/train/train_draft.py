# Trains the demo's EAGLE-3 draft (draft_model.py) against the shipped demo target (target.py),
# the way EAGLE-3 drafts are trained (dev-only; docs/TEST-MODELS.md "Demo draft"):
#   - data: windows of the training corpus (Brown, the held-out samples excluded), run through the
#     TARGET: its taps at the config's capture layers and its full next-token distribution at every
#     position are the inputs and the labels. The labels are the target's own outputs (soft: the
#     whole distribution, whose argmax is the greedy label), recomputed every batch (the target is
#     4M parameters: cheaper than storing 768 floats per position);
#   - loss: the training-time test of EAGLE-3 (TorchSpec eagle3.py / eagle3_trainer.py): --ttt
#     steps per row, each fed the previous step's own output state (post-norm: eagle3.1's
#     norm_output) and the text's next token, the loss of step i the forward KL to the target's
#     distribution at that row's position + i, weighted 0.8^i;
#   - the embedding is the target's, frozen (the draft shares it); lm_head and norm start from the
#     target's; everything else random (std 1/√fan_in).
#
#   /usr/bin/python3 tools/train/train_draft.py [--out tools/train/out] [--steps N] [--fresh]
#
# Resumable like train.py (OUT/draft/ckpt.pt every --ckpt-every steps; batch i drawn from (seed, i)).
# Writes OUT/draft/weights.safetensors (release names, BF16) and OUT/draft/train.json.
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from draft_model import EagleDraft  # noqa: E402
from target import embedding_bytes, forward_taps, load_demo_target, to_tensor  # noqa: E402
from train import bf16_bytes, load_tokens, lr_at, save_atomic, write_safetensors  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(HERE, "out"))
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--ttt", type=int, default=5, help="training-time-test steps per row")
    p.add_argument("--decay", type=float, default=0.8, help="loss weight of TTT step i: decay^i")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--wd", type=float, default=0.01)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-windows", type=int, default=64)
    p.add_argument("--ckpt-every", type=int, default=25)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=int(os.environ.get("K3_TRAIN_THREADS", "2")))
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--export-only", action="store_true")
    return p.parse_args()


def load_all(args):
    target = load_demo_target(args.out).float()
    with open(os.path.join(args.out, "draft", "config.json")) as f:
        dcfg = json.load(f)
    shape, data = embedding_bytes(os.path.join(args.out, "demo-target"))
    emb = to_tensor("BF16", shape, data).float()
    return target, dcfg, emb


def windows_at(tokens, step, args, gen_seed):
    g = torch.Generator().manual_seed(gen_seed * 1_000_003 + step)
    starts = torch.randint(0, tokens.numel() - args.seq, (args.batch,), generator=g)
    return torch.stack([tokens[s : s + args.seq] for s in starts.tolist()])


def ttt_losses(draft, target, layer_ids, x, steps, amp=True):
    """Per TTT step: forward-KL loss to the target's distribution and argmax agreement (teacher-forced)."""
    with torch.no_grad():
        tlogits, taps, _ = forward_taps(target, x, layer_ids)
        tp = torch.softmax(tlogits.float(), -1)
        targ = tlogits.argmax(-1)
    T = x.shape[1]
    losses, accs = [], []
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        for i, logits in enumerate(draft.chain(taps, x, steps, lambda i, l: None)):
            n = T - 1 - i  # rows t ≤ T−2−i have a label: the target at position t + 1 + i
            lp = F.log_softmax(logits[:, :n].float(), -1)
            losses.append(-(tp[:, 1 + i : T] * lp).sum(-1).mean())
            accs.append((lp.argmax(-1) == targ[:, 1 + i : T]).float().mean().item())
    return losses, accs


@torch.no_grad()
def evaluate(draft, target, layer_ids, val, args):
    n = min(args.eval_windows, val.numel() // args.seq)
    tot_l, tot_a = [0.0] * args.ttt, [0.0] * args.ttt
    for i0 in range(0, n, 16):
        x = torch.stack([val[i * args.seq : (i + 1) * args.seq] for i in range(i0, min(n, i0 + 16))])
        ls, acs = ttt_losses(draft, target, layer_ids, x, args.ttt)
        w = x.shape[0]
        for i in range(args.ttt):
            tot_l[i] += ls[i].item() * w
            tot_a[i] += acs[i] * w
    return [round(v / n, 4) for v in tot_l], [round(v / n, 4) for v in tot_a]


def train(args, draft, target, layer_ids, train_tok, val_tok, state):
    params = [p for p in draft.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    if state.get("opt"):
        opt.load_state_dict(state["opt"])
    log = state.setdefault("log", [])
    step, sec0, t_run = state.get("step", 0), state.get("sec", 0.0), time.time()
    ckpt = os.path.join(args.out, "draft", "ckpt.pt")
    if step == 0 and not log:
        l0, a0 = evaluate(draft, target, layer_ids, val_tok, args)
        log.append({"step": 0, "val_loss": l0, "val_acc": a0, "sec": 0.0})
        print(f"step 0: held-out loss {l0} acc {a0}", flush=True)
    acc_sum, n_sum = 0.0, 0
    while step < args.steps:
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, args)
        x = windows_at(train_tok, step, args, args.seed)
        losses, accs = ttt_losses(draft, target, layer_ids, x, args.ttt)
        loss = sum(args.decay**i * l for i, l in enumerate(losses))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        acc_sum += accs[0]
        n_sum += 1
        sec = sec0 + time.time() - t_run
        if step % 10 == 0:
            print(f"step {step}/{args.steps} loss {loss.item():.3f} acc0 {acc_sum / n_sum:.3f} steps {[round(a, 3) for a in accs]} {sec:.0f}s", flush=True)
        if step % args.eval_every == 0 or step == args.steps:
            lv, av = evaluate(draft, target, layer_ids, val_tok, args)
            log.append({"step": step, "train_acc0": round(acc_sum / n_sum, 4), "val_loss": lv, "val_acc": av, "sec": round(sec, 1), "tokens": step * args.batch * args.seq})
            acc_sum, n_sum = 0.0, 0
            print(f"step {step}: held-out loss {lv} teacher-forced agreement per TTT step {av}", flush=True)
        if step % args.ckpt_every == 0 or step == args.steps:
            save_atomic({"step": step, "model": draft.state_dict(), "opt": opt.state_dict(), "log": log, "sec": sec, "args": vars(args)}, ckpt)
    state["step"], state["log"], state["sec"] = step, log, sec0 + time.time() - t_run


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    target, dcfg, emb = load_all(args)
    for p in target.parameters():
        p.requires_grad_(False)
    layer_ids = dcfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    draft = EagleDraft(dcfg, emb)
    with torch.no_grad():  # head and final norm start from the target's (EAGLE-3 practice)
        draft.lm_head.weight.copy_(target.lm_head.weight)
        draft.norm.copy_(target.norm)
    ckpt = os.path.join(args.out, "draft", "ckpt.pt")
    state = {}
    if os.path.exists(ckpt) and not args.fresh:
        state = torch.load(ckpt)
        draft.load_state_dict(state["model"])
        print(f"resumed from {ckpt} at step {state['step']}", flush=True)
    train_tok = load_tokens(os.path.join(args.out, "corpus", "train.u16"))
    val_tok = load_tokens(os.path.join(args.out, "corpus", "val.u16"))
    n_train = sum(p.numel() for p in draft.parameters() if p.requires_grad)
    print(f"draft: {n_train} trained parameters (+ the shared embedding {draft.embed.numel()}), taps {layer_ids}, ttt {args.ttt}, threads {args.threads}", flush=True)
    if not args.export_only:
        train(args, draft, target, layer_ids, train_tok, val_tok, state)
    # ── what ships: bf16, evaluated as such ──
    with torch.no_grad():
        for p in draft.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))
    lv, av = evaluate(draft, target, layer_ids, val_tok, args)
    print(f"rounded to bf16: held-out loss {lv} teacher-forced agreement {av}", flush=True)
    tensors = {}
    for name, t in draft.tensors().items():
        data = bf16_bytes(t) if name != "embed_tokens.weight" else embedding_bytes(os.path.join(args.out, "demo-target"))[1]
        tensors[name] = ("BF16", list(t.shape), data)
    write_safetensors(os.path.join(args.out, "draft", "weights.safetensors"), tensors)
    report = {"args": vars(args), "steps": state.get("step"), "train_sec": round(state.get("sec", 0.0), 1), "log": state.get("log", []), "rounded": {"val_loss": lv, "val_acc": av}, "trained_params": n_train}
    with open(os.path.join(args.out, "draft", "train.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"→ {args.out}/draft/weights.safetensors", flush=True)


if __name__ == "__main__":
    main()
