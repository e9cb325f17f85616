// Placement decisions per second on clusters of N nodes x 8 GPUs with a mixed queue:
// whole and fractional GPU tasks, multi-GPU tasks, CPU-only tasks and model constraints.
// Each iteration places one task and applies it; when the cluster is full (or after
// 80% of its GPUs are allocated) it is reset, outside the timed region, so every
// decision is made against a realistically loaded cluster.
// BM_PlaceBand: the same between two fill levels (percent of the GPUs allocated): the
// cluster is first filled to the lower one by `fgd` (untimed, the same state for every
// policy), and reset to that state when the upper one is reached: "empty" (0-5%) against
// "nearly full" (90-95%).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "sched/cluster_state.h"
#include "sched/fragmentation.h"
#include "sched/policy_registry.h"
#include "sched/rng.h"

namespace gpupool::sched {
namespace {

ClusterState MakeCluster(int nodes) {
  ClusterState s;
  const char* models[] = {"A100", "V100", "T4", "G2"};
  for (int i = 0; i < nodes; ++i) {
    (void)s.AddNode({fmt::format("node-{}", i), 96000, 786432, 8, models[i % 4]});
  }
  return s;
}

std::vector<Task> MakeQueue(size_t n) {
  Rng rng(12345);
  std::vector<Task> q;
  const int32_t shares[] = {100, 250, 300, 500, 700, 1000};
  for (size_t i = 0; i < n; ++i) {
    Task t;
    t.name = fmt::format("t{}", i);
    t.cpu_milli = 1000 * static_cast<int64_t>(1 + rng.Uniform(16));
    t.memory_mib = 1024 * static_cast<int64_t>(1 + rng.Uniform(32));
    const uint64_t kind = rng.Uniform(20);
    if (kind < 2) {  // CPU-only
    } else if (kind < 10) {
      t.num_gpu = 1;
      t.gpu_milli = shares[rng.Uniform(5)];
    } else if (kind < 16) {
      t.num_gpu = 1;
      t.gpu_milli = 1000;
    } else {
      t.num_gpu = 1 << (1 + rng.Uniform(3));  // 2, 4 or 8
      t.gpu_milli = 1000;
    }
    if (t.num_gpu > 0 && rng.Uniform(10) == 0) t.gpu_models = {"A100", "V100"};
    q.push_back(std::move(t));
  }
  return q;
}

void BM_Place(benchmark::State& st, const char* policy_name) {
  const int nodes = static_cast<int>(st.range(0));
  const ClusterState empty = MakeCluster(nodes);
  const std::vector<Task> queue = MakeQueue(4096);
  PolicyConfig config;
  config.target_workload = std::make_shared<const TargetWorkload>(TargetWorkload::FromTasks(queue));
  auto policy = BuiltinPlacementPolicies().Create(policy_name, config);
  if (!policy.ok()) {
    st.SkipWithError(policy.status().message().c_str());
    return;
  }
  ClusterState state = empty;
  size_t next = 0;
  int64_t decisions = 0;
  const int64_t fill_limit = empty.TotalCapacity().gpu_milli * 8 / 10;
  for (auto _ : st) {
    const Task& t = queue[next++ % queue.size()];
    PlacementDecision d = (*policy)->Place(state, t);
    if (d.placed) (void)state.Allocate(t, d.placement);
    ++decisions;
    if (!d.placed || state.TotalGpuMilliUsed() > fill_limit) {
      st.PauseTiming();
      state = empty;
      st.ResumeTiming();
    }
  }
  st.counters["decisions_per_s"] =
      benchmark::Counter(static_cast<double>(decisions), benchmark::Counter::kIsRate);
}

// Fills `empty` with the queue's tasks (placed by `fgd`, those that do not fit skipped)
// until `percent` of its GPUs are allocated; `*next`: the queue position after the last
// task looked at.
ClusterState FillTo(const ClusterState& empty, const std::vector<Task>& queue,
                    const PolicyConfig& config, int64_t percent, size_t* next) {
  ClusterState state = empty;
  auto fgd = BuiltinPlacementPolicies().Create("fgd", config);
  const int64_t limit = empty.TotalCapacity().gpu_milli * percent / 100;
  size_t i = 0;
  for (int misses = 0; fgd.ok() && state.TotalGpuMilliUsed() < limit && misses < 1000; ++i) {
    const Task& t = queue[i % queue.size()];
    const PlacementDecision d = (*fgd)->Place(state, t);
    misses = d.placed ? 0 : misses + 1;
    if (d.placed) (void)state.Allocate(t, d.placement);
  }
  *next = i;
  return state;
}

void BM_PlaceBand(benchmark::State& st, const char* policy_name) {
  const int nodes = static_cast<int>(st.range(0));
  const int64_t from = st.range(1), to = st.range(2);
  const ClusterState empty = MakeCluster(nodes);
  const std::vector<Task> queue = MakeQueue(4096);
  PolicyConfig config;
  config.target_workload = std::make_shared<const TargetWorkload>(TargetWorkload::FromTasks(queue));
  auto policy = BuiltinPlacementPolicies().Create(policy_name, config);
  if (!policy.ok()) {
    st.SkipWithError(policy.status().message().c_str());
    return;
  }
  size_t next = 0;  // the band goes on with the tasks after the fill's
  const ClusterState start = FillTo(empty, queue, config, from, &next);
  ClusterState state = start;
  int64_t decisions = 0;
  const int64_t limit = empty.TotalCapacity().gpu_milli * to / 100;
  for (auto _ : st) {
    const Task& t = queue[next++ % queue.size()];
    PlacementDecision d = (*policy)->Place(state, t);
    if (d.placed) (void)state.Allocate(t, d.placement);
    ++decisions;
    if (state.TotalGpuMilliUsed() > limit) {
      st.PauseTiming();
      state = start;
      st.ResumeTiming();
    }
  }
  st.counters["decisions_per_s"] =
      benchmark::Counter(static_cast<double>(decisions), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_Place, fgd, "fgd")
    ->Arg(100)
    ->Arg(1000)
    ->Arg(10000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Place, bestfit, "bestfit")
    ->Arg(100)
    ->Arg(1000)
    ->Arg(10000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Place, ours, "default")
    ->Arg(100)
    ->Arg(1000)
    ->Arg(10000)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_PlaceBand, fgd, "fgd")
    ->Args({10000, 0, 5})
    ->Args({10000, 90, 95})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlaceBand, ours, "default")
    ->Args({10000, 0, 5})
    ->Args({10000, 90, 95})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpupool::sched

BENCHMARK_MAIN();
