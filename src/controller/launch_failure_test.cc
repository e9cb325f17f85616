// A node that cannot start a job by a fault of its own (a full disk, its supervisor
// missing) says so (protocol::Event::not_started): the job goes back to the queue, since
// nothing of it ran, and the node is drained, so that it does not fail every job sent
// to it.
#include <gtest/gtest.h>

#include <string>

#include "controller/controller_test.h"
#include "controller/job_lifecycle.h"

namespace gpupool::controller {
namespace {

using controller_test::ControllerTest;
using controller_test::MakeJob;
using jobs::Job;
using jobs::JobState;
using protocol::Event;
using protocol::EventKind;

constexpr int64_t kLaunchNow = int64_t{1'700'000'000} * 1'000'000;
constexpr char kNoSpaceReason[] =
    "node n1 could not start it: cannot write '/var/lib/gpupool/jobs/7/0.1/spec.json.tmp': "
    "No space left on device";

// A job of alice's placed on n1, attempt `attempt`, not started.
Job AssignedJob(int attempt = 1) {
  Job j;
  j.id = 7;
  j.user = "alice";
  j.command = {"true"};
  j.state = JobState::kAssigned;
  j.submit_time_us = kLaunchNow - 1'000'000;
  j.placed_time_us = kLaunchNow - 500'000;
  j.attempt = attempt;
  j.placement = {{"n1", {0}, {"GPU-0"}, 1000}};
  j.tasks.resize(1);
  j.tasks[0].host = "n1";
  return j;
}

TEST(LaunchFailure, AJobANodeCouldNotStartGoesBackToTheQueueWithoutAskingForRequeue) {
  const Job j = AssignedJob();
  ASSERT_FALSE(j.requeue);
  Result<lifecycle::Transition> t =
      lifecycle::Step(j, lifecycle::TaskLost{"n1", 0, 1, kNoSpaceReason, true}, kLaunchNow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->next.state, JobState::kPending);
  EXPECT_EQ(t->next.launch_failures, 1);
  EXPECT_EQ(t->next.reason, std::string("requeued: ") + kNoSpaceReason);
  EXPECT_TRUE(t->next.placement.empty());
  EXPECT_TRUE(t->next.earlier_attempts.empty());  // nothing ran: no GPU-hours to keep
  // A plain loss of the same job (its supervisor vanished) is lost as before.
  Result<lifecycle::Transition> plain =
      lifecycle::Step(j, lifecycle::TaskLost{"n1", 0, 1, "gone", false}, kLaunchNow);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->next.state, JobState::kLost);
}

TEST(LaunchFailure, ATaskThatStartedIsNotTakenForOneThatDidNot) {
  Job j = AssignedJob();
  j.state = JobState::kRunning;
  j.tasks[0].start_time_us = kLaunchNow - 100'000;
  j.start_time_us = kLaunchNow - 100'000;
  Result<lifecycle::Transition> t =
      lifecycle::Step(j, lifecycle::TaskLost{"n1", 0, 1, kNoSpaceReason, true}, kLaunchNow);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.state, JobState::kLost);
  EXPECT_EQ(t->next.launch_failures, 0);
}

TEST(LaunchFailure, AfterTheLastAllowedFailureTheJobIsLost) {
  Job j = AssignedJob(lifecycle::kMaxLaunchFailures);
  j.launch_failures = lifecycle::kMaxLaunchFailures - 1;
  Result<lifecycle::Transition> t =
      lifecycle::Step(j, lifecycle::TaskLost{"n1", 0, j.attempt, kNoSpaceReason, true}, kLaunchNow);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->next.state, JobState::kLost);
  EXPECT_EQ(t->next.launch_failures, lifecycle::kMaxLaunchFailures);
  EXPECT_NE(t->next.reason.find("5 times nodes could not start it: not requeued again"),
            std::string::npos)
      << t->next.reason;
  // A cancel asked for before the report ends the job instead.
  Job cancelled = AssignedJob();
  cancelled.cancel_requested = true;
  Result<lifecycle::Transition> c =
      lifecycle::Step(cancelled, lifecycle::TaskLost{"n1", 0, 1, kNoSpaceReason, true}, kLaunchNow);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->next.state, JobState::kPending);
}

class LaunchFailureControllerTest : public ControllerTest {};

// The pool end to end: n1 says it could not start the job; the job waits again, n1 is
// drained naming the job and the cause, and the job starts on n2 in the next pass.
TEST_F(LaunchFailureControllerTest, TheNodeIsDrainedAndTheJobStartsElsewhere) {
  Register(1);
  const int64_t id = c_->Submit(MakeJob(1), alice_).value().id;
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);
  Register(1, {}, "n2");
  Event lost = Ev(Get(id), EventKind::kLost);
  lost.reason = kNoSpaceReason;
  lost.not_started = true;
  ASSERT_TRUE(Apply({lost}).ok());
  Job j = Get(id);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.launch_failures, 1);
  bool drained = false;
  for (const NodeView& n : c_->Nodes()) {
    if (n.name != "n1") continue;
    drained = true;
    EXPECT_NE(n.state, "up");
    EXPECT_EQ(n.drain_reason,
              std::string("could not start job ") + std::to_string(id) + ": " + kNoSpaceReason);
  }
  EXPECT_TRUE(drained);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(id);
  ASSERT_EQ(j.state, JobState::kAssigned);
  EXPECT_EQ(j.placement[0].node, "n2");
  EXPECT_EQ(j.attempt, 2);
  // An admin's resume returns n1.
  ASSERT_TRUE(c_->ResumeNode("n1", root_).ok());
  for (const NodeView& n : c_->Nodes()) {
    if (n.name == "n1") {
      EXPECT_EQ(n.state, "up");
    }
  }
}

// Only a job of this attempt on this node counts: a stale or foreign report drains
// nothing and changes no job.
TEST_F(LaunchFailureControllerTest, AReportForAnotherNodesJobDrainsNothing) {
  Register(1);
  Register(1, {}, "n2");
  const int64_t id = c_->Submit(MakeJob(1), alice_).value().id;
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const std::string placed_on = Get(id).placement.at(0).node;
  const std::string other = placed_on == "n1" ? "n2" : "n1";
  Event lost = Ev(Get(id), EventKind::kLost);
  lost.reason = kNoSpaceReason;
  lost.not_started = true;
  ASSERT_TRUE(Apply({lost}, other).ok());
  EXPECT_EQ(Get(id).state, JobState::kAssigned);
  for (const NodeView& n : c_->Nodes()) EXPECT_EQ(n.state, "up") << n.name;
}

// A node drained for a job it could not start for want of room returns to service when
// its disk watch reports room (docs/health.md); a drain for another cause, or an admin's
// in the same words, waits for an admin.
TEST_F(LaunchFailureControllerTest, TheDisksRoomLiftsADrainForWantOfRoomOnly) {
  Register(1);
  auto n1 = [&] {
    for (const NodeView& n : c_->Nodes()) {
      if (n.name == "n1") return n;
    }
    return NodeView{};
  };
  protocol::DiskReport room;
  room.path = "/var/lib/gpupool/agent";
  const std::string supervisor =
      "node n1 could not start it: cannot start the job's supervisor "
      "'/usr/lib/gpupool/gpupool-shim': No such file or directory";
  for (const std::string& why : {std::string(kNoSpaceReason), supervisor}) {
    SCOPED_TRACE(why);
    const int64_t id = c_->Submit(MakeJob(1), alice_).value().id;
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    ASSERT_EQ(Get(id).state, JobState::kAssigned);
    Event lost = Ev(Get(id), EventKind::kLost);
    lost.reason = why;
    lost.not_started = true;
    ASSERT_TRUE(Apply({lost}).ok());
    ASSERT_EQ(n1().drain_reason, "could not start job " + std::to_string(id) + ": " + why);
    ASSERT_TRUE(c_->ObserveDiskReport("n1", room).ok());
    if (why == supervisor) {
      EXPECT_NE(n1().state, "up") << "the disk's room does not mend a missing supervisor";
    } else {
      EXPECT_EQ(n1().state, "up");
    }
    ASSERT_TRUE(c_->Cancel(id, root_).ok());
  }
  ASSERT_TRUE(c_->ResumeNode("n1", root_).ok());
  ASSERT_TRUE(
      c_->DrainNode("n1", "could not start job 9: " + std::string(kNoSpaceReason), root_).ok());
  ASSERT_TRUE(c_->ObserveDiskReport("n1", room).ok());
  EXPECT_NE(n1().state, "up") << "an admin's drain is the admin's to end";
}

// A gang whose task 1 its node could not start: the whole job goes back to the queue,
// task 0's node is told to stop it, and only task 1's node is drained.
class LaunchFailureGangTest : public controller_test::GangTest {};

TEST_F(LaunchFailureGangTest, TheGangGoesBackAndOnlyTheFaultyNodeIsDrained) {
  Job j = SubmitGang();
  (void)c_->WaitForWork(NodeOf(j, 0), 0);
  Event s0 = Ev(j, EventKind::kStarted, 0, 0);
  s0.master_port = 41000;
  ASSERT_TRUE(Apply({s0}, NodeOf(j, 0)).ok());
  ASSERT_EQ(c_->WaitForWork(NodeOf(j, 1), 0)->launch.size(), 1u);
  Event lost = Ev(j, EventKind::kLost, 0, 1);
  lost.reason = kNoSpaceReason;
  lost.not_started = true;
  ASSERT_TRUE(Apply({lost}, NodeOf(j, 1)).ok());
  const Job again = Get(j.id);
  EXPECT_EQ(again.state, JobState::kPending);
  EXPECT_EQ(again.launch_failures, 1);
  AgentWork w = c_->WaitForWork(NodeOf(j, 0), 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].job_id, j.id);
  for (const NodeView& n : c_->Nodes()) {
    if (n.name == NodeOf(j, 1)) {
      EXPECT_NE(n.state, "up");
    } else {
      EXPECT_EQ(n.state, "up") << n.name;
    }
  }
}

}  // namespace
}  // namespace gpupool::controller
