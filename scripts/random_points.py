#!/usr/bin/python3
"""Random machine points of the design space, each run with every gate: what the grid misses.

The design-space grid (scripts/design_space.py) is all powers of two. This draws points
anywhere in the range the compiler supports (pe_rows and pe_cols 8 to 64, odd or even; OCM
512 KiB to 16 MiB; 1 to 8 DMA channels; LRM 2 to 64 KiB; 8 to 200 GB/s), runs

    gpnpu describe --model MODEL --tokens 2 --set pe_rows=R --set pe_cols=C ...

at each (the image program and a decode step against the chain: every gate), or with
--compile-only `gpnpu compile` (both programs compiled, nothing run: seconds a point for the
2B), or with --timing `gpnpu compile --run` (both run timing-only: each point's image cycles
over max(MAC floor, weights-once DDR floor) and decode cycles over max(MAC floor, its bytes'
floor), as `compile --run` prints them, and at the end the ten worst image ratios), and lists the points that failed a
gate, ended with an error, or ran past --timeout:

    scripts/random_points.py [--gpnpu build/gpnpu] [--model synthetic:tiny] [--count 40]
                             [--seed 1] [-j 2] [--timeout 300] [--compile-only | --timing]

Exit status 1 when any point failed. An error that names the limit it hit (the 2B model on an
odd pe_cols below 3,328 bytes of LRM, an OCM too small for the program) is listed, not
counted as a failure, with --allow-limits. Points are printed as `--set` arguments, ready to
rerun. Found (thirtieth stop, docs/performance.md): a compiler hang on 21x48 PEs, NaN on
39x38 and on 53x59, and OCM errors at 512 KiB on odd row counts.
"""
import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import tempfile
import time

OCM_KIB = [512, 768, 1024, 1536, 2048, 3072, 4096, 8192, 16384]
LRM_KIB = [2, 4, 6, 8, 16, 64]
DDR_GBPS = [8, 16, 32, 64, 128, 200]
LIMITS = ("raise lrm_bytes", "raise ocm_bytes")  # errors that name the machine's limit and the fix


def draw(rng):
    return [f"pe_rows={rng.randint(8, 64)}", f"pe_cols={rng.randint(8, 64)}",
            f"ocm_bytes={rng.choice(OCM_KIB)}KiB", f"dma_channels={rng.randint(1, 8)}",
            f"lrm_bytes={rng.choice(LRM_KIB)}KiB", f"ddr_gbps={rng.choice(DDR_GBPS)}"]


def ratios(report_json):
    """(image x, decode x) of a `gpnpu compile --run` report.json."""
    with open(report_json) as f:
        r = json.load(f)
    im, de = r["image"], r["decode"]
    return (im["cycles"] / max(im["mac_floor_cycles"], im["weights_floor_cycles"]),
            de["cycles"] / max(de["mac_floor_cycles"], de["bytes_floor_cycles"]))


def run(gpnpu, model, sets, timeout, mode):
    """(kind, message, seconds, ratios or None) of one point; mode: describe, compile or timing."""
    out = tempfile.TemporaryDirectory(prefix="random_points_")
    cmd = [gpnpu, "describe", "--model", model, "--tokens", "2"] if mode == "describe" else \
        [gpnpu, "compile", "--model", model, "--out", out.name] + (["--run"] if mode == "timing" else [])
    for s in sets:
        cmd += ["--set", s]
    start = time.time()
    got = None
    try:
        with out:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            if r.returncode == 0 and mode == "timing":
                got = ratios(os.path.join(out.name, "report.json"))
    except subprocess.TimeoutExpired:
        return "timeout", f"no result after {timeout} s", time.time() - start, None
    out = r.stdout + r.stderr
    if r.returncode == 0:
        return "ok", "", time.time() - start, got
    lines = [l.strip() for l in out.splitlines() if "FAIL" in l or "error" in l.lower()]
    kind = "limit" if any(m in out for m in LIMITS) and "FAIL" not in out else "failed"
    return kind, " | ".join(lines)[:400] or f"exit {r.returncode}", time.time() - start, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpnpu", default="build/gpnpu")
    ap.add_argument("--model", default="synthetic:tiny")
    ap.add_argument("--count", type=int, default=40, help="points to draw")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-j", type=int, default=2, help="points run at once")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a point may take")
    ap.add_argument("--allow-limits", action="store_true",
                    help="an error naming the machine's limit (raise lrm_bytes / ocm_bytes) is not a failure")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--compile-only", action="store_true", help="compile the programs at each point, run nothing")
    how.add_argument("--timing", action="store_true",
                     help="compile and run both programs timing-only at each point; print their ratios to the floors")
    a = ap.parse_args()
    if a.count < 1 or a.j < 1 or a.timeout < 1:
        sys.exit("random_points: --count, -j and --timeout must be at least 1")
    rng = random.Random(a.seed)
    points = [draw(rng) for _ in range(a.count)]
    bad = 0
    with concurrent.futures.ThreadPoolExecutor(a.j) as ex:
        mode = "compile" if a.compile_only else "timing" if a.timing else "describe"
        futures = [ex.submit(run, a.gpnpu, a.model, p, a.timeout, mode) for p in points]
        timed = []
        for i, (p, f) in enumerate(zip(points, futures)):
            kind, why, secs, got = f.result()
            failed = kind in ("failed", "timeout") or (kind == "limit" and not a.allow_limits)
            bad += failed
            shown = f"  image {got[0]:.3f} x, decode {got[1]:.4f} x" if got else ""
            print(f"[{i + 1}/{a.count}] {kind:7s} {secs:6.1f} s{shown}  --set " + " --set ".join(p)
                  + (f"\n    {why}" if why else ""), flush=True)
            if got:
                timed.append((got[0], p))
    if timed:
        print("the worst image ratios (cycles / max(MAC floor, weights-once DDR floor)):")
        for x, p in sorted(timed, reverse=True)[:10]:
            print(f"  {x:.3f} x  --set " + " --set ".join(p))
    print(f"random_points: {a.count - bad} of {a.count} points passed ({a.model}, seed {a.seed})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
