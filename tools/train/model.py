# Kimi K3's language model in PyTorch, written from docs/MODEL.md §4 (the shared spec), at the
# tiny size of model-config.json. It is the model k3 runs: same tensors (names in export_tensors),
# same math, including every §7 trap avoided (comments name them). Dev-only (tools/train).
#
# Two KDA paths with the same math: `kda_recurrent` is MODEL.md's per-token loop (used for the
# float64 reference logits), `kda_chunked` is an exact chunkwise rewrite of the same recurrence
# (used for training: T/C sequential steps instead of T). check.py / train.py --selftest compare
# them in float64.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SITU_B1 = 4.0  # activation_situ_beta
SITU_B2 = 25.0  # activation_situ_linear_beta
LORA_EPS = 1e-6  # q_a_layernorm / kv_a_layernorm: the released code passes no eps (trap 7.4)
CONV = 4  # short_conv_kernel_size
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def rmsnorm(x, w, eps):
    # w · x / sqrt(mean(x²) + eps), eps inside the root; statistics in f32 or better (bf16 autocast
    # activations are widened first)
    if x.dtype in (torch.bfloat16, torch.float16):
        x = x.float()
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def situ_glu(g, u):
    # a = β1·tanh(g/β1)·sigmoid(g) (sigmoid of the UNCAPPED g); u' = β2·tanh(u/β2); out = a·u'
    return SITU_B1 * torch.tanh(g / SITU_B1) * torch.sigmoid(g) * (SITU_B2 * torch.tanh(u / SITU_B2))


def attnres_mix(P, bank, proj, norm, eps):
    """AttnRes: sources [bank..., P]; score_i = Σ_d RMSNorm(V_i)[d]·norm[d]·proj[d] (no scaling);
    returns Σ p_i·V_i over the RAW sources (trap 7.7)."""
    V = torch.stack(bank + [P], dim=0)  # [S, ..., E]
    score = (rmsnorm(V, norm, eps) * proj).sum(-1)  # [S, ...]
    p = torch.softmax(score, dim=0)
    return (p.unsqueeze(-1) * V).sum(0)


# ───────────────────────────── MXFP4 ─────────────────────────────


def mxfp4_quantize(w):
    """Round w [rows, cols] (cols % 32 == 0) to MXFP4: per row and 32-column group an E8M0 scale
    2^(s−127) and E2M1 codes. Of the two candidate exponents (max/scale in (3, 6] or in (6, 12],
    the latter clamping at ±6) the one with the smaller squared error wins. Returns (codes u8 [rows,
    cols] with bit 3 = sign, scales u8 [rows, cols/32], dequantised float tensor)."""
    rows, cols = w.shape
    g = w.detach().double().reshape(rows, cols // 32, 32)
    amax = g.abs().amax(-1)  # [rows, groups]
    table = torch.tensor(E2M1, dtype=torch.float64)
    best = None
    e_hi = torch.ceil(torch.log2(torch.clamp(amax, min=1e-30) / 6.0))
    for e in (e_hi, e_hi - 1):
        e = torch.clamp(e, -127, 127)
        scale = torch.pow(2.0, e).unsqueeze(-1)
        mag = (g.abs() / scale).unsqueeze(-1)  # [rows, groups, 32, 1]
        idx = (mag - table).abs().argmin(-1)  # nearest magnitude, ties → the smaller code
        deq = table[idx] * scale * torch.sign(g)
        err = ((deq - g) ** 2).sum(-1)
        if best is None:
            best = [e, idx, deq, err]
        else:
            better = err < best[3]
            best[0] = torch.where(better, e, best[0])
            best[1] = torch.where(better.unsqueeze(-1), idx, best[1])
            best[2] = torch.where(better.unsqueeze(-1), deq, best[2])
            best[3] = torch.where(better, err, best[3])
    e, idx, deq, _ = best
    sign = (g < 0) & (idx > 0)  # −0 stored as +0
    codes = (idx + 8 * sign.long()).to(torch.uint8).reshape(rows, cols)
    scales = (e + 127).to(torch.uint8)
    return codes, scales, deq.reshape(rows, cols).to(w.dtype)


def mxfp4_pack(codes):
    """E2M1 codes [rows, cols] → packed bytes [rows, cols/2]: element 2j in the LOW nibble (trap 7.6)."""
    c = codes.to(torch.int32)
    return (c[:, 0::2] | (c[:, 1::2] << 4)).to(torch.uint8)


def mxfp4_decode(packed, scales):
    """packed [rows, cols/2], scales [rows, cols/32] → float64 [rows, cols] (scale 255 → group 0)."""
    rows = packed.shape[0]
    p = packed.to(torch.int64)
    codes = torch.stack([p & 15, p >> 4], dim=-1).reshape(rows, -1)
    table = torch.tensor(E2M1, dtype=torch.float64)
    val = table[codes & 7] * torch.where(codes >= 8, -1.0, 1.0).double()
    s = scales.to(torch.int64)
    sc = torch.where(s == 255, torch.zeros((), dtype=torch.float64), torch.pow(2.0, (s - 127).double()))
    return val * sc.repeat_interleave(32, dim=1)


class FakeMXFP4(torch.autograd.Function):
    """Quantisation-aware training: forward with MXFP4-rounded weights, straight-through gradient."""

    @staticmethod
    def forward(ctx, w):
        return mxfp4_quantize(w)[2]

    @staticmethod
    def backward(ctx, grad):
        return grad


def bf16_round_(t):
    with torch.no_grad():
        t.copy_(t.to(torch.bfloat16).to(t.dtype))


# ───────────────────────────── KDA ─────────────────────────────


def kda_recurrent(q, k, v, g, beta):
    """MODEL.md §4 KDA.6, per token and head, in this order: S ← diag(α)S; u = Sᵀk;
    S ← S + k ⊗ (β(v − u)); o = SᵀQ from the UPDATED state (trap 7.5).
    q, k, v, g: [B, T, H, D] (q, k normalised, q scaled; g = log α); beta [B, T, H] → o [B, T, H, D]."""
    B, T, H, D = q.shape
    S = q.new_zeros(B, H, D, D)  # [key i, value j]
    outs = []
    for t in range(T):
        S = S * torch.exp(g[:, t]).unsqueeze(-1)
        u = torch.einsum("bhij,bhi->bhj", S, k[:, t])
        S = S + k[:, t].unsqueeze(-1) * (beta[:, t].unsqueeze(-1) * (v[:, t] - u)).unsqueeze(-2)
        outs.append(torch.einsum("bhij,bhi->bhj", S, q[:, t]))
    return torch.stack(outs, dim=1)


def kda_chunked(q, k, v, g, beta, C=8):  # C: a power of two, ≤ 8 (see the range note below)
    """The same recurrence, chunk by chunk (exact in exact arithmetic). Inside a chunk, with
    b_t = Σ_{s≤t} g_s (cumulative log-decay from the chunk start) and S0 the state at the start:
      δ_t = β_t (v_t − S0ᵀ(e^{b_t}⊙k_t) − Σ_{s<t} M_ts δ_s),  M_ts = Σ_i k_t[i] k_s[i] e^{b_t[i]−b_s[i]}
      o_t = S0ᵀ(e^{b_t}⊙q_t) + Σ_{s≤t} Mq_ts δ_s,           Mq_ts = Σ_i q_t[i] k_s[i] e^{b_t[i]−b_s[i]}
      S_C = e^{b_C}⊙S0 + Σ_s (e^{b_C−b_s}⊙k_s) δ_sᵀ
    (S_t = D_t S_{t−1} + k_t δ_tᵀ unrolled). M and Mq are matmuls of e^{b}⊙k (or q) with e^{−b}⊙k:
    g > gate_lower_bound = −5 per token, so |b| < 5·C = 40 and e^{±40} is far inside f32's range
    (no overflow, no subnormals; C = 16 would reach e^{±80}, too close). The unit lower
    triangular system (I + diag(β)M)Δ = diag(β)(V − K̃S0) is solved once per chunk."""
    B, T, H, D = q.shape
    pad = (-T) % C
    if pad:
        z = lambda x: F.pad(x, (0, 0, 0, 0, 0, pad))  # noqa: E731
        q, k, v, g = z(q), z(k), z(v), z(g)
        beta = F.pad(beta, (0, 0, 0, pad))
    n = (T + pad) // C
    r = lambda x: x.reshape(B, n, C, H, D).permute(0, 3, 1, 2, 4)  # [B, H, n, C, D]  # noqa: E731
    q, k, v, g = r(q), r(k), r(v), r(g)
    beta = beta.reshape(B, n, C, H).permute(0, 3, 1, 2).unsqueeze(-1)  # [B, H, n, C, 1]
    b = g.cumsum(-2)
    eb, enb = torch.exp(b), torch.exp(-b)
    kt, qt, kinv = k * eb, q * eb, k * enb  # e^{b_t}⊙k_t, e^{b_t}⊙q_t, e^{−b_s}⊙k_s
    kinvT = kinv.transpose(-1, -2)
    M = torch.tril(kt @ kinvT, -1)  # [.., t, s], s < t
    Mq = torch.tril(qt @ kinvT)  # s ≤ t
    # A = I + N with N = diag(β)M strictly lower, so N^C = 0 and A⁻¹ = Σ_{j<C} (−N)^j
    # = (I − N)(I + N²)(I + N⁴)… (C = 8: three factors): batched matmuls, no per-matrix solver loop.
    N = beta * M
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    Ainv, Np = eye - N, N @ N
    for _ in range(int(math.log2(C)) - 1):
        Ainv = Ainv @ (eye + Np)
        Np = Np @ Np
    U = Ainv @ (beta * v)
    W = Ainv @ (beta * kt)
    kend = (kinv * eb[..., -1:, :]).transpose(-1, -2)  # (e^{b_C − b_s}⊙k_s)ᵀ  [.., D, C]
    S = q.new_zeros(B, H, D, D)
    outs = []
    # unbind, not indexing: the backward of x[:, :, c] would allocate a zero tensor of x's full size per chunk
    for Uc, Wc, qc, Mqc, ebc, kc in zip(U.unbind(2), W.unbind(2), qt.unbind(2), Mq.unbind(2), eb.unbind(2), kend.unbind(2)):
        delta = Uc - (Wc @ S).to(Uc.dtype)  # [B, H, C, D]
        outs.append((qc @ S).to(Uc.dtype) + (Mqc @ delta).to(Uc.dtype))
        S = ebc[..., -1, :].unsqueeze(-1) * S + (kc @ delta).to(S.dtype)
    o = torch.stack(outs, dim=2)  # [B, H, n, C, D]
    return o.permute(0, 2, 3, 1, 4).reshape(B, n * C, H, D)[:, :T]


class KDA(nn.Module):
    def __init__(s, cfg):
        super().__init__()
        E, H, D = cfg["hidden"], cfg["kdaHeads"], cfg["kdaHeadDim"]
        P = H * D
        s.H, s.D, s.eps, s.lower = H, D, cfg["rmsEps"], cfg["gateLowerBound"]
        lin = lambda i, o: nn.Linear(i, o, bias=False)  # noqa: E731
        s.q_proj, s.k_proj, s.v_proj, s.g_proj = lin(E, P), lin(E, P), lin(E, P), lin(E, P)
        s.o_proj = lin(P, E)
        s.f_a_proj, s.f_b_proj, s.b_proj = lin(E, D), lin(D, P), lin(E, H)
        # depthwise causal conv weights [P, 1, 4] (f32 in the release); tap 3 = current token
        conv = torch.empty(P, 1, CONV).uniform_(-0.3, 0.3)
        conv[:, 0, CONV - 1] += 1.0
        s.q_conv1d, s.k_conv1d, s.v_conv1d = (nn.Parameter(conv.clone()) for _ in range(3))
        # A_log ships with D entries, only the first H are used (trap 7.1); the tail stays zero
        s.A_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, H)))
        # dt_bias: decays α between ~0.5 and ~0.995 per token at f = 0 (half-lives 1..128 tokens)
        halflife = torch.exp(torch.empty(P).uniform_(0.0, math.log(128.0)))
        alpha = torch.pow(0.5, 1.0 / halflife)
        x = torch.logit(torch.log(alpha) / s.lower)  # sigmoid(x) = g / lower
        s.dt_bias = nn.Parameter(x / torch.exp(s.A_log.detach()).repeat_interleave(D))
        s.o_norm = nn.Parameter(torch.ones(D))

    def forward(s, x, recurrent=False):
        B, T, _ = x.shape
        H, D = s.H, s.D

        def conv_silu(y, w):  # y [B, T, P] → depthwise causal conv (zero history), then SiLU
            out = F.conv1d(y.transpose(1, 2), w, padding=CONV - 1, groups=w.shape[0])[..., :T]
            return F.silu(out.transpose(1, 2))

        q = conv_silu(s.q_proj(x), s.q_conv1d).reshape(B, T, H, D)
        k = conv_silu(s.k_proj(x), s.k_conv1d).reshape(B, T, H, D)
        v = conv_silu(s.v_proj(x), s.v_conv1d).reshape(B, T, H, D)
        if q.dtype == torch.bfloat16:  # bf16 autocast (training): normalise in f32
            q, k, v = q.float(), k.float(), v.float()
        # L2 with a SUM of squares (trap 7.5), then q · D^-0.5
        q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) * (D**-0.5)
        k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        f = s.f_b_proj(s.f_a_proj(x)) + s.dt_bias  # [B, T, P]
        a = torch.exp(s.A_log[:H]).repeat_interleave(D)  # per HEAD (trap 7.1)
        g = (s.lower * torch.sigmoid(a * f)).reshape(B, T, H, D)  # log α ∈ (lower, 0)
        beta = torch.sigmoid(s.b_proj(x))  # [B, T, H]
        if recurrent:
            o = kda_recurrent(q, k, v, g, beta)
        else:
            # elementwise work (cumulative decays, exponentials) in f32; under bf16 autocast (training
            # only) the chunk matmuls run in bf16 like every other matmul; the state S stays f32
            wide = lambda t: t.float() if t.dtype == torch.bfloat16 else t  # noqa: E731
            o = kda_chunked(wide(q), wide(k), wide(v), wide(g), wide(beta))
        o = rmsnorm(o, s.o_norm, s.eps).reshape(B, T, H * D) * torch.sigmoid(s.g_proj(x))  # norm, then gate
        return s.o_proj(o)


class MLA(nn.Module):
    def __init__(s, cfg):
        super().__init__()
        E, Hm = cfg["hidden"], cfg["mlaHeads"]
        s.Hm, s.dn, s.dr, s.dv, s.R = Hm, cfg["qkNope"], cfg["qkRope"], cfg["vHead"], cfg["kvLoraRank"]
        lin = lambda i, o: nn.Linear(i, o, bias=False)  # noqa: E731
        s.q_a_proj = lin(E, cfg["qLoraRank"])
        s.q_a_layernorm = nn.Parameter(torch.ones(cfg["qLoraRank"]))
        s.q_b_proj = lin(cfg["qLoraRank"], Hm * (s.dn + s.dr))
        s.kv_a_proj_with_mqa = lin(E, s.R + s.dr)
        s.kv_a_layernorm = nn.Parameter(torch.ones(s.R))
        s.kv_b_proj = lin(s.R, Hm * (s.dn + s.dv))
        s.o_proj = lin(Hm * s.dv, E)
        s.g_proj = lin(E, Hm * s.dv)

    def forward(s, x, recurrent=False):
        B, T, _ = x.shape
        Hm, dn, dr, dv, R = s.Hm, s.dn, s.dr, s.dv, s.R
        q = s.q_b_proj(rmsnorm(s.q_a_proj(x), s.q_a_layernorm, LORA_EPS)).reshape(B, T, Hm, dn + dr)
        c = s.kv_a_proj_with_mqa(x)
        kv = s.kv_b_proj(rmsnorm(c[..., :R], s.kv_a_layernorm, LORA_EPS)).reshape(B, T, Hm, dn + dv)
        kr = c[..., R:].unsqueeze(2).expand(B, T, Hm, dr)  # shared by all heads, not normed, NO rotary (trap 7.3)
        key = torch.cat([kv[..., :dn], kr], dim=-1)
        scores = torch.einsum("bthd,bshd->bhts", q, key) * (dn + dr) ** -0.5  # scale 192^-0.5 in the release
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        p = torch.softmax(scores.float().masked_fill(mask, -math.inf), dim=-1) if scores.dtype == torch.bfloat16 else torch.softmax(scores.masked_fill(mask, -math.inf), dim=-1)
        o = torch.einsum("bhts,bshd->bthd", p.to(kv.dtype), kv[..., dn:]).reshape(B, T, Hm * dv)
        return s.o_proj(o * torch.sigmoid(s.g_proj(x)))  # gate before o_proj, no norm


class SituFFN(nn.Module):
    def __init__(s, E, I):
        super().__init__()
        s.gate_proj = nn.Linear(E, I, bias=False)
        s.up_proj = nn.Linear(E, I, bias=False)
        s.down_proj = nn.Linear(I, E, bias=False)

    def forward(s, x):
        return s.down_proj(situ_glu(s.gate_proj(x), s.up_proj(x)))


class LatentMoE(nn.Module):
    def __init__(s, cfg):
        super().__init__()
        E, N, Z, Fw = cfg["hidden"], cfg["experts"], cfg["latent"], cfg["moeInter"]
        s.N, s.k, s.scaling, s.eps = N, cfg["topK"], cfg["routedScaling"], cfg["rmsEps"]
        s.gate = nn.Linear(E, N, bias=False)
        # selection bias: steers top-k only, never the combine weights (trap 7.2); not trained by
        # gradient, moved by the load-balancing update (train.py)
        s.register_buffer("e_score_correction_bias", torch.zeros(N))
        s.shared_experts = SituFFN(E, cfg["sharedExperts"] * Fw)
        s.routed_expert_down_proj = nn.Linear(E, Z, bias=False)
        s.routed_expert_norm = nn.Parameter(torch.ones(Z))
        s.routed_expert_up_proj = nn.Linear(Z, E, bias=False)
        s.w1 = nn.Parameter(torch.randn(N, Fw, Z) * Z**-0.5)  # gate
        s.w3 = nn.Parameter(torch.randn(N, Fw, Z) * Z**-0.5)  # up
        s.w2 = nn.Parameter(torch.randn(N, Z, Fw) * Fw**-0.5)  # down
        s.fake_quant = False
        s.last_load = None  # tokens per expert in the last forward (for the bias update)

    def expert_weights(s):
        if not s.fake_quant:
            return s.w1, s.w3, s.w2
        fq = lambda w: FakeMXFP4.apply(w.reshape(-1, w.shape[-1])).reshape(w.shape)  # noqa: E731 (groups along the input dim)
        return fq(s.w1), fq(s.w3), fq(s.w2)

    def route(s, x):
        with torch.autocast("cpu", enabled=False):  # router logits in f32 or better (MODEL.md §4)
            logits = F.linear(x, s.gate.weight.to(x.dtype))
        sc = torch.sigmoid(logits)
        choice = sc + s.e_score_correction_bias.to(sc.dtype)
        idx = torch.topk(choice, s.k, dim=-1, sorted=True).indices
        w = sc.gather(-1, idx)  # UNBIASED scores
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * s.scaling
        return idx, w.to(x.dtype), sc

    def forward(s, x, recurrent=False):
        shp = x.shape
        xf = x.reshape(-1, shp[-1])  # f32/f64 (the normed residual stream)
        idx, w, _ = s.route(xf)
        s.last_idx = idx.detach()
        s.last_load = torch.bincount(idx.reshape(-1), minlength=s.N).detach()
        z = s.routed_expert_down_proj(xf)  # [T, Z]
        w1, w3, w2 = s.expert_weights()
        # tokens grouped by expert: each expert runs on the tokens that chose it
        flat = idx.reshape(-1)
        tok = torch.arange(xf.shape[0], device=x.device).repeat_interleave(s.k)
        order = torch.argsort(flat, stable=True)
        counts = s.last_load.tolist()
        zs = z[tok[order]]
        outs = []
        # split, not slicing: a slice's backward allocates a zero tensor of the full size per expert
        for e, ze in enumerate(torch.split(zs, counts)):
            if ze.shape[0]:
                outs.append(situ_glu(ze @ w1[e].t(), ze @ w3[e].t()) @ w2[e].t())
        ye = torch.cat(outs)
        contrib = ye * w.reshape(-1)[order].unsqueeze(-1).to(ye.dtype)  # Σ_j w_j · y_j
        y = torch.zeros(xf.shape[0], ye.shape[-1], dtype=contrib.dtype, device=x.device).index_add(0, tok[order], contrib)
        y = rmsnorm(y, s.routed_expert_norm, s.eps)  # on the aggregate, once (trap 7.9)
        out = s.routed_expert_up_proj(y) + s.shared_experts(xf)  # shared on full-width x, unweighted
        return out.reshape(shp)


class Layer(nn.Module):
    def __init__(s, cfg, l, is_mla):
        super().__init__()
        E = cfg["hidden"]
        s.l, s.block, s.eps = l, cfg["attnResBlock"], cfg["rmsEps"]
        s.input_layernorm = nn.Parameter(torch.ones(E))
        s.post_attention_layernorm = nn.Parameter(torch.ones(E))
        s.self_attention_res_norm = nn.Parameter(torch.ones(E))
        s.mlp_res_norm = nn.Parameter(torch.ones(E))
        s.self_attention_res_proj = nn.Parameter(torch.zeros(E))  # zero: uniform mix at init
        s.mlp_res_proj = nn.Parameter(torch.zeros(E))
        s.self_attn = MLA(cfg) if is_mla else KDA(cfg)
        s.ffn = SituFFN(E, cfg["denseInter"]) if l == 0 else LatentMoE(cfg)

    def forward(s, P, bank, recurrent=False):
        h = attnres_mix(P, bank, s.self_attention_res_proj, s.self_attention_res_norm, s.eps) if bank else P
        if s.l % s.block == 0:  # block boundary: snapshot P and clear it (trap 7.7)
            bank = bank + [P]
            P = None
        dt = h.dtype  # the residual stream stays in the embedding's dtype (f32 / f64), also under autocast
        a = s.self_attn(rmsnorm(h, s.input_layernorm, s.eps), recurrent).to(dt)
        P = a if P is None else P + a
        h2 = attnres_mix(P, bank, s.mlp_res_proj, s.mlp_res_norm, s.eps)
        return P + s.ffn(rmsnorm(h2, s.post_attention_layernorm, s.eps)).to(dt), bank


def mla_layers_one_based(L):
    """Multiples of 4 plus the last two (the release's [4, 8, …, 92, 93]); lists are one-based (trap 7.8)."""
    return sorted({l for l in range(4, L + 1, 4)} | {L - 1, L})


class K3Tiny(nn.Module):
    def __init__(s, cfg):
        super().__init__()
        E, V, L = cfg["hidden"], cfg["vocab"], cfg["layers"]
        s.cfg, s.eps = cfg, cfg["rmsEps"]
        mla = set(mla_layers_one_based(L))
        s.embed_tokens = nn.Embedding(V, E)
        nn.init.normal_(s.embed_tokens.weight, std=1.0)
        s.layers = nn.ModuleList([Layer(cfg, l, (l + 1) in mla) for l in range(L)])
        s.norm = nn.Parameter(torch.ones(E))
        s.output_attn_res_norm = nn.Parameter(torch.ones(E))
        s.output_attn_res_proj = nn.Parameter(torch.zeros(E))
        s.lm_head = nn.Linear(E, V, bias=False)
        for m in s.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=m.in_features**-0.5)

    def moe_layers(s):
        return [m.ffn for m in s.layers if isinstance(m.ffn, LatentMoE)]

    def hidden(s, ids, recurrent=False):
        P = s.embed_tokens(ids)  # no scaling
        bank = []
        for layer in s.layers:
            P, bank = layer(P, bank, recurrent)
        return attnres_mix(P, bank, s.output_attn_res_proj, s.output_attn_res_norm, s.eps)  # final mix (trap 7.7)

    def forward(s, ids, recurrent=False):
        return s.lm_head(rmsnorm(s.hidden(ids, recurrent), s.norm, s.eps))
