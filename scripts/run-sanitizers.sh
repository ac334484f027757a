#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer: builds into
# build-asan (-DGPNPU_SANITIZE=ON, RelWithDebInfo) and runs ctest without the slow
# reference goldens (label `reference`). Any sanitizer report fails its test.
# Environment:
#   ASAN_BUILD_DIR   build directory (default build-asan)
#   JOBS             build and ctest parallelism (default nproc)
#   SANITIZE_LABELS  ctest -L regex: run only these labels (default: all but reference)
#   SANITIZE_TARGETS build only these targets (space-separated; default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}
t0=$(date +%s)
cmake -S . -B "$BUILD_DIR" -G Ninja -DGPNPU_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=()
for t in ${SANITIZE_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" "${targets[@]}" -j "$JOBS"
t1=$(date +%s)
# halt_on_error: the first report fails the test; leaks count as errors.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
labels=()
[ -n "${SANITIZE_LABELS:-}" ] && labels=(-L "$SANITIZE_LABELS")
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" -LE reference "${labels[@]}"
t2=$(date +%s)
echo "run-sanitizers: build $((t1 - t0)) s, tests $((t2 - t1)) s"
