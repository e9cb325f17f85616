// FGD's caches (per node version, and the memo by node content) against a plain
// recomputation of every node: the decisions must be the same, node and GPUs.
#include "sched/placement/fgd_score.h"

#include <gtest/gtest.h>

#include <algorithm>
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
// best wins. With strand_weight > 0, fgd-strand's term as fgd_score.h states it, with
// the CPU and memory per GPU milli of `shapes`' GPU shapes. With fractional_merge > 0,
// fgd-strand-gpufit's rule: a fractional task's score is ⌊score / fractional_merge⌋,
// then the least free share left on the GPU after placement wins; with `piece_waste`
// too, fgd-strand-lookahead's: the least growth of piece_waste (ExpectedPieceWaste),
// then the least share left; with free_opening too, fgd-strand-lookahead-open's: an idle
// GPU's growth is zero. A GPU another owner holds (single-owner GPUs) is never a candidate.
PlacementDecision ReferenceFgd(const ClusterState& s, const Task& task,
                               const FragmentationMeasure& m, double strand_weight = 0,
                               const std::vector<TargetShape>& shapes = {},
                               int64_t fractional_merge = 0,
                               const std::vector<int64_t>* piece_waste = nullptr,
                               bool free_opening = false) {
  double cpu = 0, mem = 0, gpu = 0;
  for (const TargetShape& t : shapes) {
    if (t.num_gpu == 0) continue;
    cpu += static_cast<double>(t.weight) * static_cast<double>(t.cpu_milli);
    mem += static_cast<double>(t.weight) * static_cast<double>(t.memory_mib);
    gpu += static_cast<double>(t.weight) * t.num_gpu * t.gpu_milli;
  }
  auto stranded = [&](int64_t g, int64_t c, int64_t mm) {
    double usable = static_cast<double>(g);
    if (cpu > 0) usable = std::min(usable, static_cast<double>(c) / (cpu / gpu));
    if (mem > 0) usable = std::min(usable, static_cast<double>(mm) / (mem / gpu));
    return static_cast<double>(g) - std::max(usable, 0.0);
  };
  PlacementDecision best;
  for (int32_t node : s.scan_order()) {
    if (!s.Fits(node, task)) continue;
    const NodeState& n = s.node(node);
    const int64_t before = m.ScaledNode(n);
    std::vector<int32_t> after = n.gpu_free_milli;
    auto score_of = [&]() {
      int64_t d = before - m.ScaledNode(n.model_id, n.cpu_free_milli - task.cpu_milli, after.data(),
                                        n.num_gpus(), n.memory_free_mib - task.memory_mib);
      if (strand_weight != 0) {
        const double s0 = stranded(n.gpu_free_total, n.cpu_free_milli, n.memory_free_mib);
        const double s1 =
            stranded(n.gpu_free_total - task.TotalGpuMilli(), n.cpu_free_milli - task.cpu_milli,
                     n.memory_free_mib - task.memory_mib);
        d -= std::llround(strand_weight * (s1 - s0) * static_cast<double>(m.total_weight()));
      }
      const double delta = m.ToMilli(d);
      return static_cast<int64_t>(1.0 / (1.0 + std::exp(-delta / 1000.0)) * 100.0);
    };
    std::vector<int32_t> gpus;
    int64_t score = -1;
    if (task.IsFractional()) {
      const uint64_t held = s.HeldByOthers(node, task);
      for (int32_t i = 0; i < n.num_gpus(); ++i) {
        const int32_t f = n.gpu_free_milli[static_cast<size_t>(i)];
        if (f < task.gpu_milli || (held >> i & 1) != 0) continue;
        after[static_cast<size_t>(i)] = f - task.gpu_milli;
        int64_t sc = score_of();
        if (fractional_merge > 0) {
          const int32_t left = f - task.gpu_milli;
          if (piece_waste == nullptr) {
            sc = (sc / fractional_merge) * (int64_t{1} << 20) + (1000 - left);
          } else {
            const int64_t growth = free_opening && f == 1000
                                       ? 0
                                       : (*piece_waste)[static_cast<size_t>(left)] -
                                             (*piece_waste)[static_cast<size_t>(f)];
            sc = (sc / fractional_merge) * (int64_t{1} << 25) + (10000 - growth) * 1024 +
                 (1000 - left);
          }
        }
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
      if (fractional_merge > 0) score *= int64_t{1} << 20;
    }
    if (!best.placed || score > best.score) {
      best.placed = true;
      best.score = score;
      best.placement = {node, gpus};
    }
  }
  return best;
}

struct MemoCase {
  const char* policy;
  double strand_weight;
  bool shapes_with_memory;       // the measure then counts memory (explicit target shapes)
  int64_t fractional_merge = 0;  // fgd-strand-gpufit's rule (see ReferenceFgd)
  double fill_theta = 0;         // fgd-strand-lookahead's (see ReferenceFgd)
  bool free_opening = false;     // fgd-strand-lookahead-open's (see ReferenceFgd)
  bool owners = false;           // single-owner GPUs, and fractional tasks of three owners
};

class FgdMemoTest : public testing::TestWithParam<MemoCase> {};

TEST_P(FgdMemoTest, ContentMemoDecidesLikeAFullRecomputation) {
  // Nodes of two models whose GPUs end up with the same free shares in different orders
  // (and identical idle nodes), so memo entries are shared between nodes whose GPU
  // indices differ; the cluster is also reset to a copy of its idle state, as the
  // placement benchmark does, so node versions go back to old values.
  const MemoCase c = GetParam();
  std::vector<TargetShape> shapes = {{2000, 1, 250, {}, 5, 8192},    {4000, 1, 500, {}, 4, 65536},
                                     {1000, 1, 700, {}, 2, 4096},    {8000, 1, 1000, {}, 6, 49152},
                                     {16000, 2, 1000, {}, 2, 98304}, {32000, 4, 1000, {"A"}, 1, 0},
                                     {4000, 0, 0, {}, 3, 131072}};
  const std::vector<TargetShape> with_memory = shapes;  // the tasks' memory
  if (!c.shapes_with_memory) {
    for (auto& sh : shapes) sh.memory_mib = 0;
  }
  auto workload = std::make_shared<const TargetWorkload>(TargetWorkload(shapes));
  ClusterState idle;
  for (int i = 0; i < 24; ++i) {
    NodeSpec spec{"n" + std::to_string(i), 64000, 262144, 4, i % 3 ? "A" : "B"};
    // With owners: all GPUs of even nodes single-owner, GPUs 0 and 2 of odd ones.
    if (c.owners) spec.single_owner_gpus = i % 2 == 0 ? 0b1111 : 0b0101;
    ASSERT_TRUE(idle.AddNode(spec).ok());
  }
  std::vector<int32_t> order(24);
  for (int32_t i = 0; i < 24; ++i) order[static_cast<size_t>(i)] = (i * 7) % 24;
  ASSERT_TRUE(idle.SetScanOrder(order).ok());
  const FragmentationMeasure measure(*workload, idle.models());
  const std::vector<int64_t> piece_waste = ExpectedPieceWaste(*workload, c.fill_theta);
  PolicyConfig config;
  config.target_workload = workload;
  auto policy = BuiltinPlacementPolicies().Create(c.policy, config);
  ASSERT_TRUE(policy.ok());

  Rng rng(2024);
  ClusterState s = idle;
  int placed = 0, fractional_on_used_gpu = 0, held_share_fits = 0;
  for (int step = 0; step < 3000; ++step) {
    const TargetShape& sh = shapes[rng.Uniform(shapes.size())];
    const TargetShape& mem = with_memory[static_cast<size_t>(&sh - shapes.data())];
    Task t{"t", "", sh.cpu_milli, mem.memory_mib, sh.num_gpu, sh.gpu_milli, sh.gpu_models, 0};
    if (c.owners && t.IsFractional()) {
      t.owner = 1 + static_cast<int64_t>(rng.Uniform(3));
      // Count the decisions where a GPU the task may not take would have fitted it.
      for (int32_t i = 0; i < s.num_nodes(); ++i) {
        const NodeState& n = s.node(i);
        bool counted = false;
        for (int32_t g = 0; g < n.num_gpus() && !counted; ++g) {
          counted = (s.HeldByOthers(i, t) >> g & 1) != 0 &&
                    n.gpu_free_milli[static_cast<size_t>(g)] >= t.gpu_milli;
        }
        if (counted) {
          ++held_share_fits;
          break;
        }
      }
    }
    const PlacementDecision want =
        ReferenceFgd(s, t, measure, c.strand_weight, shapes, c.fractional_merge,
                     c.fill_theta > 0 ? &piece_waste : nullptr, c.free_opening);
    const PlacementDecision got = (*policy)->Place(s, t);
    ASSERT_EQ(got.placed, want.placed) << c.policy << " step " << step;
    if (!want.placed) {
      s = idle;  // full for this shape: start again from the idle copy
      continue;
    }
    ASSERT_EQ(got.placement, want.placement) << c.policy << " step " << step;
    ASSERT_EQ(got.score, want.score) << c.policy << " step " << step;
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
  if (c.owners) {
    EXPECT_GT(held_share_fits, 500);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, FgdMemoTest,
    testing::Values(MemoCase{"fgd", 0, false}, MemoCase{"fgd", 0, true},
                    MemoCase{"fgd-strand", 2.0, false}, MemoCase{"fgd-strand", 2.0, true},
                    MemoCase{"fgd-strand-gpufit", 2.0, false, 10},
                    MemoCase{"fgd-strand-gpufit", 2.0, true, 10},
                    MemoCase{"fgd-strand-lookahead", 2.0, false, 20, 0.03},
                    MemoCase{"fgd-strand-lookahead", 2.0, true, 20, 0.03},
                    MemoCase{"fgd-strand-lookahead-open", 2.0, false, 20, 0.03, true},
                    MemoCase{"fgd-strand-lookahead-open", 2.0, true, 20, 0.03, true},
                    MemoCase{"fgd", 0, false, 0, 0, false, true},
                    MemoCase{"fgd-strand-gpufit", 2.0, true, 10, 0, false, true},
                    MemoCase{"fgd-strand-lookahead-open", 2.0, true, 20, 0.03, true, true}));

TEST(FgdScoreTest, StrandSendsCpuHeavyTasksToNodesWithCpuToSpare) {
  // GPU tasks need 12 cores and 48 GiB per GPU. Node "g2" (8 GPUs, 96 cores) is first in
  // scan order; node "t4" (2 GPUs, 104 cores) has CPU to spare. A 32-core CPU-only task
  // changes neither node's FGD fragmentation (every shape still fits), so FGD takes the
  // first node and leaves g2 too little CPU for its 8 GPUs; fgd-strand sees that and
  // takes t4. A 1-GPU task that fits its share goes to g2 under both.
  auto w = std::make_shared<const TargetWorkload>(
      TargetWorkload({{12000, 1, 1000, {}, 10, 49152}, {12000, 0, 0, {}, 1, 49152}}));
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"g2", 96000, 393216, 8, "G2"}).ok());
  ASSERT_TRUE(s.AddNode({"t4", 104000, 524288, 2, "T4"}).ok());
  Task cpu_only{"c", "", 32000, 49152, 0, 0, {}, 0};
  Task one_gpu{"g", "", 12000, 49152, 1, 1000, {}, 0};
  PolicyConfig config;
  config.target_workload = w;
  auto fgd = BuiltinPlacementPolicies().Create("fgd", config);
  auto strand = BuiltinPlacementPolicies().Create("fgd-strand", config);
  ASSERT_TRUE(fgd.ok() && strand.ok());
  EXPECT_EQ((*fgd)->Place(s, cpu_only).placement.node, 0);
  EXPECT_EQ((*strand)->Place(s, cpu_only).placement.node, 1);
  EXPECT_EQ((*fgd)->Place(s, one_gpu).placement.node, 0);
  EXPECT_EQ((*strand)->Place(s, one_gpu).placement.node, 0);
  // Without a target workload (no CPU or memory per GPU known) it is FGD.
  auto generic = BuiltinPlacementPolicies().Create("fgd-strand", PolicyConfig{});
  ASSERT_TRUE(generic.ok());
  EXPECT_EQ((*generic)->Place(s, cpu_only).placement.node, 0);
}

TEST(FgdScoreTest, GpufitPutsFractionalTasksOnTheFullestGpuAmongNearTies) {
  // Target: quarter GPUs and whole GPUs. Node "a" (first in scan order) has a GPU with
  // 500 free, node "b" one with 300 free. A 250-task: on a, F_n goes 250 -> 125
  // (Δ = 125, FGD score 53); on b, 150 -> 50 (Δ = 100, score 52). FGD and fgd-strand
  // take a and leave a 250 piece; fgd-strand-gpufit merges 53 and 52 into one of its 10
  // levels and takes b's GPU, which is left with 50 (the fullest fitting GPU).
  auto w = std::make_shared<const TargetWorkload>(
      TargetWorkload({{0, 1, 250, {}, 1}, {0, 1, 1000, {}, 1}}));
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"a", 32000, 65536, 2, "T4"}).ok());
  ASSERT_TRUE(s.AddNode({"b", 32000, 65536, 2, "T4"}).ok());
  ASSERT_TRUE(s.Allocate({"x", "", 1000, 1024, 1, 500, {}, 0}, {0, {1}}).ok());
  ASSERT_TRUE(s.Allocate({"y", "", 1000, 1024, 1, 700, {}, 0}, {1, {0}}).ok());
  const Task quarter{"q", "", 1000, 1024, 1, 250, {}, 0};
  PolicyConfig config;
  config.target_workload = w;
  for (const char* name : {"fgd", "fgd-strand"}) {
    auto p = BuiltinPlacementPolicies().Create(name, config);
    ASSERT_TRUE(p.ok());
    const PlacementDecision d = (*p)->Place(s, quarter);
    EXPECT_EQ(d.placement.node, 0) << name;
    EXPECT_EQ(d.placement.gpus, std::vector<int32_t>{1}) << name;
  }
  auto gpufit = BuiltinPlacementPolicies().Create("fgd-strand-gpufit", config);
  ASSERT_TRUE(gpufit.ok());
  const PlacementDecision d = (*gpufit)->Place(s, quarter);
  EXPECT_EQ(d.placement.node, 1);
  EXPECT_EQ(d.placement.gpus, std::vector<int32_t>{0});
  // A whole GPU still goes by FGD's score and the scan order: both nodes have one idle
  // GPU and the same Δ, so the first node.
  EXPECT_EQ((*gpufit)->Place(s, {"w", "", 1000, 1024, 1, 1000, {}, 0}).placement.node, 0);
  // The live default is the lookahead variant of this policy that opens idle GPUs freely.
  auto def = BuiltinPlacementPolicies().Create("default", config);
  ASSERT_TRUE(def.ok());
  EXPECT_EQ((*def)->name(), "fgd-strand-lookahead-open");
}

// Fractional shapes of 470 (weight 9) and 320 (4) thousandths, whole GPUs (50).
std::shared_ptr<const TargetWorkload> FourSeventyThreeTwentyWorkload() {
  return std::make_shared<const TargetWorkload>(
      TargetWorkload({{0, 1, 470, {}, 9}, {0, 1, 320, {}, 4}, {0, 1, 1000, {}, 50}}));
}

TEST(FgdScoreTest, ExpectedPieceWasteFollowsTheFillRecursion) {
  // theta 0.03: a piece that 470 or 320 fits (13/63 or 4/63 of the tasks) surely gets
  // one. 60, 210: nothing fits, all stays. 360: a 320 fits, 40 stays. 530: 470 (9 of
  // 13) leaves 60, 320 (4 of 13) leaves 210: (9·60 + 4·210)/13 = 106.15. 680: 470
  // leaves 210, 320 leaves 360 (then 40): (9·210 + 4·40)/13 = 157.69. Idle: 0.
  const std::vector<int64_t> w = ExpectedPieceWaste(*FourSeventyThreeTwentyWorkload(), 0.03);
  ASSERT_EQ(w.size(), 1001u);
  EXPECT_EQ(w[0], 0);
  EXPECT_EQ(w[60], 600);
  EXPECT_EQ(w[210], 2100);
  EXPECT_EQ(w[360], 400);
  EXPECT_EQ(w[530], 1062);
  EXPECT_EQ(w[680], 1577);
  EXPECT_EQ(w[1000], 0);
  // theta 0.5: a 360 piece gets a 320 only with chance (4/63)/0.5.
  const double p = 4.0 / 63.0 / 0.5;
  EXPECT_EQ(ExpectedPieceWaste(*FourSeventyThreeTwentyWorkload(), 0.5)[360],
            std::llround(((1 - p) * 360 + p * 40) * 10));
}

TEST(FgdScoreTest, LookaheadLeavesAPieceTheNextTaskCanFill) {
  // Node "a" (first in scan order) has a GPU with 530 free (a 470 task), node "b" one with
  // 680 free (a 320 task). A 320 task scores 55 on both under FGD (Δ 210.6 and 202.6), so
  // FGD, fgd-strand and fgd-strand-gpufit (BestFit: 210 left < 360) take a. The
  // lookahead sees that 210 will stay unused (W 106.2 -> 210) while b's 360 takes the
  // next 320 (W 157.7 -> 40), and takes b.
  auto w = FourSeventyThreeTwentyWorkload();
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"a", 32000, 65536, 2, "T4"}).ok());
  ASSERT_TRUE(s.AddNode({"b", 32000, 65536, 2, "T4"}).ok());
  ASSERT_TRUE(s.Allocate({"x", "", 1000, 1024, 1, 470, {}, 0}, {0, {0}}).ok());
  ASSERT_TRUE(s.Allocate({"y", "", 1000, 1024, 1, 320, {}, 0}, {1, {0}}).ok());
  const Task task{"t", "", 1000, 1024, 1, 320, {}, 0};
  PolicyConfig config;
  config.target_workload = w;
  for (const char* name : {"fgd", "fgd-strand", "fgd-strand-gpufit"}) {
    auto p = BuiltinPlacementPolicies().Create(name, config);
    ASSERT_TRUE(p.ok());
    const PlacementDecision d = (*p)->Place(s, task);
    EXPECT_EQ(d.placement.node, 0) << name;
    EXPECT_EQ(d.placement.gpus, std::vector<int32_t>{0}) << name;
  }
  auto lookahead = BuiltinPlacementPolicies().Create("fgd-strand-lookahead", config);
  ASSERT_TRUE(lookahead.ok());
  const PlacementDecision d = (*lookahead)->Place(s, task);
  EXPECT_EQ(d.placement.node, 1);
  EXPECT_EQ(d.placement.gpus, std::vector<int32_t>{0});
}

TEST(FgdScoreTest, LookaheadOpenPrefersAnIdleGpuToAFillThatLeavesWaste) {
  // Fractional shapes of 470 (weight 9) and 320 (4), whole GPUs (1); every piece that a
  // shape fits surely gets one, so W is that of FourSeventyThreeTwentyWorkload. Node "a"
  // has a GPU with 530 free (a 470 task) and an idle GPU. A 320 task in the 530 leaves
  // 210, which nothing fills (FGD score 45; W 106.2 -> 210, growth +103.8); on the idle
  // GPU it leaves 680 (score 48; W 0 -> 157.7, growth +157.7). Both scores fall in the
  // same of the 5 merged levels, so fgd-strand-lookahead takes the 530 (less growth) and
  // fgd-strand-lookahead-open, which counts opening an idle GPU as zero growth, takes the
  // idle GPU. A 470 task fills the 530 to 60 under both (growth 60 - 106.2 < 0).
  auto w = std::make_shared<const TargetWorkload>(
      TargetWorkload({{0, 1, 470, {}, 9}, {0, 1, 320, {}, 4}, {0, 1, 1000, {}, 1}}));
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"a", 32000, 65536, 2, "T4"}).ok());
  ASSERT_TRUE(s.Allocate({"x", "", 1000, 1024, 1, 470, {}, 0}, {0, {0}}).ok());
  const Task t320{"t", "", 1000, 1024, 1, 320, {}, 0};
  const Task t470{"u", "", 1000, 1024, 1, 470, {}, 0};
  PolicyConfig config;
  config.target_workload = w;
  auto lookahead = BuiltinPlacementPolicies().Create("fgd-strand-lookahead", config);
  auto open = BuiltinPlacementPolicies().Create("fgd-strand-lookahead-open", config);
  ASSERT_TRUE(lookahead.ok() && open.ok());
  EXPECT_EQ((*lookahead)->Place(s, t320).placement.gpus, std::vector<int32_t>{0});
  EXPECT_EQ((*open)->Place(s, t320).placement.gpus, std::vector<int32_t>{1});
  EXPECT_EQ((*lookahead)->Place(s, t470).placement.gpus, std::vector<int32_t>{0});
  EXPECT_EQ((*open)->Place(s, t470).placement.gpus, std::vector<int32_t>{0});
}

}  // namespace
}  // namespace gpupool::sched
