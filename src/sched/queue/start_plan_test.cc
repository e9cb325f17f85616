#include "sched/queue/start_plan.h"

#include <gtest/gtest.h>

#include "sched/queue/first_fit_for_test.h"
#include "sched/queue/gang_placement.h"
#include "sched/queue/queue_test_util.h"

namespace gpupool::sched {
namespace {

using testing::FirstFitForTest;
using testing::GpuTask;
using testing::Job;
using testing::MakeCluster;
using testing::Pointers;

PlanningPolicyMaker FirstFit() {
  return []() -> Result<std::unique_ptr<PlacementPolicy>> {
    return std::unique_ptr<PlacementPolicy>(new FirstFitForTest());
  };
}

struct Running {
  std::vector<QueuedJob> jobs;
  std::vector<RunningJob> running;
};

// `jobs` started at t=0 on `cluster`, in order.
void Start(ClusterState& cluster, Running& r) {
  FirstFitForTest policy;
  for (const QueuedJob& j : r.jobs) {
    auto g = PlaceGang(cluster, j.tasks, policy);
    ASSERT_TRUE(g.ok() && g->placed);
    r.running.push_back(RunningJob{&j, 0, g->placements});
  }
}

TEST(PlanStarts, PlansEachJobInQueueOrderBehindTheOnesBefore) {
  // One node of 4 GPUs: 2 held until t=100, 2 until t=300.
  ClusterState cluster = MakeCluster(1, 4);
  Running r;
  r.jobs = {Job("a", "u", 0, {GpuTask(2)}, 100), Job("b", "u", 0, {GpuTask(2)}, 300)};
  r.running.reserve(r.jobs.size());
  Start(cluster, r);
  // x (2 GPUs, 50 s) at 100 when a ends; y (4 GPUs) once b and x have ended, at 300; z
  // (1 GPU, no limit) after y's 60 s, at 360; w (4 GPUs) never: z holds one forever.
  std::vector<QueuedJob> queue = {
      Job("x", "u", 1, {GpuTask(2)}, 50), Job("y", "u", 2, {GpuTask(4)}, 60),
      Job("z", "u", 3, {GpuTask(1)}, 0), Job("w", "u", 4, {GpuTask(4)}, 10)};
  std::vector<const QueuedJob*> order = Pointers(queue);
  auto plan = PlanStarts(cluster, 5, r.running, order, FirstFit());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->size(), 4u);
  EXPECT_EQ((*plan)[0].start_s, 100);
  EXPECT_EQ((*plan)[1].start_s, 300);
  EXPECT_EQ((*plan)[2].start_s, 360);
  EXPECT_EQ((*plan)[3].start_s, 0);
  EXPECT_EQ((*plan)[3].why, "a job in its way has no time limit");
  // The cluster given is not changed.
  EXPECT_EQ(cluster.node(0).gpu_free_milli[0], 0);
}

TEST(PlanStarts, AJobThatCannotBePlannedLeavesThePlanAsItWas) {
  ClusterState cluster = MakeCluster(1, 4);
  Running r;
  r.jobs = {Job("forever", "u", 0, {GpuTask(2)}, 0), Job("a", "u", 0, {GpuTask(1)}, 100)};
  r.running.reserve(r.jobs.size());
  Start(cluster, r);
  // big never fits (forever holds 2 GPUs); what was released while trying (a's GPU at 100)
  // is held again, so small (2 GPUs) waits for a; one (1 GPU) then waits for small.
  std::vector<QueuedJob> queue = {Job("big", "u", 1, {GpuTask(4)}, 10),
                                  Job("small", "u", 2, {GpuTask(2)}, 10),
                                  Job("one", "u", 3, {GpuTask(1)}, 10)};
  std::vector<const QueuedJob*> order = Pointers(queue);
  auto plan = PlanStarts(cluster, 7, r.running, order, FirstFit());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)[0].start_s, 0);
  EXPECT_EQ((*plan)[0].why, "a job in its way has no time limit");
  EXPECT_EQ((*plan)[1].start_s, 100);
  EXPECT_EQ((*plan)[2].start_s, 110);  // never before the job ahead of it: after it
}

}  // namespace
}  // namespace gpupool::sched
