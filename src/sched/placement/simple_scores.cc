// Random, BestFit, DotProduct, GpuPacking and GpuClustering: the baseline policies of
// the FGD paper, scored as in its artifact (see docs/sim.md for the formulas).
#include <algorithm>
#include <cmath>

#include "sched/placement/score_plugins.h"
#include "sched/rng.h"

namespace gpupool::sched {
namespace {

// Random: one uniformly random feasible node gets the top score; a fractional task
// gets a uniformly random fitting GPU.
class RandomScore final : public ScorePlugin {
 public:
  explicit RandomScore(uint64_t seed) : rng_(seed) {}
  std::string_view name() const override { return "random"; }
  void PreScore(const ClusterState&, const Task&, const std::vector<int32_t>& feasible) override {
    chosen_ = feasible[static_cast<size_t>(rng_.Uniform(feasible.size()))];
  }
  NodeScore Score(const ClusterState& state, const Task& task, int32_t node) override {
    if (node != chosen_) return {node, kMinNodeScore, 0};
    const NodeState& n = state.node(node);
    GpuMask gpus = 0;
    if (task.IsFractional()) {
      uint64_t seen = 0;
      const uint64_t held = state.Blocked(node, task);
      for (int32_t i = 0; i < n.num_gpus(); ++i) {
        if (n.gpu_free_milli[static_cast<size_t>(i)] >= task.gpu_milli && (held >> i & 1) == 0 &&
            rng_.Uniform(++seen) == 0) {
          gpus = GpuMask{1} << i;
        }
      }
    } else {
      gpus = FirstIdleGpus(n, task.num_gpu);
    }
    return {node, kMaxNodeScore, gpus};
  }

 private:
  Rng rng_;
  int32_t chosen_ = -1;
};

// BestFit: 100 * (1 - [0.5 (cpu_left - cpu_req)/maxcpu + 0.5 (gpu_left - gpu_req)/maxgpu]),
// truncated, then min-max normalised; GPUs best-fit.
class BestFitScore final : public ScorePlugin {
 public:
  std::string_view name() const override { return "bestfit"; }
  NodeScore Score(const ClusterState& state, const Task& task, int32_t node) override {
    const NodeState& n = state.node(node);
    const GpuMask gpus = BestFitGpus(state, node, task);
    const GpuRoom room = GpuRoomOf(n, task, gpus);
    const double s =
        0.5 * static_cast<double>(n.cpu_free_milli - task.cpu_milli) / kMaxSpecCpuMilli +
        0.5 * static_cast<double>(room.free - room.take) / kMaxSpecGpuMilli;
    return {node, static_cast<int64_t>((1.0 - s) * static_cast<double>(kMaxNodeScore)), gpus};
  }
  void NormalizeScores(std::vector<NodeScore>& scores) override { MinMaxNormalize(scores); }
};

// DotProduct (Tetris-style, as run in the artifact: merged GPU dimension, normalised by
// the largest node): score = 100 * (1 - <free, request> / 2), so the node whose free
// vector is least aligned with the request (the tightest) wins. GPUs best-fit.
class DotProductScore final : public ScorePlugin {
 public:
  std::string_view name() const override { return "dotprod"; }
  NodeScore Score(const ClusterState& state, const Task& task, int32_t node) override {
    const NodeState& n = state.node(node);
    const GpuMask gpus = BestFitGpus(state, node, task);
    const GpuRoom room = GpuRoomOf(n, task, gpus);
    const double dot = (static_cast<double>(n.cpu_free_milli) / kMaxSpecCpuMilli) *
                           (static_cast<double>(task.cpu_milli) / kMaxSpecCpuMilli) +
                       (static_cast<double>(room.free) / kMaxSpecGpuMilli) *
                           (static_cast<double>(room.take) / kMaxSpecGpuMilli);
    const double s = 1.0 - dot / 2.0;
    return {node, static_cast<int64_t>(static_cast<double>(kMaxNodeScore) * s), gpus};
  }
};

// GpuPacking: partly used GPUs first (less free on the used GPUs is better), then idle
// GPUs on a used node (fewer idle GPUs used is better), then idle nodes. GPUs best-fit.
class GpuPackingScore final : public ScorePlugin {
 public:
  std::string_view name() const override { return "gpupacking"; }
  NodeScore Score(const ClusterState& state, const Task& task, int32_t node) override {
    const NodeState& n = state.node(node);
    const GpuMask gpus = BestFitGpus(state, node, task);
    if (task.num_gpu == 0) return {node, kMinNodeScore, 0};
    // A MIG instance is a piece already cut, which a share fills whole: the tightest fit.
    if (IsInstance(n, gpus)) [[unlikely]] {
      return {node, kMaxNodeScore, gpus};
    }
    const int32_t idle = n.FullyFreeGpus();
    if (idle == n.num_gpus()) {
      return {node, std::max<int64_t>(kMaxNodeScore / 3 - idle, idle), gpus};
    }
    // Walk GPUs by increasing free share, as the artifact does, to count idle ones used.
    std::vector<int32_t> order(static_cast<size_t>(n.num_gpus()));
    for (int32_t i = 0; i < n.num_gpus(); ++i) order[static_cast<size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&n](int32_t a, int32_t b) {
      return n.gpu_free_milli[static_cast<size_t>(a)] < n.gpu_free_milli[static_cast<size_t>(b)];
    });
    int32_t need = task.num_gpu, idle_used = 0;
    int64_t free_pct_sum = 0;
    const uint64_t held = state.Blocked(node, task);
    for (int32_t i : order) {
      if (need == 0) break;
      const int32_t f = n.gpu_free_milli[static_cast<size_t>(i)];
      if (f >= task.gpu_milli && (held >> i & 1) == 0) {
        --need;
        idle_used += (f == 1000);
        free_pct_sum += int64_t{f} * 100 / 1000;
      }
    }
    if (idle_used > 0) {
      return {node, std::max<int64_t>(kMaxNodeScore / 2 - idle_used, kMaxNodeScore / 3), gpus};
    }
    return {node, std::max<int64_t>(kMaxNodeScore - free_pct_sum / 10, kMaxNodeScore / 2), gpus};
  }
};

// GpuClustering: nodes already running only tasks of the same GPU request kind (75..100),
// then mixed nodes with that kind (50..75), idle nodes (25..50), other kinds (0..25);
// within a band fuller nodes score higher. GPUs best-fit.
class GpuClusteringScore final : public ScorePlugin {
 public:
  std::string_view name() const override { return "gpuclustering"; }
  NodeScore Score(const ClusterState& state, const Task& task, int32_t node) override {
    const NodeState& n = state.node(node);
    const int32_t kind = GpuTaskKind(task);
    if (kind < 0) return {node, kMinNodeScore, 0};
    const GpuMask gpus = BestFitGpus(state, node, task);
    const int64_t fullness =
        kMaxNodeScore / 4 *
        (static_cast<int64_t>(kMaxSpecGpuMilli) - GpuRoomOf(n, task, gpus).free) /
        static_cast<int64_t>(kMaxSpecGpuMilli);
    bool has_kind = false;
    for (const auto& [k, count] : n.gpu_task_kinds) has_kind |= (k == kind && count > 0);
    int64_t band;
    if (has_kind) {
      band = n.gpu_task_kinds.size() == 1 ? kMaxNodeScore * 3 / 4 : kMaxNodeScore * 2 / 4;
    } else {
      band = n.gpu_task_kinds.empty() ? kMaxNodeScore / 4 : 0;
    }
    return {node, fullness + band, gpus};
  }
};

}  // namespace

std::unique_ptr<ScorePlugin> MakeRandomScore(const PolicyConfig& c) {
  return std::make_unique<RandomScore>(c.seed);
}
std::unique_ptr<ScorePlugin> MakeBestFitScore(const PolicyConfig&) {
  return std::make_unique<BestFitScore>();
}
std::unique_ptr<ScorePlugin> MakeDotProductScore(const PolicyConfig&) {
  return std::make_unique<DotProductScore>();
}
std::unique_ptr<ScorePlugin> MakeGpuPackingScore(const PolicyConfig&) {
  return std::make_unique<GpuPackingScore>();
}
std::unique_ptr<ScorePlugin> MakeGpuClusteringScore(const PolicyConfig&) {
  return std::make_unique<GpuClusteringScore>();
}

}  // namespace gpupool::sched
