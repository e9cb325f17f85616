// Interactive jobs' lifecycle (docs/cli.md, "run, alloc"): a `run` job ends as its
// command did, unless a stop (a cancel, the time limit) ended the command: then as that
// stop ends any job. An allocation's client that goes away releases it.
#include <gtest/gtest.h>

#include "controller/job_lifecycle.h"

namespace gpupool::controller::lifecycle {
namespace {

using jobs::Job;
using jobs::JobState;

constexpr int64_t kAt = int64_t{1700000000} * 1000000;

// Alice's one-task job, placed on n1 (attempt 1), its task started 10 us ago.
Job RunningJob() {
  Job j;
  j.id = 7;
  j.user = "alice";
  j.uid = 1000;
  j.command = {"true"};
  j.state = JobState::kRunning;
  j.attempt = 1;
  j.placement = {{"n1", {0}, {"GPU-0"}, 1000}};
  j.tasks.resize(1);
  j.tasks[0].host = "n1";
  j.tasks[0].start_time_us = kAt - 10;
  return j;
}

// Task 0's end on n1 as a stop order made it.
TaskExited CancelledTaskEnd() {
  TaskExited e;
  e.node = "n1";
  e.attempt = 1;
  e.time_us = kAt;
  e.cancelled = true;
  return e;
}

TEST(JobLifecycleTest, ARunJobsOutcomeIsItsCommands) {
  Job j = RunningJob();
  j.interactive = "run";
  CommandEnded c;
  c.attempt = 1;
  c.exit_code = 4;
  Result<Transition> t = Step(j, c, kAt);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->next.command_ended);
  EXPECT_EQ(t->next.reason, "the command exited with code 4");
  Result<Transition> end = Step(t->next, CancelledTaskEnd(), kAt);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->next.state, JobState::kFailed);
  EXPECT_EQ(end->next.exit_code, 4);
  // Hung up: the hang-up is the reason; a command that never ran exits 255.
  c.exit_code.reset();
  c.hung_up = true;
  c.hangup_reason = "its terminal went away";
  t = Step(j, c, kAt);
  EXPECT_EQ(t->next.reason, "its terminal went away");
  EXPECT_EQ(t->next.command_exit_code, 255);
  // A client that never came.
  t = Step(j, ClientAbsent{15}, kAt);
  EXPECT_NE(t->next.reason.find("no terminal attached within 15 s"), std::string::npos);
  EXPECT_TRUE(t->next.cancel_requested);
  // An allocation's absent client is not a run job's, nor the other way round.
  EXPECT_FALSE(Step(j, ClientAbsent{15, true}, kAt)->changed);
  Job alloc = RunningJob();
  alloc.interactive = "alloc";
  EXPECT_FALSE(Step(alloc, ClientAbsent{15}, kAt)->changed);
  t = Step(alloc, ClientAbsent{15, true}, kAt);
  EXPECT_TRUE(t->next.cancel_requested);
  EXPECT_NE(t->next.reason.find("no word from gpupool alloc for 15 s"), std::string::npos);
  // Its client went away while it waited: the request is withdrawn, not left to start.
  Job waiting;
  waiting.id = 9;
  waiting.interactive = "alloc";
  waiting.pending_reason = "Resources";
  EXPECT_FALSE(Step(waiting, ClientAbsent{15}, kAt)->changed);
  t = Step(waiting, ClientAbsent{15, true}, kAt);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.state, JobState::kCancelled);
  EXPECT_EQ(t->next.end_time_us, kAt);
  EXPECT_TRUE(t->effects.ended);
  EXPECT_EQ(t->next.reason,
            "its client went away (no word from gpupool alloc for 15 s): the request was "
            "withdrawn");
  // A batch job that waits is no client's.
  waiting.interactive.clear();
  EXPECT_FALSE(Step(waiting, ClientAbsent{15, true}, kAt)->changed);
}

// A cancelled `run` job ends CANCELLED, saying who cancelled it, as a batch job and an
// allocation do: the command the cancel ended (SIGTERM) is not a failure of the job (red
// team 5, finding 6: it ended FAILED "the command was ended by SIGTERM"). So does one
// the controller's time-limit backstop stopped: TIMEOUT.
TEST(JobLifecycleTest, ACancelledOrTimedOutRunJobIsNotFailedByTheCommandTheStopEnded) {
  Job j = RunningJob();
  j.interactive = "run";
  Result<Transition> cancel = Step(j, CancelRequested{"bob"}, kAt);
  ASSERT_TRUE(cancel.ok()) << cancel.status().ToString();
  CommandEnded c;
  c.attempt = 1;
  c.signal = 15;
  Result<Transition> ended = Step(cancel->next, c, kAt);
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  TaskExited end;
  end.node = "n1";
  end.attempt = 1;
  end.time_us = kAt;
  end.signal = 15;
  end.cancelled = true;
  end.reason = "cancelled (ended by SIGTERM)";
  Result<Transition> done = Step(ended->next, end, kAt);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->next.state, JobState::kCancelled);
  EXPECT_EQ(done->next.reason, "cancelled by bob (ended by SIGTERM)");
  EXPECT_EQ(done->next.signal, 15);
  // The task's end first, then the command's: the same.
  done = Step(cancel->next, end, kAt);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->next.state, JobState::kCancelled);
  EXPECT_FALSE(Step(done->next, c, kAt)->changed);
  // The controller's time-limit backstop.
  j.start_time_us = kAt - 100'000'000;
  j.time_limit_s = 30;
  Result<Transition> limit = Step(j, TimeLimit{60}, kAt);
  ASSERT_TRUE(limit.ok() && limit->next.time_limit_hit);
  ended = Step(limit->next, c, kAt);
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  done = Step(ended->next, end, kAt);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->next.state, JobState::kTimeout);
  EXPECT_NE(done->next.reason.find("time limit of 30 s"), std::string::npos) << done->next.reason;
}

}  // namespace
}  // namespace gpupool::controller::lifecycle
