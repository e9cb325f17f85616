// The times a node reports for its tasks are hostile input (docs/security.md, "Times a
// node reports"): the lifecycle keeps them between the attempt's placement and the
// controller's now (lifecycle::BoundNodeTime), and no deadline built on them overflows.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <numeric>

#include "controller/controller_test.h"
#include "controller/job_lifecycle.h"
#include "controller/usage.h"

namespace gpupool::controller {
namespace {

using controller_test::ControllerTest;
using controller_test::MakeJob;
using jobs::Job;
using jobs::JobState;
using protocol::Event;
using protocol::EventKind;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kHourUs = int64_t{3600} * 1'000'000;
constexpr int64_t kYearUs = int64_t{365} * 24 * kHourUs;
constexpr int64_t kNow = int64_t{1'700'000'000} * 1'000'000;

TEST(NodeTimes, ATimeIsKeptBetweenTheFloorAndNow) {
  const int64_t floor = kNow - kHourUs;
  EXPECT_EQ(lifecycle::BoundNodeTime(kNow - 2'000'000, floor, kNow), kNow - 2'000'000);
  EXPECT_EQ(lifecycle::BoundNodeTime(floor, floor, kNow), floor);
  EXPECT_EQ(lifecycle::BoundNodeTime(floor - 1, floor, kNow), floor);
  EXPECT_EQ(lifecycle::BoundNodeTime(kNow + kYearUs, floor, kNow), kNow);
  EXPECT_EQ(lifecycle::BoundNodeTime(kMax, floor, kNow), kNow);
  EXPECT_EQ(lifecycle::BoundNodeTime(kMin, floor, kNow), floor);
  EXPECT_EQ(lifecycle::BoundNodeTime(-1, floor, kNow), floor);
  // A floor past now (a record written before the bound): now.
  EXPECT_EQ(lifecycle::BoundNodeTime(kNow - 5, kNow + 10, kNow), kNow);
}

TEST(NodeTimes, TheFloorIsTheSubmitTimeOrTheLastEarlierAttemptsEnd) {
  Job j;
  j.submit_time_us = kNow - 3 * kHourUs;
  EXPECT_EQ(lifecycle::AttemptFloorUs(j), kNow - 3 * kHourUs);
  j.earlier_attempts.push_back(
      {.attempt = 1, .start_time_us = kNow - 2 * kHourUs, .end_time_us = kNow - kHourUs});
  EXPECT_EQ(lifecycle::AttemptFloorUs(j), kNow - kHourUs);
}

// Placed keeps the controller's now as the attempt's placement, and that is the floor:
// a node cannot charge the time its job waited in the queue.
TEST(NodeTimes, TheFloorIsTheAttemptsPlacementWhereItIsKept) {
  Job j;
  j.id = 7;
  j.command = {"true"};
  j.submit_time_us = kNow - 3 * kHourUs;
  Result<lifecycle::Transition> p =
      lifecycle::Step(j, lifecycle::Placed{{{"n1", {0}, {"GPU-0"}, 1000}}, {}}, kNow - kHourUs);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->next.placed_time_us, kNow - kHourUs);
  EXPECT_EQ(lifecycle::AttemptFloorUs(p->next), kNow - kHourUs);
  Result<lifecycle::Transition> s = lifecycle::Step(
      p->next, lifecycle::TaskStarted{"n1", 0, 1, j.submit_time_us}, kNow - kHourUs / 2);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->next.tasks[0].start_time_us, kNow - kHourUs);
  EXPECT_NE(s->effects.node_time_log, "");
}

TEST(NodeTimes, TheTimeLimitsDeadlineSaturates) {
  Job j;
  j.start_time_us = kNow;
  j.time_limit_s = 30;
  EXPECT_EQ(lifecycle::TimeLimitDeadlineUs(j, 60), kNow + 90'000'000);
  j.start_time_us = kMax - 10;
  j.time_limit_s = int64_t{10} * 365 * 24 * 3600;  // the most a job may ask for
  EXPECT_EQ(lifecycle::TimeLimitDeadlineUs(j, 60), kMax);
  j.time_limit_s = kMax;
  EXPECT_EQ(lifecycle::TimeLimitDeadlineUs(j, kMax), kMax);
  j.start_time_us = kNow;
  EXPECT_EQ(lifecycle::TimeLimitDeadlineUs(j, kMax), kMax);
}

// A one-GPU job of alice placed on n1 (attempt 1) at `placed_us`, submitted then.
Job Placed(int64_t placed_us) {
  Job j;
  j.id = 7;
  j.user = "alice";
  j.command = {"true"};
  j.state = JobState::kAssigned;
  j.submit_time_us = placed_us;
  j.placed_time_us = placed_us;
  j.attempt = 1;
  j.placement = {{"n1", {0}, {"GPU-0"}, 1000}};
  j.tasks.resize(1);
  j.tasks[0].host = "n1";
  return j;
}

lifecycle::TaskExited Exit(int64_t time_us) {
  lifecycle::TaskExited e;
  e.node = "n1";
  e.attempt = 1;
  e.time_us = time_us;
  e.exit_code = 0;
  return e;
}

TEST(NodeTimes, TheLifecycleBoundsAHostileStartAndEndAndSaysSo) {
  const int64_t placed = kNow - kHourUs;
  Result<lifecycle::Transition> s =
      lifecycle::Step(Placed(placed), lifecycle::TaskStarted{"n1", 0, 1, placed - kHourUs}, placed);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->next.state, JobState::kRunning);
  EXPECT_EQ(s->next.tasks[0].start_time_us, placed);
  EXPECT_EQ(s->next.start_time_us, placed);
  const std::string& log = s->effects.node_time_log;
  for (const std::string& part : {std::string("job 7 task 0"), std::string("node n1"),
                                  std::to_string(placed - kHourUs), std::to_string(placed)}) {
    EXPECT_NE(log.find(part), std::string::npos) << part << " in: " << log;
  }
  Result<lifecycle::Transition> e = lifecycle::Step(s->next, Exit(kNow + kYearUs), kNow);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->next.state, JobState::kSucceeded);
  EXPECT_EQ(e->next.tasks[0].end_time_us, kNow);
  EXPECT_EQ(e->next.end_time_us, kNow);
  EXPECT_NE(e->effects.node_time_log.find("end"), std::string::npos);
  EXPECT_DOUBLE_EQ(JobGpuHours(e->next, 0, kMax, kNow), 1.0);
  // An end before the task's start: its start (no negative run).
  Result<lifecycle::Transition> back = lifecycle::Step(s->next, Exit(kMin), kNow);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->next.tasks[0].end_time_us, placed);
}

TEST(NodeTimes, AClockTwoSecondsBehindIsKeptAsSentWithoutAWarning) {
  const int64_t placed = kNow - kHourUs;
  Result<lifecycle::Transition> s = lifecycle::Step(
      Placed(placed), lifecycle::TaskStarted{"n1", 0, 1, placed + 58'000'000}, placed + 60'000'000);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->next.tasks[0].start_time_us, placed + 58'000'000);
  EXPECT_EQ(s->effects.node_time_log, "");
  Result<lifecycle::Transition> e = lifecycle::Step(s->next, Exit(kNow - 2'000'000), kNow);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->next.tasks[0].end_time_us, kNow - 2'000'000);
  EXPECT_EQ(e->effects.node_time_log, "");
  // A clock half a second ahead: now, quietly.
  Result<lifecycle::Transition> ahead = lifecycle::Step(s->next, Exit(kNow + 500'000), kNow);
  ASSERT_TRUE(ahead.ok());
  EXPECT_EQ(ahead->next.tasks[0].end_time_us, kNow);
  EXPECT_EQ(ahead->effects.node_time_log, "");
}

// A --requeue job's attempt lost after a hostile start: its earlier attempt (what usage
// and fair share count once it waits again) holds the hour it ran.
TEST(NodeTimes, ALostAttemptKeepsOnlyTheHoursItRan) {
  const int64_t placed = kNow - kHourUs;
  Job j = Placed(placed);
  j.requeue = true;
  Result<lifecycle::Transition> s = lifecycle::Step(
      j, lifecycle::TaskStarted{"n1", 0, 1, placed - 1000 * kHourUs}, placed + 1'000'000);
  ASSERT_TRUE(s.ok());
  Result<lifecycle::Transition> lost =
      lifecycle::Step(s->next, lifecycle::NodeLost{"n1", "node n1 stopped responding"}, kNow);
  ASSERT_TRUE(lost.ok()) << lost.status().ToString();
  ASSERT_EQ(lost->next.state, JobState::kPending);
  ASSERT_EQ(lost->next.earlier_attempts.size(), 1u);
  EXPECT_EQ(lost->next.earlier_attempts[0].start_time_us, placed);
  EXPECT_DOUBLE_EQ(lost->next.earlier_attempts[0].gpu_hours, 1.0);
  // Its next attempt is not placed before that one ended; the old placement is gone.
  EXPECT_EQ(lost->next.placed_time_us, 0);
  EXPECT_EQ(lifecycle::AttemptFloorUs(lost->next), kNow);
}

// A running job whose stored start is near INT64_MAX (written before the bound, or by
// hand): the time-limit step neither overflows nor stops it.
TEST(NodeTimes, AStartNearInt64MaxDoesNotOverflowTheTimeLimit) {
  Job j = Placed(kNow - kHourUs);
  j.state = JobState::kRunning;
  j.tasks[0].start_time_us = kMax - 1000;
  j.start_time_us = kMax - 1000;
  j.time_limit_s = int64_t{10} * 365 * 24 * 3600;
  Result<lifecycle::Transition> t = lifecycle::Step(j, lifecycle::TimeLimit{60}, kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->changed);
}

class NodeTimesControllerTest : public ControllerTest {
 protected:
  // A 1-GPU job of alice's, placed on n1 and sent there now.
  Job Dispatched() {
    Register(1);
    Job j = c_->Submit(MakeJob(1), alice_).value();
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    EXPECT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);
    return Get(j.id);
  }
};

// The red team's case: a node says its task started an hour before it was sent and ended
// a year from now. The job is charged the half hour it held the GPU, nothing more: by
// JobGpuHours (what /metrics' GPU-seconds and fair share count) and ComputeUsage (GET
// /v1/usage).
TEST_F(NodeTimesControllerTest, AHostileNodeIsChargedOnlyTheRealInterval) {
  const Job placed = Dispatched();
  const int64_t dispatched = clock_.NowMicros();
  clock_.AdvanceMicros(kHourUs / 4);
  Event start = Ev(placed, EventKind::kStarted);
  start.time_us = dispatched - kHourUs;
  ASSERT_TRUE(Apply({start}).ok());
  Job j = Get(placed.id);
  EXPECT_EQ(j.state, JobState::kRunning);
  EXPECT_EQ(j.start_time_us, dispatched);
  clock_.AdvanceMicros(kHourUs / 4);
  Event end = Ev(placed, EventKind::kExited);
  end.time_us = clock_.NowMicros() + kYearUs;
  ASSERT_TRUE(Apply({end}).ok());
  j = Get(placed.id);
  EXPECT_EQ(j.state, JobState::kSucceeded);
  EXPECT_EQ(j.end_time_us, dispatched + kHourUs / 2);
  clock_.AdvanceMicros(kYearUs);  // a year on, it still counts half an hour
  EXPECT_DOUBLE_EQ(JobGpuHours(j, 0, kMax, clock_.NowMicros()), 0.5);
  const std::vector<UsageRow> usage = ComputeUsage({j}, 0, kMax, clock_.NowMicros(), "user");
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_DOUBLE_EQ(usage[0].gpu_hours, 0.5);
}

// A job that waited two hours for a GPU: a node that says it started at its submission
// is kept to the moment the controller placed it, and the stored record keeps that
// moment (placed_time_us).
TEST_F(NodeTimesControllerTest, AHostileNodeCannotChargeTheTimeAJobWaited) {
  const int64_t submitted = clock_.NowMicros();
  const int64_t id = c_->Submit(MakeJob(1), alice_).value().id;
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(id).state, JobState::kPending);  // no node yet
  clock_.AdvanceMicros(2 * kHourUs);
  Register(1);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);
  const Job placed = Get(id);
  const int64_t placed_at = clock_.NowMicros();
  EXPECT_EQ(placed.placed_time_us, placed_at);
  clock_.AdvanceMicros(kHourUs);
  Event start = Ev(placed, EventKind::kStarted);
  start.time_us = submitted;
  ASSERT_TRUE(Apply({start}).ok());
  EXPECT_EQ(Get(id).start_time_us, placed_at);
  Event end = Ev(placed, EventKind::kExited);
  ASSERT_TRUE(Apply({end}).ok());
  EXPECT_DOUBLE_EQ(JobGpuHours(Get(id), 0, kMax, clock_.NowMicros()), 1.0);
}

TEST_F(NodeTimesControllerTest, AStartNearInt64MaxIsKeptAtNowAndTheTimeLimitStillWorks) {
  Job sent = MakeJob(1);
  sent.time_limit_s = 60;
  Register(1);
  const int64_t id = c_->Submit(sent, alice_).value().id;
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);
  Event start = Ev(Get(id), EventKind::kStarted);
  start.time_us = kMax - 1;
  ASSERT_TRUE(Apply({start}).ok());
  EXPECT_EQ(Get(id).start_time_us, clock_.NowMicros());
  clock_.AdvanceMicros(int64_t{3600} * 1'000'000);  // past 60 s and the default grace
  ASSERT_TRUE(c_->SweepTimeLimits().ok());
  EXPECT_TRUE(Get(id).time_limit_hit);
}

TEST_F(NodeTimesControllerTest, ANodeWhoseClockIsTwoSecondsBehindIsTakenAtItsWord) {
  const Job placed = Dispatched();
  clock_.AdvanceMicros(10'000'000);
  Event start = Ev(placed, EventKind::kStarted);
  start.time_us -= 2'000'000;
  const int64_t started = start.time_us;
  ASSERT_TRUE(Apply({start}).ok());
  EXPECT_EQ(Get(placed.id).start_time_us, started);
  clock_.AdvanceMicros(kHourUs);
  Event end = Ev(placed, EventKind::kExited);
  end.time_us -= 2'000'000;
  ASSERT_TRUE(Apply({end}).ok());
  const Job j = Get(placed.id);
  EXPECT_EQ(j.state, JobState::kSucceeded);
  EXPECT_EQ(j.end_time_us, started + kHourUs);
  EXPECT_DOUBLE_EQ(JobGpuHours(j, 0, kMax, clock_.NowMicros()), 1.0);
}

}  // namespace
}  // namespace gpupool::controller
