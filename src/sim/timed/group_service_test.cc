#include "sim/timed/group_service.h"

#include <gtest/gtest.h>

#include <map>

#include "sim/timed/timed_experiment.h"
#include "sim/timed/timed_metrics.h"
#include "sim/timed/timed_test_util.h"

namespace gpupool::sim {
namespace {

using testing::Cluster;
using testing::FirstFitRegistry;
using testing::TJob;

TEST(GroupService, RatioIsRunTimeKeptOverTimeInTheSystem) {
  GroupService s;
  EXPECT_DOUBLE_EQ(s.ServiceRatio("g", 50), 1);  // no job yet
  s.Join("g", 0, 0);
  EXPECT_DOUBLE_EQ(s.ServiceRatio("g", 0), 1);  // no time in the system yet
  EXPECT_DOUBLE_EQ(s.ServiceRatio("g", 10), 0);
  s.Start("g", 0, 10);
  EXPECT_DOUBLE_EQ(s.ServiceRatio("g", 20), 10.0 / 20);
  // Stopped at 30 with 5 s of its 20 lost, queued again until 40.
  s.Stop("g", 5, /*requeue=*/true, 30);
  EXPECT_DOUBLE_EQ(s.ServiceRatio("g", 35), 15.0 / 35);
  s.Start("g", 30, 40);
  s.End("g", 0, 20, 5, 100);
  EXPECT_DOUBLE_EQ(s.ServiceRatio("g", 100), 75.0 / 100);
  EXPECT_DOUBLE_EQ(s.ServiceRatio("g", 500), 75.0 / 100);  // ended jobs stop counting time
  // A second job, waiting since 100: its time in the system counts, its run time not.
  s.Join("g", 100, 100);
  EXPECT_DOUBLE_EQ(s.ServiceRatio("g", 150), 75.0 / 150);
  EXPECT_DOUBLE_EQ(s.ServiceRatio("h", 150), 1);
}

TimedOptions ServiceOptions(const std::string& queue) {
  TimedOptions o;
  o.queue_policy = queue;
  o.placement_policy = "first-fit";
  o.placement_registry = &FirstFitRegistry();
  return o;
}

std::map<std::string, JobRecord> RecordsById(const TimedRun& run) {
  std::map<std::string, JobRecord> m;
  for (const JobRecord& j : run.jobs) m[j.id] = j;
  return m;
}

// One GPU. bob's b0 runs 0-1000; bob's b1 (at 100) and alice's a1 (at 900) wait. At 1000
// both groups hold nothing, so by share bob's older job goes first; by service alice
// (0 of her 100 s in the system served) goes before bob (1,000 of 1,900 s).
TEST(GroupService, ServiceOrderStartsTheLeastServedGroupsJob) {
  std::vector<TraceJob> jobs = {TJob("b0", "bob", 0, 1000, 1), TJob("b1", "bob", 100, 50, 1),
                                TJob("a1", "alice", 900, 50, 1)};
  TimedOptions o = ServiceOptions("fair");
  auto run = RunTimedExperiment(Cluster("1x1"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(RecordsById(*run)["b1"].start_s, 1000);
  EXPECT_EQ(RecordsById(*run)["a1"].start_s, 1050);
  o.service_order = true;
  run = RunTimedExperiment(Cluster("1x1"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(RecordsById(*run)["a1"].start_s, 1000);
  EXPECT_EQ(RecordsById(*run)["b1"].start_s, 1050);
}

// Two GPUs, two groups (a fair share of 1 GPU each). bob's b1 takes both from 0;
// alice's 2-GPU job waits from 10. The share rule never lets alice preempt (her job
// alone is above her share). By service, when bob's b2 arrives at 4,000 alice has
// been served nothing and bob fully, and bob is over his share: b1 is stopped and alice
// starts. The final service ratios are those of the metrics.
TEST(GroupService, ServicePreemptionStopsABetterServedGroupOverItsShare) {
  std::vector<TraceJob> jobs = {TJob("b1", "bob", 0, 100000, 2), TJob("a", "alice", 10, 100, 2),
                                TJob("b2", "bob", 4000, 100, 1)};
  TimedOptions o = ServiceOptions("fifo");
  o.preemption = true;
  o.preempt.min_runtime_s = 600;
  o.checkpoint_interval_s = 1000;
  auto run = RunTimedExperiment(Cluster("1x2"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(RecordsById(*run)["a"].start_s, 100000);
  EXPECT_EQ(run->preemptions, 0u);
  o.service_preemption = true;
  run = RunTimedExperiment(Cluster("1x2"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto j = RecordsById(*run);
  EXPECT_EQ(j["a"].start_s, 4000);
  EXPECT_EQ(j["b1"].preemptions, 1);
  EXPECT_EQ(j["b1"].lost_s, 0);  // 4,000 s run, checkpointed at 4,000
  EXPECT_EQ(run->preemptions, 1u);
  // Replaying the run's records through a GroupService gives the metrics' ratios.
  TimedSummary s = Summarize(*run, sched::FairShareGroup::kUser);
  GroupService replay;
  int64_t end = 0;
  for (const JobRecord& r : run->jobs) {
    replay.Join(r.user, r.submit_s, r.submit_s);
    replay.Start(r.user, r.submit_s, r.submit_s + r.waited_s);
    replay.End(r.user, r.submit_s, r.waited_s, r.lost_s, r.end_s);
    end = std::max(end, r.end_s);
  }
  ASSERT_EQ(s.groups.size(), 2u);
  for (const GroupStats& g : s.groups) {
    EXPECT_NEAR(replay.ServiceRatio(g.group, end), g.service_ratio, 1e-12) << g.group;
  }
  // Bob is better served by 1 - 0 = 1: a gap of 0.9 still lets alice preempt, 1 not.
  o.service_gap = 0.9;
  run = RunTimedExperiment(Cluster("1x2"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(RecordsById(*run)["a"].start_s, 4000);
  o.service_gap = 1;
  run = RunTimedExperiment(Cluster("1x2"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(RecordsById(*run)["a"].start_s, 100000);
}

}  // namespace
}  // namespace gpupool::sim
