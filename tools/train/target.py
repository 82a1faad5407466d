# The shipped demo target, read back from its release-format folder into model.py's K3Tiny
# (dev-only; docs/TEST-MODELS.md "Demo draft"). The draft is trained and measured against exactly
# the weights k3 ships (bf16 trunk, MXFP4 experts decoded exactly), not a training checkpoint:
# `check_reference` compares this model's float64 logits with assets/demo/reference.json.
#
# Also the target's side of an EAGLE-3 draft: `forward_taps` returns every position's logits and the
# prefix-sum stream P after the given ONE-based completed layers (DRAFTERS.md §2.3: the layer's
# output after its MLP add, not the AttnRes mixture), as tools/reference/model.ts's forwardAll.
import base64
import json
import os
import struct

import torch

from model import K3Tiny, LatentMoE, attnres_mix, mxfp4_decode, rmsnorm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LM = "language_model.model."


def read_safetensors(path):
    """name → (dtype, shape, raw bytes) of one safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        out[name] = (h["dtype"], h["shape"], raw[8 + n + a : 8 + n + b])
    return out


def to_tensor(dtype, shape, data):
    if dtype == "BF16":
        u = torch.frombuffer(bytearray(data), dtype=torch.int16).to(torch.int32) << 16
        return u.view(torch.float32).to(torch.float64).reshape(shape)
    if dtype == "F32":
        return torch.frombuffer(bytearray(data), dtype=torch.float32).to(torch.float64).reshape(shape)
    if dtype == "U8":
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(shape)
    raise ValueError(f"dtype {dtype}")


def load_folder(folder):
    """Every tensor of a release-format folder (index + shards) as float64 / uint8 tensors."""
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for s in shards:
        for name, (dt, shape, data) in read_safetensors(os.path.join(folder, s)).items():
            out[name] = to_tensor(dt, shape, data)
    return out


def load_target(folder, cfg):
    """K3Tiny (float64) holding exactly the folder's weights."""
    t = load_folder(folder)
    m = K3Tiny(cfg).double()
    sd = {}
    g = lambda n: t.pop(LM + n)  # noqa: E731
    sd["embed_tokens.weight"] = g("embed_tokens.weight")
    sd["lm_head.weight"] = t.pop("language_model.lm_head.weight")
    for n in ("norm", "output_attn_res_norm"):
        sd[n] = g(n + ".weight")
    sd["output_attn_res_proj"] = g("output_attn_res_proj.weight").reshape(-1)
    for l, layer in enumerate(m.layers):
        p = f"layers.{l}."
        for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"):
            sd[p + n] = g(p + n + ".weight")
        for n in ("self_attention_res_proj", "mlp_res_proj"):
            sd[p + n] = g(p + n + ".weight").reshape(-1)
        for name in layer.self_attn.state_dict():
            # Linear weights keep their names; bare Parameters carry ".weight" in the release, except
            # A_log (shipped with head_dim entries, the first H used) and dt_bias
            if name.endswith(".weight") or name == "dt_bias":
                v = g(f"{p}self_attn.{name}")
            elif name == "A_log":
                v = g(f"{p}self_attn.A_log")[: layer.self_attn.H]
            else:
                v = g(f"{p}self_attn.{name}.weight")
            sd[f"{p}self_attn.{name}"] = v
        f = layer.ffn
        if not isinstance(f, LatentMoE):
            for n in ("gate_proj", "up_proj", "down_proj"):
                sd[f"{p}ffn.{n}.weight"] = g(f"{p}mlp.{n}.weight")
            continue
        mo = p + "block_sparse_moe."
        sd[f"{p}ffn.gate.weight"] = g(mo + "gate.weight")
        sd[f"{p}ffn.e_score_correction_bias"] = g(mo + "gate.e_score_correction_bias")
        for n in ("gate_proj", "up_proj", "down_proj"):
            sd[f"{p}ffn.shared_experts.{n}.weight"] = g(f"{mo}shared_experts.{n}.weight")
        sd[f"{p}ffn.routed_expert_down_proj.weight"] = g(mo + "routed_expert_down_proj.weight")
        sd[f"{p}ffn.routed_expert_up_proj.weight"] = g(mo + "routed_expert_up_proj.weight")
        sd[f"{p}ffn.routed_expert_norm"] = g(mo + "routed_expert_norm.weight")
        for w in ("w1", "w2", "w3"):
            sd[f"{p}ffn.{w}"] = torch.stack([mxfp4_decode(g(f"{mo}experts.{e}.{w}.weight_packed"), g(f"{mo}experts.{e}.{w}.weight_scale")) for e in range(f.N)])
    m.load_state_dict(sd)
    left = [n for n in t if not n.startswith(("vision_tower", "mm_projector"))]
    if left:
        raise ValueError(f"{folder}: tensors not read: {left[:5]}")
    m.eval()
    return m


def load_demo_target(out):
    """The shipped demo (unpacked into OUT/demo-target by tools/train/unpack.ts) as a float64 K3Tiny."""
    with open(os.path.join(HERE, "model-config.json")) as f:
        return load_target(os.path.join(out, "demo-target"), json.load(f))


def embedding_bytes(folder):
    """The target's embed_tokens bytes (BF16 [V, E]) as stored: the draft's embed_tokens copies them."""
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        shard = json.load(f)["weight_map"][LM + "embed_tokens.weight"]
    dt, shape, data = read_safetensors(os.path.join(folder, shard))[LM + "embed_tokens.weight"]
    assert dt == "BF16"
    return shape, data


@torch.no_grad()
def forward_taps(model, ids, layer_ids, recurrent=False):
    """ids [B, T] → (logits [B, T, V], taps [B, T, n·E] in ascending id order, final [B, T, E]).
    taps: P after the MLP add of zero-based layer id − 1, per one-based id (DRAFTERS.md §2.3).
    final: the normed state lm_head reads (target probabilities = softmax(lm_head · final))."""
    P = model.embed_tokens(ids)
    bank, taps = [], {}
    for l, layer in enumerate(model.layers):
        P, bank = layer(P, bank, recurrent)
        if l + 1 in layer_ids:
            taps[l + 1] = P
    h = attnres_mix(P, bank, model.output_attn_res_proj, model.output_attn_res_norm, model.eps)
    final = rmsnorm(h, model.norm, model.eps)
    return model.lm_head(final), torch.cat([taps[i] for i in layer_ids], dim=-1), final


def check_reference(model):
    """Max |Δlogit| of this model's float64 forward against the shipped reference.json (3 prompts)."""
    with open(os.path.join(ROOT, "assets", "demo", "reference.json")) as f:
        refs = json.load(f)["prompts"]
    worst = 0.0
    for p in refs:
        want = torch.frombuffer(bytearray(base64.b64decode(p["logits_f32_base64"])), dtype=torch.float32).double()
        got = model(torch.tensor([p["ids"]]), recurrent=True)[0, -1]
        worst = max(worst, (got - want).abs().max().item())
    return worst
