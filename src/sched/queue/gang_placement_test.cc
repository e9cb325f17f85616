#include "sched/queue/gang_placement.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "sched/policy_registry.h"
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

// Red team 7, finding 3: `--tasks 4 --gpu-share 0.25` put all four ranks on GPU 0, and
// NCCL refuses two ranks of a communicator on one device ("Duplicate GPU detected").
std::vector<Task> Shares(int n, int milli, const std::string& job = "g") {
  std::vector<Task> tasks(static_cast<size_t>(n), GpuTask(1, milli));
  for (Task& t : tasks) t.job_id = job;
  return tasks;
}

std::set<std::pair<int32_t, int32_t>> GpusOf(const std::vector<Placement>& placements) {
  std::set<std::pair<int32_t, int32_t>> out;
  for (const Placement& p : placements) {
    for (int32_t g : p.gpus) out.emplace(p.node, g);
  }
  return out;
}

TEST(PlaceGang, TheSharesOfOneGangEachTakeADistinctGpu) {
  ClusterState cluster = MakeCluster(1, 8);
  FirstFitForTest policy;  // the tightest GPU first: it packed all four onto GPU 0
  const std::vector<Task> tasks = Shares(4, 250);
  auto g = PlaceGang(cluster, tasks, policy);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->placed) << g->reason;
  EXPECT_EQ(GpusOf(g->placements).size(), 4u);
  // Only the shares are taken: the holds that kept siblings apart are gone.
  EXPECT_EQ(cluster.TotalFree().gpu_milli, 8000 - 4 * 250);
  EXPECT_EQ(cluster.node(0).FullyFreeGpus(), 4);
  ASSERT_TRUE(ReleaseGang(cluster, tasks, g->placements).ok());
  EXPECT_EQ(cluster.TotalFree(), cluster.TotalCapacity());
}

TEST(PlaceGang, SharesOfAGangSpreadOverNodesWhenOneNodeHasTooFewGpus) {
  ClusterState cluster = MakeCluster(3, 2);
  FirstFitForTest policy;
  auto g = PlaceGang(cluster, Shares(5, 300), policy);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->placed) << g->reason;
  EXPECT_EQ(GpusOf(g->placements).size(), 5u);
}

TEST(PlaceGang, AGangWithMoreSharesThanGpusWaitsOrNeverRuns) {
  ClusterState cluster = MakeCluster(1, 2);
  FirstFitForTest policy;
  const auto before = Snapshot(cluster);
  // 4 x 0.25 fits one GPU by capacity, but the gang needs 4 GPUs.
  auto g = PlaceGang(cluster, Shares(4, 250), policy);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->placed);
  EXPECT_TRUE(g->placements.empty());
  EXPECT_NE(g->reason.find("task 3 of 4"), std::string::npos) << g->reason;
  EXPECT_NE(g->reason.find("a GPU of their own"), std::string::npos) << g->reason;
  EXPECT_EQ(Snapshot(cluster), before);
  std::string why;
  EXPECT_TRUE(GangObviouslyUnplaceable(cluster, Shares(4, 250), &why));
  EXPECT_EQ(why,
            "its 4 tasks with a GPU share each need a GPU of their own (NCCL runs one rank per "
            "GPU); the nodes that could host them have 2 GPUs in all");
  // Mixed sizes, as before this rule packed onto one GPU (FractionalTasksShareOneGpu).
  EXPECT_TRUE(
      GangObviouslyUnplaceable(cluster, {GpuTask(1, 500), GpuTask(1, 300), GpuTask(1, 200)}, &why));
  EXPECT_FALSE(GangObviouslyUnplaceable(cluster, Shares(2, 250), &why));
  EXPECT_FALSE(GangObviouslyUnplaceable(MakeCluster(1, 8), Shares(4, 250), &why));
  // Only the nodes that could host a share count: 2 GPUs of the right model.
  ClusterState mixed = MakeCluster(1, 2);
  ASSERT_TRUE(mixed.AddNode(NodeSpec{"a", 64000, 262144, 8, "A100", 0, 0}).ok());
  std::vector<Task> v100 = Shares(3, 250);
  for (Task& t : v100) t.gpu_models = {"V100"};
  EXPECT_TRUE(GangObviouslyUnplaceable(mixed, v100, &why));
  EXPECT_NE(why.find("have 2 GPUs in all"), std::string::npos) << why;

  // Busy now, possible later: the gang waits (not placed) and is not "never".
  ClusterState busy = MakeCluster(1, 4);
  ASSERT_TRUE(busy.Allocate(GpuTask(2), Placement{0, {0, 1}}).ok());
  auto w = PlaceGang(busy, Shares(3, 100), policy);
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->placed);
  EXPECT_FALSE(GangObviouslyUnplaceable(busy, Shares(3, 100), &why));
}

TEST(PlaceGang, SharesOfDifferentJobsStillPackOntoOneGpu) {
  ClusterState cluster = MakeCluster(1, 8);
  FirstFitForTest policy;
  auto a = PlaceGang(cluster, Shares(4, 250, "a"), policy);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->placed) << a->reason;
  auto b = PlaceGang(cluster, Shares(4, 250, "b"), policy);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->placed) << b->reason;
  // b's ranks join a's GPUs (the tightest), one each: 4 GPUs half used, 4 idle.
  EXPECT_EQ(GpusOf(b->placements), GpusOf(a->placements));
  EXPECT_EQ(cluster.node(0).FullyFreeGpus(), 4);
  // Single-task jobs pack as before: two halves of two jobs on one GPU.
  ClusterState one = MakeCluster(1, 2);
  auto x = PlaceGang(one, {GpuTask(1, 500)}, policy);
  auto y = PlaceGang(one, {GpuTask(1, 500)}, policy);
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_TRUE(x->placed && y->placed);
  EXPECT_EQ(x->placements, y->placements);
  // A gang with one share and whole GPUs is not held apart from anything.
  ClusterState whole = MakeCluster(1, 2);
  auto m = PlaceGang(whole, {GpuTask(1), GpuTask(1, 500)}, policy);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->placed) << m->reason;
  EXPECT_EQ(whole.TotalFree().gpu_milli, 500);
}

// Two MIG instances of one GPU have its PCI bus id, which NCCL's duplicate check compares:
// a gang's shares take instances of different physical GPUs.
TEST(PlaceGang, TheSharesOfOneGangTakeMigInstancesOfDifferentGpus) {
  NodeSpec spec{"mig", 64000, 262144, 4, "A100", 40960, 80};
  spec.whole_only_gpus = 0xf;  // two GPUs, each cut into two 1g.10gb-like instances
  spec.device_memory_mib = {10240, 10240, 10240, 10240};
  spec.physical_gpus = {0, 0, 1, 1};
  ClusterState cluster;
  ASSERT_TRUE(cluster.AddNode(spec).ok());
  FirstFitForTest policy;  // the smallest idle instance, first on ties: 0, then 1
  std::vector<Task> two = Shares(2, 100);
  for (Task& t : two) t.gpu_memory_mib = 4096;
  auto g = PlaceGang(cluster, two, policy);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE(g->placed) << g->reason;
  std::set<int32_t> physical;
  for (const Placement& p : g->placements) physical.insert(spec.physical_gpus[p.gpus[0]]);
  EXPECT_EQ(physical.size(), 2u);
  EXPECT_EQ(cluster.TotalFree().gpu_milli, 2000);  // the two instances, nothing held
  std::vector<Task> three = Shares(3, 100);
  for (Task& t : three) t.gpu_memory_mib = 4096;
  std::string why;
  EXPECT_TRUE(GangObviouslyUnplaceable(cluster, three, &why));
  EXPECT_NE(why.find("have 2 GPUs in all"), std::string::npos) << why;
  // Two shares of another job still take the other instances of those GPUs.
  auto other = PlaceGang(cluster, {GpuTask(1, 100)}, policy);
  ASSERT_TRUE(other.ok() && other->placed);
  NodeSpec bad = spec;
  bad.name = "bad";
  bad.physical_gpus = {0, 1};
  EXPECT_FALSE(cluster.AddNode(bad).ok());
}

// A gang held for mpirun (--mpi, run/alloc --tasks) is launched as one per node, with all
// its tasks' GPUs there: its shares pack (onto one GPU, which it then holds whole, as the
// red team saw: GPUPOOL_GPU_ENFORCEMENT=exclusive), as any holder's would.
TEST(PlaceGang, TheSharesOfAGangHeldForMpirunStillPack) {
  ClusterState cluster = MakeCluster(1, 2);
  FirstFitForTest policy;
  std::vector<Task> tasks = Shares(4, 250);
  for (Task& t : tasks) t.pack_shares = true;
  std::string why;
  EXPECT_FALSE(GangObviouslyUnplaceable(cluster, tasks, &why)) << why;
  auto g = PlaceGang(cluster, tasks, policy);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->placed) << g->reason;
  EXPECT_EQ(GpusOf(g->placements).size(), 1u);
  EXPECT_EQ(cluster.node(0).FullyFreeGpus(), 1);
  // The flag is part of a share's shape, so that no cache (failed gangs in a pass, the
  // explain step's) takes one kind of gang for the other; a whole-GPU task ignores it.
  EXPECT_FALSE(ShapeOf(tasks[0]) == ShapeOf(Shares(1, 250)[0]));
  Task whole = GpuTask(1);
  whole.pack_shares = true;
  EXPECT_TRUE(ShapeOf(whole) == ShapeOf(GpuTask(1)));
}

// Every built-in policy (FrameworkPolicy: score indexes keyed by task shape, synced from
// the journal) keeps a gang's shares apart, also when its index for the shape was built
// before the gang's first share changed a GPU.
TEST(PlaceGang, EveryPolicyAndItsCachedIndexKeepAGangsSharesApart) {
  for (const auto& e : BuiltinPlacementPolicies().List()) {
    SCOPED_TRACE(e.name);
    auto policy = BuiltinPlacementPolicies().Create(e.name);
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    ClusterState cluster = MakeCluster(2, 4);
    // A share of another job, placed first so that the policy has the shape cached and
    // a GPU half used for the gang's shares to pack onto.
    auto other = PlaceGang(cluster, Shares(1, 250, "other"), **policy);
    ASSERT_TRUE(other.ok() && other->placed);
    const std::vector<Task> tasks = Shares(6, 250);
    auto g = PlaceGang(cluster, tasks, **policy);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    ASSERT_TRUE(g->placed) << g->reason;
    EXPECT_EQ(GpusOf(g->placements).size(), 6u);
    EXPECT_EQ(cluster.TotalFree().gpu_milli, 8000 - 7 * 250);
    // The policy's cache after the gang: another gang of the shape is kept apart too.
    const std::vector<Task> more = Shares(2, 250, "more");
    auto h = PlaceGang(cluster, more, **policy);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(h->placed) << h->reason;
    EXPECT_EQ(GpusOf(h->placements).size(), 2u);
  }
}

// On single-owner (MPS) GPUs the holds have no owner: they neither take a GPU's owner
// nor keep it once the gang is gone.
TEST(PlaceGang, GangSharesOnSingleOwnerGpusKeepTheOwnerRule) {
  ClusterState cluster;
  NodeSpec spec{"m", 64000, 262144, 4, "A100", 0, 0};
  spec.single_owner_gpus = 0xf;
  ASSERT_TRUE(cluster.AddNode(spec).ok());
  FirstFitForTest policy;
  std::vector<Task> tasks = Shares(3, 250);
  for (Task& t : tasks) t.owner = 7;
  auto g = PlaceGang(cluster, tasks, policy);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE(g->placed) << g->reason;
  EXPECT_EQ(GpusOf(g->placements).size(), 3u);
  for (const Placement& p : g->placements) EXPECT_EQ(cluster.OwnerOf(0, p.gpus[0]), 7);
  ASSERT_TRUE(ReleaseGang(cluster, tasks, g->placements).ok());
  for (int32_t i = 0; i < 4; ++i) EXPECT_EQ(cluster.OwnerOf(0, i), 0);
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
            "no node could ever host it: it asks for 9 GPUs on one node; the most any node "
            "has is 8");
  Task model = GpuTask(8);
  model.gpu_models = {"A100"};
  EXPECT_EQ(never(model),
            "no node could ever host it: GPU model A100: the nodes with 8 GPUs "
            "have V100");
  Task cap = GpuTask(1);
  cap.min_capability = 95;
  EXPECT_EQ(never(cap),
            "no node could ever host it: compute capability 9.5 or newer (--min-capability): "
            "the newest of the nodes that could otherwise host it is 8.0");
  Task env = GpuTask(8);
  env.allowed_nodes = {"a"};
  EXPECT_EQ(never(env),
            "no node could ever host it: its environment runs only on a, none of "
            "which has the GPUs it asks for");
  Task cpu = GpuTask(4);
  cpu.cpu_milli = 32000;
  cpu.gpu_models = {"A100"};
  EXPECT_EQ(never(cpu),
            "no node could ever host it: it asks for 32 CPUs (--cpus); the most "
            "any node with the GPUs has is 16 CPUs");
  Task mem;
  mem.cpu_milli = 1500;
  mem.memory_mib = 300 * 1024;
  EXPECT_EQ(never(mem),
            "no node could ever host it: it asks for 307200 MiB of memory "
            "(--mem); the most any node has is 262144 MiB");
  // A gang's task is named from 0, as GPUPOOL_TASK_INDEX (red team 7, finding 7: "task 1"
  // named a one-task job's only task).
  why.clear();
  EXPECT_TRUE(GangObviouslyUnplaceable(cluster, {GpuTask(9), GpuTask(9)}, &why));
  EXPECT_EQ(why,
            "no node could ever host task 0 of its 2: it asks for 9 GPUs on one node; the most "
            "any node has is 8");
}

}  // namespace
}  // namespace gpupool::sched
