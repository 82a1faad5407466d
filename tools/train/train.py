# Trains the demo model (tools/train/model.py, K3's architecture at a tiny size) on the Brown corpus
# prepared by corpus.ts, then rounds it to what ships (bf16 trunk, MXFP4 experts), evaluates THAT,
# and writes the export dump + float64 reference logits. Dev-only; docs/TEST-MODELS.md has the story.
#
#   /usr/bin/python3 tools/train/train.py [--out tools/train/out] [--steps N] [--fresh]
#
# Resumable: a checkpoint (model, optimizer, router biases, loss log) is written atomically every
# --ckpt-every steps to OUT/ckpt.pt and picked up on the next start; batch i is drawn from a
# generator seeded by (seed, i), so a resumed run sees the same batches as an uninterrupted one.
#
# Schedule: AdamW, linear warm-up then cosine decay; bf16 autocast for matmuls (AMX/AVX-512 bf16 is
# ~30x faster than this box's f32 BLAS), f32 master weights. The last --qat-frac of the steps train
# with the experts fake-quantised to MXFP4 (straight-through), so rounding them at the end costs
# little. Router bias: after every step each MoE layer moves its e_score_correction_bias by
# ±--bias-rate toward equal load (the release's auxiliary-loss-free balancing); it steers top-k
# only, never the combine weights.
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from copymix import copy_row, draw_copy, heldout_copy_windows  # noqa: E402
from model import K3Tiny, KDA, LatentMoE, MLA, bf16_round_, mxfp4_pack, mxfp4_quantize  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(HERE, "out"))
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--wd", type=float, default=0.05)
    p.add_argument("--qat-frac", type=float, default=0.15)
    p.add_argument("--bias-rate", type=float, default=0.003)
    p.add_argument("--eval-every", type=int, default=60)
    p.add_argument("--eval-windows", type=int, default=32, help="held-out windows for the loss curve (the final eval uses all)")
    p.add_argument("--ckpt-every", type=int, default=25)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=int(os.environ.get("K3_TRAIN_THREADS", "1")))
    p.add_argument("--copy-frac", type=float, default=0.0, help="share of the windows that are copy windows (copymix.py), from step --copy-from on")
    p.add_argument("--copy-from", type=int, default=0)
    p.add_argument("--copy-min", type=int, default=8, help="shortest repeated span (tokens)")
    p.add_argument("--copy-max", type=int, default=64, help="longest repeated span (tokens; 2x it must fit in seq + 1)")
    p.add_argument("--copy-repeats", type=int, default=1, help="a copy window repeats its span 1..this many times")
    p.add_argument("--copy-eval-max", type=int, default=64, help="longest repeated span in the held-out copy windows")
    p.add_argument("--copy-windows", type=int, default=64, help="held-out copy windows for the copy rate in the log")
    p.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--export-only", action="store_true", help="skip training (use the checkpoint as is)")
    return p.parse_args()


def load_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    return torch.frombuffer(bytearray(raw), dtype=torch.int16).to(torch.int64) & 0xFFFF


def batch_at(tokens, step, args):
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    starts = torch.randint(0, tokens.numel() - args.seq - 1, (args.batch,), generator=g)
    rows = [tokens[s : s + args.seq + 1] for s in starts.tolist()]
    if args.copy_frac > 0 and step >= args.copy_from:
        # a second stream, so the natural windows' starts stay those of a run without the mix
        gc = torch.Generator().manual_seed(args.seed * 2_000_003 + step)
        pick = torch.rand(args.batch, generator=gc) < args.copy_frac
        rows = [copy_row(r, *draw_copy(gc, args.seq + 1, args.copy_min, args.copy_max, args.copy_repeats)) if c else r for r, c in zip(rows, pick.tolist())]
    rows = torch.stack(rows)
    return rows[:, :-1], rows[:, 1:]


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


@torch.no_grad()
def evaluate(model, val, seq, windows=None, amp=False):
    """Mean next-token cross-entropy (nats) over non-overlapping held-out windows of `seq` tokens."""
    model.eval()
    n = (val.numel() - 1) // seq
    if windows is not None:
        n = min(n, windows)
    total, count = 0.0, 0
    for i0 in range(0, n, 16):
        idx = range(i0, min(n, i0 + 16))
        x = torch.stack([val[i * seq : i * seq + seq] for i in idx])
        y = torch.stack([val[i * seq + 1 : i * seq + seq + 1] for i in idx])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            logits = model(x)
        total += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
        count += y.numel()
    model.train()
    return total / count


@torch.no_grad()
def copy_eval(model, rows, spans, given=2, amp=False):
    """Copying on held-out copy windows (copymix.heldout_copy_windows): the model sees the text up
    to the repeat's first `given` tokens and must reproduce the rest of the repeat (L − given
    tokens). One teacher-forced forward gives both numbers: `acc`, the share of repeat tokens whose
    argmax is right given the true prefix, and `prefix`, the share the GREEDY model reproduces in
    order (greedy output equals the teacher-forced argmax for as long as it has been right, so the
    in-order run is exact), plus `full`, the windows copied whole."""
    model.eval()
    hit = run = total = full = 0
    for i0 in range(0, rows.shape[0], 16):
        x = rows[i0 : i0 + 16, :-1]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            pred = model(x).float().argmax(-1)
        for j, (L, b) in enumerate(spans[i0 : i0 + 16]):
            want = rows[i0 + j, b + given : b + L]
            got = pred[j, b + given - 1 : b + L - 1]  # logits at p − 1 predict token p
            ok = (got == want).tolist()
            hit += sum(ok)
            r = ok.index(False) if False in ok else len(ok)
            run += r
            full += r == len(ok)
            total += len(ok)
    model.train()
    return {"acc": hit / total, "prefix": run / total, "full": full, "windows": len(spans)}


def set_fake_quant(model, on):
    for m in model.moe_layers():
        m.fake_quant = on


def update_router_bias(model, rate):
    for m in model.moe_layers():
        load = m.last_load.float()
        m.e_score_correction_bias += rate * torch.sign(load.mean() - load)


def save_atomic(obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train(args, cfg, model, train_tok, val_tok, state, copy_set):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    ckpt_path = os.path.join(args.out, "ckpt.pt")
    if state.get("opt"):
        opt.load_state_dict(state["opt"])
    log = state.setdefault("log", [])
    step = state.get("step", 0)
    qat_from = int(args.steps * (1 - args.qat_frac))
    if step == 0 and not log:
        l0 = evaluate(model, val_tok, args.seq, args.eval_windows, amp=True)
        log.append({"step": 0, "val": l0, "tokens": 0, "sec": 0.0, "copy": copy_eval(model, *copy_set, amp=True)})
        print(f"step 0: held-out loss {l0:.3f} (ppl {math.exp(l0):.0f})", flush=True)
    t_run = time.time()
    sec0 = state.get("sec", 0.0)
    train_loss_acc, acc_n = 0.0, 0
    while step < args.steps:
        set_fake_quant(model, step >= qat_from)
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, args)
        x, y = batch_at(train_tok, step, args)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            update_router_bias(model, args.bias_rate)
        step += 1
        train_loss_acc += loss.item()
        acc_n += 1
        sec = sec0 + time.time() - t_run
        if step % 10 == 0:
            print(f"step {step}/{args.steps} train {train_loss_acc / acc_n:.3f} lr {lr_at(step - 1, args):.2e} {sec:.0f}s" + (" (qat)" if step > qat_from else ""), flush=True)
        if step % args.eval_every == 0 or step == args.steps:
            lv = evaluate(model, val_tok, args.seq, args.eval_windows, amp=True)
            cp = copy_eval(model, *copy_set, amp=True)
            log.append({"step": step, "train": train_loss_acc / acc_n, "val": lv, "tokens": step * args.batch * args.seq, "sec": round(sec, 1), "copy": cp})
            train_loss_acc, acc_n = 0.0, 0
            print(f"step {step}: held-out loss {lv:.3f} (ppl {math.exp(lv):.1f}), copy: {cp['acc']:.3f} of repeat tokens, greedy in order {cp['prefix']:.3f}, {cp['full']}/{cp['windows']} whole", flush=True)
        if step % args.ckpt_every == 0 or step == args.steps:
            save_atomic({"step": step, "model": model.state_dict(), "opt": opt.state_dict(), "log": log, "sec": sec, "args": vars(args)}, ckpt_path)
    state["step"], state["log"], state["sec"] = step, log, sec0 + time.time() - t_run


# ───────────────────────────── rounding and export ─────────────────────────────

F32_NAMES = ("conv1d", "A_log", "dt_bias", "o_norm", "e_score_correction_bias")


@torch.no_grad()
def round_to_release(model):
    """bf16 for the trunk, f32 where the release stores f32, MXFP4 for the experts (in place).
    Returns {expert weight name: (packed, scales)} for the export."""
    experts = {}
    for name, p in model.named_parameters():
        if any(k in name for k in F32_NAMES):
            continue
        if isinstance(dict(model.named_modules()).get(name.rsplit(".", 1)[0]), LatentMoE) and name.rsplit(".", 1)[1] in ("w1", "w2", "w3"):
            continue
        bf16_round_(p)
    for li, layer in enumerate(model.layers):
        m = layer.ffn
        if not isinstance(m, LatentMoE):
            continue
        m.fake_quant = False
        for wname in ("w1", "w2", "w3"):
            w = getattr(m, wname)
            for e in range(w.shape[0]):
                codes, scales, deq = mxfp4_quantize(w.data[e])
                w.data[e] = deq
                experts[(li, e, wname)] = (mxfp4_pack(codes), scales)
    return experts


def bf16_bytes(t):
    return t.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()


def f32_bytes(t):
    return t.detach().to(torch.float32).contiguous().numpy().tobytes()


@torch.no_grad()
def export_tensors(model, cfg, experts):
    """Official release names (MODEL.md §3) → (dtype, shape, bytes)."""
    LM = "language_model.model."
    out = {}

    def bf(name, t, shape=None):
        out[LM + name if not name.startswith("language_model.lm_head") else name] = ("BF16", list(shape or t.shape), bf16_bytes(t))

    def f32(name, t, shape=None):
        out[LM + name] = ("F32", list(shape or t.shape), f32_bytes(t))

    E = cfg["hidden"]
    bf("embed_tokens.weight", model.embed_tokens.weight)
    bf("language_model.lm_head.weight", model.lm_head.weight)
    bf("norm.weight", model.norm)
    bf("output_attn_res_norm.weight", model.output_attn_res_norm)
    bf("output_attn_res_proj.weight", model.output_attn_res_proj, [1, E])
    for l, layer in enumerate(model.layers):
        pre = f"layers.{l}."
        bf(pre + "input_layernorm.weight", layer.input_layernorm)
        bf(pre + "post_attention_layernorm.weight", layer.post_attention_layernorm)
        bf(pre + "self_attention_res_norm.weight", layer.self_attention_res_norm)
        bf(pre + "mlp_res_norm.weight", layer.mlp_res_norm)
        bf(pre + "self_attention_res_proj.weight", layer.self_attention_res_proj, [1, E])
        bf(pre + "mlp_res_proj.weight", layer.mlp_res_proj, [1, E])
        a = layer.self_attn
        sa = pre + "self_attn."
        if isinstance(a, KDA):
            for n in ("q_proj", "k_proj", "v_proj", "g_proj", "o_proj", "f_a_proj", "f_b_proj", "b_proj"):
                bf(sa + n + ".weight", getattr(a, n).weight)
            for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
                f32(sa + n + ".weight", getattr(a, n))
            alog = torch.zeros(a.D)  # D entries like the release; only the first H are used, the tail is zero
            alog[: a.H] = a.A_log
            f32(sa + "A_log", alog)
            f32(sa + "dt_bias", a.dt_bias)
            f32(sa + "o_norm.weight", a.o_norm)
        else:
            assert isinstance(a, MLA)
            for n in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "g_proj"):
                bf(sa + n + ".weight", getattr(a, n).weight)
            bf(sa + "q_a_layernorm.weight", a.q_a_layernorm)
            bf(sa + "kv_a_layernorm.weight", a.kv_a_layernorm)
        m = layer.ffn
        if not isinstance(m, LatentMoE):
            for n in ("gate_proj", "up_proj", "down_proj"):
                bf(pre + "mlp." + n + ".weight", getattr(m, n).weight)
            continue
        mo = pre + "block_sparse_moe."
        bf(mo + "gate.weight", m.gate.weight)
        f32(mo + "gate.e_score_correction_bias", m.e_score_correction_bias)
        for n in ("gate_proj", "up_proj", "down_proj"):
            bf(mo + "shared_experts." + n + ".weight", getattr(m.shared_experts, n).weight)
        bf(mo + "routed_expert_down_proj.weight", m.routed_expert_down_proj.weight)
        bf(mo + "routed_expert_up_proj.weight", m.routed_expert_up_proj.weight)
        bf(mo + "routed_expert_norm.weight", m.routed_expert_norm)
        for e in range(cfg["experts"]):
            for w in ("w1", "w2", "w3"):
                packed, scales = experts[(l, e, w)]
                out[f"{LM}{mo}experts.{e}.{w}.weight_packed"] = ("U8", list(packed.shape), packed.numpy().tobytes())
                out[f"{LM}{mo}experts.{e}.{w}.weight_scale"] = ("U8", list(scales.shape), scales.numpy().tobytes())
    return out


def write_safetensors(path, tensors):
    header, at = {}, 0
    for name, (dt, shape, data) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * ((-len(raw)) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for _, (_, _, data) in tensors.items():
            f.write(data)
    os.replace(path + ".tmp", path)


@torch.no_grad()
def greedy(model, ids, n, recurrent=False):
    seq = list(ids)
    for _ in range(n):
        logits = model(torch.tensor([seq]), recurrent=recurrent)[0, -1]
        seq.append(int(torch.argmax(logits)))  # first max = lowest id on ties
    return seq[len(ids):]


def decode(vocab_bytes, ids):
    return b"".join(vocab_bytes.get(i, b"") for i in ids).decode("utf-8", errors="replace")


def load_vocab(tok_dir):
    import base64

    out = {}
    with open(os.path.join(tok_dir, "tiktoken.model")) as f:
        for line in f:
            b64, rank = line.split()
            out[int(rank)] = base64.b64decode(b64)
    return out


@torch.no_grad()
def routing_stats(model, val, seq, windows=32):
    """Per MoE layer: share of routed slots per expert over held-out text, and its entropy (bits)."""
    counts = [torch.zeros(m.N) for m in model.moe_layers()]
    n = min(windows, (val.numel() - 1) // seq)
    for i in range(n):
        model(val[i * seq : i * seq + seq].unsqueeze(0))
        for c, m in zip(counts, model.moe_layers()):
            c += m.last_load.float()
    out = []
    for c in counts:
        p = c / c.sum()
        ent = -(p[p > 0] * torch.log2(p[p > 0])).sum().item()
        out.append({"share": [round(v, 4) for v in p.tolist()], "entropy_bits": round(ent, 3), "max_bits": math.log2(len(p))})
    return out


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    with open(os.path.join(HERE, "model-config.json")) as f:
        cfg = json.load(f)
    train_tok = load_tokens(os.path.join(args.out, "corpus", "train.u16"))
    val_tok = load_tokens(os.path.join(args.out, "corpus", "val.u16"))
    torch.manual_seed(args.seed)
    model = K3Tiny(cfg)
    ckpt_path = os.path.join(args.out, "ckpt.pt")
    state = {}
    if os.path.exists(ckpt_path) and not args.fresh:
        state = torch.load(ckpt_path)
        model.load_state_dict(state["model"])
        print(f"resumed from {ckpt_path} at step {state['step']}", flush=True)
    print(f"params {sum(p.numel() for p in model.parameters())}, train {train_tok.numel()} tokens, held-out {val_tok.numel()}, threads {args.threads}", flush=True)
    copy_set = heldout_copy_windows(val_tok, args.seq, args.copy_windows, 8, args.copy_eval_max)
    if not args.export_only:
        train(args, cfg, model, train_tok, val_tok, state, copy_set)

    # ── the model that ships: round, then evaluate exactly that ──
    model.eval()
    set_fake_quant(model, False)
    t0 = time.time()
    experts = round_to_release(model)
    report = {"log": state.get("log", []), "train_sec": round(state.get("sec", 0.0), 1), "steps": state.get("step"), "args": vars(args)}
    report["val_loss_rounded"] = evaluate(model, val_tok, args.seq)  # f32, all held-out windows, no autocast
    print(f"held-out loss of the rounded model (f32, all windows): {report['val_loss_rounded']:.4f} (ppl {math.exp(report['val_loss_rounded']):.1f})", flush=True)
    report["copy_rounded"] = copy_eval(model, *heldout_copy_windows(val_tok, args.seq, 256, 8, args.copy_eval_max))
    print(f"copying of the rounded model (256 held-out copy windows): {report['copy_rounded']}", flush=True)
    torch.manual_seed(args.seed)
    init = K3Tiny(cfg)  # the same initial weights as step 0
    report["val_loss_init"] = evaluate(init, val_tok, args.seq, windows=args.eval_windows)
    report["routing"] = routing_stats(model, val_tok, args.seq)
    report["router_bias"] = [m.e_score_correction_bias.tolist() for m in model.moe_layers()]

    os.makedirs(os.path.join(args.out, "export"), exist_ok=True)
    tensors = export_tensors(model, cfg, experts)
    write_safetensors(os.path.join(args.out, "export", "weights.safetensors"), tensors)

    # float64 reference on the rounded weights, MODEL.md's per-token KDA recurrence
    m64 = model.double()
    vocab = load_vocab(os.path.join(args.out, "tokenizer"))
    with open(os.path.join(args.out, "corpus", "prompts.json")) as f:
        prompts = json.load(f)
    refs = []
    for pr in prompts:
        ids = pr["ids"]
        logits = m64(torch.tensor([ids]), recurrent=True)[0, -1]
        chunk = m64(torch.tensor([ids]))[0, -1]
        gen = greedy(m64, ids, 24, recurrent=True)
        top2 = torch.topk(logits, 2).values
        refs.append({"text": pr["text"], "ids": ids, "logits": logits.tolist(), "greedy": gen, "continuation": decode(vocab, gen), "top1_top2_gap": (top2[0] - top2[1]).item(), "chunked_vs_recurrent": (logits - chunk).abs().max().item()})
        print(f"{pr['text']!r} → {decode(vocab, gen)!r}", flush=True)
    with open(os.path.join(args.out, "export", "reference.json"), "w") as f:
        json.dump({"prompts": refs}, f)
    with open(os.path.join(args.out, "export", "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"rounded, evaluated and exported in {time.time() - t0:.0f}s → {args.out}/export", flush=True)


if __name__ == "__main__":
    main()
