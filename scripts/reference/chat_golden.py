"""The PyTorch reference of a multi-turn conversation (issue 18, docs/chat.md): each turn
prefilled onto the KV cache the earlier turns left, greedy decoding, W4A16 weights.

  /usr/bin/python3 scripts/reference/chat_golden.py --model DIR --bundle FILE --spec SPEC.json --out OUT.h5

SPEC.json: {"steps": N, "turns": [{"ids": [...], "pixels": FILE or null, "grid": [T, H, W] or null}, ...]}
with each turn's ids as `gpnpu chat` fed them (image pads expanded). A later turn's ids start
by closing the previous answer: that answer's last token (which no run has fed), <|im_end|>
unless that token is it, and "\\n" (198). The reference closes the answer with ITS OWN last
token; where the given ids differ it uses its own and says so. Positions: the turn's
get_rope_index positions shifted by the next free position; decode tokens take the next
free position each. A turn decodes until <|im_end|>/<|endoftext|> or N answer tokens (the
first from the prefill), as the host does.

OUT.h5: per turn i (1-based), group turn{i}: ids (int32, as the reference fed them), tokens
(int32), logits (float32 [tokens, vocab]: row 0 the prefill's last row, row k after
feeding tokens[k-1]), attrs next_position.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3vl as Q  # noqa: E402
from golden import read_pixels, setup_torch  # noqa: E402

IM_END, END_OF_TEXT, NEWLINE = 151645, 151643, 198


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint dir (config.json)")
    ap.add_argument("--bundle", required=True, help="W4A16 bundle from `gpnpu quantize`")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    setup_torch()
    cfg = Q.Config.from_dir(a.model)
    spec = json.load(open(a.spec))
    m = Q.Qwen3VL(cfg, Q.load_w4a16(a.bundle, a.model))
    steps = int(spec["steps"])
    import h5py
    cache, next_pos, last = None, 0, None
    with h5py.File(a.out, "w") as f:
        for i, turn in enumerate(spec["turns"], 1):
            ids = [int(x) for x in turn["ids"]]
            if last is not None:
                close = [last] + ([IM_END] if last != IM_END else []) + [NEWLINE]
                given = 2 if ids[0] == IM_END else 3  # the given ids' own closing
                if ids[:given] != close:
                    print(f"turn {i}: the ids close the previous answer with {ids[:given]}, the reference's "
                          f"answer ends with {last}: using {close}")
                ids = close + ids[given:]
            grids = [tuple(turn["grid"])] if turn.get("grid") else []
            pix = read_pixels(turn["pixels"], cfg.patch_dim) if turn.get("pixels") else None
            with torch.no_grad():
                pos, delta = m.position_ids(ids, grids)
                x, rows, ds = m.embed_prompt(ids, pix, grids)
                logits, cache = m.decoder(x, pos + next_pos, cache, rows, ds)
                next_pos += len(ids) + delta
                out = [logits[-1]]
                toks = [int(torch.argmax(out[-1]).item())]
                while len(toks) < steps and toks[-1] not in (IM_END, END_OF_TEXT):
                    x = m.embed[torch.tensor([toks[-1]])]
                    lg, cache = m.decoder(x, torch.full((3, 1), next_pos, dtype=torch.int64), cache)
                    next_pos += 1
                    out.append(lg[0])
                    toks.append(int(torch.argmax(lg[0]).item()))
            last = toks[-1]
            g = f.create_group(f"turn{i}")
            g.create_dataset("ids", data=np.asarray(ids, dtype=np.int32))
            g.create_dataset("tokens", data=np.asarray(toks, dtype=np.int32))
            g.create_dataset("logits", data=torch.stack(out).numpy().astype(np.float32))
            g.attrs["next_position"] = next_pos
            print(f"turn {i}: {len(ids)} tokens fed, answer {toks}")


if __name__ == "__main__":
    main()
