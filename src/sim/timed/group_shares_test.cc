#include "sim/timed/group_shares.h"

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

TEST(MaxMinShares, SmallDemandsGetWhatTheyAskAndTheRestIsSplitEqually) {
  EXPECT_EQ(MaxMinShares({10, 1, 5}, 12), (std::vector<double>{6, 1, 5}));
  EXPECT_EQ(MaxMinShares({2, 3}, 12), (std::vector<double>{2, 3}));  // enough for all
  EXPECT_EQ(MaxMinShares({9, 9, 0}, 12), (std::vector<double>{6, 6, 0}));
  EXPECT_EQ(MaxMinShares({4, 4}, 0), (std::vector<double>{0, 0}));
  EXPECT_TRUE(MaxMinShares({}, 8).empty());
}

// Two GPUs. a holds both from 0; b asks for one from 100 and gets it at 200, when a lets
// one go.
TEST(GroupShares, IntegratesAllocationAgainstTheMaxMinShare) {
  GroupShares s(2000);
  s.AdvanceTo(0);
  s.Change("a", 2000, 2000);
  s.AdvanceTo(100);  // [0, 100): a alone, x = 1
  s.Change("b", 0, 1000);
  s.AdvanceTo(200);  // [100, 200): a 2 of 1 entitled, b 0 of 1: Jain 0.5
  s.Change("a", -1000, -1000);
  s.Change("b", 1000, 0);
  s.AdvanceTo(300);  // [200, 300): 1 and 1
  s.AdvanceTo(300);  // no time passes: nothing counted
  EXPECT_NEAR(s.MeanInstantJain(), (100 + 50 + 100) / 300.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.busy_s(), 300);
  const auto& g = s.groups();
  EXPECT_DOUBLE_EQ(g.at("a").received_gpu_s, 500);
  EXPECT_DOUBLE_EQ(g.at("a").entitled_gpu_s, 400);
  EXPECT_DOUBLE_EQ(g.at("b").received_gpu_s, 100);
  EXPECT_DOUBLE_EQ(g.at("b").entitled_gpu_s, 200);
  // As a service source: attainment so far; 1 for a group never entitled to anything.
  EXPECT_DOUBLE_EQ(s.ServiceRatio("a", 300), 1.25);
  EXPECT_DOUBLE_EQ(s.ServiceRatio("b", 300), 0.5);
  EXPECT_DOUBLE_EQ(s.ServiceRatio("c", 300), 1);
  // Once every job has left, time passes without counting.
  s.Change("a", -1000, -1000);
  s.Change("b", -1000, -1000);
  s.AdvanceTo(1000);
  EXPECT_DOUBLE_EQ(s.busy_s(), 300);
  EXPECT_DOUBLE_EQ(GroupShares(8000).MeanInstantJain(), 1);
}

// Two GPUs. bob runs two 1-GPU jobs 0-1000; alice's 1-GPU job (500 s) comes at 500.
// Without preemption she waits until 1000: over [500, 1000) bob holds twice his share
// and she nothing. With preemption one of bob's jobs gives way at 500 and every moment
// is fair.
TEST(GroupShares, TheRunReportsAttainmentAndPreemptionMakesItFair) {
  std::vector<TraceJob> jobs = {TJob("b1", "bob", 0, 1000, 1), TJob("b2", "bob", 0, 1000, 1),
                                TJob("a", "alice", 500, 500, 1)};
  TimedOptions o;
  o.queue_policy = "fifo";
  o.placement_policy = "first-fit";
  o.placement_registry = &FirstFitRegistry();
  auto run = RunTimedExperiment(Cluster("1x2"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  TimedSummary s = Summarize(*run, sched::FairShareGroup::kUser);
  EXPECT_NEAR(s.share_jain_mean, (500 + 250 + 500) / 1500.0, 1e-12);
  std::map<std::string, double> attained;
  for (const GroupStats& g : s.groups) attained[g.group] = g.share_attainment;
  EXPECT_NEAR(attained["bob"], 2000.0 / 1500, 1e-12);  // entitled 2 x 500 + 1 x 500
  EXPECT_NEAR(attained["alice"], 500.0 / 1000, 1e-12);
  EXPECT_NEAR(s.share_jain_index, JainIndex({2000.0 / 1500, 0.5}), 1e-12);

  o.preemption = true;
  o.preempt.min_runtime_s = 100;
  run = RunTimedExperiment(Cluster("1x2"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  ASSERT_EQ(run->preemptions, 1u);
  s = Summarize(*run, sched::FairShareGroup::kUser);
  EXPECT_NEAR(s.share_jain_mean, 1, 1e-12);
  EXPECT_NEAR(s.share_jain_index, 1, 1e-12);
}

}  // namespace
}  // namespace gpupool::sim
