#!/usr/bin/python3
"""Golden values for the image-input and prompt tests (tests/model/inputs/test_image.cpp,
tests/model/inputs/test_prompt.cpp), computed from the spec docs/model.md
(sections 2, 3.2, 3.3, 5.4-5.6, 7.3), independently of the C++ in model/inputs/image.cpp
and model/inputs/prompt.cpp. Uses PIL only to read/write PNG/JPEG files and torch 1.13's
F.interpolate(mode='bicubic', antialias=True) for the resize (the spec's emulation
of the torchvision path of Qwen2VLImageProcessorFast); everything else is numpy
written from the spec's formulas.

Regenerate (from the repository root, Debian python with torch 1.13):
    /usr/bin/python3 scripts/reference/image_golden.py --make-inputs --photos DIR
--make-inputs rewrites the small input images under tests/model/data/ from the
scikit-image sample photos in DIR (the `data` folder of scikit-image 0.19.3,
Debian's python3-skimage) (see tests/model/data/image_ATTRIBUTION.md); without it
only the goldens are recomputed from the committed inputs.
"""
import argparse
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "model", "data")

PATCH, TEMPORAL, MERGE = 16, 2, 2
FACTOR = PATCH * MERGE                     # spec 2.1: F = 32
MIN_PIXELS, MAX_PIXELS = 65536, 16777216   # spec 1.4
GRID_SIDE = 48                             # spec 3.2: 2304 = 48 x 48 position table
IM_START, IM_END = 151644, 151645          # spec 7.1
VISION_START, VISION_END, IMAGE_PAD = 151652, 151653, 151655
# Token ids of the text pieces of the spec 5.6 example ("user\n", the question,
# "\n", "assistant\n"); the spec lists the full id sequence.
IDS_USER_NL = [872, 198]
IDS_DESCRIBE = [74785, 419, 2168, 13]      # "Describe this image."
IDS_NL = [198]
IDS_ASSISTANT_NL = [77091, 198]


# ----------------------------------------------------------------------------- spec 2.1
def smart_resize(h, w, factor=FACTOR, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS):
    if max(h, w) / min(h, w) > 200:
        raise ValueError("aspect ratio > 200")
    hb = round(h / factor) * factor        # Python round: half to even (as the spec says)
    wb = round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb = math.ceil(h * beta / factor) * factor
        wb = math.ceil(w * beta / factor) * factor
    return hb, wb


# ----------------------------------------------------------------------------- spec 2.2
def to_rgb(img):
    """Convert to RGB; RGBA is composited onto white (HF convert_to_rgb)."""
    if img.mode == "RGB":
        return img
    rgba = img.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def resize_uint8(rgb, hb, wb):
    """rgb: HxWx3 uint8 -> hb x wb x 3 uint8 via the spec's torchvision emulation."""
    if rgb.shape[0] == hb and rgb.shape[1] == wb:
        return rgb.copy()
    x = torch.from_numpy(rgb).permute(2, 0, 1)[None].float()
    y = F.interpolate(x, size=(hb, wb), mode="bicubic", align_corners=False, antialias=True)
    y = y.clamp(0, 255).round().to(torch.uint8)
    return y[0].permute(1, 2, 0).contiguous().numpy()


def normalise(rgb):
    """Fast-processor form (x - 127.5) / 127.5 in float32 (docs/testing.md model-test item 7)."""
    x = rgb.astype(np.float32)
    return ((x - np.float32(127.5)) / np.float32(127.5)).astype(np.float32)


# ----------------------------------------------------------------------------- spec 2.3
def patchify(X):
    """X: HxWx3 float32 normalised image -> (gh*gw, 1536) in 2x2 merge-window order."""
    H, W, _ = X.shape
    gh, gw = H // PATCH, W // PATCH
    rows = []
    for bh in range(gh // 2):
        for bw in range(gw // 2):
            for mh in range(2):
                for mw in range(2):
                    r, q = 2 * bh + mh, 2 * bw + mw
                    v = np.empty((3, TEMPORAL, PATCH, PATCH), np.float32)
                    for c in range(3):
                        for t in range(TEMPORAL):
                            v[c, t] = X[r * PATCH:(r + 1) * PATCH, q * PATCH:(q + 1) * PATCH, c]
                    rows.append(v.reshape(-1))   # k = ((c*2+t)*16+py)*16+px
    return np.stack(rows), (1, gh, gw)


# ----------------------------------------------------------------------------- spec 3.3
def tower_rot_ids(gh, gw):
    out = []
    for bh in range(gh // 2):
        for bw in range(gw // 2):
            for mh in range(2):
                for mw in range(2):
                    out.append([2 * bh + mh, 2 * bw + mw])
    return out


# ----------------------------------------------------------------------------- spec 3.2
def linspace_spec(start, end, steps):
    """Spec 3.2 note: float32 step = (end-start)/(steps-1); i < steps/2 uses start + i*step,
    the rest end - (steps-1-i)*step. (torch 1.13's vectorised CPU kernel applies the
    two-sided rule per 8-lane block, so torch.linspace itself can differ by 1 ulp on an
    AVX2 machine; the spec's scalar rule is the machine-independent definition.)"""
    step = np.float32(np.float32(end - start) / np.float32(steps - 1))
    out = [np.float32(start) + step * np.float32(i) if i < steps // 2
           else np.float32(end) - step * np.float32(steps - 1 - i) for i in range(steps)]
    return torch.tensor(np.array(out, dtype=np.float32))


def bilinear(gh, gw, G=GRID_SIDE):
    hr = linspace_spec(0, G - 1, gh)       # float32
    hq = linspace_spec(0, G - 1, gw)
    fr, fq = hr.int(), hq.int()
    cr, cq = (fr + 1).clamp(max=G - 1), (fq + 1).clamp(max=G - 1)
    dr, dq = hr - fr, hq - fq               # float32
    idx, wts = [], []
    for bh in range(gh // 2):
        for bw in range(gw // 2):
            for mh in range(2):
                for mw in range(2):
                    r, q = 2 * bh + mh, 2 * bw + mw
                    one = torch.tensor(1.0)
                    idx.append([int(fr[r]) * G + int(fq[q]), int(fr[r]) * G + int(cq[q]),
                                int(cr[r]) * G + int(fq[q]), int(cr[r]) * G + int(cq[q])])
                    w = [(one - dr[r]) * (one - dq[q]), (one - dr[r]) * dq[q],
                         dr[r] * (one - dq[q]), dr[r] * dq[q]]
                    wts.append([f32(x) for x in w])
    return idx, wts


# ----------------------------------------------------------------------------- spec 7.3, 5.4
def chat_ids(text_ids, n_image_tokens):
    return ([IM_START] + IDS_USER_NL + [VISION_START] + [IMAGE_PAD] * n_image_tokens + [VISION_END]
            + text_ids + [IM_END] + IDS_NL + [IM_START] + IDS_ASSISTANT_NL)


def rope_index(ids, merged_grids):
    pos, nxt, i, img = [], 0, 0, 0
    while i < len(ids):
        if ids[i] != IMAGE_PAD:
            pos.append([nxt, nxt, nxt])
            nxt += 1
            i += 1
            continue
        mh, mw = merged_grids[img]
        img += 1
        s = nxt
        for bh in range(mh):
            for bw in range(mw):
                assert ids[i] == IMAGE_PAD
                pos.append([s, s + bh, s + bw])
                i += 1
        nxt = 1 + max(max(p) for p in pos)
    delta = (max(max(p) for p in pos) + 1) - len(ids)
    return pos, delta


# ----------------------------------------------------------------------------- checksums
def weights_for(n_rows, dim):
    """Pseudo-random weights in [-0.5, 0.5) per (row, k): a weighted sum catches permutations."""
    i = np.arange(n_rows * dim, dtype=np.uint64)
    return ((i * np.uint64(2654435761)) % np.uint64(1000)).astype(np.float64) / 1000.0 - 0.5


def checksums(P):
    P64 = P.astype(np.float64)
    return {"sum": float(P64.sum()), "sum_sq": float((P64 * P64).sum()),
            "weighted": float((P64.reshape(-1) * weights_for(*P.shape)).sum()),
            "min": float(P.min()), "max": float(P.max())}


def f32(x):
    """A float32 value as the shortest decimal that reads back to the same float32."""
    return float(repr(np.float32(float(x))))


def load_rgb(path):
    return np.asarray(to_rgb(Image.open(path)), dtype=np.uint8)


def case(name, path, hb=None, wb=None, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, rows=(),
         positions=False, tower=False, ref_png=None):
    rgb = load_rgb(os.path.join(ROOT, path))
    h, w = rgb.shape[:2]
    mode = "fixed" if hb is not None else "smart"
    if hb is None:
        hb, wb = smart_resize(h, w, FACTOR, min_pixels, max_pixels)
    res = resize_uint8(rgb, hb, wb)
    P, grid = patchify(normalise(res))
    C, _ = patchify(res.astype(np.float32))       # the same layout, as pixel codes
    out = {"name": name, "input": path, "mode": mode, "min_pixels": min_pixels,
           "max_pixels": max_pixels, "orig_hw": [h, w], "resized_hw": [hb, wb], "grid_thw": list(grid),
           "n_patches": int(P.shape[0]), "n_tokens": int(P.shape[0] // 4), "patch_dim": int(P.shape[1]),
           "checksums": checksums(P),
           # Exact integer checksums of the resized HWC bytes (weights as in weights_for).
           "resized_sum": int(res.astype(np.int64).sum()),
           "resized_weighted": int((res.reshape(-1).astype(np.uint64)
                                    * ((np.arange(res.size, dtype=np.uint64) * np.uint64(2654435761))
                                       % np.uint64(1000))).sum()),
           # Rows as the uint8 codes of the resized image; the value is norm_lut[code].
           "row_codes": {str(r): [int(v) for v in C[r]] for r in rows}}
    if ref_png:
        Image.fromarray(res, "RGB").save(os.path.join(DATA, ref_png), optimize=True)
        out["resized_png"] = "tests/model/data/" + ref_png
    if positions:
        mh, mw = grid[1] // 2, grid[2] // 2
        ids = chat_ids(IDS_DESCRIBE, mh * mw)
        pos, delta = rope_index(ids, [(mh, mw)])
        out["prompt_text"] = "Describe this image."
        out["prompt_ids"] = ids
        out["positions"] = pos
        out["rope_delta"] = delta
        out["decode_positions"] = [[len(ids) + k + delta] * 3 for k in range(3)]
    if tower:
        out["tower_rot_ids"] = tower_rot_ids(grid[1], grid[2])
        idx, wts = bilinear(grid[1], grid[2])
        out["pos_interp_idx"] = idx
        out["pos_interp_w"] = wts
        out["linspace_ulp_diffs_vs_torch_here"] = int(
            (linspace_spec(0, GRID_SIDE - 1, grid[1]) != torch.linspace(0, GRID_SIDE - 1, grid[1])).sum()
            + (linspace_spec(0, GRID_SIDE - 1, grid[2]) != torch.linspace(0, GRID_SIDE - 1, grid[2])).sum())
    return out


def make_inputs(photos):
    os.makedirs(DATA, exist_ok=True)
    coffee = Image.open(os.path.join(photos, "coffee.png")).convert("RGB")
    astro = Image.open(os.path.join(photos, "astronaut.png")).convert("RGB")
    chelsea = Image.open(os.path.join(photos, "chelsea.png")).convert("RGB")
    coffee.crop((150, 50, 406, 306)).save(os.path.join(DATA, "image_photo_256.png"), optimize=True)
    astro.crop((32, 0, 480, 448)).convert("L").save(os.path.join(DATA, "image_photo_448.png"), optimize=True)
    chelsea.crop((200, 60, 240, 100)).save(os.path.join(DATA, "image_small_40.png"), optimize=True)
    # RGBA: alpha varies over the whole range, including 0 and 255.
    rgba = np.dstack([np.asarray(chelsea.crop((150, 40, 214, 104))),
                      ((np.arange(64)[:, None] * 4 + np.arange(64)[None, :] * 3) % 256).astype(np.uint8)])
    Image.fromarray(rgba, "RGBA").save(os.path.join(DATA, "image_rgba_64.png"), optimize=True)
    coffee.crop((200, 100, 264, 164)).save(os.path.join(DATA, "image_jpeg_64.jpg"), quality=90)
    Image.new("RGB", (64, 31), (10, 20, 30)).save(os.path.join(DATA, "image_too_small_64x31.png"))
    Image.new("RGB", (6432, 32), (10, 20, 30)).save(os.path.join(DATA, "image_too_elongated_6432x32.png"))
    with open(os.path.join(DATA, "image_not_an_image.png"), "w") as f:
        f.write("this is a text file, not a PNG\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-inputs", action="store_true")
    ap.add_argument("--photos", help="folder of the scikit-image sample photos (needed with --make-inputs)")
    args = ap.parse_args()
    if args.make_inputs and not args.photos:
        ap.error("--make-inputs needs --photos DIR (the data folder of scikit-image 0.19.3)")
    if args.make_inputs:
        make_inputs(args.photos)

    cases = [
        case("photo_256", "tests/model/data/image_photo_256.png", rows=(0, 1, 2, 17),
             positions=True, tower=True),
        case("photo_448", "tests/model/data/image_photo_448.png", rows=(3, 56, 783),
             positions=True, tower=True),
        case("bundled_default_256", "examples/photos/chelsea.png", hb=256, wb=256, rows=(100,),
             ref_png="image_ref_chelsea_256.png"),
        case("bundled_smart", "examples/photos/chelsea.png", rows=(503,)),
        case("small_40_upscale", "tests/model/data/image_small_40.png", min_pixels=4096, rows=(15,),
             ref_png="image_ref_small_40_up.png"),
        case("rgba_64", "tests/model/data/image_rgba_64.png", min_pixels=4096, rows=(),
             ref_png="image_ref_rgba_64.png"),
    ]
    # The JPEG decode of PIL (libjpeg), for a tolerance check of stb_image's decoder.
    jpeg = load_rgb(os.path.join(DATA, "image_jpeg_64.jpg"))
    Image.fromarray(jpeg, "RGB").save(os.path.join(DATA, "image_ref_jpeg_64_pil.png"))

    # smart_resize table of spec 2.1 (W x H in -> W x H out), recomputed.
    table = []
    for (w, h) in [(224, 224), (448, 448), (640, 480), (800, 600), (1280, 720), (1920, 1080),
                   (5000, 5000), (451, 300), (6400, 32), (32, 32)]:
        hb, wb = smart_resize(h, w)
        table.append({"in_wh": [w, h], "out_wh": [wb, hb]})

    with open(os.path.join(DATA, "image_golden.json"), "w") as f:
        lut = normalise(np.arange(256, dtype=np.uint8)[None, :, None].repeat(3, 2))[0, :, 0]
        json.dump({"generator": "scripts/reference/image_golden.py", "normalisation": "(x-127.5)/127.5",
                   "norm_lut": [f32(v) for v in lut],
                   "smart_resize": table, "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    for c in cases:
        print(c["name"], c["orig_hw"], "->", c["resized_hw"], "grid", c["grid_thw"],
              "tokens", c["n_tokens"], "delta", c.get("rope_delta"))
    print("table", table)


if __name__ == "__main__":
    main()
