#!/usr/bin/env python3
"""scripts/ddr_idle.py on a real timeline: the tiny model's image program, layer P0.

    check_ddr_idle.py GPNPU WORKDIR [--negative-control]

Checks that the region's DDR busy + idle = its cycles, that the busy cycles move at least
the bytes the region read at the port's rate (ddr_gbps / clock_ghz bytes a cycle: no more
than the port can carry), and that every call's busy + idle = its cycles. The negative
control drops every other transfer from the timeline first: the bytes check must then fail
(exit 0 only if it does).
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
    drop = set(port[::2])
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
if negative:
    print("negative control: " + ("caught: " + failures[0] if failures else "NOT caught"))
    sys.exit(0 if failures else 1)
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
