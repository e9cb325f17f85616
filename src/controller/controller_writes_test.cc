// The controller writes to the store without its lock (issues 16 and 27): assignments,
// ends and cancels while the database holds a write (GatedControllerTest), concurrent
// writers of one job, and a job changed behind the controller's back.

#include "controller/controller_test.h"

namespace gpupool::controller::controller_test {
namespace {

// Issue 16 item 4: the scheduler writes its assignments without the controller's lock.
// While the database holds that write, reads and agents' polls are answered. A cancel of
// a job being assigned does not wait for it (issue 27: one commit path, compare-and-set):
// its own write lands first, the scheduler's transaction loses its compare-and-set on that
// job, and the scheduler writes the others' assignments again without it.
TEST_F(GatedControllerTest, AssignmentsAreWrittenWithoutTheLockAndACancelMeanwhileWins) {
  GateStore* g = UseGateStore();
  const Job a = c_->Submit(MakeJob(1), alice_).value();
  const Job b = c_->Submit(MakeJob(1), bob_).value();
  g->Close();
  Status pass;
  std::thread scheduler([&] { pass = c_->ScheduleOnce(); });
  g->WaitUntilHeld();
  // The lock is free: reads, listings, nodes and an agent's poll are answered.
  EXPECT_EQ(Get(a.id).state, JobState::kPending);
  store::JobFilter active;
  active.active_only = true;
  EXPECT_EQ(c_->List(active, root_).value().size(), 2u);
  EXPECT_EQ(c_->Nodes().size(), 1u);
  EXPECT_TRUE(c_->WaitForWork("n1", 0).ok());
  EXPECT_TRUE(c_->Submit(MakeJob(1), alice_).ok());
  // The cancel returns while the assignment is still held.
  Result<Job> cancelled = c_->Cancel(a.id, alice_);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->state, JobState::kCancelled);
  g->Open();
  scheduler.join();
  ASSERT_TRUE(pass.ok()) << pass.ToString();
  EXPECT_EQ(Get(a.id).state, JobState::kCancelled);  // not assigned after its cancel
  EXPECT_EQ(Get(b.id).state, JobState::kAssigned);
  // Memory and store agree.
  for (int64_t id : {a.id, b.id}) {
    const Job mem = Get(id);
    const Job stored = store_->GetJob(id).value();
    EXPECT_EQ(mem.state, stored.state) << "job " << id;
    EXPECT_EQ(mem.version, stored.version) << "job " << id;
  }
  // The node runs b only.
  const AgentWork work = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(work.launch.size(), 1u);
  EXPECT_EQ(work.launch[0].job.id, b.id);
}

// Cancelling a pending job writes without the lock too: meanwhile the job reads as
// PENDING, and a scheduling pass is not blocked by it. Here the assignment lands first:
// the cancel loses its compare-and-set, steps again on the assigned job and stops it.
TEST_F(GatedControllerTest, APendingCancelIsWrittenWithoutTheLockAndStepsAgainOnAConflict) {
  GateStore* g = UseGateStore();
  const Job a = c_->Submit(MakeJob(1), alice_).value();
  const Job b = c_->Submit(MakeJob(1), bob_).value();
  g->Close(JobState::kCancelled);
  Result<Job> cancelled = Status::Internal("not yet");
  std::thread canceller([&] { cancelled = c_->Cancel(a.id, alice_); });
  g->WaitUntilHeld();
  EXPECT_EQ(Get(a.id).state, JobState::kPending);
  ASSERT_TRUE(c_->ScheduleOnce().ok());  // not blocked by the cancel's write
  EXPECT_EQ(Get(a.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(b.id).state, JobState::kAssigned);
  g->Open();
  canceller.join();
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->state, JobState::kAssigned);
  EXPECT_TRUE(cancelled->cancel_requested);
  const Job stored = store_->GetJob(a.id).value();
  EXPECT_TRUE(stored.cancel_requested);
  EXPECT_EQ(stored.version, Get(a.id).version);
  // Its node is told to stop it.
  const AgentWork work = c_->WaitForWork("n1", 0).value();
  EXPECT_EQ(std::count_if(work.cancel.begin(), work.cancel.end(),
                          [&](const protocol::CancelOrder& o) { return o.job_id == a.id; }),
            1);
}

// Issue 16 item 4: an agent's report that ends a running job is written without the
// lock. Meanwhile the job reads as it was, and polls, listings and submissions are
// answered. A cancel arriving meanwhile does not wait: it lands first, the report's write
// loses its compare-and-set and is stepped again on the job with its cancel request.
TEST_F(GatedControllerTest, ARunningJobsEndIsWrittenWithoutTheLock) {
  GateStore* g = UseGateStore();
  const Job a = StartOne(c_.get(), alice_, clock_);
  g->Close(JobState::kSucceeded);
  Status applied = Status::Internal("not yet");
  std::thread agent([&] { applied = Apply({Ev(a, protocol::EventKind::kExited, 0)}); });
  g->WaitUntilHeld();
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  EXPECT_TRUE(c_->WaitForWork("n1", 0).ok());
  EXPECT_EQ(c_->Nodes().size(), 1u);
  EXPECT_TRUE(c_->Submit(MakeJob(1), bob_).ok());
  const Result<Job> cancelled = c_->Cancel(a.id, alice_);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_TRUE(cancelled->cancel_requested);
  g->Open();
  agent.join();
  ASSERT_TRUE(applied.ok()) << applied.ToString();
  // The end, stepped again, ended the job with the cancel request in it.
  const Job done = Get(a.id);
  EXPECT_TRUE(jobs::IsTerminal(done.state)) << jobs::JobStateName(done.state);
  EXPECT_TRUE(done.cancel_requested);
  const Job stored = store_->GetJob(a.id).value();
  EXPECT_EQ(stored.state, done.state);
  EXPECT_EQ(stored.version, done.version);
  EXPECT_EQ(stored.version, a.version + 2);  // the cancel's write, then the end's
}

// Cancelling a running job writes its cancel request without the lock; the agent's
// report of the task's end, arriving meanwhile, is written first, and the cancel, stepped
// again on the ended job, is answered that the job has ended. Nothing is lost.
TEST_F(GatedControllerTest, ARunningCancelIsWrittenWithoutTheLockAndTheEndLandsFirst) {
  GateStore* g = UseGateStore();
  const Job a = StartOne(c_.get(), alice_, clock_);
  g->Close(JobState::kRunning);
  Result<Job> cancelled = Status::Internal("not yet");
  std::thread canceller([&] { cancelled = c_->Cancel(a.id, alice_); });
  g->WaitUntilHeld();
  EXPECT_FALSE(Get(a.id).cancel_requested);               // as it was, until written
  EXPECT_TRUE(c_->WaitForWork("n1", 0)->cancel.empty());  // not asked before it is stored
  Event end = Ev(a, protocol::EventKind::kExited);
  end.exit_code.reset();
  end.signal = 15;
  end.cancelled = true;
  const Status applied = Apply({end});  // not held: lands while the cancel waits
  ASSERT_TRUE(applied.ok()) << applied.ToString();
  EXPECT_EQ(Get(a.id).state, JobState::kCancelled);
  g->Open();
  canceller.join();
  EXPECT_EQ(cancelled.status().code(), StatusCode::kFailedPrecondition)
      << cancelled.status().ToString();
  const Job done = Get(a.id);
  EXPECT_EQ(done.state, JobState::kCancelled);
  EXPECT_EQ(store_->GetJob(a.id)->state, JobState::kCancelled);
  EXPECT_EQ(store_->GetJob(a.id)->reason, done.reason);
}

// The events of two tasks of one gang, from two nodes at once: the second batch waits for
// the first's write (group commit) and steps on its result: neither start is lost.
TEST_F(GatedControllerTest, TwoTasksEventsAtOnceAreBothKept) {
  GateStore* g = UseGateStore();
  Register(2, {}, "n2");
  Job j = MakeJob(2);
  j.request.tasks = 2;
  j = c_->Submit(j, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  ASSERT_EQ(j.state, JobState::kAssigned);
  ASSERT_NE(j.placement[0].node, j.placement[1].node);
  g->Close(JobState::kAssigned);
  Event s0 = Ev(j, protocol::EventKind::kStarted, 0, 0);
  s0.master_port = 41000;
  Status first = Status::Internal("not yet");
  Status second = Status::Internal("not yet");
  std::thread t0([&] { first = Apply({s0}, j.placement[0].node); });
  std::thread t1(
      [&] { second = Apply({Ev(j, protocol::EventKind::kStarted, 0, 1)}, j.placement[1].node); });
  g->WaitUntilHeld(1);         // one batch's write under way
  c_->WaitForEventBatches(1);  // the other's waits for it
  g->Open();
  t0.join();
  t1.join();
  ASSERT_TRUE(first.ok()) << first.ToString();
  ASSERT_TRUE(second.ok()) << second.ToString();
  for (const Job& seen : {Get(j.id), store_->GetJob(j.id).value()}) {
    EXPECT_EQ(seen.state, JobState::kRunning);
    ASSERT_EQ(seen.tasks.size(), 2u);
    EXPECT_NE(seen.tasks[0].start_time_us, 0);
    EXPECT_NE(seen.tasks[1].start_time_us, 0);
    EXPECT_EQ(seen.master_port, 41000);
  }
}

// Issue 27's commit path under contention, with no gate: the tasks of a gang report
// their starts from their nodes at once while its owner cancels it. Every writer steps on
// the version in memory; those that lose a compare-and-set step again, so each start and
// the cancel request are in memory and in the store, at the same version.
TEST_F(ControllerTest, ConcurrentWritersOfOneJobLoseNothing) {
  constexpr int kTasks = 4;
  for (int k = 0; k < kTasks; ++k) Register(1, {}, "w" + std::to_string(k));
  for (int round = 0; round < 20; ++round) {
    Job j = MakeJob(1);
    j.request.tasks = kTasks;
    j = c_->Submit(j, alice_).value();
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    j = Get(j.id);
    ASSERT_EQ(j.state, JobState::kAssigned);
    // Task 0 first: a cancel before it starts would end the others unstarted.
    Event first = Ev(j, protocol::EventKind::kStarted, 0, 0);
    first.master_port = 41000;
    ASSERT_TRUE(Apply({first}, j.placement[0].node).ok());
    std::vector<std::thread> agents;
    std::vector<Status> answers(kTasks, Status::Ok());
    for (int t = 1; t < kTasks; ++t) {
      agents.emplace_back([&, t] {
        answers[t] = Apply({Ev(j, protocol::EventKind::kStarted, 0, t)}, j.placement[t].node);
      });
    }
    Result<Job> cancelled = c_->Cancel(j.id, alice_);
    for (std::thread& a : agents) a.join();
    ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
    for (const Status& a : answers) ASSERT_TRUE(a.ok()) << a.ToString();
    const Job mem = Get(j.id);
    const Job stored = store_->GetJob(j.id).value();
    for (const Job& seen : {mem, stored}) {
      EXPECT_EQ(seen.state, JobState::kRunning) << "round " << round;
      EXPECT_TRUE(seen.cancel_requested) << "round " << round;
      ASSERT_EQ(seen.tasks.size(), size_t{kTasks});
      for (int t = 0; t < kTasks; ++t) EXPECT_NE(seen.tasks[t].start_time_us, 0) << t;
    }
    EXPECT_EQ(mem.version, stored.version);
    EXPECT_EQ(stored.version, j.version + kTasks + 1);  // each change written once
    // The tasks end as cancelled; the next round gets the GPUs back.
    for (int t = 0; t < kTasks; ++t) {
      Event end = Ev(j, protocol::EventKind::kExited, 0, t);
      end.exit_code.reset();
      end.signal = 15;
      end.cancelled = true;
      ASSERT_TRUE(Apply({end}, j.placement[t].node).ok());
    }
    ASSERT_EQ(Get(j.id).state, JobState::kCancelled);
  }
}

// A job changed in the store behind the controller's back (no controller of the pool
// writes so: another one is fenced out) is an error after a bounded wait, not a hang nor
// a write over the change.
TEST_F(ControllerTest, AJobChangedBehindTheControllersBackIsAnErrorNotAHang) {
  const Job j = c_->Submit(MakeJob(1), alice_).value();
  Job other = store_->GetJob(j.id).value();
  other.priority = 7;
  ASSERT_TRUE(store_->UpdateJob(other, JobState::kPending, other.version).ok());
  Result<Job> cancelled = Status::Internal("not yet");
  std::thread canceller([&] { cancelled = c_->Cancel(j.id, alice_); });
  ASSERT_TRUE(clock_.WaitForWaiters(1));  // it lost, and waits for the winner's change
  clock_.AdvanceMicros(11'000'000);
  canceller.join();
  ASSERT_FALSE(cancelled.ok());
  EXPECT_TRUE(store::IsConflict(cancelled.status())) << cancelled.status().ToString();
  EXPECT_NE(cancelled.status().message().find("outside this controller"), std::string::npos);
  EXPECT_EQ(store_->GetJob(j.id)->priority, 7);  // not written over
  EXPECT_EQ(store_->GetJob(j.id)->state, JobState::kPending);
}

// A node sweep writes the jobs it loses without the lock: meanwhile the node shows down
// and the job as it was.
TEST_F(GatedControllerTest, ANodeSweepWritesItsLostJobsWithoutTheLock) {
  GateStore* g = UseGateStore();
  const Job a = StartOne(c_.get(), alice_, clock_);
  g->Close(JobState::kLost);
  clock_.AdvanceMicros(11'000'000);  // past the fixture's 10 s node timeout
  Status swept = Status::Internal("not yet");
  std::thread sweeper([&] { swept = c_->SweepNodes(); });
  g->WaitUntilHeld();
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  ASSERT_EQ(c_->Nodes().size(), 1u);
  EXPECT_EQ(c_->Nodes()[0].state, "down");
  EXPECT_TRUE(c_->Submit(MakeJob(1), bob_).ok());
  g->Open();
  sweeper.join();
  ASSERT_TRUE(swept.ok()) << swept.ToString();
  const JobState want = a.requeue ? JobState::kPending : JobState::kLost;
  EXPECT_EQ(Get(a.id).state, want);
  EXPECT_EQ(store_->GetJob(a.id)->state, want);
}

}  // namespace
}  // namespace gpupool::controller::controller_test
