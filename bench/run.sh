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

echo
echo "== pool: 1,000 trivial one-GPU jobs vs Slurm, then API latency under load =="
# Both start `gpupool up` (jobs run as the submitting user, cgroups need root) and the
# Slurm half configures slurmctld/slurmd/munge on loopback: root only.
if [[ $(id -u) -ne 0 ]]; then
  echo "bench: the pool benchmarks need root (sudo make bench); skipped"
else
  slurm_flag=()
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "bench: Slurm is not installed: gpupool alone (bench/pool/bench_pool_vs_slurm.sh without --no-slurm installs slurm-wlm and munge)"
    slurm_flag=(--no-slurm)
  fi
  bash "$root/bench/pool/bench_pool_vs_slurm.sh" --jobs 1000 --gpupool "$build/gpupool" \
    "${slurm_flag[@]}" --out "$build/pool_vs_slurm.json"
  python3 "$root/bench/pool/api_latency.py" --gpupool "$build/gpupool" \
    --out "$build/api_latency.json"
fi
