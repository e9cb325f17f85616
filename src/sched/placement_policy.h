// PlacementPolicy: decides which node and which GPUs a task gets.
//
// A policy is a pure function of (ClusterState, Task) plus its own configuration: it
// never changes the state (the caller applies the Placement with
// ClusterState::Allocate) and does no I/O. Policies may keep caches keyed by node
// version and task shape, and Random keeps a seeded generator, so one instance must
// not be used from two threads at once; create one per thread (they are cheap).
//
// Policies are created by name from the PlacementPolicyRegistry (policy_registry.h).
// Among equally good nodes a policy picks the first in ClusterState::scan_order().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/task.h"

namespace gpupool::sched {

class TargetWorkload;  // fragmentation.h

// What a policy may be configured with. All fields have usable defaults.
struct PolicyConfig {
  uint64_t seed = 1;  // for policies that draw random numbers
  // The task mix that fragmentation-aware policies plan for (FGD's "target workload").
  // Null: they derive one from the tasks seen so far (see fragmentation.h).
  std::shared_ptr<const TargetWorkload> target_workload;
};

// The outcome of one placement decision.
struct PlacementDecision {
  bool placed = false;
  Placement placement;  // valid when placed
  std::string reason;   // why not, when !placed ("no node has 2 idle GPUs of model V100")
  int64_t score = 0;    // the winning node's score, for logs and tests
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string_view name() const = 0;
  // Chooses a node and GPUs for `task`. `task` must satisfy ValidateTask.
  virtual PlacementDecision Place(const ClusterState& state, const Task& task) = 0;
};

}  // namespace gpupool::sched
