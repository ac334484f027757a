#!/usr/bin/python3
"""Plots a `gpnpu sweep` results file (HDF5): PNG heatmaps of decode tokens/s and of
image latency (ms per image) over OCM size x DDR bandwidth, and a roofline with
every point of every workload.

    /usr/bin/python3 scripts/plot_sweep.py results.h5 [--out-dir DIR] [--x ddr_gbps] [--y ocm_bytes]

Writes DIR/decode_tokens_per_s.png, DIR/image_ms.png (when the sweep ran the image
workload), DIR/roofline.png and DIR/pareto.png (decode tokens/s against tokens/J and
image program images/s against images/J, the Pareto front marked; sweeps with energy
columns); DIR defaults to the file's directory. Keys swept
besides the two heatmap axes get one panel per combination of their values.
Failed points (status other than "ok", or a workload that did not fit) are blank
cells. Uses Debian's python3-matplotlib, python3-h5py and python3-numpy.
"""
import argparse
import itertools
import math
import os
import sys

DEBIAN_PYTHON = "/usr/bin/python3"
try:
    import h5py
    import matplotlib
    import numpy as np
except ModuleNotFoundError as missing:
    # Another Python (a venv, conda) without Debian's packages: run again under Debian's,
    # once; else say what is missing and how to get it.
    if (os.path.exists(DEBIAN_PYTHON) and os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON)
            and not os.environ.get("GPNPU_PLOT_SWEEP_REEXEC")):
        print(f"plot_sweep: {sys.executable} has no {missing.name}; running again with {DEBIAN_PYTHON}",
              file=sys.stderr)
        os.environ["GPNPU_PLOT_SWEEP_REEXEC"] = "1"
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit(f"error: plot_sweep.py needs the Python module '{missing.name}': run it with {DEBIAN_PYTHON} and "
             f"Debian's python3-h5py, python3-matplotlib and python3-numpy (scripts/install-deps.sh installs them)")

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def load(path):
    with h5py.File(path, "r") as f:
        if "points" not in f or "keys" not in f.attrs:
            sys.exit(f"error: '{path}' is not a gpnpu sweep file (no /points or keys attribute)")
        pts = f["points"][()]
        keys = [k for k in text(f.attrs["keys"]).split(",") if k]
        meta = {k: text(f.attrs[k]) for k in ("model", "preset", "workload")}
    cols = {name: pts[name] for name in pts.dtype.names}
    for name, v in cols.items():
        if v.dtype.kind == "S":
            cols[name] = np.array([text(x) for x in v])
    return cols, keys, meta


def axis_label(key, value):
    if key.endswith("_bytes"):
        v = int(value)
        for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if v >= m and v % m == 0:
                return f"{v // m} {unit}"
        return f"{v} B"
    if isinstance(value, str):
        return value
    return f"{value:g}"


def key_title(key):
    return {"ocm_bytes": "OCM size", "ddr_gbps": "DDR bandwidth (GB/s)", "pe_rows": "PE rows",
            "pe_cols": "PE columns", "clock_ghz": "clock (GHz)"}.get(key, key)


def ok_mask(cols, workload):
    st = cols.get(f"{workload}_status")
    if st is None:
        st = cols["status"]
    return np.array([s == "ok" for s in st])


def heatmap(cols, keys, meta, metric, workload, title, fmt, xkey, ykey, out, better="high"):
    if metric not in cols:
        return None
    ok = ok_mask(cols, workload)
    others = [k for k in keys if k not in (xkey, ykey)]
    other_vals = [sorted(set(cols[k].tolist())) for k in others]
    combos = list(itertools.product(*other_vals)) or [()]
    xs = sorted(set(cols[xkey].tolist())) if xkey in cols else [None]
    ys = sorted(set(cols[ykey].tolist())) if ykey in cols else [None]
    n = len(combos)
    ncol = min(n, 3)
    nrow = math.ceil(n / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(1.6 + 1.3 * len(xs) * ncol, 1.2 + 0.75 * len(ys) * nrow + 0.6),
                             squeeze=False)
    vals = np.asarray(cols[metric], dtype=float)
    finite = vals[ok & np.isfinite(vals)]
    vmin, vmax = (finite.min(), finite.max()) if finite.size else (0, 1)
    cmap = plt.get_cmap("viridis" if better == "high" else "viridis_r").copy()
    cmap.set_bad("#dddddd")
    for i, combo in enumerate(combos):
        ax = axes[i // ncol][i % ncol]
        grid = np.full((len(ys), len(xs)), np.nan)
        for r in range(len(vals)):
            if not ok[r] or any(cols[k][r] != v for k, v in zip(others, combo)):
                continue
            xi = xs.index(cols[xkey][r]) if xkey in cols else 0
            yi = ys.index(cols[ykey][r]) if ykey in cols else 0
            grid[yi, xi] = vals[r]
        im = ax.imshow(np.ma.masked_invalid(grid), origin="lower", cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
        for yi in range(len(ys)):
            for xi in range(len(xs)):
                v = grid[yi, xi]
                label = fmt.format(v) if np.isfinite(v) else "n/a"
                shade = (v - vmin) / (vmax - vmin) if np.isfinite(v) and vmax > vmin else 0.5
                dark = shade < 0.6 if better == "high" else shade > 0.4
                ax.text(xi, yi, label, ha="center", va="center", fontsize=8, color="white" if dark else "black")
        ax.set_xticks(range(len(xs)), [axis_label(xkey, x) if x is not None else "" for x in xs])
        ax.set_yticks(range(len(ys)), [axis_label(ykey, y) if y is not None else "" for y in ys])
        ax.set_xlabel(key_title(xkey))
        if i % ncol == 0:
            ax.set_ylabel(key_title(ykey))
        if others:
            ax.set_title(", ".join(f"{k}={axis_label(k, v)}" for k, v in zip(others, combo)), fontsize=9)
    for j in range(n, nrow * ncol):
        axes[j // ncol][j % ncol].axis("off")
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.85)
    fig.suptitle(f"{title}\n{meta['model']}, preset {meta['preset']} (grey: does not fit)", fontsize=10,
                 y=1.0 + (0.08 if others else 0.0) / nrow)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def roofline(cols, keys, meta, out):
    fig, ax = plt.subplots(figsize=(7.5, 5))
    roofs = set()
    markers = {"decode": "o", "image": "s"}
    bw = np.asarray(cols["ddr_peak_bytes_per_cycle"], dtype=float)
    norm = matplotlib.colors.LogNorm(vmin=bw.min(), vmax=bw.max() * 1.0001)
    cmap = plt.get_cmap("plasma")
    imin, imax = math.inf, 0.0
    plotted = False
    for w in ("image", "decode"):
        if f"{w}_cycles" not in cols:
            continue
        ok = ok_mask(cols, w)
        macs = np.asarray(cols[f"{w}_macs"], dtype=float)
        byts = np.asarray(cols[f"{w}_ddr_bytes"], dtype=float)
        cyc = np.asarray(cols[f"{w}_cycles"], dtype=float)
        sel = ok & (byts > 0) & (cyc > 0)
        if not sel.any():
            continue
        inten = macs[sel] / byts[sel]
        perf = macs[sel] / cyc[sel]
        imin, imax = min(imin, inten.min()), max(imax, inten.max())
        ax.scatter(inten, perf, c=bw[sel], cmap=cmap, norm=norm, marker=markers[w], s=46, edgecolors="black",
                   linewidths=0.5, label=f"{w} ({sel.sum()} points)", zorder=3)
        plotted = True
        for r in np.nonzero(sel)[0]:
            roofs.add((float(cols["mac_peak"][r]), float(bw[r])))
    if not plotted:
        ax.text(0.5, 0.5, "no successful points", transform=ax.transAxes, ha="center")
    else:
        xs = np.logspace(math.log10(imin / 8), math.log10(imax * 8), 200)
        for peak, b in sorted(roofs):
            ax.plot(xs, np.minimum(peak, xs * b), color=cmap(norm(b)), lw=1.2, alpha=0.8, zorder=2)
            ax.annotate(f"{b * 1.0:.3g} B/cycle, {peak:g} MAC/cycle", (xs[0], xs[0] * b), fontsize=7,
                        color=cmap(norm(b)), xytext=(2, 4), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (model MACs per DDR byte)")
    ax.set_ylabel("achieved MAC per cycle")
    ax.grid(True, which="both", alpha=0.3)
    sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=ax, label="DDR bytes per cycle (roof slope)")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"Roofline: every sweep point ({meta['model']}, keys: {', '.join(keys)})", fontsize=10)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def pareto_front(xs, ys):
    """Indices of the points no other point beats on both (higher is better on both):
    a point is dominated when another is >= on both and > on one. Sorted by x."""
    idx = []
    for i in range(len(xs)):
        if not any(xs[j] >= xs[i] and ys[j] >= ys[i] and (xs[j] > xs[i] or ys[j] > ys[i]) for j in range(len(xs))):
            idx.append(i)
    return sorted(idx, key=lambda i: (xs[i], -ys[i]))


def pareto(cols, keys, meta, out):
    """Speed against energy, one point per machine, the Pareto front marked: decode
    (tokens/s against tokens/J) and, when the sweep ran it, the image program
    (images/s against images/J)."""
    if "decode_tokens_per_j" not in cols and "image_energy_mj" not in cols:
        return None
    panels = []
    if "decode_tokens_per_j" in cols:
        panels.append(("decode", np.asarray(cols["decode_tokens_per_j"], dtype=float),
                       np.asarray(cols["decode_tokens_per_s"], dtype=float), "decode tokens per joule",
                       "decode tokens per second", "one decode step, 140 tokens cached"))
    if "image_energy_mj" in cols:
        panels.append(("image", 1e3 / np.asarray(cols["image_energy_mj"], dtype=float),
                       1e3 / np.asarray(cols["image_ms"], dtype=float), "images per joule", "images per second",
                       "the image program: 256x256 image, 128-token prompt"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 5), squeeze=False)
    for ax, (w, x, y, xl, yl, what) in zip(axes[0], panels):
        sel = np.nonzero(ok_mask(cols, w) & np.isfinite(x) & np.isfinite(y))[0]
        xs, ys = x[sel].tolist(), y[sel].tolist()
        front = pareto_front(xs, ys)
        ax.scatter(xs, ys, s=40, color="#1f77b4", edgecolors="black", linewidths=0.5, zorder=3,
                   label=f"{len(xs)} machines")
        if front:
            fx, fy = [xs[i] for i in front], [ys[i] for i in front]
            ax.plot(fx, fy, color="#d62728", lw=1.2, zorder=2)
            ax.scatter(fx, fy, s=160, facecolors="none", edgecolors="#d62728", linewidths=1.5, zorder=4,
                       label=f"Pareto front ({len(front)})")
        # Labels: points of about the same speed are stacked, so their labels go one under the other.
        rank = {}
        for i in sorted(range(len(xs)), key=lambda i: -xs[i]):
            key = round(ys[i], 1 if ys[i] < 100 else 0)
            k = rank.setdefault(key, []).__len__()
            rank[key].append(i)
            label = ", ".join(axis_label(kk, cols[kk][sel[i]]) for kk in keys)
            ax.annotate(label, (xs[i], ys[i]), fontsize=6.5, xytext=(6, 4 - 9 * k), textcoords="offset points",
                        color="#d62728" if i in front else "black")
        ax.set_xlabel(f"{xl} (whole chip: DDR, OCM, PEs, static)")
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
        ax.set_title(what, fontsize=9)
        lo, hi = min(xs), max(xs)
        ax.set_xlim(lo - 0.05 * (hi - lo), hi + 0.3 * (hi - lo))
    fig.suptitle(f"Speed against energy ({meta['model']}, keys: {', '.join(keys)}); the front: no other machine is "
                 "both faster and more frugal", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="HDF5 file written by gpnpu sweep / sweep-merge")
    ap.add_argument("--out-dir", help="where the PNGs go (default: beside the results file)")
    ap.add_argument("--x", default="ddr_gbps", help="heatmap x axis key (default ddr_gbps)")
    ap.add_argument("--y", default="ocm_bytes", help="heatmap y axis key (default ocm_bytes)")
    a = ap.parse_args()
    cols, keys, meta = load(a.results)
    for k in (a.x, a.y):
        if k not in keys:
            print(f"note: '{k}' is not swept in {a.results} (keys: {', '.join(keys)}); one row/column", file=sys.stderr)
    out_dir = a.out_dir or os.path.dirname(os.path.abspath(a.results))
    os.makedirs(out_dir, exist_ok=True)
    written = [
        heatmap(cols, keys, meta, "decode_tokens_per_s", "decode", "Decode tokens/s (one step, 140 tokens cached)",
                "{:.1f}", a.x, a.y, os.path.join(out_dir, "decode_tokens_per_s.png"), "high"),
        heatmap(cols, keys, meta, "image_ms", "image", "Image to first token, ms per image (256x256, 128-token prompt)",
                "{:.1f}", a.x, a.y, os.path.join(out_dir, "image_ms.png"), "low"),
        roofline(cols, keys, meta, os.path.join(out_dir, "roofline.png")),
        pareto(cols, keys, meta, os.path.join(out_dir, "pareto.png")),
    ]
    for w in written:
        if w:
            print(w)


if __name__ == "__main__":
    main()
