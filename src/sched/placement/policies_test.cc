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

Task ShareOf(int64_t owner, int32_t milli) {
  Task t = T(1000, 1, milli);
  t.owner = owner;
  return t;
}

// Node "mps" (2 single-owner GPUs): GPU 0 holds a 600 share of owner 1, GPU 1 is idle.
// Node "plain" (2 GPUs, not single-owner) holds the same share on GPU 0.
ClusterState SingleOwnerCluster() {
  ClusterState s;
  NodeSpec mps{"mps", 32000, 65536, 2, "T4"};
  mps.single_owner_gpus = 0b11;
  EXPECT_TRUE(s.AddNode(mps).ok());
  EXPECT_TRUE(s.AddNode({"plain", 32000, 65536, 2, "T4"}).ok());
  EXPECT_TRUE(s.Allocate(ShareOf(1, 600), {0, {0}}).ok());
  EXPECT_TRUE(s.Allocate(ShareOf(1, 600), {1, {0}}).ok());
  return s;
}

// One policy on SingleOwnerCluster; a failed ASSERT ends only this policy's check.
void CheckSingleOwnerRule(const std::string& name) {
  SCOPED_TRACE(name);
  ClusterState s = SingleOwnerCluster();
  auto p = Make(name);
  // Owner 1 first, then owner 2 with the same shape on the same state (caches by shape
  // and node version must tell them apart); every decision is one Allocate accepts.
  for (int round = 0; round < 3; ++round) {
    for (int64_t owner : {1, 2, 1, 2}) {
      const Task t = ShareOf(owner, 300);
      PlacementDecision d = p->Place(s, t);
      ASSERT_TRUE(d.placed) << d.reason;
      EXPECT_FALSE(owner == 2 && d.placement == (Placement{0, {0}}));
      ClusterState copy = s;
      ASSERT_TRUE(copy.Allocate(t, d.placement).ok()) << "owner " << owner;
    }
  }
  // Fill everything but GPU 0 of "mps": owner 2 has nowhere to go, owner 1 goes there.
  ASSERT_TRUE(s.Allocate(T(0, 1, 1000), {0, {1}}).ok());
  ASSERT_TRUE(s.Allocate(T(0, 1, 1000), {1, {1}}).ok());
  ASSERT_TRUE(s.Allocate(T(0, 1, 400), {1, {0}}).ok());
  PlacementDecision none = p->Place(s, ShareOf(2, 300));
  EXPECT_FALSE(none.placed);
  PlacementDecision own = p->Place(s, ShareOf(1, 300));
  ASSERT_TRUE(own.placed);
  EXPECT_EQ(own.placement, (Placement{0, {0}}));
  // Once owner 1's share ends, owner 2 may take the GPU.
  ASSERT_TRUE(s.Release(ShareOf(1, 600), {0, {0}}).ok());
  PlacementDecision freed = p->Place(s, ShareOf(2, 300));
  ASSERT_TRUE(freed.placed);
  EXPECT_EQ(freed.placement, (Placement{0, {0}}));
}

TEST(PolicyTest, EveryPolicyKeepsAnotherOwnersShareOffASingleOwnerGpu) {
  for (const auto& e : BuiltinPlacementPolicies().List()) CheckSingleOwnerRule(e.name);
}

// GpuPacking scores a node by the GPUs the task may use: for owner 2 the held GPU of
// "mps" is no partly used GPU, so "plain" (a partly used one it may share) wins.
TEST(PolicyTest, GpuPackingCountsOnlyGpusTheOwnerMayUse) {
  ClusterState s = SingleOwnerCluster();
  auto p = Make("gpupacking");
  EXPECT_EQ(p->Place(s, ShareOf(2, 300)).placement, (Placement{1, {0}}));
  EXPECT_EQ(p->Place(s, ShareOf(1, 300)).placement, (Placement{0, {0}}));
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
