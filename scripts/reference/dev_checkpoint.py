"""DEVELOPMENT ONLY: a tiny seeded Qwen3-VL checkpoint and a plain round-to-nearest W4 bundle in Python.

The committed goldens never come from this file: they come from the C++ `gpnpu make-checkpoint`
and `gpnpu quantize` (scripts/reference/check_goldens.sh). This exists so the reference can be
developed and self-tested without the C++ binary, and so the sensitivity study can be rerun on
any config.

  /usr/bin/python3 scripts/reference/dev_checkpoint.py --out DIR [--seed N] [--bundle FILE]
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import save as st_save  # noqa: E402

# Mirrors the shapes and weight scales of the C++ config "tiny" (model/checkpoint/config.cpp, model/checkpoint/synthetic.h);
# the values differ (another generator), so goldens never come from here.
TINY = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "image_token_id": 151655, "video_token_id": 151656,
    "vision_start_token_id": 151652, "vision_end_token_id": 151653,
    "tie_word_embeddings": True,
    "text_config": {
        "model_type": "qwen3_vl_text", "vocab_size": 151936, "hidden_size": 128, "num_hidden_layers": 5,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 384,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 5000000.0, "attention_bias": False,
        "rope_scaling": {"rope_type": "default", "mrope_interleaved": True, "mrope_section": [6, 5, 5]},
        "tie_word_embeddings": True, "bos_token_id": 151643, "eos_token_id": 151645,
    },
    "vision_config": {
        "depth": 4, "hidden_size": 128, "num_heads": 4, "intermediate_size": 256,
        "hidden_act": "gelu_pytorch_tanh", "patch_size": 16, "temporal_patch_size": 2, "in_channels": 3,
        "spatial_merge_size": 2, "out_hidden_size": 128, "num_position_embeddings": 256,
        "deepstack_visual_indexes": [1, 2, 3],
    },
}


def shapes(cfg):
    tc, vc = cfg["text_config"], cfg["vision_config"]
    D, Dv, Iv = tc["hidden_size"], vc["hidden_size"], vc["intermediate_size"]
    m2 = vc["spatial_merge_size"] ** 2
    s = {"model.visual.patch_embed.proj.weight": [Dv, vc["in_channels"], vc["temporal_patch_size"],
                                                   vc["patch_size"], vc["patch_size"]],
         "model.visual.patch_embed.proj.bias": [Dv],
         "model.visual.pos_embed.weight": [vc["num_position_embeddings"], Dv]}
    for b in range(vc["depth"]):
        p = f"model.visual.blocks.{b}."
        s.update({p + "norm1.weight": [Dv], p + "norm1.bias": [Dv], p + "norm2.weight": [Dv], p + "norm2.bias": [Dv],
                  p + "attn.qkv.weight": [3 * Dv, Dv], p + "attn.qkv.bias": [3 * Dv],
                  p + "attn.proj.weight": [Dv, Dv], p + "attn.proj.bias": [Dv],
                  p + "mlp.linear_fc1.weight": [Iv, Dv], p + "mlp.linear_fc1.bias": [Iv],
                  p + "mlp.linear_fc2.weight": [Dv, Iv], p + "mlp.linear_fc2.bias": [Dv]})
    mk = [("model.visual.merger.", Dv)] + [(f"model.visual.deepstack_merger_list.{j}.", m2 * Dv)
                                           for j in range(len(vc["deepstack_visual_indexes"]))]
    for p, nw in mk:
        s.update({p + "norm.weight": [nw], p + "norm.bias": [nw],
                  p + "linear_fc1.weight": [m2 * Dv, m2 * Dv], p + "linear_fc1.bias": [m2 * Dv],
                  p + "linear_fc2.weight": [vc["out_hidden_size"], m2 * Dv], p + "linear_fc2.bias": [vc["out_hidden_size"]]})
    H, KV, hd, I = tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"], tc["intermediate_size"]
    s["model.language_model.embed_tokens.weight"] = [tc["vocab_size"], D]
    for i in range(tc["num_hidden_layers"]):
        p = f"model.language_model.layers.{i}."
        s.update({p + "input_layernorm.weight": [D], p + "post_attention_layernorm.weight": [D],
                  p + "self_attn.q_proj.weight": [H * hd, D], p + "self_attn.k_proj.weight": [KV * hd, D],
                  p + "self_attn.v_proj.weight": [KV * hd, D], p + "self_attn.o_proj.weight": [D, H * hd],
                  p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd],
                  p + "mlp.gate_proj.weight": [I, D], p + "mlp.up_proj.weight": [I, D], p + "mlp.down_proj.weight": [D, I]})
    s["model.language_model.norm.weight"] = [D]
    return s


def make(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    Dv = cfg["vision_config"]["hidden_size"]
    out = {}
    for name, shp in shapes(cfg).items():
        if name.endswith("norm.weight") or "layernorm" in name or name.endswith(("norm1.weight", "norm2.weight")):
            t = 1.0 + 0.02 * torch.randn(shp, generator=g)
        elif name.endswith(".bias"):
            t = 0.02 * torch.randn(shp, generator=g)
        elif name == "model.visual.pos_embed.weight":
            t = 0.3 * torch.randn(shp, generator=g)
        else:
            t = 0.02 * torch.randn(shp, generator=g)
            if name.endswith("attn.qkv.weight"):  # larger Q/K rows so the tower's attention is not uniform
                t[: 2 * Dv] *= 6.0
        out[name] = t.to(torch.bfloat16)
    return out


def quantise_rtn(w, bs=128):
    """Plain asymmetric min/max round-to-nearest per (row, 128-column block); fp16 scales, u8 zeros."""
    rows, cols = w.shape
    nb = (cols + bs - 1) // bs
    pad = nb * bs - cols
    wp = torch.nn.functional.pad(w, (0, pad))
    blk = wp.reshape(rows, nb, bs)
    if pad:  # padded columns must not widen the range
        last = blk[:, -1, : bs - pad]
        lo_last, hi_last = last.min(dim=1).values, last.max(dim=1).values
    lo = blk.min(dim=2).values.clamp(max=0)
    hi = blk.max(dim=2).values.clamp(min=0)
    if pad:
        lo[:, -1], hi[:, -1] = lo_last.clamp(max=0), hi_last.clamp(min=0)
    s = ((hi - lo) / 15).clamp(min=1e-8).to(torch.float16)
    sf = s.to(torch.float32)
    z = torch.round(-lo / sf).clamp(0, 15)
    q = torch.round(blk / sf[:, :, None] + z[:, :, None]).clamp(0, 15).to(torch.uint8).reshape(rows, nb * bs)[:, :cols]
    if cols % 2:
        q = torch.nn.functional.pad(q, (0, 1))
    codes = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)
    return codes, s, z.to(torch.uint8)


def is_linear(name, shp):
    return name.endswith(".weight") and (len(shp) == 2 and "pos_embed" not in name or "patch_embed" in name)


def write_bundle(ckpt, path):
    out = {}
    for name, t in ckpt.items():
        w = t.to(torch.float32)
        if is_linear(name, list(t.shape)):
            c, s, z = quantise_rtn(w.reshape(w.shape[0], -1))
            out[name + ".qcodes"], out[name + ".scales"], out[name + ".zeros"] = c, s, z
        else:
            out[name] = w
    st_save(path, out, {"format": "gpnpu-w4a16-dev", "note": "development bundle from dev_checkpoint.py"})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bundle", help="also write a development W4 bundle here")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ck = make(TINY, a.seed)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(TINY, f, indent=2)
    st_save(os.path.join(a.out, "model.safetensors"), ck, {"format": "pt", "generator": "dev_checkpoint.py"})
    if a.bundle:
        write_bundle(ck, a.bundle)
    print(f"dev checkpoint: {len(ck)} tensors, {sum(math.prod(t.shape) for t in ck.values())} params -> {a.out}")


if __name__ == "__main__":
    main()
