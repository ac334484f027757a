#!/usr/bin/env bash
# The README's test command: install, build, run every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
scripts/install-deps.sh
t1=$(date +%s)
scripts/build.sh
t2=$(date +%s)
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
t3=$(date +%s)
echo "run-tests: install $((t1-t0)) s, build $((t2-t1)) s, tests $((t3-t2)) s"
