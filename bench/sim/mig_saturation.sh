#!/usr/bin/env bash
# Placement quality on MIG layouts (issue 28 item 1): the FGD saturation experiment on the
# openb GPU nodes as they are, and with the first N G2 nodes (8 GPUs each; 194 = a quarter
# of the cluster's GPUs by default) cut into a MIG layout, the rest unchanged.
# Usage: [POLICIES="default fgd"] bench/sim/mig_saturation.sh GPUPOOL [PODS_NAME] [N_G2_NODES]
# Writes one JSON summary per layout and policy into $OUT (default /tmp/mig_saturation) and
# prints the table rows of docs/benchmarks.md. TRACES overrides ../shared/traces
# (mig_layouts.sh: the traces, the layouts and the node lists).
set -euo pipefail
GPUPOOL=${1:?usage: mig_saturation.sh GPUPOOL [PODS_NAME] [N_G2_NODES]}
PODS=${2:-openb_pod_list_default}
N=${3:-194}
source "$(dirname "$0")/mig_layouts.sh"
OUT=${OUT:-/tmp/mig_saturation}
mkdir -p "$OUT"
for L in "${MIG_LAYOUTS[@]}"; do
  nodes=$OUT/nodes_${L//+/_}.csv
  mig_nodes "$L" "$N" "$nodes"
  for p in ${POLICIES:-default fgd}; do
    "$GPUPOOL" sim saturation --nodes "$nodes" --pods "$T/$PODS.csv" --policy $p \
      --seeds 42-51 --json > "$OUT/${PODS}_${L//+/_}_$p.json"
    python3 - "$OUT/${PODS}_${L//+/_}_$p.json" "$L" "$p" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); r = d["runs"]; n = len(r)
m = lambda k: sum(x[k] for x in r) / n
print(f"| {sys.argv[2]} | {sys.argv[3]} | {d['total_gpus']:,} | {m('unallocated_gpu_pct_at_100'):.2f} "
      f"| {m('frag_pct_at_100'):.2f} | {m('allocated_gpu_pct_at_end'):.2f} | {m('asked_gpu_pct_at_end'):.2f} | {m('tasks'):,.0f} "
      f"| {m('failed'):,.0f} ({m('failed_whole_gpu'):,.0f} whole / {m('failed_shares'):,.0f} shares) "
      f"| {m('never_placeable'):,.0f} |")
PY
  done
done
