#!/usr/bin/env bash
# The README's test command: install, build, run every test (ctest).
# Then, when GPNPU_CI_SANITIZERS=1 or CI=true (unless GPNPU_CI_SANITIZERS=0), the
# sanitizer build (scripts/run-sanitizers.sh, docs/testing.md). CI runs a subset
# under the sanitizers so that .ci/run stays under 20 minutes on 2 cores from a
# fresh clone: GPNPU_SANITIZE_SCOPE=subset (the default under CI) builds test_isa
# and fuzz_replay only, and runs labels isa and fuzz (the assembler, the decoder
# and every input parser on the committed corpora and crash reproducers);
# GPNPU_SANITIZE_SCOPE=all builds and runs the whole suite (labels reference and
# report aside; 6-9 minutes of tests on 2 cores plus the build: over the budget).
# GPNPU_CI_FUZZ_SECONDS=N also runs each libFuzzer target N seconds (scripts/run-fuzz.sh;
# off by default: the committed corpora already replay under ctest -L fuzz, and the
# clang build plus runs would take the 20-minute budget's last few minutes).
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

sanitizers=${GPNPU_CI_SANITIZERS:-}
if [ -z "$sanitizers" ] && [ "${CI:-}" = true ]; then sanitizers=1; fi
if [ "$sanitizers" = 1 ]; then
  if [ "${GPNPU_SANITIZE_SCOPE:-subset}" = all ]; then
    scripts/run-sanitizers.sh
  else
    SANITIZE_TARGETS="test_isa fuzz_replay" SANITIZE_LABELS="^(isa|fuzz)$" scripts/run-sanitizers.sh
  fi
  t4=$(date +%s)
  echo "run-tests: sanitizers $((t4-t3)) s (scope ${GPNPU_SANITIZE_SCOPE:-subset})"
fi
if [ -n "${GPNPU_CI_FUZZ_SECONDS:-}" ]; then
  t5=$(date +%s)
  scripts/run-fuzz.sh "$GPNPU_CI_FUZZ_SECONDS"
  echo "run-tests: fuzzing $(( $(date +%s) - t5 )) s"
fi
