#!/usr/bin/python3
"""Turns a `gpnpu describe --report-json` run report (schema gpnpu-describe-report/1,
docs/report.md) into ONE self-contained HTML page a person can look at:

    /usr/bin/python3 scripts/report_html.py --json REPORT.json --html OUT.html [--plots DIR]

The page holds the photo as the model saw it, the answers side by side, a bar chart
of cycles per stage against each stage's MAC and DDR floors, a roofline with every
kernel call as a point, the kernels furthest above their floors, the per-step gate
table, the totals and the resolved machine config. Everything is embedded (images
as data: URIs, CSS inline, no script, no font, no link): the page works offline from
a file. With --plots DIR the two charts are also written there as stages.png and
roofline.png (the same bytes the page embeds).

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
CHARTS = ("stages", "roofline")  # data-chart names of the page's charts, in page order


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
EXTRA_COLOURS = ["#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


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
    """Grouped horizontal bars: each stage's cycles beside its MAC floor and DDR floor."""
    stages = rep["stages"]
    clock = rep["machine"]["clock_ghz"]
    fig, ax = plt.subplots(figsize=(8.0, 0.9 + 0.75 * max(1, len(stages))))
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
                va="center", fontsize=8)
    ax.set_yticks([y for y, _ in names], [n for _, n in names])
    ax.set_xlabel("cycles")
    vals = [v for s in stages for v in (s["cycles"], s["mac_floor_cycles"], s["ddr_floor_cycles"]) if v > 0]
    if vals and max(vals) / min(vals) > 200:
        ax.set_xscale("log")
        ax.set_xlim(min(vals) / 2, max(vals) * 20)
    elif vals:
        ax.set_xlim(0, max(vals) * 1.6)
    ax.set_title(f"Cycles per stage against its floors ({rep['machine'].get('preset', '?')}, {clock:g} GHz)",
                 fontsize=10)
    if stages:
        ax.legend(loc="lower right", fontsize=8)
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
    if n_edge:
        notes.append(f"{n_edge} calls with 0 DDR bytes drawn at the right edge (>)")
    if no_macs:
        notes.append(f"{no_macs} calls with no MACs (norms, element-wise) not drawn")
    if any(p[3] for p in pts):
        notes.append("squares: int8 calls")
    if notes:
        ax.text(0.01, 0.01, "; ".join(notes), transform=ax.transAxes, fontsize=7, va="bottom", color="#444444")
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


def make_charts(rep):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "gpnpu"  # deterministic output
    out = {}
    for name, fn in (("stages", stage_chart), ("roofline", roofline_chart)):
        fig = fn(plt, rep)
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
.answer .ids{font-family:monospace;word-break:break-all}
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
                   f'<details><summary>{len(a["ids"])} token ids</summary>'
                   f'<div class="ids">{e(" ".join(str(i) for i in a["ids"]))}</div></details></div>')
    return '<div class="answers">' + "".join(out) + "</div>"


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
            f"{m['mac_per_cycle_int8']:g} MAC/cycle (horizontal). A call on the diagonal is DDR-bound at full bandwidth.")


def page(rep, charts):
    model = rep["model"]
    title = f"gpnpu describe: {model.get('name') or model['spec']}"
    worst = kernel_table(rep["worst_kernels"], "The ten calls furthest above their floors")
    top = kernel_table(sorted(rep["kernels"], key=lambda k: -k["cycles"])[:10], "The ten calls with the most cycles")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<meta name="gpnpu-charts" content="{','.join(CHARTS)}">
<style>{CSS}</style></head>
<body>
<h1>{e(title)}</h1>
<div class="cmd">{e(rep.get("command"))}</div>
<p>{e(rep["mode"])} run on {e(rep["machine"].get("preset"))} ({rep["machine"]["clock_ghz"]:g} GHz); model {e(model["spec"])}
{("(bundle " + e(model["bundle"]) + ")") if model.get("bundle") else ""}</p>
<h2>The photo and the answers</h2>
<div class="top">{photo_html(rep)}{answers_html(rep)}</div>
<h2>Totals</h2>
{totals_html(rep)}
<h2>Where the cycles went</h2>
<div class="charts">
{chart_html("stages", charts["stages"], "Cycles per stage (decode: the sum over all decode steps) beside the stage's MAC floor (its MACs at the peak rate) and DDR floor (its DDR bytes at the peak bandwidth).")}
{chart_html("roofline", charts["roofline"], roofline_caption(rep))}
</div>
{groups_html(rep)}
<h2>Kernels against their floors</h2>
<div class="tables">{worst}{top}</div>
<h2>Gates per step</h2>
{steps_html(rep)}
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
