// The scheduling framework, after the Kubernetes scheduler framework.
//
// One scheduling cycle for one task runs plugins at named extension points:
//   QueueSort (order of pending tasks) -> Filter (can the node host the task now?) ->
//   PreScore / Score (+ NormalizeScore) (how good is each feasible node, and which GPUs
//   inside it) -> Reserve (apply to ClusterState; Unreserve undoes) -> Bind (tell the
//   world; a failed bind unreserves).
// Plugins are registered by name in a PluginRegistry that refuses duplicates.
// Scores are integers in [kMinNodeScore, kMaxNodeScore]; the highest wins and ties go
// to the first feasible node in ClusterState::scan_order(). Unlike Kubernetes, a Score
// plugin also returns the GPUs it would use on that node, because for GPU-sharing
// policies (FGD) the score *is* a function of the GPU choice; computing it twice would
// double the cost of a cycle.
//
// Plugins are single-threaded like policies (they may cache per node version).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/placement_policy.h"
#include "sched/task.h"

namespace gpupool::sched {

inline constexpr int64_t kMinNodeScore = 0;
inline constexpr int64_t kMaxNodeScore = 100;

// GPUs of one node chosen for a task, as a bit set (bit i = GPU i). Nodes have at most
// kMaxGpusPerNode GPUs (ClusterState::AddNode enforces it).
using GpuMask = uint64_t;
std::vector<int32_t> GpuMaskToList(GpuMask mask);

class Plugin {
 public:
  virtual ~Plugin() = default;
  virtual std::string_view name() const = 0;
};

class QueueSortPlugin : public Plugin {
 public:
  // Strict weak order: true when `a` should be scheduled before `b`.
  virtual bool Less(const Task& a, const Task& b) const = 0;
};

class FilterPlugin : public Plugin {
 public:
  // True when node `node` can host `task` now. On false, `reason` (if not null) says why.
  virtual bool Filter(const ClusterState& state, const Task& task, int32_t node,
                      std::string* reason) const = 0;
};

struct NodeScore {
  int32_t node = -1;
  int64_t score = 0;
  GpuMask gpus = 0;
};

class ScorePlugin : public Plugin {
 public:
  // Called once per cycle with the feasible nodes in scan order.
  virtual void PreScore(const ClusterState& /*state*/, const Task& /*task*/,
                        const std::vector<int32_t>& /*feasible*/) {}
  // Scores a feasible node and picks the GPUs the task would use there.
  virtual NodeScore Score(const ClusterState& state, const Task& task, int32_t node) = 0;
  // Optional NormalizeScore extension, applied to all scores of the cycle.
  virtual void NormalizeScores(std::vector<NodeScore>& /*scores*/) {}
};

class ReservePlugin : public Plugin {
 public:
  virtual Status Reserve(ClusterState& state, const Task& task, const Placement& placement) = 0;
  // Undoes Reserve; must be idempotent-safe for a placement that was reserved.
  virtual void Unreserve(ClusterState& state, const Task& task, const Placement& placement) = 0;
};

class BindPlugin : public Plugin {
 public:
  virtual Status Bind(const Task& task, const Placement& placement, const ClusterState& state) = 0;
};

// Plugins by name; Register refuses a name twice.
class PluginRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Plugin>(const PolicyConfig&)>;
  Status Register(std::string name, Factory factory);
  Result<std::unique_ptr<Plugin>> Create(std::string_view name, const PolicyConfig& config) const;
  bool Contains(std::string_view name) const { return factories_.count(std::string(name)) != 0; }

 private:
  std::map<std::string, Factory, std::less<>> factories_;
};

// The built-in filter: CPU, memory, GPU model and capability, and num_gpu GPUs with a
// free share >= gpu_milli.
class FitFilter final : public FilterPlugin {
 public:
  std::string_view name() const override { return "fit"; }
  bool Filter(const ClusterState& state, const Task& task, int32_t node,
              std::string* reason) const override;
};

// The built-in reserve: ClusterState::Allocate / Release.
class StateReserve final : public ReservePlugin {
 public:
  std::string_view name() const override { return "state"; }
  Status Reserve(ClusterState& state, const Task& task, const Placement& placement) override;
  void Unreserve(ClusterState& state, const Task& task, const Placement& placement) override;
};

// A placement policy made of filter plugins and one score plugin (a "profile").
class FrameworkPolicy final : public PlacementPolicy {
 public:
  FrameworkPolicy(std::string name, std::vector<std::unique_ptr<FilterPlugin>> filters,
                  std::unique_ptr<ScorePlugin> score);
  std::string_view name() const override { return name_; }
  PlacementDecision Place(const ClusterState& state, const Task& task) override;

 private:
  std::string name_;
  std::vector<std::unique_ptr<FilterPlugin>> filters_;
  std::unique_ptr<ScorePlugin> score_;
  std::vector<int32_t> feasible_;  // reused between cycles
  std::vector<NodeScore> scores_;
};

// One full cycle: place with `policy`, reserve, bind (unreserve when bind fails).
// Returns the decision; `placed` is false when no node fits or reserve/bind failed
// (reason says which).
PlacementDecision ScheduleOne(PlacementPolicy& policy, ReservePlugin& reserve, BindPlugin* bind,
                              ClusterState& state, const Task& task);

}  // namespace gpupool::sched
