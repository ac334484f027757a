#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer: builds into
# build-asan (gcc, -DGPNPU_SANITIZE=ON, -O1 -g1) and runs ctest. Any sanitizer
# report fails its test (halt_on_error; leaks count). See docs/testing.md.
#
# Two ctest passes, because of SystemC (QuickThreads coroutines):
#  - labels isa and fuzz (no SystemC in the process): also
#    detect_stack_use_after_return=1;
#  - everything else: detect_stack_use_after_return=0. libsystemc 2.3.4 announces
#    its coroutine switches to ASan without a fake stack to save, so ASan frees the
#    fake stack at every switch and the next instrumented frame faults (SEGV in the
#    first function a SystemC thread calls).
# Excluded by default (SANITIZE_EXCLUDE): label reference (the PyTorch goldens:
# Python does the work, the gpnpu it calls is covered by the other tests) and
# label report (headless Chromium renders committed pages; no project code).
# Environment:
#   ASAN_BUILD_DIR   build directory (default build-asan)
#   JOBS             build and ctest parallelism (default nproc)
#   SANITIZE_LABELS  ctest -L regex: run only these labels (default: all)
#   SANITIZE_EXCLUDE ctest -LE regex (default ^(reference|report)$)
#   SANITIZE_TARGETS build only these targets (space-separated; default: gpnpu,
#                    fuzz_replay and every test_* binary, not the benchmarks)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}
EXCLUDE=${SANITIZE_EXCLUDE:-^(reference|report)\$}
t0=$(date +%s)
# -O1 -g1: ASan's recommended optimisation (a quarter less compile time than
# RelWithDebInfo's -O2 -g) with line tables for the reports' stack traces.
cmake -S . -B "$BUILD_DIR" -G Ninja -DGPNPU_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" >/dev/null
if [ -n "${SANITIZE_TARGETS:-}" ]; then
  targets=$SANITIZE_TARGETS
else
  targets="gpnpu fuzz_replay $(ninja -C "$BUILD_DIR" -t targets all | sed -n 's/^\(test_[a-z_]*\): phony$/\1/p' | sort -u | tr '\n' ' ')"
fi
build_args=()
for t in $targets; do build_args+=(--target "$t"); done
cmake --build "$BUILD_DIR" "${build_args[@]}" -j "$JOBS"
t1=$(date +%s)
base_asan=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
labels=()
[ -n "${SANITIZE_LABELS:-}" ] && labels=(-L "$SANITIZE_LABELS")
status=0
# Pass 1: no SystemC in these processes.
ASAN_OPTIONS="$base_asan:detect_stack_use_after_return=1" \
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" -L '^(isa|fuzz)$' -LE "$EXCLUDE" "${labels[@]}" \
  --no-tests=ignore || status=1
# Pass 2: the rest (SystemC, and the CLI that runs it).
ASAN_OPTIONS="$base_asan:detect_stack_use_after_return=0" \
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" -LE "^(isa|fuzz)\$|$EXCLUDE" "${labels[@]}" \
  --no-tests=ignore || status=1
t2=$(date +%s)
echo "run-sanitizers: build $((t1 - t0)) s, tests $((t2 - t1)) s"
exit $status
