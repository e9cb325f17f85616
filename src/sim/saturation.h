// The FGD saturation experiment (see /work/shared/docs/fgd-experiment.md, docs/sim.md).
//
// One run, for a seed s: sort the trace's tasks by name, shuffle them with a generator
// seeded with s, "tune" the workload up to `tune` x the cluster's GPU capacity by
// appending uniformly drawn copies, give the nodes (sorted by name) a random scan order
// from the same generator, then let the tasks arrive one by one with no departures.
// A task that fits nowhere fails and is skipped for good. After every arrival the
// allocation and fragmentation are recorded into curves (curves.h).
//
// Deterministic: the same inputs and seed give the same result on every machine; no
// clock is read. Runs share only immutable inputs, so several may run on threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/fragmentation.h"
#include "sched/policy_registry.h"
#include "sched/task.h"
#include "sim/curves.h"

namespace gpupool::sim {

// Inputs shared by every run of one workload (immutable once built).
struct SaturationInputs {
  std::vector<sched::NodeSpec> nodes;                   // GPU nodes; sorted by name by Prepare
  std::vector<sched::Task> tasks;                       // the trace; sorted by name by Prepare
  std::shared_ptr<const sched::TargetWorkload> target;  // from the whole trace
  int64_t capacity_gpu_milli = 0;
  int64_t trace_gpu_milli = 0;

  // Sorts, builds the target workload and checks there is GPU capacity.
  static Result<SaturationInputs> Prepare(std::vector<sched::NodeSpec> nodes,
                                          std::vector<sched::Task> tasks);
};

struct SaturationRun {
  std::string policy;
  uint64_t seed = 42;
  double tune = 1.3;
  std::atomic<int64_t>* progress = nullptr;  // incremented once per arrival, if set
};

struct SaturationResult {
  std::string policy;
  uint64_t seed = 0;
  int64_t tasks = 0;  // after tuning
  int64_t placed = 0;
  int64_t failed = 0;           // including never_placeable
  int64_t never_placeable = 0;  // tasks no node could host even when idle
  int64_t failed_shares = 0;    // of the failed: tasks asking for part of one GPU
  int64_t failed_whole = 0;     // of the failed: tasks asking for whole GPUs
  int64_t workload_gpu_milli = 0;
  int64_t used_gpu_milli = 0;  // at the end, in thousandths of physical GPUs (MIG
                               // instances by their memory's part of the GPU)
  int64_t capacity_gpu_milli = 0;
  int64_t placed_gpu_milli = 0;  // what the placed tasks asked for (<= used on MIG GPUs)
  CurveAccumulator::Curves curves;
  double UnallocatedAt100() const { return 100.0 - curves.alloc[100]; }
  double AllocatedPctAtEnd() const {
    return capacity_gpu_milli == 0 ? 0.0
                                   : 100.0 * static_cast<double>(used_gpu_milli) /
                                         static_cast<double>(capacity_gpu_milli);
  }
};

// The task order and node scan order of one run (exposed for tests).
struct SaturationWorkload {
  std::vector<const sched::Task*> order;
  std::vector<int32_t> node_order;
};
SaturationWorkload BuildWorkload(const SaturationInputs& in, uint64_t seed, double tune);

Result<SaturationResult> RunSaturation(
    const SaturationInputs& in, const SaturationRun& run,
    const sched::PlacementPolicyRegistry& registry = sched::BuiltinPlacementPolicies());

// Published policy label ("06-FGD") for a policy name; "07-<name>" for ours.
std::string PublishedPolicyLabel(const std::string& policy);

}  // namespace gpupool::sim
