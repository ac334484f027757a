#!/usr/bin/env python3
"""scripts/ddr_idle.py on a real timeline: the tiny model's image program, layer P0.

    check_ddr_idle.py GPNPU WORKDIR [--negative-control]

Checks that the region's DDR busy + idle = its cycles, that the busy cycles move at least
the bytes the region read at the port's rate (ddr_gbps / clock_ghz bytes a cycle: no more
than the port can carry), and that every call's busy + idle = its cycles. Then --gaps on the
longest call (every span, --min-gap 1): the spans sum to the call's idle cycles, lie inside it,
and none overlaps a transfer of the run's timeline. The negative control drops every other
transfer and every transfer inside the longest call from the timeline first: the bytes check
and the spans' check must then fail (exit 0 only if both do).
"""
import json
import os
import subprocess
import sys

gpnpu, work = sys.argv[1], sys.argv[2]
negative = "--negative-control" in sys.argv[3:]
script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "ddr_idle.py")
os.makedirs(work, exist_ok=True)
subprocess.run([gpnpu, "compile", "--model", "synthetic:tiny", "--out", f"{work}/d"], check=True, capture_output=True)
timeline = f"{work}/t.json"
subprocess.run([gpnpu, "run", f"{work}/d/image.bin", "--timing-only", "--timeline", timeline, "--trace-filter",
                "mark=P0", "-q"], check=True)
with open(timeline) as f:
    doc = json.load(f)
events = doc["traceEvents"]
tid = {e["args"]["name"]: e["tid"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
if negative:
    port = [i for i, e in enumerate(events) if e.get("tid") == tid["ddr port"] and e.get("ph") == "X"]
    # every other transfer (the union of the port's busy spans barely moves: they overlap), and
    # every transfer that starts inside the longest call (its spans then overlap the run's)
    call = max((e for e in events if e.get("tid") == tid["marks"] and e.get("ph") == "X" and
                e["args"]["depth"] == 2 and e["name"].startswith("P0.")), key=lambda e: e["args"]["cycles"])
    lo, hi = call["args"]["cycle"], call["args"]["cycle"] + call["args"]["cycles"]
    drop = set(port[::2]) | {i for i in port if lo <= events[i]["args"]["cycle"] < hi}
    doc["traceEvents"] = [e for i, e in enumerate(events) if i not in drop]
    timeline = f"{work}/t_dropped.json"
    with open(timeline, "w") as f:
        json.dump(doc, f)
region = [e for e in events if e.get("tid") == tid["marks"] and e.get("name") == "P0"][0]
cfg = json.loads(subprocess.run([gpnpu, "config"], check=True, capture_output=True, text=True).stdout)
bytes_per_cycle = cfg["ddr_gbps"] / cfg["clock_ghz"]

out = subprocess.run(["/usr/bin/python3", script, timeline, "--mark", "P0"], check=True, capture_output=True,
                     text=True).stdout.splitlines()
failures = []
head = out[0].replace(",", "").split()  # P0: N cycles DDR busy B idle I
cycles, busy, idle = int(head[1]), int(head[5]), int(head[7])
if cycles != region["args"]["cycles"] or busy + idle != cycles:
    failures.append(f"region: {out[0]} (timeline: {region['args']['cycles']} cycles)")
need = region["args"]["ddr_bytes_read"] / bytes_per_cycle
if busy < need:
    failures.append(f"region: DDR busy {busy} cycles cannot move {region['args']['ddr_bytes_read']} bytes "
                    f"at {bytes_per_cycle:.2f} B/cycle (at least {need:.0f})")
calls = [line.split() for line in out[1:]]
if len(calls) < 5:
    failures.append(f"only {len(calls)} calls listed")
for c in calls:  # NAME N cycles DDR busy B idle I
    if int(c[5]) + int(c[7]) != int(c[1]):
        failures.append(f"call {' '.join(c)}: busy + idle != cycles")
print("\n".join(out[:4]))
bytes_failures = len(failures)

# --gaps on the longest call: its idle spans against the run's own transfers.
name, cycles_c, idle_c = max(((c[0], int(c[1]), int(c[7])) for c in calls), key=lambda c: c[1])
gap_out = subprocess.run(["/usr/bin/python3", script, timeline, "--mark", "P0", "--gaps", name, "--min-gap", "1"],
                         check=True, capture_output=True, text=True).stdout.splitlines()
start = [e for e in events if e.get("tid") == tid["marks"] and e.get("name") == name][0]["args"]["cycle"]
spans = [(start + int(g[0]), start + int(g[2])) for g in (line.split() for line in gap_out) if len(g) == 5 and g[1] == ".."]
port = [(e["args"]["cycle"], e["args"]["cycle"] + e["args"]["cycles"]) for e in events
        if e.get("tid") == tid["ddr port"] and e.get("ph") == "X"]
if sum(g1 - g0 for g0, g1 in spans) != idle_c:
    failures.append(f"--gaps {name}: spans sum to {sum(g1 - g0 for g0, g1 in spans)}, the table's idle is {idle_c}")
for g0, g1 in spans:
    if g0 < start or g1 > start + cycles_c:
        failures.append(f"--gaps {name}: span [{g0}, {g1}) outside the call")
    hit = [t for t in port if t[0] < g1 and g0 < t[1]]
    if hit:
        failures.append(f"--gaps {name}: span [{g0 - start}, {g1 - start}) overlaps a transfer at {hit[0][0] - start}")
        break
print(f"--gaps {name}: {len(spans)} spans, {sum(g1 - g0 for g0, g1 in spans)} cycles idle")
if negative:
    caught = bytes_failures > 0 and len(failures) > bytes_failures
    print("negative control: " + ("caught: " + failures[0] + "; " + failures[-1] if caught else "NOT caught"))
    sys.exit(0 if caught else 1)
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
