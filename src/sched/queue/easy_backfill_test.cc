#include "sched/queue/easy_backfill.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "sched/queue/first_fit_for_test.h"
#include "sched/queue/gang_placement.h"
#include "sched/queue/queue_policy_registry.h"
#include "sched/queue/queue_test_util.h"
#include "sched/queue/scheduling_pass.h"
#include "sched/rng.h"

namespace gpupool::sched {
namespace {

using testing::FirstFitForTest;
using testing::GpuTask;
using testing::Job;
using testing::MakeCluster;
using testing::Pointers;

TEST(ReservationPlan, ReleasesJobsInPlannedEndOrderUntilTheHeadFits) {
  ClusterState cluster = MakeCluster(2, 4);
  FirstFitForTest policy;
  std::vector<QueuedJob> jobs = {Job("a", "u", 0, {GpuTask(4)}, 300),
                                 Job("b", "u", 0, {GpuTask(2)}, 100),
                                 Job("c", "u", 0, {GpuTask(2)}, 200)};
  std::vector<RunningJob> running;
  for (const QueuedJob& j : jobs) {
    auto g = PlaceGang(cluster, j.tasks, policy);
    ASSERT_TRUE(g.ok() && g->placed);
    running.push_back(RunningJob{&j, 0, g->placements});
  }
  // b and c share node 1; a 4-GPU head fits once both have ended (t=200), before a.
  QueuedJob head = Job("head", "u", 1, {GpuTask(4)}, 10);
  FirstFitForTest planner;
  auto plan = ReservationPlan::Make(cluster, 5, running, head, planner);
  ASSERT_TRUE(plan.ok());
  ASSERT_NE(*plan, nullptr);
  EXPECT_EQ((*plan)->start_s(), 200);
  EXPECT_EQ((*plan)->head_placements()[0].node, 1);

  // A gang of two 4-GPU tasks needs both nodes: t=300.
  QueuedJob wide = Job("wide", "u", 1, {GpuTask(4), GpuTask(4)}, 10);
  FirstFitForTest planner2;
  auto plan2 = ReservationPlan::Make(cluster, 5, running, wide, planner2);
  ASSERT_TRUE(plan2.ok() && *plan2 != nullptr);
  EXPECT_EQ((*plan2)->start_s(), 300);

  // More than the cluster: no reservation at all.
  QueuedJob huge = Job("huge", "u", 1, {GpuTask(4), GpuTask(4), GpuTask(4)}, 10);
  FirstFitForTest planner3;
  auto plan3 = ReservationPlan::Make(cluster, 5, running, huge, planner3);
  ASSERT_TRUE(plan3.ok());
  EXPECT_EQ(*plan3, nullptr);
}

TEST(ReservationPlan, AdmitRefusesReservedGpusAndAcceptsOthers) {
  ClusterState cluster = MakeCluster(1, 4);
  FirstFitForTest policy;
  QueuedJob r = Job("r", "u", 0, {GpuTask(2)}, 100);
  auto g = PlaceGang(cluster, r.tasks, policy);
  ASSERT_TRUE(g.ok() && g->placed);
  std::vector<RunningJob> running = {RunningJob{&r, 0, g->placements}};
  QueuedJob head = Job("head", "u", 1, {GpuTask(3)}, 10);
  FirstFitForTest planner;
  auto plan = ReservationPlan::Make(cluster, 0, running, head, planner);
  ASSERT_TRUE(plan.ok() && *plan != nullptr);
  ReservationPlan& p = **plan;
  EXPECT_EQ(p.start_s(), 100);
  // The head takes 3 of 4 GPUs at t=100: one GPU stays free for long jobs.
  QueuedJob one = Job("one", "u", 2, {GpuTask(1)}, 1000);
  QueuedJob another = Job("another", "u", 3, {GpuTask(1)}, 1000);
  const int32_t spare = [&] {
    for (int32_t i = 0; i < 4; ++i) {
      bool reserved = false;
      for (int32_t h : p.head_placements()[0].gpus) reserved |= h == i;
      bool busy = cluster.node(0).gpu_free_milli[i] < 1000;
      if (!reserved && !busy) return i;
    }
    return -1;
  }();
  ASSERT_GE(spare, 0);
  auto ok = p.Admit(one, {Placement{0, {spare}}}, 1000);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(*ok);
  // The spare GPU is now planned for `one`; the other free GPU is reserved.
  for (int32_t i = 0; i < 4; ++i) {
    if (i == spare || cluster.node(0).gpu_free_milli[i] < 1000) continue;
    auto refused = p.Admit(another, {Placement{0, {i}}}, 1000);
    ASSERT_TRUE(refused.ok());
    EXPECT_FALSE(*refused);
    auto before_start = p.Admit(another, {Placement{0, {i}}}, 100);
    ASSERT_TRUE(before_start.ok());
    EXPECT_TRUE(*before_start);  // done by t=100: no conflict
  }
}

// Property: on random small clusters and queues, an EASY pass never moves the head job's
// planned start later than it was without backfilling.
TEST(EasyBackfill, NeverDelaysTheHeadJobOnRandomCases) {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    Rng rng(seed);
    ClusterState cluster = MakeCluster(1 + static_cast<int>(rng.Uniform(3)), 4);
    FirstFitForTest policy;
    std::vector<QueuedJob> running_jobs;
    running_jobs.reserve(16);
    std::vector<RunningJob> running;
    for (int i = 0; i < 6; ++i) {
      QueuedJob j =
          Job(fmt::format("r{}", i), "u", 0, {GpuTask(1 + static_cast<int>(rng.Uniform(4)))},
              1 + static_cast<int64_t>(rng.Uniform(100)));
      running_jobs.push_back(std::move(j));
      auto g = PlaceGang(cluster, running_jobs.back().tasks, policy);
      ASSERT_TRUE(g.ok());
      if (!g->placed) {
        running_jobs.pop_back();
        continue;
      }
      running.push_back(RunningJob{&running_jobs.back(), 0, g->placements});
    }
    std::vector<QueuedJob> pending;
    for (int i = 0; i < 8; ++i) {
      std::vector<Task> tasks;
      const int width = 1 + static_cast<int>(rng.Uniform(2));
      for (int t = 0; t < width; ++t)
        tasks.push_back(GpuTask(1 + static_cast<int>(rng.Uniform(4))));
      pending.push_back(Job(fmt::format("p{}", i), "u", 1 + i, std::move(tasks),
                            1 + static_cast<int64_t>(rng.Uniform(150))));
    }
    auto fifo = BuiltinQueuePolicies().Create("fifo");
    ASSERT_TRUE(fifo.ok());
    SchedulingPass pass(
        **fifo, policy,
        []() -> Result<std::unique_ptr<PlacementPolicy>> {
          return std::unique_ptr<PlacementPolicy>(std::make_unique<FirstFitForTest>());
        },
        PassOptions{StartRule::kEasyBackfill, 0});
    auto pointers = Pointers(pending);
    auto r = pass.Run(cluster, 0, pointers, running);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (!r->reserved_index) continue;
    // Re-plan with everything now running, the backfilled jobs included.
    std::vector<RunningJob> after = running;
    for (const auto& s : r->started) {
      after.push_back(RunningJob{pointers[s.pending_index], 0, s.placements});
    }
    FirstFitForTest planner;
    auto replan = ReservationPlan::Make(cluster, 0, after, *pointers[*r->reserved_index], planner);
    ASSERT_TRUE(replan.ok());
    ASSERT_NE(*replan, nullptr) << "seed " << seed;
    EXPECT_LE((*replan)->start_s(), r->reservation_start_s) << "seed " << seed;
    ++checked;
  }
  EXPECT_GT(checked, 50);  // the generator really produced blocked heads
}

}  // namespace
}  // namespace gpupool::sched
