#!/usr/bin/env bash
# The README's main command: install, build, and run the main job: describe the
# bundled photo (examples/photos/chelsea.png) with Qwen3-VL-2B (synthetic weights,
# W4A16) on the simulated qc-u GPNPU, every step gated against the C++ chain, and
# print the report (cycles per stage, DDR roofline, kernels against their floors).
# The first run makes and quantises the synthetic 2B checkpoint once (about two
# minutes; cached in $GPNPU_CACHE or ~/.cache/gpnpu). Extra arguments go to
# `gpnpu describe` (e.g. --tokens 5, --timing-only, --model synthetic:tiny).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
scripts/install-deps.sh
t1=$(date +%s)
scripts/build.sh
t2=$(date +%s)
out=${GPNPU_OUT:-out/describe}
mkdir -p "$out"
status=0
build/gpnpu describe --report-json "$out/report.json" --report-html "$out/report.html" "$@" || status=$?
t3=$(date +%s)
echo "run-main: install $((t1-t0)) s, build $((t2-t1)) s, describe $((t3-t2)) s; report in $out/report.html"
# 2: a gate failed (the report above says which); 1: a usage or input error.
exit $status
