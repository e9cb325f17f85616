// A job's own node choice (--nodelist, --exclude: Task::nodelist, Task::exclude) through
// the whole profile with the built-in placement policies: placement honours it for GPU
// and CPU-only tasks alike, and a job it leaves no node says so in its pending reason.
#include <gtest/gtest.h>

#include <map>

#include "sched/admission/profile.h"
#include "sched/queue/queue_test_util.h"

namespace gpupool::sched {
namespace {

using testing::GpuTask;
using testing::Job;

// Runs one pass over `pending` on `cluster` with placement `policy`; started job id ->
// node index, and every other job's reason under "why:" + id.
std::map<std::string, std::string> RunPass(ClusterState& cluster,
                                           const std::vector<QueuedJob>& pending,
                                           const std::string& policy) {
  ProfileSpec spec;
  spec.placement_policy = policy;
  auto profile = SchedulingProfile::Create(spec);
  EXPECT_TRUE(profile.ok()) << profile.status().ToString();
  const std::vector<const QueuedJob*> ptrs = testing::Pointers(pending);
  PassContext ctx;
  ctx.pending = ptrs;
  auto r = (*profile)->Run(cluster, ctx);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::map<std::string, std::string> out;
  for (const auto& [i, why] : r->reasons) out["why:" + pending[i].id] = why;
  for (const auto& s : r->started) {
    out[pending[s.pending_index].id] = cluster.node(s.placements[0].node).name;
  }
  return out;
}

Task CpuTask() { return GpuTask(0, 0, 2000, 1024); }

constexpr const char* kPolicies[] = {"default", "bestfit", "gpupacking", "fgd", "dotprod"};

// On two idle, equal nodes every policy takes n0 first: the choice alone moves a job.
TEST(NodeChoice, ExcludeAndNodelistMoveGpuAndCpuOnlyTasks) {
  for (const char* policy : kPolicies) {
    SCOPED_TRACE(policy);
    std::vector<QueuedJob> pending;
    pending.push_back(Job("plain", "alice", 0, {GpuTask(1)}));
    pending.push_back(Job("gpu-x", "alice", 0, {GpuTask(1)}));
    pending.back().tasks[0].exclude = {"n0"};
    pending.push_back(Job("cpu-x", "alice", 0, {CpuTask()}));
    pending.back().tasks[0].exclude = {"n0"};
    pending.push_back(Job("cpu-w", "alice", 0, {CpuTask()}));
    pending.back().tasks[0].nodelist = {"n1"};
    pending.push_back(Job("gang-w", "alice", 0, {CpuTask(), CpuTask()}));
    for (Task& t : pending.back().tasks) t.nodelist = {"n1"};
    ClusterState cluster = testing::MakeCluster(2, 2);
    const auto got = RunPass(cluster, pending, policy);
    EXPECT_EQ(got.at("plain"), "n0");
    EXPECT_EQ(got.at("gpu-x"), "n1");
    EXPECT_EQ(got.at("cpu-x"), "n1");
    EXPECT_EQ(got.at("cpu-w"), "n1");
    EXPECT_EQ(got.at("gang-w"), "n1");
    // Nothing of the chosen jobs landed on n0: only "plain"'s GPU is used there.
    EXPECT_EQ(cluster.node(0).cpu_free_milli, 64000 - 1000);
  }
}

TEST(NodeChoice, GpuTaskWithNodelistWaitsForItsNodeSayingWhy) {
  std::vector<QueuedJob> pending;
  pending.push_back(Job("fill", "alice", 0, {GpuTask(2)}));  // takes n0's two GPUs
  pending.push_back(Job("on-n0", "alice", 0, {GpuTask(1)}));
  pending.back().tasks[0].nodelist = {"n0"};
  ClusterState cluster = testing::MakeCluster(2, 2);
  const auto got = RunPass(cluster, pending, "default");
  EXPECT_EQ(got.at("fill"), "n0");
  EXPECT_EQ(got.at("why:on-n0"),
            "needs 1 idle GPU on the nodes its --nodelist / --exclude leave; largest idle block "
            "on any node: 0; 0/2 nodes are available: 1 insufficient GPUs, 1 not in its "
            "--nodelist");
  EXPECT_EQ(cluster.node(1).gpu_free_milli, (std::vector<int32_t>{1000, 1000}));
}

TEST(NodeChoice, CpuOnlyTaskWaitsForItsNodeSayingWhy) {
  std::vector<QueuedJob> pending;
  pending.push_back(Job("fill", "alice", 0, {GpuTask(0, 0, 64000, 1024)}));
  pending.push_back(Job("not-n1", "alice", 0, {CpuTask()}));
  pending.back().tasks[0].exclude = {"n1"};
  ClusterState cluster = testing::MakeCluster(2, 0);
  const auto got = RunPass(cluster, pending, "default");
  EXPECT_EQ(got.at("fill"), "n0");
  EXPECT_EQ(got.at("why:not-n1"),
            "needs 2 CPUs and 1024 MiB memory; no node its --nodelist / --exclude leave has them "
            "free; 0/2 nodes are available: 1 insufficient CPU, 1 excluded (--exclude)");
}

TEST(NodeChoice, NoNodeLeftIsNamedAsNeverRunning) {
  std::vector<QueuedJob> pending;
  pending.push_back(Job("typo", "alice", 0, {CpuTask()}));
  pending.back().tasks[0].nodelist = {"n7", "n8"};
  pending.push_back(Job("all-out", "alice", 0, {GpuTask(1)}));
  pending.back().tasks[0].exclude = {"big", "n0", "n1"};
  pending.push_back(Job("too-big", "alice", 0, {GpuTask(2), GpuTask(2)}));
  for (Task& t : pending.back().tasks) t.nodelist = {"n1"};
  pending.push_back(Job("no-gpus-there", "alice", 0, {GpuTask(4)}));
  pending.back().tasks[0].nodelist = {"n1"};
  ClusterState cluster = testing::MakeCluster(2, 2);
  ASSERT_TRUE(cluster.AddNode(NodeSpec{"big", 64000, 262144, 4, "V100", 0, 0}).ok());
  const auto got = RunPass(cluster, pending, "default");
  EXPECT_EQ(got.at("why:typo"),
            "cannot run on any node: no node could ever host task 1: --nodelist n7, n8: no such "
            "node in this pool; its nodes are big, n0, n1 (`gpupool nodes` lists them)");
  EXPECT_EQ(got.at("why:all-out"),
            "cannot run on any node: no node could ever host task 1: --exclude leaves no node: it "
            "names every node of the pool (big, n0, n1)");
  EXPECT_EQ(got.at("why:too-big"),
            "cannot run on any node: the job asks for cpu=2000m mem=2048Mi gpu=4.000 in total, "
            "more than the nodes its --nodelist / --exclude leave have (cpu=64000m "
            "mem=262144Mi gpu=2.000)");
  EXPECT_EQ(got.at("why:no-gpus-there"),
            "cannot run on any node: no node could ever host task 1: it asks for 4 GPUs on one "
            "node; the most any node has is 2 (of the nodes its --nodelist / --exclude leave: "
            "n1)");
}

}  // namespace
}  // namespace gpupool::sched
