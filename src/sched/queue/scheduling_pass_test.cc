#include "sched/queue/scheduling_pass.h"

#include <gtest/gtest.h>

#include "sched/queue/first_fit_for_test.h"
#include "sched/queue/gang_placement.h"
#include "sched/queue/queue_policy_registry.h"
#include "sched/queue/queue_test_util.h"

namespace gpupool::sched {
namespace {

using testing::FirstFitForTest;
using testing::GpuTask;
using testing::Job;
using testing::MakeCluster;
using testing::Pointers;
using testing::Snapshot;

// Holds a cluster with running jobs and runs passes over a pending list.
class PassFixture {
 public:
  explicit PassFixture(ClusterState cluster) : cluster_(std::move(cluster)) {
    running_jobs_.reserve(16);  // RunningJob points into this vector
  }

  // Starts `job` at `start` on the cluster through the first-fit policy.
  void Run(QueuedJob job, int64_t start) {
    running_jobs_.push_back(std::move(job));
    auto g = PlaceGang(cluster_, running_jobs_.back().tasks, policy_);
    ASSERT_TRUE(g.ok() && g->placed);
    running_.push_back(RunningJob{&running_jobs_.back(), start, g->placements});
  }

  Result<PassResult> Pass(const std::vector<QueuedJob>& pending, StartRule rule,
                          const std::string& queue = "fifo", int64_t now = 0,
                          size_t max_tries = 0) {
    auto q = BuiltinQueuePolicies().Create(queue);
    EXPECT_TRUE(q.ok());
    queue_ = std::move(*q);
    SchedulingPass pass(
        *queue_, policy_,
        []() -> Result<std::unique_ptr<PlacementPolicy>> {
          return std::unique_ptr<PlacementPolicy>(std::make_unique<FirstFitForTest>());
        },
        PassOptions{rule, max_tries});
    pointers_ = Pointers(pending);
    return pass.Run(cluster_, now, pointers_, running_);
  }

  std::vector<std::string> StartedIds(const std::vector<QueuedJob>& pending,
                                      const PassResult& r) const {
    std::vector<std::string> ids;
    for (const auto& s : r.started) ids.push_back(pending[s.pending_index].id);
    return ids;
  }

  ClusterState& cluster() { return cluster_; }
  std::vector<RunningJob>& running() { return running_; }

 private:
  ClusterState cluster_;
  FirstFitForTest policy_;
  std::vector<QueuedJob> running_jobs_;
  std::vector<RunningJob> running_;
  std::vector<const QueuedJob*> pointers_;
  std::unique_ptr<QueuePolicy> queue_;
};

using Ids = std::vector<std::string>;

// One node of 4 GPUs, half used until t=100; the head wants all four.
class OneNodeHole : public ::testing::Test {
 protected:
  OneNodeHole() : f(MakeCluster(1, 4)) { f.Run(Job("r", "u", 0, {GpuTask(2)}, 100), 0); }
  PassFixture f;
};

TEST_F(OneNodeHole, StrictOrderStartsNothingBehindABlockedJob) {
  std::vector<QueuedJob> pending = {Job("head", "u", 1, {GpuTask(4)}, 50),
                                    Job("short", "u", 2, {GpuTask(2)}, 50)};
  auto r = f.Pass(pending, StartRule::kStrict);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->started.empty());
  EXPECT_FALSE(r->reserved_index.has_value());
}

TEST_F(OneNodeHole, EasyBackfillStartsAShortJobInTheHole) {
  std::vector<QueuedJob> pending = {Job("head", "u", 1, {GpuTask(4)}, 50),
                                    Job("short", "u", 2, {GpuTask(2)}, 50)};
  auto r = f.Pass(pending, StartRule::kEasyBackfill);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(f.StartedIds(pending, *r), Ids{"short"});
  ASSERT_TRUE(r->reserved_index.has_value());
  EXPECT_EQ(*r->reserved_index, 0u);
  EXPECT_EQ(r->reservation_start_s, 100);
}

TEST_F(OneNodeHole, EasyBackfillRefusesALongJobThatWouldDelayTheHead) {
  std::vector<QueuedJob> pending = {Job("head", "u", 1, {GpuTask(4)}, 50),
                                    Job("long", "u", 2, {GpuTask(2)}, 500)};
  const auto before = Snapshot(f.cluster());
  auto r = f.Pass(pending, StartRule::kEasyBackfill);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->started.empty());
  EXPECT_EQ(r->reservation_start_s, 100);
  EXPECT_EQ(Snapshot(f.cluster()), before);  // the tentative placement was undone
}

// Issue 29: a GPU out of service is held by no job (the controller allocates it away).
// A head job that would need it can never start: under EASY it holds nobody back, and the
// next job that cannot start gets the reservation instead.
TEST(SchedulingPassTest, AJobThatCanNeverFitHoldsNobodyBack) {
  PassFixture f(MakeCluster(1, 4));
  Placement hold;
  hold.node = 0;
  hold.gpus = {1};
  Task out_of_service = GpuTask(1);
  out_of_service.cpu_milli = 0;
  out_of_service.memory_mib = 0;
  ASSERT_TRUE(f.cluster().Allocate(out_of_service, hold).ok());
  std::vector<QueuedJob> pending = {Job("four", "u", 1, {GpuTask(4)}),
                                    Job("three", "u", 2, {GpuTask(3)})};
  auto r = f.Pass(pending, StartRule::kEasyBackfill);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(f.StartedIds(pending, *r), Ids{"three"});
  EXPECT_FALSE(r->reservation_unplannable);
  // A job that only waits for a job without a time limit still blocks the queue.
  PassFixture g(MakeCluster(1, 4));
  g.Run(Job("forever", "u", 0, {GpuTask(1)}), 0);
  auto blocked = g.Pass(pending, StartRule::kEasyBackfill);
  ASSERT_TRUE(blocked.ok());
  EXPECT_TRUE(blocked->started.empty());
  EXPECT_TRUE(blocked->reservation_unplannable);
}

TEST_F(OneNodeHole, SkipBlockedStartsEverythingThatFits) {
  std::vector<QueuedJob> pending = {Job("head", "u", 1, {GpuTask(4)}, 50),
                                    Job("long", "u", 2, {GpuTask(2)}, 500)};
  auto r = f.Pass(pending, StartRule::kSkipBlocked);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(f.StartedIds(pending, *r), Ids{"long"});
}

TEST_F(OneNodeHole, MaxBackfillTriesBoundsTheWork) {
  std::vector<QueuedJob> pending = {Job("head", "u", 1, {GpuTask(4)}, 50),
                                    Job("a", "u", 2, {GpuTask(3)}, 5),
                                    Job("b", "u", 3, {GpuTask(1)}, 5)};
  auto r = f.Pass(pending, StartRule::kSkipBlocked, "fifo", 0, /*max_tries=*/1);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->started.empty());  // only "a" was tried, and it does not fit
}

TEST(EasyBackfill, LongJobMayUseResourcesTheReservationDoesNotNeed) {
  PassFixture f(MakeCluster(2, 4));
  f.Run(Job("r0", "u", 0, {GpuTask(4)}, 100), 0);   // node 0 until 100
  f.Run(Job("r1", "u", 0, {GpuTask(2)}, 1000), 0);  // half of node 1 until 1000
  std::vector<QueuedJob> pending = {Job("head", "u", 1, {GpuTask(4)}, 50),
                                    Job("long", "u", 2, {GpuTask(2)}, 500)};
  auto r = f.Pass(pending, StartRule::kEasyBackfill);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(f.StartedIds(pending, *r), Ids{"long"});
  EXPECT_EQ(r->started[0].placements[0].node, 1);
  EXPECT_EQ(r->reservation_start_s, 100);
}

TEST(EasyBackfill, JobsStartedEarlierInThePassCountForTheReservation) {
  PassFixture f(MakeCluster(1, 4));
  std::vector<QueuedJob> pending = {
      Job("first", "u", 0, {GpuTask(2)}, 30), Job("head", "u", 1, {GpuTask(4)}, 50),
      Job("fits-before", "u", 2, {GpuTask(2)}, 20), Job("too-long", "u", 3, {GpuTask(1)}, 40)};
  auto r = f.Pass(pending, StartRule::kEasyBackfill);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(f.StartedIds(pending, *r), (Ids{"first", "fits-before"}));
  EXPECT_EQ(r->reservation_start_s, 30);
}

TEST(EasyBackfill, NoReservationWithoutTimeLimitsFallsBackToStrict) {
  PassFixture f(MakeCluster(1, 4));
  f.Run(Job("forever", "u", 0, {GpuTask(2)}), 0);  // no limit, no estimate
  std::vector<QueuedJob> pending = {Job("head", "u", 1, {GpuTask(4)}, 50),
                                    Job("short", "u", 2, {GpuTask(1)}, 5)};
  auto r = f.Pass(pending, StartRule::kEasyBackfill);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->reservation_unplannable);
  EXPECT_TRUE(r->started.empty());
}

TEST(SchedulingPass, FairOrderDecidesWhoGetsTheLastGpus) {
  PassFixture f(MakeCluster(1, 4));
  f.Run(Job("heavy-running", "heavy", 0, {GpuTask(2)}, 100), 0);
  std::vector<QueuedJob> pending = {Job("heavy-next", "heavy", 1, {GpuTask(2)}, 10),
                                    Job("light", "light", 2, {GpuTask(2)}, 10)};
  auto fifo = f.Pass(pending, StartRule::kStrict, "fifo");
  ASSERT_TRUE(fifo.ok());
  EXPECT_EQ(f.StartedIds(pending, *fifo), Ids{"heavy-next"});

  PassFixture g(MakeCluster(1, 4));
  g.Run(Job("heavy-running", "heavy", 0, {GpuTask(2)}, 100), 0);
  auto fair = g.Pass(pending, StartRule::kStrict, "fair");
  ASSERT_TRUE(fair.ok());
  EXPECT_EQ(g.StartedIds(pending, *fair), Ids{"light"});
}

// One single-owner GPU (an MPS GPU) running a share of owner 1 until t=100.
Task ShareOf(int64_t owner, int gpu_milli) {
  Task t = GpuTask(1, gpu_milli);
  t.owner = owner;
  return t;
}
ClusterState OneSingleOwnerGpuNode() {
  ClusterState c;
  NodeSpec spec{"n0", 64000, 262144, 1, "H100"};
  spec.single_owner_gpus = 1;
  EXPECT_TRUE(c.AddNode(spec).ok());
  return c;
}

TEST(SingleOwnerGpus, ASecondOwnersShareWaitsAndEasyKeepsItsTurn) {
  std::vector<QueuedJob> pending = {Job("b", "bob", 1, {ShareOf(2, 300)}, 50),
                                    Job("a-forever", "ann", 2, {ShareOf(1, 300)}),
                                    Job("a-short", "ann", 3, {ShareOf(1, 300)}, 50)};
  // Skip: bob's share cannot join ann's GPU, ann's two can.
  PassFixture skip(OneSingleOwnerGpuNode());
  skip.Run(Job("r", "ann", 0, {ShareOf(1, 300)}, 100), 0);
  auto r = skip.Pass(pending, StartRule::kSkipBlocked);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(skip.StartedIds(pending, *r), (Ids{"a-forever", "a-short"}));
  EXPECT_EQ(skip.cluster().OwnerOf(0, 0), 1);
  // EASY: bob's share is next at t=100, when ann's running share ends and the GPU is
  // free of her; a share of ann's that would still run then would keep bob out (the
  // reservation's cluster refuses it), one that ends before may start.
  PassFixture easy(OneSingleOwnerGpuNode());
  easy.Run(Job("r", "ann", 0, {ShareOf(1, 300)}, 100), 0);
  auto e = easy.Pass(pending, StartRule::kEasyBackfill);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(easy.StartedIds(pending, *e), Ids{"a-short"});
  ASSERT_TRUE(e->reserved_index.has_value());
  EXPECT_EQ(*e->reserved_index, 0u);
  EXPECT_EQ(e->reservation_start_s, 100);
}

TEST(StartRule, ParsesAndNames) {
  for (StartRule r : {StartRule::kStrict, StartRule::kEasyBackfill, StartRule::kSkipBlocked}) {
    auto parsed = ParseStartRule(StartRuleName(r));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, r);
  }
  EXPECT_FALSE(ParseStartRule("conservative").ok());
}

}  // namespace
}  // namespace gpupool::sched
