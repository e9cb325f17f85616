// The victims' GPUs held for their preemptor, as the scheduler sees them
// (preemption_holds.h, docs/preemption.md): gangs over several nodes, victims that still
// run, nodes that are gone.
#include "controller/preemption_holds.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "controller/job_scheduler.h"

namespace gpupool::controller {
namespace preemption_holds_test {

constexpr int64_t kHoldNowS = 1'700'000'000;

gpu::NodeInfo HoldTwoGpuNode(const std::string& host) {
  gpu::NodeInfo n;
  n.hostname = host;
  for (int i = 0; i < 2; ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = i;
    g.name = "NVIDIA H100 80GB HBM3";
    g.uuid = host + "-GPU-" + std::to_string(i);
    g.memory_total_bytes = uint64_t{80} << 30;
    n.gpus.push_back(g);
  }
  return n;
}

jobs::TaskPlacement HeldOnNode(const std::string& node) {
  return {node, {0, 1}, {node + "-GPU-0", node + "-GPU-1"}, 1000};
}

// `tasks` tasks of 2 GPUs; submitted `age_s` before kHoldNowS.
jobs::Job HoldGang(int64_t id, const std::string& user, int tasks, int64_t age_s) {
  jobs::Job j;
  j.id = id;
  j.user = user;
  j.uid = 1000;
  j.command = {"true"};
  j.request.gpus = 2;
  j.request.tasks = tasks;
  j.request.cpu_milli = 100;
  j.submit_time_us = (kHoldNowS - age_s) * 1'000'000;
  return j;
}

class PreemptionHoldsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<JobScheduler>> s = JobScheduler::Create("default", "fair", "easy");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    s_ = std::move(*s);
  }
  gpu::NodeInfo a_ = HoldTwoGpuNode("a"), b_ = HoldTwoGpuNode("b");
  std::vector<SchedNode> nodes_ = {{"a", &a_, 64000, 256000, false, {}},
                                   {"b", &b_, 64000, 256000, false, {}}};
  std::unique_ptr<JobScheduler> s_;
  // The preemptor (bob): a gang over both nodes, its victims' GPUs held for it. `earlier`
  // (carol, older, 2 GPUs) comes first in the fair order.
  jobs::Job preemptor_ = HoldGang(2, "bob", 2, 10);
  jobs::Job earlier_ = HoldGang(3, "carol", 1, 20);
  PreemptorHolds holds_ = {{2, {{HeldOnNode("a"), HeldOnNode("b")}}}};
};

TEST_F(PreemptionHoldsTest, AGangStartsOnItsHeldGpusOnEveryNodeBeforeAnEarlierJob) {
  Result<ScheduleResult> plan =
      s_->Plan({&preemptor_, &earlier_}, nodes_, kHoldNowS, {}, {}, 0, holds_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->starts.count(2), 1u);
  EXPECT_EQ(plan->starts[2][0].node, "a");
  EXPECT_EQ(plan->starts[2][1].node, "b");
  EXPECT_EQ(plan->starts.count(3), 0u);
  // Without the hold the earlier job goes first, and the gang no longer fits.
  plan = s_->Plan({&preemptor_, &earlier_}, nodes_, kHoldNowS);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->starts.count(3), 1u);
  EXPECT_EQ(plan->starts.count(2), 0u);
}

// A victim still stops on node b: the preemptor waits, the GPUs of node a stay held (the
// earlier job does not get them).
TEST_F(PreemptionHoldsTest, WhileAVictimStillRunsTheFreedGpusStayHeld) {
  jobs::Job victim = HoldGang(1, "alice", 1, 7200);
  victim.state = jobs::JobState::kRunning;
  victim.start_time_us = (kHoldNowS - 3600) * 1'000'000;
  victim.placement = {HeldOnNode("b")};
  victim.preemptible = true;
  victim.preempted_by = 2;
  victim.cancel_requested = true;
  Result<ScheduleResult> plan =
      s_->Plan({&victim, &preemptor_, &earlier_}, nodes_, kHoldNowS, {}, {}, 0, holds_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->starts.empty());
  EXPECT_TRUE(plan->preemptions.empty());
  const std::string why = plan->pending_reasons[2];
  EXPECT_NE(why.find(kHeldNote), std::string::npos) << why;
  EXPECT_EQ(why.find("preempting"), std::string::npos) << why;
}

// `queue --start` (JobSchedulerStartPlanTest's plan) with a victim still stopping on node
// b (no time limit): the preemptor starts on its held placement when its victims' grace
// ends, and the earlier job gets node a's held GPUs when the hold expires at the latest
// (without the hold's times both had no start: the placeholders and the victim held
// their GPUs for ever in the plan).
TEST_F(PreemptionHoldsTest, TheStartPlanStartsAHeldPreemptorWhenItsVictimsGraceEnds) {
  jobs::Job victim = HoldGang(1, "alice", 1, 7200);
  victim.state = jobs::JobState::kRunning;
  victim.start_time_us = (kHoldNowS - 3600) * 1'000'000;
  victim.placement = {HeldOnNode("b")};
  victim.preemptible = true;
  victim.preempted_by = 2;
  victim.cancel_requested = true;
  const int64_t grace_end_s = kHoldNowS + 120;
  holds_[2].grace_end_us = grace_end_s * 1'000'000;
  Result<ScheduleResult> plan = s_->Plan({&victim, &preemptor_, &earlier_}, nodes_, kHoldNowS, {},
                                         {}, /*plan_starts=*/10, holds_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->starts.empty());
  EXPECT_EQ(plan->start_estimates_us,
            (std::map<int64_t, int64_t>{{2, grace_end_s * 1'000'000},
                                        {3, (grace_end_s + kPreemptHoldMarginS) * 1'000'000}}));
  EXPECT_TRUE(plan->start_notes.empty());
  // Past the victims' grace: now.
  plan = s_->Plan({&victim, &preemptor_, &earlier_}, nodes_, grace_end_s + 5, {}, {}, 10, holds_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->start_estimates_us.at(2), (grace_end_s + 5) * 1'000'000);
}

// A node of the planned placement is gone (lost): the hold is not applied, and the GPUs
// of the other node go to the fair order.
TEST_F(PreemptionHoldsTest, AHoldOnANodeThatIsGoneHoldsNothing) {
  const std::vector<SchedNode> only_a = {nodes_[0]};
  Result<ScheduleResult> plan =
      s_->Plan({&preemptor_, &earlier_}, only_a, kHoldNowS, {}, {}, 0, holds_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->starts.count(3), 1u);
}

}  // namespace preemption_holds_test
}  // namespace gpupool::controller
