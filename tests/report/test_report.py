#!/usr/bin/python3
"""ctest driver for the run report page (scripts/report_html.py), label "report".

    test_report.py page REPORT.json[.gz] OUTDIR     render the page, open it in headless
                                                    Chromium, screenshot, check (check_page.py)
    test_report.py roofline REPORT.json[.gz]        issue 9 acceptance 2 on a 2B report: decode
                                                    GEMV calls on the DDR ceiling, prefill GEMM
                                                    calls near the MAC ceiling (+ negative control)
    test_report.py controls REPORT.json[.gz] OUTDIR negative controls: broken pages must fail
                                                    the checker, malformed reports must exit 2
    test_report.py cjk REPORT.json[.gz] OUTDIR      an answer in CJK scripts is drawn with real
                                                    glyphs (no tofu); negative controls: the same
                                                    page with only DejaVu fonts, and code points
                                                    no font has, must fail
    test_report.py describe GPNPU OUTDIR ARGS...    run `GPNPU describe ARGS --report-json
                                                    --report-html --plots`, check the page

Each prints one line per check and a closing 'N passed, N failed' line; exit 1 on any
failure. Chromium missing is a failure (scripts/install-deps.sh installs it).
"""
import copy
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(SOURCE, "scripts", "report_html.py")
PYTHON = "/usr/bin/python3"
sys.path.insert(0, HERE)
import check_page  # noqa: E402

# Issue 9 acceptance 2, as numbers on the report (docs/report.md, "Reading the roofline").
GEMV_DDR_SHARE_MIN = 0.90   # every decode GEMV call: DDR bytes/cycle >= this x the machine's peak
GEMM_MAC_SHARE_MIN = 0.70   # prefill GEMM calls together: MAC/cycle >= this x the fp16 MAC ceiling
GEMM_CALL_SHARE_MIN = 0.60  # ... and each prefill GEMM call on its own
# (set from the measured 2B qc-u figures with margin; docs/report.md gives them)
RENDER_SECONDS_MAX = 20.0   # CPU seconds: the brief asks < 10 s on an idle core; margin for a slow CI machine
# (CPU, not wall: on the shared 2-core machine at load 16 the tiny page took 24.5 s of wall time)


class Results:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, what, detail=""):
        print(f"{'PASS' if ok else 'FAIL'}: {what}" + (f" ({detail})" if detail else ""), flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


def load(path):
    return check_page.load_json(path)


def render(report_path, html, plots=None):
    """Runs report_html.py; returns (exit code, stderr, CPU seconds of the run (user + sys))."""
    cmd = [PYTHON, SCRIPT, "--json", report_path, "--html", html] + (["--plots", plots] if plots else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p.returncode, p.stderr.strip(), (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def open_browser(res):
    try:
        return check_page.Browser()
    except check_page.BrowserError as e:
        res.check(False, "headless Chromium starts", str(e))
        return None


def page(report_path, out, res, browser=None):
    os.makedirs(out, exist_ok=True)
    rep = load(report_path)
    html = os.path.join(out, "report.html")
    plots = os.path.join(out, "plots")
    rc, err, secs = render(report_path, html, plots)
    if not res.check(rc == 0, f"report_html.py renders {os.path.basename(report_path)}", err or f"{secs:.2f} s CPU"):
        return
    res.check(secs < RENDER_SECONDS_MAX, f"render time {secs:.2f} s of CPU < {RENDER_SECONDS_MAX:g} s "
              f"({len(rep['kernels'])} kernel calls)")
    for name in check_page.charts_of(rep):
        f = os.path.join(plots, f"{name}.png")
        res.check(os.path.isfile(f) and open(f, "rb").read(8) == b"\x89PNG\r\n\x1a\n", f"--plots wrote {name}.png")
    text = open(html, encoding="utf-8").read()
    res.check(not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)""", text, re.I) and "<script" not in text.lower(),
              "the page has no script and no outside src/href")
    own = browser is None
    b = browser or open_browser(res)
    if b is None:
        return
    try:
        t0 = time.monotonic()
        problems, facts = check_page.check(b, html, rep, os.path.join(out, "screenshot.png"))
        res.check(not problems, f"Chromium shows {html} whole: no console error, photo, answers, "
                  f"charts {', '.join(check_page.charts_of(rep))} ({time.monotonic() - t0:.1f} s)", "; ".join(problems))
    finally:
        if own:
            b.close()
    return facts


# ---------------------------------------------------------------------------- roofline

def roofline_figures(rep):
    """What acceptance 2 says, as numbers: per decode GEMV call its DDR bytes/cycle against
    the machine's peak; the prefill GEMM calls' MAC/cycle against the fp16 (or int8) ceiling."""
    m = rep["machine"]
    bw, f16, i8 = m["ddr_bytes_per_cycle"], m["mac_per_cycle_f16"], m["mac_per_cycle_int8"]
    gemv = [k for k in rep["kernels"] if k["program"] == "decode" and k["kernel"].startswith("gemv")]
    gemm = [k for k in rep["kernels"] if k["stage"] == "prefill" and k["kernel"].startswith("gemm")]
    f = {"bw": bw, "f16": f16, "gemv_calls": len(gemv), "gemm_calls": len(gemm)}
    if gemv:
        shares = [k["ddr_bytes"] / k["cycles"] / bw for k in gemv]
        f["gemv_share_min"] = min(shares)
        f["gemv_share_all"] = sum(k["ddr_bytes"] for k in gemv) / sum(k["cycles"] for k in gemv) / bw
        f["gemv_worst"] = gemv[shares.index(min(shares))]["mark"]
    if gemm:
        ceil = [(i8 if k["int8"] else f16) for k in gemm]
        shares = [k["macs"] / k["cycles"] / c for k, c in zip(gemm, ceil)]
        f["gemm_share_min"] = min(shares)
        f["gemm_share_max"] = max(shares)
        f["gemm_share_all"] = sum(k["macs"] / c for k, c in zip(gemm, ceil)) / sum(k["cycles"] for k in gemm)
        f["gemm_intensity_min"] = min(k["macs"] / k["ddr_bytes"] for k in gemm if k["ddr_bytes"] > 0)
        f["ridge"] = f16 / bw
    return f


def roofline_ok(f):
    return (f["gemv_calls"] > 0 and f["gemm_calls"] > 0 and f["gemv_share_min"] >= GEMV_DDR_SHARE_MIN
            and f["gemm_share_all"] >= GEMM_MAC_SHARE_MIN and f["gemm_share_min"] >= GEMM_CALL_SHARE_MIN
            and f["gemm_intensity_min"] >= f["ridge"])


def roofline(report_path, res):
    rep = load(report_path)
    f = roofline_figures(rep)
    print(f"decode GEMV calls: {f['gemv_calls']}, DDR bytes/cycle >= {f.get('gemv_share_min', 0) * f['bw']:.4f} "
          f"of {f['bw']:.4f} peak (worst {f.get('gemv_worst')}: {100 * f.get('gemv_share_min', 0):.2f} %; "
          f"all together {100 * f.get('gemv_share_all', 0):.2f} %)")
    print(f"prefill GEMM calls: {f['gemm_calls']}, MAC/cycle together {f.get('gemm_share_all', 0) * f['f16']:.0f} "
          f"of {f['f16']:g} ({100 * f.get('gemm_share_all', 0):.1f} %; per call "
          f"{100 * f.get('gemm_share_min', 0):.1f}..{100 * f.get('gemm_share_max', 0):.1f} %), intensity >= "
          f"{f.get('gemm_intensity_min', 0):.0f} MAC/B against the ridge at {f.get('ridge', 0):.0f}")
    res.check(f["gemv_calls"] > 0 and f["gemm_calls"] > 0, "the report has decode GEMV and prefill GEMM calls",
              f"{f['gemv_calls']} GEMV, {f['gemm_calls']} GEMM")
    if f["gemv_calls"]:
        res.check(f["gemv_share_min"] >= GEMV_DDR_SHARE_MIN,
                  f"every decode GEMV call is on the DDR ceiling: >= {GEMV_DDR_SHARE_MIN:g} x peak bytes/cycle",
                  f"lowest {f['gemv_share_min']:.4f} at {f['gemv_worst']}")
    if f["gemm_calls"]:
        res.check(f["gemm_intensity_min"] >= f["ridge"],
                  "every prefill GEMM call is right of the ridge (MAC-bound by its intensity)",
                  f"lowest {f['gemm_intensity_min']:.0f} MAC/B, ridge {f['ridge']:.0f}")
        res.check(f["gemm_share_all"] >= GEMM_MAC_SHARE_MIN,
                  f"the prefill GEMM calls are near the MAC ceiling: >= {GEMM_MAC_SHARE_MIN:g} x {f['f16']:g} MAC/cycle",
                  f"{f['gemm_share_all']:.4f}")
        res.check(f["gemm_share_min"] >= GEMM_CALL_SHARE_MIN,
                  f"each prefill GEMM call reaches >= {GEMM_CALL_SHARE_MIN:g} x the MAC ceiling",
                  f"lowest {f['gemm_share_min']:.4f}")
    # Negative controls: the same check must fail on a report whose GEMV calls took
    # 1.25x their cycles (off the DDR ceiling), and on one whose GEMM calls took 2x.
    slow = copy.deepcopy(rep)
    for k in slow["kernels"]:
        if k["program"] == "decode" and k["kernel"].startswith("gemv"):
            k["cycles"] = int(k["cycles"] * 1.25)
    res.check(not roofline_ok(roofline_figures(slow)), "negative control: GEMV calls at 1.25x cycles fail the check")
    slow = copy.deepcopy(rep)
    for k in slow["kernels"]:
        if k["stage"] == "prefill" and k["kernel"].startswith("gemm"):
            k["cycles"] = int(k["cycles"] * 2)
    res.check(not roofline_ok(roofline_figures(slow)), "negative control: GEMM calls at 2x cycles fail the check")


# ---------------------------------------------------------------------------- controls

def controls(report_path, out, res):
    """Broken pages must fail the checker; malformed reports must exit 2 naming the key."""
    os.makedirs(out, exist_ok=True)
    rep = load(report_path)
    good = os.path.join(out, "good.html")
    rc, err, _ = render(report_path, good)
    if not res.check(rc == 0, "the control page renders", err):
        return
    text = open(good, encoding="utf-8").read()
    dev_text = rep["answers"]["device"].get("text")

    def variant(name, new):
        if new == text:
            raise SystemExit(f"test_report: control '{name}' did not change the page (the page changed shape?)")
        p = os.path.join(out, f"bad-{name}.html")
        with open(p, "w", encoding="utf-8") as f:
            f.write(new)
        return p

    roof = re.search(r'(<figure class="chart" data-chart="roofline"><img[^>]*src="data:image/png;base64,)([^"]{200})', text)
    stages_fig = re.search(r'<figure class="chart" data-chart="stages">.*?</figure>', text, re.S)
    cases = [
        ("broken-chart", variant("broken-chart", text.replace(roof.group(0), roof.group(1) + "AAAA" + roof.group(2)[::-1], 1)),
         "chart 'roofline' did not render"),
        ("missing-chart", variant("missing-chart", text.replace(stages_fig.group(0), "", 1)), "chart 'stages' is missing"),
        ("js-error", variant("js-error", text.replace("</body>", "<script>no_such_function();</script></body>", 1)),
         "uncaught exception"),
        ("console-error", variant("console-error", text.replace("</body>", "<script>console.error('boom')</script></body>", 1)),
         "console.error"),
        ("outside-image", variant("outside-image", text.replace("</body>", '<img src="http://127.0.0.1:9/x.png"></body>', 1)),
         "outside resources"),
    ]
    banner = re.search(r'<p class="synthetic" id="synthetic">.*?</p>', text, re.S)
    if banner:
        cases.append(("no-synthetic-note", variant("no-synthetic-note", text.replace(banner.group(0), "", 1)),
                      "does not say that the weights are synthetic"))
    if dev_text:
        shown = '<div class="text">' + check_page.html_escape(dev_text) + "</div>"
        cases.append(("missing-answer", variant("missing-answer", text.replace(shown, '<div class="text"></div>', 1)),
                      "answer 'device' text is not shown"))
    else:
        box = re.search(r'<div class="answer" data-answer="device">.*?<div class="ids">[^<]*</div></div>', text, re.S)
        cases.append(("missing-answer", variant("missing-answer", text.replace(box.group(0), "", 1)),
                      "answer 'device' has no box"))
    b = open_browser(res)
    if b is None:
        return
    try:
        problems, _ = check_page.check(b, good, rep)
        res.check(not problems, "the unbroken control page passes", "; ".join(problems))
        for name, path, want in cases:
            problems, _ = check_page.check(b, path, rep)
            hit = [p for p in problems if want in p]
            res.check(bool(hit), f"negative control '{name}' fails the checker",
                      "; ".join(problems) if problems else "no problem found")
    finally:
        b.close()
    # A report answered by a page with a different answer text fails too.
    if dev_text:
        other = copy.deepcopy(rep)
        other["answers"]["device"]["text"] = dev_text + " and a purple elephant"
        b = open_browser(res)
        if b:
            try:
                problems, _ = check_page.check(b, good, other)
                res.check(any("text is not shown" in p for p in problems),
                          "negative control: a page without the expected answer text fails")
            finally:
                b.close()

    # Malformed reports: exit 2, one line, naming the file and the key; no page written.
    def bad_report(name, mutate, want):
        r = copy.deepcopy(rep)
        mutate(r)
        p = os.path.join(out, f"bad-{name}.json")
        with open(p, "w") as f:
            f.write(r if isinstance(r, str) else json.dumps(r))
        html = os.path.join(out, f"bad-{name}-out.html")
        if os.path.exists(html):
            os.unlink(html)
        rc, err, _ = render(p, html)
        res.check(rc == 2 and len(err.splitlines()) == 1 and p in err and want in err and not os.path.exists(html),
                  f"malformed report '{name}' exits 2 with one line naming the file and '{want}'", f"rc {rc}: {err}")

    bad_report("no-totals-ms", lambda r: r["totals"].pop("ms"), "totals.ms")
    bad_report("no-kernel-macs", lambda r: r["kernels"][3].pop("macs"), "kernels[3].macs")
    bad_report("stage-cycles-text", lambda r: r["stages"][0].__setitem__("cycles", "many"), "stages[0].cycles")
    bad_report("no-device-answer", lambda r: r["answers"].pop("device"), "answers.device")
    bad_report("bad-photo", lambda r: r["image"].__setitem__("png_base64", "bm90IGEgcG5n"), "image.png_base64")
    bad_report("old-schema", lambda r: r.__setitem__("schema", "gpnpu-describe-report/0"), "schema")
    p = os.path.join(out, "bad-not-json.json")
    with open(p, "w") as f:
        f.write('{"schema": ')
    rc, err, _ = render(p, os.path.join(out, "bad-not-json-out.html"))
    res.check(rc == 2 and p in err and "not JSON" in err and len(err.splitlines()) == 1,
              "a truncated report exits 2 with one line", f"rc {rc}: {err}")


# ---------------------------------------------------------------------------- describe

def describe(gpnpu, out, args, res):
    """The whole path a user takes: `gpnpu describe ... --report-json J --report-html H --plots P`
    (describe runs scripts/report_html.py itself), then the page in Chromium."""
    os.makedirs(out, exist_ok=True)
    j, html, plots = (os.path.join(out, f) for f in ("report.json", "report.html", "plots"))
    for f in (j, html):
        if os.path.exists(f):
            os.unlink(f)
    t0 = time.monotonic()
    p = subprocess.run([gpnpu, "describe"] + args + ["--report-json", j, "--report-html", html, "--plots", plots],
                       capture_output=True, text=True)
    if not res.check(p.returncode == 0 and os.path.isfile(j) and os.path.isfile(html),
                     f"gpnpu describe {' '.join(args)} --report-json --report-html --plots ({time.monotonic() - t0:.1f} s)",
                     (p.stderr or p.stdout)[-600:]):
        return
    rep = load(j)
    res.check("energy" in rep and rep["energy"]["run"]["total_mj"] > 0, "the report has its energy, so the page its "
              "energy and power charts (issue 15)")
    for name in check_page.charts_of(rep):
        f = os.path.join(plots, f"{name}.png")
        res.check(os.path.isfile(f) and open(f, "rb").read(8) == b"\x89PNG\r\n\x1a\n", f"describe --plots wrote {name}.png")
    if "--golden" in args:
        res.check({"device", "chain", "reference_w4a16", "reference_fp32"} <= set(rep["answers"]),
                  "with --golden the report has the device, chain and both reference answers", str(sorted(rep["answers"])))
    b = open_browser(res)
    if b is None:
        return
    try:
        problems, _ = check_page.check(b, html, rep, os.path.join(out, "screenshot.png"))
        res.check(not problems, f"Chromium shows {html} whole", "; ".join(problems))
    finally:
        b.close()


# ---------------------------------------------------------------------------- CJK text

CJK_ANSWER = "對對對對對 这是一只猫。日本語のテキスト、한국어 텍스트（全角）"


def cjk(report_path, out, res):
    """A functional report whose device answer is CJK text (as a synthetic model's often
    is): every character must be drawn with a real glyph on the page. Controls: Chromium
    given a fontconfig with only DejaVu (no CJK font) must report the CJK characters as
    empty boxes, and Egyptian hieroglyphs (in no installed font) must be reported too."""
    os.makedirs(out, exist_ok=True)
    rep = load(report_path)
    rep["answers"]["device"]["text"] = CJK_ANSWER
    j, html = os.path.join(out, "cjk.json"), os.path.join(out, "cjk.html")
    with open(j, "w", encoding="utf-8") as f:
        json.dump(rep, f, ensure_ascii=False)
    rc, err, _ = render(j, html)
    if not res.check(rc == 0, "report_html.py renders a report with a CJK answer", err):
        return
    b = open_browser(res)
    if b is None:
        return
    try:
        problems, facts = check_page.check(b, html, rep, os.path.join(out, "screenshot.png"))
        gl = next(a for a in facts["answers"] if a["name"] == "device")["glyphs"]
        res.check(not problems and gl["chars"] >= 20 and gl["missing_count"] == 0,
                  f"every one of the {gl['chars']} distinct characters of the CJK answer is drawn with a glyph",
                  "; ".join(problems))
        odd = copy.deepcopy(rep)
        odd["answers"]["device"]["text"] = CJK_ANSWER + " \U00013000\U00013001"
        oj, ohtml = os.path.join(out, "hieroglyphs.json"), os.path.join(out, "hieroglyphs.html")
        with open(oj, "w", encoding="utf-8") as f:
            json.dump(odd, f, ensure_ascii=False)
        render(oj, ohtml)
        problems, _ = check_page.check(b, ohtml, odd)
        res.check(any("U+13000" in p and "U+13001" in p and "U+5C0D" not in p for p in problems),
                  "negative control: characters no installed font has are reported as empty boxes (and only they)",
                  "; ".join(problems) or "no problem found")
    finally:
        b.close()
    # Chromium with DejaVu as its only fonts: the CJK characters must turn to tofu.
    fc = os.path.join(out, "fontconfig-dejavu-only")
    os.makedirs(fc, exist_ok=True)
    dejavu = next((d for d in ("/usr/share/fonts/truetype/dejavu",) if os.path.isdir(d)), None)
    if not res.check(dejavu is not None, "DejaVu fonts are installed (fonts-dejavu-core) for the no-CJK control"):
        return
    with open(os.path.join(fc, "fonts.conf"), "w") as f:
        f.write(f'<?xml version="1.0"?>\n<fontconfig><dir>{dejavu}</dir><cachedir>{fc}/cache</cachedir></fontconfig>\n')
    try:
        nb = check_page.Browser(env=dict(os.environ, FONTCONFIG_FILE=os.path.join(fc, "fonts.conf")))
    except check_page.BrowserError as err:
        res.check(False, "headless Chromium starts with a DejaVu-only fontconfig", str(err))
        return
    try:
        problems, _ = check_page.check(nb, html, rep)
        res.check(any("empty boxes" in p and "U+5C0D" in p for p in problems),
                  "negative control: without a CJK font the CJK answer is reported as empty boxes",
                  "; ".join(problems) or "no problem found")
    finally:
        nb.close()


def main(argv):
    res = Results()
    if len(argv) >= 3 and argv[0] == "page":
        page(argv[1], argv[2], res)
    elif len(argv) == 2 and argv[0] == "roofline":
        roofline(argv[1], res)
    elif len(argv) == 3 and argv[0] == "controls":
        controls(argv[1], argv[2], res)
    elif len(argv) == 3 and argv[0] == "cjk":
        cjk(argv[1], argv[2], res)
    elif len(argv) >= 3 and argv[0] == "describe":
        describe(argv[1], argv[2], argv[3:], res)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return res.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
