#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <queue>
#include <random>
#include <tuple>

#include "sched/queue/queue_policy_registry.h"
#include "sched/queue/queue_test_util.h"

namespace gpupool::sched {
namespace {

using testing::GpuTask;
using testing::Job;
using testing::MakeCluster;
using testing::Pointers;

std::string Users(const std::vector<QueuedJob>& jobs, const std::vector<size_t>& order) {
  std::string s;
  for (size_t i : order) s += jobs[i].user;
  return s;
}

std::vector<size_t> FairOrder(const std::vector<QueuedJob>& jobs,
                              const std::vector<RunningJob>& running, const ClusterState& cluster,
                              const QueuePolicyConfig& config = {}) {
  auto p = BuiltinQueuePolicies().Create("fair", config);
  EXPECT_TRUE(p.ok());
  auto pending = Pointers(jobs);
  return (*p)->Order(QueueContext{0, pending, running, &cluster});
}

TEST(FairShareQueuePolicy, AlternatesBetweenHeavyAndLightUser) {
  // The heavy user (H) submitted four jobs before the light user (L) submitted any.
  ClusterState cluster = MakeCluster(2, 8);
  std::vector<QueuedJob> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(Job(fmt::format("h{}", i), "H", i, {GpuTask(2)}));
  for (int i = 0; i < 4; ++i) jobs.push_back(Job(fmt::format("l{}", i), "L", 10 + i, {GpuTask(2)}));
  EXPECT_EQ(Users(jobs, FairOrder(jobs, {}, cluster)), "HLHLHLHL");
  // Under fifo the heavy user would take everything first.
  auto fifo = BuiltinQueuePolicies().Create("fifo");
  auto pending = Pointers(jobs);
  EXPECT_EQ(Users(jobs, (*fifo)->Order(QueueContext{0, pending, {}, &cluster})), "HHHHLLLL");
}

TEST(FairShareQueuePolicy, StarvingJobsGoFirstOldestFirst) {
  // H holds 8 of 16 GPUs, so L goes first by share. With aging at 100 s, the H jobs that
  // have waited 100 s go before L's, the oldest first, and count in H's use; the others
  // keep their place by share.
  ClusterState cluster = MakeCluster(2, 8);
  QueuedJob running_h = Job("rh", "H", 0, {GpuTask(8)});
  std::vector<RunningJob> running = {RunningJob{&running_h, 0, {}}};
  std::vector<QueuedJob> jobs = {Job("h0", "H", 1, {GpuTask(2)}), Job("h1", "H", 0, {GpuTask(2)}),
                                 Job("h2", "H", 150, {GpuTask(2)}),
                                 Job("l0", "L", 160, {GpuTask(2)}),
                                 Job("l1", "L", 161, {GpuTask(2)})};
  auto pending = Pointers(jobs);
  QueuePolicyConfig config;
  config.fair_starving_after_s = 100;
  auto p = BuiltinQueuePolicies().Create("fair", config);
  ASSERT_TRUE(p.ok());
  auto order_at = [&](int64_t now) {
    return (*p)->Order(QueueContext{now, pending, running, &cluster});
  };
  EXPECT_EQ(order_at(200), (std::vector<size_t>{1, 0, 3, 4, 2}));  // h1, h0 aged
  EXPECT_EQ(order_at(100), (std::vector<size_t>{1, 3, 4, 0, 2}));  // only h1
  EXPECT_EQ(Users(jobs, order_at(99)), "LLHHH");                   // none
}

TEST(FairShareQueuePolicy, ShortestFirstWithinAGroup) {
  // Groups still alternate; within each, the shortest known run time goes first (the
  // estimate, else the time limit; unknown last), then the oldest.
  ClusterState cluster = MakeCluster(2, 8);
  std::vector<QueuedJob> jobs = {Job("h0", "H", 0, {GpuTask(2)}), Job("h1", "H", 1, {GpuTask(2)}),
                                 Job("h2", "H", 2, {GpuTask(2)}), Job("l0", "L", 3, {GpuTask(2)}),
                                 Job("l1", "L", 4, {GpuTask(2)})};
  jobs[0].time_limit_s = 9000;
  jobs[1].time_limit_s = 9000;
  jobs[1].runtime_estimate_s = 100;  // the estimate counts before the limit
  jobs[3].time_limit_s = 500;
  jobs[4].time_limit_s = 400;
  QueuePolicyConfig config;
  EXPECT_EQ(FairOrder(jobs, {}, cluster, config), (std::vector<size_t>{0, 3, 1, 4, 2}));
  config.fair_shortest_first = true;
  EXPECT_EQ(FairOrder(jobs, {}, cluster, config), (std::vector<size_t>{1, 4, 0, 3, 2}));
}

TEST(FairShareQueuePolicy, RunningUsageCountsSoTheUserBehindGoesFirst) {
  ClusterState cluster = MakeCluster(2, 8);
  QueuedJob running_h = Job("rh", "H", 0, {GpuTask(8)});
  std::vector<RunningJob> running = {RunningJob{&running_h, 0, {}}};
  std::vector<QueuedJob> jobs;
  for (int i = 0; i < 3; ++i) jobs.push_back(Job(fmt::format("h{}", i), "H", i, {GpuTask(2)}));
  for (int i = 0; i < 3; ++i) jobs.push_back(Job(fmt::format("l{}", i), "L", 10 + i, {GpuTask(2)}));
  // H holds 8 of 16 GPUs (share 0.5); L catches up to 0.375 before H's 0.5 is lowest.
  EXPECT_EQ(Users(jobs, FairOrder(jobs, running, cluster)), "LLLHHH");
}

// A user holding every MIG instance of a GPU with 1-thousandth asks is charged the whole
// GPU (each instance by its memory's part of it), not 0.004 of it: the user holding half a
// plain GPU goes first.
TEST(FairShareQueuePolicy, AJobOnAMigInstanceCountsAsTheInstanceNotItsAsk) {
  ClusterState cluster;
  NodeSpec mig{"mig", 64000, 262144, 5, "A100", 81920, 80};
  mig.whole_only_gpus = 0b01111;  // 3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb; GPU 4 outside MIG
  mig.device_memory_mib = {40960, 20480, 10240, 10240, 81920};
  ASSERT_TRUE(cluster.AddNode(mig).ok());
  QueuedJob m = Job("rm", "M", 0, {GpuTask(1, 1), GpuTask(1, 1), GpuTask(1, 1), GpuTask(1, 1)});
  QueuedJob p = Job("rp", "P", 0, {GpuTask(1, 500)});
  std::vector<RunningJob> running = {
      RunningJob{&m, 0, {{0, {0}}, {0, {1}}, {0, {2}}, {0, {3}}}},
      RunningJob{&p, 0, {{0, {4}}}},
  };
  EXPECT_EQ(ChargedUse(cluster, running[0]).gpu_milli, 1000);
  EXPECT_EQ(ChargedUse(cluster, running[1]).gpu_milli, 500);
  std::vector<QueuedJob> jobs = {Job("m1", "M", 1, {GpuTask(1, 1)}),
                                 Job("p1", "P", 2, {GpuTask(1, 1)})};
  EXPECT_EQ(Users(jobs, FairOrder(jobs, running, cluster)), "PM");
}

TEST(FairShareQueuePolicy, DominantResourceDecides) {
  // 16 GPUs, 128 cores. C runs a CPU-heavy job (96 of 128 cores = 0.75 dominant share);
  // G runs 4 GPUs (0.25). G goes first although C uses no GPU at all.
  ClusterState cluster = MakeCluster(2, 8);
  QueuedJob cpu_job = Job("rc", "C", 0, {GpuTask(0, 0, 96000, 1024)});
  QueuedJob gpu_job = Job("rg", "G", 0, {GpuTask(4)});
  std::vector<RunningJob> running = {RunningJob{&cpu_job, 0, {}}, RunningJob{&gpu_job, 0, {}}};
  std::vector<QueuedJob> jobs = {Job("c", "C", 0, {GpuTask(1)}), Job("g", "G", 1, {GpuTask(1)})};
  EXPECT_EQ(Users(jobs, FairOrder(jobs, running, cluster)), "GC");
}

TEST(FairShareQueuePolicy, WeightsGiveProportionalTurns) {
  ClusterState cluster = MakeCluster(4, 8);
  std::vector<QueuedJob> jobs;
  for (int i = 0; i < 6; ++i) jobs.push_back(Job(fmt::format("a{}", i), "A", i, {GpuTask(1)}));
  for (int i = 0; i < 3; ++i) {
    jobs.push_back(Job(fmt::format("b{}", i), "B", 100 + i, {GpuTask(1)}));
  }
  QueuePolicyConfig config;
  config.fair_weights["A"] = 2;
  EXPECT_EQ(Users(jobs, FairOrder(jobs, {}, cluster, config)), "ABAABAABA");
}

TEST(FairShareQueuePolicy, GroupsByProjectWhenAsked) {
  ClusterState cluster = MakeCluster(2, 8);
  // Two users of one project against one user of another project.
  std::vector<QueuedJob> jobs = {Job("x1", "x", 0, {GpuTask(1)}), Job("y1", "y", 1, {GpuTask(1)}),
                                 Job("z1", "z", 2, {GpuTask(1)})};
  jobs[0].project = "P";
  jobs[1].project = "P";
  jobs[2].project = "Q";
  QueuePolicyConfig by_project;
  by_project.fair_group = FairShareGroup::kProject;
  EXPECT_EQ(Users(jobs, FairOrder(jobs, {}, cluster, by_project)), "xzy");
  EXPECT_EQ(Users(jobs, FairOrder(jobs, {}, cluster)), "xyz");
}

// The server's and the simulator's --fair-by: its two values, and an error naming the
// option and both values for anything else.
// docs/cli.md: --priority orders a user's own jobs, under the fair queue too (the
// default), and never another user's: by project, a user's priority reorders only the
// places that user's jobs hold in the project's order.
TEST(FairShareQueuePolicy, AUsersPriorityOrdersOnlyTheirOwnJobsInTheGroup) {
  ClusterState cluster = MakeCluster(2, 8);
  std::vector<QueuedJob> jobs = {
      Job("a1", "alice", 1, {GpuTask(1)}), Job("b1", "bob", 2, {GpuTask(1)}),
      Job("a2", "alice", 3, {GpuTask(1)}), Job("b2", "bob", 4, {GpuTask(1)})};
  for (QueuedJob& j : jobs) j.project = "vision";
  jobs[3].priority = 100;  // bob's later job
  auto ids = [&](const std::vector<size_t>& order) {
    std::string s;
    for (size_t i : order) s += jobs[i].id + " ";
    return s;
  };
  // By user: bob's b2 goes before his b1; alice and bob alternate as before (ties by
  // the older next job: b1 before a2).
  EXPECT_EQ(ids(FairOrder(jobs, {}, cluster)), "a1 b2 b1 a2 ");
  // By project: one group; bob's b2 takes b1's place, not alice's a1's.
  QueuePolicyConfig by_project;
  by_project.fair_group = FairShareGroup::kProject;
  EXPECT_EQ(ids(FairOrder(jobs, {}, cluster, by_project)), "a1 b2 a2 b1 ");
  by_project.priority_across_users = true;  // the simulator's site priorities
  EXPECT_EQ(ids(FairOrder(jobs, {}, cluster, by_project)), "b2 a1 b1 a2 ");
}

TEST(FairShareQueuePolicy, FairByParsesUserOrProjectAndNamesTheOptionOtherwise) {
  for (FairShareGroup g : {FairShareGroup::kUser, FairShareGroup::kProject}) {
    Result<FairShareGroup> parsed = ParseFairShareGroup(FairShareGroupName(g), "--fair-by");
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, g);
  }
  EXPECT_EQ(FairShareGroupName(FairShareGroup::kProject), "project");
  Result<FairShareGroup> bad = ParseFairShareGroup("account", "--fair-by");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--fair-by 'account': user"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("or project"), std::string::npos);
}

TEST(FairShareQueuePolicy, EveryIndexExactlyOnce) {
  ClusterState cluster = MakeCluster(1, 8);
  std::vector<QueuedJob> jobs;
  for (int i = 0; i < 50; ++i) {
    jobs.push_back(Job(fmt::format("j{}", i), std::string(1, static_cast<char>('a' + i % 7)),
                       (i * 37) % 11, {GpuTask(1 + i % 3)}));
  }
  std::vector<size_t> order = FairOrder(jobs, {}, cluster);
  std::sort(order.begin(), order.end());
  for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(order[i], i);
}

// The fair order as it was computed before it was made lazy (every group sorted, the
// whole filling at once): what the policy's order must stay.
std::vector<size_t> ReferenceFairOrder(const QueueContext& ctx, const QueuePolicyConfig& config) {
  auto ratio = [](int64_t used, int64_t capacity) {
    return capacity > 0 ? static_cast<double>(used) / static_cast<double>(capacity) : 0.0;
  };
  const Resources capacity = ctx.cluster->TotalCapacity();
  auto share = [&](const Resources& used) {
    return std::max({ratio(used.gpu_milli, capacity.gpu_milli),
                     ratio(used.cpu_milli, capacity.cpu_milli),
                     ratio(used.memory_mib, capacity.memory_mib)});
  };
  struct Group {
    Resources used;
    double weight = 1;
    std::vector<size_t> jobs;
    size_t next = 0;
  };
  std::map<std::string_view, Group> groups;
  for (const RunningJob& r : ctx.running) {
    groups[FairShareGroupOf(*r.job, config.fair_group)].used += r.job->Total();
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < ctx.pending.size(); ++i) {
    if (config.fair_starving_after_s > 0 &&
        ctx.now_s - ctx.pending[i]->submit_s >= config.fair_starving_after_s) {
      order.push_back(i);
    } else {
      groups[FairShareGroupOf(*ctx.pending[i], config.fair_group)].jobs.push_back(i);
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ctx.pending[a]->submit_s < ctx.pending[b]->submit_s;
  });
  for (size_t i : order) {
    groups[FairShareGroupOf(*ctx.pending[i], config.fair_group)].used += ctx.pending[i]->Total();
  }
  for (auto& [name, g] : groups) {
    if (auto w = config.fair_weights.find(name); w != config.fair_weights.end())
      g.weight = w->second;
    std::stable_sort(g.jobs.begin(), g.jobs.end(), [&](size_t a, size_t b) {
      const QueuedJob& ja = *ctx.pending[a];
      const QueuedJob& jb = *ctx.pending[b];
      if (config.fair_shortest_first) {
        const int64_t ra = ja.SjfRuntime().value_or(kNoPlannedEnd);
        const int64_t rb = jb.SjfRuntime().value_or(kNoPlannedEnd);
        if (ra != rb) return ra < rb;
      }
      return ja.submit_s < jb.submit_s;
    });
  }
  using Key = std::tuple<double, int64_t, size_t, std::string_view>;
  std::priority_queue<Key, std::vector<Key>, std::greater<>> heap;
  auto push = [&](std::string_view name, const Group& g) {
    if (g.next >= g.jobs.size()) return;
    const size_t j = g.jobs[g.next];
    heap.emplace(share(g.used) / g.weight, ctx.pending[j]->submit_s, j, name);
  };
  for (const auto& [name, g] : groups) push(name, g);
  while (!heap.empty()) {
    const auto [s, submit, index, name] = heap.top();
    heap.pop();
    Group& g = groups.find(name)->second;
    order.push_back(index);
    g.used += ctx.pending[index]->Total();
    ++g.next;
    push(name, g);
  }
  return order;
}

TEST(FairShareQueuePolicy, TheLazyOrderIsTheWholeOrderOfBefore) {
  // Random queues (arrival order mostly, some out of order, users in runs and mixed),
  // running jobs, weights, aging and shortest-first: Order and Lazy, read to the end,
  // give the order the whole computation gave.
  std::mt19937 rng(31);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  ClusterState cluster = MakeCluster(4, 8);
  for (int round = 0; round < 300; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int users = 1 + pick(5);
    std::vector<QueuedJob> jobs, running_jobs;
    int64_t submit = 0;
    const int n = pick(60);
    for (int i = 0; i < n; ++i) {
      submit += pick(4) == 0 ? -pick(20) : pick(3);  // ties and some out of order
      const std::string user = "u" + std::to_string(pick(3) == 0 ? pick(users) : i % users);
      jobs.push_back(Job("p" + std::to_string(i), user, submit,
                         {GpuTask(1 + pick(3), 1000, 1000 * (1 + pick(8)))}, pick(3) * 100));
      jobs.back().runtime_estimate_s = pick(2) * pick(300);
    }
    for (int i = 0; i < pick(8); ++i) {
      running_jobs.push_back(
          Job("r" + std::to_string(i), "u" + std::to_string(pick(users)), 0, {GpuTask(pick(4))}));
    }
    std::vector<RunningJob> running;
    for (const QueuedJob& r : running_jobs) running.push_back(RunningJob{&r, 0, {}});
    QueuePolicyConfig config;
    config.fair_group = pick(4) == 0 ? FairShareGroup::kProject : FairShareGroup::kUser;
    if (pick(2) == 0) config.fair_weights["u1"] = 0.5 + pick(4);
    if (pick(3) == 0) config.fair_weights["p-u0"] = 2;
    if (pick(3) == 0) config.fair_starving_after_s = 1 + pick(40);
    config.fair_shortest_first = pick(3) == 0;
    auto p = BuiltinQueuePolicies().Create("fair", config);
    ASSERT_TRUE(p.ok());
    auto pending = Pointers(jobs);
    const QueueContext ctx{50, pending, running, &cluster};
    const std::vector<size_t> want = ReferenceFairOrder(ctx, config);
    EXPECT_EQ((*p)->Order(ctx), want);
    std::unique_ptr<QueueOrder> lazy = (*p)->Lazy(ctx);
    std::vector<size_t> read;
    while (std::optional<size_t> i = lazy->Next()) read.push_back(*i);
    EXPECT_EQ(read, want);
  }
}

// H holds 8 of 16 GPUs; both groups wait with 1-GPU jobs whose time limits are their
// run times: H's a (100 s) and b (300 s), L's c (200 s) and d (400 s).
struct SjfBoundCase {
  ClusterState cluster = MakeCluster(2, 8);
  QueuedJob running_h = Job("rh", "H", 0, {GpuTask(8)});
  std::vector<RunningJob> running = {RunningJob{&running_h, 0, {}}};
  std::vector<QueuedJob> jobs = {
      Job("a", "H", 1, {GpuTask(1)}, 100), Job("b", "H", 2, {GpuTask(1)}, 300),
      Job("c", "L", 3, {GpuTask(1)}, 200), Job("d", "L", 4, {GpuTask(1)}, 400)};
};

TEST(FairShareQueuePolicy, SjfBoundOrdersEveryJobShortestFirstWithinTheBound) {
  SjfBoundCase t;
  QueuePolicyConfig config;
  config.fair_shortest_first = true;
  // By share L (0 of 16) goes first until it has nothing left.
  EXPECT_EQ(FairOrder(t.jobs, t.running, t.cluster, config), (std::vector<size_t>{2, 3, 0, 1}));
  // Bound 1.5 x 1/2: H's 0.5 is within it, so all four go shortest first.
  config.fair_sjf_bound = 1.5;
  EXPECT_EQ(FairOrder(t.jobs, t.running, t.cluster, config), (std::vector<size_t>{0, 2, 1, 3}));
  // Bound 1 x 1/2: H is at it; with a counted as started (9/16) it is above, so b goes
  // after L's jobs.
  config.fair_sjf_bound = 1;
  EXPECT_EQ(FairOrder(t.jobs, t.running, t.cluster, config), (std::vector<size_t>{0, 2, 3, 1}));
  // The lazy order is the same.
  auto p = BuiltinQueuePolicies().Create("fair", config);
  ASSERT_TRUE(p.ok());
  auto pending = Pointers(t.jobs);
  std::unique_ptr<QueueOrder> lazy = (*p)->Lazy(QueueContext{0, pending, t.running, &t.cluster});
  std::vector<size_t> read;
  while (std::optional<size_t> i = lazy->Next()) read.push_back(*i);
  EXPECT_EQ(read, (std::vector<size_t>{0, 2, 3, 1}));
}

// H holds 12 of 16 GPUs (x = 0.75 / (1/2) = 1.5 times an equal share); both groups
// wait with 1-GPU jobs: H's short a (100 s) and long b (400 s), L's c (200 s) and d
// (450 s, slightly longer than b).
TEST(FairShareQueuePolicy, SjfPenaltyStretchesTheRunTimesOfAGroupOverItsShare) {
  ClusterState cluster = MakeCluster(2, 8);
  QueuedJob running_h = Job("rh", "H", 0, {GpuTask(8), GpuTask(4)});
  std::vector<RunningJob> running = {RunningJob{&running_h, 0, {}}};
  std::vector<QueuedJob> jobs = {
      Job("a", "H", 1, {GpuTask(1)}, 100), Job("b", "H", 2, {GpuTask(1)}, 400),
      Job("c", "L", 3, {GpuTask(1)}, 200), Job("d", "L", 4, {GpuTask(1)}, 450)};
  QueuePolicyConfig config;
  config.fair_sjf_bound = 1000;
  // No penalty: shortest first whatever the group.
  EXPECT_EQ(FairOrder(jobs, running, cluster, config), (std::vector<size_t>{0, 2, 1, 3}));
  // B = 1: a's key is 100 x 1.5 = 150, before c's 200; with a counted as started H holds
  // 13/16 (x = 1.625), so b's key is 400 x 1.625 = 650, after d's 450.
  config.fair_sjf_penalty = 1;
  EXPECT_EQ(FairOrder(jobs, running, cluster, config), (std::vector<size_t>{0, 2, 3, 1}));
  // Gradual: B = 0.1 stretches b to 425, still before d.
  config.fair_sjf_penalty = 0.1;
  EXPECT_EQ(FairOrder(jobs, running, cluster, config), (std::vector<size_t>{0, 2, 1, 3}));
  // B = 4: a's key is 100 x 3 = 300, so even the short job goes after c.
  config.fair_sjf_penalty = 4;
  EXPECT_EQ(FairOrder(jobs, running, cluster, config), (std::vector<size_t>{2, 0, 3, 1}));
  // The lazy order is the same.
  config.fair_sjf_penalty = 1;
  auto p = BuiltinQueuePolicies().Create("fair", config);
  ASSERT_TRUE(p.ok());
  auto pending = Pointers(jobs);
  std::unique_ptr<QueueOrder> lazy = (*p)->Lazy(QueueContext{0, pending, running, &cluster});
  std::vector<size_t> read;
  while (std::optional<size_t> i = lazy->Next()) read.push_back(*i);
  EXPECT_EQ(read, (std::vector<size_t>{0, 2, 3, 1}));
}

class FixedService final : public GroupServiceSource {
 public:
  explicit FixedService(std::map<std::string, double, std::less<>> ratios)
      : ratios_(std::move(ratios)) {}
  double ServiceRatio(std::string_view group, int64_t /*now_s*/) const override {
    auto it = ratios_.find(group);
    return it == ratios_.end() ? 1 : it->second;
  }

 private:
  std::map<std::string, double, std::less<>> ratios_;
};

TEST(FairShareQueuePolicy, ServiceOrderPutsTheLeastServedGroupFirst) {
  SjfBoundCase t;
  QueuePolicyConfig config;
  // H, though it holds half the GPUs, is the less served (0.2 against 0.9): all of its
  // jobs go first, oldest first (shortest first when asked).
  config.fair_service = std::make_shared<FixedService>(
      std::map<std::string, double, std::less<>>{{"H", 0.2}, {"L", 0.9}});
  EXPECT_EQ(Users(t.jobs, FairOrder(t.jobs, t.running, t.cluster, config)), "HHLL");
  config.fair_service = std::make_shared<FixedService>(
      std::map<std::string, double, std::less<>>{{"H", 0.9}, {"L", 0.2}});
  EXPECT_EQ(Users(t.jobs, FairOrder(t.jobs, t.running, t.cluster, config)), "LLHH");
  // Equal ratios: by dominant share, as without a source.
  config.fair_service = std::make_shared<FixedService>(
      std::map<std::string, double, std::less<>>{{"H", 0.5}, {"L", 0.5}});
  EXPECT_EQ(Users(t.jobs, FairOrder(t.jobs, t.running, t.cluster, config)), "LLHH");
  config.fair_service = std::make_shared<FixedService>(
      std::map<std::string, double, std::less<>>{{"H", 0.2}, {"L", 0.9}});
  config.fair_shortest_first = true;
  t.jobs[0].time_limit_s = 500;
  EXPECT_EQ(FairOrder(t.jobs, t.running, t.cluster, config), (std::vector<size_t>{1, 0, 2, 3}));
}

}  // namespace
}  // namespace gpupool::sched
