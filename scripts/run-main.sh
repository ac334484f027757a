#!/usr/bin/env bash
# The README's main command: install, build, and run the main job.
# Until `gpnpu describe` lands (issue: the user's run) the main job runs the
# example programs and prints their stats.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
scripts/install-deps.sh
t1=$(date +%s)
scripts/build.sh
t2=$(date +%s)
for p in examples/asm/*.s; do
  echo "== $p"
  build/gpnpu run "$p"
done
t3=$(date +%s)
echo "run-main: install $((t1-t0)) s, build $((t2-t1)) s, run $((t3-t2)) s"
