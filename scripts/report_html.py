#!/usr/bin/python3
"""Turns a `gpnpu describe --report-json` run report (schema gpnpu-describe-report/1,
docs/report.md) into ONE self-contained HTML page a person can look at:

    /usr/bin/python3 scripts/report_html.py --json REPORT.json --html OUT.html [--plots DIR]

The page holds the photo as the model saw it, the answers side by side, a bar chart
of cycles per stage against each stage's MAC and DDR floors (linear bars), a roofline
with every kernel call as a point, cycles and DDR bytes per decode step, the energy split and power over time
(reports with "energy"), the kernels
furthest above their floors, the per-step gate table, the totals and the resolved
machine config; for a functional run also the fp16 headroom chart (the largest |x|
every kernel call wrote in fp16 against 65,504). A run on synthetic (random) weights says so above its answers. Everything is embedded (images
as data: URIs, CSS inline, no script, no font, no link): the page works offline from
a file (answer text in CJK scripts needs a CJK font on the viewing machine:
scripts/install-deps.sh installs Debian's fonts-noto-cjk). With --plots DIR the
charts are also written there as NAME.png (the same bytes the page embeds).

A malformed report (unreadable, not JSON, a missing key, a key of the wrong type)
exits 2 with one line naming the file and the key. Output files are written under a
temporary name and renamed. Uses Debian's python3-matplotlib and python3-numpy.
A report file may also be gzip-compressed (the test fixtures are).
"""
import argparse
import base64
import gzip
import html
import io
import json
import math
import os
import sys
import tempfile

SCHEMA = "gpnpu-describe-report/1"
CHARTS = ("stages", "roofline", "steps")  # data-chart names of the page's charts, in page order
ENERGY_CHARTS = ("energy", "power")  # added when the report has "energy" (issue 15)
ENERGY_PARTS = ("image", "decode_per_token", "run")
ENERGY_SPLIT = ("ddr", "ocm", "mac", "other", "static")


def charts_of(rep):
    return CHARTS + (ENERGY_CHARTS if "energy" in rep else ()) + (("headroom",) if rep.get("numerics") else ())


class ReportError(Exception):
    pass


# ---------------------------------------------------------------------------- input

class Checked:
    """Reads keys from the report with a path for the error message: 'stages[2].cycles'."""

    def __init__(self, path):
        self.path = path

    def get(self, obj, key, where, kinds=None, optional=False):
        if not isinstance(obj, dict):
            raise ReportError(f"{self.path}: '{where or '(top level)'}' is not an object")
        name = f"{where}.{key}" if where else key
        if key not in obj:
            if optional:
                return None
            raise ReportError(f"{self.path}: missing key '{name}'")
        v = obj[key]
        if kinds is not None and not isinstance(v, kinds):
            if optional and v is None:
                return None
            want = " or ".join(k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
            raise ReportError(f"{self.path}: key '{name}' is {type(v).__name__}, expected {want}")
        if isinstance(v, bool) and kinds in (NUM, int):
            raise ReportError(f"{self.path}: key '{name}' is bool, expected a number")
        return v


NUM = (int, float)


def load_report(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ReportError(f"{path}: cannot read the report ({e.strerror})")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise ReportError(f"{path}: broken gzip data ({e})")
    try:
        rep = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: not JSON ({e})")
    c = Checked(path)
    if not isinstance(rep, dict):
        raise ReportError(f"{path}: the report is not a JSON object")
    schema = c.get(rep, "schema", "", str)
    if schema != SCHEMA:
        raise ReportError(f"{path}: key 'schema' is '{schema}', expected '{SCHEMA}'")
    # Validate everything the page uses up front, so a bad report fails with the key's
    # name instead of a traceback half-way through a chart.
    c.get(rep, "mode", "", str)
    model = c.get(rep, "model", "", dict)
    c.get(model, "spec", "model", str)
    mach = c.get(rep, "machine", "", dict)
    for k in ("clock_ghz", "ddr_bytes_per_cycle", "mac_per_cycle_f16", "mac_per_cycle_int8"):
        c.get(mach, k, "machine", NUM)
    c.get(rep, "config", "", dict)
    img = c.get(rep, "image", "", dict)
    c.get(img, "png_base64", "image", str)
    c.get(img, "width", "image", NUM)
    c.get(img, "height", "image", NUM)
    stages = c.get(rep, "stages", "", list)
    for i, s in enumerate(stages):
        w = f"stages[{i}]"
        c.get(s, "name", w, str)
        c.get(s, "program", w, str)
        for k in ("cycles", "mac_floor_cycles", "ddr_floor_cycles"):
            c.get(s, k, w, NUM)
    tot = c.get(rep, "totals", "", dict)
    for k in ("cycles", "ms", "tokens"):
        c.get(tot, k, "totals", NUM)
    for list_key in ("kernels", "worst_kernels"):
        for i, k in enumerate(c.get(rep, list_key, "", list)):
            w = f"{list_key}[{i}]"
            for f in ("program", "stage", "mark", "kernel"):
                c.get(k, f, w, str)
            for f in ("cycles", "floor", "macs", "ddr_bytes"):
                c.get(k, f, w, NUM)
            c.get(k, "int8", w, bool)
    for i, s in enumerate(c.get(rep, "steps", "", list)):
        w = f"steps[{i}]"
        c.get(s, "step", w, int)
        c.get(s, "ok", w, bool)
    answers = c.get(rep, "answers", "", dict)
    dev = c.get(answers, "device", "answers", dict)
    c.get(dev, "ids", "answers.device", list)
    for name, a in answers.items():
        c.get(a, "ids", f"answers.{name}", list)
        if "text" in a and a["text"] is not None and not isinstance(a["text"], str):
            raise ReportError(f"{path}: key 'answers.{name}.text' is {type(a['text']).__name__}, expected str or null")
    gates = c.get(rep, "gates", "", dict)
    c.get(gates, "ok", "gates", bool)
    en = c.get(rep, "energy", "", dict, optional=True)
    if en is not None:  # reports made before issue 15 have none: the page leaves the energy charts out
        c.get(en, "window_cycles", "energy", NUM)
        c.get(en, "tokens_per_j", "energy", NUM)
        for part in ENERGY_PARTS:
            e_ = c.get(en, part, "energy", dict, optional=part == "decode_per_token")
            if e_ is None:
                continue
            for k in ("total_mj", "average_w"):
                c.get(e_, k, f"energy.{part}", NUM)
            split = c.get(e_, "split_mj", f"energy.{part}", dict)
            for k in ENERGY_SPLIT:
                c.get(split, k, f"energy.{part}.split_mj", NUM)
        for k in ("image_power_w", "decode_power_w"):
            for i, v in enumerate(c.get(en, k, "energy", list)):
                if isinstance(v, bool) or not isinstance(v, NUM):
                    raise ReportError(f"{path}: key 'energy.{k}[{i}]' is {type(v).__name__}, expected a number")
    numerics = c.get(rep, "numerics", "", dict, optional=True)  # null in timing-only runs, absent in old reports
    if numerics is not None:
        c.get(numerics, "fp16_overflow", "numerics", str)
        for k in ("fp16_max", "max_abs", "overflow", "underflow", "nan"):
            c.get(numerics, k, "numerics", NUM)
        for i, k in enumerate(c.get(numerics, "calls", "numerics", list)):
            w = f"numerics.calls[{i}]"
            for f in ("program", "mark", "kernel"):
                c.get(k, f, w, str)
            for f in ("max_abs", "overflow", "underflow", "nan"):
                c.get(k, f, w, NUM)
    try:
        png = base64.b64decode(img["png_base64"], validate=True)
    except ValueError:
        raise ReportError(f"{path}: key 'image.png_base64' is not base64")
    if not png.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ReportError(f"{path}: key 'image.png_base64' is not a PNG")
    return rep


# ---------------------------------------------------------------------------- charts

# One colour per program/stage, fixed so every report reads the same.
STAGE_COLOURS = {"vision_tower": "#1f77b4", "prefill": "#d62728", "head": "#9467bd", "decode": "#2ca02c"}
# (no light yellow: every colour here must also read as text on white)
EXTRA_COLOURS = ["#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#6b6b00", "#17becf"]


def stage_colour(stage, seen):
    if stage in STAGE_COLOURS:
        return STAGE_COLOURS[stage]
    if stage not in seen:
        seen[stage] = EXTRA_COLOURS[len(seen) % len(EXTRA_COLOURS)]
    return seen[stage]


def png_bytes(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def fmt_cycles(v):
    v = float(v)
    for unit, m in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= m:
            return f"{v / m:.3g}{unit}"
    return f"{v:.0f}"


def stage_chart(plt, rep):
    """Grouped horizontal bars on a LINEAR axis (bar lengths compare as the cycles do):
    each stage's cycles beside its MAC floor and DDR floor; the label gives the figures,
    so a stage too short to see still reads. The legend sits under the axes, clear of
    the bars and their labels."""
    stages = rep["stages"]
    clock = rep["machine"]["clock_ghz"]
    fig, ax = plt.subplots(figsize=(8.0, 1.5 + 0.75 * max(1, len(stages))))
    h = 0.26
    seen = {}
    names = []
    for i, s in enumerate(stages):
        y = len(stages) - 1 - i
        label = s["name"] + (f" ({s['steps']} steps)" if isinstance(s.get("steps"), int) else "")
        names.append((y, label))
        col = stage_colour(s["name"], seen)
        ax.barh(y + h, s["cycles"], h, color=col, label="cycles" if i == 0 else None)
        ax.barh(y, s["mac_floor_cycles"], h, color="#bbbbbb", hatch="//", edgecolor="#555555",
                label="MAC floor" if i == 0 else None)
        ax.barh(y - h, s["ddr_floor_cycles"], h, color="#eeeeee", hatch="..", edgecolor="#555555",
                label="DDR floor" if i == 0 else None)
        floor = max(s["mac_floor_cycles"], s["ddr_floor_cycles"])
        ratio = f", {s['cycles'] / floor:.3f}x floor" if floor > 0 else ""
        ax.text(s["cycles"], y + h, f" {fmt_cycles(s['cycles'])} = {s['cycles'] / (clock * 1e6):.4g} ms{ratio}",
                va="center", fontsize=8, color="#222222")
    ax.set_yticks([y for y, _ in names], [n for _, n in names])
    ax.set_xlabel("cycles (linear)")
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: fmt_cycles(v)))
    vals = [v for s in stages for v in (s["cycles"], s["mac_floor_cycles"], s["ddr_floor_cycles"]) if v > 0]
    ax.set_xlim(0, max(vals) * 1.5 if vals else 1)
    ax.set_ylim(-0.6, len(stages) - 0.4)
    ax.set_title(f"Cycles per stage against its floors ({rep['machine'].get('preset', '?')}, {clock:g} GHz)",
                 fontsize=10)
    if stages:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5 / (1 + 0.5 * len(stages))), ncol=3, fontsize=8,
                  frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def roofline_points(rep):
    """(x, y, group, int8, at_edge) per kernel call with MACs; edge = no DDR bytes.
    Also returns the count of calls without MACs (norms, element-wise: not on a MAC roofline)."""
    pts, no_macs = [], 0
    for k in rep["kernels"]:
        if k["macs"] <= 0 or k["cycles"] <= 0:
            no_macs += 1
            continue
        x = k["macs"] / k["ddr_bytes"] if k["ddr_bytes"] > 0 else None
        pts.append((x, k["macs"] / k["cycles"], f"{k['program']}/{k['stage']}", k["int8"], k["stage"]))
    return pts, no_macs


def roofline_groups(rep):
    """The roofline's points gathered by (program, stage, kernel, int8): calls, cycles,
    intensity and achieved rate of the group as a whole, the ceiling it can reach at that
    intensity (min(DDR x intensity, MAC peak)) and its share of that ceiling. For a
    DDR-bound group the share is its DDR bytes per cycle over the peak bandwidth."""
    m = rep["machine"]
    bw = m["ddr_bytes_per_cycle"]
    groups = {}
    for k in rep["kernels"]:
        if k["macs"] <= 0 or k["cycles"] <= 0:
            continue
        g = groups.setdefault((k["program"], k["stage"], k["kernel"], k["int8"]),
                              {"calls": 0, "cycles": 0, "macs": 0.0, "ddr_bytes": 0.0})
        g["calls"] += 1
        g["cycles"] += k["cycles"]
        g["macs"] += k["macs"]
        g["ddr_bytes"] += k["ddr_bytes"]
    out = []
    for (prog, stage, kernel, int8), g in groups.items():
        peak = m["mac_per_cycle_int8"] if int8 else m["mac_per_cycle_f16"]
        inten = g["macs"] / g["ddr_bytes"] if g["ddr_bytes"] > 0 else None
        ceiling = peak if inten is None else min(bw * inten, peak)
        rate = g["macs"] / g["cycles"]
        out.append(dict(program=prog, stage=stage, kernel=kernel, int8=int8, calls=g["calls"], cycles=g["cycles"],
                        intensity=inten, rate=rate, ceiling=ceiling,
                        bound="MAC" if inten is None or bw * inten >= peak else "DDR", share=rate / ceiling))
    out.sort(key=lambda g: -g["cycles"])
    return out


def above_roof(rep):
    """Calls drawn above the DDR roof: (call, DDR bytes per cycle over the peak) for every
    call whose counted DDR bytes over its own cycles beat the peak bandwidth. They are
    real: the GEMMs' weights are prefetched by DMA during the call before them
    (kernels/gemm.h, GemmArgs::next), and a call's DMA may be queued before its mark
    begins, so its own cycles undercount the time its bytes took."""
    bw = rep["machine"]["ddr_bytes_per_cycle"]
    out = []
    for k in rep["kernels"]:
        if k["macs"] > 0 and k["cycles"] > 0 and k["ddr_bytes"] / k["cycles"] > bw * (1 + 1e-9):
            out.append((k, k["ddr_bytes"] / k["cycles"] / bw))
    return out


def roofline_chart(plt, rep):
    import numpy as np

    m = rep["machine"]
    bw, f16, i8 = m["ddr_bytes_per_cycle"], m["mac_per_cycle_f16"], m["mac_per_cycle_int8"]
    pts, no_macs = roofline_points(rep)
    fig, ax = plt.subplots(figsize=(8.0, 5.4))
    xs = [p[0] for p in pts if p[0] is not None]
    ys = [p[1] for p in pts]
    ridge16, ridge8 = f16 / bw, i8 / bw
    xmin = min(xs + [1.0]) / 3
    xmax_data = max(xs + [ridge8 * 2])
    edge = xmax_data * 4  # calls with no DDR bytes sit here, right of every finite point
    xmax = edge * 2.5
    ymin = min(ys + [bw * xmin]) / 3
    ymax = i8 * 3
    grid = np.logspace(math.log10(xmin), math.log10(xmax), 200)
    ax.plot(grid, np.minimum(bw * grid, f16), color="black", lw=1.5,
            label=f"fp16 roofline: min({bw:.4g} B/cycle x I, {f16:g} MAC/cycle)")
    ax.plot(grid, np.minimum(bw * grid, i8), color="black", lw=1.0, ls="--",
            label=f"int8 MAC ceiling {i8:g} MAC/cycle")
    sus = m.get("ddr_sustained_bytes_per_cycle")  # ddr_model = dram: the preset's sustained stream
    if sus:
        ax.plot(grid, np.minimum(sus * grid, f16), color="#b03030", lw=1.0, ls="-.",
                label=f"DRAM {rep['dram']['preset']} sustained {sus:.4g} B/cycle "
                      f"({100 * sus / bw:.1f}% of its peak)")
    ax.axvline(edge / 1.6, color="#999999", lw=0.8, ls=":")
    seen, groups = {}, {}
    for x, y, group, int8, stage in pts:
        groups.setdefault((group, stage), []).append((edge if x is None else x, y, x is None, int8))
    for (group, stage), g in sorted(groups.items(), key=lambda t: t[0][0]):
        col = stage_colour(stage, seen)
        labelled = False
        for at_edge, int8, marker in ((False, False, "o"), (False, True, "s"), (True, False, ">"), (True, True, ">")):
            sel = [(x, y) for x, y, e, q in g if e == at_edge and q == int8]
            if not sel:
                continue
            ax.scatter([p[0] for p in sel], [p[1] for p in sel], s=22, marker=marker, color=col, alpha=0.6,
                       edgecolors="none", label=None if labelled else f"{group} ({len(g)} calls)")
            labelled = True
    # Name the three groups with the most cycles where they sit, with their share of
    # the ceiling they can reach (the table under the chart has every group).
    # The labels stand in a column at the lower right, each with a line to its group's
    # point (the group as a whole: total MACs over total bytes and over total cycles).
    for i, g in enumerate([g for g in roofline_groups(rep) if g["intensity"] is not None][:3]):
        ax.annotate(f"{g['program']}/{g['stage']} {g['kernel']} x{g['calls']}: {100 * g['share']:.1f}% of the "
                    f"{g['bound']} ceiling", (g["intensity"], g["rate"]), xytext=(0.42, 0.30 - 0.065 * i),
                    textcoords="axes fraction", fontsize=7, color="#222222",
                    arrowprops=dict(arrowstyle="-", lw=0.6, color="#666666", shrinkA=0, shrinkB=3))
    n_edge = sum(1 for p in pts if p[0] is None)
    notes = []
    above = above_roof(rep)
    if above:
        notes.append(f"{len(above)} calls above the DDR roof (up to {max(r for _, r in above):.4f}x): "
                     "bytes moved before their mark began (prefetch; see the caption)")
    if n_edge:
        notes.append(f"{n_edge} calls with 0 DDR bytes drawn at the right edge (>)")
    if no_macs:
        notes.append(f"{no_macs} calls with no MACs (norms, element-wise) not drawn")
    if any(p[3] for p in pts):
        notes.append("squares: int8 calls")
    if notes:
        ax.text(0.01, 0.01, "\n".join(notes), transform=ax.transAxes, fontsize=7, va="bottom", color="#444444")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(xmin, xmax)
    ax.set_ylim(ymin, ymax)
    ax.set_xlabel("arithmetic intensity (MAC per DDR byte)")
    ax.set_ylabel("achieved MAC per cycle")
    ax.set_title(f"Roofline: {len(pts)} kernel calls ({m.get('preset', '?')}, ridge at {ridge16:.4g} MAC/B)",
                 fontsize=10)
    ax.grid(which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    return fig


SPLIT_COLOURS = {"ddr": "#d62728", "ocm": "#ff7f0e", "mac": "#1f77b4", "other": "#9467bd", "static": "#7f7f7f"}
SPLIT_LABELS = {"ddr": "DDR", "ocm": "OCM", "mac": "MAC", "other": "other dynamic", "static": "static"}


def energy_chart(plt, rep):
    """100 % stacked bars: the image program and the mean decode step, split DDR / OCM /
    MAC / other dynamic / static, each labelled with its mJ and average W."""
    en = rep["energy"]
    rows = [(lbl, en[k]) for k, lbl in (("image", "image program"), ("decode_per_token", "decode, per token"))
            if en.get(k)]
    fig, ax = plt.subplots(figsize=(8.0, 1.2 + 0.8 * len(rows)))
    for i, (label, e_) in enumerate(rows):
        y = len(rows) - 1 - i
        total = sum(e_["split_mj"][k] for k in ENERGY_SPLIT) or 1.0
        left = 0.0
        for k in ENERGY_SPLIT:
            share = 100.0 * e_["split_mj"][k] / total
            ax.barh(y, share, 0.6, left=left, color=SPLIT_COLOURS[k], label=SPLIT_LABELS[k] if i == 0 else None)
            if share >= 6:
                ax.text(left + share / 2, y, f"{share:.0f}%", ha="center", va="center", fontsize=8, color="white")
            left += share
        ax.text(101, y, f" {e_['total_mj']:.4g} mJ\n avg {e_['average_w']:.3g} W", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)])
    ax.set_xlim(0, 125)
    ax.set_xlabel("share of the energy (%)")
    ax.set_title(f"Energy split ({en['tokens_per_j']:.3g} tokens/J over the run)", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.45, -0.35 if len(rows) < 2 else -0.22), ncol=5, fontsize=8)
    fig.tight_layout()
    return fig


def power_chart(plt, rep):
    """Power per window over time: the image program and the first decode step."""
    en = rep["energy"]
    window_ms = en["window_cycles"] / (rep["machine"]["clock_ghz"] * 1e6)
    series = [(k, lbl, en.get(k) or []) for k, lbl in (("image_power_w", "image program"),
                                                        ("decode_power_w", "first decode step"))]
    fig, axes = plt.subplots(len(series), 1, figsize=(8.0, 2.2 * len(series) + 0.4))
    for ax, (key, label, w) in zip(axes, series):
        if w:
            t = [(k + 0.5) * window_ms for k in range(len(w))]
            ax.step([k * window_ms for k in range(len(w))] + [len(w) * window_ms], list(w) + [w[-1]], where="post",
                    color="#1f77b4", lw=1.2)
            part = en["image"] if key == "image_power_w" else en.get("decode_per_token") or {}
            if part.get("average_w") is not None:
                ax.axhline(part["average_w"], color="#555555", ls="--", lw=0.8, label=f"average {part['average_w']:.3g} W")
            peak = max(w[:-1]) if len(w) > 1 else w[0]
            ax.plot([t[w.index(peak)]], [peak], "v", color="#d62728", label=f"peak {peak:.3g} W")
            ax.set_ylim(0, max(w) * 1.4)
            ax.legend(loc="upper right", ncol=2, fontsize=8)
        ax.set_ylabel("W")
        ax.set_title(f"{label}: power per {en['window_cycles']:,}-cycle window ({window_ms:.3g} ms)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("ms from the start of the run")
    fig.tight_layout()
    return fig


def decode_steps(rep):
    """(cycles per decode step, DDR bytes per decode step) from programs.decode, or
    from the steps table when a report has no programs block."""
    dec = (rep.get("programs") or {}).get("decode") or {}
    cyc, byt = dec.get("cycles_per_step"), dec.get("ddr_bytes_per_step")
    if not isinstance(cyc, list):
        cyc = [s.get("cycles", 0) for s in rep["steps"] if s["step"] >= 0]
    if not isinstance(byt, list) or len(byt) != len(cyc):
        byt = None
    return cyc, byt


def steps_chart(plt, rep):
    """Per decode step (one answer token each): cycles (top) and DDR bytes (bottom),
    with the answer's token ids under the steps when the run has them."""
    cyc, byt = decode_steps(rep)
    clock = rep["machine"]["clock_ghz"]
    fig, axes = plt.subplots(2, 1, figsize=(8.0, 4.6), sharex=True)
    steps = list(range(len(cyc)))
    if not cyc:
        for ax in axes:
            ax.text(0.5, 0.5, "no decode steps in this run (--tokens 1)", ha="center", va="center",
                    transform=ax.transAxes, fontsize=9, color="#222222")
    else:
        def panel(ax, ys, colour, label, unit, scale):
            vals = [v / scale for v in ys]
            ax.plot(steps, vals, marker="o", ms=3, color=colour, lw=1.2)
            lo, hi = min(vals), max(vals)
            ax.set_ylabel(unit, fontsize=8)
            ax.set_title(f"{label}: {lo:,.4g} .. {hi:,.4g} {unit}"
                         + (f", largest +{100 * (hi - lo) / lo:.2f}% (axis not from 0)" if lo > 0 else ""),
                         fontsize=9, loc="left")
            ax.grid(alpha=0.3)
        panel(axes[0], cyc, STAGE_COLOURS["decode"], f"cycles per step ({1 / clock:.4g} ms per M cycles)",
              "M cycles", 1e6)
        if byt:
            panel(axes[1], byt, "#1f77b4", "DDR bytes per step (weights + KV cache)", "MB", 1e6)
        else:
            axes[1].text(0.5, 0.5, "the report has no DDR bytes per step", ha="center", va="center",
                         transform=axes[1].transAxes, fontsize=9)
        axes[1].xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ids = rep["answers"]["device"]["ids"]
        axes[1].set_xlabel("decode step (step k makes answer token k + 1; token 0 comes from the image program)"
                           + (", and the token id it was fed" if ids else ""), fontsize=8)
        if ids and len(ids) >= len(cyc) and len(cyc) <= 40:
            axes[1].set_xticks(steps, [f"{k}\n{ids[k]}" for k in steps], fontsize=7)
    fig.suptitle(f"Per decode step: {len(cyc)} steps", fontsize=10)
    fig.tight_layout()
    return fig


def headroom_chart(plt, rep):
    """The largest |x| each kernel call wrote in fp16 (before rounding), in program order,
    against fp16's largest value 65,504 (log scale). Calls that overflowed are red."""
    n = rep["numerics"]
    calls = n["calls"]
    fig, ax = plt.subplots(figsize=(9.0, 3.8))
    seen = {}
    # Calls that wrote no fp16 (copies) or only zeros have no point on a log scale.
    for prog in dict.fromkeys(c["program"] for c in calls):
        idx = [i for i, c in enumerate(calls) if c["program"] == prog and c["max_abs"] > 0]
        ax.scatter(idx, [calls[i]["max_abs"] for i in idx], s=10,
                   color=stage_colour("vision_tower" if prog == "image" else "decode", seen), label=f"{prog} program")
    bad = [i for i, c in enumerate(calls) if (c["overflow"] or c["nan"]) and c["max_abs"] > 0]
    if bad:
        ax.scatter(bad, [calls[i]["max_abs"] for i in bad], s=40, facecolors="none", edgecolors="#d62728",
                   label="overflow or NaN")
    ax.axhline(n["fp16_max"], color="#d62728", ls="--", lw=1, label="fp16 max 65,504")
    if calls and n["max_abs"] > 0:
        i = max(range(len(calls)), key=lambda i: calls[i]["max_abs"])
        ax.annotate(f'{calls[i]["mark"]} ({calls[i]["program"]})', (i, calls[i]["max_abs"]), fontsize=7,
                    xytext=(4, -10), textcoords="offset points")
    ax.set_yscale("log")
    ax.set_xlabel("kernel call (program order: image program, then the decode program over all steps)")
    ax.set_ylabel("largest |x| written in fp16")
    head = n["fp16_max"] / n["max_abs"] if n["max_abs"] > 0 else float("inf")
    where = f"{head:.3g}x below 65,504" if head >= 1 else "beyond 65,504"
    ax.set_title(f"fp16 headroom: largest |x| {n['max_abs']:.4g} ({where}); "
                 f"{n['overflow']} overflowed ({n['fp16_overflow']}), {n['nan']} NaN", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def make_charts(rep):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "gpnpu"  # deterministic output
    out = {}
    fns = {"stages": stage_chart, "roofline": roofline_chart, "steps": steps_chart, "energy": energy_chart, "power": power_chart,
           "headroom": headroom_chart}
    for name in charts_of(rep):
        fig = fns[name](plt, rep)
        out[name] = png_bytes(fig)
        plt.close(fig)
    return out


# ---------------------------------------------------------------------------- page

def e(v):
    return html.escape("" if v is None else str(v))


def num(v, digits=4):
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v != 0 and abs(v) < 1e-3:
            return f"{v:.{digits}g}"
        return f"{v:,.{digits}g}" if abs(v) < 10 ** digits else f"{v:,.0f}"
    return e(v)


CSS = """
body{font-family:sans-serif;margin:0;padding:16px 24px;color:#222;background:#fafafa;max-width:1400px}
h1{font-size:1.4em;margin:0 0 4px}h2{font-size:1.1em;margin:24px 0 8px;border-bottom:1px solid #ccc}
.cmd{font-family:monospace;font-size:.85em;color:#555;word-break:break-all}
.top{display:flex;gap:24px;align-items:flex-start;flex-wrap:wrap}
.photo img{image-rendering:pixelated;border:1px solid #999;max-width:320px;height:auto}
.photo figcaption{font-size:.8em;color:#555;max-width:320px}
.answers{display:flex;gap:12px;flex-wrap:wrap;flex:1}
.answer{flex:1 1 220px;background:#fff;border:1px solid #ccc;border-radius:6px;padding:8px 12px}
.answer h3{margin:0 0 6px;font-size:.95em}.answer .text{white-space:pre-wrap;font-size:1.05em}
.answer .none{color:#888;font-style:italic}.answer details{font-size:.75em;color:#555}
.answer .ids{font-family:monospace;word-break:break-all;font-size:.8em;color:#444;margin-top:6px}
.synthetic{background:#fff3cd;border:1px solid #b58900;border-radius:6px;padding:6px 12px;margin:0 0 10px;color:#222}
table{border-collapse:collapse;font-size:.85em;background:#fff}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}th{background:#eee}
td.l,th.l{text-align:left}
tr.ok td.gate{background:#c8f0c8;font-weight:bold}tr.fail td.gate{background:#f4b4b4;font-weight:bold}
tr.fail td{background:#fde8e8}
.gates-ok{color:#1a7f1a;font-weight:bold}.gates-fail{color:#b00;font-weight:bold}
.charts{display:flex;flex-wrap:wrap;gap:16px}.chart img{max-width:100%;height:auto;border:1px solid #ccc;background:#fff}
.chart figcaption{font-size:.8em;color:#555;max-width:800px}
.totals td:first-child{text-align:left}.tables{display:flex;gap:24px;flex-wrap:wrap}
details.config summary{cursor:pointer;font-weight:bold}
"""

ANSWER_LABELS = [("device", "Device (simulated chip)"), ("chain", "Chain (host reference of the same program)"),
                 ("reference_w4a16", "Reference, W4A16 (PyTorch)"), ("reference_fp32", "Reference, fp32 (PyTorch)")]


def answers_html(rep):
    ans = rep["answers"]
    order = [k for k, _ in ANSWER_LABELS if k in ans] + sorted(k for k in ans if k not in dict(ANSWER_LABELS))
    dev_ids = ans["device"]["ids"]
    out = []
    for k in order:
        a = ans[k]
        label = dict(ANSWER_LABELS).get(k, k)
        text = a.get("text")
        if text is None:
            body = ('<div class="text none">no text: timing-only run, the token ids are placeholders</div>'
                    if rep["mode"] == "timing-only" else '<div class="text none">no text</div>')
        else:
            body = f'<div class="text">{e(text)}</div>'
        agree = ""
        if k != "device" and rep["mode"] != "timing-only":
            n = min(len(a["ids"]), len(dev_ids))
            same = sum(1 for i in range(n) if a["ids"][i] == dev_ids[i])
            first = next((i for i in range(n) if a["ids"][i] != dev_ids[i]), None)
            agree = (f'<div class="agree">matches the device on {same}/{max(len(a["ids"]), len(dev_ids))} tokens'
                     + (f", first difference at token {first}" if first is not None else "") + "</div>")
        out.append(f'<div class="answer" data-answer="{e(k)}"><h3>{e(label)}</h3>{body}{agree}'
                   f'<div class="ids">{len(a["ids"])} token ids: {e(" ".join(str(i) for i in a["ids"])) or "none"}</div></div>')
    return '<div class="answers">' + "".join(out) + "</div>"


def is_synthetic(rep):
    m = rep["model"]
    return m.get("synthetic") is True or (m.get("synthetic") is None and m["spec"].startswith("synthetic:"))


def synthetic_html(rep):
    if not is_synthetic(rep):
        return ""
    return ('<p class="synthetic" id="synthetic"><b>Synthetic weights:</b> this model\'s weights are random '
            '(seeded), so the answer text is meaningless — repeated or foreign-looking tokens are expected. '
            'What the run shows is that the simulated chip computes what the reference computes (the gates) '
            'and how many cycles it takes. Give <code>--model</code> a real Qwen3-VL checkpoint for a real '
            'answer.</p>')


def photo_html(rep):
    img = rep["image"]
    cap = [f"{e(img.get('path') or 'image')}: {num(img['width'])} x {num(img['height'])} as the model saw it"]
    if isinstance(img.get("grid"), list):
        cap.append(f"patch grid {e(' x '.join(str(g) for g in img['grid']))} (t x h x w)")
    if img.get("attribution"):
        cap.append(f"Photo: {e(img['attribution'])}")
    if isinstance(rep.get("prompt"), dict):
        p = rep["prompt"]
        cap.append(f"Prompt: “{e(p.get('text'))}” ({num(p.get('tokens'))} tokens, "
                   f"{num(p.get('image_tokens'))} image tokens from row {num(p.get('image_start'))})")
    return (f'<figure class="photo"><img id="photo" alt="the photo as the model saw it" '
            f'width="{int(img["width"])}" height="{int(img["height"])}" '
            f'src="data:image/png;base64,{img["png_base64"]}"><figcaption>{"<br>".join(cap)}</figcaption></figure>')


def kernel_table(rows, title):
    head = ('<tr><th class="l">program</th><th class="l">stage</th><th class="l">call</th><th class="l">kernel</th>'
            '<th>cycles</th><th>floor</th><th>ratio</th><th>above floor</th></tr>')
    body = []
    for k in rows:
        ratio = f"{k['cycles'] / k['floor']:.3f}" if k["floor"] > 0 else "—"
        body.append(f'<tr><td class="l">{e(k["program"])}</td><td class="l">{e(k["stage"])}</td>'
                    f'<td class="l">{e(k["mark"])}</td><td class="l">{e(k["kernel"])}{" (int8)" if k["int8"] else ""}</td>'
                    f'<td>{num(int(k["cycles"]))}</td><td>{num(int(round(k["floor"])))}</td><td>{ratio}</td>'
                    f'<td>{num(int(round(k["cycles"] - k["floor"])))}</td></tr>')
    return f'<div><h3>{e(title)}</h3><table class="kernels">{head}{"".join(body)}</table></div>'


def tok(v):
    return "—" if v is None else e(v)  # a token id, without thousands separators


def steps_html(rep):
    head = ("<tr><th>step</th><th>pos</th><th>device token</th><th>chain token</th><th>logits cosine</th>"
            "<th>top-2 margin</th><th>cache slots</th><th>slot cosine</th><th>gate</th><th>cycles</th><th>wall s</th></tr>")
    rows = []
    for s in rep["steps"]:
        slots = s.get("cache_slots")
        exp = s.get("cache_expected")
        slot_txt = num(slots) + (f" / {num(exp)}" if exp is not None and exp != slots else "")
        label = "image" if s["step"] == -1 else num(s["step"])
        cos = s.get("cosine")
        slot_cos = "—" if s.get("slot_cosine") is None else f"{s['slot_cosine']:.6f}"
        rows.append(f'<tr class="{"ok" if s["ok"] else "fail"}"><td>{label}</td><td>{num(s.get("pos"))}</td>'
                    f'<td>{tok(s.get("device_token"))}</td><td>{tok(s.get("chain_token"))}</td>'
                    f'<td>{"—" if cos is None else f"{cos:.6f}"}</td><td>{num(s.get("margin"))}</td>'
                    f'<td>{slot_txt}</td><td>{slot_cos}</td>'
                    f'<td class="gate">{"OK" if s["ok"] else "FAIL"}</td><td>{num(s.get("cycles"))}</td>'
                    f'<td>{num(s.get("wall_s"), 3)}</td></tr>')
    g = rep["gates"]
    summary = (f'<p class="{"gates-ok" if g["ok"] else "gates-fail"}">Gates: {"all OK" if g["ok"] else "FAILED"}'
               + (f' (negative control: {e(g["negative_control"])})' if g.get("negative_control") else "")
               + (" — timing-only: no chain to compare with" if rep["mode"] == "timing-only" else "") + "</p>")
    fails = g.get("failures") or []
    if fails:
        summary += "<ul>" + "".join(f"<li>{e(f)}</li>" for f in fails) + "</ul>"
    return summary + f'<table class="steps">{head}{"".join(rows)}</table>'


def totals_html(rep):
    t, m = rep["totals"], rep["machine"]
    rows = [("total cycles", num(t["cycles"])), ("time at the clock", f'{num(t["ms"])} ms at {m["clock_ghz"]:g} GHz'),
            ("tokens", num(t["tokens"]))]
    for k, label, unit in (("tokens_per_s", "tokens per second", ""), ("decode_ms_per_token", "decode time per token", " ms"),
                           ("ddr_bytes_per_token", "DDR bytes per token", " B"),
                           ("decode_bytes_per_cycle", "decode DDR bytes per cycle", f" (peak {m['ddr_bytes_per_cycle']:.4g})"),
                           ("decode_roofline_share", "decode share of the DDR roofline", "")):
        if t.get(k) is not None:
            v = f"{100 * t[k]:.2f} %" if k == "decode_roofline_share" else num(t[k])
            rows.append((label, v + unit))
    for s in rep["stages"]:
        rows.append((f"stage {s['name']}", f"{num(s['cycles'])} cycles = {num(s.get('ms'))} ms"))
    if isinstance(rep.get("wall_s"), dict):
        rows.append(("simulator wall time", ", ".join(f"{e(k)} {num(v, 3)} s" for k, v in rep["wall_s"].items())))
    return '<table class="totals">' + "".join(f"<tr><td>{e(a)}</td><td>{b}</td></tr>" for a, b in rows) + "</table>"


def energy_html(rep, charts):
    if "energy" not in rep:
        return ""
    en = rep["energy"]
    head = ('<tr><th class="l"></th><th>mJ</th>' + "".join(f"<th>{SPLIT_LABELS[k]}</th>" for k in ENERGY_SPLIT) +
            "<th>average W</th><th>peak W</th></tr>")
    rows = []
    for k, label in (("image", "image program"), ("decode_per_token", "decode, per token"), ("run", "whole run")):
        e_ = en.get(k)
        if not e_:
            continue
        peak = e_.get("peak_w")
        rows.append(f'<tr><td class="l">{label}</td><td>{e_["total_mj"]:.4g}</td>' +
                    "".join(f'<td>{e_["split_mj"][s]:.4g}</td>' for s in ENERGY_SPLIT) +
                    f'<td>{e_["average_w"]:.4g}</td><td>{"-" if peak is None else f"{peak:.4g}"}</td></tr>')
    fams = sorted(en.get("kernel_families", []), key=lambda f: -f.get("energy_mj", 0))[:10]
    fam_rows = "".join(f'<tr><td class="l">{e(f["program"])}</td><td class="l">{e(f["kernel"])}</td><td>{f["calls"]:,}</td>'
                       f'<td>{f["energy_mj"]:.4g}</td></tr>' for f in fams)
    return (f"<h2>Energy and power</h2>\n<p>{en['tokens_per_j']:.4g} tokens per joule over the run; the energy table "
            f"is in the machine config (energy.* and power.* keys; assumptions in docs/energy.md).</p>\n"
            f'<table class="totals energy">{head}{"".join(rows)}</table>\n<div class="charts">\n'
            f'{chart_html("energy", charts["energy"], "Where the energy goes: the image program and the mean decode step, split into DDR, OCM, MAC, other dynamic (vector units, registers, LRM, instructions, DMA descriptors) and static power.")}\n'
            f'{chart_html("power", charts["power"], "Average power of each window (power_window_cycles) over the run: the image program and the first decode step; dashed: the average, triangle: the peak full window.")}\n'
            f'</div>\n<details class="groups" open><summary>Energy by kernel family (image program and first decode step), '
            f'top ten</summary><table class="groups"><tr><th class="l">program</th><th class="l">kernel</th><th>calls</th>'
            f"<th>mJ</th></tr>{fam_rows}</table></details>")


def config_html(rep):
    def table(d):
        return "<table>" + "".join(f'<tr><td class="l">{e(k)}</td><td>{e(json.dumps(v) if isinstance(v, (dict, list)) else v)}</td></tr>'
                                   for k, v in d.items()) + "</table>"
    return (f'<details class="config"><summary>Resolved machine config ({len(rep["config"])} keys; preset '
            f'{e(rep["machine"].get("preset"))})</summary><div class="tables"><div><h3>machine</h3>{table(rep["machine"])}</div>'
            f'<div><h3>config</h3>{table(rep["config"])}</div></div></details>')


def groups_html(rep):
    head = ('<tr><th class="l">program</th><th class="l">stage</th><th class="l">kernel</th><th>calls</th><th>cycles</th>'
            '<th>MAC per DDR byte</th><th>achieved MAC/cycle</th><th>ceiling there</th><th>bound</th>'
            '<th>share of the ceiling</th></tr>')
    rows = []
    for g in roofline_groups(rep):
        inten = "no DDR bytes" if g["intensity"] is None else f"{g['intensity']:.4g}"
        rows.append(f'<tr><td class="l">{e(g["program"])}</td><td class="l">{e(g["stage"])}</td>'
                    f'<td class="l">{e(g["kernel"])}{" (int8)" if g["int8"] else ""}</td><td>{g["calls"]:,}</td>'
                    f'<td>{num(int(g["cycles"]))}</td><td>{inten}</td><td>{g["rate"]:.4g}</td>'
                    f'<td>{g["ceiling"]:.4g}</td><td>{g["bound"]}</td><td>{100 * g["share"]:.1f} %</td></tr>')
    return (f'<details class="groups" open><summary>The roofline\'s points by kernel (each group as a whole; '
            f'the ceiling is min(DDR bytes/cycle x intensity, MAC peak))</summary>'
            f'<table class="groups">{head}{"".join(rows)}</table></details>')


def chart_html(name, png, caption):
    return (f'<figure class="chart" data-chart="{name}"><img class="chart-img" alt="{name} chart" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode()}"><figcaption>{caption}</figcaption></figure>')


def roofline_caption(rep):
    m = rep["machine"]
    return (f"Every kernel call of the image program and of the first decode step. x: MACs per DDR byte the call "
            f"moves; y: MACs per cycle it achieved. Ceilings of the configured machine: DDR "
            f"{m['ddr_bytes_per_cycle']:.4g} B/cycle (the diagonal), fp16 {m['mac_per_cycle_f16']:g} and int8 "
            f"{m['mac_per_cycle_int8']:g} MAC/cycle (horizontal). A call on the diagonal is DDR-bound at full bandwidth."
            + (f" DDR is the DRAM model ({rep['dram']['preset']}): the diagonal is its peak, the dash-dotted line the "
               f"sustained ceiling of a sequential stream ({m['ddr_sustained_bytes_per_cycle']:.4g} B/cycle; "
               f"decode row hits {100 * rep['dram']['decode']['row_hit_rate']:.1f}%)." if rep.get("dram") else "")
            + above_roof_caption(rep))


def above_roof_caption(rep):
    above = above_roof(rep)
    if not above:
        return ""
    names = ", ".join(sorted({k["mark"] for k, _ in above})[:6]) + (", ..." if len(above) > 6 else "")
    return (f" {len(above)} calls sit above the DDR roof (up to {max(r for _, r in above):.4f}x the peak bytes per "
            f"cycle: {e(names)}): some of their bytes were moved before their own mark began (the GEMM weights "
            f"are prefetched by DMA during the call before; a DMA may be queued before the mark), so their own "
            f"cycles undercount the time their bytes took. The roof holds for the run as a whole.")


def steps_caption(rep):
    return ("Each decode step makes one answer token: its cycles (top) and the DDR bytes it moved (bottom). "
            "Every step streams all the weights once, and the KV cache grows by one slot a step, so both rise "
            "slowly across the answer. The image program (the first token) is not drawn here.")


def numerics_html(rep, charts):
    n = rep.get("numerics")
    if not n:
        return ""
    top = sorted(n["calls"], key=lambda c: -c["max_abs"])[:10]
    rows = "".join(f'<tr><td class="l">{e(c["program"])}</td><td class="l">{e(c["mark"])}</td><td class="l">{e(c["kernel"])}</td>'
                   f'<td>{c["max_abs"]:.4g}</td><td>{100 * c["max_abs"] / n["fp16_max"]:.1f} %</td><td>{c["overflow"]}</td>'
                   f'<td>{c["nan"]}</td><td>{c["underflow"]}</td></tr>' for c in top)
    first = (f'<p class="fail">{e(n["first_nonfinite"])}</p>' if n.get("first_nonfinite") else "")
    return (f'<h2>Numerics (fp16 headroom)</h2>\n{first}<div class="charts">'
            f'{chart_html("headroom", charts["headroom"], "The largest |x| each kernel call wrote in fp16 (before rounding), against fp16 largest value 65,504; fp16_overflow = " + e(n["fp16_overflow"]) + ".")}</div>'
            f'<table><tr><th>program</th><th>call</th><th>kernel</th><th>max |x|</th><th>of 65,504</th><th>overflow</th>'
            f'<th>NaN</th><th>to zero</th></tr>{rows}</table>')


def page(rep, charts):
    model = rep["model"]
    title = f"gpnpu describe: {model.get('name') or model['spec']}"
    worst = kernel_table(rep["worst_kernels"], "The ten calls with the most cycles above their floors "
                                               "(sorted by cycles - floor, the last column)")
    top = kernel_table(sorted(rep["kernels"], key=lambda k: -k["cycles"])[:10], "The ten calls with the most cycles")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<meta name="gpnpu-charts" content="{','.join(charts_of(rep))}">
<style>{CSS}</style></head>
<body>
<h1>{e(title)}</h1>
<div class="cmd">{e(rep.get("command"))}</div>
<p>{e(rep["mode"])} run on {e(rep["machine"].get("summary", rep["machine"].get("preset")))}; model {e(model["spec"])}
{("(bundle " + e(model["bundle"]) + ")") if model.get("bundle") else ""}</p>
<h2>The photo and the answers</h2>
{synthetic_html(rep)}<div class="top">{photo_html(rep)}{answers_html(rep)}</div>
<h2>Totals</h2>
{totals_html(rep)}
<h2>Where the cycles went</h2>
<div class="charts">
{chart_html("stages", charts["stages"], "Cycles per stage (decode: the sum over all decode steps) beside the stage's MAC floor (its MACs at the peak rate) and DDR floor (its DDR bytes at the peak bandwidth).")}
{chart_html("roofline", charts["roofline"], roofline_caption(rep))}
{chart_html("steps", charts["steps"], steps_caption(rep))}
</div>
{groups_html(rep)}
{energy_html(rep, charts)}
<h2>Kernels against their floors</h2>
<div class="tables">{worst}{top}</div>
<h2>Gates per step</h2>
{steps_html(rep)}
{numerics_html(rep, charts)}
<h2>Machine</h2>
{config_html(rep)}
</body></html>
"""


def write_atomic(path, data):
    # The rule of isa/atomic_file.h: a target that is not a regular file (/dev/null,
    # a FIFO) or lies under /dev or /proc is written in place; renaming over it would
    # replace the device node (as root).
    if path.startswith(("/dev/", "/proc/")) or (os.path.exists(path) and not os.path.isfile(path)):
        with open(path, "wb") as f:
            f.write(data)
        return
    d = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    except OSError as err:
        raise OSError(err.errno, err.strerror, path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="the report of `gpnpu describe --report-json`")
    ap.add_argument("--html", required=True, help="the page to write")
    ap.add_argument("--plots", help="also write the charts as PNG files in this directory")
    a = ap.parse_args(argv)
    try:
        rep = load_report(a.json)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    charts = make_charts(rep)
    try:
        write_atomic(a.html, page(rep, charts).encode())
        if a.plots:
            os.makedirs(a.plots, exist_ok=True)
            for name, png in charts.items():
                write_atomic(os.path.join(a.plots, f"{name}.png"), png)
    except OSError as err:
        print(f"error: cannot write {err.filename}: {err.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
