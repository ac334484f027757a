#!/bin/bash
# Runs a small gpnpu sweep through a real single-node Slurm (slurmctld + slurmd +
# munge, Debian's slurm-wlm) on this machine, and checks that the merged shard files
# are byte-identical to the same sweep run locally with `gpnpu sweep`.
#   sudo scripts/slurm/test_local_slurm.sh [GPNPU]     (root: starts daemons; GPNPU default build/gpnpu)
# Needs: apt-get install slurm-wlm munge. Everything lives under a temp directory
# (config, state, logs); the daemons it starts are stopped on exit. Exit 0: passed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
gpnpu=$(realpath "${1:-$root/build/gpnpu}")
[[ -x $gpnpu ]] || { echo "error: no gpnpu binary at $gpnpu" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "error: run as root (it starts munged, slurmctld and slurmd)" >&2; exit 2; }
for b in munged slurmctld slurmd sbatch squeue; do
  command -v $b >/dev/null || { echo "error: $b missing: apt-get install slurm-wlm munge" >&2; exit 2; }
done

work=$(mktemp -d /tmp/gpnpu-slurm.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [[ ${KEEP:-0} == 1 ]] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
node=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
mkdir -p "$work"/{munge,state,spool,log,out}
chmod 700 "$work/munge"

# munge: its own key, socket and pid file (does not touch a system munged).
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
sock=$work/munge/munge.socket
munged --key-file="$work/munge/munge.key" --socket="$sock" --pid-file="$work/munge/munged.pid" \
       --log-file="$work/log/munged.log" --seed-file="$work/munge/seed" --foreground --force &
pids+=($!)
for _ in $(seq 50); do [[ -S $sock ]] && break; sleep 0.1; done

cat > "$work/slurm.conf" <<CONF
ClusterName=gpnpu-test
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
NodeName=$node CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -D -f "$SLURM_CONF" > "$work/log/slurmctld.out" 2>&1 &
pids+=($!)
sleep 2
slurmd -D -f "$SLURM_CONF" > "$work/log/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
  sinfo -h -o %T 2>/dev/null | grep -qE "idle|mixed" && break
  sleep 1
done
sinfo -h -o "%P %N %T %c" || true
sinfo -h -o %T | grep -qE "idle|mixed" || {
  echo "error: the Slurm node did not come up; logs:" >&2
  tail -n 20 "$work"/log/* >&2
  exit 1
}

# The sweep: tiny model, both workloads, 6 points in 3 shards.
args=(--model synthetic:tiny --workload both --set ocm_bytes=4MiB,8MiB --set ddr_gbps=16,32,64)
out=$work/out
SBATCH_EXTRA="--output=$work/log/%x-%A_%a.out" "$root/scripts/slurm/submit_sweep.sh" -n 3 -c 1 -o "$out" -g "$gpnpu" -- "${args[@]}"
for _ in $(seq 300); do
  [[ -z $(squeue -h 2>/dev/null) ]] && break
  sleep 1
done
echo "--- array and merge job logs"
tail -n 5 "$work"/log/gpnpu-sweep*.out || true
[[ -f $out/all.h5 ]] || { echo "error: no merged file $out/all.h5" >&2; tail -n 30 "$work"/log/slurm*.log >&2; exit 1; }

"$gpnpu" sweep "${args[@]}" -j 2 --out "$work/local.h5"
cmp "$out/all.h5" "$work/local.h5"
cmp "$out/all.csv" "$work/local.csv"
echo "PASS: Slurm array of 3 shards + merge == local sweep ($(($(wc -l < "$out/all.csv") - 1)) points, byte-identical HDF5 and CSV)"
