#!/usr/bin/env bash
# A throw-away single-node Slurm on loopback, for the gpupool-vs-Slurm benchmark.
#
# Source it and call the functions, or run it directly:
#   slurm_setup.sh check        start Slurm, run one one-GPU job, tear everything down
#
# Functions (for `source`):
#   slurm_install               apt-get install slurm-wlm + munge, only when missing
#   slurm_start [PROFILE]       write the config under a fresh temp dir and start munged,
#                               slurmctld and slurmd; PROFILE is "htc" (default: Slurm's
#                               High Throughput Computing guide settings) or "default"
#   slurm_stop                  kill the three daemons and remove the temp dir (idempotent;
#                               call it from an EXIT trap)
# After slurm_start: SLURM_CONF is exported (clients use it), SLURM_BENCH_DIR is the temp dir.
#
# Nothing global is changed except the packages: munged uses its own key file and socket
# under the temp dir (the /etc/munge key the Debian package creates is left alone), the
# daemons run with -f/SLURM_CONF pointing into the temp dir, and the 8 GPUs are character
# devices with /dev/null's major/minor inside the temp dir.

SLURM_BENCH_GPUS=${SLURM_BENCH_GPUS:-8}
SLURM_BENCH_DIR=${SLURM_BENCH_DIR:-}
_SLURM_PIDS=()

_slurm_log() { echo "[slurm_setup] $*" >&2; }

slurm_install() {
  local missing=()
  command -v munged >/dev/null || missing+=(munge)
  for b in slurmctld slurmd sbatch; do
    command -v "$b" >/dev/null || { missing+=(slurm-wlm); break; }
  done
  if ((${#missing[@]} == 0)); then return 0; fi
  if [[ $(id -u) != 0 ]]; then
    _slurm_log "Slurm/munge are missing and installing them needs root: run as root or" \
      "apt-get install slurm-wlm munge first"
    return 1
  fi
  _slurm_log "installing ${missing[*]} with apt-get (their services are not started here)"
  # policy-rc.d stops the packages from starting their system-wide daemons; keep an
  # existing one, add a temporary one otherwise.
  local added_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    added_policy=1
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge \
    >&2 || rc=$?
  if ((rc != 0)); then
    apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y \
      --no-install-recommends slurm-wlm munge >&2 && rc=0
  fi
  ((added_policy)) && rm -f /usr/sbin/policy-rc.d
  return $rc
}

# Real CPUs and memory of this machine, as Slurm wants them in NodeName=.
_slurm_node_line() {
  local cpus mem_mb
  cpus=$(nproc)
  mem_mb=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
  # Leave 5% for the OS: slurmd refuses to register when RealMemory exceeds what it sees.
  mem_mb=$((mem_mb * 95 / 100))
  echo "NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb" \
    "Gres=gpu:$SLURM_BENCH_GPUS State=UNKNOWN"
}

_slurm_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

_slurm_write_conf() {
  local d=$1 profile=$2 ctld_port slurmd_port
  ctld_port=$(_slurm_free_port)
  slurmd_port=$(_slurm_free_port)
  while [[ $slurmd_port == "$ctld_port" ]]; do slurmd_port=$(_slurm_free_port); done
  mkdir -p "$d/dev" "$d/state" "$d/spool" "$d/log"
  local i
  for ((i = 0; i < SLURM_BENCH_GPUS; i++)); do
    # Stand-in GPU device files: same major/minor as /dev/null (1:3).
    mknod "$d/dev/nvidia$i" c 1 3
  done
  cat >"$d/gres.conf" <<EOF
AutoDetect=off
Name=gpu File=$d/dev/nvidia[0-$((SLURM_BENCH_GPUS - 1))]
EOF
  cat >"$d/slurm.conf" <<EOF
# Written by bench/pool/slurm_setup.sh (profile: $profile); removed after the run.
ClusterName=gpbench
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge.sock
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
PlugStackConfig=$d/plugstack.conf
GresTypes=gpu
SelectType=select/cons_tres
# GPUs are the resource under test: the node has only a few real CPUs, so the partition
# lets up to 8 jobs share a core (OverSubscribe=FORCE:8 below) and eight one-GPU jobs
# fit at once; GPUs themselves are never shared.
SelectTypeParameters=CR_Core
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MaxArraySize=100001
EOF
  if [[ $profile == htc ]]; then
    # Slurm's "High Throughput Computing Administration Guide": FIFO scheduling for short
    # jobs, no accounting/completion logging, short MinJobAge, quiet logs, large
    # MaxJobCount, a longer MessageTimeout, and scheduler batching (defer +
    # batch_sched_delay / sched_min_interval; the guide's 2 s sched_min_interval is meant
    # for hundreds of jobs per second on a big cluster, so it is shortened here for one
    # node whose jobs end in milliseconds).
    cat >>"$d/slurm.conf" <<EOF
SchedulerType=sched/builtin
SchedulerParameters=defer,batch_sched_delay=1,sched_min_interval=100000,default_queue_depth=200,sched_max_job_start=200,partition_job_depth=500
PriorityType=priority/basic
MaxJobCount=200000
MinJobAge=2
MessageTimeout=30
SlurmctldDebug=error
SlurmdDebug=error
EOF
  else
    cat >>"$d/slurm.conf" <<EOF
SlurmctldDebug=info
SlurmdDebug=info
MaxJobCount=200000
EOF
  fi
  # Extra lines for experiments, e.g. SLURM_BENCH_EXTRA='SchedulerParameters=...'.
  if [[ -n ${SLURM_BENCH_EXTRA:-} ]]; then printf '%s\n' "$SLURM_BENCH_EXTRA" >>"$d/slurm.conf"; fi
  cat >>"$d/slurm.conf" <<EOF
$(_slurm_node_line)
PartitionName=bench Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
  : >"$d/plugstack.conf"
}

slurm_start() {
  local profile=${1:-htc}
  if [[ $(id -u) != 0 ]]; then
    _slurm_log "the Slurm side runs slurmd as root (it launches jobs): run as root"
    return 1
  fi
  slurm_install || return 1
  SLURM_BENCH_DIR=$(mktemp -d /tmp/gp-slurm.XXXXXX) || return 1
  chmod 755 "$SLURM_BENCH_DIR"
  local d=$SLURM_BENCH_DIR
  _slurm_write_conf "$d" "$profile" || return 1
  export SLURM_CONF=$d/slurm.conf

  # munged with its own key and socket under the temp dir (the HTC guide's 10 threads).
  dd if=/dev/urandom of="$d/munge.key" bs=1 count=1024 status=none
  chmod 400 "$d/munge.key"
  mkdir -p "$d/munge"
  chmod 700 "$d/munge"
  munged --force --foreground --num-threads=10 --key-file="$d/munge.key" \
    --socket="$d/munge.sock" --pid-file="$d/munge/munged.pid" \
    --seed-file="$d/munge/munged.seed" --log-file="$d/log/munged.log" \
    >>"$d/log/munged.out" 2>&1 &
  _SLURM_PIDS+=($!)
  for _ in $(seq 100); do [[ -S $d/munge.sock ]] && break; sleep 0.05; done
  if [[ ! -S $d/munge.sock ]]; then
    _slurm_log "munged did not start; its log:"
    tail -n 20 "$d/log/munged.log" "$d/log/munged.out" >&2 2>/dev/null
    return 1
  fi

  # -D: stay in the foreground so the PIDs here are the daemons' own; -i: ignore any
  # state left in the (fresh) state dir.
  ulimit -n 65536 2>/dev/null || true
  slurmctld -D -i -f "$SLURM_CONF" >>"$d/log/slurmctld.out" 2>&1 &
  _SLURM_PIDS+=($!)
  slurmd -D -N localhost -f "$SLURM_CONF" >>"$d/log/slurmd.out" 2>&1 &
  _SLURM_PIDS+=($!)

  # Ready when the node is idle (slurmd registered with its 8 GPUs).
  local state=""
  for _ in $(seq 300); do
    local p
    for p in "${_SLURM_PIDS[@]}"; do
      if ! kill -0 "$p" 2>/dev/null; then
        _slurm_log "a Slurm daemon exited during start-up; logs:"
        tail -n 20 "$d"/log/* >&2
        return 1
      fi
    done
    state=$(timeout 5 sinfo -h -N -o '%T' 2>/dev/null | head -1)
    [[ $state == idle ]] && break
    sleep 0.1
  done
  if [[ $state != idle ]]; then
    _slurm_log "the node did not become idle within 30 s (state: '${state:-none}'); logs:"
    tail -n 20 "$d"/log/* >&2
    return 1
  fi
  _slurm_log "Slurm up under $d (profile $profile), node localhost with gpu:$SLURM_BENCH_GPUS"
}

slurm_stop() {
  local p
  # Daemons first (TERM, then KILL), then any job step left behind by slurmd.
  for p in "${_SLURM_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${_SLURM_PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  _SLURM_PIDS=()
  if [[ -n $SLURM_BENCH_DIR && -d $SLURM_BENCH_DIR ]]; then
    local sp
    # A job step left running by slurmd: only ours carry our SLURM_CONF in their environment.
    for sp in $(pgrep -f "slurmstepd" 2>/dev/null); do
      if { tr '\0' ' ' <"/proc/$sp/environ"; } 2>/dev/null | grep -q "SLURM_CONF=$SLURM_BENCH_DIR/"; then
        kill -KILL "$sp" 2>/dev/null
      fi
    done
    rm -rf "$SLURM_BENCH_DIR"
  fi
  SLURM_BENCH_DIR=
  unset SLURM_CONF
}

_slurm_check() {
  trap slurm_stop EXIT
  slurm_start "${1:-htc}" || exit 1
  local out=$SLURM_BENCH_DIR/check.out
  local id
  id=$(sbatch --parsable --gres=gpu:1 -o "$out" --wrap 'echo gpus=$CUDA_VISIBLE_DEVICES') || exit 1
  for _ in $(seq 300); do
    [[ -z $(squeue -h -j "$id" 2>/dev/null) && -s $out ]] && break
    sleep 0.1
  done
  if grep -q '^gpus=' "$out" 2>/dev/null; then
    echo "ok: job $id ran with $(cat "$out")"
  else
    echo "FAILED: job $id produced no output"
    tail -n 20 "$SLURM_BENCH_DIR"/log/* >&2
    exit 1
  fi
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -uo pipefail
  case ${1:-} in
    check) _slurm_check "${2:-htc}" ;;
    install) slurm_install ;;
    *)
      echo "usage: $0 check [htc|default] | install   (or source it: see the header)" >&2
      exit 2
      ;;
  esac
fi
