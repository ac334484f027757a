#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, -fsanitize=fuzzer,address,undefined)
# into build-fuzz and runs each for SECONDS (default 60), one after the other:
#   scripts/run-fuzz.sh [SECONDS]
# Environment: FUZZ_TARGETS="assembler binary ..." picks targets; FUZZ_BUILD_DIR
# (default build-fuzz); JOBS (default nproc) for the build; FUZZ_ARGS extra
# libFuzzer flags. New inputs go to BUILD/fuzz/corpus/TARGET (the committed seeds
# in tests/fuzz/corpus/TARGET are read, never written); crashes to
# BUILD/fuzz/artifacts/. Prints one line per target with the seconds and the
# executions achieved; exits 1 if any target found a crash, leak or timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
TARGETS=${FUZZ_TARGETS:-assembler binary safetensors tokenizer image config}
JOBS=${JOBS:-$(nproc)}

# clang and libFuzzer's runtime (Debian: clang, libclang-rt-14-dev).
if ! command -v clang++ >/dev/null || ! compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
  scripts/install-deps.sh --fuzz
fi
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DGPNPU_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
build_targets=()
for t in $TARGETS; do build_targets+=(--target "fuzz_$t"); done
cmake --build "$BUILD_DIR" "${build_targets[@]}" -j "$JOBS"

out=$BUILD_DIR/fuzz
mkdir -p "$out/logs" "$out/artifacts"
# The assembler's dictionary: every mnemonic of the table plus the syntax tokens.
{
  grep -o '^INSN([^,]*, *"[^"]*"' isa/isa_table.def | sed 's/.*, *//'
  printf '%s\n' '".equ"' '".name"' '"@p"' '":"' '","' '"("' '")"' '"0x"' '"#"' '"\""' '"\x0a"'
} > "$out/assembler.dict"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
status=0
for t in $TARGETS; do
  mkdir -p "$out/corpus/$t"
  dict=()
  [ "$t" = assembler ] && dict=(-dict="$out/assembler.dict")
  log=$out/logs/$t.log
  t0=$(date +%s)
  rc=0
  "$out/fuzz_$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$t-" "${dict[@]}" ${FUZZ_ARGS:-} \
    "$out/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  t1=$(date +%s)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  if [ $rc -ne 0 ]; then
    status=1
    echo "run-fuzz: $t FAILED after $((t1 - t0)) s (rc $rc); see $log and $out/artifacts/$t-*"
    grep -m3 -E 'ERROR|runtime error|property violated|Assertion|terminate' "$log" || true
  else
    echo "run-fuzz: $t ok: $((t1 - t0)) s, ${execs:-?} execs, coverage ${cov:-?} edges, corpus $(ls "$out/corpus/$t" | wc -l) files"
  fi
done
exit $status
