#include "sched/queue/scheduling_pass.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <deque>
#include <random>
#include <tuple>

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
                          const std::string& queue = "fifo", int64_t now = 0, size_t max_tries = 0,
                          std::span<const HeldResources> held = {}) {
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
    return pass.Run(cluster_, now, pointers_, running_, held);
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

// Behind jobs without a time limit the head's start is unknown: it keeps what it gets once
// they end (here node 0's GPUs, its job the oldest), whatever a later job's limit, and
// later jobs start off those (the red team's stall: before, the pass stopped at the head,
// and one such head kept every later job of the pool waiting, on idle nodes too).
TEST(EasyBackfill, BehindJobsWithoutTimeLimitsTheHeadKeepsItsResourcesAndOthersGoOn) {
  PassFixture f(MakeCluster(2, 4));
  f.Run(Job("forever-0", "u", 0, {GpuTask(3)}), 0);   // node 0; no limit, no estimate
  f.Run(Job("forever-1", "u", 0, {GpuTask(2)}), 10);  // node 1 (first fit)
  std::vector<QueuedJob> pending = {Job("head", "u", 1, {GpuTask(4)}, 50),
                                    Job("short-on-0", "u", 2, {GpuTask(1)}, 5),
                                    Job("endless-on-1", "u", 3, {GpuTask(2)})};
  auto r = f.Pass(pending, StartRule::kEasyBackfill);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->reserved_index.has_value());
  EXPECT_EQ(*r->reserved_index, 0u);
  EXPECT_TRUE(r->reservation_unplannable);
  EXPECT_EQ(r->reservation_start_s, 0);  // unknown
  // First fit puts the short job on node 0, the head's: refused, however short it is.
  EXPECT_EQ(f.StartedIds(pending, *r), Ids{"endless-on-1"});
  // Strict, for comparison, starts nothing behind the head.
  PassFixture g(MakeCluster(2, 4));
  g.Run(Job("forever-0", "u", 0, {GpuTask(3)}), 0);
  g.Run(Job("forever-1", "u", 0, {GpuTask(2)}), 10);
  auto strict = g.Pass(pending, StartRule::kStrict);
  ASSERT_TRUE(strict.ok());
  EXPECT_TRUE(strict->started.empty());
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

// Runs passes (capped at `max_starts`, 0: not) over `queue` until one starts nothing and
// is not capped, committing each pass's starts as running jobs (no time passes between
// passes, as the controller runs the next at once after a capped one): the ids started,
// in order, then "reserved:ID@T" for the last pass's reservation.
// `fragmented`: 2 GPUs of each node busy (no 4-GPU job fits), else 3 nodes' GPUs partly.
Ids PassesUntilDone(std::vector<QueuedJob> queue, StartRule rule, size_t max_starts,
                    bool fragmented, int* passes = nullptr) {
  ClusterState cluster = MakeCluster(5, 4);
  FirstFitForTest policy;
  std::deque<QueuedJob> jobs;  // RunningJob points here
  std::vector<RunningJob> running;
  auto start = [&](QueuedJob job, std::vector<Placement> placements, int64_t at) {
    jobs.push_back(std::move(job));
    running.push_back(RunningJob{&jobs.back(), at, std::move(placements)});
  };
  // Busy until 100 (n0 half, n1 three quarters), and forever on n2's last GPU; or two
  // GPUs of every node, until 100, 200, ... (the last forever).
  std::vector<std::tuple<std::string, int, int64_t>> busy = {
      {"r0", 2, 100}, {"r1", 3, 100}, {"r2", 1, 0}};
  if (fragmented) {
    busy.clear();
    for (int n = 0; n < 5; ++n)
      busy.emplace_back("r" + std::to_string(n), 2, n < 4 ? 100 * (n + 1) : 0);
  }
  for (size_t k = 0; k < busy.size(); ++k) {
    const auto& [id, gpus, limit] = busy[k];
    QueuedJob r = Job(id, "c", 0, {GpuTask(gpus)}, limit);
    if (fragmented) {  // node k's GPUs 0 and 1
      Placement p;
      p.node = static_cast<int32_t>(k);
      p.gpus = {0, 1};
      EXPECT_TRUE(cluster.Allocate(r.tasks[0], p).ok());
      start(std::move(r), {p}, 0);
      continue;
    }
    auto g = PlaceGang(cluster, r.tasks, policy);
    EXPECT_TRUE(g.ok() && g->placed);
    start(std::move(r), g->placements, 0);
  }
  auto fair = BuiltinQueuePolicies().Create("fair");
  EXPECT_TRUE(fair.ok());
  auto planner = []() -> Result<std::unique_ptr<PlacementPolicy>> {
    return std::unique_ptr<PlacementPolicy>(std::make_unique<FirstFitForTest>());
  };
  SchedulingPass pass(**fair, policy, planner, PassOptions{rule, 0, max_starts});
  Ids out;
  for (int n = 1;; ++n) {
    const int64_t now = 1;
    std::vector<const QueuedJob*> pending = Pointers(queue);
    auto r = pass.Run(cluster, now, pending, running);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return out;
    EXPECT_LE(r->started.size(), max_starts == 0 ? queue.size() : max_starts);
    EXPECT_EQ(r->capped, !r->not_reached.empty());
    std::vector<bool> gone(queue.size(), false);
    for (PassResult::Started& s : r->started) {
      out.push_back(queue[s.pending_index].id);
      gone[s.pending_index] = true;
      start(queue[s.pending_index], std::move(s.placements), now);
    }
    if (r->started.empty() && !r->capped) {
      if (r->reserved_index) {
        out.push_back("reserved:" + queue[*r->reserved_index].id + "@" +
                      std::to_string(r->reservation_start_s));
      }
      if (passes != nullptr) *passes = n;
      return out;
    }
    std::vector<QueuedJob> rest;
    for (size_t i = 0; i < queue.size(); ++i) {
      if (!gone[i]) rest.push_back(queue[i]);
    }
    queue = std::move(rest);
  }
}

// Two users' jobs of 1, 2 and 4 GPUs with and without time limits, in arrival order.
std::vector<QueuedJob> MixedQueue() {
  std::vector<QueuedJob> q;
  const int gpus[] = {1, 2, 1, 4, 1, 2, 1, 1, 4, 1, 2, 1};
  const int64_t limits[] = {10, 50, 200, 50, 10, 0, 30, 500, 20, 5, 40, 0};
  for (int i = 0; i < 12; ++i) {
    q.push_back(Job("j" + std::to_string(i), i % 3 == 0 ? "b" : "a", 10 + i, {GpuTask(gpus[i])},
                    limits[i]));
  }
  return q;
}

TEST(SchedulingPassCap, CappedPassesStartWhatUncappedPassesStartInTheSameOrder) {
  for (StartRule rule : {StartRule::kStrict, StartRule::kEasyBackfill, StartRule::kSkipBlocked}) {
    SCOPED_TRACE(std::string(StartRuleName(rule)));
    for (bool fragmented : {false, true}) {
      SCOPED_TRACE(fragmented ? "fragmented" : "mixed");
      int uncapped_passes = 0;
      const Ids uncapped = PassesUntilDone(MixedQueue(), rule, 0, fragmented, &uncapped_passes);
      ASSERT_GE(uncapped.size(), 2u);
      EXPECT_EQ(uncapped_passes, 2);  // one that starts, one that starts nothing more
      for (size_t cap : {1, 2, 3}) {
        SCOPED_TRACE("cap " + std::to_string(cap));
        int passes = 0;
        EXPECT_EQ(PassesUntilDone(MixedQueue(), rule, cap, fragmented, &passes), uncapped);
        const auto starts = std::count_if(uncapped.begin(), uncapped.end(), [](const auto& id) {
          return id.rfind("reserved:", 0) != 0;
        });
        if (static_cast<size_t>(starts) > cap) {
          EXPECT_GT(passes, 2);  // the cap did cut
        }
      }
    }
  }
}

TEST(SchedulingPassCap, ACappedPassStopsBeforeTheBlockedJobAndGivesNoReservation) {
  PassFixture f(MakeCluster(1, 4));
  f.Run(Job("r", "u", 0, {GpuTask(2)}, 100), 0);
  std::vector<QueuedJob> pending = {Job("one", "u", 1, {GpuTask(1)}, 50),
                                    Job("head", "u", 2, {GpuTask(4)}, 50),
                                    Job("short", "u", 3, {GpuTask(1)}, 50)};
  auto q = BuiltinQueuePolicies().Create("fifo");
  ASSERT_TRUE(q.ok());
  FirstFitForTest policy;
  SchedulingPass pass(
      **q, policy,
      []() -> Result<std::unique_ptr<PlacementPolicy>> {
        return std::unique_ptr<PlacementPolicy>(std::make_unique<FirstFitForTest>());
      },
      PassOptions{StartRule::kEasyBackfill, 0, 1});
  std::vector<const QueuedJob*> pointers = Pointers(pending);
  auto r = pass.Run(f.cluster(), 0, pointers, f.running());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(f.StartedIds(pending, *r), Ids{"one"});
  EXPECT_TRUE(r->capped);
  EXPECT_EQ(r->not_reached, (std::vector<size_t>{1, 2}));
  EXPECT_FALSE(r->reserved_index.has_value());
}

// Wraps a queue policy: counts how much of its order a pass reads, and with `whole` hands
// the order out only as Order computes it (QueuePolicy's default Lazy).
class CountingPolicy final : public QueuePolicy {
 public:
  CountingPolicy(const QueuePolicy& inner, bool whole) : inner_(inner), whole_(whole) {}
  std::string_view name() const override { return inner_.name(); }
  std::vector<size_t> Order(const QueueContext& ctx) const override {
    ++whole_orders;
    return inner_.Order(ctx);
  }
  std::unique_ptr<QueueOrder> Lazy(const QueueContext& ctx) const override {
    if (whole_) return QueuePolicy::Lazy(ctx);
    struct Counted final : QueueOrder {
      std::unique_ptr<QueueOrder> order;
      size_t* reads;
      std::optional<size_t> Next() override {
        ++*reads;
        return order->Next();
      }
    };
    auto c = std::make_unique<Counted>();
    c->order = inner_.Lazy(ctx);
    c->reads = &reads;
    return c;
  }
  mutable size_t whole_orders = 0;
  mutable size_t reads = 0;

 private:
  const QueuePolicy& inner_;
  bool whole_;
};

TEST(SchedulingPassCap, ACappedPassReadsTheFairOrderOnlyAsFarAsItTries) {
  PassFixture f(MakeCluster(2, 8));
  std::vector<QueuedJob> pending;
  for (int i = 0; i < 40; ++i) {
    pending.push_back(Job("j" + std::to_string(i), "u" + std::to_string(i % 3), i, {GpuTask(1)}));
  }
  auto fair = BuiltinQueuePolicies().Create("fair");
  ASSERT_TRUE(fair.ok());
  CountingPolicy counting(**fair, false);
  FirstFitForTest policy;
  SchedulingPass pass(counting, policy, nullptr, PassOptions{StartRule::kSkipBlocked, 0, 2});
  std::vector<const QueuedJob*> pointers = Pointers(pending);
  auto r = pass.Run(f.cluster(), 0, pointers, f.running());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<size_t> order = (*fair)->Order(QueueContext{0, pointers, {}, &f.cluster()});
  ASSERT_EQ(r->started.size(), 2u);
  EXPECT_EQ(r->started[0].pending_index, order[0]);
  EXPECT_EQ(r->started[1].pending_index, order[1]);
  EXPECT_EQ(counting.whole_orders, 0u);  // the 40 jobs were not ordered at once
  EXPECT_EQ(counting.reads, 3u);         // the two started and the one it stopped at
  std::vector<size_t> rest = r->not_reached;
  std::sort(rest.begin(), rest.end());
  std::vector<size_t> want;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (i != order[0] && i != order[1]) want.push_back(i);
  }
  EXPECT_EQ(rest, want);
  EXPECT_EQ(r->not_reached[0], order[2]);  // the one it stopped at first
}

TEST(SchedulingPassCap, TheLazyFairOrderDecidesAsTheWholeOrder) {
  // Random clusters, queues (gangs, time limits, three users), running jobs, caps and
  // start rules: a pass reading the fair order lazily starts, reserves and leaves
  // unreached the same jobs as one reading the order computed whole.
  std::mt19937 rng(7);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  auto planner = []() -> Result<std::unique_ptr<PlacementPolicy>> {
    return std::unique_ptr<PlacementPolicy>(std::make_unique<FirstFitForTest>());
  };
  auto fair = BuiltinQueuePolicies().Create("fair");
  ASSERT_TRUE(fair.ok());
  for (int round = 0; round < 200; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const StartRule rule =
        std::array{StartRule::kStrict, StartRule::kEasyBackfill, StartRule::kSkipBlocked}[pick(3)];
    const size_t cap = static_cast<size_t>(pick(6));
    PassFixture f(MakeCluster(1 + pick(3), 4));
    for (int i = 0; i < pick(4); ++i) {
      f.Run(Job("r" + std::to_string(i), "u" + std::to_string(pick(3)), 0, {GpuTask(1)},
                20 + pick(100)),
            0);
    }
    std::vector<QueuedJob> pending;
    for (int i = 0; i < pick(30); ++i) {
      std::vector<Task> tasks(static_cast<size_t>(1 + (pick(5) == 0)), GpuTask(1 + pick(4)));
      pending.push_back(Job("j" + std::to_string(i), "u" + std::to_string(pick(3)), pick(20),
                            std::move(tasks), pick(4) * 50));
    }
    std::vector<const QueuedJob*> pointers = Pointers(pending);
    auto run = [&](bool whole) {
      ClusterState cluster = f.cluster();
      CountingPolicy q(**fair, whole);
      FirstFitForTest policy;
      SchedulingPass pass(q, policy, planner, PassOptions{rule, 0, cap});
      auto r = pass.Run(cluster, 5, pointers, f.running());
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      std::sort(r->not_reached.begin(), r->not_reached.end());
      return std::make_tuple(std::move(*r), Snapshot(cluster));
    };
    auto [lazy, lazy_cluster] = run(false);
    auto [whole, whole_cluster] = run(true);
    ASSERT_EQ(lazy.started.size(), whole.started.size());
    for (size_t i = 0; i < lazy.started.size(); ++i) {
      EXPECT_EQ(lazy.started[i].pending_index, whole.started[i].pending_index);
      EXPECT_EQ(lazy.started[i].placements, whole.started[i].placements);
    }
    EXPECT_EQ(lazy.reserved_index, whole.reserved_index);
    EXPECT_EQ(lazy.reservation_start_s, whole.reservation_start_s);
    EXPECT_EQ(lazy.capped, whole.capped);
    EXPECT_EQ(lazy.not_reached, whole.not_reached);
    EXPECT_EQ(lazy_cluster, whole_cluster);
  }
}

// Resources held for a job (the live pool's preemptor, docs/preemption.md): allocated on
// the cluster as placeholders for `job` with a planned placement.
HeldResources Hold(ClusterState& cluster, const std::string& job, int32_t node,
                   std::vector<int32_t> free_gpus, std::vector<Placement> planned) {
  HeldResources h;
  h.for_job = job;
  h.planned = std::move(planned);
  for (int32_t g : free_gpus) {
    h.tasks.push_back(GpuTask(1, 1000, 0, 0));
    h.placements.push_back({node, {g}});
    EXPECT_TRUE(cluster.Allocate(h.tasks.back(), h.placements.back()).ok());
  }
  return h;
}

// Two GPUs of four run a job until t=100, the other two are held for "preemptor": a job
// earlier in the order that could use them does not get them, under every start rule,
// and the preemptor starts there.
TEST(HeldResources, OnlyTheirJobUsesThemAndItGoesFirst) {
  for (StartRule rule : {StartRule::kStrict, StartRule::kEasyBackfill, StartRule::kSkipBlocked}) {
    PassFixture f(MakeCluster(1, 4));
    f.Run(Job("r", "u", 0, {GpuTask(2)}, 100), 0);  // GPUs 0 and 1
    const std::vector<HeldResources> held = {
        Hold(f.cluster(), "preemptor", 0, {2, 3}, {Placement{0, {2, 3}}})};
    std::vector<QueuedJob> pending = {Job("earlier", "u", 1, {GpuTask(2)}, 50),
                                      Job("preemptor", "v", 2, {GpuTask(2)}, 50)};
    auto r = f.Pass(pending, rule, "fifo", 0, 0, held);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(f.StartedIds(pending, *r), Ids{"preemptor"}) << StartRuleName(rule);
    EXPECT_EQ(r->started[0].placements, (std::vector<Placement>{{0, {2, 3}}}));
    EXPECT_EQ(f.cluster().node(0).gpu_free_total, 0);  // its start replaced the hold
    EXPECT_FALSE(r->capped);
  }
}

// The preemptor's victim still runs on one of its planned GPUs until t=100: it cannot
// start yet, the GPU that is free stays held (a short job that would fit there does not
// get it), and its reservation counts on what is held for it.
TEST(HeldResources, AJobThatCannotStartYetKeepsThem) {
  PassFixture f(MakeCluster(1, 4));
  f.Run(Job("r", "u", 0, {GpuTask(2)}, 1000), 0);      // GPUs 0 and 1, until 1000
  f.Run(Job("victim", "u", 0, {GpuTask(1)}, 100), 0);  // GPU 2, until 100
  const std::vector<HeldResources> held = {
      Hold(f.cluster(), "preemptor", 0, {3}, {Placement{0, {2, 3}}})};
  const auto before = Snapshot(f.cluster());
  std::vector<QueuedJob> pending = {Job("preemptor", "v", 1, {GpuTask(2)}, 50),
                                    Job("short", "u", 2, {GpuTask(1)}, 10)};
  auto r = f.Pass(pending, StartRule::kEasyBackfill, "fifo", 0, 0, held);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->started.empty());
  ASSERT_TRUE(r->reserved_index.has_value());
  EXPECT_EQ(*r->reserved_index, 0u);
  EXPECT_EQ(r->reservation_start_s, 100);  // GPU 2 back, with GPU 3 its own
  EXPECT_EQ(Snapshot(f.cluster()), before);
}

// A capped pass counts the held job's start first.
TEST(HeldResources, TheHeldJobsStartCountsForTheCap) {
  PassFixture f(MakeCluster(1, 4));
  const std::vector<HeldResources> held = {
      Hold(f.cluster(), "preemptor", 0, {2, 3}, {Placement{0, {2, 3}}})};
  std::vector<QueuedJob> pending = {Job("earlier", "u", 1, {GpuTask(2)}, 50),
                                    Job("preemptor", "v", 2, {GpuTask(2)}, 50)};
  auto q = BuiltinQueuePolicies().Create("fifo");
  ASSERT_TRUE(q.ok());
  FirstFitForTest policy;
  SchedulingPass pass(**q, policy, nullptr, PassOptions{StartRule::kStrict, 0, 1});
  const std::vector<const QueuedJob*> pointers = Pointers(pending);
  auto r = pass.Run(f.cluster(), 0, pointers, {}, held);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(f.StartedIds(pending, *r), Ids{"preemptor"});
  EXPECT_TRUE(r->capped);
  EXPECT_EQ(r->not_reached, std::vector<size_t>{0});  // "earlier", not the started one
}

// Issue 31: a one-task shape that failed is not tried again by the next pass unless
// something it could use was freed, and the pass starts what a pass that tries every shape
// afresh starts, with the same reservation. Random queues on a changing cluster: a pass
// kept from step to step against a new one each step.
TEST(SchedulingPassCarry, AKeptPassStartsWhatAFreshPassStarts) {
  for (StartRule rule : {StartRule::kStrict, StartRule::kEasyBackfill, StartRule::kSkipBlocked}) {
    SCOPED_TRACE(std::string(StartRuleName(rule)));
    std::mt19937 rng(static_cast<unsigned>(rule) + 5);
    ClusterState cluster = MakeCluster(5, 4);
    for (int32_t n = 0; n < 2; ++n) {  // MPS-like single-owner GPUs on two more nodes
      NodeSpec spec{fmt::format("m{}", n), 64000, 262144, 2, "V100", 0, 0};
      spec.single_owner_gpus = 0b11;
      ASSERT_TRUE(cluster.AddNode(spec).ok());
    }
    auto queue = BuiltinQueuePolicies().Create("fifo");
    ASSERT_TRUE(queue.ok());
    auto planner = []() -> Result<std::unique_ptr<PlacementPolicy>> {
      return std::unique_ptr<PlacementPolicy>(std::make_unique<FirstFitForTest>());
    };
    FirstFitForTest kept_policy;
    SchedulingPass kept(**queue, kept_policy, planner, PassOptions{rule});
    std::deque<QueuedJob> jobs;  // stable addresses
    std::vector<const QueuedJob*> pending;
    std::vector<RunningJob> running;
    int next = 0, fresh_calls = 0;
    for (int step = 0; step < 300; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      for (int k = static_cast<int>(rng() % 3); k > 0; --k) {  // arrivals
        const int kind = static_cast<int>(rng() % 6);
        std::vector<Task> tasks = {GpuTask(1 + static_cast<int>(rng() % 4))};
        if (kind == 0) tasks = {GpuTask(1, 500)};
        if (kind == 1) tasks = {GpuTask(2), GpuTask(2)};  // a gang: not carried
        if (kind == 2) tasks = {GpuTask(0, 1000, 16000)};
        QueuedJob& j = jobs.emplace_back(
            Job(std::to_string(next), "u" + std::to_string(rng() % 3), next, tasks, 50));
        ++next;
        if (kind == 0) j.tasks[0].owner = 1 + static_cast<int64_t>(rng() % 2);
        pending.push_back(&j);
      }
      if (!running.empty() && rng() % 3 == 0) {  // an end
        const size_t e = rng() % running.size();
        ASSERT_TRUE(ReleaseGang(cluster, running[e].job->tasks, running[e].placements).ok());
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(e));
      }
      ClusterState for_kept = cluster, for_fresh = cluster;
      const int calls_before = kept_policy.calls;
      auto a = kept.Run(for_kept, step, pending, running);
      FirstFitForTest fresh_policy;
      SchedulingPass fresh(**queue, fresh_policy, planner, PassOptions{rule});
      auto b = fresh.Run(for_fresh, step, pending, running);
      ASSERT_TRUE(a.ok() && b.ok());
      fresh_calls += fresh_policy.calls;
      ASSERT_LE(kept_policy.calls - calls_before, fresh_policy.calls);
      ASSERT_EQ(a->started.size(), b->started.size());
      for (size_t i = 0; i < a->started.size(); ++i) {
        ASSERT_EQ(a->started[i].pending_index, b->started[i].pending_index);
        ASSERT_EQ(a->started[i].placements, b->started[i].placements);
      }
      ASSERT_EQ(a->reserved_index, b->reserved_index);
      ASSERT_EQ(a->reservation_start_s, b->reservation_start_s);
      ASSERT_EQ(a->reservation_unplannable, b->reservation_unplannable);
      ASSERT_EQ(Snapshot(for_kept), Snapshot(for_fresh));
      // The starts run from now on.
      std::vector<bool> started(pending.size(), false);
      for (const auto& s : a->started) {
        started[s.pending_index] = true;
        for (size_t t = 0; t < s.placements.size(); ++t) {
          ASSERT_TRUE(cluster.Allocate(pending[s.pending_index]->tasks[t], s.placements[t]).ok());
        }
        running.push_back(RunningJob{pending[s.pending_index], step, s.placements});
      }
      std::vector<const QueuedJob*> left;
      for (size_t i = 0; i < pending.size(); ++i) {
        if (!started[i]) left.push_back(pending[i]);
      }
      pending = std::move(left);
    }
    // Carried shapes saved placements: fewer calls than passes that try every shape.
    EXPECT_LT(kept_policy.calls, fresh_calls);
  }
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
