// The scheduling framework, after the Kubernetes scheduler framework.
//
// One placement cycle for one task runs plugins at named extension points:
//   Filter (can the node host the task now?) -> PreScore / Score (+ NormalizeScore) (how
//   good is each feasible node, and which GPUs inside it). The caller applies the winner
//   with ClusterState::Allocate. The order of pending jobs is a queue policy's
//   (queue/queue_policy.h).
// Admission before the cycle (gates such as holds and quotas, and filters with pass-level
// steps such as drains) and the explanation of why a job waits are in admission/.
// Scores are integers in [kMinNodeScore, kMaxNodeScore]; the highest wins and ties go
// to the first feasible node in ClusterState::scan_order(). Unlike Kubernetes, a Score
// plugin also returns the GPUs it would use on that node, because for GPU-sharing
// policies (FGD) the score *is* a function of the GPU choice; computing it twice would
// double the cost of a cycle.
//
// Plugins are single-threaded like policies (they may cache per node version).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/node_index.h"
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

class FilterPlugin : public Plugin {
 public:
  // True when node `node` can host `task` now. On false, `reason` (if not null) says why
  // in a few words that read after a count ("2 insufficient GPUs"): the explain step
  // (admission/explain.h) adds up the nodes by reason, Kubernetes PostFilter style.
  virtual bool Filter(const ClusterState& state, const Task& task, int32_t node,
                      std::string* reason) const = 0;
  // Whether explanations name the nodes this filter refuses (drained nodes, which
  // people chose); otherwise they are only counted.
  virtual bool NamesNodes() const { return false; }
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
  // Indexing (node_index.h). A plugin may return true and fill `key` (cpu_milli,
  // memory_mib, num_gpu, gpu_milli, owner, gpu_memory_mib; the other fields left empty)
  // when
  //   - its Score for a node depends only on that node's state (it is the same while the
  //     node's version is) and on the task's key: on every node where the task passes the
  //     filters, Score(task) equals Score(the key as a task);
  //   - PreScore does not use its `feasible` argument, and the key as a task gets the
  //     same PreScore as the task;
  //   - NormalizeScores does nothing.
  // FrameworkPolicy then keeps each key's scores (of the key as a task) in an index
  // updated from the cluster's change journal and scores only the nodes that changed;
  // the decisions are the same as without it.
  virtual bool IndexKey(const ClusterState& /*state*/, const Task& /*task*/,
                        TaskShape* /*key*/) const {
    return false;
  }
  // Lazy indexing, for a plugin whose Score reads more of the task than a key (FGD's
  // strand term reads its memory) but which keeps its results per (key, node, node
  // version). For a task whose IndexKey is false (and a key no IndexKey gives), a plugin
  // may return true here and fill `key` as for IndexKey when
  //   - Score for a task of this key on a node at a version where Score was called for a
  //     task of this key before returns that call's result and changes nothing a later
  //     call reads (only a first call per (key, node, version) computes);
  //   - it forgets a result only when the node's version changes or the cluster's journal
  //     is another (a copy, nodes added, a new scan order);
  //   - every node that passes the filters for the task can host the key as a task;
  //   - PreScore does not use its `feasible` argument; NormalizeScores does nothing.
  // FrameworkPolicy then keeps each key's scores in an index whose changed nodes are
  // pending (node_index.h) and, in each cycle, scores the pending nodes that pass the
  // filters, with the task, in scan order: the first calls are the full scan's, made in
  // the same order (the calls that only read a kept result are left out), so the plugin's
  // results, its caches and the decisions are the same as with the full scan.
  virtual bool CachedScoreKey(const ClusterState& /*state*/, const Task& /*task*/,
                              TaskShape* /*key*/) const {
    return false;
  }
};

// The built-in filter: CPU, memory, GPU model and capability, and num_gpu GPUs with a
// free share >= gpu_milli (ClusterState::Fits; reasons from ClusterState::WhyNotFit).
class FitFilter final : public FilterPlugin {
 public:
  std::string_view name() const override { return "fit"; }
  bool Filter(const ClusterState& state, const Task& task, int32_t node,
              std::string* reason) const override;
};

// A placement policy made of filter plugins and one score plugin (a "profile").
class FrameworkPolicy final : public PlacementPolicy {
 public:
  FrameworkPolicy(std::string name, std::vector<std::unique_ptr<FilterPlugin>> filters,
                  std::unique_ptr<ScorePlugin> score);
  std::string_view name() const override { return name_; }
  PlacementDecision Place(const ClusterState& state, const Task& task) override;
  // Tests: place every task by the full scan, as without an indexable score plugin.
  void DisableIndexForTest() { use_index_ = false; }
  // How many task keys have an index (0 when the score plugin is not indexable, neither
  // by IndexKey nor by CachedScoreKey).
  size_t indexed_keys() const { return indexes_.count(); }

 private:
  PlacementDecision PlaceByScan(const ClusterState& state, const Task& task);
  PlacementDecision PlaceIndexed(const ClusterState& state, const Task& task, const TaskShape& key,
                                 bool lazy);
  void SyncIndex(const ClusterState& state, const TaskShape& key, bool lazy, ScoreIndex& index);
  void ScorePending(const ClusterState& state, const Task& task, ScoreIndex& index);
  int32_t PickBest(const ClusterState& state, const Task& task, ScoreIndex& index);
  int64_t IndexValue(const ClusterState& state, int32_t node);
  bool PassesFilters(const ClusterState& state, const Task& task, int32_t node) const;
  void SyncPositions(const ClusterState& state);
  void SyncGpuFree(const ClusterState& state);
  int32_t ScanBest(const ClusterState& state, const Task& task, const ScoreIndex& index) const;
  static std::string NoFitReason(const ClusterState& state, const Task& task);

  std::string name_;
  std::vector<std::unique_ptr<FilterPlugin>> filters_;
  std::unique_ptr<ScorePlugin> score_;
  std::vector<int32_t> feasible_;  // reused between cycles
  std::vector<NodeScore> scores_;
  bool use_index_ = true;
  ScoreIndexSet indexes_{size_t{128} << 20};  // 128 MiB; ~300 KB per key at 10,000 nodes
  Task shape_task_;                           // scratch: the index key as a task
  std::vector<int32_t> position_of_;          // scan position of each node index
  // By scan position, a bit per node with some GPU not wholly taken (gpu_free_total > 0),
  // kept in step with the cluster's journal: a task that needs a GPU fits nowhere else,
  // so the full scan for one looks at these nodes only (on a full pool, a few), in scan
  // order, and finds the same feasible nodes.
  std::vector<uint64_t> gpu_free_bits_;
  uint64_t gpu_free_journal_ = 0;
  uint64_t gpu_free_synced_ = 0;
  uint64_t positions_journal_ = 0;                     // the journal id position_of_ was made for
  std::vector<std::pair<int32_t, int64_t>> excluded_;  // scratch: refused candidates
};

}  // namespace gpupool::sched
