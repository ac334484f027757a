#!/usr/bin/env bash
# The README's main command: install, build, and run the main job.
# Until `gpnpu describe` lands (the user's-run issue) the main job compiles
# Qwen3-VL-2B for the qc-u machine and runs its image program (256x256 photo,
# 128-token prompt) and one decode step in timing-only mode, printing cycles per
# stage and the kernels furthest from their floors; then the example programs.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
scripts/install-deps.sh
t1=$(date +%s)
scripts/build.sh
t2=$(date +%s)
out=${GPNPU_OUT:-out/qwen3-vl-2b}
build/gpnpu compile --model synthetic:2b --out "$out" --run
for p in examples/asm/*.s; do
  echo "== $p"
  build/gpnpu run "$p"
done
t3=$(date +%s)
echo "run-main: install $((t1-t0)) s, build $((t2-t1)) s, run $((t3-t2)) s; programs and report in $out"
