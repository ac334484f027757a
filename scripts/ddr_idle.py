#!/usr/bin/env python3
"""Where the DDR port idles: per kernel call of a `gpnpu run --timeline` JSON.

    build/gpnpu run D/image.bin --timing-only --timeline T.json --trace-filter mark=P5 -q
    /usr/bin/python3 scripts/ddr_idle.py T.json [--mark P5] [--gaps P5.down [--min-gap 300]]

Prints, for the region named by --mark (default: the longest depth-1 region in the file),
its cycles, the cycles the DDR port moved data, and then each call inside it (depth 2):
cycles, DDR busy, DDR idle. With --gaps CALL, then the spans of that call (any depth inside the
region) in which the port moved nothing, of --min-gap cycles or more, as cycles from the call's
start, and their sum: where a kernel left the DDR idle (a prefetch started too late, buffers full).
The port's transfers are the slices of the track named "ddr port", the calls those of the track
named "marks" (docs/tracing.md).
"""
import argparse
import bisect
import json
import signal
import sys


def tracks(events):
    return {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # (piped into head)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline", help="a gpnpu --timeline JSON")
    ap.add_argument("--mark", help="the region to report (a depth-1 mark, e.g. P5)")
    ap.add_argument("--gaps", metavar="CALL", help="also list the DDR's idle spans inside this call (e.g. P5.down)")
    ap.add_argument("--min-gap", type=int, default=300, help="the shortest idle span --gaps lists (cycles; default 300)")
    a = ap.parse_args()
    try:
        with open(a.timeline) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"ddr_idle.py: {a.timeline}: not a gpnpu timeline ({e})")
    names = tracks(events)
    tid = {v: k for k, v in names.items()}
    if "ddr port" not in tid or "marks" not in tid:
        sys.exit(f"ddr_idle.py: {a.timeline} has no 'ddr port' or 'marks' track (tracks: {sorted(tid)})")
    spans = sorted((e["args"]["cycle"], e["args"]["cycle"] + e["args"]["cycles"])
                   for e in events if e.get("tid") == tid["ddr port"] and e.get("ph") == "X")
    busy = []  # the union of the port's transfers
    for b, e in spans:
        if busy and b <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], e)
        else:
            busy.append([b, e])
    starts = [b for b, _ in busy]

    def busy_in(lo, hi):
        s, i = 0, max(0, bisect.bisect_right(starts, lo) - 1)
        while i < len(busy) and busy[i][0] < hi:
            s += max(0, min(hi, busy[i][1]) - max(lo, busy[i][0]))
            i += 1
        return s

    marks = [(e["args"]["cycle"], e["args"]["cycles"], e["args"]["depth"], e["name"])
             for e in events if e.get("tid") == tid["marks"] and e.get("ph") == "X"]
    tops = [m for m in marks if m[2] == 1 and (not a.mark or m[3] == a.mark)]
    if not tops:
        sys.exit(f"ddr_idle.py: no depth-1 region{' named ' + a.mark if a.mark else ''} in {a.timeline}")
    lo, n, _, name = max(tops, key=lambda m: m[1])
    hi = lo + n
    print(f"{name}: {n} cycles, DDR busy {busy_in(lo, hi)}, idle {n - busy_in(lo, hi)}")
    for b, c, d, m in sorted(marks):
        if d == 2 and lo <= b < hi and m.startswith(name + "."):
            db = busy_in(b, b + c)
            print(f"  {m:28s} {c:9d} cycles  DDR busy {db:9d}  idle {c - db:9d}")
    if not a.gaps:
        return
    calls = [m for m in marks if m[3] == a.gaps and lo <= m[0] < hi]
    if not calls:
        sys.exit(f"ddr_idle.py: no call named {a.gaps} inside {name} (--gaps takes a mark name, e.g. {name}.down)")
    b0, c, _, m = calls[0]
    gaps, t = [], b0  # (t: the end of the port's last transfer seen, from the call's start)
    for bb, be in busy[max(0, bisect.bisect_right(starts, b0) - 1):]:
        if bb >= b0 + c:
            break
        if bb > t:
            gaps.append((t, bb))
        t = max(t, be)
    if t < b0 + c:
        gaps.append((t, b0 + c))
    listed = [(g0, g1) for g0, g1 in gaps if g1 - g0 >= a.min_gap]
    print(f"{m}: the DDR idle {sum(g1 - g0 for g0, g1 in gaps)} of its {c} cycles; "
          f"spans of {a.min_gap} cycles or more (from its start):")
    for g0, g1 in listed:
        print(f"  {g0 - b0:9d} .. {g1 - b0:9d}  {g1 - g0:9d} cycles")
    print(f"  listed: {len(listed)} spans, {sum(g1 - g0 for g0, g1 in listed)} cycles")


if __name__ == "__main__":
    main()
