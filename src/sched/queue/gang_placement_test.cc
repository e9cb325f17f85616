#include "sched/queue/gang_placement.h"

#include <gtest/gtest.h>

#include "sched/queue/first_fit_for_test.h"
#include "sched/queue/queue_test_util.h"

namespace gpupool::sched {
namespace {

using testing::FirstFitForTest;
using testing::GpuTask;
using testing::MakeCluster;
using testing::Snapshot;

TEST(PlaceGang, SpreadsAGangThatFitsOnlyAcrossNodes) {
  ClusterState cluster = MakeCluster(2, 4);
  FirstFitForTest policy;
  std::vector<Task> tasks = {GpuTask(4), GpuTask(4)};
  auto g = PlaceGang(cluster, tasks, policy);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE(g->placed) << g->reason;
  ASSERT_EQ(g->placements.size(), 2u);
  EXPECT_NE(g->placements[0].node, g->placements[1].node);
  EXPECT_EQ(cluster.TotalFree().gpu_milli, 0);
  ASSERT_TRUE(ReleaseGang(cluster, tasks, g->placements).ok());
  EXPECT_EQ(cluster.TotalFree(), cluster.TotalCapacity());
}

TEST(PlaceGang, GangThatCannotFitLeavesClusterUnchanged) {
  ClusterState cluster = MakeCluster(3, 4);
  FirstFitForTest policy;
  // 8 GPUs stay free in total, but only node 0 can take a 4-GPU task.
  ASSERT_TRUE(cluster.Allocate(GpuTask(1), Placement{1, {2}}).ok());
  ASSERT_TRUE(cluster.Allocate(GpuTask(3), Placement{2, {0, 1, 3}}).ok());
  const auto before = Snapshot(cluster);
  // The first task is placed on node 0, then the second has nowhere to go.
  std::vector<Task> tasks = {GpuTask(4), GpuTask(4)};
  auto g = PlaceGang(cluster, tasks, policy);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->placed);
  EXPECT_TRUE(g->placements.empty());
  EXPECT_NE(g->reason.find("task 2 of 2"), std::string::npos) << g->reason;
  EXPECT_EQ(Snapshot(cluster), before);
  EXPECT_GE(policy.calls, 2);  // it really tried, then rolled back
}

TEST(PlaceGang, MultiGpuTaskNeverSpansNodes) {
  ClusterState cluster = MakeCluster(2, 4);
  FirstFitForTest policy;
  const auto before = Snapshot(cluster);
  auto g = PlaceGang(cluster, {GpuTask(8)}, policy);  // 8 GPUs free in total, 4 per node
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->placed);
  EXPECT_EQ(Snapshot(cluster), before);
}

TEST(PlaceGang, HonoursGpuModelConstraints) {
  ClusterState cluster;
  ASSERT_TRUE(cluster.AddNode(NodeSpec{"v", 64000, 262144, 4, "V100", 0, 0}).ok());
  ASSERT_TRUE(cluster.AddNode(NodeSpec{"a", 64000, 262144, 4, "A100", 0, 0}).ok());
  FirstFitForTest policy;
  Task want_a100 = GpuTask(2);
  want_a100.gpu_models = {"A100"};
  Task want_any = GpuTask(4);
  auto g = PlaceGang(cluster, {want_a100, want_any}, policy);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->placed) << g->reason;
  EXPECT_EQ(cluster.node(g->placements[0].node).gpu_model, "A100");
  EXPECT_EQ(cluster.node(g->placements[1].node).gpu_model, "V100");

  // A second A100 task of 4 GPUs cannot fit (2 A100 GPUs left) although 0 V100 and 2
  // A100 GPUs are free: nothing changes.
  Task big_a100 = GpuTask(4);
  big_a100.gpu_models = {"A100"};
  const auto before = Snapshot(cluster);
  auto h = PlaceGang(cluster, {big_a100}, policy);
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(h->placed);
  EXPECT_EQ(Snapshot(cluster), before);
}

TEST(PlaceGang, FractionalTasksShareOneGpu) {
  ClusterState cluster = MakeCluster(1, 2);
  FirstFitForTest policy;
  auto g = PlaceGang(cluster, {GpuTask(1, 500), GpuTask(1, 300), GpuTask(1, 200)}, policy);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->placed) << g->reason;
  EXPECT_EQ(cluster.node(0).FullyFreeGpus(), 1);
  EXPECT_EQ(cluster.TotalFree().gpu_milli, 1000);
}

TEST(PlaceGang, EmptyGangIsTriviallyPlaced) {
  ClusterState cluster = MakeCluster(1, 1);
  FirstFitForTest policy;
  auto g = PlaceGang(cluster, {}, policy);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->placed);
}

// A broken policy that proposes a GPU index the node does not have.
class BrokenPolicy final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "broken"; }
  PlacementDecision Place(const ClusterState& state, const Task& task) override {
    if (++calls == 1) return inner.Place(state, task);
    PlacementDecision d;
    d.placed = true;
    d.placement = Placement{0, {99}};
    return d;
  }
  FirstFitForTest inner;
  int calls = 0;
};

TEST(PlaceGang, PolicyProposingInvalidPlacementIsAnErrorAndRollsBack) {
  ClusterState cluster = MakeCluster(2, 4);
  BrokenPolicy policy;
  const auto before = Snapshot(cluster);
  auto g = PlaceGang(cluster, {GpuTask(1), GpuTask(1)}, policy);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInternal);
  EXPECT_NE(g.status().message().find("broken"), std::string::npos);
  EXPECT_EQ(Snapshot(cluster), before);
}

TEST(GangObviouslyUnplaceable, FindsTasksNoNodeCouldHost) {
  ClusterState cluster = MakeCluster(2, 4);
  std::string why;
  EXPECT_FALSE(GangObviouslyUnplaceable(cluster, {GpuTask(4), GpuTask(4)}, &why));
  EXPECT_TRUE(GangObviouslyUnplaceable(cluster, {GpuTask(8)}, &why));
  EXPECT_NE(why.find("8 GPUs"), std::string::npos) << why;
  Task t4 = GpuTask(4);
  t4.gpu_models = {"H100"};
  EXPECT_TRUE(GangObviouslyUnplaceable(cluster, {t4}, &why));
  EXPECT_NE(why.find("H100"), std::string::npos) << why;
  EXPECT_TRUE(GangObviouslyUnplaceable(cluster, {GpuTask(4), GpuTask(4), GpuTask(1)}, &why));
  EXPECT_NE(why.find("more than the cluster"), std::string::npos) << why;
}

// Issue 15 A.2: "no node could ever host task 1 (9 GPUs x 1000 thousandths ...)" named
// none of the constraints; the reason now names the one that fails and what nodes have.
TEST(GangObviouslyUnplaceable, TheReasonNamesTheConstraintThatFails) {
  ClusterState cluster;
  NodeSpec a{"a", 16000, 64 * 1024, 4};
  a.gpu_model = "A100";
  a.gpu_capability = 80;
  NodeSpec b{"b", 64000, 256 * 1024, 8};
  b.gpu_model = "V100";
  b.gpu_capability = 70;
  ASSERT_TRUE(cluster.AddNode(a).ok());
  ASSERT_TRUE(cluster.AddNode(b).ok());
  std::string why;
  auto never = [&](Task t) {
    why.clear();
    EXPECT_TRUE(GangObviouslyUnplaceable(cluster, {t}, &why));
    return why;
  };
  EXPECT_EQ(never(GpuTask(9)),
            "no node could ever host task 1: it asks for 9 GPUs on one node; the most any node "
            "has is 8");
  Task model = GpuTask(8);
  model.gpu_models = {"A100"};
  EXPECT_EQ(never(model),
            "no node could ever host task 1: GPU model A100: the nodes with 8 GPUs "
            "have V100");
  Task cap = GpuTask(1);
  cap.min_capability = 95;
  EXPECT_EQ(never(cap),
            "no node could ever host task 1: compute capability 9.5 or newer (--min-capability): "
            "the newest of the nodes that could otherwise host it is 8.0");
  Task env = GpuTask(8);
  env.allowed_nodes = {"a"};
  EXPECT_EQ(never(env),
            "no node could ever host task 1: its environment runs only on a, none of "
            "which has the GPUs it asks for");
  Task cpu = GpuTask(4);
  cpu.cpu_milli = 32000;
  cpu.gpu_models = {"A100"};
  EXPECT_EQ(never(cpu),
            "no node could ever host task 1: it asks for 32 CPUs (--cpus); the most "
            "any node with the GPUs has is 16 CPUs");
  Task mem;
  mem.cpu_milli = 1500;
  mem.memory_mib = 300 * 1024;
  EXPECT_EQ(never(mem),
            "no node could ever host task 1: it asks for 307200 MiB of memory "
            "(--mem); the most any node has is 262144 MiB");
}

}  // namespace
}  // namespace gpupool::sched
