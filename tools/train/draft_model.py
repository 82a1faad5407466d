# The demo's EAGLE-3 draft in PyTorch (dev-only; docs/TEST-MODELS.md "Demo draft"): the released
# format's model (DRAFTERS.md §3, format A; the same math as tools/reference/draft.ts, which checks
# the export) at the demo's sizes, and the training-time-test recurrence it is trained and measured
# with. Parameter names are the release's tensor names (export writes them as they are).
#
# One "TTT step" runs the draft's decoder layer on every row of a window at once. Row t pairs the
# target's taps at position t with token x_{t+1} (step 0 = the chain's step 1, at position t);
# step i feeds back the previous step's output (post-norm y: eagle3.1's norm_output) with the next
# token (teacher-forced: the text's x_{t+1+i}; or the draft's own choice), at position t + i. Its
# query attends to the step-0 rows 0..t (what the engine's cache holds: committed rows from target
# taps) and to row t's own rows of steps 1..i (the chain rows) — TorchSpec's cached TTT attention
# (deepseek_eagle.py, eagle3.py), equal to the engine's causal attention over its cache.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from model import rmsnorm

# The release's DeepSeek-YaRN block (DRAFTERS.md §1.2)
RELEASE_ROPE = {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 32768, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}


def wide(t):
    """Scores, softmax and rotary in f32 at least (float64 stays float64: the export check)."""
    return t if t.dtype == torch.float64 else t.float()


def yarn_mscale(s, m):
    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0


def rope_frequencies(d, theta, yarn):
    """ω_i, i < d/2 (DRAFTERS.md §3.3): plain θ^(−2i/d), or YaRN's ramp between it and it/s."""
    i = torch.arange(d // 2, dtype=torch.float64)
    extra = theta ** (-2 * i / d)
    if not yarn:
        return extra
    corr = lambda b: d * math.log(yarn["original_max_position_embeddings"] / (2 * math.pi * b)) / (2 * math.log(theta))  # noqa: E731
    lo = max(math.floor(corr(yarn["beta_fast"])), 0)
    hi = min(math.ceil(corr(yarn["beta_slow"])), d - 1)
    if lo == hi:
        hi += 0.001
    ramp = ((i - lo) / (hi - lo)).clamp(0, 1)
    return extra / yarn["factor"] * ramp + extra * (1 - ramp)


class EagleDraft(nn.Module):
    """Format A at config `c` (the config.json dict). `embedding`: the target's table (frozen, shared)."""

    def __init__(s, c, embedding, max_pos=4096):
        super().__init__()
        H, nh, dn, dr, dv = c["hidden_size"], c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        s.c, s.H, s.nh, s.dn, s.dr, s.dv, s.R = c, H, nh, dn, dr, dv, c["kv_lora_rank"]
        s.eps, s.n_aux = c["rms_norm_eps"], len(c["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
        s.fc_norm_on, s.norm_output = bool(c.get("fc_norm")), bool(c.get("norm_output"))
        lin = lambda i, o: nn.Linear(i, o, bias=False)  # noqa: E731
        s.register_buffer("embed", embedding.clone())  # frozen: the target's, byte for byte
        s.fc = lin(s.n_aux * H, H)
        s.fc_norm = nn.ParameterList([nn.Parameter(torch.ones(H)) for _ in range(s.n_aux)]) if s.fc_norm_on else None
        s.hidden_norm, s.input_layernorm, s.post_attention_layernorm, s.norm = (nn.Parameter(torch.ones(H)) for _ in range(4))
        s.q_a_proj = lin(2 * H, c["q_lora_rank"])
        s.q_a_layernorm = nn.Parameter(torch.ones(c["q_lora_rank"]))
        s.q_b_proj = lin(c["q_lora_rank"], nh * (dn + dr))
        s.kv_a_proj_with_mqa = lin(2 * H, s.R + dr)
        s.kv_a_layernorm = nn.Parameter(torch.ones(s.R))
        s.kv_b_proj = lin(s.R, nh * (dn + dv))
        s.o_proj = lin(nh * dv, H)
        s.gate_proj, s.up_proj = lin(H, c["intermediate_size"]), lin(H, c["intermediate_size"])
        s.down_proj = lin(c["intermediate_size"], H)
        s.lm_head = lin(H, c["vocab_size"])
        for m in s.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=m.in_features**-0.5)
        yarn = c.get("rope_scaling")
        yarn = yarn if yarn and (yarn.get("rope_type") or yarn.get("type")) in ("yarn", "deepseek_yarn") else None
        w = rope_frequencies(dr, c["rope_theta"], yarn)
        amp = yarn_mscale(yarn["factor"], yarn["mscale"]) / yarn_mscale(yarn["factor"], yarn["mscale_all_dim"]) if yarn else 1.0
        ang = torch.arange(max_pos, dtype=torch.float64).unsqueeze(1) * w  # [pos, dr/2]
        s.register_buffer("cos", torch.cos(ang) * amp, persistent=False)  # float64 until .float()
        s.register_buffer("sin", torch.sin(ang) * amp, persistent=False)
        m2 = yarn_mscale(yarn["factor"], yarn["mscale_all_dim"]) ** 2 if yarn else 1.0
        s.tau = m2 / math.sqrt(dn + dr)

    def tensors(s):
        """Release tensor name → parameter (export order does not matter: export sorts)."""
        a = "layers.0.self_attn."
        out = {"embed_tokens.weight": s.embed, "fc.weight": s.fc.weight, "norm.weight": s.norm, "lm_head.weight": s.lm_head.weight}
        if s.fc_norm is not None:
            out.update({f"fc_norm.{j}.weight": p for j, p in enumerate(s.fc_norm)})
        out.update({"layers.0.hidden_norm.weight": s.hidden_norm, "layers.0.input_layernorm.weight": s.input_layernorm, "layers.0.post_attention_layernorm.weight": s.post_attention_layernorm})
        for n in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
            out[a + n + ".weight"] = getattr(s, n).weight
        out[a + "q_a_layernorm.weight"] = s.q_a_layernorm
        out[a + "kv_a_layernorm.weight"] = s.kv_a_layernorm
        for n in ("gate_proj", "up_proj", "down_proj"):
            out[f"layers.0.mlp.{n}.weight"] = getattr(s, n).weight
        return out

    def fuse(s, taps):
        """taps [..., n·H] → h = W_fc · [fc_norm_j(g_j)] (DRAFTERS.md §3.2.1)."""
        if s.fc_norm is not None:
            taps = torch.cat([rmsnorm(g, w, s.eps) for g, w in zip(taps.chunk(s.n_aux, -1), s.fc_norm)], -1)
        return s.fc(taps)

    def rope(s, x, pos):
        """Interleaved pairs (x_2i, x_2i+1) rotated by pos·ω_i. x [B, R, ..., dr], pos [R]."""
        c, sn = s.cos[pos], s.sin[pos]  # [R, dr/2]
        while c.dim() < x.dim() - 1:
            c, sn = c.unsqueeze(-2), sn.unsqueeze(-2)
        xf = wide(x)
        c, sn = c.to(xf.dtype), sn.to(xf.dtype)
        a, b = xf[..., 0::2], xf[..., 1::2]
        return torch.stack((a * c - b * sn, b * c + a * sn), -1).flatten(-2).to(x.dtype)

    def qkv(s, h, tok, pos):
        """The rows' query, key and value (h [B, R, H], tok [B, R], pos [R])."""
        B, R = tok.shape
        u = torch.cat([rmsnorm(s.embed[tok], s.input_layernorm, s.eps), rmsnorm(h, s.hidden_norm, s.eps)], -1)
        q = s.q_b_proj(rmsnorm(s.q_a_proj(u), s.q_a_layernorm, s.eps)).view(B, R, s.nh, s.dn + s.dr)
        q = torch.cat([q[..., : s.dn], s.rope(q[..., s.dn :], pos)], -1)
        kva = s.kv_a_proj_with_mqa(u)
        kr = s.rope(kva[..., s.R :], pos)  # one rope key shared by the heads
        kv = s.kv_b_proj(rmsnorm(kva[..., : s.R], s.kv_a_layernorm, s.eps)).view(B, R, s.nh, s.dn + s.dv)
        k = torch.cat([kv[..., : s.dn], kr.unsqueeze(2).expand(B, R, s.nh, s.dr).to(kv.dtype)], -1)
        return q.transpose(1, 2), k.transpose(1, 2), kv[..., s.dn :].transpose(1, 2)  # [B, nh, R, ·]

    def step(s, h, tok, pos, cache):
        """One TTT step over rows 0..R−1; `cache` holds the (k, v) of the earlier steps (step 0 first).
        Returns (pre-norm r2, post-norm y, logits) and appends this step's (k, v)."""
        q, k, v = s.qkv(h, tok, pos)
        cache.append((k, v))
        k0, v0 = cache[0]
        R = tok.shape[1]
        sc = wide(torch.einsum("bhtd,bhsd->bhts", q, k0)) * s.tau
        sc = sc.masked_fill(torch.ones(R, R, dtype=torch.bool, device=sc.device).triu(1), -math.inf)
        diag = [wide((q * kj).sum(-1)).unsqueeze(-1) * s.tau for kj, _ in cache[1:]]  # row t's own chain rows
        p = torch.softmax(torch.cat([sc] + diag, -1), -1)
        att = torch.einsum("bhts,bhsd->bhtd", p[..., :R].to(v0.dtype), v0)
        for j, (_, vj) in enumerate(cache[1:]):
            att = att + p[..., R + j].unsqueeze(-1).to(vj.dtype) * vj
        o = s.o_proj(att.transpose(1, 2).reshape(tok.shape[0], R, s.nh * s.dv))
        r1 = h + o.to(h.dtype)
        z = rmsnorm(r1, s.post_attention_layernorm, s.eps)
        r2 = r1 + s.down_proj(F.silu(s.gate_proj(z)) * s.up_proj(z)).to(h.dtype)
        y = rmsnorm(r2, s.norm, s.eps)
        return r2, y, s.lm_head(y)

    def chain(s, taps, tokens, steps, choose):
        """The TTT recurrence over a window: taps [B, T, n·H], tokens [B, T]. Rows t = 0..T−2.
        choose(i, logits) → the token input of step i + 1 ([B, T−1]) given step i's logits, or
        None for teacher forcing (the text's x_{t+2+i}, zero past the end). Yields step logits."""
        B, T = tokens.shape
        R = T - 1
        h = s.fuse(taps[:, :R])
        tok = tokens[:, 1:]
        cache = []
        for i in range(steps):
            pos = torch.arange(i, R + i, device=tokens.device)
            r2, y, logits = s.step(h, tok, pos, cache)
            yield logits
            if i + 1 < steps:
                h = y if s.norm_output else r2
                nxt = choose(i, logits)
                if nxt is None:
                    nxt = torch.cat([tokens[:, 2 + i :], tokens.new_zeros(B, 1 + i)], 1)[:, :R]
                tok = nxt


def load_draft(folder, dtype=torch.float64, max_pos=4096):
    """An exported draft folder (config.json + model.safetensors) → EagleDraft holding exactly its weights."""
    import json
    import os

    from target import read_safetensors, to_tensor

    with open(os.path.join(folder, "config.json")) as f:
        c = json.load(f)
    t = {n: to_tensor(*v) for n, v in read_safetensors(os.path.join(folder, "model.safetensors")).items()}
    d = EagleDraft(c, t["embed_tokens.weight"], max_pos).to(dtype)
    with torch.no_grad():
        for name, p in d.tensors().items():
            p.copy_(t.pop(name))
    if t:
        raise ValueError(f"{folder}: tensors not read: {sorted(t)}")
    d.eval()
    return d
