#!/usr/bin/env bash
# Placement quality on MIG layouts, two binaries side by side (issue 28 item 1): the layouts
# of mig_saturation.sh, policies default and fgd (or $POLICIES), seeds 42-51, run with OLD and NEW.
# Usage: [POLICIES="default fgd"] bench/sim/mig_compare.sh OLD_GPUPOOL NEW_GPUPOOL [PODS_NAME] [N_G2_NODES]
# Prints one table row per layout and policy: unallocated @100% arrived (mean of the seeds,
# min-max), asked at the end, failed (whole / shares), old then new. $OUT: JSON summaries.
set -euo pipefail
OLD=$(realpath "${1:?usage: mig_compare.sh OLD_GPUPOOL NEW_GPUPOOL [PODS_NAME] [N]}")
NEW=$(realpath "${2:?usage: mig_compare.sh OLD_GPUPOOL NEW_GPUPOOL [PODS_NAME] [N]}")
PODS=${3:-openb_pod_list_default}
N=${4:-194}
source "$(dirname "$0")/mig_layouts.sh"
OUT=${OUT:-/tmp/mig_compare}
mkdir -p "$OUT"
for L in "${MIG_LAYOUTS[@]}"; do
  nodes=$OUT/nodes_${L//+/_}.csv
  mig_nodes "$L" "$N" "$nodes"
  for p in ${POLICIES:-default fgd}; do
    for b in old new; do
      bin=$OLD
      [[ $b == new ]] && bin=$NEW
      "$bin" sim saturation --nodes "$nodes" --pods "$T/$PODS.csv" --policy $p --seeds 42-51 \
        --jobs 2 --json > "$OUT/${PODS}_${L//+/_}_${p}_$b.json"
    done
    python3 - "$OUT/${PODS}_${L//+/_}_${p}_old.json" "$OUT/${PODS}_${L//+/_}_${p}_new.json" \
      "$L" "$p" <<'PY'
import json, sys
def summary(path):
    r = json.load(open(path))["runs"]
    u = [x["unallocated_gpu_pct_at_100"] for x in r]
    m = lambda k: sum(x[k] for x in r) / len(r)
    return (f"{sum(u) / len(u):.2f} ({min(u):.2f}-{max(u):.2f})", f"{m('asked_gpu_pct_at_end'):.2f}",
            f"{m('failed'):,.0f} ({m('failed_whole_gpu'):,.0f} / {m('failed_shares'):,.0f})")
o, n = summary(sys.argv[1]), summary(sys.argv[2])
print(f"| {sys.argv[3]} | {sys.argv[4]} | {o[0]} | {n[0]} | {o[1]} | {n[1]} | {o[2]} | {n[2]} |")
PY
  done
done
