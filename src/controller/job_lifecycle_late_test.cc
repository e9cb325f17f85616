// An end reported late (job_lifecycle_late.h, docs/health.md): a node reports the real
// end of a task of an attempt the controller had declared lost.
#include "controller/job_lifecycle_late.h"

#include <gtest/gtest.h>

#include "controller/usage.h"

namespace gpupool::controller::lifecycle {
namespace {

using jobs::Job;
using jobs::JobState;

constexpr int64_t kS = 1'000'000;
constexpr int64_t kT0 = int64_t{1'700'000'000} * kS;

// Alice's one-task, 2-GPU job placed on n1 at kT0 (attempt 1), started at kT0 + 1 s.
Job Running(bool requeue) {
  Job j;
  j.id = 7;
  j.user = "alice";
  j.command = {"true"};
  j.requeue = requeue;
  j.request.gpus = 2;
  j.submit_time_us = kT0 - kS;
  j.state = JobState::kPending;
  Result<Transition> placed = Step(j, Placed{{{"n1", {0, 1}, {"GPU-0", "GPU-1"}, 1000}}, {}}, kT0);
  EXPECT_TRUE(placed.ok());
  Result<Transition> started =
      Step(placed->next, TaskStarted{"n1", 0, 1, kT0 + kS, "", "", 0}, kT0 + kS);
  EXPECT_TRUE(started.ok());
  return started->next;
}

// Its node lost at kT0 + 6 s.
Job LostAt6s(bool requeue) {
  Result<Transition> t =
      Step(Running(requeue), NodeLost{"n1", "node n1 stopped responding", 0}, kT0 + 6 * kS);
  EXPECT_TRUE(t.ok());
  return t->next;
}

TaskExited EndOf(int attempt, int64_t at_us, int code, bool cancelled = false) {
  TaskExited e;
  e.node = "n1";
  e.attempt = attempt;
  e.time_us = at_us;
  e.exit_code = code;
  e.cancelled = cancelled;
  return e;
}

// s15: without --requeue, the job is LOST; its process exited 0 at +20 s and the agent
// says so at +30 s. The job stays LOST (its dependants acted on it), its record says the
// process succeeded, and its GPUs are charged up to +20 s.
TEST(JobLifecycleLateEnd, ALostJobsLateSuccessIsRecordedAndChargedAndItStaysLost) {
  const Job lost = LostAt6s(false);
  ASSERT_EQ(lost.state, JobState::kLost);
  EXPECT_NEAR(JobGpuHours(lost, 0, INT64_MAX, kT0 + 30 * kS), 2 * 5.0 / 3600, 1e-9);
  Result<Transition> t = Step(lost, EndOf(1, kT0 + 20 * kS, 0), kT0 + 30 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->changed);
  EXPECT_EQ(t->expected, JobState::kLost);
  EXPECT_EQ(t->next.state, JobState::kLost);
  EXPECT_EQ(t->next.end_time_us, kT0 + 6 * kS);  // when it was declared lost
  EXPECT_EQ(t->next.late_end_time_us, kT0 + 20 * kS);
  EXPECT_EQ(t->next.late_exit_code, 0);
  EXPECT_EQ(t->next.late_reason,
            "exited with code 0, reported after the loss (the job stays LOST)");
  EXPECT_TRUE(t->next.tasks[0].reported_late);
  EXPECT_EQ(t->next.tasks[0].end_time_us, kT0 + 20 * kS);
  EXPECT_EQ(t->next.tasks[0].exit_code, 0);
  EXPECT_FALSE(t->effects.ended);  // it ended before; nothing of it is active again
  EXPECT_NEAR(t->effects.late_gpu_hours, 2 * 14.0 / 3600, 1e-9);
  EXPECT_NEAR(JobGpuHours(t->next, 0, INT64_MAX, kT0 + 30 * kS), 2 * 19.0 / 3600, 1e-9);
  // Sent again: nothing more.
  Result<Transition> again = Step(t->next, EndOf(1, kT0 + 20 * kS, 0), kT0 + 31 * kS);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->changed);
  // A time past now is kept at now (a node's times are bounded).
  Result<Transition> future = Step(lost, EndOf(1, kT0 + 900 * kS, 0), kT0 + 30 * kS);
  ASSERT_TRUE(future.ok());
  EXPECT_EQ(future->next.late_end_time_us, kT0 + 30 * kS);
}

// s22: with --requeue the job is PENDING again (attempt 2 not placed); attempt 1 exited
// 0. It ends SUCCEEDED instead of running again, attempt 1's GPU-hours to its real end.
TEST(JobLifecycleLateEnd, ARequeuedJobWhoseLostAttemptSucceededEndsSucceededIfNotPlacedAgain) {
  const Job pending = LostAt6s(true);
  ASSERT_EQ(pending.state, JobState::kPending);
  ASSERT_EQ(pending.earlier_attempts.size(), 1u);
  EXPECT_EQ(pending.earlier_attempts[0].gpus, 2);
  Result<Transition> t = Step(pending, EndOf(1, kT0 + 20 * kS, 0), kT0 + 30 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->changed);
  EXPECT_EQ(t->next.state, JobState::kSucceeded);
  EXPECT_TRUE(jobs::IsValidTransition(JobState::kPending, JobState::kSucceeded));
  EXPECT_TRUE(t->effects.ended);
  EXPECT_EQ(t->next.exit_code, 0);
  EXPECT_EQ(t->next.start_time_us, kT0 + kS);
  EXPECT_EQ(t->next.end_time_us, kT0 + 20 * kS);
  EXPECT_NE(t->next.reason.find("attempt 1 on node n1 succeeded"), std::string::npos)
      << t->next.reason;
  const jobs::EarlierAttempt& a = t->next.earlier_attempts[0];
  EXPECT_EQ(a.lost_time_us, kT0 + 6 * kS);
  EXPECT_EQ(a.end_time_us, kT0 + 20 * kS);
  EXPECT_NEAR(a.gpu_hours, 2 * 19.0 / 3600, 1e-9);
  EXPECT_NEAR(JobGpuHours(t->next, 0, INT64_MAX, kT0 + 30 * kS), 2 * 19.0 / 3600, 1e-9);
}

// A late failure of the lost attempt: recorded and charged; the job still runs again.
TEST(JobLifecycleLateEnd, ARequeuedJobWhoseLostAttemptFailedStaysPending) {
  const Job pending = LostAt6s(true);
  Result<Transition> t = Step(pending, EndOf(1, kT0 + 10 * kS, 3), kT0 + 30 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->changed);
  EXPECT_EQ(t->next.state, JobState::kPending);
  EXPECT_FALSE(t->effects.ended);
  EXPECT_EQ(t->next.earlier_attempts[0].late_reason, "exited with code 3, reported after the loss");
  EXPECT_NEAR(t->next.earlier_attempts[0].gpu_hours, 2 * 9.0 / 3600, 1e-9);
  // Resent: no second charge.
  Result<Transition> again = Step(t->next, EndOf(1, kT0 + 10 * kS, 3), kT0 + 31 * kS);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->changed);
}

// Attempt 2 was placed before attempt 1's report came: it goes on; attempt 1 is charged
// to its real end. Once the job has ended, a late report still adds its charge.
TEST(JobLifecycleLateEnd, AfterTheNextAttemptWasPlacedItGoesOnAndTheLostOneIsCharged) {
  Job pending = LostAt6s(true);
  Result<Transition> placed =
      Step(pending, Placed{{{"n2", {0, 1}, {"GPU-2", "GPU-3"}, 1000}}, {}}, kT0 + 8 * kS);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  Result<Transition> t = Step(placed->next, EndOf(1, kT0 + 20 * kS, 0), kT0 + 30 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->changed);
  EXPECT_EQ(t->next.state, JobState::kAssigned);
  EXPECT_EQ(t->next.attempt, 2);
  EXPECT_EQ(t->next.placement[0].node, "n2");
  EXPECT_NEAR(t->next.earlier_attempts[0].gpu_hours, 2 * 19.0 / 3600, 1e-9);
  EXPECT_EQ(t->effects.late_gpu_hours, 0);  // an active job's hours are counted at its end
  // Attempt 2's own end is stepped as usual.
  TaskExited end2 = EndOf(2, kT0 + 40 * kS, 0);
  end2.node = "n2";
  Result<Transition> s2 =
      Step(t->next, TaskStarted{"n2", 0, 2, kT0 + 9 * kS, "", "", 0}, kT0 + 9 * kS);
  ASSERT_TRUE(s2.ok());
  Result<Transition> done = Step(s2->next, end2, kT0 + 40 * kS);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->next.state, JobState::kSucceeded);
  // A task reports once: the same task again with a later end changes nothing.
  Result<Transition> twice = Step(done->next, EndOf(1, kT0 + 25 * kS, 0), kT0 + 50 * kS);
  ASSERT_TRUE(twice.ok()) << twice.status().ToString();
  EXPECT_FALSE(twice->changed);
  // Attempt 1's report comes only once the job ended: charged on the ended job.
  Result<Transition> s2_unreported =
      Step(placed->next, TaskStarted{"n2", 0, 2, kT0 + 9 * kS, "", "", 0}, kT0 + 9 * kS);
  ASSERT_TRUE(s2_unreported.ok());
  Result<Transition> ended_first = Step(s2_unreported->next, end2, kT0 + 40 * kS);
  ASSERT_TRUE(ended_first.ok());
  ASSERT_EQ(ended_first->next.state, JobState::kSucceeded);
  Result<Transition> later = Step(ended_first->next, EndOf(1, kT0 + 25 * kS, 0), kT0 + 50 * kS);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  ASSERT_TRUE(later->changed);
  EXPECT_EQ(later->next.state, JobState::kSucceeded);
  EXPECT_NEAR(later->effects.late_gpu_hours, 2 * 19.0 / 3600, 1e-9);
}

// A report for a job that never lost an attempt changes nothing here.
TEST(JobLifecycleLateEnd, NoLostAttemptNoLateEnd) {
  Result<Transition> placed =
      Step(LostAt6s(true), Placed{{{"n2", {0}, {"GPU-2"}, 1000}}, {}}, kT0 + 8 * kS);
  ASSERT_TRUE(placed.ok());
  EXPECT_FALSE(LateEnd(placed->next, EndOf(2, kT0 + 9 * kS, 0), kT0 + 9 * kS).has_value());
  EXPECT_FALSE(LateEnd(Running(false), EndOf(1, kT0 + 9 * kS, 0), kT0 + 9 * kS).has_value());
}

// A --requeue gang of two 1-GPU tasks, task 0 on `node0` and task 1 on `node1`, placed
// at kT0 and started at kT0 + 1 s; both nodes lost at kT0 + 6 s (node0 first), node0's
// lease running to kT0 + 66 s: PENDING for attempt 2, waiting for node0's lease.
Job GangLost(const std::string& node0 = "n1", const std::string& node1 = "n1") {
  Job j;
  j.id = 8;
  j.user = "alice";
  j.command = {"true"};
  j.requeue = true;
  j.request.gpus = 1;
  j.request.tasks = 2;
  j.state = JobState::kPending;
  Result<Transition> t =
      Step(j, Placed{{{node0, {0}, {"GPU-0"}, 1000}, {node1, {1}, {"GPU-1"}, 1000}}, {}}, kT0);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  for (int task = 0; task < 2; ++task) {
    t = Step(t->next, TaskStarted{task == 0 ? node0 : node1, task, 1, kT0 + kS, "", "", 41000},
             kT0 + kS);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
  }
  EXPECT_EQ(t->next.state, JobState::kRunning);
  for (const std::string& node : {node0, node1}) {
    t = Step(t->next, NodeLost{node, "node " + node + " stopped responding", kT0 + 66 * kS},
             kT0 + 6 * kS);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
  }
  EXPECT_EQ(t->next.state, JobState::kPending);
  EXPECT_NE(jobs::FenceOn(t->next, node0), nullptr);
  EXPECT_EQ(jobs::FenceOn(t->next, node1)->until_us, kT0 + 66 * kS);  // lost too: waited for
  return t->next;
}

TaskExited GangEnd(const std::string& node, int task, int64_t at_us, int code) {
  TaskExited e = EndOf(1, at_us, code);
  e.node = node;
  e.task = task;
  return e;
}

// Both tasks of the gang's lost attempt exited 0 untold: once the second one's end comes,
// the job ends SUCCEEDED (not run twice), charged to the later end. Until then it waits:
// its next attempt is not placed (the lease of the node still holds it back).
TEST(JobLifecycleLateEnd, AGangWhoseLostTasksAllSucceededEndsSucceededOnceAllReported) {
  const Job pending = GangLost();
  Result<Transition> first = Step(pending, GangEnd("n1", 1, kT0 + 20 * kS, 0), kT0 + 30 * kS);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(first->changed);
  EXPECT_EQ(first->next.state, JobState::kPending);
  EXPECT_FALSE(first->effects.ended);
  EXPECT_NE(jobs::FenceOn(first->next, "n1"),
            nullptr);  // task 0 has not reported: it may succeed too
  EXPECT_EQ(first->next.earlier_attempts[0].late_ends,
            (std::vector<jobs::LateTaskEnd>{jobs::LateTaskEnd::kUnreported,
                                            jobs::LateTaskEnd::kSucceeded}));
  EXPECT_FALSE(Step(first->next,
                    Placed{{{"n2", {0}, {"GPU-2"}, 1000}, {"n2", {1}, {"GPU-3"}, 1000}}, {}},
                    kT0 + 31 * kS)
                   .ok());
  // Task 1 again (resent): nothing.
  Result<Transition> again = Step(first->next, GangEnd("n1", 1, kT0 + 20 * kS, 0), kT0 + 31 * kS);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->changed);
  // Task 0 ended earlier than task 1: the attempt still ends at task 1's end.
  Result<Transition> t = Step(first->next, GangEnd("n1", 0, kT0 + 18 * kS, 0), kT0 + 32 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->changed);
  EXPECT_EQ(t->next.state, JobState::kSucceeded) << t->next.reason;
  EXPECT_TRUE(t->effects.ended);
  EXPECT_EQ(t->next.attempt, 1);
  EXPECT_EQ(t->next.exit_code, 0);
  EXPECT_EQ(t->next.start_time_us, kT0 + kS);
  EXPECT_EQ(t->next.end_time_us, kT0 + 20 * kS);
  EXPECT_EQ(t->next.reason,
            "attempt 1 on node n1 succeeded (all 2 tasks); its end was reported after the node "
            "was lost and the job requeued: not run again");
  EXPECT_TRUE(t->next.fences.empty());
  const jobs::EarlierAttempt& a = t->next.earlier_attempts[0];
  EXPECT_EQ(a.lost_time_us, kT0 + 6 * kS);
  EXPECT_EQ(a.end_time_us, kT0 + 20 * kS);
  // Each task's GPU up to its own end: both 5 s to the loss, then 14 s and 12 s.
  EXPECT_NEAR(a.gpu_hours, (10 + 14 + 12) / 3600.0, 1e-9);
  EXPECT_NEAR(JobGpuHours(t->next, 0, INT64_MAX, kT0 + 40 * kS), (10 + 14 + 12) / 3600.0, 1e-9);
}

// The gang's tasks ran on two nodes, both lost: the reason names both.
TEST(JobLifecycleLateEnd, AGangLostOnTwoNodesEndsSucceededNamingBoth) {
  Result<Transition> t =
      Step(GangLost("n1", "n2"), GangEnd("n2", 1, kT0 + 20 * kS, 0), kT0 + 30 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->next.state, JobState::kPending);
  // n2 cannot speak for task 0 (n1's).
  Result<Transition> other = Step(t->next, GangEnd("n2", 0, kT0 + 20 * kS, 0), kT0 + 30 * kS);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->changed);
  t = Step(t->next, GangEnd("n1", 0, kT0 + 21 * kS, 0), kT0 + 31 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->next.state, JobState::kSucceeded);
  EXPECT_EQ(t->next.end_time_us, kT0 + 21 * kS);
  EXPECT_NE(t->next.reason.find("attempt 1 on nodes n1 and n2 succeeded (all 2 tasks)"),
            std::string::npos)
      << t->next.reason;
}

// A task of the gang failed, or was stopped by its node's lease: the job runs again, its
// lost node's lease holding it back no more once every task there reported; the record
// names the task that did not succeed.
TEST(JobLifecycleLateEnd, AGangWithATaskThatFailedOrWasStoppedRunsAgain) {
  for (const bool lease_kill : {false, true}) {
    SCOPED_TRACE(lease_kill ? "lease kill" : "exit 3");
    Result<Transition> t = Step(GangLost(), GangEnd("n1", 0, kT0 + 20 * kS, 0), kT0 + 30 * kS);
    ASSERT_TRUE(t.ok());
    TaskExited bad = GangEnd("n1", 1, kT0 + 15 * kS, lease_kill ? 0 : 3);
    if (lease_kill) bad.kill_cause = protocol::KillCause::kNodeLease;
    t = Step(t->next, bad, kT0 + 31 * kS);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(t->changed);
    EXPECT_EQ(t->next.state, JobState::kPending);
    EXPECT_FALSE(t->effects.ended);
    EXPECT_TRUE(t->next.fences.empty());
    EXPECT_TRUE(t->effects.queue_changed);
    EXPECT_NE(t->next.earlier_attempts[0].late_reason.find("; task 1 (node n1) "),
              std::string::npos)
        << t->next.earlier_attempts[0].late_reason;
    EXPECT_EQ(t->next.earlier_attempts[0].end_time_us, kT0 + 20 * kS);
    Result<Transition> placed =
        Step(t->next, Placed{{{"n2", {0}, {"GPU-2"}, 1000}, {"n2", {1}, {"GPU-3"}, 1000}}, {}},
             kT0 + 32 * kS);
    ASSERT_TRUE(placed.ok()) << placed.status().ToString();
    EXPECT_EQ(placed->next.attempt, 2);
  }
}

// The gang of GangLost on n1 and n2 (tasks started at kT0 + 1 s), with each node's loss as
// given: NodeLost{node, ..., lease_until_us} at `at_us`, in that order.
Result<Transition> GangOnTwoNodesLost(const std::vector<std::pair<std::string, int64_t>>& losses,
                                      int64_t at_us) {
  Job j;
  j.id = 9;
  j.user = "alice";
  j.command = {"true"};
  j.requeue = true;
  j.request.gpus = 1;
  j.request.tasks = 2;
  j.state = JobState::kPending;
  Result<Transition> t =
      Step(j, Placed{{{"n1", {0}, {"GPU-0"}, 1000}, {"n2", {1}, {"GPU-1"}, 1000}}, {}}, kT0);
  for (int task = 0; task < 2 && t.ok(); ++task) {
    t = Step(t->next, TaskStarted{task == 0 ? "n1" : "n2", task, 1, kT0 + kS, "", "", 41000},
             kT0 + kS);
  }
  for (const auto& [node, lease] : losses) {
    if (t.ok())
      t = Step(t->next, NodeLost{node, "node " + node + " stopped responding", lease}, at_us);
  }
  return t;
}

const Placed kOnN3{{{"n3", {0}, {"GPU-2"}, 1000}, {"n3", {1}, {"GPU-3"}, 1000}}, {}};

// A gang's two nodes both lost in one sweep (a rack cut off), n2's lease ending later than
// n1's: the next attempt waits for each node, until its lease runs out or it is heard from
// (it registered again, or reported the attempt's end there), whichever comes first. n1
// back early does not let attempt 2 start while n2, cut off, may still run task 1.
TEST(JobLifecycleLateEnd, AGangLostOnTwoNodesWaitsForEachOfThem) {
  Result<Transition> lost =
      GangOnTwoNodesLost({{"n1", kT0 + 66 * kS}, {"n2", kT0 + 70 * kS}}, kT0 + 6 * kS);
  ASSERT_TRUE(lost.ok()) << lost.status().ToString();
  const Job pending = lost->next;
  ASSERT_EQ(pending.state, JobState::kPending);
  ASSERT_EQ(pending.attempt, 1);
  // n1 registers again: n2 still holds the job back, until its own lease's end.
  Result<Transition> n1_back = Step(pending, FenceLifted{"n1"}, kT0 + 20 * kS);
  ASSERT_TRUE(n1_back.ok()) << n1_back.status().ToString();
  EXPECT_TRUE(n1_back->changed);
  EXPECT_FALSE(n1_back->effects.queue_changed);
  Result<Transition> early = Step(n1_back->next, kOnN3, kT0 + 21 * kS);
  ASSERT_FALSE(early.ok());
  EXPECT_NE(early.status().message().find("node n2's lease"), std::string::npos)
      << early.status().ToString();
  EXPECT_FALSE(Step(pending, kOnN3, kT0 + 67 * kS).ok());  // n1's lease is over, not n2's
  EXPECT_TRUE(Step(pending, kOnN3, kT0 + 70 * kS).ok());
  EXPECT_TRUE(Step(n1_back->next, kOnN3, kT0 + 70 * kS).ok());
  // ... or until n2 registers again too.
  Result<Transition> both_back = Step(n1_back->next, FenceLifted{"n2"}, kT0 + 22 * kS);
  ASSERT_TRUE(both_back.ok());
  EXPECT_TRUE(both_back->effects.queue_changed);
  Result<Transition> placed = Step(both_back->next, kOnN3, kT0 + 22 * kS);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  EXPECT_EQ(placed->next.attempt, 2);
  // Each node's report of its task's end ends the wait for that node only.
  Result<Transition> r = Step(pending, GangEnd("n1", 0, kT0 + 15 * kS, 1), kT0 + 20 * kS);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->next.state, JobState::kPending);
  EXPECT_FALSE(r->effects.queue_changed);
  EXPECT_FALSE(Step(r->next, kOnN3, kT0 + 21 * kS).ok());
  r = Step(r->next, GangEnd("n2", 1, kT0 + 16 * kS, 0), kT0 + 22 * kS);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->effects.queue_changed);
  EXPECT_TRUE(Step(r->next, kOnN3, kT0 + 22 * kS).ok());
}

// n2 is lost after n1, while the job waits for its next attempt (a later sweep): from
// then on it waits for n2's lease too, even once n1 is back. A node of the attempt lost
// without a lease, or lost again, changes nothing more; another node is none of its.
TEST(JobLifecycleLateEnd, AGangsOtherNodeLostWhileItWaitsHoldsItBackToo) {
  Result<Transition> t = GangOnTwoNodesLost({{"n1", kT0 + 66 * kS}}, kT0 + 6 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->next.state, JobState::kPending);
  const Job n1_lost = t->next;
  t = Step(n1_lost, FenceLifted{"n1"}, kT0 + 8 * kS);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->effects.queue_changed);  // n2, up, was told to stop: no wait for it
  EXPECT_TRUE(Step(t->next, kOnN3, kT0 + 8 * kS).ok());
  EXPECT_FALSE(Step(t->next, NodeLost{"n3", "gone", kT0 + 90 * kS}, kT0 + 9 * kS)->changed);
  t = Step(t->next, NodeLost{"n2", "node n2 stopped responding", kT0 + 68 * kS}, kT0 + 9 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->changed);
  EXPECT_EQ(t->next.state, JobState::kPending);
  EXPECT_FALSE(Step(t->next, kOnN3, kT0 + 67 * kS).ok());
  EXPECT_TRUE(Step(t->next, kOnN3, kT0 + 68 * kS).ok());
  EXPECT_FALSE(Step(t->next, NodeLost{"n2", "again", kT0 + 99 * kS}, kT0 + 10 * kS)->changed);
  // Lost with no lease: nothing stops its task, and nothing is waited for.
  t = Step(n1_lost, NodeLost{"n2", "gone", 0}, kT0 + 9 * kS);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(Step(t->next, kOnN3, kT0 + 65 * kS).ok());  // n1's lease still holds it
  EXPECT_TRUE(Step(t->next, kOnN3, kT0 + 66 * kS).ok());
}

// red team 7, finding 1: a gang of two 8-GPU tasks, task 0 on n1 and task 1 on n2, placed
// at kT0 and started at kT0 + 1 s; n2 is lost at kT0 + 11 s (n1 is not). With --requeue
// the job is PENDING again; without, it is LOST.
Job SpreadGangLost(bool requeue) {
  Job j;
  j.id = 9;
  j.user = "alice";
  j.command = {"true"};
  j.requeue = requeue;
  j.request.gpus = 8;
  j.request.tasks = 2;
  j.state = JobState::kPending;
  std::vector<std::string> n1_gpus, n2_gpus;
  std::vector<int> indices;
  for (int g = 0; g < 8; ++g) {
    indices.push_back(g);
    n1_gpus.push_back("GPU-n1-" + std::to_string(g));
    n2_gpus.push_back("GPU-n2-" + std::to_string(g));
  }
  Result<Transition> t =
      Step(j, Placed{{{"n1", indices, n1_gpus, 1000}, {"n2", indices, n2_gpus, 1000}}, {}}, kT0);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  for (int task = 0; task < 2; ++task) {
    t = Step(t->next, TaskStarted{task == 0 ? "n1" : "n2", task, 1, kT0 + kS, "", "", 41000},
             kT0 + kS);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
  }
  t = Step(t->next, NodeLost{"n2", "node n2 stopped responding", kT0 + 71 * kS}, kT0 + 11 * kS);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->next.state, requeue ? JobState::kPending : JobState::kLost);
  return t->next;
}

// Task 0 on n1, stopped at the loss, reports its end at kT0 + 12 s (exit 143); task 1 on
// n2, whose node comes back, that it exited with code 9 at kT0 + 21 s.
Job BothReported(Job job, std::vector<double>* charged) {
  TaskExited stop = GangEnd("n1", 0, kT0 + 12 * kS, 143);
  stop.cancelled = true;
  Result<Transition> t = Step(job, stop, kT0 + 12 * kS);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->changed);
  charged->push_back(t->effects.late_gpu_hours);
  t = Step(t->next, GangEnd("n2", 1, kT0 + 21 * kS, 9), kT0 + 23 * kS);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->changed);
  charged->push_back(t->effects.late_gpu_hours);
  return t->next;
}

// The requeued gang's lost attempt: its 16 GPUs up to the loss (10 s), then n1's 8 up to
// task 0's end (1 s more) and n2's 8 up to task 1's (10 s more): 248 GPU-seconds, not 16
// GPUs up to the latest end (320). A window is cut per task.
TEST(JobLifecycleLateEnd, AGangsLostAttemptChargesEachTasksGpusUpToItsOwnEnd) {
  std::vector<double> charged;
  const Job job = BothReported(SpreadGangLost(true), &charged);
  ASSERT_EQ(job.state, JobState::kPending);
  const jobs::EarlierAttempt& a = job.earlier_attempts[0];
  EXPECT_EQ(a.lost_time_us, kT0 + 11 * kS);
  EXPECT_EQ(a.end_time_us, kT0 + 21 * kS);
  EXPECT_EQ(a.late_end_times_us, (std::vector<int64_t>{kT0 + 12 * kS, kT0 + 21 * kS}));
  EXPECT_NEAR(a.gpu_hours, 248.0 / 3600, 1e-12);
  EXPECT_NEAR(JobGpuHours(job, 0, INT64_MAX, kT0 + 30 * kS), 248.0 / 3600, 1e-12);
  EXPECT_EQ(charged, (std::vector<double>{0, 0}));  // a waiting job's are in its record
  // Past task 0's end: only n2's 8 GPUs (3 s).
  EXPECT_NEAR(JobGpuHours(job, kT0 + 16 * kS, kT0 + 19 * kS, kT0 + 30 * kS), 24.0 / 3600, 1e-12);
  // Across the loss: 16 GPUs x 5 s, then n1's 8 x 1 s and n2's 8 x 5 s.
  EXPECT_NEAR(JobGpuHours(job, kT0 + 6 * kS, kT0 + 16 * kS, kT0 + 30 * kS), 128.0 / 3600, 1e-12);
  EXPECT_EQ(a.late_reason,
            "task 0 (node n1) exited with code 143 (stopped by the controller, its job lost); "
            "task 1 (node n2) exited with code 9, reported after the loss");
  // Cancelled while it waits: a later report's charge counts in /metrics (nothing here:
  // both reported); the record keeps its hours.
  Result<Transition> again = Step(job, GangEnd("n2", 1, kT0 + 21 * kS, 9), kT0 + 24 * kS);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->changed);
}

// The same gang without --requeue ends LOST: its 16 GPUs up to the loss, then each task's
// 8 up to its own end, as reported; each report charges its own task's part.
TEST(JobLifecycleLateEnd, ALostGangChargesEachTasksGpusUpToItsOwnEnd) {
  std::vector<double> charged;
  const Job lost = SpreadGangLost(false);
  EXPECT_NEAR(JobGpuHours(lost, 0, INT64_MAX, kT0 + 30 * kS), 160.0 / 3600, 1e-12);
  const Job job = BothReported(lost, &charged);
  ASSERT_EQ(job.state, JobState::kLost);
  EXPECT_EQ(job.end_time_us, kT0 + 11 * kS);
  EXPECT_EQ(job.late_end_time_us, kT0 + 21 * kS);
  EXPECT_EQ(job.tasks[0].end_time_us, kT0 + 12 * kS);
  EXPECT_EQ(job.tasks[1].end_time_us, kT0 + 21 * kS);
  ASSERT_EQ(charged.size(), 2u);
  EXPECT_NEAR(charged[0], 8.0 / 3600, 1e-12);
  EXPECT_NEAR(charged[1], 80.0 / 3600, 1e-12);
  EXPECT_NEAR(JobGpuHours(job, 0, INT64_MAX, kT0 + 30 * kS), 248.0 / 3600, 1e-12);
  EXPECT_NEAR(JobGpuHours(job, kT0 + 16 * kS, kT0 + 19 * kS, kT0 + 30 * kS), 24.0 / 3600, 1e-12);
  EXPECT_NEAR(JobGpuHours(job, kT0 + 6 * kS, kT0 + 16 * kS, kT0 + 30 * kS), 128.0 / 3600, 1e-12);
  EXPECT_EQ(job.late_reason,
            "task 0 (node n1) exited with code 143 (stopped by the controller, its job lost); "
            "task 1 (node n2) exited with code 9, reported after the loss (the job "
            "stays LOST)");
  // Task 0's outcome speaks for the job's late exit status.
  EXPECT_EQ(job.late_exit_code, 143);
  // Stored by an older server (no task's own end): all its GPUs up to the latest end.
  Job old = job;
  old.tasks[1].reported_late = false;
  EXPECT_NEAR(JobGpuHours(old, 0, INT64_MAX, kT0 + 30 * kS), 320.0 / 3600, 1e-12);
}

// A one-task job is charged as before: its GPUs up to its end, and a window cut there.
TEST(JobLifecycleLateEnd, AOneTaskAttemptsWindowIsAsBefore) {
  Result<Transition> t = Step(LostAt6s(true), EndOf(1, kT0 + 20 * kS, 3), kT0 + 30 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // 2 GPUs x 3 s before the loss, 2 x 4 s after it.
  EXPECT_NEAR(JobGpuHours(t->next, kT0 + 3 * kS, kT0 + 10 * kS, kT0 + 30 * kS), 14.0 / 3600, 1e-12);
  EXPECT_NEAR(JobGpuHours(t->next, 0, INT64_MAX, kT0 + 30 * kS), 38.0 / 3600, 1e-12);
  EXPECT_EQ(t->next.earlier_attempts[0].late_reason, "exited with code 3, reported after the loss");
  // A record whose report an older server took (no task's own end): spread as then.
  Job old = t->next;
  old.earlier_attempts[0].late_end_times_us.clear();
  EXPECT_NEAR(JobGpuHours(old, kT0 + 3 * kS, kT0 + 10 * kS, kT0 + 30 * kS), 14.0 / 3600, 1e-12);
}

}  // namespace
// A gang whose task 1 could not start on n2 goes back to the queue; task 0, stopped on
// n1 (which was never lost), reports its end: the words do not say its node was lost.
TEST(JobLifecycleLateEnd, ATaskStoppedBecauseAnotherCouldNotStartIsNotSaidToHaveLostItsNode) {
  Job j;
  j.id = 10;
  j.user = "alice";
  j.command = {"true"};
  j.request.gpus = 1;
  j.request.tasks = 2;
  j.state = JobState::kPending;
  Result<Transition> t =
      Step(j, Placed{{{"n1", {0}, {"GPU-0"}, 1000}, {"n2", {0}, {"GPU-1"}, 1000}}, {}}, kT0);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  t = Step(t->next, TaskStarted{"n1", 0, 1, kT0 + kS, "", "", 41000}, kT0 + kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  TaskLost no_start{"n2", 1, 1, "task 1 could not start on n2: no such image"};
  no_start.not_started = true;
  t = Step(t->next, no_start, kT0 + 2 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->next.state, JobState::kPending);
  TaskExited stop = GangEnd("n1", 0, kT0 + 3 * kS, 143);
  stop.cancelled = true;
  t = Step(t->next, stop, kT0 + 3 * kS);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->changed);
  ASSERT_EQ(t->next.earlier_attempts.size(), 1u);
  EXPECT_EQ(t->next.earlier_attempts[0].late_reason,
            "task 0 (node n1) exited with code 143 (stopped by the controller, its job lost), "
            "reported after the loss");
  EXPECT_EQ(t->effects.log.find("node was lost"), std::string::npos) << t->effects.log;
}

}  // namespace gpupool::controller::lifecycle
