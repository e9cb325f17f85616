// The node lease (docs/health.md, "A node cut off from the controller"): a --requeue or
// preemptible job requeued because its node was lost while it ran does not start again
// until that node's lease has run out (its supervisors stop the attempt by then), unless
// the node registers again first; a task its node stopped for the lease is lost with it.
#include "controller/controller_test.h"

namespace gpupool::controller::controller_test {
namespace {

constexpr int64_t kLeaseUs = 60'000'000;

class NodeLeaseTest : public ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    ControllerOptions o;
    o.node_lease_us = kLeaseUs;
    Restart(o);
    Register(2, {}, "n1");
    Register(2, {}, "n2");
  }
  // Submits a job of one GPU, places it and has it start where it was placed; the node.
  std::string StartJob(Job* job) {
    *job = c_->Submit(*job, alice_).value();
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    *job = Get(job->id);
    EXPECT_EQ(job->state, JobState::kAssigned);
    const std::string node = job->placement.at(0).node;
    EXPECT_TRUE(Apply({Ev(*job, protocol::EventKind::kStarted)}, node).ok());
    return node;
  }
  // Time passes in steps shorter than the node timeout; `alive` polls after each step.
  void Pass(int64_t micros, const std::string& alive) {
    while (micros > 0) {
      const int64_t step = std::min<int64_t>(micros, 4'000'000);
      clock_.AdvanceMicros(step);
      micros -= step;
      ASSERT_TRUE(c_->WaitForWork(alive, 0).ok());
      ASSERT_TRUE(c_->SweepNodes().ok());
    }
  }
  static std::string Other(const std::string& node) { return node == "n1" ? "n2" : "n1"; }
  // The end of `job`'s task as its node reports it after stopping it for the lease.
  Event LeaseEnd(const Job& job, const std::string& detail = "") {
    Event e = Ev(job, protocol::EventKind::kExited);
    e.exit_code.reset();
    e.signal = 9;
    e.kill_cause = protocol::KillCause::kNodeLease;
    e.kill_detail = detail;
    return e;
  }
};

TEST_F(NodeLeaseTest, TheRegistrationTellsTheAgentItsLease) {
  protocol::Registration r;
  r.node = "n3";
  r.info = MakeNode(1);
  r.info.gpus[0].uuid = "GPU-n3";
  Result<protocol::RegistrationReply> reply = c_->RegisterNode(r, "");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->node_lease_ms, kLeaseUs / 1000);
}

TEST_F(NodeLeaseTest, ARequeuedJobWaitsForItsLostNodesLeaseThenStartsElsewhere) {
  Job job = MakeJob(1);
  job.requeue = true;
  const std::string lost = StartJob(&job);
  const int64_t last_seen = clock_.NowMicros();
  Pass(12'000'000, Other(lost));  // past the node timeout of 10 s
  Job waiting = Get(job.id);
  ASSERT_EQ(waiting.state, JobState::kPending);
  EXPECT_EQ(waiting.fences, (std::vector<jobs::NodeFence>{{lost, last_seen + kLeaseUs}}));
  // Another node has room, but the lost one may still run attempt 1 until its lease ends.
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  waiting = Get(job.id);
  EXPECT_EQ(waiting.state, JobState::kPending);
  EXPECT_NE(waiting.pending_reason.find("waits for attempt 1 to stop on node " + lost +
                                        " (the node was lost while it ran; its lease stops it "
                                        "by 2023-11-14 22:14:20 UTC)"),
            std::string::npos)
      << waiting.pending_reason;
  // One second before the lease ends it still waits; at its end it starts, elsewhere.
  Pass(last_seen + kLeaseUs - 1'000'000 - clock_.NowMicros(), Other(lost));
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(job.id).state, JobState::kPending);
  Pass(1'000'000, Other(lost));
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job placed = Get(job.id);
  ASSERT_EQ(placed.state, JobState::kAssigned) << placed.pending_reason;
  EXPECT_EQ(placed.attempt, 2);
  EXPECT_EQ(placed.placement.at(0).node, Other(lost));
  EXPECT_TRUE(placed.fences.empty());
}

TEST_F(NodeLeaseTest, TheLeaseOutlivesAControllerRestart) {
  Job job = MakeJob(1);
  job.preemptible = true;  // preemptible jobs are fenced too (jobs::FencedOnLoss)
  job.requeue = true;
  const std::string lost = StartJob(&job);
  Pass(12'000'000, Other(lost));
  ASSERT_NE(jobs::FenceUntilUs(Get(job.id)), 0);
  ControllerOptions o;
  o.node_lease_us = kLeaseUs;
  Restart(o);
  Register(2, {}, Other(lost));
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(job.id).state, JobState::kPending);
  EXPECT_NE(Get(job.id).pending_reason.find("its lease stops it by"), std::string::npos);
}

TEST_F(NodeLeaseTest, ANodeThatRegistersAgainEndsTheWait) {
  Job job = MakeJob(1);
  job.requeue = true;
  const std::string lost = StartJob(&job);
  Pass(12'000'000, Other(lost));
  ASSERT_NE(jobs::FenceUntilUs(Get(job.id)), 0);
  // It comes back running nothing of the job: the job may start at once.
  Register(2, {}, lost);
  Job back = Get(job.id);
  EXPECT_EQ(jobs::FenceUntilUs(back), 0);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(job.id).state, JobState::kAssigned);
}

// adv5 finding 1: another agent takes the lost node over (its state directory wiped or
// moved): it cannot see the old agent's supervisors, one of which may still run attempt 1,
// so its registration, which lists nothing, does not end the wait (before, attempt 2
// started beside attempt 1 on the same GPUs). The node's own agent coming back does.
TEST_F(NodeLeaseTest, AnotherAgentTakingTheNodeOverDoesNotEndTheWait) {
  auto register_as = [&](const std::string& node, const std::string& id) {
    protocol::Registration r;
    r.node = node;
    r.agent_id = id;
    r.info = MakeNode(2);
    if (node != "n1") {
      for (gpu::GpuInfo& g : r.info.gpus) g.uuid += "-" + node;
    }
    r.version = version_;
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    return c_->RegisterNode(r, "");
  };
  ASSERT_TRUE(register_as("n1", "agent-1").ok());
  ASSERT_TRUE(register_as("n2", "agent-2").ok());
  Job job = MakeJob(1);
  job.requeue = true;
  const std::string lost = StartJob(&job);
  Pass(12'000'000, Other(lost));  // past the node timeout: another agent may take it over
  ASSERT_NE(jobs::FenceUntilUs(Get(job.id)), 0);
  ASSERT_TRUE(register_as(lost, "agent-new").ok());
  EXPECT_NE(jobs::FenceUntilUs(Get(job.id)), 0);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(job.id).state, JobState::kPending);
  EXPECT_NE(Get(job.id).pending_reason.find("its lease stops it by"), std::string::npos);
}

TEST_F(NodeLeaseTest, ANodeThatComesBackStillRunningTheAttemptStopsItFirst) {
  Job job = MakeJob(1);
  job.requeue = true;
  const std::string lost = StartJob(&job);
  Pass(12'000'000, Other(lost));
  Register(2, {{job.id, 1}}, lost);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job waiting = Get(job.id);
  EXPECT_EQ(waiting.state, JobState::kPending);
  EXPECT_EQ(jobs::FenceUntilUs(waiting), 0);
  EXPECT_NE(waiting.pending_reason.find("it still ran there when the node came back"),
            std::string::npos)
      << waiting.pending_reason;
}

// Its node stops a preemptible job too: it goes back to the queue, as a preempted one
// does, instead of ending LOST (without a lease it is LOST, as before).
TEST_F(NodeLeaseTest, APreemptibleJobIsRequeuedWhenItsNodeIsLost) {
  Job job = MakeJob(1);
  job.preemptible = true;
  const std::string lost = StartJob(&job);
  Pass(12'000'000, Other(lost));
  Job again = Get(job.id);
  EXPECT_EQ(again.state, JobState::kPending);
  EXPECT_EQ(again.fences.at(0).node, lost);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(job.id).state, JobState::kPending);
  Restart();  // no lease
  Register(2, {}, "n1");
  Register(2, {}, "n2");
  Job other = MakeJob(1);
  other.preemptible = true;
  const std::string where = StartJob(&other);
  Pass(12'000'000, Other(where));
  EXPECT_EQ(Get(other.id).state, JobState::kLost);
}

TEST_F(NodeLeaseTest, AJobItsLossDoesNotRequeueWaitsForNothing) {
  Job plain = MakeJob(1);
  const std::string lost = StartJob(&plain);
  Pass(12'000'000, Other(lost));
  Job ended = Get(plain.id);
  EXPECT_EQ(ended.state, JobState::kLost);
  EXPECT_EQ(jobs::FenceUntilUs(ended), 0);
}

TEST_F(NodeLeaseTest, WithoutALeaseARequeuedJobStartsAtOnce) {
  Restart();  // node_lease_us 0
  Register(2, {}, "n1");
  Register(2, {}, "n2");
  Job job = MakeJob(1);
  job.requeue = true;
  const std::string lost = StartJob(&job);
  Pass(12'000'000, Other(lost));
  EXPECT_EQ(jobs::FenceUntilUs(Get(job.id)), 0);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(job.id).state, JobState::kAssigned);
}

TEST_F(NodeLeaseTest, ATaskItsNodeStoppedForTheLeaseIsLostWithTheNode) {
  // The node gave up on its lease before the controller declared it lost (the poll that
  // reached it was answered too late): the job is requeued, not failed.
  Job job = MakeJob(1);
  job.requeue = true;
  const std::string node = StartJob(&job);
  ASSERT_TRUE(Apply({LeaseEnd(job, "node lease ran out")}, node).ok());
  Job again = Get(job.id);
  ASSERT_EQ(again.state, JobState::kPending);
  EXPECT_NE(
      again.reason.find("task 0 (node " + node + ") was stopped by its node: node lease ran out"),
      std::string::npos)
      << again.reason;
  EXPECT_EQ(jobs::FenceUntilUs(again), 0);  // it has ended: nothing to wait for
  ASSERT_EQ(again.earlier_attempts.size(), 1u);
  EXPECT_EQ(again.earlier_attempts[0].ended_by, jobs::AttemptEnd::kLost);
  // A preemptible job goes back too (only such jobs and --requeue ones are stopped for the
  // lease); one of neither kind (its node would not stop it) is LOST.
  Job preemptible = MakeJob(1);
  preemptible.preemptible = true;
  const std::string where = StartJob(&preemptible);
  ASSERT_TRUE(Apply({LeaseEnd(preemptible)}, where).ok());
  EXPECT_EQ(Get(preemptible.id).state, JobState::kPending);
  Job plain = MakeJob(1);
  const std::string there = StartJob(&plain);
  ASSERT_TRUE(Apply({LeaseEnd(plain)}, there).ok());
  EXPECT_EQ(Get(plain.id).state, JobState::kLost);
}

}  // namespace
}  // namespace gpupool::controller::controller_test
