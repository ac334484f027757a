"""Writes reference goldens (greedy tokens + logits, fp32 and W4A16) of the PyTorch Qwen3-VL reference.

  /usr/bin/python3 scripts/reference/golden.py --model DIR --bundle FILE \\
      --ids IDS_FILE --pixels PIXELS_FILE --grid T,H,W --steps 20 --out golden.h5
  /usr/bin/python3 scripts/reference/golden.py --model DIR --bundle FILE --from-golden OLD.h5 --out NEW.h5
  /usr/bin/python3 scripts/reference/golden.py --model DIR [--bundle FILE] --synthetic-image 96x128 --out g.h5
  /usr/bin/python3 scripts/reference/golden.py --model DIR [--bundle FILE] --selftest
  /usr/bin/python3 scripts/reference/golden.py --model DIR [--bundle FILE] --sensitivity
  /usr/bin/python3 scripts/reference/golden.py --compare NEW.h5 --against COMMITTED.h5 [--corrupt]

IDS_FILE: token ids as text (whitespace/comma separated; brackets ignored), the prompt with the
image pads already expanded (a single pad per image is expanded from the grid).
PIXELS_FILE: the patch rows (N, 1536) float32: .npy, .h5/.hdf5 (dataset 'pixel_values' or the only
2-D dataset), .safetensors ('pixel_values' or the only tensor), or raw little-endian float32 (.f32/.bin).

HDF5 layout (see README.md): prompt_ids, pixel_values, grid_thw, position_ids, attrs rope_delta,
steps, logits_dtype; then per mode group fp32/ and w4a16/: tokens (steps,) int32 and logits
(steps+1, vocab): row 0 = last prompt position, row i = after feeding tokens[i-1].
"""
import argparse
import hashlib
import json
import os
import re
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3vl as Q  # noqa: E402
from safetensors_io import SafetensorsError, load as st_load  # noqa: E402

COS_GATE = 0.999999


def setup_torch():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)


def die(msg):
    print(f"golden.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def sha256_data(path):
    """sha256 of a safetensors file's data section (the header's metadata holds paths, so it is skipped)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(8 + int.from_bytes(f.read(8), "little"))
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------ inputs

def read_ids(path):
    with open(path) as f:
        txt = f.read()
    toks = [t for t in re.split(r"[\s,\[\]]+", txt) if t]
    try:
        return [int(t) for t in toks]
    except ValueError:
        die(f"{path}: expected integers separated by spaces or commas, got '{txt[:60]}'")


def read_pixels(path, patch_dim):
    ext = os.path.splitext(path)[1].lower()
    if ext == ".npy":
        a = np.load(path)
    elif ext in (".h5", ".hdf5"):
        import h5py
        with h5py.File(path, "r") as f:
            if "pixel_values" in f:
                a = f["pixel_values"][()]
            else:
                ds = [k for k in f if isinstance(f[k], h5py.Dataset) and f[k].ndim == 2]
                if len(ds) != 1:
                    die(f"{path}: no 'pixel_values' dataset and {len(ds)} 2-D datasets")
                a = f[ds[0]][()]
    elif ext == ".safetensors":
        t, _ = st_load(path)
        key = "pixel_values" if "pixel_values" in t else (list(t)[0] if len(t) == 1 else None)
        if key is None:
            die(f"{path}: no 'pixel_values' tensor and {len(t)} tensors")
        a = t[key].to(torch.float32).numpy()
    else:
        raw = np.fromfile(path, dtype="<f4")
        if raw.size % patch_dim:
            die(f"{path}: {raw.size} float32 values is not a multiple of the patch size {patch_dim}")
        a = raw.reshape(-1, patch_dim)
    a = np.asarray(a, dtype=np.float32)
    if a.ndim != 2 or a.shape[1] != patch_dim:
        die(f"{path}: pixel patches have shape {a.shape}, expected (N, {patch_dim})")
    return torch.from_numpy(a.copy())


def parse_grid(s):
    try:
        g = tuple(int(x) for x in s.split(","))
        assert len(g) == 3
        return g
    except Exception:
        die(f"--grid '{s}': expected T,H,W in patches, e.g. 1,16,16")


def expand_pads(ids, cfg, grids):
    """One <|image_pad|> per image is expanded to (h/m)*(w/m) pads; fully expanded ids pass unchanged."""
    pad = cfg.image_token_id
    need = [t * (h // cfg.merge) * (w // cfg.merge) for (t, h, w) in grids]
    n = ids.count(pad)
    if n == sum(need):
        return ids
    if n == len(grids):
        out, k = [], 0
        for t in ids:
            if t == pad:
                out += [pad] * need[k]
                k += 1
            else:
                out.append(t)
        return out
    die(f"ids hold {n} image pads; the grids need {sum(need)} (or one per image)")


def synthetic_inputs(cfg, spec):
    try:
        h, w = (int(x) for x in spec.lower().split("x"))
    except ValueError:
        die(f"--synthetic-image '{spec}': expected HxW in pixels, e.g. 96x128")
    f = cfg.patch_size * cfg.merge
    if h % f or w % f:
        die(f"--synthetic-image {spec}: sides must be multiples of {f}")
    img = Q.normalise(Q.synthetic_image(h, w, seed=1))
    pix, grid = Q.patchify(img, cfg)
    ids = Q.chat_prompt_ids(cfg, pix.shape[0] // (cfg.merge * cfg.merge))
    return ids, pix, [grid]


def load_inputs(a, cfg):
    if a.from_golden:
        import h5py
        with h5py.File(a.from_golden, "r") as f:
            ids = [int(x) for x in f["prompt_ids"][()]]
            pix = torch.from_numpy(np.asarray(f["pixel_values"][()], dtype=np.float32))
            grids = [tuple(int(v) for v in g) for g in f["grid_thw"][()]]
            steps = int(f.attrs["steps"])
        return ids, pix, grids, steps
    if a.synthetic_image:
        ids, pix, grids = synthetic_inputs(cfg, a.synthetic_image)
        return ids, pix, grids, a.steps
    if not (a.ids and a.pixels and a.grid):
        die("give --ids, --pixels and --grid (or --from-golden, or --synthetic-image)")
    grids = [parse_grid(g) for g in a.grid]
    ids = expand_pads(read_ids(a.ids), cfg, grids)
    return ids, read_pixels(a.pixels, cfg.patch_dim), grids, a.steps


def check_inputs(ids, pix, grids, cfg):
    n = sum(t * h * w for (t, h, w) in grids)
    if pix.shape[0] != n:
        die(f"the pixel file has {pix.shape[0]} patch rows but --grid {grids} gives {n}")
    return ids, pix, grids


def load_modes(a, cfg):
    modes = {}
    t0 = time.time()
    modes["fp32"] = Q.load_fp32(a.model)
    if a.bundle:
        modes["w4a16"] = Q.load_w4a16(a.bundle, a.model)
    print(f"loaded weights ({', '.join(modes)}) in {time.time() - t0:.2f} s")
    return modes


# ------------------------------------------------------------------------------------------ golden

def write_golden(a, cfg, modes, ids, pix, grids, steps):
    ref = Q.Qwen3VL(cfg, modes["fp32"])
    pos, delta = ref.position_ids(ids, grids)
    ldt = np.float16 if a.logits_dtype == "f16" else np.float32
    comp = dict(compression="gzip", compression_opts=9, shuffle=True)
    tmp = a.out + ".partial"
    try:
        _write_h5(a, cfg, modes, ids, pix, grids, steps, pos, delta, ldt, comp, tmp)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, a.out)  # no half-written golden on failure
    print(f"wrote {a.out}: {os.path.getsize(a.out)} bytes (logits {a.logits_dtype})")


def _write_h5(a, cfg, modes, ids, pix, grids, steps, pos, delta, ldt, comp, tmp):
    import h5py
    with h5py.File(tmp, "w") as f:
        f.attrs["generator"] = "scripts/reference/golden.py (independent PyTorch reference of Qwen3-VL)"
        f.attrs["torch_version"] = f"{torch.__version__}"
        f.attrs["config_json"] = json.dumps(cfg.raw, sort_keys=True)
        f.attrs["checkpoint_data_sha256"] = sha256_data(os.path.join(a.model, "model.safetensors"))
        if a.bundle:
            f.attrs["bundle_data_sha256"] = sha256_data(a.bundle)
        f.attrs["note"] = a.note
        f.attrs["steps"] = steps
        f.attrs["rope_delta"] = delta
        f.attrs["logits_dtype"] = a.logits_dtype
        f.attrs["stop_tokens"] = "none: greedy argmax for exactly `steps` tokens, stop ids are not honoured"
        f.create_dataset("prompt_ids", data=np.asarray(ids, dtype=np.int32))
        f.create_dataset("pixel_values", data=pix.numpy().astype(np.float32), **comp)
        f.create_dataset("grid_thw", data=np.asarray(grids, dtype=np.int32).reshape(-1, 3))
        f.create_dataset("position_ids", data=pos.numpy().astype(np.int32))
        for mode, w in modes.items():
            m = Q.Qwen3VL(cfg, w)
            t0 = time.time()
            toks, logits = m.generate(ids, pix, grids, steps)
            dt = time.time() - t0
            g = f.create_group(mode)
            g.create_dataset("tokens", data=toks.numpy().astype(np.int32))
            g.create_dataset("logits", data=logits.numpy().astype(ldt), **comp)
            g.attrs["seconds"] = dt
            print(f"{mode}: {dt:.2f} s, tokens {toks.tolist()}")


def cosine(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float((a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-300))


def compare(new_path, old_path, corrupt=None, gate=COS_GATE):
    """Token ids equal and logits cosine >= gate at every row, per mode. Returns 0 or 1."""
    import h5py
    bad = []
    with h5py.File(new_path, "r") as n, h5py.File(old_path, "r") as o:
        for key in ("prompt_ids", "grid_thw", "position_ids"):
            if not np.array_equal(n[key][()], o[key][()]):
                bad.append(f"{key} differs")
        for key in ("checkpoint_data_sha256", "bundle_data_sha256"):
            if key in o.attrs and key in n.attrs and o.attrs[key] != n.attrs[key]:
                print(f"note: {key} differs from the committed golden's: the C++ generator or quantiser output changed")
        modes = [k for k in ("fp32", "w4a16") if k in o]
        if not modes:
            bad.append(f"{old_path} holds no mode groups")
        for mode in modes:
            if mode not in n:
                bad.append(f"{mode}: missing in {new_path}")
                continue
            tn, to = n[mode]["tokens"][()], o[mode]["tokens"][()]
            ln = n[mode]["logits"][()].astype(np.float32)
            lo = o[mode]["logits"][()].astype(np.float32)
            if corrupt == "logits":  # negative control: noise of 1% of the mean |logit| must fail the cosine gate
                rng = np.random.default_rng(0)
                ln = ln + 0.01 * np.abs(ln).mean() * rng.standard_normal(ln.shape).astype(np.float32)
            elif corrupt == "tokens":  # negative control: one wrong last token must fail the token gate
                tn = tn.copy()
                tn[-1] = (tn[-1] + 1) % ln.shape[1]
            if ln.shape != lo.shape:
                bad.append(f"{mode}: logits shape {ln.shape} vs committed {lo.shape}")
                continue
            cs = [cosine(ln[i], lo[i]) for i in range(ln.shape[0])]
            mc = min(cs)
            same = np.array_equal(tn, to)
            print(f"{mode}: tokens {'equal' if same else 'DIFFER'}, min logits cosine {mc:.9f} "
                  f"(row {int(np.argmin(cs))}), max |diff| {np.abs(ln - lo).max():.3g}")
            if not same:
                first = int(np.nonzero(tn != to)[0][0]) if tn.shape == to.shape else 0
                bad.append(f"{mode}: token ids differ from step {first}: {tn.tolist()} vs committed {to.tolist()}")
            if mc < gate:
                bad.append(f"{mode}: logits cosine {mc:.9f} < {gate} at row {int(np.argmin(cs))}")
    if bad:
        print("golden comparison FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    print("golden comparison passed")
    return 0


# ------------------------------------------------------------------------------------------ selftest

def selftest(cfg, modes, ids, pix, grids, steps):
    fails = []

    def check(ok, what):
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
        if not ok:
            fails.append(what)

    print("op checks:")
    x = torch.linspace(-6, 6, 1201, dtype=torch.float64)
    import math
    ref = torch.tensor([0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in x.tolist()],
                       dtype=torch.float64)
    check(torch.allclose(Q.gelu_tanh(x), ref, atol=1e-12), "tanh GELU equals its formula (float64)")
    check(float((Q.gelu_tanh(x) - Q.gelu_erf(x)).abs().max()) > 1e-4, "tanh and erf GELU are distinguishable")
    ax = Q.mrope_axis_table(128, [24, 20, 20])
    want = [0, 1, 2] * 20 + [0, 0, 0, 0]
    check(ax == want, "2B M-RoPE axis table is THW x20 then TTTT (spec 5.2)")
    check(sum(1 for v in Q.mrope_axis_table(cfg.head_dim, cfg.mrope_section) if v == 0) == cfg.mrope_section[0],
          f"this config's axis table has {cfg.mrope_section[0]} t frequencies")
    m = Q.Qwen3VL(cfg, modes["fp32"])
    ex = [151644, 872, 198, 151652] + [cfg.image_token_id] * 196 + [151653, 74785, 419, 2168, 13, 151645, 198, 151644,
                                                                       77091, 198]
    if cfg.merge == 2:
        p, d = m.position_ids(ex, [(1, 28, 28)])
        check(d == -182 and int(p.max()) == 27 and p[:, 4].tolist() == [4, 4, 4] and p[:, 199].tolist() == [4, 17, 17],
              "spec 5.6 worked example: rope_delta -182, image (4, 4+bh, 4+bw), last position 27")
    G = cfg.pos_side
    if G % cfg.merge == 0:
        P = m.pos_embed(G, G)
        r, q = m.merge_order_coords(G, G)
        check(torch.equal(P, m.w["model.visual.pos_embed.weight"][r * G + q]),
              f"position interpolation at the table's own size {G}x{G} is the table (merge order)")
    codes = torch.tensor([[0x21, 0xF3]], dtype=torch.uint8)
    wdq = Q.dequant_w4(codes, torch.tensor([[0.5]], dtype=torch.float16), torch.tensor([[2]], dtype=torch.uint8), 3)
    check(wdq.tolist() == [[-0.5, 0.0, 0.5]], "W4 dequant: low nibble = even column, (q - z) * s, odd width")
    img = torch.arange(3 * 64 * 64, dtype=torch.float32).reshape(3, 64, 64)
    rows, g = Q.patchify(img, cfg)
    n = ((1 * (g[2] // cfg.merge) + 0) * cfg.merge + 1) * cfg.merge + 0  # bh=1, bw=0, mh=1, mw=0 -> r=3, q=0
    P_ = cfg.patch_size
    k = ((2 * cfg.temporal_patch_size + 1) * P_ + 5) * P_ + 7  # c=2, t=1, py=5, px=7
    check(float(rows[n, k]) == float(img[2, 3 * P_ + 5, 0 * P_ + 7]), "patch row order and (c,t,py,px) layout (spec 2.3)")

    print("KV-cache decode vs full recompute:")
    for mode, w in modes.items():
        mm = Q.Qwen3VL(cfg, w)
        t0 = time.time()
        toks, lg = mm.generate(ids, pix, grids, steps)
        t1 = time.time()
        full = mm.forward_full(ids + toks.tolist(), pix, grids)
        t2 = time.time()
        S = len(ids)
        rows_full = full[S - 1: S + steps]
        diff = float((rows_full - lg).abs().max())
        mc = min(float(torch.nn.functional.cosine_similarity(rows_full[i:i + 1].double(), lg[i:i + 1].double()))
                 for i in range(lg.shape[0]))
        same_top = torch.equal(rows_full.argmax(1)[:-1], toks)
        print(f"  {mode}: generate {t1 - t0:.2f} s, full recompute {t2 - t1:.2f} s, max |diff| {diff:.3g}, "
              f"min cosine {mc:.9f}, {'bit-identical' if diff == 0 else 'not bit-identical'}")
        check(same_top and mc >= 0.99999999 and diff <= 1e-4 * float(lg.abs().max()),
              f"{mode}: cached decode equals the full recompute (tokens equal, cosine >= 0.99999999)")
    if fails:
        print(f"selftest FAILED: {len(fails)} check(s)")
        return 1
    print("selftest passed")
    return 0


# ------------------------------------------------------------------------------------------ sensitivity

def sensitivity(cfg, modes, ids, pix, grids, steps, gate=0.9999):
    """Teacher-forced: every variant scores the correct model's own greedy sequence."""
    good = Q.Qwen3VL(cfg, modes["fp32"])
    toks, _ = good.generate(ids, pix, grids, steps)
    seq = ids + toks.tolist()
    S = len(ids)
    base = good.forward_full(seq, pix, grids)[S - 1: S + steps].double()

    def score(lg):
        lg = lg.double()
        cs = torch.nn.functional.cosine_similarity(lg, base, dim=1)
        top = float((lg.argmax(1) == base.argmax(1)).double().mean())
        return float(cs.min()), top

    rows = []
    if "w4a16" in modes:
        lg = Q.Qwen3VL(cfg, modes["w4a16"]).forward_full(seq, pix, grids)[S - 1: S + steps]
        rows.append(("w4a16", "(not a bug) W4A16 dequantised weights vs fp32", *score(lg)))
    for bug, desc in Q.KNOWN_BUGS.items():
        lg = Q.Qwen3VL(cfg, modes["fp32"], bugs={bug}).forward_full(seq, pix, grids)[S - 1: S + steps]
        rows.append((bug, desc, *score(lg)))
    print(f"sensitivity ({steps + 1} rows, teacher-forced on the fp32 greedy sequence, gate {gate}):")
    print(f"| variant | description | min logits cosine | 1 - cosine | top-1 agreement | fails gate {gate} |")
    print("|---|---|---|---|---|---|")
    for name, desc, mc, top in rows:
        print(f"| {name} | {desc} | {mc:.6f} | {1 - mc:.2e} | {top:.2f} | {'yes' if mc < gate else 'no'} |")
    return 0


# ------------------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint dir (config.json + model.safetensors)")
    ap.add_argument("--bundle", help="W4A16 bundle from `gpnpu quantize`; without it only fp32 runs")
    ap.add_argument("--ids")
    ap.add_argument("--pixels")
    ap.add_argument("--grid", action="append", help="T,H,W in patches; repeat per image")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out")
    ap.add_argument("--logits-dtype", choices=["f16", "f32"], default="f16")
    ap.add_argument("--from-golden", help="take prompt ids, pixels, grid and steps from this golden")
    ap.add_argument("--synthetic-image", metavar="HxW", help="development input: a seeded image of this size")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--sensitivity", action="store_true")
    ap.add_argument("--compare", metavar="NEW", help="compare NEW golden against --against")
    ap.add_argument("--against", metavar="OLD")
    ap.add_argument("--corrupt", choices=["logits", "tokens"],
                    help="negative control for --compare: perturb NEW's logits or its last token (must fail)")
    ap.add_argument("--note", default="", help="provenance text stored in the golden (how the inputs were made)")
    a = ap.parse_args()
    setup_torch()
    try:
        run(a)
    except (ValueError, KeyError, OSError, SafetensorsError) as e:
        die(f"{type(e).__name__}: {e}")


def run(a):
    if a.compare:
        if not a.against:
            die("--compare needs --against")
        sys.exit(compare(a.compare, a.against, corrupt=a.corrupt))
    if not a.model:
        die("--model DIR is required")
    cfg = Q.Config.from_dir(a.model)
    if not (a.selftest or a.sensitivity or a.out):
        die("nothing to do: give --out, --selftest or --sensitivity")
    if a.selftest or a.sensitivity:
        if not (a.from_golden or a.ids or a.synthetic_image):
            a.synthetic_image = "96x128"
    ids, pix, grids, steps = load_inputs(a, cfg)
    check_inputs(ids, pix, grids, cfg)
    modes = load_modes(a, cfg)
    rc = 0
    if a.selftest:
        rc |= selftest(cfg, modes, ids, pix, grids, steps)
    if a.sensitivity:
        rc |= sensitivity(cfg, modes, ids, pix, grids, steps)
    if a.out:
        write_golden(a, cfg, modes, ids, pix, grids, steps)
    sys.exit(rc)


if __name__ == "__main__":
    main()
