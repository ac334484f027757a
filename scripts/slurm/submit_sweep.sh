#!/bin/bash
# Submits a gpnpu sweep to Slurm as an array of N shards plus a merge job that runs
# when every shard has succeeded. Prints the two job ids.
#   scripts/slurm/submit_sweep.sh -n 4 -o /shared/sweep-out -- --model synthetic:2b --workload both \
#       --set ocm_bytes=1MiB,2MiB,4MiB,8MiB --set ddr_gbps=16,32,64
# Options: -n N shards (default 4), -o OUT_DIR (default ./sweep-out), -g GPNPU binary
# (default ./build/gpnpu), -c CPUS per shard (default 2); extra sbatch options in $SBATCH_EXTRA.
# The result: OUT_DIR/all.h5 and OUT_DIR/all.csv; plot with scripts/plot_sweep.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=4 out=$PWD/sweep-out gpnpu=$PWD/build/gpnpu cpus=2
while getopts "n:o:g:c:" opt; do
  case $opt in
    n) n=$OPTARG ;; o) out=$OPTARG ;; g) gpnpu=$OPTARG ;; c) cpus=$OPTARG ;;
    *) echo "usage: $0 [-n N] [-o OUT_DIR] [-g GPNPU] [-c CPUS] -- SWEEP ARGS..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -gt 0 ]] || { echo "error: give the gpnpu sweep arguments after --" >&2; exit 2; }
[[ -x $gpnpu ]] || { echo "error: gpnpu binary '$gpnpu' not found (build it, or pass -g)" >&2; exit 2; }
out=$(mkdir -p "$out" && cd "$out" && pwd)
gpnpu=$(cd "$(dirname "$gpnpu")" && pwd)/$(basename "$gpnpu")
# Check the arguments once here: a typo fails now, not in N array tasks.
"$gpnpu" sweep "$@" --dry-run --out "$out/all.h5" >/dev/null
export SWEEP_ARGS="$*" OUT_DIR=$out GPNPU=$gpnpu SHARDS=$n
# shellcheck disable=SC2086
array=$(sbatch --parsable --array=0-$((n - 1)) --cpus-per-task="$cpus" --chdir="$out" ${SBATCH_EXTRA:-} \
        --export=ALL "$here/sweep.sbatch")
merge=$(sbatch --parsable --dependency=afterok:"${array%%;*}" --chdir="$out" ${SBATCH_EXTRA:-} \
        --export=ALL "$here/merge.sbatch")
echo "array job $array ($n shards), merge job $merge -> $out/all.h5"
