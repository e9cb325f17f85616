# shellcheck shell=bash
# Sourced by mig_saturation.sh and mig_compare.sh: the openb traces and the MIG layouts
# they run. Sets T (the openb traces; TRACES overrides ../shared/traces) and MIG_LAYOUTS,
# or exits 0 with a note where the traces are absent. `mig_nodes L N CSV` writes to CSV
# the openb GPU node list with a 'mig' column: the first N G2 nodes (8 GPUs each) cut
# into layout L, the rest (all with L = none) unchanged.
T=${TRACES:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/../shared/traces}/openb
if [[ ! -f $T/openb_node_list_gpu_node.csv ]]; then
  echo "skipped: $T/openb_node_list_gpu_node.csv is absent (the openb traces live in ../shared/traces)"
  exit 0
fi
# shellcheck disable=SC2034  # read by the scripts that source this
MIG_LAYOUTS=(none 3g.40gb+2g.20gb+1g.10gb+1g.10gb 4g.40gb+3g.40gb 7g.80gb
             1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb)
mig_nodes() {
  awk -F, -v L="$1" -v N="$2" 'NR==1{print $0",mig"; next}
    {m=""; if (L!="none" && $5=="G2" && g2++<N) m=L; print $0","m}' \
    "$T/openb_node_list_gpu_node.csv" > "$3"
}
