// A job placed on a node whose agent dies before it polls again: no poll answer ever
// carried its launch, so nothing of it can run, and the node's loss sends it back to the
// queue (--requeue or not) instead of ending it LOST (docs/health.md, "A node lost before
// it had the job"). What may have been handed out, or is not known (a restarted
// controller), is lost as before.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "controller/controller_test.h"
#include "controller/job_lifecycle.h"

namespace gpupool::controller {
namespace {

using controller_test::ControllerTest;
using controller_test::GateStore;
using controller_test::MakeJob;
using jobs::Job;
using jobs::JobState;
using protocol::EventKind;

constexpr int64_t kLossNow = int64_t{1'700'000'000} * 1'000'000;
constexpr char kN1Reason[] =
    "requeued: placed on node n1, whose agent stopped answering before it could be started; it "
    "was put back in the queue";

// A 1-GPU job of alice's placed on n1 (attempt 2: its first attempt was preempted), not
// started.
Job PlacedNotLaunched() {
  Job j;
  j.id = 7;
  j.user = "alice";
  j.command = {"true"};
  j.state = JobState::kAssigned;
  j.submit_time_us = kLossNow - 1'000'000;
  j.placed_time_us = kLossNow - 500'000;
  j.attempt = 2;
  j.placement = {{"n1", {0}, {"GPU-0"}, 1000}};
  j.tasks.resize(1);
  j.tasks[0].host = "n1";
  return j;
}

lifecycle::NodeLost LostN1(bool never_launched) {
  return {"n1", "node n1 stopped responding (no heartbeat for 10 s)", 0, never_launched};
}

TEST(NeverLaunched, AJobNoAgentHadGoesBackToTheQueueUncharged) {
  for (bool requeue : {false, true}) {
    SCOPED_TRACE(requeue ? "--requeue" : "no --requeue");
    Job j = PlacedNotLaunched();
    j.requeue = requeue;
    Result<lifecycle::Transition> t = lifecycle::Step(j, LostN1(true), kLossNow);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->next.state, JobState::kPending);
    EXPECT_EQ(t->next.reason, kN1Reason);
    EXPECT_TRUE(t->next.placement.empty());
    EXPECT_TRUE(t->next.tasks.empty());
    EXPECT_EQ(t->next.end_time_us, 0);
    EXPECT_TRUE(t->next.earlier_attempts.empty());  // no attempt of it ran
    EXPECT_EQ(t->next.launch_failures, 0);          // not the node's fault it could own
    EXPECT_EQ(t->next.attempt, 2);  // the next placement makes attempt 3: ids stay unique
    EXPECT_TRUE(t->effects.requeued);
    EXPECT_TRUE(t->effects.freed);
    EXPECT_FALSE(t->effects.ended);
    // A stop order for the attempt still goes to its node, holding nothing there.
    ASSERT_EQ(t->effects.strays.size(), 1u);
    EXPECT_EQ(t->effects.strays[0].node, "n1");
    EXPECT_EQ(t->effects.strays[0].attempt, 2);
    EXPECT_FALSE(t->effects.strays[0].started_there);
  }
}

// Whatever may have run, or is not known not to, is lost as before.
TEST(NeverLaunched, WhatMayHaveRunIsLostAsBefore) {
  struct Case {
    const char* name;
    void (*make)(Job&);
    bool never_launched;
  };
  const Case cases[] = {
      {"a launch was handed out", [](Job&) {}, false},
      {"its task started",
       [](Job& j) {
         j.state = JobState::kRunning;
         j.tasks[0].start_time_us = kLossNow - 100;
         j.start_time_us = kLossNow - 100;
       },
       true},
      {"a gang's other task started",
       [](Job& j) {
         j.placement.push_back({"n2", {0}, {"GPU-1"}, 1000});
         j.tasks.push_back({});
         j.tasks[1].start_time_us = kLossNow - 100;
       },
       true},
      {"its task ended", [](Job& j) { j.tasks[0].ended = true; }, true},
      {"it is being cancelled", [](Job& j) { j.cancel_requested = true; }, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Job j = PlacedNotLaunched();
    c.make(j);
    Result<lifecycle::Transition> t = lifecycle::Step(j, LostN1(c.never_launched), kLossNow);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->next.state, JobState::kLost);
    EXPECT_EQ(t->next.reason, "node n1 stopped responding (no heartbeat for 10 s)");
  }
}

class NeverLaunchedTest : public ControllerTest {
 protected:
  // Alice's 1-GPU job placed on n1 (its only node); no poll of n1 since.
  Job PlaceOnN1() {
    Register(2);
    Job j = c_->Submit(MakeJob(1), alice_).value();
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    j = Get(j.id);
    EXPECT_EQ(j.state, JobState::kAssigned);
    EXPECT_EQ(j.placement.at(0).node, "n1");
    return j;
  }
  // n1's agent says nothing past the node timeout (10 s); the sweep finds it lost.
  void SilenceN1() {
    clock_.AdvanceMicros(11'000'000);
    ASSERT_TRUE(c_->SweepNodes().ok());
    ASSERT_FALSE(c_->NodeUp("n1"));
  }
};

TEST_F(NeverLaunchedTest, AJobPlacedOnANodeThatDiedBeforeItsPollIsQueuedAgainAndRunsOnItsReturn) {
  Job j = PlaceOnN1();
  SilenceN1();
  j = Get(j.id);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.reason, kN1Reason);
  EXPECT_TRUE(j.earlier_attempts.empty());
  EXPECT_EQ(j.end_time_us, 0);
  // Nothing is placed on a lost node; once its agent is back the job runs there.
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(j.id).state, JobState::kPending);
  Register(2);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  ASSERT_EQ(j.state, JobState::kAssigned);
  AgentWork w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.launch.size(), 1u);
  EXPECT_EQ(w.launch[0].job.attempt, j.attempt);
  ASSERT_TRUE(Apply({Ev(j, EventKind::kStarted), Ev(j, EventKind::kExited, 0)}).ok());
  j = Get(j.id);
  EXPECT_EQ(j.state, JobState::kSucceeded);
  EXPECT_TRUE(j.reason.empty()) << j.reason;  // its start dropped the requeue's reason
}

TEST_F(NeverLaunchedTest, ItIsPlacedOnAnotherNodeAtOnce) {
  Job j = PlaceOnN1();
  Register(2, {}, "n2");
  clock_.AdvanceMicros(11'000'000);
  ASSERT_TRUE(c_->WaitForWork("n2", 0).ok());  // n2 is heard, n1 is not
  ASSERT_TRUE(c_->SweepNodes().ok());
  EXPECT_EQ(Get(j.id).state, JobState::kPending);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  EXPECT_EQ(j.state, JobState::kAssigned);
  EXPECT_EQ(j.placement.at(0).node, "n2");
}

// n1 declared lost while the job's placement there was being written (the sweep did not
// see it): no launch went out either, and it goes back to the queue.
TEST_F(NeverLaunchedTest, AJobPlacedOnANodeLostWhileItsPlacementWasWrittenIsQueuedAgain) {
  auto gate = std::make_unique<GateStore>(OpenSqliteStore(":memory:"));
  GateStore* g = gate.get();
  c_.reset();
  store_ = std::move(gate);
  Restart();
  Register(2);
  Job j = c_->Submit(MakeJob(1), alice_).value();
  g->Close(JobState::kAssigned);
  std::thread pass([&] { EXPECT_TRUE(c_->ScheduleOnce().ok()); });
  g->WaitUntilHeld();
  SilenceN1();
  g->Open();
  pass.join();
  j = Get(j.id);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.reason, kN1Reason);
}

TEST_F(NeverLaunchedTest, AJobWhoseLaunchAPollAnswerCarriedIsLost) {
  Job j = PlaceOnN1();
  // Produced for n1's poll: the answer may have reached its agent as it died.
  ASSERT_EQ(c_->WaitForWork("n1", 0).value().launch.size(), 1u);
  SilenceN1();
  j = Get(j.id);
  EXPECT_EQ(j.state, JobState::kLost);
  EXPECT_EQ(j.reason, "node n1 stopped responding (no heartbeat for 10 s)");
}

TEST_F(NeverLaunchedTest, ARestartedControllerDoesNotKnowAndLosesItAsBefore) {
  Job j = PlaceOnN1();
  Restart();                         // what was handed out before is not known
  clock_.AdvanceMicros(16'000'000);  // past the restart's grace (internal::kRestartGraceUs)
  ASSERT_TRUE(c_->SweepNodes().ok());
  EXPECT_EQ(Get(j.id).state, JobState::kLost);
}

// An --mpi gang of two 1-GPU tasks, one on n1, one on n2 (registered 6 s after n1: n1
// falls silent past the node timeout first).
class NeverLaunchedGangTest : public NeverLaunchedTest {
 protected:
  Job PlaceGang() {
    Register(1);
    clock_.AdvanceMicros(6'000'000);
    Register(1, {}, "n2");
    Job j = MakeJob(1);
    j.request.tasks = 2;
    j.mpi = true;  // its held task is launched without task 0's port
    j = c_->Submit(j, alice_).value();
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    j = Get(j.id);
    EXPECT_EQ(j.state, JobState::kAssigned);
    EXPECT_EQ(j.placement.size(), 2u);
    clock_.AdvanceMicros(5'000'000);  // n1 silent for 11 s, n2 for 5 s
    return j;
  }
};

TEST_F(NeverLaunchedGangTest, AGangWithOneTaskHandedOutIsLost) {
  Job j = PlaceGang();
  ASSERT_EQ(c_->WaitForWork("n2", 0).value().launch.size(), 1u);
  ASSERT_TRUE(c_->SweepNodes().ok());
  ASSERT_FALSE(c_->NodeUp("n1"));
  EXPECT_EQ(Get(j.id).state, JobState::kLost);
}

// While n1's loss is being written, a poll of n2 gets no launch of the job: the loss,
// stepped as "never launched", must stay true until it is installed.
TEST_F(NeverLaunchedGangTest, NoLaunchOfAJobGoesOutWhileANodeOfItIsDown) {
  auto gate = std::make_unique<GateStore>(OpenSqliteStore(":memory:"));
  GateStore* g = gate.get();
  c_.reset();
  store_ = std::move(gate);
  Restart();
  Job j = PlaceGang();
  g->Close(JobState::kPending);
  std::thread sweep([&] { EXPECT_TRUE(c_->SweepNodes().ok()); });
  const bool held = g->WaitUntilHeldFor(std::chrono::seconds(10));
  AgentWork w = c_->WaitForWork("n2", 0).value();
  g->Open();
  sweep.join();
  ASSERT_TRUE(held) << "n1's loss was not written as a requeue";
  EXPECT_TRUE(w.launch.empty());
  j = Get(j.id);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.reason, kN1Reason);
}

}  // namespace
}  // namespace gpupool::controller
