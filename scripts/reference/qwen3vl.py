"""Independent float32 PyTorch reference of Qwen3-VL (vision tower + DeepStack + text decoder).

Written from docs/model.md (the project's model spec), not from any C++ in this
repository and without the `transformers` package. Runs on Debian's python3-torch 1.13 (CPU).

Contract:
  cfg = Config.from_dir(model_dir)                       # reads config.json (HF layout)
  w   = load_fp32(model_dir)                             # model.safetensors, bf16 -> fp32
  w   = load_w4a16(bundle_path, model_dir)               # dequantised codes of our quantiser
  m   = Qwen3VL(cfg, w, bugs=set())                      # bugs: deliberate faults for sensitivity runs
  pos, delta = m.position_ids(ids, grids)                # (3, S) int64 M-RoPE positions, rope delta
  tokens, logits = m.generate(ids, pixels, grids, steps) # greedy; logits (steps+1, vocab) fp32
  logits = m.forward_full(ids, pixels, grids)            # one prefill over the whole sequence, no cache

Everything the config gives is taken from it (tap indices, position-table side, head sizes,
M-RoPE sections); only what the spec says is not in the config is fixed here (LayerNorm eps 1e-6,
the vision rotary base 10000, erf GELU in the mergers).

Units: pixels are the normalised patch rows (N, C*T*P*P) in 2x2 merge-window order (spec 2.3);
grids are (t, h, w) in patches; positions are integers; all compute is float32.
"""
import json
import math
import os

import torch

from safetensors_io import load as st_load, read_header as st_header

IMAGE_PAD_DEFAULT = 151655

# Deliberate faults, for the sensitivity study (README). Each names one way an implementation can go wrong.
KNOWN_BUGS = {
    "no_vision_rope": "tower without its 2-D RoPE",
    "swap_hw_vision_rope": "h and w swapped in the tower's 2-D RoPE",
    "swap_hw_pos_embed": "h and w swapped in the learned position-table lookup",
    "swap_hw_mrope": "h and w swapped in the image tokens' M-RoPE positions",
    "no_deepstack": "DeepStack additions left out",
    "erf_gelu_tower": "erf GELU instead of tanh GELU in the tower blocks",
    "tanh_gelu_merger": "tanh GELU instead of erf GELU in the mergers",
    "chunked_mrope": "Qwen2-VL chunked M-RoPE layout instead of interleaved",
    "no_qk_norm": "q/k per-head RMSNorm left out",
    "act_fp16": "(not a bug) every Linear input rounded to fp16: the A16 noise floor",
}


class Config:
    """The keys of config.json this reference uses, with the spec's names."""

    def __init__(self, d):
        self.raw = d
        tc = d.get("text_config", d)
        vc = d["vision_config"]
        self.image_token_id = int(d.get("image_token_id", IMAGE_PAD_DEFAULT))
        self.vision_start_token_id = int(d.get("vision_start_token_id", 151652))
        self.vision_end_token_id = int(d.get("vision_end_token_id", 151653))
        self.tie_word_embeddings = bool(d.get("tie_word_embeddings", tc.get("tie_word_embeddings", True)))
        # text
        self.vocab_size = int(tc["vocab_size"])
        self.hidden_size = int(tc["hidden_size"])
        self.num_layers = int(tc["num_hidden_layers"])
        self.num_heads = int(tc["num_attention_heads"])
        self.num_kv_heads = int(tc.get("num_key_value_heads", self.num_heads))
        self.head_dim = int(tc.get("head_dim", self.hidden_size // self.num_heads))
        self.intermediate_size = int(tc["intermediate_size"])
        self.rms_norm_eps = float(tc.get("rms_norm_eps", 1e-6))
        rp = tc.get("rope_scaling") or tc.get("rope_parameters") or {}
        self.rope_theta = float(tc.get("rope_theta", rp.get("rope_theta", 5000000.0)))
        self.mrope_section = [int(x) for x in rp.get("mrope_section", [])]
        self.mrope_interleaved = bool(rp.get("mrope_interleaved", True))
        if len(self.mrope_section) != 3 or sum(self.mrope_section) != self.head_dim // 2:
            raise ValueError(f"config.json: text_config rope mrope_section {self.mrope_section} must have 3 entries "
                             f"summing to head_dim/2 = {self.head_dim // 2}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"config.json: num_attention_heads {self.num_heads} is not a multiple of "
                             f"num_key_value_heads {self.num_kv_heads}")
        # vision
        self.v_depth = int(vc["depth"])
        self.v_hidden = int(vc["hidden_size"])
        self.v_heads = int(vc["num_heads"])
        self.v_head_dim = self.v_hidden // self.v_heads
        self.v_intermediate = int(vc["intermediate_size"])
        self.v_act = vc.get("hidden_act", "gelu_pytorch_tanh")
        self.patch_size = int(vc.get("patch_size", 16))
        self.temporal_patch_size = int(vc.get("temporal_patch_size", 2))
        self.in_channels = int(vc.get("in_channels", 3))
        self.merge = int(vc.get("spatial_merge_size", 2))
        self.v_out = int(vc.get("out_hidden_size", self.hidden_size))
        self.num_pos = int(vc["num_position_embeddings"])
        self.pos_side = int(round(math.sqrt(self.num_pos)))
        if self.pos_side * self.pos_side != self.num_pos:
            raise ValueError(f"config.json: vision_config num_position_embeddings {self.num_pos} is not a square")
        self.deepstack = [int(x) for x in vc.get("deepstack_visual_indexes", [])]
        self.v_eps = 1e-6          # spec 3.4: not in config.json
        self.v_rope_theta = 10000.0  # spec 3.3: not in config.json
        self.patch_dim = self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
        if self.v_out != self.hidden_size:
            raise ValueError(f"config.json: vision out_hidden_size {self.v_out} != text hidden_size {self.hidden_size}")

    @staticmethod
    def from_dir(model_dir):
        path = os.path.join(model_dir, "config.json")
        with open(path) as f:
            return Config(json.load(f))


# ----------------------------------------------------------------------------------------------
# weights

def _patch_name():
    return "model.visual.patch_embed.proj.weight"


def _embed_name():
    return "model.language_model.embed_tokens.weight"


def load_fp32(model_dir):
    """model.safetensors (any stored dtype) -> dict name -> float32 tensor."""
    t, _ = st_load(os.path.join(model_dir, "model.safetensors"))
    return {k: v.to(torch.float32) for k, v in t.items()}


def dequant_w4(codes, scales, zeros, cols, name="?", bs=128):
    """Unpacks NAME.qcodes U8 [rows, ceil(cols/2)] (low nibble = even column), F16 scales and U8 zeros
    [rows, nblocks] into float32 [rows, cols]: w = (q - z) * s per block of cols/nblocks (128) columns."""
    rows = codes.shape[0]
    if codes.dtype != torch.uint8 or codes.shape[1] != (cols + 1) // 2:
        raise ValueError(f"bundle: {name}.qcodes {codes.dtype}{list(codes.shape)} is not U8 [{rows}, {(cols + 1) // 2}]")
    nb = scales.shape[1]
    if nb != (cols + bs - 1) // bs or list(zeros.shape) != [rows, nb] or scales.shape[0] != rows:
        raise ValueError(f"bundle: {name} scales {list(scales.shape)} / zeros {list(zeros.shape)} do not match "
                         f"[{rows}, ceil({cols}/{bs})]")
    c = codes.to(torch.int32)
    q = torch.stack([c & 15, c >> 4], dim=-1).reshape(rows, -1)[:, :cols]
    col_block = torch.arange(cols) // bs
    s = scales.to(torch.float32)[:, col_block]
    z = zeros.to(torch.int32)[:, col_block]
    return (q - z).to(torch.float32) * s


def load_w4a16(bundle_path, model_dir):
    """Reads the quantised bundle written by `gpnpu quantize`: every NAME with NAME.qcodes is dequantised
    from the stored codes (never re-quantised), plus its fp16 channels (NAME.fp16_cols, NAME.fp16_w) when
    the bundle keeps some (mixed precision); every other tensor is taken as stored (F32).
    The original shape of each quantised tensor comes from the checkpoint header in model_dir."""
    t, meta = st_load(bundle_path)
    if meta.get("format", "gpnpu-w4a16") not in ("gpnpu-w4a16", "gpnpu-w4a16-dev"):
        raise ValueError(f"bundle {bundle_path}: metadata format '{meta.get('format')}' is not gpnpu-w4a16")
    bs = int(meta.get("block", 128))
    hdr, _, _ = st_header(os.path.join(model_dir, "model.safetensors"))
    out = {}
    for name, v in t.items():
        if name.endswith(".qcodes"):
            base = name[: -len(".qcodes")]
            if base not in hdr:
                raise ValueError(f"bundle: {name} has no tensor {base} in the checkpoint {model_dir}")
            shape = hdr[base]["shape"]
            cols = int(math.prod(shape[1:]))
            w = dequant_w4(v, t[base + ".scales"], t[base + ".zeros"], cols, base, bs)
            if base + ".fp16_cols" in t:  # mixed precision: channels kept in fp16 (the codes encode 0 there)
                kc = t[base + ".fp16_cols"].to(torch.long)
                w[:, kc] += t[base + ".fp16_w"].to(torch.float32)
            out[base] = w.reshape(shape)
        elif name.endswith(".scales") or name.endswith(".zeros") or name.endswith(".fp16_cols") or name.endswith(".fp16_w"):
            base = name.rsplit(".", 1)[0]
            if base + ".qcodes" not in t:
                raise ValueError(f"bundle: {name} without {base}.qcodes")
        else:
            out[name] = v.to(torch.float32)
    missing = [k for k in hdr if k not in out]
    if missing:
        raise ValueError(f"bundle {bundle_path}: {len(missing)} checkpoint tensors missing, e.g. {missing[:3]}")
    return out


# ----------------------------------------------------------------------------------------------
# ops (each follows one formula of the spec)

def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def layer_norm(x, w, b, eps):
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps))


def rotate_half_apply(x, cos, sin):
    """x (..., D); cos/sin (..., D) with the same angle at d and d+D/2 (rotate-half pairing)."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    rot = torch.cat([-x2, x1], dim=-1)
    return x * cos + rot * sin


def linspace_f32(start, end, steps):
    return torch.linspace(float(start), float(end), int(steps), dtype=torch.float32)


def mrope_axis_table(head_dim, section, interleaved=True):
    """Axis (0=t, 1=h, 2=w) of each of the head_dim/2 frequencies (spec 5.2)."""
    n = head_dim // 2
    axis = [0] * n
    if interleaved:
        for a in (1, 2):
            for j in range(a, section[a] * 3, 3):
                axis[j] = a
    else:  # chunked (Qwen2-VL): first section[0] are t, then h, then w
        j = 0
        for a in range(3):
            for _ in range(section[a]):
                axis[j] = a
                j += 1
    return axis


# ----------------------------------------------------------------------------------------------

class Qwen3VL:
    def __init__(self, cfg, weights, bugs=()):
        self.cfg = cfg
        self.w = weights
        self.bugs = set(bugs)
        unknown = self.bugs - set(KNOWN_BUGS)
        if unknown:
            raise ValueError(f"unknown bug names {sorted(unknown)}; known: {sorted(KNOWN_BUGS)}")
        pe = weights[_patch_name()]
        self.patch_w = pe.reshape(pe.shape[0], -1)
        if self.patch_w.shape[1] != cfg.patch_dim:
            raise ValueError(f"{_patch_name()} {list(pe.shape)} does not flatten to [*, {cfg.patch_dim}]")
        self.embed = weights[_embed_name()]
        if cfg.tie_word_embeddings or "lm_head.weight" not in weights:
            self.lm_head = self.embed
        else:
            self.lm_head = weights["lm_head.weight"]
        t = torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).to(torch.float32) / cfg.head_dim
        self.inv_freq = 1.0 / (cfg.rope_theta ** t)  # (head_dim/2,) float32
        rd = cfg.v_head_dim // 2
        tv = torch.arange(0, rd, 2, dtype=torch.float32) / rd
        self.v_inv_freq = 1.0 / (cfg.v_rope_theta ** tv)  # (v_head_dim/4,) float32
        self.axis = torch.tensor(mrope_axis_table(cfg.head_dim, cfg.mrope_section,
                                                  interleaved="chunked_mrope" not in self.bugs))

    # -- helpers
    def lin(self, x, name, bias=True):
        if "act_fp16" in self.bugs:
            x = x.to(torch.float16).to(torch.float32)
        w = self.patch_w if name == "model.visual.patch_embed.proj" else self.w[name + ".weight"]
        y = x @ w.t()
        if bias:
            y = y + self.w[name + ".bias"]
        return y

    # -- vision
    def merge_order_coords(self, gh, gw):
        """(r, q) grid coordinates of each patch in the 2x2 merge-window order of spec 2.3."""
        m = self.cfg.merge
        rr, qq = [], []
        for bh in range(gh // m):
            for bw in range(gw // m):
                for mh in range(m):
                    for mw in range(m):
                        rr.append(bh * m + mh)
                        qq.append(bw * m + mw)
        return torch.tensor(rr), torch.tensor(qq)

    def pos_embed(self, gh, gw):
        """Bilinear interpolation of the learned G x G table to gh x gw (spec 3.2), in merge order."""
        G = self.cfg.pos_side
        E = self.w["model.visual.pos_embed.weight"]
        hr, hq = linspace_f32(0, G - 1, gh), linspace_f32(0, G - 1, gw)
        fr, fq = hr.to(torch.int64), hq.to(torch.int64)
        cr, cq = (fr + 1).clamp(max=G - 1), (fq + 1).clamp(max=G - 1)
        dr, dq = hr - fr.to(torch.float32), hq - fq.to(torch.float32)
        r, q = self.merge_order_coords(gh, gw)
        a_f, a_c, a_d = fr[r], cr[r], dr[r]
        b_f, b_c, b_d = fq[q], cq[q], dq[q]
        if "swap_hw_pos_embed" in self.bugs:  # row index taken as column and vice versa
            idx = lambda y, x: x * G + y
        else:
            idx = lambda y, x: y * G + x
        w00 = ((1 - a_d) * (1 - b_d))[:, None]
        w01 = ((1 - a_d) * b_d)[:, None]
        w10 = (a_d * (1 - b_d))[:, None]
        w11 = (a_d * b_d)[:, None]
        return (w00 * E[idx(a_f, b_f)] + w01 * E[idx(a_f, b_c)]
                + w10 * E[idx(a_c, b_f)] + w11 * E[idx(a_c, b_c)])

    def vision_rope(self, gh, gw):
        r, q = self.merge_order_coords(gh, gw)
        if "swap_hw_vision_rope" in self.bugs:
            r, q = q, r
        a = torch.cat([r.to(torch.float32)[:, None] * self.v_inv_freq[None, :],
                       q.to(torch.float32)[:, None] * self.v_inv_freq[None, :]], dim=1)
        emb = torch.cat([a, a], dim=1)  # (N, v_head_dim)
        return emb.cos(), emb.sin()

    def vision(self, pixels, grids):
        """pixels (N, patch_dim); grids list of (t, h, w). Returns (image embeds (N/4, D), [ds_j (N/4, D)])."""
        c = self.cfg
        x = self.lin(pixels, "model.visual.patch_embed.proj")
        pos, cos, sin, segs = [], [], [], []
        n0 = 0
        for (t, gh, gw) in grids:
            if t != 1:
                raise ValueError(f"grid ({t},{gh},{gw}): only images (t = 1) are supported")
            if gh % c.merge or gw % c.merge:
                raise ValueError(f"grid ({t},{gh},{gw}): h and w must be multiples of spatial_merge_size {c.merge}")
            pos.append(self.pos_embed(gh, gw))
            cs, sn = self.vision_rope(gh, gw)
            cos.append(cs)
            sin.append(sn)
            segs.append((n0, n0 + gh * gw))
            n0 += gh * gw
        if n0 != pixels.shape[0]:
            raise ValueError(f"pixels have {pixels.shape[0]} rows but the grids give {n0} patches")
        x = x + torch.cat(pos, 0)
        cos, sin = torch.cat(cos, 0), torch.cat(sin, 0)
        ds = []
        H, hd = c.v_heads, c.v_head_dim
        for b in range(c.v_depth):
            p = f"model.visual.blocks.{b}."
            h = layer_norm(x, self.w[p + "norm1.weight"], self.w[p + "norm1.bias"], c.v_eps)
            qkv = self.lin(h, p + "attn.qkv")
            N = x.shape[0]
            q, k, v = qkv.split(c.v_hidden, dim=1)
            q = q.reshape(N, H, hd).transpose(0, 1)
            k = k.reshape(N, H, hd).transpose(0, 1)
            v = v.reshape(N, H, hd).transpose(0, 1)
            if "no_vision_rope" not in self.bugs:
                q = rotate_half_apply(q, cos[None], sin[None])
                k = rotate_half_apply(k, cos[None], sin[None])
            outs = []
            for (s0, s1) in segs:  # attention only within one image
                sc = (q[:, s0:s1] @ k[:, s0:s1].transpose(1, 2)) * (hd ** -0.5)
                outs.append(torch.softmax(sc, dim=-1) @ v[:, s0:s1])
            a = torch.cat(outs, dim=1).transpose(0, 1).reshape(N, c.v_hidden)
            x = x + self.lin(a, p + "attn.proj")
            h = layer_norm(x, self.w[p + "norm2.weight"], self.w[p + "norm2.bias"], c.v_eps)
            h = self.lin(h, p + "mlp.linear_fc1")
            tanh = c.v_act in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast") and "erf_gelu_tower" not in self.bugs
            h = gelu_tanh(h) if tanh else gelu_erf(h)
            x = x + self.lin(h, p + "mlp.linear_fc2")
            if b in c.deepstack:
                ds.append(self.merger(x, f"model.visual.deepstack_merger_list.{c.deepstack.index(b)}.", post=True))
        emb = self.merger(x, "model.visual.merger.", post=False)
        return emb, ds

    def merger(self, x, p, post):
        c = self.cfg
        m2 = c.merge * c.merge
        if post:  # DeepStack: shuffle, then LayerNorm over the merged width
            h = x.reshape(-1, m2 * c.v_hidden)
            h = layer_norm(h, self.w[p + "norm.weight"], self.w[p + "norm.bias"], c.v_eps)
        else:  # final merger: LayerNorm per patch, then shuffle
            h = layer_norm(x, self.w[p + "norm.weight"], self.w[p + "norm.bias"], c.v_eps)
            h = h.reshape(-1, m2 * c.v_hidden)
        h = self.lin(h, p + "linear_fc1")
        h = gelu_tanh(h) if "tanh_gelu_merger" in self.bugs else gelu_erf(h)
        return self.lin(h, p + "linear_fc2")

    # -- positions (spec 5.4)
    def position_ids(self, ids, grids):
        c = self.cfg
        ids = list(ids)
        pos = [[], [], []]
        nxt = 0
        i = 0
        gi = 0
        while i < len(ids):
            if ids[i] != c.image_token_id:
                for a in range(3):
                    pos[a].append(nxt)
                nxt += 1
                i += 1
                continue
            if gi >= len(grids):
                raise ValueError(f"token {i}: more image blocks than grids ({len(grids)})")
            t, gh, gw = grids[gi]
            lh, lw = gh // c.merge, gw // c.merge
            n = t * lh * lw
            if ids[i:i + n] != [c.image_token_id] * n:
                raise ValueError(f"token {i}: image {gi} needs {n} consecutive image pads (grid {grids[gi]})")
            s = nxt
            for bh in range(lh):
                for bw in range(lw):
                    ph, pw = (s + bw, s + bh) if "swap_hw_mrope" in self.bugs else (s + bh, s + bw)
                    pos[0].append(s)
                    pos[1].append(ph)
                    pos[2].append(pw)
            nxt = s + max(lh, lw)
            i += n
            gi += 1
        if gi != len(grids):
            raise ValueError(f"{len(grids)} grids but {gi} image blocks in the ids")
        p = torch.tensor(pos, dtype=torch.int64)
        delta = int(p.max().item()) + 1 - len(ids) if len(ids) else 0
        return p, delta

    def mrope_cos_sin(self, pos):
        """pos (3, L) -> cos, sin (L, head_dim)."""
        ang = pos.to(torch.float32)[:, :, None] * self.inv_freq[None, None, :]  # (3, L, hd/2)
        sel = ang[self.axis, :, torch.arange(len(self.axis))]  # (hd/2, L)
        a = sel.t()
        emb = torch.cat([a, a], dim=1)
        return emb.cos(), emb.sin()

    # -- text decoder
    def decoder(self, x, pos, cache, image_rows=None, ds=None):
        """x (L, D) embeddings of the new tokens; pos (3, L); cache: list per layer of (K, V) or None.
        Returns (logits (L, vocab), new cache)."""
        c = self.cfg
        L = x.shape[0]
        H, KV, hd = c.num_heads, c.num_kv_heads, c.head_dim
        cos, sin = self.mrope_cos_sin(pos)
        past = 0 if cache is None else cache[0][0].shape[1]
        new_cache = []
        qi = torch.arange(past, past + L)[:, None]
        kj = torch.arange(past + L)[None, :]
        mask = kj > qi  # causal
        for i in range(c.num_layers):
            p = f"model.language_model.layers.{i}."
            h = rms_norm(x, self.w[p + "input_layernorm.weight"], c.rms_norm_eps)
            q = self.lin(h, p + "self_attn.q_proj", bias=False).reshape(L, H, hd).transpose(0, 1)
            k = self.lin(h, p + "self_attn.k_proj", bias=False).reshape(L, KV, hd).transpose(0, 1)
            v = self.lin(h, p + "self_attn.v_proj", bias=False).reshape(L, KV, hd).transpose(0, 1)
            if "no_qk_norm" not in self.bugs:
                q = rms_norm(q, self.w[p + "self_attn.q_norm.weight"], c.rms_norm_eps)
                k = rms_norm(k, self.w[p + "self_attn.k_norm.weight"], c.rms_norm_eps)
            q = rotate_half_apply(q, cos[None], sin[None])
            k = rotate_half_apply(k, cos[None], sin[None])
            if cache is not None:
                k = torch.cat([cache[i][0], k], dim=1)
                v = torch.cat([cache[i][1], v], dim=1)
            new_cache.append((k, v))
            g = H // KV
            kk = k.repeat_interleave(g, dim=0)
            vv = v.repeat_interleave(g, dim=0)
            sc = (q @ kk.transpose(1, 2)) * (hd ** -0.5)
            sc = sc.masked_fill(mask[None], float("-inf"))
            a = (torch.softmax(sc, dim=-1) @ vv).transpose(0, 1).reshape(L, H * hd)
            x = x + self.lin(a, p + "self_attn.o_proj", bias=False)
            h = rms_norm(x, self.w[p + "post_attention_layernorm.weight"], c.rms_norm_eps)
            gte = self.lin(h, p + "mlp.gate_proj", bias=False)
            up = self.lin(h, p + "mlp.up_proj", bias=False)
            x = x + self.lin(torch.nn.functional.silu(gte) * up, p + "mlp.down_proj", bias=False)
            if ds is not None and image_rows is not None and i < len(ds) and "no_deepstack" not in self.bugs:
                x = x.index_add(0, image_rows, ds[i])
        h = rms_norm(x, self.w["model.language_model.norm.weight"], c.rms_norm_eps)
        if "act_fp16" in self.bugs:
            h = h.to(torch.float16).to(torch.float32)
        return h @ self.lm_head.t(), new_cache

    def embed_prompt(self, ids, pixels, grids):
        c = self.cfg
        ids_t = torch.tensor(list(ids), dtype=torch.int64)
        x = self.embed[ids_t].clone()
        rows = (ids_t == c.image_token_id).nonzero().flatten()
        ds = None
        if len(rows):
            img, ds = self.vision(pixels, grids)
            if img.shape[0] != len(rows):
                raise ValueError(f"{len(rows)} image pads in the ids but the tower gives {img.shape[0]} tokens")
            x[rows] = img
        return x, rows if len(rows) else None, ds

    def prefill(self, ids, pixels, grids):
        pos, delta = self.position_ids(ids, grids)
        x, rows, ds = self.embed_prompt(ids, pixels, grids)
        logits, cache = self.decoder(x, pos, None, rows, ds)
        return logits, cache, delta

    def decode_step(self, token, cache, delta):
        n = cache[0][0].shape[1]
        pos = torch.full((3, 1), n + delta, dtype=torch.int64)
        x = self.embed[torch.tensor([int(token)])]
        logits, cache = self.decoder(x, pos, cache)
        return logits[0], cache

    def generate(self, ids, pixels, grids, steps):
        """Greedy (argmax, no stop token). Returns tokens (steps,) and logits (steps+1, vocab):
        row 0 is the last prompt position, row i >= 1 the output after feeding tokens[i-1]."""
        logits, cache, delta = self.prefill(ids, pixels, grids)
        rows = [logits[-1]]
        toks = []
        for _ in range(steps):
            t = int(torch.argmax(rows[-1]).item())
            toks.append(t)
            lg, cache = self.decode_step(t, cache, delta)
            rows.append(lg)
        return torch.tensor(toks, dtype=torch.int64), torch.stack(rows)

    def forward_full(self, ids, pixels, grids):
        """One prefill over the whole sequence (no cache): logits (S, vocab)."""
        logits, _, _ = self.prefill(ids, pixels, grids)
        return logits


# ----------------------------------------------------------------------------------------------
# inputs from the spec (for development and self-tests; production inputs come from the C++ host)

def patchify(img, cfg):
    """img float32 (C, H, W) normalised -> (N, C*T*P*P) rows in merge-window order (spec 2.3)."""
    C, H, W = img.shape
    P, T, m = cfg.patch_size, cfg.temporal_patch_size, cfg.merge
    gh, gw = H // P, W // P
    rows = []
    for bh in range(gh // m):
        for bw in range(gw // m):
            for mh in range(m):
                for mw in range(m):
                    r, q = bh * m + mh, bw * m + mw
                    patch = img[:, r * P:(r + 1) * P, q * P:(q + 1) * P]  # (C, P, P)
                    rows.append(patch[:, None].expand(C, T, P, P).reshape(-1))
    return torch.stack(rows), (1, gh, gw)


def synthetic_image(h, w, seed=1):
    """A deterministic uint8 RGB image (3, h, w): smooth gradients plus seeded noise."""
    g = torch.Generator().manual_seed(seed)
    yy = torch.arange(h, dtype=torch.float32)[:, None].expand(h, w)
    xx = torch.arange(w, dtype=torch.float32)[None, :].expand(h, w)
    base = torch.stack([255 * yy / max(h - 1, 1), 255 * xx / max(w - 1, 1), 127.5 + 100 * torch.sin((xx + 2 * yy) / 7)])
    noise = torch.randint(-40, 41, (3, h, w), generator=g).to(torch.float32)
    return (base + noise).round().clamp(0, 255).to(torch.uint8)


def normalise(img_u8):
    """(x - 127.5) / 127.5 in float32 (the Fast processor's fused form, spec 2.2)."""
    return (img_u8.to(torch.float32) - 127.5) / 127.5


def chat_prompt_ids(cfg, n_image_tokens, text_ids=(74785, 419, 2168, 13)):
    """<|im_start|>user\\n<|vision_start|><|image_pad|>*n<|vision_end|>TEXT<|im_end|>\\n<|im_start|>assistant\\n
    (spec 7.3); the default TEXT ids are "Describe this image." (spec 5.6)."""
    return ([151644, 872, 198, cfg.vision_start_token_id] + [cfg.image_token_id] * n_image_tokens
            + [cfg.vision_end_token_id] + list(text_ids) + [151645, 198, 151644, 77091, 198])
