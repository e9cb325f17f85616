// Each built-in policy on small hand-built clusters where the right answer is known.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>

#include "sched/fragmentation.h"
#include "sched/framework.h"
#include "sched/policy_registry.h"

namespace gpupool::sched {
namespace {

Task T(int64_t cpu, int32_t gpus, int32_t milli) {
  return Task{"t", "", cpu, 1024, gpus, milli, {}, 0};
}

std::unique_ptr<PlacementPolicy> Make(const std::string& name,
                                      std::shared_ptr<const TargetWorkload> w = nullptr) {
  PolicyConfig c;
  c.seed = 7;
  c.target_workload = std::move(w);
  auto p = BuiltinPlacementPolicies().Create(name, c);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

// Three 2-GPU nodes; node 1 has GPU 0 at 500 free and GPU 1 idle.
ClusterState ThreeNodesOneHalfUsed() {
  ClusterState s;
  for (const char* n : {"a", "b", "c"}) EXPECT_TRUE(s.AddNode({n, 32000, 65536, 2, "T4"}).ok());
  EXPECT_TRUE(s.Allocate(T(1000, 1, 500), {1, {0}}).ok());
  return s;
}

TEST(PolicyTest, EveryPolicyPlacesOnAFeasibleNode) {
  for (const auto& e : BuiltinPlacementPolicies().List()) {
    ClusterState s = ThreeNodesOneHalfUsed();
    auto p = Make(e.name);
    for (int i = 0; i < 5; ++i) {
      Task t = T(2000, 1, 400);
      PlacementDecision d = p->Place(s, t);
      ASSERT_TRUE(d.placed) << e.name << ": " << d.reason;
      ASSERT_TRUE(s.Allocate(t, d.placement).ok()) << e.name;
    }
    // 5 x 400 placed somewhere; nothing fits a whole 4-GPU task.
    PlacementDecision no = p->Place(s, T(1000, 4, 1000));
    EXPECT_FALSE(no.placed) << e.name;
    EXPECT_NE(no.reason.find("no node fits"), std::string::npos) << e.name;
  }
}

TEST(PolicyTest, BestFitPicksTheFullestNodeAndTightestGpu) {
  ClusterState s = ThreeNodesOneHalfUsed();
  auto p = Make("bestfit");
  PlacementDecision d = p->Place(s, T(1000, 1, 300));
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.placement.node, 1);
  EXPECT_EQ(d.placement.gpus, std::vector<int32_t>{0});  // the 500-free GPU, not the idle one
}

TEST(PolicyTest, GpuPackingPrefersPartlyUsedGpus) {
  ClusterState s = ThreeNodesOneHalfUsed();
  auto p = Make("gpupacking");
  PlacementDecision d = p->Place(s, T(1000, 1, 500));
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.placement.node, 1);
  EXPECT_EQ(d.placement.gpus, std::vector<int32_t>{0});
  // A whole GPU: node 1 (used node, one idle GPU) beats idle nodes.
  PlacementDecision w = p->Place(s, T(1000, 1, 1000));
  EXPECT_EQ(w.placement.node, 1);
  EXPECT_EQ(w.placement.gpus, std::vector<int32_t>{1});
}

TEST(PolicyTest, GpuClusteringPrefersNodesWithTheSameRequestKind) {
  ClusterState s;
  for (const char* n : {"a", "b", "c"}) ASSERT_TRUE(s.AddNode({n, 32000, 65536, 4, "T4"}).ok());
  ASSERT_TRUE(s.Allocate(T(1000, 1, 1000), {0, {0}}).ok());  // node 0 runs a 1-GPU task
  ASSERT_TRUE(s.Allocate(T(1000, 1, 300), {2, {0}}).ok());   // node 2 runs a shared task
  auto p = Make("gpuclustering");
  EXPECT_EQ(p->Place(s, T(1000, 1, 200)).placement.node, 2);
  EXPECT_EQ(p->Place(s, T(1000, 1, 1000)).placement.node, 0);
  EXPECT_EQ(p->Place(s, T(1000, 2, 1000)).placement.node, 1);  // idle beats other kinds
}

TEST(PolicyTest, DotProductPicksTheTightestNode) {
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"big", 96000, 65536, 8, "G2"}).ok());
  ASSERT_TRUE(s.AddNode({"small", 16000, 65536, 2, "G2"}).ok());
  auto p = Make("dotprod");
  EXPECT_EQ(p->Place(s, T(4000, 1, 1000)).placement.node, 1);
}

TEST(PolicyTest, FgdFillsTheHoleThatWouldOtherwiseBeFragment) {
  // Target workload: half GPUs and whole GPUs. A 500-task on the half-used GPU of node 1
  // removes a fragment; on an idle node it would create one.
  auto w = std::make_shared<const TargetWorkload>(
      TargetWorkload({{1000, 1, 500, {}, 1}, {1000, 1, 1000, {}, 1}}));
  ClusterState s;
  for (const char* n : {"a", "b", "c"}) ASSERT_TRUE(s.AddNode({n, 32000, 65536, 2, "T4"}).ok());
  ASSERT_TRUE(s.Allocate(T(1000, 1, 500), {1, {1}}).ok());
  for (const char* name : {"fgd", "fgd-exact-bestfit", "fgd-strand-gpufit", "fgd-strand-lookahead",
                           "fgd-strand-lookahead-open"}) {
    auto p = Make(name, w);
    PlacementDecision d = p->Place(s, T(1000, 1, 500));
    ASSERT_TRUE(d.placed) << name;
    EXPECT_EQ(d.placement.node, 1) << name;
    EXPECT_EQ(d.placement.gpus, std::vector<int32_t>{1}) << name;
  }
}

TEST(PolicyTest, TiesGoToTheFirstNodeInScanOrder) {
  ClusterState s;
  for (const char* n : {"a", "b", "c"}) ASSERT_TRUE(s.AddNode({n, 32000, 65536, 2, "T4"}).ok());
  ASSERT_TRUE(s.SetScanOrder({2, 0, 1}).ok());
  for (const char* name : {"bestfit", "fgd", "fgd-strand-gpufit", "fgd-strand-lookahead",
                           "fgd-strand-lookahead-open", "gpupacking", "dotprod", "gpuclustering"}) {
    EXPECT_EQ(Make(name)->Place(s, T(1000, 1, 1000)).placement.node, 2) << name;
  }
}

TEST(PolicyTest, RandomIsReproducibleBySeed) {
  ClusterState s;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(s.AddNode({fmt::format("n{}", i), 32000, 65536, 2, "T4"}).ok());
  }
  auto a = Make("random");
  auto b = Make("random");
  std::vector<int32_t> seen_a, seen_b;
  for (int i = 0; i < 10; ++i) {
    seen_a.push_back(a->Place(s, T(1000, 1, 300)).placement.node);
    seen_b.push_back(b->Place(s, T(1000, 1, 300)).placement.node);
  }
  EXPECT_EQ(seen_a, seen_b);
  std::sort(seen_a.begin(), seen_a.end());
  EXPECT_NE(seen_a.front(), seen_a.back());  // not always the same node
}

TEST(PolicyTest, ModelConstraintIsHonoured) {
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"t4", 32000, 65536, 2, "T4"}).ok());
  ASSERT_TRUE(s.AddNode({"v100", 32000, 65536, 2, "V100"}).ok());
  Task t = T(1000, 1, 1000);
  t.gpu_models = {"V100"};
  for (const auto& e : BuiltinPlacementPolicies().List()) {
    EXPECT_EQ(Make(e.name)->Place(s, t).placement.node, 1) << e.name;
  }
}

TEST(RegistryTest, RejectsDuplicatesAndUnknownNames) {
  PlacementPolicyRegistry r;
  auto factory = [](const PolicyConfig&) -> std::unique_ptr<PlacementPolicy> { return nullptr; };
  EXPECT_TRUE(r.Register("x", "d", factory).ok());
  EXPECT_EQ(r.Register("x", "d", factory).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(r.RegisterAlias("y", "nope").code(), StatusCode::kNotFound);
  EXPECT_TRUE(r.RegisterAlias("y", "x").ok());
  EXPECT_EQ(r.RegisterAlias("x", "y").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Create("x").status().code(), StatusCode::kInternal);  // null factory result
  auto unknown = BuiltinPlacementPolicies().Create("nope");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("fgd"), std::string::npos);
  EXPECT_TRUE(BuiltinPlacementPolicies().Contains("default"));
}

}  // namespace
}  // namespace gpupool::sched
