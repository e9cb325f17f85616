// MIG instances as whole-only GPUs of a node (cluster_state.h): which tasks may take
// them, that they are held whole, and that every built-in policy keeps to the rules.
#include <gtest/gtest.h>

#include "sched/cluster_state.h"
#include "sched/fragmentation.h"
#include "sched/policy_registry.h"
#include "sched/queue/gang_placement.h"
#include "sched/rng.h"

namespace gpupool::sched {
namespace {

Task Share(int32_t milli, int64_t gpu_memory_mib = 0) {
  Task t{"s", "", 1000, 1024, 1, milli, {}, 0};
  t.gpu_memory_mib = gpu_memory_mib;
  return t;
}
Task Whole(int32_t gpus) { return Task{"w", "", 1000, 1024, gpus, 1000, {}, 0}; }

// Node "mig": an 80 GiB GPU in MIG mode cut into 3g.40gb, 2g.20gb and two 1g.10gb
// instances (GPUs 0..3), and one 80 GiB GPU outside MIG mode (GPU 4).
NodeSpec MigSpec() {
  NodeSpec spec{"mig", 64000, 262144, 5, "A100", 81920, 80};
  spec.whole_only_gpus = 0b01111;
  spec.device_memory_mib = {40960, 20480, 10240, 10240, 81920};
  return spec;
}

ClusterState MigCluster() {
  ClusterState s;
  EXPECT_TRUE(s.AddNode(MigSpec()).ok());
  return s;
}

TEST(MigClusterTest, AddNodeRejectsBadMasksAndSizes) {
  ClusterState s;
  NodeSpec bad = MigSpec();
  bad.whole_only_gpus = 0b100000;
  EXPECT_NE(s.AddNode(bad).message().find("marks GPU 5 whole-only but has 5 GPUs"),
            std::string::npos);
  bad = MigSpec();
  bad.device_memory_mib = {1, 2};
  EXPECT_NE(s.AddNode(bad).message().find("gives 2 GPU memory sizes for 5 GPUs"),
            std::string::npos);
  bad.device_memory_mib = {40960, -1, 10240, 10240, 81920};
  EXPECT_FALSE(s.AddNode(bad).ok());
  EXPECT_EQ(s.num_nodes(), 0);
}

TEST(MigClusterTest, AShareMayTakeOnlyTheSmallestIdleInstanceThatFits) {
  ClusterState s = MigCluster();
  // 10 GiB (by memory, or as 0.125 of the 80 GiB parent) fits 1g.10gb: GPU 2.
  EXPECT_EQ(s.Blocked(0, Share(500, 10240)), 0b01011u);
  EXPECT_EQ(s.Blocked(0, Share(125)), 0b01011u);
  // 10 GiB and one MiB: the 2g.20gb.
  EXPECT_EQ(s.Blocked(0, Share(500, 10241)), 0b01101u);
  EXPECT_EQ(s.GpuMemoryNeedMib(0, Share(126)), 10322);
  EXPECT_EQ(s.Blocked(0, Share(126)), 0b01101u);
  // More than the largest instance: none of them.
  EXPECT_EQ(s.Blocked(0, Share(999, 50000)), 0b01111u);
  // Whole-GPU tasks: never an instance; CPU-only tasks: nothing to block.
  EXPECT_EQ(s.Blocked(0, Whole(1)), 0b01111u);
  EXPECT_EQ(s.Blocked(0, Task{"c", "", 1000, 1024, 0, 0, {}, 0}), 0u);
  EXPECT_EQ(s.UsableGpus(0, Whole(1)), 1);
  EXPECT_EQ(s.UsableGpus(0, Share(500, 15000)), 3);  // 40, 20 and the plain GPU
  EXPECT_FALSE(s.CouldEverHost(0, Whole(2)));
  EXPECT_TRUE(s.CouldEverHost(0, Whole(1)));
}

TEST(MigClusterTest, AnInstanceIsHeldWholeAndGivenBackWhole) {
  ClusterState s = MigCluster();
  ASSERT_TRUE(s.Allocate(Whole(1), {0, {4}}).ok());  // the plain GPU is taken
  const Task small = Share(100, 4096);
  ASSERT_TRUE(s.Fits(0, small));
  ASSERT_TRUE(s.Allocate(small, {0, {2}}).ok());
  EXPECT_EQ(s.node(0).gpu_free_milli[2], 0);  // all of it, not 900 left
  EXPECT_EQ(s.node(0).gpu_free_total, 3000);
  EXPECT_EQ(s.TotalFree().gpu_milli, 3000);
  // A second share may not join it; the next smallest is GPU 3.
  Status joined = s.Allocate(small, {0, {2}});
  EXPECT_NE(joined.message().find("held whole"), std::string::npos) << joined.message();
  EXPECT_EQ(s.Blocked(0, small), 0b00111u);
  // An instance too small for a share is refused with both sizes.
  Status too_small = s.Allocate(Share(100, 20000), {0, {3}});
  EXPECT_NE(too_small.message().find("needs 20000 MiB of GPU memory; GPU 3 of node 'mig' (a MIG "
                                     "instance) has 10240 MiB"),
            std::string::npos)
      << too_small.message();
  ASSERT_TRUE(s.Release(small, {0, {2}}).ok());
  EXPECT_EQ(s.node(0).gpu_free_milli[2], 1000);
  EXPECT_EQ(s.TotalFree().gpu_milli, 4000);
  EXPECT_FALSE(s.Release(small, {0, {2}}).ok());  // not placed there any more
  EXPECT_EQ(s.node(0).gpu_free_total, 4000);
}

TEST(MigClusterTest, WhyNotFitNamesTheInstances) {
  ClusterState s = MigCluster();
  ASSERT_TRUE(s.Allocate(Whole(1), {0, {4}}).ok());
  EXPECT_FALSE(s.Fits(0, Whole(1)));
  EXPECT_EQ(s.WhyNotFit(0, Whole(1)), "insufficient GPUs (MIG instances take shares only)");
  EXPECT_FALSE(s.Fits(0, Share(900, 50000)));
  EXPECT_EQ(s.WhyNotFit(0, Share(900, 50000)),
            "insufficient GPU share (no idle MIG instance with 50000 MiB)");
  EXPECT_EQ(s.WhyNotFit(0, Share(100, 4096)), "");
}

// Every policy on MigCluster: a whole GPU job takes the plain GPU; then shares fill the instances
// smallest first, each instance once; whole-GPU tasks never land.
void CheckMigRules(const std::string& name) {
  SCOPED_TRACE(name);
  ClusterState s = MigCluster();
  auto policy = BuiltinPlacementPolicies().Create(name, PolicyConfig{});
  ASSERT_TRUE(policy.ok());
  PlacementPolicy& p = **policy;
  // A whole GPU: the one outside MIG mode, though the instances before it are idle.
  PlacementDecision whole = p.Place(s, Whole(1));
  ASSERT_TRUE(whole.placed) << whole.reason;
  EXPECT_EQ(whole.placement, (Placement{0, {4}}));
  ASSERT_TRUE(s.Allocate(Whole(1), {0, {4}}).ok());
  EXPECT_FALSE(p.Place(s, Whole(1)).placed);
  const Task small = Share(100, 4096);
  for (int32_t want : {2, 3, 1, 0}) {
    PlacementDecision d = p.Place(s, small);
    ASSERT_TRUE(d.placed) << d.reason;
    EXPECT_EQ(d.placement, (Placement{0, {want}}));
    ASSERT_TRUE(s.Allocate(small, d.placement).ok());
  }
  EXPECT_FALSE(p.Place(s, small).placed);  // every instance held
  // A 30 GiB share waits for the 3g.40gb; the freed 1g.10gb does not suit it.
  ASSERT_TRUE(s.Release(small, {0, {3}}).ok());
  EXPECT_FALSE(p.Place(s, Share(300, 30720)).placed);
  EXPECT_EQ(p.Place(s, small).placement, (Placement{0, {3}}));
  ASSERT_TRUE(s.Release(small, {0, {0}}).ok());
  EXPECT_EQ(p.Place(s, Share(300, 30720)).placement, (Placement{0, {0}}));
  EXPECT_EQ(p.Place(s, Share(375)).placement, (Placement{0, {0}}));  // 30 GiB of 80
}

TEST(MigPolicyTest, EveryPolicyKeepsToTheInstances) {
  for (const auto& e : BuiltinPlacementPolicies().List()) CheckMigRules(e.name);
}

// A gang of shares gets one instance per task; a gang the instances cannot hold is not
// placed and leaves the cluster as it was.
TEST(MigPolicyTest, GangsTakeOneInstancePerTaskOrNone) {
  ClusterState s = MigCluster();
  ASSERT_TRUE(s.Allocate(Whole(1), {0, {4}}).ok());
  auto policy = BuiltinPlacementPolicies().Create("fgd", PolicyConfig{});
  ASSERT_TRUE(policy.ok());
  Result<GangPlacement> two = PlaceGang(s, {Share(100, 4096), Share(100, 4096)}, **policy);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  ASSERT_TRUE(two->placed) << two->reason;
  EXPECT_EQ(two->placements[0].gpus, std::vector<int32_t>{2});
  EXPECT_EQ(two->placements[1].gpus, std::vector<int32_t>{3});
  const std::vector<int32_t> before = s.node(0).gpu_free_milli;
  Result<GangPlacement> big = PlaceGang(s, {Share(300, 30720), Share(300, 30720)}, **policy);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_FALSE(big->placed);
  EXPECT_EQ(s.node(0).gpu_free_milli, before);
  ASSERT_TRUE(ReleaseGang(s, {Share(100, 4096), Share(100, 4096)}, two->placements).ok());
  EXPECT_EQ(s.node(0).gpu_free_milli, (std::vector<int32_t>{1000, 1000, 1000, 1000, 0}));
}

// The charge rule (cluster_state.h, ChargedGpuMilli): a task on an instance is charged
// the instance's part of its GPU, never less than its ask; elsewhere its ask.
TEST(MigChargeTest, AnInstanceIsChargedItsPartOfTheGpuNeverLessThanTheAsk) {
  const ClusterState s = MigCluster();
  const NodeState& n = s.node(0);
  EXPECT_EQ(ChargedGpuMilli(n, 3, 1), 125);    // 1 thousandth on a 1g.10gb: 1/8 of the GPU
  EXPECT_EQ(ChargedGpuMilli(n, 0, 1), 500);    // on the 3g.40gb: half
  EXPECT_EQ(ChargedGpuMilli(n, 1, 300), 300);  // more than the 2g.20gb's 250: the ask
  EXPECT_EQ(ChargedGpuMilli(n, 4, 1), 1);      // outside MIG mode: the ask, as before
  EXPECT_EQ(ChargedGpuMilli(n, 4, 1000), 1000);
  // Over a placement (the ask where the placement is not one here).
  EXPECT_EQ(s.ChargedGpuMilli(Share(1, 1), {0, {2}}), 125);
  EXPECT_EQ(s.ChargedGpuMilli(Share(1, 1), {0, {4}}), 1);
  EXPECT_EQ(s.ChargedGpuMilli(Whole(1), {0, {4}}), 1000);
  EXPECT_EQ(s.ChargedGpuMilli(Share(7, 1), {5, {0}}), 7);
  EXPECT_EQ(s.ChargedGpuMilli(Task{"c", "", 1000, 1024, 0, 0, {}, 0}, {0, {}}), 0);
}

// The capacity charges are weighed against counts an instance by its weight: the MIG GPU
// weighs 1000 (its four instances together), not 4000 as in TotalCapacity.
TEST(MigChargeTest, TheWeighedCapacityCountsAGpuInMigModeOnce) {
  ClusterState s = MigCluster();
  EXPECT_EQ(s.TotalCapacity().gpu_milli, 5000);
  EXPECT_EQ(s.TotalGpuWeightMilli(), 2000);
  ASSERT_TRUE(s.AddNode(NodeSpec{"plain", 64000, 262144, 2, "A100", 81920, 80}).ok());
  EXPECT_EQ(s.TotalGpuWeightMilli(), 4000);
  EXPECT_EQ(s.TotalCapacity().gpu_milli, 7000);
}

// The placement scores know instances (fgd_score.h, FragmentationMeasure::ScaledMigNode).

// An idle instance is a piece only the shares whose memory need it holds can use: for
// the whole-GPU shape and larger shares its weight (its memory's part of the GPU) counts
// as fragmented. Without instances the measure is FGD's.
TEST(MigScoreTest, TheMeasureCountsAnIdleInstanceAsAPieceOnlySmallSharesUse) {
  ClusterState s = MigCluster();
  NodeSpec plain{"plain", 64000, 262144, 2, "A100", 81920, 80};
  ASSERT_TRUE(s.AddNode(plain).ok());
  const TargetWorkload w({{0, 1, 1000, {}, 1}, {0, 1, 250, {}, 1}, {0, 1, 500, {}, 1}});
  const FragmentationMeasure m(w, s.models());
  EXPECT_EQ(InstanceWeightMilli(s.node(0), 0), 500);   // 3g.40gb
  EXPECT_EQ(InstanceWeightMilli(s.node(0), 3), 125);   // 1g.10gb
  EXPECT_EQ(InstanceWeightMilli(s.node(0), 4), 1000);  // outside MIG mode
  // Whole GPU: the plain GPU fits, the 1,000 of instances are fragmented; 0.25 (20 GiB):
  // the two 1g.10gb (250); 0.5 (40 GiB): those and the 2g.20gb (500).
  EXPECT_EQ(m.ScaledMigNode(s.node(0)), 1000 + 250 + 500);
  EXPECT_EQ(m.ScaledNode(s.node(0)), 0);  // FGD: five idle GPUs
  ASSERT_TRUE(s.Allocate(Whole(1), {0, {4}}).ok());
  ASSERT_TRUE(s.Allocate(Share(250), {0, {1}}).ok());
  // Free: 3g.40gb and two 1g.10gb (750): all fragmented for the whole GPU; 0.25 and 0.5
  // can use only the 3g.40gb, so the 1g.10gb (250) are fragmented for both.
  EXPECT_EQ(m.ScaledMigNode(s.node(0)), 750 + 250 + 250);
  EXPECT_EQ(m.ScaledMigNode(s.node(1)), m.ScaledNode(s.node(1)));
  ASSERT_TRUE(s.Allocate(Share(300), {1, {0}}).ok());
  EXPECT_EQ(m.ScaledMigNode(s.node(1)), m.ScaledNode(s.node(1)));
  EXPECT_GT(m.ScaledNode(s.node(1)), 0);
}

// One 80 GiB GPU outside MIG mode (GPU 0) before a GPU cut into 3g.40gb, 2g.20gb and two
// 1g.10gb (GPUs 1..4).
NodeSpec PlainFirstSpec(const std::string& name) {
  NodeSpec spec{name, 64000, 262144, 5, "A100", 81920, 80};
  spec.whole_only_gpus = 0b11110;
  spec.device_memory_mib = {81920, 40960, 20480, 10240, 10240};
  return spec;
}

// One 80 GiB GPU cut into 3g.40gb, 2g.20gb and two 1g.10gb (GPUs 0..3), nothing else.
NodeSpec CutSpec() {
  NodeSpec spec = PlainFirstSpec("cut");
  spec.num_gpus = 4;
  spec.whole_only_gpus = 0b1111;
  spec.device_memory_mib = {40960, 20480, 10240, 10240};
  return spec;
}

// A share takes an instance (held whole, no use to whole-GPU tasks) before cutting into
// a GPU a whole-GPU task could take, on the node and across nodes, though the plain GPU
// comes first in index and scan order.
TEST(MigScoreTest, AShareTakesAnInstanceBeforeCuttingAWholeGpu) {
  for (const std::string name : {"fgd", "default", "fgd-strand-gpufit"}) {
    SCOPED_TRACE(name);
    auto policy = BuiltinPlacementPolicies().Create(name, PolicyConfig{});
    ASSERT_TRUE(policy.ok());
    ClusterState one;
    ASSERT_TRUE(one.AddNode(PlainFirstSpec("mixed")).ok());
    EXPECT_EQ((*policy)->Place(one, Share(250)).placement, (Placement{0, {2}}));  // 2g.20gb
    ClusterState two;
    ASSERT_TRUE(two.AddNode(NodeSpec{"plain", 64000, 262144, 1, "A100", 81920, 80}).ok());
    const NodeSpec cut = CutSpec();
    ASSERT_TRUE(two.AddNode(cut).ok());
    EXPECT_EQ((*policy)->Place(two, Share(250)).placement, (Placement{1, {1}}));
  }
}

// The simple scores (bestfit, dotprod, gpupacking, gpuclustering) know instances too
// (score_plugins.h, GpuRoomOf): a share takes the instance on a node, and a cut node's
// instance before a plain node's GPU, idle or (but for gpuclustering, which seeks the
// nodes running its kind of task) partly used, though the plain node comes first.
TEST(MigScoreTest, TheSimpleScoresSendAShareToAnInstanceBeforeAPlainGpu) {
  for (const std::string name : {"bestfit", "dotprod", "gpupacking", "gpuclustering"}) {
    SCOPED_TRACE(name);
    auto policy = BuiltinPlacementPolicies().Create(name, PolicyConfig{});
    ASSERT_TRUE(policy.ok());
    ClusterState one;
    ASSERT_TRUE(one.AddNode(PlainFirstSpec("mixed")).ok());
    EXPECT_EQ((*policy)->Place(one, Share(250)).placement, (Placement{0, {2}}));  // 2g.20gb
    const NodeSpec cut = CutSpec();
    for (const int32_t used : {0, 500}) {
      if (used > 0 && name == "gpuclustering") continue;
      SCOPED_TRACE(used);
      ClusterState two;
      ASSERT_TRUE(two.AddNode(NodeSpec{"plain", 64000, 262144, 8, "A100", 81920, 80}).ok());
      ASSERT_TRUE(two.AddNode(cut).ok());
      if (used > 0) {
        ASSERT_TRUE(two.Allocate(Share(used), {0, {0}}).ok());
      }
      EXPECT_EQ((*policy)->Place(two, Share(250)).placement, (Placement{1, {1}}));
    }
  }
}

// A whole-GPU task takes the plain GPU beside instances (which no whole-GPU task could
// use) rather than break up a node's pair of idle GPUs, though that node comes first.
TEST(MigScoreTest, AWholeGpuTaskTakesThePlainGpuBesideInstancesBeforeBreakingAPair) {
  for (const std::string name : {"fgd", "default"}) {
    SCOPED_TRACE(name);
    auto policy = BuiltinPlacementPolicies().Create(name, PolicyConfig{});
    ASSERT_TRUE(policy.ok());
    ClusterState s;
    ASSERT_TRUE(s.AddNode(NodeSpec{"pair", 64000, 262144, 2, "A100", 81920, 80}).ok());
    ASSERT_TRUE(s.AddNode(PlainFirstSpec("mixed")).ok());
    EXPECT_EQ((*policy)->Place(s, Whole(1)).placement, (Placement{1, {0}}));
  }
}

// The FGD scores' caches (per node version and task shape, gpu_memory_mib included) on
// nodes with instances: a long-lived policy decides every step as a fresh one does, on
// a cluster of plain, mixed and fully cut nodes with tasks placed and released at random.
TEST(MigScoreTest, CachedScoresDecideLikeAFreshPolicy) {
  const std::vector<TargetShape> shapes = {{2000, 1, 125, {}, 5, 0},  {2000, 1, 250, {}, 4, 0},
                                           {4000, 1, 500, {}, 3, 0},  {8000, 1, 1000, {}, 6, 0},
                                           {8000, 2, 1000, {}, 2, 0}, {4000, 0, 0, {}, 2, 0}};
  PolicyConfig config;
  config.target_workload = std::make_shared<const TargetWorkload>(TargetWorkload(shapes));
  ClusterState s;
  for (int i = 0; i < 9; ++i) {
    NodeSpec spec = i % 3 == 0
                        ? NodeSpec{"p" + std::to_string(i), 32000, 262144, 2, "A100", 81920, 80}
                    : i % 3 == 1 ? PlainFirstSpec("m" + std::to_string(i))
                                 : MigSpec();
    spec.name += std::to_string(i);
    ASSERT_TRUE(s.AddNode(spec).ok());
  }
  for (const std::string name : {"fgd", "default"}) {
    SCOPED_TRACE(name);
    auto kept = BuiltinPlacementPolicies().Create(name, config);
    ASSERT_TRUE(kept.ok());
    Rng rng(7);
    ClusterState c = s;
    std::vector<std::pair<Task, Placement>> running;
    int placed = 0, on_instances = 0;
    for (int step = 0; step < 1500; ++step) {
      if (!running.empty() && rng.Uniform(3) == 0) {
        const size_t k = rng.Uniform(running.size());
        ASSERT_TRUE(c.Release(running[k].first, running[k].second).ok());
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      const TargetShape& sh = shapes[rng.Uniform(shapes.size())];
      Task t{"t", "", sh.cpu_milli, 1024, sh.num_gpu, sh.gpu_milli, {}, 0};
      if (t.IsFractional() && rng.Uniform(2) == 0) t.gpu_memory_mib = 4096 << rng.Uniform(4);
      auto fresh = BuiltinPlacementPolicies().Create(name, config);
      ASSERT_TRUE(fresh.ok());
      const PlacementDecision want = (*fresh)->Place(c, t);
      const PlacementDecision got = (*kept)->Place(c, t);
      ASSERT_EQ(got.placed, want.placed) << step;
      if (!got.placed) continue;
      ASSERT_EQ(got.placement, want.placement) << step;
      ASSERT_TRUE(c.Allocate(t, got.placement).ok()) << step;
      for (int32_t g : got.placement.gpus) {
        on_instances += (c.node(got.placement.node).whole_only_gpus >> g & 1) != 0;
      }
      running.emplace_back(t, got.placement);
      ++placed;
    }
    EXPECT_GT(placed, 500);
    EXPECT_GT(on_instances, 100);  // the instances were in play
  }
}

}  // namespace
}  // namespace gpupool::sched
