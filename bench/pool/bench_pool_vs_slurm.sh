#!/usr/bin/env bash
# gpupool vs Slurm on trivial one-GPU jobs, side by side in one run (see README.md).
#
#   bench/pool/bench_pool_vs_slurm.sh [--jobs 1000] [--idle-jobs 30] [--out FILE]
#       [--gpupool BIN] [--slurm-profile htc|default] [--no-slurm] [--no-gpupool]
#       [--no-array] [--no-cli] [--state-root DIR] [--cpu-breakdown]
#
# Runs, one system at a time and back to back: Slurm (plain sbatch, then one job array),
# then gpupool (REST API over the Unix socket, then `gpupool submit` when that command
# works). Prints the table and writes all raw numbers as JSON to --out. Needs root (Slurm's
# slurmd launches the jobs; gpupool's integration setup runs as root too). --state-root:
# where gpupool's state directory is made (default /tmp; /dev/shm takes the disk out).
# The jobs write their start times under $TMPDIR (default /tmp).
# --cpu-breakdown: the API row's pool and client run in a cgroup v2 directory of their own;
# its burst reports CPU per job and per part (controller, agent, shim, job, client; exact
# totals, split by perf samples) and the machine's per-process floor (spawn_floor.c).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
JOBS=1000
IDLE_JOBS=30
OUT=$PWD/pool_vs_slurm.json
GPUPOOL=""
PROFILE=htc
DO_SLURM=1
DO_GPUPOOL=1
DO_ARRAY=1
DO_CLI=1
CPU_BREAKDOWN=0
CPU_CG=""
NODE_JSON=$HERE/node-8gpu.json
STATE_ROOT=/tmp

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    --jobs) JOBS=$2; shift 2 ;;
    --idle-jobs) IDLE_JOBS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --gpupool) GPUPOOL=$2; shift 2 ;;
    --slurm-profile) PROFILE=$2; shift 2 ;;
    --no-slurm) DO_SLURM=0; shift ;;
    --no-gpupool) DO_GPUPOOL=0; shift ;;
    --no-array) DO_ARRAY=0; shift ;;
    --no-cli) DO_CLI=0; shift ;;
    --state-root) STATE_ROOT=$2; shift 2 ;;
    --cpu-breakdown) CPU_BREAKDOWN=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $OUT == /* ]] || OUT=$PWD/$OUT

if [[ $(id -u) != 0 ]]; then
  echo "run this as root: Slurm's slurmd must launch the jobs as root here" >&2
  exit 1
fi

if ((DO_GPUPOOL)) && [[ -z $GPUPOOL ]]; then
  for c in "$ROOT/build/h-bench/gpupool" "$ROOT/build/release/gpupool" "$(command -v gpupool)"; do
    if [[ -n $c && -x $c ]]; then GPUPOOL=$c; break; fi
  done
  if [[ -z $GPUPOOL ]]; then
    echo "no gpupool binary found: build it (make build) or pass --gpupool PATH" >&2
    exit 1
  fi
fi

# shellcheck source=slurm_setup.sh
source "$HERE/slurm_setup.sh"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gp-poolbench.XXXXXX")
chmod 755 "$WORK"
GP_PID=""
GP_DIR=""

stop_gpupool() {
  if [[ -n $GP_PID ]]; then
    kill -TERM "$GP_PID" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$GP_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$GP_PID" 2>/dev/null
    wait "$GP_PID" 2>/dev/null
    GP_PID=""
  fi
  if [[ -n $GP_DIR ]]; then
    # Job shims left behind by a killed agent (matched by our own state dir only).
    local p
    for p in $(pgrep -f "agent-shim --job-dir $GP_DIR" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$GP_DIR"
    GP_DIR=""
  fi
}

# Measurements run in the background and are waited for, so that a TERM/INT to this script
# is handled at once (bash defers traps while a foreground child runs).
CHILD=""
measure() {
  python3 "$HERE/pool_vs_slurm.py" measure "$@" &
  CHILD=$!
  wait "$CHILD"
  local rc=$?
  CHILD=""
  return $rc
}

cleanup() {
  if [[ -n $CHILD ]]; then kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null; fi
  stop_gpupool
  slurm_stop
  if [[ -n $CPU_CG ]]; then rmdir "$CPU_CG" 2>/dev/null; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

RESULTS=()
echo "== $(date -u +%FT%TZ) on $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

if ((DO_SLURM)); then
  if slurm_start "$PROFILE"; then
    mkdir -p "$WORK/slurm"
    if measure --system slurm --work "$WORK/slurm" \
      --jobs "$JOBS" --idle-jobs "$IDLE_JOBS" --out "$WORK/slurm.json"; then
      RESULTS+=("$WORK/slurm.json")
    else
      echo "Slurm measurement failed; Slurm logs:" >&2
      tail -n 20 "$SLURM_BENCH_DIR"/log/*.log >&2
    fi
    if ((DO_ARRAY)); then
      mkdir -p "$WORK/slurm-array"
      measure --system slurm-array --work "$WORK/slurm-array" \
        --jobs "$JOBS" --idle-jobs 0 --out "$WORK/slurm-array.json" &&
        RESULTS+=("$WORK/slurm-array.json")
    fi
  else
    echo "Slurm did not start; its side is left out" >&2
  fi
  slurm_stop
fi

# The cgroup v2 hierarchy's mount (a hybrid host has it at /sys/fs/cgroup/unified).
cgroup2_root() {
  local d
  for d in /sys/fs/cgroup /sys/fs/cgroup/unified; do
    if [[ $(stat -f -c %T "$d" 2>/dev/null) == cgroup2fs ]]; then echo "$d"; return 0; fi
  done
  return 1
}

# start_gpupool [CGROUP]: a fresh pool, in CGROUP (cgroup v2 directory) when given.
start_gpupool() {
  local cg=${1:-}
  GP_DIR=$(mktemp -d "$STATE_ROOT/gp-poolbench-state.XXXXXX")
  chmod 755 "$GP_DIR"
  (
    if [[ -n $cg ]]; then echo "$BASHPID" >"$cg/cgroup.procs" || exit 1; fi
    exec "$GPUPOOL" up --fake "$NODE_JSON" --state-dir "$GP_DIR" --port 0
  ) >"$GP_DIR/server.log" 2>&1 &
  GP_PID=$!
  for _ in $(seq 400); do
    if ! kill -0 "$GP_PID" 2>/dev/null; then
      echo "gpupool up exited; its log:" >&2
      tail -n 30 "$GP_DIR/server.log" >&2
      return 1
    fi
    if [[ -S $GP_DIR/gpupool.sock ]] && python3 - "$GP_DIR/gpupool.sock" <<'EOF'; then
import http.client, json, socket, sys
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(sys.argv[1])
c = C("localhost", timeout=5)
c.request("GET", "/v1/nodes")
r = c.getresponse()
body = json.loads(r.read())
ok = r.status == 200 and any(n.get("state") == "up" and len(n.get("gpus", [])) == 8
                             for n in body.get("nodes", []))
sys.exit(0 if ok else 1)
EOF
      return 0
    fi
    sleep 0.05
  done
  echo "gpupool up did not report an 8-GPU node within 20 s; its log:" >&2
  tail -n 30 "$GP_DIR/server.log" >&2
  return 1
}

if ((DO_GPUPOOL)); then
  # A fresh pool for each row so neither sees the other's job history.
  CPU_ARGS=()
  if ((CPU_BREAKDOWN)); then
    if CG2=$(cgroup2_root); then
      CPU_CG=$CG2/gp-poolbench-$$
      mkdir -p "$CPU_CG"
    else
      echo "--cpu-breakdown needs a cgroup v2 hierarchy (none found); left out" >&2
    fi
  fi
  if start_gpupool "$CPU_CG"; then
    mkdir -p "$WORK/gpupool-api"
    [[ -n $CPU_CG ]] && CPU_ARGS=(--cpu-cgroup "$CPU_CG" --pool-pid "$GP_PID")
    measure --system gpupool-api --work "$WORK/gpupool-api" \
      --sock "$GP_DIR/gpupool.sock" --jobs "$JOBS" --idle-jobs "$IDLE_JOBS" \
      "${CPU_ARGS[@]}" --out "$WORK/gpupool-api.json" && RESULTS+=("$WORK/gpupool-api.json")
  fi
  stop_gpupool
  if ((DO_CLI)); then
    # (An older binary prints the top-level help for `submit --help` and exits 0.)
    # (Not grep -q: its early exit would SIGPIPE gpupool, and pipefail then says no.)
    if "$GPUPOOL" submit --help 2>&1 | grep -- '--gpus' >/dev/null; then
      if start_gpupool; then
        mkdir -p "$WORK/gpupool-cli"
        measure --system gpupool-cli --work "$WORK/gpupool-cli" \
          --sock "$GP_DIR/gpupool.sock" --gpupool "$GPUPOOL" --jobs "$JOBS" \
          --idle-jobs "$IDLE_JOBS" --out "$WORK/gpupool-cli.json" &&
          RESULTS+=("$WORK/gpupool-cli.json")
      fi
      stop_gpupool
    else
      echo "this gpupool has no working 'submit' command: the CLI row is left out" >&2
    fi
  fi
fi

# The machine's per-process floor: posix_spawn + wait of a trivial program, of the job's
# own command, and of the shim's start-and-exit (it refuses a missing job directory).
if ((CPU_BREAKDOWN)) && command -v cc >/dev/null; then
  if cc -O2 -o "$WORK/spawn_floor" "$HERE/spawn_floor.c"; then
    mkdir -p "$WORK/floor"
    {
      echo '{"system": "floor", "floor": ['
      "$WORK/spawn_floor" 500 /bin/true
      echo ','
      "$WORK/spawn_floor" 500 sh -c "date +%s.%N > $WORK/floor/start"
      SHIM=$(dirname "$GPUPOOL")/gpupool-agent-shim
      if [[ -x $SHIM ]]; then
        echo ','
        "$WORK/spawn_floor" -a 500 "$SHIM" --job-dir "$WORK/floor/none"
      fi
      echo ']}'
    } >"$WORK/floor.json" && RESULTS+=("$WORK/floor.json")
  fi
fi

if ((${#RESULTS[@]} == 0)); then
  echo "nothing was measured" >&2
  exit 1
fi
echo >&2
python3 "$HERE/pool_vs_slurm.py" report --out "$OUT" "${RESULTS[@]}"
echo "raw numbers: $OUT" >&2
