#!/usr/bin/python3
"""The 2B model across the design space: cycles against their floors at every point.

Runs `gpnpu sweep` (timing-only, one process per point, resumable) over
    pe {16x16, 32x32, 64x64, 32x64} x ocm {1, 2, 4, 8, 16 MiB} x ddr {16, 32, 64, 128 GB/s}
for the image program (256x256 photo, 128-token prompt) and one decode step (140
tokens attended), times `gpnpu compile` (both programs, CPU seconds) once per pe x ocm
point, and
writes the table with the ratios to the floors:

    scripts/design_space.py [--gpnpu build/gpnpu] [--work /tmp/design-space] [-j 2]
                            [--out docs/design-space]        # writes .md and .csv
    scripts/design_space.py --grid reduced --check-monotone [--negative-control]
    scripts/design_space.py --grid fine --check-monotone     # between the grid's points, and 48x48

Ratios (the issue-13 acceptance bounds in brackets):
  decode  = decode cycles / ((weights + KV + logits bytes) / bandwidth)   [<= 1.02]
  image   = image cycles / max(MAC floor, weights-once DDR floor)        [<= 1.30 at ocm >= 2 MiB]
  ddr/w   = image DDR bytes / weights-once bytes                          [<= 1.5 at 1 MiB]
  calls x = the sum of every image call's own floor (max of its MAC and DDR cycles) / the same max:
            what the program's calls, run one after another, cannot beat
--check-monotone checks that adding PEs, OCM or bandwidth never adds cycles (image
and decode) and exits 1 listing every violation; --negative-control first swaps the
image cycles of two neighbouring points and exits 0 only if the check catches it.
"""
import argparse
import csv
import hashlib
import os
import resource
import subprocess
import sys

# "fine": points between the acceptance grid's (and a 48x48 array), for --check-monotone off the grid.
PE = {"full": [(16, 16), (32, 32), (32, 64), (64, 64)], "reduced": [(16, 16), (32, 32), (32, 64), (64, 64)],
      "fine": [(16, 16), (32, 32), (32, 64), (48, 48), (64, 64)]}
OCM = {"full": [1, 2, 4, 8, 16], "reduced": [1, 2, 4], "fine": [1, 1.5, 2, 3, 4, 6, 8]}  # MiB
DDR = {"full": [16, 32, 64, 128], "reduced": [16, 32, 64], "fine": [16, 24, 32, 48, 64, 80, 96, 112, 128]}  # GB/s


def ocm_arg(mib):
    """A `--set ocm_bytes=` value: whole MiB, else KiB (1.5 -> 1536KiB)."""
    return f"{mib}MiB" if float(mib).is_integer() else f"{int(mib * 1024)}KiB"


def mib(ocm_bytes):
    """ocm_bytes in MiB, whole where it is (the table's keys and columns)."""
    m = ocm_bytes / (1 << 20)
    return int(m) if m.is_integer() else m


def sweep(gpnpu, work, grid, jobs, run=True):
    """One `gpnpu sweep` per PE shape (the PE axis is a list of pairs, not a product);
    run=False reads only what earlier (perhaps interrupted) sweeps left in `work`."""
    rows = []
    for r, c in PE[grid]:
        out = os.path.join(work, f"pe{r}x{c}.h5")
        if not run:
            if os.path.exists(out[:-3] + ".csv"):
                with open(out[:-3] + ".csv") as f:
                    rows += list(csv.DictReader(f))
            continue
        cmd = [gpnpu, "sweep", "--model", "synthetic:2b", "--workload", "both", "-j", str(jobs), "--out", out,
               "--set", f"pe_rows={r}", "--set", f"pe_cols={c}",
               "--set", "ocm_bytes=" + ",".join(ocm_arg(m) for m in OCM[grid]),
               "--set", "ddr_gbps=" + ",".join(str(g) for g in DDR[grid])]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out[:-3] + ".csv") as f:
            rows += list(csv.DictReader(f))
    return rows


def build_dir(gpnpu, work):
    """The folder of `work` for this gpnpu binary: `gpnpu sweep` resumes from the rows an
    earlier run left in its file, so the results of another build must not be found there."""
    with open(gpnpu, "rb") as f:
        return os.path.join(work, "build-" + hashlib.file_digest(f, "sha256").hexdigest()[:12])


def compile_seconds(gpnpu, work, grid):
    """CPU seconds (user + system) of `gpnpu compile` (both 2B programs written to disk, no
    assembly listings) per pe x ocm: CPU time, not wall time, so a loaded machine does
    not inflate it."""
    secs = {}
    for r, c in PE[grid]:
        for m in OCM[grid]:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            rc = subprocess.run([gpnpu, "compile", "--model", "synthetic:2b", "--out", os.path.join(work, "compile"),
                                 "--set", f"pe_rows={r}", "--set", f"pe_cols={c}", "--set", f"ocm_bytes={ocm_arg(m)}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            # a point that does not compile (an error row in the table) gets no time
            secs[(r, c, m)] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime) if rc == 0 \
                else float("nan")
    return secs


def num(row, key):
    v = row.get(key, "")
    return float(v) if v not in ("", None) else float("nan")


def plan_kind(plan):
    """The image plan's kind: resident or streamed, per part where it has two (a resident tower
    before a streamed prefill; the tower and mergers on their own GEMM view: "2 views")."""
    kind = plan.split(":")[0]
    if kind.startswith("tower "):
        prefill = plan.split("; prefill ", 1)[1].split(":")[0] if "; prefill " in plan else "?"
        kind = f"{kind}, prefill {prefill}" + (", 2 views" if "(tower and mergers)" in plan else "")
    return kind


def table(rows):
    """The points with their ratios, sorted pe, ocm, ddr."""
    out = []
    for row in rows:
        p = {"pe": f"{row['pe_rows']}x{row['pe_cols']}", "pe_rows": int(row["pe_rows"]), "pe_cols": int(row["pe_cols"]),
             "ocm_mib": mib(int(row["ocm_bytes"])), "ddr_gbps": float(row["ddr_gbps"]),
             "status": row["status"]}
        p["image_cycles"] = num(row, "image_cycles")
        p["image_mac_floor"] = num(row, "image_compute_floor")
        p["image_weights_floor"] = num(row, "image_weights_floor")
        p["image_ratio"] = p["image_cycles"] / max(p["image_mac_floor"], p["image_weights_floor"])
        p["image_calls_ratio"] = num(row, "image_kernel_floor") / max(p["image_mac_floor"], p["image_weights_floor"])
        p["image_ddr_per_weights"] = num(row, "image_ddr_bytes") / num(row, "image_weight_bytes")
        p["decode_cycles"] = num(row, "decode_cycles")
        p["decode_bytes_floor"] = num(row, "decode_ddr_floor")
        p["decode_ratio"] = p["decode_cycles"] / p["decode_bytes_floor"]
        p["image_plan"] = plan_kind(row.get("image_plan", ""))
        out.append(p)
    out.sort(key=lambda p: (p["pe_rows"] * p["pe_cols"], p["pe_rows"], p["ocm_mib"], p["ddr_gbps"]))
    return out


def violations(points):
    """Pairs (smaller, larger) along one axis where the larger machine takes more cycles."""
    by = {(p["pe_rows"], p["pe_cols"], p["ocm_mib"], p["ddr_gbps"]): p for p in points}
    bad = []
    for (r, c, m, g), p in by.items():
        for (r2, c2, m2, g2), q in by.items():
            more = (r2 >= r and c2 >= c and m2 >= m and g2 >= g) and (r2, c2, m2, g2) != (r, c, m, g)
            one_axis = sum([(r2, c2) != (r, c), m2 != m, g2 != g]) == 1
            if not (more and one_axis):
                continue
            for w in ("image_cycles", "decode_cycles"):
                if q[w] > p[w]:
                    bad.append(f"{w}: pe {q['pe']} ocm {m2} MiB ddr {g2:g} GB/s takes {q[w]:.0f} > "
                               f"{p[w]:.0f} at pe {p['pe']} ocm {m} MiB ddr {g:g} GB/s")
    return bad


def write(points, secs, out):
    cols = ["pe", "ocm_mib", "ddr_gbps", "status", "image_plan", "image_cycles", "image_mac_floor",
            "image_weights_floor", "image_ratio", "image_calls_ratio", "image_ddr_per_weights", "decode_cycles",
            "decode_bytes_floor",
            "decode_ratio", "compile_s"]
    for p in points:
        p["compile_s"] = secs.get((p["pe_rows"], p["pe_cols"], p["ocm_mib"]), float("nan"))
    with open(out + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for p in points:
            w.writerow([f"{p[c]:.4f}" if isinstance(p[c], float) and c.endswith(("ratio", "weights", "_s")) else
                        (f"{p[c]:.0f}" if isinstance(p[c], float) and c not in ("ddr_gbps", "ocm_mib") else
                         (f"{p[c]:g}" if isinstance(p[c], float) else p[c])) for c in cols])
    ok = [p for p in points if p["status"] == "ok"]
    worst_dec = max(ok, key=lambda p: p["decode_ratio"])
    big = [p for p in ok if p["ocm_mib"] >= 2]
    worst_img = max(big, key=lambda p: p["image_ratio"]) if big else None
    one = [p for p in ok if p["ocm_mib"] == 1]
    lines = [
        "<!-- Generated by scripts/design_space.py; do not edit. Regenerate: scripts/design_space.py -->",
        "# The 2B model across the design space",
        "",
        "Timing-only runs of `gpnpu sweep --model synthetic:2b --workload both` (the image program for a",
        "256x256 photo and a 128-token prompt; one decode step attending 140 tokens) at every point of",
        "pe x ocm x ddr, every other key as in qc-u. Columns:",
        "",
        "- **image plan** = resident (activations in OCM) or streamed (through DDR in row tiles); per part where",
        "  the tower runs before the prefill in a plan of its own, with \"2 views\" where the tower's and mergers'",
        "  GEMMs run on other PE rows than the prefill's (`gpnpu compile --tower-rows`).",
        "- **image x** = image cycles / max(MAC floor, weights-once DDR floor); the MAC floor is the program's",
        "  MACs at the array's peak (its last layer past the KV write runs the head's row alone, so the floor",
        "  counts that row; where the streamed tail is not taken, 1 MiB at 16 GB/s, every row); the",
        "  weights-once floor is the bytes of every weight the program reads, read once, over the bandwidth.",
        "- **calls x** = the sum of every image call's own floor (the larger of its MAC and DDR cycles) / the",
        "  same max: the image program's calls, run one after another, take at least this; where it is above",
        "  image x's bound, only overlapping DDR-bound calls with MAC-bound ones (or reading less) meets it.",
        "- **DDR/w** = the image program's DDR bytes / those weights-once bytes.",
        "- **decode x** = decode cycles / ((weights + KV + logits bytes) / bandwidth): every byte the step moves.",
        "- **compile s** = CPU seconds (user + system) of `gpnpu compile` (both programs written to disk; the",
        "  assembly listings are `--asm`'s) at that pe x ocm.",
        "",
        f"Worst decode ratio {worst_dec['decode_ratio']:.4f} (pe {worst_dec['pe']}, {worst_dec['ocm_mib']} MiB, "
        f"{worst_dec['ddr_gbps']:g} GB/s)."
        + (f" Worst image ratio at ocm >= 2 MiB {worst_img['image_ratio']:.3f} (pe {worst_img['pe']}, "
           f"{worst_img['ocm_mib']} MiB, {worst_img['ddr_gbps']:g} GB/s)." if worst_img else "")
        + (f" At ocm >= 2 MiB {sum(p['image_ratio'] > 1.30 for p in big)} points over 1.30 x, "
           f"{sum(p['image_calls_ratio'] > 1.30 for p in big)} of them with calls x over 1.30." if big else "")
        + (f" Worst DDR/w at 1 MiB {max(p['image_ddr_per_weights'] for p in one):.3f}." if one else "")
        + (f" Slowest compile {max(secs.values()):.2f} s of CPU." if secs else ""),
        "",
        "| pe | OCM MiB | DDR GB/s | image plan | image Mcycles | MAC floor M | weights floor M | image x | calls x "
        "| DDR/w | decode Mcycles | bytes floor M | decode x | compile s |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        if p["status"] != "ok":
            lines.append(f"| {p['pe']} | {p['ocm_mib']} | {p['ddr_gbps']:g} | {p['status']} ||||||||||")
            continue
        lines.append(
            f"| {p['pe']} | {p['ocm_mib']} | {p['ddr_gbps']:g} | {p['image_plan']} | {p['image_cycles'] / 1e6:.2f} | "
            f"{p['image_mac_floor'] / 1e6:.2f} | {p['image_weights_floor'] / 1e6:.2f} | {p['image_ratio']:.3f} | "
            f"{p['image_calls_ratio']:.3f} | {p['image_ddr_per_weights']:.2f} | {p['decode_cycles'] / 1e6:.3f} | {p['decode_bytes_floor'] / 1e6:.3f} | "
            f"{p['decode_ratio']:.4f} | {p['compile_s']:.2f} |")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpnpu", default="build/gpnpu")
    ap.add_argument("--work", default="/tmp/design-space",
                    help="sweep files (resumable, in a folder per gpnpu build) and compile outputs")
    ap.add_argument("--out", default="docs/design-space", help="table path without extension (.md and .csv)")
    ap.add_argument("--grid", choices=["full", "reduced", "fine"], default="full",
                    help="full: the acceptance grid; reduced: the test's; fine: 315 points off the grid (about 3 min on 2 cores)")
    ap.add_argument("-j", type=int, default=2, help="points run in parallel")
    ap.add_argument("--check-monotone", action="store_true", help="check only (no table); exit 1 on a violation")
    ap.add_argument("--negative-control", action="store_true", help="swap two neighbouring points first")
    ap.add_argument("--no-run", action="store_true", help="table from the sweep files already in --work (no runs)")
    a = ap.parse_args()
    a.work = build_dir(a.gpnpu, a.work)
    os.makedirs(a.work, exist_ok=True)
    points = table(sweep(a.gpnpu, a.work, a.grid, a.j, not a.no_run))
    if a.check_monotone:
        if a.negative_control:
            # Reverse one point: the smallest machine gets the largest neighbour's image cycles + 1.
            lo, hi = points[0], next(p for p in points if p["ocm_mib"] > points[0]["ocm_mib"]
                                     and p["pe"] == points[0]["pe"] and p["ddr_gbps"] == points[0]["ddr_gbps"])
            lo["image_cycles"], hi["image_cycles"] = hi["image_cycles"], lo["image_cycles"] + 1
        bad = violations(points)
        for b in bad:
            print("not monotone:", b)
        print(f"{len(points)} points, {len(bad)} violations")
        if a.negative_control:
            print("negative control " + ("caught" if bad else "NOT caught: the check is broken"))
            return 0 if bad else 1
        return 1 if bad else 0
    write(points, {} if a.no_run else compile_seconds(a.gpnpu, a.work, a.grid), a.out)
    print(f"wrote {a.out}.md and {a.out}.csv ({len(points)} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
