// The explain step: headlines measured on the nodes whose GPUs suit the job, and the
// filters' own per-node reasons added up.
#include "sched/admission/explain.h"

#include <gtest/gtest.h>

#include <vector>

#include "sched/admission/filters.h"
#include "sched/queue/queue_test_util.h"

namespace gpupool::sched {
namespace {

using testing::GpuTask;
using testing::Job;

// A filter of a test's own: the explain step counts whatever reason a filter gives.
class OnFireFilter final : public FilterPlugin {
 public:
  std::string_view name() const override { return "on-fire"; }
  bool Filter(const ClusterState& state, const Task&, int32_t node,
              std::string* reason) const override {
    if (state.node(node).name != "hot") return true;
    *reason = "on fire";
    return false;
  }
};

class ExplainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const NodeSpec& n :
         {NodeSpec{"v1", 8000, 65536, 2, "V100"}, NodeSpec{"v2", 8000, 65536, 2, "V100"},
          NodeSpec{"a1", 8000, 65536, 4, "A100"}, NodeSpec{"cpu", 64000, 65536, 0, ""}}) {
      ASSERT_TRUE(cluster_.AddNode(n).ok());
    }
    ASSERT_TRUE(cluster_.Allocate(GpuTask(1, 1000, 1000, 0), {0, {0}}).ok());
    ASSERT_TRUE(cluster_.Allocate(GpuTask(1, 750, 1000, 0), {0, {1}}).ok());
    ASSERT_TRUE(cluster_.Allocate(GpuTask(0, 0, 60000, 0), {3, {}}).ok());
    const std::vector<int32_t> draining = {1};
    PassContext ctx;
    ctx.draining = draining;
    drain_.BeginPass(ctx);
    drain_.PrepareCluster(cluster_);
  }

  std::string Explain(const QueuedJob& job,
                      const PendingExplainer::Reservation* reservation = nullptr) {
    PendingExplainer e(cluster_, {&drain_, &env_}, fit_, "fifo");
    return e.Explain(job, reservation);
  }

  ClusterState cluster_;
  DrainFilter drain_;
  EnvCompatFilter env_;
  FitFilter fit_;
};

TEST_F(ExplainTest, TooFewIdleGpusOfTheModelCountsEveryNodesReason) {
  Task t = GpuTask(2);
  t.gpu_models = {"V100"};
  EXPECT_EQ(Explain(Job("j", "u", 0, {t})),
            "needs 2 idle GPUs of model V100; largest idle block on any node: 0; 0/4 nodes are "
            "available: 1 insufficient GPUs, 1 drained (v2), 1 other GPU model, 1 no GPUs");
}

TEST_F(ExplainTest, FractionalShareNamesTheMostFreeOnAnyGpuItMayUse) {
  Task t = GpuTask(1, 500);
  t.gpu_models = {"V100"};
  EXPECT_EQ(Explain(Job("j", "u", 0, {t})),
            "needs 0.5 of one GPU of model V100; the most free on any GPU: 0.25; 0/4 nodes are "
            "available: 1 insufficient GPU share, 1 drained (v2), 1 other GPU model, 1 no GPUs");
}

// A single-owner GPU with another owner's share: the share that could go there waits for
// the owner, in the host's words; with more free elsewhere it would just fit.
TEST(ExplainSingleOwnerTest, AShareHeldOutByAnotherOwnerSaysSo) {
  ClusterState cluster;
  NodeSpec mps{"mps", 8000, 65536, 1, "H100"};
  mps.single_owner_gpus = 1;
  ASSERT_TRUE(cluster.AddNode(mps).ok());
  ASSERT_TRUE(cluster.AddNode({"full", 8000, 65536, 1, "H100"}).ok());
  Task ann = GpuTask(1, 300);
  ann.owner = 1;
  ASSERT_TRUE(cluster.Allocate(ann, {0, {0}}).ok());
  ASSERT_TRUE(cluster.Allocate(GpuTask(1, 900), {1, {0}}).ok());
  FitFilter fit;
  PendingExplainer custom(cluster, {}, fit, "fifo", "MPS serves one user per GPU");
  Task bob = GpuTask(1, 500);
  bob.owner = 2;
  EXPECT_EQ(custom.Explain(Job("b", "bob", 0, {bob})),
            "needs 0.5 of one GPU; MPS serves one user per GPU; 0/2 nodes are available: 1 "
            "single-owner GPUs held by another owner, 1 insufficient GPU share");
  PendingExplainer plain(cluster, {}, fit, "fifo");
  EXPECT_EQ(plain.Explain(Job("b", "bob", 0, {bob})),
            "needs 0.5 of one GPU; the single-owner GPUs that fit are held by another owner's "
            "tasks; 0/2 nodes are available: 1 single-owner GPUs held by another owner, 1 "
            "insufficient GPU share");
  // Ann's own share of the same size would fit: her explanation (cached by shape, which
  // holds the owner) is not bob's. Too big for any GPU: the usual headline.
  Task ann2 = GpuTask(1, 500);
  ann2.owner = 1;
  EXPECT_EQ(plain.Explain(Job("a", "ann", 0, {ann2})),
            "waiting for its turn: jobs ahead of it in the queue (fifo order) come first; 1/2 "
            "nodes are available: 1 insufficient GPU share");
  Task bob_big = GpuTask(1, 800);
  bob_big.owner = 2;
  EXPECT_EQ(plain.Explain(Job("b", "bob", 0, {bob_big})),
            "needs 0.8 of one GPU; the most free on any GPU: 0.1; 0/2 nodes are available: 2 "
            "insufficient GPU share");
}

TEST_F(ExplainTest, CpuOrMemoryBesideTheGpus) {
  ASSERT_TRUE(cluster_.Allocate(GpuTask(0, 0, 2000, 0), {2, {}}).ok());  // a1: 6 CPUs free
  EXPECT_EQ(Explain(Job("j", "u", 0, {GpuTask(2, 1000, 7000, 0)})),
            "needs 7 CPUs beside its GPUs; no node with the GPUs has them free; 0/4 nodes are "
            "available: 1 insufficient GPUs, 1 drained (v2), 1 insufficient CPU, 1 no GPUs");
}

TEST_F(ExplainTest, CpuOnlyJobThatNoNodeCanTake) {
  EXPECT_EQ(Explain(Job("j", "u", 0, {GpuTask(0, 0, 10000, 4096)})),
            "needs 10 CPUs and 4096 MiB memory; no node has them free; 0/4 nodes are available: "
            "3 insufficient CPU, 1 drained (v2)");
}

TEST_F(ExplainTest, JobsThatFitSomewhereWaitForTheQueueOrTheirGang) {
  EXPECT_EQ(Explain(Job("j", "u", 0, {GpuTask(0, 0, 1000, 0)})),
            "waiting for its turn: jobs ahead of it in the queue (fifo order) come first; 3/4 "
            "nodes are available: 1 drained (v2)");
  EXPECT_EQ(Explain(Job("j", "u", 0, {GpuTask(4), GpuTask(4)})),
            "needs 2 tasks placed together; not all fit at once now; 1/4 nodes are available: "
            "1 insufficient GPUs, 1 drained (v2), 1 no GPUs");
  // Six shares need six GPUs with room (red team 7, finding 3); five have it now.
  std::vector<Task> shares(6, GpuTask(1, 250, 100, 0));
  EXPECT_EQ(Explain(Job("s", "u", 0, shares)),
            "needs 6 tasks placed together, each share on a GPU of its own; not all fit at once "
            "now; 2/4 nodes are available: 1 drained (v2), 1 no GPUs");
  for (Task& t : shares) t.pack_shares = true;  // held for mpirun: they may pack
  EXPECT_EQ(Explain(Job("s", "u", 0, shares)).rfind("needs 6 tasks placed together; ", 0), 0u);
}

TEST_F(ExplainTest, HopelessJobsAndTheReservationHolder) {
  EXPECT_EQ(Explain(Job("j", "u", 0, {GpuTask(8)})).rfind("cannot run on any node: ", 0), 0u);
  PendingExplainer::Reservation in_600{false, 600};
  EXPECT_EQ(
      Explain(Job("j", "u", 0, {GpuTask(4)}), &in_600),
      "next in line; resources reserved from 600 s from now, when running jobs reach their "
      "time limits; 1/4 nodes are available: 1 insufficient GPUs, 1 drained (v2), 1 no GPUs");
  // Reserved behind jobs without a time limit (a start no one knows): what it needs.
  PendingExplainer::Reservation never{true, 0};
  EXPECT_EQ(Explain(Job("j", "u", 0, {GpuTask(4)}), &never),
            Explain(Job("j", "u", 0, {GpuTask(4)})));
  EXPECT_EQ(Explain(Job("j", "u", 0, {GpuTask(4)}), &never).rfind("next in line", 0),
            std::string::npos);
}

TEST_F(ExplainTest, EnvironmentNodesAndFiltersOfOnesOwn) {
  Task t = GpuTask(2);
  t.allowed_nodes = {"v1", "v2"};
  EXPECT_EQ(Explain(Job("j", "u", 0, {t})),
            "needs 2 idle GPUs on the 2 nodes that can run its environment; largest idle block on "
            "any node: 0; 0/4 nodes are available: 2 cannot run its environment, 1 insufficient "
            "GPUs, 1 drained (v2)");
  ClusterState c;
  ASSERT_TRUE(c.AddNode({"hot", 8000, 65536, 1, "T4"}).ok());
  ASSERT_TRUE(c.AddNode({"cool", 8000, 65536, 1, "T4"}).ok());
  OnFireFilter fire;
  PendingExplainer e(c, {&fire}, fit_, "priority");
  EXPECT_EQ(e.Explain(Job("j", "u", 0, {GpuTask(1)})),
            "waiting for its turn: jobs ahead of it in the queue (priority order) come first; 1/2 "
            "nodes are available: 1 on fire");
}

TEST_F(ExplainTest, AlikeJobsShareOneExplanation) {
  PendingExplainer e(cluster_, {&drain_, &env_}, fit_, "fifo");
  const std::string first = e.Explain(Job("a", "u", 0, {GpuTask(2)}));
  EXPECT_EQ(e.Explain(Job("b", "w", 9, {GpuTask(2)})), first);
  EXPECT_NE(e.Explain(Job("c", "u", 0, {GpuTask(2), GpuTask(2)})), first);
}

}  // namespace
}  // namespace gpupool::sched
