// FGD's caches (per node version, and the memo by node content) against a plain
// recomputation of every node: the decisions must be the same, node and GPUs.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "sched/fragmentation.h"
#include "sched/framework.h"
#include "sched/placement/score_plugins.h"
#include "sched/policy_registry.h"
#include "sched/rng.h"

namespace gpupool::sched {
namespace {

// FGD as fgd-experiment.md states it, with no caching: every feasible node in scan
// order, for a fractional task every fitting GPU in index order, strict > so the first
// best wins.
PlacementDecision ReferenceFgd(const ClusterState& s, const Task& task,
                               const FragmentationMeasure& m) {
  PlacementDecision best;
  for (int32_t node : s.scan_order()) {
    if (!s.Fits(node, task)) continue;
    const NodeState& n = s.node(node);
    const int64_t before = m.ScaledNode(n);
    std::vector<int32_t> after = n.gpu_free_milli;
    auto score_of = [&]() {
      const double delta =
          m.ToMilli(before - m.ScaledNode(n.model_id, n.cpu_free_milli - task.cpu_milli,
                                          after.data(), n.num_gpus()));
      return static_cast<int64_t>(1.0 / (1.0 + std::exp(-delta / 1000.0)) * 100.0);
    };
    std::vector<int32_t> gpus;
    int64_t score = -1;
    if (task.IsFractional()) {
      for (int32_t i = 0; i < n.num_gpus(); ++i) {
        const int32_t f = n.gpu_free_milli[static_cast<size_t>(i)];
        if (f < task.gpu_milli) continue;
        after[static_cast<size_t>(i)] = f - task.gpu_milli;
        const int64_t sc = score_of();
        after[static_cast<size_t>(i)] = f;
        if (sc > score) {
          score = sc;
          gpus = {i};
        }
      }
    } else {
      gpus = GpuMaskToList(FirstIdleGpus(n, task.num_gpu));
      for (int32_t i : gpus) after[static_cast<size_t>(i)] = 0;
      score = score_of();
    }
    if (!best.placed || score > best.score) {
      best.placed = true;
      best.score = score;
      best.placement = {node, gpus};
    }
  }
  return best;
}

TEST(FgdScoreTest, ContentMemoDecidesLikeAFullRecomputation) {
  // Nodes of two models whose GPUs end up with the same free shares in different orders
  // (and identical idle nodes), so memo entries are shared between nodes whose GPU
  // indices differ; the cluster is also reset to a copy of its idle state, as the
  // placement benchmark does, so node versions go back to old values.
  const std::vector<TargetShape> shapes = {{2000, 1, 250, {}, 5},   {4000, 1, 500, {}, 4},
                                           {1000, 1, 700, {}, 2},   {8000, 1, 1000, {}, 6},
                                           {16000, 2, 1000, {}, 2}, {32000, 4, 1000, {"A"}, 1},
                                           {4000, 0, 0, {}, 3}};
  auto workload = std::make_shared<const TargetWorkload>(TargetWorkload(shapes));
  ClusterState idle;
  for (int i = 0; i < 24; ++i) {
    ASSERT_TRUE(idle.AddNode({"n" + std::to_string(i), 64000, 262144, 4, i % 3 ? "A" : "B"}).ok());
  }
  std::vector<int32_t> order(24);
  for (int32_t i = 0; i < 24; ++i) order[static_cast<size_t>(i)] = (i * 7) % 24;
  ASSERT_TRUE(idle.SetScanOrder(order).ok());
  const FragmentationMeasure measure(*workload, idle.models());
  PolicyConfig config;
  config.target_workload = workload;
  auto policy = BuiltinPlacementPolicies().Create("fgd", config);
  ASSERT_TRUE(policy.ok());

  Rng rng(2024);
  ClusterState s = idle;
  int placed = 0, fractional_on_used_gpu = 0;
  for (int step = 0; step < 3000; ++step) {
    const TargetShape& sh = shapes[rng.Uniform(shapes.size())];
    Task t{"t", "", sh.cpu_milli, 1024, sh.num_gpu, sh.gpu_milli, sh.gpu_models, 0};
    const PlacementDecision want = ReferenceFgd(s, t, measure);
    const PlacementDecision got = (*policy)->Place(s, t);
    ASSERT_EQ(got.placed, want.placed) << "step " << step;
    if (!want.placed) {
      s = idle;  // full for this shape: start again from the idle copy
      continue;
    }
    ASSERT_EQ(got.placement, want.placement) << "step " << step;
    ASSERT_EQ(got.score, want.score) << "step " << step;
    if (t.IsFractional() &&
        s.node(got.placement.node).gpu_free_milli[static_cast<size_t>(got.placement.gpus[0])] <
            1000) {
      ++fractional_on_used_gpu;
    }
    ASSERT_TRUE(s.Allocate(t, got.placement).ok());
    ++placed;
  }
  // The run exercised what it is meant to: many placements, shared GPUs picked by index.
  EXPECT_GT(placed, 2000);
  EXPECT_GT(fractional_on_used_gpu, 100);
}

}  // namespace
}  // namespace gpupool::sched
