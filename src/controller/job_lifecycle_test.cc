#include "controller/job_lifecycle.h"

#include <gtest/gtest.h>

#include <map>

#include "controller/usage.h"

namespace gpupool::controller::lifecycle {
namespace {

using jobs::Job;
using jobs::JobState;

// (An even number of digit separators on a line: the function-length check (funclen.py)
// reads an odd one as a character literal.)
constexpr int64_t kNowS = 1'700'000'000;  // kNow in epoch seconds
constexpr int64_t kNow = kNowS * 1'000'000;

// A one-task job of alice in `state`: placed on n1 (attempt 1) unless pending, its task
// started when running.
Job InState(JobState state) {
  Job j;
  j.id = 7;
  j.user = "alice";
  j.uid = 1000;
  j.command = {"true"};
  j.state = state;
  j.preemptible = true;
  if (state != JobState::kPending) {
    j.attempt = 1;
    j.placement = {{"n1", {0}, {"GPU-0"}, 1000}};
    j.tasks.resize(1);
    j.tasks[0].host = "n1";
    if (state != JobState::kAssigned) j.tasks[0].start_time_us = kNow - 10;
    if (jobs::IsTerminal(state)) {
      j.tasks[0].ended = true;
      j.tasks[0].end_time_us = kNow - 5;
    }
  }
  return j;
}

// One of each event, aimed at task 0 of attempt 1 on n1.
std::vector<Event> OneOfEach() {
  TaskExited exited;
  exited.node = "n1";
  exited.attempt = 1;
  exited.time_us = kNow;
  exited.exit_code = 0;
  CommandEnded command;
  command.attempt = 1;
  command.exit_code = 0;
  return {Placed{{{"n1", {0}, {"GPU-0"}, 1000}}, {"10.0.0.1"}},
          TaskStarted{"n1", 0, 1, kNow, "/o", "/e", 4242},
          exited,
          TaskLost{"n1", 0, 1, ""},
          NodeLost{"n1", "node n1 stopped responding"},
          AgentForgot{"n1"},
          CancelRequested{"bob"},
          Hold{"alice", false},
          Release{"alice", false},
          DependencyFailed{"job 3 ended FAILED"},
          command,
          ClientAbsent{15},
          TimeLimit{60},
          GpuFailed{"n1", "GPU-0", "Xid 95: uncontained ECC error"},
          Preempt{9, "of higher priority (10 > 0)", 120, kNowS + 120},
          CheckpointDone{"alice"},
          FenceLifted{"n1"}};
}

// What an event does to a job in a state: an error code, nothing, or the next state.
struct Expect {
  enum Kind { kError, kUnchanged, kState } kind;
  JobState state = JobState::kPending;
  StatusCode code = StatusCode::kOk;
};
Expect To(JobState s) { return {Expect::kState, s}; }
Expect Same() { return {Expect::kUnchanged}; }
Expect Refused() { return {Expect::kError, JobState::kPending, StatusCode::kFailedPrecondition}; }

// Issue 27: every (state, event) pair, in one table.
TEST(JobLifecycleTable, EveryStateAndEvent) {
  using S = JobState;
  const std::vector<std::string> names = {
      "Placed",         "TaskStarted",     "TaskExited", "TaskLost",  "NodeLost",
      "AgentForgot",    "CancelRequested", "Hold",       "Release",   "DependencyFailed",
      "CommandEnded",   "ClientAbsent",    "TimeLimit",  "GpuFailed", "Preempt",
      "CheckpointDone", "FenceLifted"};
  // Rows: the job's state; columns: the events above, in order.
  const std::map<S, std::vector<Expect>> table = {
      {S::kPending,
       {To(S::kAssigned), Same(), Same(), Same(), Same(), Same(), To(S::kCancelled),
        To(S::kPending), Same(), To(S::kCancelled), Same(), Same(), Same(), Same(), Same(),
        Refused(), Same()}},
      {S::kAssigned,
       {Refused(), To(S::kRunning), To(S::kSucceeded), To(S::kLost), To(S::kLost), Same(),
        To(S::kAssigned), Refused(), Refused(), Same(), To(S::kAssigned), Same(), Same(),
        To(S::kFailed), To(S::kAssigned), Refused(), Same()}},
      {S::kRunning,
       {Refused(), Same(), To(S::kSucceeded), To(S::kLost), To(S::kLost), To(S::kLost),
        To(S::kRunning), Refused(), Refused(), Same(), To(S::kRunning), Same(), Same(),
        To(S::kFailed), To(S::kRunning), Refused(), Same()}},
  };
  std::vector<Event> events = OneOfEach();
  ASSERT_EQ(events.size(), names.size());
  for (size_t e = 0; e < events.size(); ++e) EXPECT_EQ(EventName(events[e]), names[e]);
  for (S s : {S::kPending, S::kAssigned, S::kRunning, S::kSucceeded, S::kFailed, S::kCancelled,
              S::kTimeout, S::kLost}) {
    // Ended jobs refuse users' requests and ignore the rest.
    std::vector<Expect> row =
        jobs::IsTerminal(s)
            ? std::vector<Expect>{Refused(), Same(),    Same(),    Same(),    Same(), Same(),
                                  Refused(), Refused(), Refused(), Same(),    Same(), Same(),
                                  Same(),    Same(),    Same(),    Refused(), Same()}
            : table.at(s);
    // A LOST job's task, closed by the loss, ending after all: its record takes the late
    // end (job_lifecycle_late.h); the job stays LOST.
    if (s == S::kLost) row[2] = To(S::kLost);
    for (size_t e = 0; e < events.size(); ++e) {
      const Job job = InState(s);
      Result<Transition> t = Step(job, events[e], kNow);
      const std::string where =
          std::string(jobs::JobStateName(s)) + " x " + std::string(EventName(events[e]));
      switch (row[e].kind) {
        case Expect::kError:
          ASSERT_FALSE(t.ok()) << where;
          EXPECT_EQ(t.status().code(), row[e].code) << where << ": " << t.status().ToString();
          EXPECT_NE(t.status().message().find("job 7"), std::string::npos) << where;
          break;
        case Expect::kUnchanged:
          ASSERT_TRUE(t.ok()) << where << ": " << t.status().ToString();
          EXPECT_FALSE(t->changed) << where << " -> " << jobs::JobStateName(t->next.state);
          EXPECT_EQ(t->next, job) << where;
          break;
        case Expect::kState:
          ASSERT_TRUE(t.ok()) << where << ": " << t.status().ToString();
          EXPECT_TRUE(t->changed) << where;
          EXPECT_EQ(t->next.state, row[e].state)
              << where << " gave " << jobs::JobStateName(t->next.state);
          EXPECT_EQ(t->expected, s) << where;
          EXPECT_TRUE(jobs::IsValidTransition(s, t->next.state)) << where;
          break;
      }
    }
  }
}

// The controller's backstop for --time: nothing within the limit and its grace, nor for a
// job without a limit; past them, its tasks are told to stop (once), and their end, as a
// cancel's, makes the job TIMEOUT with the controller's reason.
TEST(JobLifecycleTest, ATimeLimitPastItsGraceStopsTheJobAndEndsItTimeout) {
  Job j = InState(JobState::kRunning);
  j.start_time_us = kNow - 100'000'000;                 // 100 s ago
  EXPECT_FALSE(Step(j, TimeLimit{60}, kNow)->changed);  // no limit
  j.time_limit_s = 50;
  EXPECT_FALSE(Step(j, TimeLimit{60}, kNow)->changed);  // 50 + 60 s not yet passed
  j.time_limit_s = 30;
  Result<Transition> t = Step(j, TimeLimit{60}, kNow);  // 30 + 60 < 100
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->changed);
  EXPECT_EQ(t->next.state, JobState::kRunning);
  EXPECT_TRUE(t->next.cancel_requested);
  EXPECT_TRUE(t->next.time_limit_hit);
  EXPECT_TRUE(t->effects.resend_stop);
  EXPECT_NE(t->next.reason.find("time limit of 30 s"), std::string::npos) << t->next.reason;
  EXPECT_FALSE(Step(t->next, TimeLimit{60}, kNow)->changed);  // once
  // The task ends as the stop order made it: cancelled by SIGTERM.
  TaskExited end;
  end.node = "n1";
  end.attempt = 1;
  end.time_us = kNow;
  end.signal = 15;
  end.cancelled = true;
  Result<Transition> done = Step(t->next, end, kNow);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->next.state, JobState::kTimeout);
  EXPECT_NE(done->next.reason.find("stopped by the controller"), std::string::npos)
      << done->next.reason;
  // A cancel asked for first is a cancel: the sweep leaves the job alone.
  Job cancelled = j;
  cancelled.cancel_requested = true;
  EXPECT_FALSE(Step(cancelled, TimeLimit{60}, kNow)->changed);
}

// Issue 29: a failed GPU ends the jobs holding it FAILED with the reason, stopping their
// tasks on every node (the failed GPU's node included), or requeues those that allow it;
// jobs on the node's other GPUs go on.
TEST(JobLifecycleTest, AFailedGpuEndsOrRequeuesTheJobsHoldingIt) {
  Job j = InState(JobState::kRunning);
  const GpuFailed failed{"n1", "GPU-0", "Xid 95: uncontained ECC error"};
  Result<Transition> t = Step(j, failed, kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->next.state, JobState::kFailed);
  EXPECT_NE(t->next.reason.find("GPU GPU-0 on node n1 failed: Xid 95"), std::string::npos)
      << t->next.reason;
  ASSERT_EQ(t->effects.strays.size(), 1u);
  EXPECT_EQ(t->effects.strays[0].node, "n1");
  EXPECT_TRUE(t->effects.strays[0].started_there);
  EXPECT_TRUE(t->effects.freed);
  j.requeue = true;
  t = Step(j, failed, kNow);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.state, JobState::kPending);
  EXPECT_TRUE(t->effects.requeued);
  // Another GPU of the node, or the same index elsewhere: not this job's.
  EXPECT_FALSE(Step(j, GpuFailed{"n1", "GPU-1", "x"}, kNow)->changed);
  EXPECT_FALSE(Step(j, GpuFailed{"n2", "GPU-0", "x"}, kNow)->changed);
  // A job on a MIG instance is on the instance's GPU (docs/sharing.md); not on another's.
  Job on_instance = j;
  on_instance.placement[0].gpu_uuids = {"MIG-a"};
  EXPECT_TRUE(Step(on_instance, GpuFailed{"n1", "GPU-1", "x", {"MIG-b", "MIG-a"}}, kNow)->changed);
  EXPECT_FALSE(Step(on_instance, GpuFailed{"n1", "GPU-1", "x", {"MIG-b"}}, kNow)->changed);
  EXPECT_FALSE(Step(on_instance, GpuFailed{"n1", "GPU-0", "x"}, kNow)->changed);
}

TEST(JobLifecycleTest, PlacementStartsANewAttemptWithItsTasksAndHosts) {
  Job j = InState(JobState::kPending);
  j.pending_reason = "needs 2 idle GPUs";
  Result<Transition> t =
      Step(j, Placed{{{"n1", {0}, {"A"}, 1000}, {"n2", {1}, {"B"}, 1000}}, {"10.0.0.1", ""}}, kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->next.attempt, 1);
  ASSERT_EQ(t->next.tasks.size(), 2u);
  EXPECT_EQ(t->next.tasks[0].host, "10.0.0.1");
  EXPECT_EQ(t->next.tasks[1].host, "n2");  // no address: its name
  EXPECT_TRUE(t->next.pending_reason.empty());
  EXPECT_TRUE(t->effects.notify_nodes);
  // A held job is not placed.
  j.held_by = "alice";
  t = Step(j, Placed{{{"n1", {0}, {"A"}, 1000}}, {}}, kNow);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("held by alice"), std::string::npos);
}

TEST(JobLifecycleTest, TaskEventsOfAnotherAttemptOrNodeChangeNothing) {
  const Job j = InState(JobState::kRunning);
  TaskExited stale;
  stale.node = "n1";
  stale.attempt = 0;
  stale.exit_code = 0;
  EXPECT_FALSE(Step(j, stale, kNow)->changed);
  TaskExited elsewhere = stale;
  elsewhere.attempt = 1;
  elsewhere.node = "n2";
  EXPECT_FALSE(Step(j, elsewhere, kNow)->changed);
  TaskExited out_of_range = elsewhere;
  out_of_range.node = "n1";
  out_of_range.task = 3;
  EXPECT_FALSE(Step(j, out_of_range, kNow)->changed);
  // A resent start of a started task.
  EXPECT_FALSE(Step(j, TaskStarted{"n1", 0, 1, kNow, "", "", 0}, kNow)->changed);
}

// A gang: task 0 on n1, task 1 on n2, both running.
Job Gang() {
  Job j = InState(JobState::kRunning);
  j.placement.push_back({"n2", {0}, {"GPU-1"}, 1000});
  j.tasks.push_back(j.tasks[0]);
  j.tasks[1].host = "n2";
  j.request.tasks = 2;
  j.master_port = 29400;
  return j;
}

TaskExited Exit(const std::string& node, int task, std::optional<int> code,
                bool cancelled = false) {
  TaskExited e;
  e.node = node;
  e.task = task;
  e.attempt = 1;
  e.time_us = kNow;
  e.exit_code = code;
  e.cancelled = cancelled;
  return e;
}

TEST(JobLifecycleTest, TheFirstFailureOfAGangStopsTheRestAndNamesTheTask) {
  Result<Transition> t = Step(Gang(), Exit("n2", 1, 3), kNow);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.state, JobState::kRunning);  // task 0 is still being stopped
  EXPECT_TRUE(t->next.cancel_requested);
  EXPECT_TRUE(t->effects.resend_stop);
  EXPECT_EQ(t->next.reason, "task 1 (node n2) exited with code 3");
  // Task 0 ends stopped: the job FAILED, for task 1's reason.
  Result<Transition> end = Step(t->next, Exit("n1", 0, std::nullopt, true), kNow + 5);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->next.state, JobState::kFailed);
  EXPECT_EQ(end->next.exit_code, 3);
  EXPECT_EQ(end->next.reason, "task 1 (node n2) exited with code 3");
  EXPECT_TRUE(end->effects.ended);
  EXPECT_TRUE(end->effects.freed);
  EXPECT_TRUE(end->effects.stop_execs);
  EXPECT_EQ(end->next.end_time_us, kNow);
}

TEST(JobLifecycleTest, AnMpiJobSucceedsWhenMpirunDoesAndReleasesItsHeldTasks) {
  Job j = Gang();
  j.mpi = true;
  Result<Transition> t = Step(j, Exit("n1", 0, 0), kNow);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->next.cancel_requested);
  EXPECT_EQ(t->next.reason, "task 0 ended; the held tasks were released");
  Result<Transition> end = Step(t->next, Exit("n2", 1, std::nullopt, true), kNow);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->next.state, JobState::kSucceeded);
  EXPECT_TRUE(end->next.reason.empty());
}

// A gang ending LOST ends its tasks' records with it: the one that ran until now, the one
// never started as such (found by testing: task 0 showed "running" for ever, and its GPU
// time was left out).
TEST(JobLifecycleTest, ALostGangsTasksEndWithIt) {
  Job j = Gang();
  j.tasks[1].start_time_us = 0;  // task 1 (n2) not started
  Result<Transition> t = Step(j, NodeLost{"n2", "node n2 stopped responding"}, kNow + 10);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.state, JobState::kLost);
  ASSERT_EQ(t->next.tasks.size(), 2u);
  EXPECT_TRUE(t->next.tasks[0].ended);
  EXPECT_EQ(t->next.tasks[0].end_time_us, kNow + 10);
  EXPECT_EQ(t->next.tasks[0].reason, "stopped: node n2 stopped responding");
  EXPECT_TRUE(t->next.tasks[1].ended);
  EXPECT_EQ(t->next.tasks[1].end_time_us, 0);
  EXPECT_EQ(t->next.tasks[1].reason, "not started");
  EXPECT_FALSE(t->effects.strays.empty());  // task 0 is still stopped on n1
}

TEST(JobLifecycleTest, ALostNodeRequeuesARequeueJobAndStopsItsOtherTasks) {
  Job j = Gang();
  j.requeue = true;
  Result<Transition> t = Step(j, NodeLost{"n1", "node n1 stopped responding"}, kNow);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.state, JobState::kPending);
  EXPECT_EQ(t->next.reason, "requeued: node n1 stopped responding");
  EXPECT_TRUE(t->next.placement.empty());
  EXPECT_TRUE(t->next.tasks.empty());
  EXPECT_EQ(t->next.attempt, 1);  // the next placement makes attempt 2
  EXPECT_TRUE(t->effects.requeued);
  EXPECT_FALSE(t->effects.ended);
  // Stop orders for both nodes; only n2's task is known to run (n1 is the lost one).
  ASSERT_EQ(t->effects.strays.size(), 2u);
  EXPECT_EQ(t->effects.strays[0].node, "n1");
  EXPECT_FALSE(t->effects.strays[0].started_there);
  EXPECT_EQ(t->effects.strays[1].node, "n2");
  EXPECT_TRUE(t->effects.strays[1].started_there);
  // With the GPUs the attempt holds there: in use until its end is reported.
  EXPECT_EQ(t->effects.strays[0].gpu_uuids, std::vector<std::string>{"GPU-0"});
  EXPECT_EQ(t->effects.strays[1].gpu_uuids, std::vector<std::string>{"GPU-1"});
  // Without --requeue, or once cancelled: LOST.
  j.requeue = false;
  t = Step(j, NodeLost{"n2", "gone"}, kNow);
  EXPECT_EQ(t->next.state, JobState::kLost);
  EXPECT_EQ(t->next.end_time_us, kNow);
  EXPECT_TRUE(t->effects.ended);
  j.requeue = true;
  j.cancel_requested = true;
  EXPECT_EQ(Step(j, NodeLost{"n2", "gone"}, kNow)->next.state, JobState::kLost);
}

// The node lease (docs/health.md): a job a lost node may still run waits for the lease.
TEST(JobLifecycleTest, ALostNodesLeaseHoldsBackTheNextAttemptOfAFencedJob) {
  Job j = Gang();  // task 0 on n1 (started), task 1 on n2 (started)
  j.requeue = true;
  j.preemptible = false;
  Result<Transition> t = Step(j, NodeLost{"n1", "node n1 stopped responding", kNow + 60}, kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->next.state, JobState::kPending);
  // n2, up, was told to stop its task: kept, in case it is lost before the job is placed.
  EXPECT_EQ(t->next.fences, (std::vector<jobs::NodeFence>{{"n1", kNow + 60}, {"n2", 0}}));
  // Not placed before the lease ends; at its end it is, and the fence is gone.
  Result<Transition> early = Step(t->next, Placed{{{"n3", {0}, {"GPU-3"}, 1000}}, {}}, kNow + 59);
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(early.status().message().find("node n1's lease"), std::string::npos);
  Result<Transition> placed = Step(t->next, Placed{{{"n3", {0}, {"GPU-3"}, 1000}}, {}}, kNow + 60);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  EXPECT_TRUE(placed->next.fences.empty());
  // The node registered again: the wait ends; another node's return changes nothing.
  EXPECT_FALSE(Step(t->next, FenceLifted{"n3"}, kNow)->changed);
  Result<Transition> lifted = Step(t->next, FenceLifted{"n1"}, kNow);
  ASSERT_TRUE(lifted->changed);
  EXPECT_EQ(jobs::FenceUntilUs(lifted->next), 0);
  EXPECT_TRUE(lifted->effects.queue_changed);
  // No fence: a lease already over, a job its loss ends (LOST), a task there that had
  // ended, or no lease at all.
  EXPECT_EQ(jobs::FenceUntilUs(Step(j, NodeLost{"n1", "gone", kNow}, kNow)->next), 0);
  EXPECT_EQ(jobs::FenceUntilUs(Step(j, NodeLost{"n1", "gone"}, kNow)->next), 0);
  Job ended_there = j;
  ended_there.tasks[0].ended = true;
  EXPECT_EQ(jobs::FenceUntilUs(Step(ended_there, NodeLost{"n1", "gone", kNow + 60}, kNow)->next),
            0);
  Job plain = j;
  plain.requeue = false;
  EXPECT_EQ(Step(plain, NodeLost{"n1", "gone", kNow + 60}, kNow)->next.state, JobState::kLost);
  EXPECT_EQ(jobs::FenceUntilUs(Step(plain, NodeLost{"n1", "gone", kNow + 60}, kNow)->next), 0);
  // A task placed there whose start was never reported may run there too.
  Job assigned = InState(JobState::kAssigned);
  assigned.requeue = true;
  EXPECT_EQ(jobs::FenceUntilUs(Step(assigned, NodeLost{"n1", "gone", kNow + 60}, kNow)->next),
            kNow + 60);
}

// Why an attempt went back to the queue is the job's reason while it waits; once the
// next attempt runs it is that attempt's story no longer (earlier_attempts keeps it), and a
// job that then succeeds ends without it (it used to show "requeued: ..." for good).
TEST(JobLifecycleTest, ARequeuedJobThatRunsAgainNoLongerSaysItWasRequeued) {
  Job j = InState(JobState::kRunning);
  j.requeue = true;
  j.start_time_us = kNow - 1000;
  j.tasks[0].start_time_us = kNow - 1000;
  Result<Transition> t = Step(j, NodeLost{"n1", "node n1 stopped responding"}, kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->next.reason, "requeued: node n1 stopped responding");
  Result<Transition> placed = Step(t->next, Placed{{{"n3", {0}, {"GPU-3"}, 1000}}, {}}, kNow);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  EXPECT_EQ(placed->next.reason, "requeued: node n1 stopped responding");  // not started yet
  Result<Transition> running =
      Step(placed->next, TaskStarted{"n3", 0, 2, kNow + 10, "/o", "/e", 4242}, kNow + 10);
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  ASSERT_EQ(running->next.state, JobState::kRunning);
  EXPECT_EQ(running->next.reason, "");
  ASSERT_EQ(running->next.earlier_attempts.size(), 1u);
  EXPECT_EQ(running->next.earlier_attempts[0].reason, "node n1 stopped responding");
  TaskExited exited = Exit("n3", 0, 0);
  exited.attempt = 2;
  exited.time_us = kNow + 20;
  Result<Transition> done = Step(running->next, exited, kNow + 20);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->next.state, JobState::kSucceeded);
  EXPECT_EQ(done->next.reason, "");
}

// A requeued attempt held its GPUs until it was lost (or its GPU failed): the job keeps
// its run and GPU-hours, as a preempted attempt's, for accounting; only a preemption
// counts as one. A user whose 10-hour run died with its node, then ran 1 hour, is
// charged 11.
TEST(JobLifecycleTest, ALostOrFailedAttemptKeepsItsGpuHours) {
  constexpr int64_t kHourUs = int64_t{3600} * 1'000'000;
  Job j = Gang();  // 2 tasks of 1 GPU, n1 and n2
  j.requeue = true;
  j.start_time_us = kNow - 10 * kHourUs;
  for (jobs::TaskStatus& ts : j.tasks) ts.start_time_us = kNow - 10 * kHourUs;
  j.tasks[1].start_time_us = kNow - 9 * kHourUs;  // the second task started an hour later
  Result<Transition> t = Step(j, NodeLost{"n1", "node n1 stopped responding"}, kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->next.state, JobState::kPending);
  ASSERT_EQ(t->next.earlier_attempts.size(), 1u);
  EXPECT_EQ(t->next.earlier_attempts[0],
            (jobs::EarlierAttempt{.attempt = 1,
                                  .ended_by = jobs::AttemptEnd::kLost,
                                  .start_time_us = kNow - 10 * kHourUs,
                                  .end_time_us = kNow,
                                  .gpu_hours = 19.0,  // 10 h + 9 h of one GPU each
                                  .reason = "node n1 stopped responding",
                                  .gpus = 2,
                                  .nodes = {"n1", "n2"}}));
  EXPECT_EQ(t->next.preemptions, 0);  // not a preemption
  EXPECT_EQ(t->next.preempted_gpu_hours, 0);
  EXPECT_LT(t->effects.preempted_gpu_hours, 0);
  // Placed again (attempt 2), it runs an hour and its GPU fails: requeued again.
  Result<Transition> placed = Step(t->next, Placed{{{"n3", {0}, {"GPU-3"}, 1000}}, {}}, kNow);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  TaskStarted started{"n3", 0, 2, kNow + kHourUs, "/o", "/e", 4242};
  Result<Transition> running = Step(placed->next, started, kNow + kHourUs);
  ASSERT_TRUE(running.ok());
  const int64_t later = kNow + 2 * kHourUs;
  t = Step(running->next, GpuFailed{"n3", "GPU-3", "Xid 79"}, later);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->next.state, JobState::kPending);
  ASSERT_EQ(t->next.earlier_attempts.size(), 2u);
  const jobs::EarlierAttempt& second = t->next.earlier_attempts[1];
  EXPECT_EQ(second.attempt, 2);
  EXPECT_EQ(second.ended_by, jobs::AttemptEnd::kGpuFailed);
  EXPECT_EQ(second.start_time_us, kNow + kHourUs);
  EXPECT_EQ(second.end_time_us, later);
  EXPECT_DOUBLE_EQ(second.gpu_hours, 1.0);
  EXPECT_EQ(second.reason, "GPU GPU-3 on node n3 failed: Xid 79");
  // Usage counts both attempts while it waits, and each in its own window.
  EXPECT_DOUBLE_EQ(JobGpuHours(t->next, 0, INT64_MAX, later), 20.0);
  EXPECT_DOUBLE_EQ(JobGpuHours(t->next, kNow, INT64_MAX, later), 1.0);
  // An attempt lost before any task of it started ran nothing: no record.
  Job unstarted = InState(JobState::kAssigned);
  unstarted.requeue = true;
  t = Step(unstarted, NodeLost{"n1", "gone"}, kNow);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.state, JobState::kPending);
  EXPECT_TRUE(t->next.earlier_attempts.empty());
}

TEST(JobLifecycleTest, AnAgentForgetsOnlyTasksThatStartedThereAndRunStill) {
  Job j = Gang();
  EXPECT_EQ(Step(j, AgentForgot{"n2"}, kNow)->next.state, JobState::kLost);
  EXPECT_NE(Step(j, AgentForgot{"n2"}, kNow)->next.reason.find("restarted"), std::string::npos);
  j.tasks[1].ended = true;  // its end is in: nothing of it runs there
  EXPECT_FALSE(Step(j, AgentForgot{"n2"}, kNow)->changed);
  EXPECT_FALSE(Step(InState(JobState::kAssigned), AgentForgot{"n1"}, kNow)->changed);
}

TEST(JobLifecycleTest, CancellingAGangWhoseLaterTasksNeverStartedEndsThem) {
  Job j = Gang();
  j.state = JobState::kAssigned;
  j.master_port = 0;  // task 0 has not reported its port: task 1 was never sent
  j.tasks[1].start_time_us = 0;
  Result<Transition> t = Step(j, CancelRequested{"alice"}, kNow);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->next.tasks[1].ended);
  EXPECT_EQ(t->next.tasks[1].reason, "not started");
  EXPECT_FALSE(t->effects.ended);  // task 0 still runs
  EXPECT_TRUE(t->effects.resend_stop);
  EXPECT_EQ(t->next.reason, "cancelled by alice");
  // Cancelled again: nothing new.
  EXPECT_FALSE(Step(t->next, CancelRequested{"alice"}, kNow)->changed);
  // Pending: at once.
  Result<Transition> p = Step(InState(JobState::kPending), CancelRequested{"bob"}, kNow);
  EXPECT_EQ(p->next.reason, "cancelled by bob while pending");
  EXPECT_TRUE(p->effects.ended);
  // Ended: refused, naming its state.
  Result<Transition> e = Step(InState(JobState::kFailed), CancelRequested{"bob"}, kNow);
  EXPECT_EQ(e.status().message(), "job 7 has already ended (FAILED)");
}

// Issue 30: a running job's cancel keeps who asked for it; the node's reason ("cancelled
// (ended by SIGTERM)") only adds how the task ended.
TEST(JobLifecycleTest, ACancelledRunningJobSaysWhoCancelledIt) {
  Result<Transition> t = Step(InState(JobState::kRunning), CancelRequested{"root"}, kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  TaskExited end;
  end.node = "n1";
  end.attempt = 1;
  end.time_us = kNow;
  end.signal = 15;
  end.cancelled = true;
  end.reason = "cancelled (ended by SIGTERM)";
  Result<Transition> done = Step(t->next, end, kNow);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->next.state, JobState::kCancelled);
  EXPECT_EQ(done->next.reason, "cancelled by root (ended by SIGTERM)");
  // A task that ended on its own meanwhile (not stopped by the cancel) tells its story.
  end.cancelled = false;
  end.signal.reset();
  end.exit_code = 3;
  end.reason = "exited with code 3";
  done = Step(t->next, end, kNow);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->next.reason, "exited with code 3");
}

TEST(JobLifecycleTest, AnAdminsHoldIsReleasedByAdminsOnly) {
  Result<Transition> held = Step(InState(JobState::kPending), Hold{"root", true}, kNow);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->next.pending_reason,
            "held by root (admin): `gpupool release 7` by an admin lets it start");
  Result<Transition> r = Step(held->next, Release{"alice", false}, kNow);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  r = Step(held->next, Release{"root", true}, kNow);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->next.held_by.empty());
  EXPECT_TRUE(r->effects.queue_changed);
  // Holding a held job, releasing a free one: nothing.
  EXPECT_FALSE(Step(held->next, Hold{"alice", false}, kNow)->changed);
  EXPECT_FALSE(Step(InState(JobState::kPending), Release{"alice", false}, kNow)->changed);
  Result<Transition> running = Step(InState(JobState::kRunning), Hold{"alice", false}, kNow);
  EXPECT_EQ(running.status().message(),
            "job 7 is RUNNING; only pending jobs are held (`gpupool cancel` stops it)");
}

TEST(JobLifecycleTest, AnArraysElementIsNamedToItsUserAsArrayIndex) {
  Job element = InState(JobState::kPending);  // job 7: element 2 of array 5
  element.array_id = 5;
  element.array_index = 2;
  Result<Transition> held = Step(element, Hold{"root", true}, kNow);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->next.pending_reason,
            "held by root (admin): `gpupool release 5_2` by an admin lets it start");
  Result<Transition> r = Step(held->next, Release{"alice", false}, kNow);
  EXPECT_EQ(r.status().message(), "job 5_2 was held by admin root; ask an admin to release it");
  element.state = JobState::kRunning;
  EXPECT_EQ(Step(element, Hold{"alice", false}, kNow).status().message(),
            "job 5_2 is RUNNING; only pending jobs are held (`gpupool cancel` stops it)");
  element.state = JobState::kSucceeded;
  EXPECT_EQ(Step(element, CancelRequested{"alice"}, kNow).status().message(),
            "job 5_2 has already ended (SUCCEEDED)");
}

TEST(JobLifecycleTest, AStartWithoutAPortGetsTheDefaultAndRunsWhenAllStarted) {
  Job j = Gang();
  j.state = JobState::kAssigned;
  j.master_port = 0;
  for (auto& ts : j.tasks) ts.start_time_us = 0;
  Result<Transition> t = Step(j, TaskStarted{"n1", 0, 1, kNow, "/o", "/e", 0}, kNow);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.master_port, 29500);
  EXPECT_NE(t->effects.log.find("no rendezvous port"), std::string::npos);
  EXPECT_EQ(t->next.state, JobState::kAssigned);
  EXPECT_EQ(t->next.stdout_path, "/o");
  t = Step(t->next, TaskStarted{"n2", 1, 1, kNow + 1, "", "", 0}, kNow + 1);
  EXPECT_EQ(t->next.state, JobState::kRunning);
  EXPECT_EQ(t->next.start_time_us, kNow + 1);
}

TEST(JobLifecycleTest, ATimedOutTaskMakesATimeout) {
  TaskExited e = Exit("n1", 0, std::nullopt);
  e.signal = 9;
  e.timed_out = true;
  Result<Transition> t = Step(InState(JobState::kRunning), e, kNow);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.state, JobState::kTimeout);
}

// A gang's task killed by a signal: the job's reason gives what its node said beyond the
// signal (the GPU memory watch, the kernel's OOM killer), and only the signal when that
// is all the node said. (A job of one task takes its node's words as they are.)
TEST(JobLifecycleTest, AKilledTasksReasonSaysWhatItsNodeSaidBeyondTheSignal) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"its processes used 9728 MiB of GPU 0's memory (ended by SIGKILL)",
       "task 1 (node n2) was killed by signal 9: its processes used 9728 MiB of GPU 0's memory"},
      {"killed by the kernel's OOM killer: the memory limit of 1024 bytes was reached; "
       "ended by SIGKILL",
       "task 1 (node n2) was killed by signal 9: killed by the kernel's OOM killer: the memory "
       "limit of 1024 bytes was reached"},
      {"ended by SIGKILL", "task 1 (node n2) was killed by signal 9"},
      {"", "task 1 (node n2) was killed by signal 9"}};
  for (const auto& [node_said, reason] : cases) {
    TaskExited e = Exit("n2", 1, std::nullopt);
    e.signal = 9;
    e.reason = node_said;
    Result<Transition> t = Step(Gang(), e, kNow);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->next.reason, reason);
  }
}

// A newer agent says why a task was killed as fields: the job's reason is built from its
// kill_detail, whatever words its reason has (here ones the old parsing would keep whole),
// and the task keeps the cause's name for `gpupool show` and the API.
TEST(JobLifecycleTest, AKilledTasksReasonComesFromItsKillCauseNotItsWords) {
  using protocol::KillCause;
  struct Case {
    KillCause cause;
    std::string detail;
    std::string cause_name;
    std::string job_reason;
  };
  const std::vector<Case> cases = {
      {KillCause::kOomKernel,
       "killed by the kernel's OOM killer: the memory limit of 1024 bytes was reached",
       "oom_kernel",
       "task 1 (node n2) was killed by signal 9: killed by the kernel's OOM killer: the memory "
       "limit of 1024 bytes was reached"},
      {KillCause::kOomNode, "killed by the kernel's OOM killer: node n2 ran out of memory",
       "oom_node",
       "task 1 (node n2) was killed by signal 9: killed by the kernel's OOM killer: node n2 ran "
       "out of memory"},
      {KillCause::kGpuMemWatch, "its processes used 9728 MiB of GPU 0's memory", "gpu_mem_watch",
       "task 1 (node n2) was killed by signal 9: its processes used 9728 MiB of GPU 0's memory"},
      {KillCause::kNone, "", "none", "task 1 (node n2) was killed by signal 9"}};
  for (const Case& c : cases) {
    TaskExited e = Exit("n2", 1, std::nullopt);
    e.signal = 9;
    e.reason = "SIGKILL'd -- " + c.detail + " -- so long";  // a wording no parser knows
    e.kill_cause = c.cause;
    e.kill_detail = c.detail;
    Result<Transition> t = Step(Gang(), e, kNow);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->next.reason, c.job_reason) << c.cause_name;
    EXPECT_EQ(t->next.tasks[1].kill_cause, c.cause_name);
    EXPECT_EQ(t->next.tasks[1].kill_detail, c.detail);
  }

  // Its time limit, and a stop asked of it: the job's outcome, and the cause kept.
  TaskExited timed = Exit("n1", 0, std::nullopt);
  timed.signal = 15;
  timed.timed_out = true;
  timed.reason = "time limit of 60 s reached (ended by SIGTERM)";
  timed.kill_cause = KillCause::kTimeLimit;
  timed.kill_detail = "time limit of 60 s reached";
  Result<Transition> t = Step(InState(JobState::kRunning), timed, kNow);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.state, JobState::kTimeout);
  EXPECT_EQ(t->next.tasks[0].kill_cause, "time_limit");
  Result<Transition> cancel = Step(InState(JobState::kRunning), CancelRequested{"bob"}, kNow);
  ASSERT_TRUE(cancel.ok());
  TaskExited stopped = Exit("n1", 0, std::nullopt, /*cancelled=*/true);
  stopped.signal = 15;
  stopped.reason = "cancelled (ended by SIGTERM)";
  stopped.kill_cause = KillCause::kStopRequest;
  stopped.kill_detail = "cancelled";
  t = Step(cancel->next, stopped, kNow);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.state, JobState::kCancelled);
  EXPECT_EQ(t->next.reason, "cancelled by bob (ended by SIGTERM)");
  EXPECT_EQ(t->next.tasks[0].kill_cause, "stop_request");
}

// An agent older than the kill cause, and a cause this controller does not know (a newer
// agent's): the job's reason comes from the node's words as before, and the task says
// which it was (no cause, or "unknown").
TEST(JobLifecycleTest, AnOldAgentsOrAnUnknownKillCauseFallsBackToTheNodesWords) {
  for (const std::optional<protocol::KillCause> cause :
       {std::optional<protocol::KillCause>(), std::optional(protocol::KillCause::kUnknown)}) {
    TaskExited e = Exit("n2", 1, std::nullopt);
    e.signal = 9;
    e.reason = "its processes used 9728 MiB of GPU 0's memory (ended by SIGKILL)";
    e.kill_cause = cause;
    e.kill_detail = "not to be shown";
    Result<Transition> t = Step(Gang(), e, kNow);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->next.reason,
              "task 1 (node n2) was killed by signal 9: its processes used 9728 MiB of GPU 0's "
              "memory");
    EXPECT_EQ(t->next.tasks[1].kill_cause, cause ? "unknown" : "");
  }
}

// Issue 28: a preempted gang is told to stop (once), keeps its resources while its tasks
// end (whatever their outcome: a task that fails in its grace does not fail the job),
// then goes back to the queue with the preemption counted, its cost and the reason.
TEST(JobLifecycleTest, APreemptedGangStopsKeepsItsGpusUntilItsTasksEndThenIsRequeued) {
  Job j = Gang();
  j.submit_time_us = kNow - 3600'000'000;
  j.tasks[0].start_time_us = kNow - 1800'000'000;  // half an hour ago, one GPU each
  j.tasks[1].start_time_us = kNow - 1800'000'000;
  const Preempt preempt{9, "of higher priority (10 > 0)", 120, kNowS + 120};
  Result<Transition> t = Step(j, preempt, kNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->next.state, JobState::kRunning);
  EXPECT_TRUE(t->next.cancel_requested);
  EXPECT_EQ(t->next.preempted_by, 9);
  EXPECT_EQ(t->next.preempt_deadline_s, kNowS + 120);
  EXPECT_TRUE(t->effects.resend_stop);
  EXPECT_TRUE(t->effects.preempting);
  EXPECT_FALSE(t->effects.freed);  // its GPUs stay taken until its tasks end
  EXPECT_EQ(t->next.reason, "preempted by job 9, of higher priority (10 > 0)");
  EXPECT_FALSE(Step(t->next, preempt, kNow)->changed);  // once
  // The job says it has checkpointed: a stop order without grace goes out (once).
  Result<Transition> done = Step(t->next, CheckpointDone{"alice"}, kNow);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->next.checkpoint_done);
  EXPECT_TRUE(done->effects.resend_stop);
  EXPECT_FALSE(Step(done->next, CheckpointDone{"alice"}, kNow)->changed);
  // Task 1 exits 1 on SIGTERM: not a failure of the job, which still holds task 0's GPU.
  Result<Transition> one = Step(done->next, Exit("n2", 1, 1), kNow);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->next.state, JobState::kRunning);
  EXPECT_FALSE(one->effects.freed);
  Result<Transition> both = Step(one->next, Exit("n1", 0, std::nullopt, true), kNow);
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  const Job& again = both->next;
  EXPECT_EQ(again.state, JobState::kPending);
  EXPECT_EQ(again.reason, "requeued: preempted by job 9, of higher priority (10 > 0) (attempt 1)");
  EXPECT_EQ(again.attempt, 1);                        // the next placement makes attempt 2
  EXPECT_EQ(again.submit_time_us, j.submit_time_us);  // its place in the queue
  EXPECT_EQ(again.preemptions, 1);
  EXPECT_DOUBLE_EQ(again.preempted_gpu_hours, 1.0);  // 2 GPUs x 0.5 h
  EXPECT_DOUBLE_EQ(both->effects.preempted_gpu_hours, 1.0);
  // When that attempt ran, for the usage of a window (its start and end are cleared).
  ASSERT_EQ(again.earlier_attempts.size(), 1u);
  EXPECT_EQ(again.earlier_attempts[0],
            (jobs::EarlierAttempt{.attempt = 1,
                                  .ended_by = jobs::AttemptEnd::kPreempted,
                                  .start_time_us = kNow - 1800'000'000,
                                  .end_time_us = kNow,
                                  .gpu_hours = 1.0,
                                  .reason = "preempted by job 9, of higher priority (10 > 0)",
                                  .gpus = 2,
                                  .nodes = {"n1", "n2"}}));
  EXPECT_FALSE(again.cancel_requested);
  EXPECT_EQ(again.preempted_by, 0);
  EXPECT_FALSE(again.checkpoint_done);
  EXPECT_TRUE(again.placement.empty());
  EXPECT_TRUE(both->effects.requeued);
  EXPECT_TRUE(both->effects.freed);
  EXPECT_FALSE(both->effects.ended);
  // Placed again: attempt 2, and a second preemption adds up.
  Result<Transition> placed = Step(again, Placed{j.placement, {}}, kNow);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->next.attempt, 2);
}

// A preempted job whose task ended on its own before the stop order reached it (exit 0,
// not stopped by the pool) finished its work: it ends SUCCEEDED, not requeued to run its
// work again; one that failed on its own ends FAILED. A task stopped in its grace, however
// it exited, sends it back to the queue (the test above).
TEST(JobLifecycleTest, APreemptedJobWhoseTasksEndedBeforeTheirStopEndsAsTheyEnded) {
  Result<Transition> p = Step(InState(JobState::kRunning), Preempt{9, "", 120, 0}, kNow);
  ASSERT_TRUE(p.ok());
  Result<Transition> done = Step(p->next, Exit("n1", 0, 0), kNow);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->next.state, JobState::kSucceeded);
  EXPECT_EQ(done->next.reason, "ended before its preemption by job 9 reached it");
  EXPECT_EQ(done->next.preempted_by, 0);
  EXPECT_EQ(done->next.preemptions, 0);
  EXPECT_FALSE(done->next.cancel_requested);
  EXPECT_TRUE(done->effects.ended);
  EXPECT_TRUE(done->effects.freed);
  EXPECT_FALSE(done->effects.requeued);
  Result<Transition> failed = Step(p->next, Exit("n1", 0, 3), kNow);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->next.state, JobState::kFailed);
  EXPECT_EQ(failed->next.exit_code, 3);
  Result<Transition> stopped = Step(p->next, Exit("n1", 0, 0, true), kNow);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->next.state, JobState::kPending);
  EXPECT_EQ(stopped->next.preemptions, 1);
}

TEST(JobLifecycleTest, OnlyPreemptibleJobsArePreemptedAndCheckpointDoneNeedsAPreemption) {
  Job j = Gang();
  j.preemptible = false;
  Result<Transition> t = Step(j, Preempt{9, "", 120, 0}, kNow);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("not preemptible"), std::string::npos);
  Result<Transition> c = Step(Gang(), CheckpointDone{"alice"}, kNow);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not being preempted"), std::string::npos)
      << c.status().message();
  // An array's element is named as its user knows it, ARRAY_INDEX.
  j.array_id = 40;
  j.array_index = 3;
  t = Step(j, Preempt{9, "", 120, 0}, kNow);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message().rfind("job 40_3 is not preemptible", 0), 0u)
      << t.status().message();
  // A job its user cancelled is being stopped already: not preempted.
  j = Gang();
  j.cancel_requested = true;
  EXPECT_FALSE(Step(j, Preempt{9, "", 120, 0}, kNow)->changed);
}

// A cancel during the grace ends the job CANCELLED; a lost node during it requeues the job
// (it was going back anyway), even without --requeue.
TEST(JobLifecycleTest, ACancelOrALostNodeDuringAPreemption) {
  Result<Transition> p = Step(Gang(), Preempt{9, "", 120, 0}, kNow);
  ASSERT_TRUE(p.ok());
  Result<Transition> c = Step(p->next, CancelRequested{"alice"}, kNow);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->changed);
  EXPECT_EQ(c->next.preempted_by, 0);
  Result<Transition> a = Step(c->next, Exit("n1", 0, std::nullopt, true), kNow);
  Result<Transition> b = Step(a->next, Exit("n2", 1, std::nullopt, true), kNow);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->next.state, JobState::kCancelled);
  EXPECT_EQ(b->next.reason, "cancelled by alice while being preempted");
  Result<Transition> lost = Step(p->next, NodeLost{"n2", "node n2 stopped responding"}, kNow);
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(lost->next.state, JobState::kPending);
  EXPECT_FALSE(lost->next.cancel_requested);
  EXPECT_EQ(lost->next.preempted_by, 0);
  // Requeued as preempted (it was told to stop): counted once, with its cost and the
  // preemption's reason, the node's loss named.
  EXPECT_EQ(lost->next.preemptions, 1);
  EXPECT_GT(lost->next.preempted_gpu_hours, 0);
  EXPECT_EQ(lost->next.reason,
            "requeued: preempted by job 9; node n2 stopped responding (attempt 1)");
  EXPECT_TRUE(lost->effects.requeued);
  EXPECT_FALSE(lost->effects.ended);
  EXPECT_EQ(lost->effects.strays.size(), 2u);
}

// A preempting array element is named as its user names it (Preempt::by_name), in the
// reasons and in preempted_by_name; the store id stays in preempted_by and in the log.
TEST(JobLifecycleTest, APreemptingArrayElementIsNamedArrayIndex) {
  Result<Transition> p = Step(InState(JobState::kRunning), Preempt{9, "", 120, 0, "7_3"}, kNow);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->next.preempted_by, 9);
  EXPECT_EQ(p->next.preempted_by_name, "7_3");
  EXPECT_EQ(p->next.reason, "preempted by job 7_3");
  Result<Transition> done = Step(p->next, Exit("n1", 0, 0), kNow);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->next.reason, "ended before its preemption by job 7_3 reached it");
  EXPECT_TRUE(done->next.preempted_by_name.empty());
  Result<Transition> c = Step(p->next, CancelRequested{"alice"}, kNow);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->next.preempted_by_name.empty());
  // Without a name (a caller that has none): the id.
  EXPECT_EQ(Step(InState(JobState::kRunning), Preempt{9, "", 120, 0}, kNow)->next.reason,
            "preempted by job 9");
}

}  // namespace
}  // namespace gpupool::controller::lifecycle
