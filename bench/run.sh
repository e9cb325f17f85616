#!/usr/bin/env bash
# `make bench`: the Google Benchmark cases, then the published FGD campaign comparison.
# Uses the release build (build/release) unless BUILD_DIR is set.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build/release}"

if [[ -x "$build/bench/placement_bench" ]]; then
  echo "== placement decisions per second (Google Benchmark) =="
  "$build/bench/placement_bench" --benchmark_counters_tabular=true
else
  echo "bench: $build/bench/placement_bench is not built (needs libbenchmark-dev); skipped"
fi

echo
echo "== FGD saturation campaign vs published results =="
python3 "$root/bench/campaign.py" --gpupool "$build/gpupool" --out "$build/campaign"
