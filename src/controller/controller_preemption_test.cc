// Preemption in the controller (issue 28 item 5, docs/preemption.md): a pass stops a
// --preemptible job for a job of higher priority, the stop order carries the grace and
// its deadline, checkpoint-done ends the grace, the victim holds its GPUs until its task
// has ended and is then requeued, and the preemptor starts before it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/controller.h"
#include "controller/preemption_holds.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpupool::controller {
namespace preemption_test {

using jobs::Job;
using jobs::JobState;

class ControllerPreemptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    ControllerOptions o;
    o.node_timeout_us = int64_t{3600} * 1'000'000 * 24;
    auto c = Controller::Create(store_.get(), &clock_, o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c_ = std::move(c).value();
    protocol::Registration r;
    r.node = "n1";
    for (int i = 0; i < 2; ++i) {
      gpu::GpuInfo g;
      g.vendor = gpu::Vendor::kNvidia;
      g.index = i;
      g.name = "NVIDIA A100-SXM4-80GB";
      g.uuid = "GPU-" + std::to_string(i);
      g.memory_total_bytes = uint64_t{80} << 30;
      r.info.gpus.push_back(g);
    }
    r.info.hostname = "n1";
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    ASSERT_TRUE(c_->RegisterNode(r, "").ok());
    node_ = r;
  }
  Job Submit(const Caller& who, int priority, bool preemptible) {
    Job j;
    j.command = {"train"};
    j.request.gpus = 2;
    j.request.cpu_milli = 100;
    j.priority = priority;
    j.preemptible = preemptible;
    if (preemptible) j.preempt_grace_s = 30;
    return c_->Submit(j, who).value();
  }
  Status Report(const Job& j, protocol::EventKind kind) {
    protocol::Event e;
    e.job_id = j.id;
    e.attempt = j.attempt;
    e.kind = kind;
    e.time_us = clock_.NowMicros();
    if (kind == protocol::EventKind::kExited) {
      e.signal = 15;
      e.cancelled = true;
    }
    return c_->ApplyEvents("n1", protocol::EventBatch{"n1", {e}, {}});
  }
  Job Get(int64_t id) { return c_->Get(id, root_).value(); }

  ManualClock clock_{1'700'000'000'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
  Caller alice_{"alice", 1000, 1000, false};
  Caller bob_{"bob", 1001, 1001, false};
  Caller root_{"root", 0, 0, true};
  protocol::Registration node_;  // n1's, two GPUs
};

TEST_F(ControllerPreemptionTest, AVictimStopsWithItsGraceHoldsItsGpusAndIsRequeued) {
  Job victim = Submit(alice_, 0, /*preemptible=*/true);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  victim = Get(victim.id);
  ASSERT_EQ(victim.state, JobState::kAssigned);
  ASSERT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);
  ASSERT_TRUE(Report(victim, protocol::EventKind::kStarted).ok());
  clock_.AdvanceMicros(int64_t{1800} * 1'000'000);  // past the default 600 s minimum
  // A higher priority preempts its own user's jobs only (users choose priorities).
  const Job urgent = Submit(alice_, 10, /*preemptible=*/false);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job stopping = Get(victim.id);
  EXPECT_EQ(stopping.state, JobState::kRunning);
  EXPECT_EQ(stopping.preempted_by, urgent.id);
  const int64_t now_s = clock_.NowMicros() / 1'000'000;
  EXPECT_EQ(stopping.preempt_deadline_s, now_s + 30);
  EXPECT_EQ(store_->GetJob(victim.id)->preempted_by, urgent.id);  // written first
  EXPECT_EQ(Get(urgent.id).state, JobState::kPending);
  EXPECT_NE(Get(urgent.id).pending_reason.find("preempting job " + std::to_string(victim.id)),
            std::string::npos)
      << Get(urgent.id).pending_reason;
  // The stop order carries the grace and deadline.
  AgentWork w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].job_id, victim.id);
  EXPECT_EQ(w.cancel[0].grace_s, 30);
  EXPECT_EQ(w.cancel[0].deadline_s, now_s + 30);
  // Another pass while it stops: the preemptor still waits (its GPUs are in use), and
  // nothing more is preempted.
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(urgent.id).state, JobState::kPending);
  // Only its owner (or an admin) says it has checkpointed; then the order goes out again
  // without grace.
  EXPECT_EQ(c_->CheckpointDone(victim.id, bob_).status().code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(c_->CheckpointDone(victim.id, alice_).ok());
  w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].grace_s, 0);
  // Its task ends: it is requeued, and the preemptor starts before it.
  clock_.AdvanceMicros(5'000'000);
  ASSERT_TRUE(Report(stopping, protocol::EventKind::kExited).ok());
  Job again = Get(victim.id);
  EXPECT_EQ(again.state, JobState::kPending);
  EXPECT_EQ(again.preemptions, 1);
  EXPECT_NEAR(again.preempted_gpu_hours, 2 * 1805 / 3600.0, 1e-6);
  EXPECT_NE(again.reason.find("requeued: preempted by job " + std::to_string(urgent.id) +
                              ", of higher priority (10 > 0) (attempt 1)"),
            std::string::npos)
      << again.reason;
  // The requeued victim, older, would come first in its user's queue: it waits for its
  // preemptor to start instead of taking its GPUs back.
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(urgent.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(victim.id).state, JobState::kPending);
  PoolSnapshot none;
  const std::string metrics = c_->metrics().Render(none);
  EXPECT_NE(metrics.find("gpupool_preemptions_total 1\n"), std::string::npos) << metrics;
  // Not being preempted now: refused.
  EXPECT_EQ(c_->CheckpointDone(victim.id, alice_).status().code(), StatusCode::kFailedPrecondition);
}

// A preempted gang (2 tasks of 1 GPU) whose task 1 says checkpoint-done (red team 7,
// finding 2): owner or admin only, a task the job lacks refused naming the field; then a
// stop order without grace for task 1 alone goes out beside the job's, whose grace goes
// on for task 0. Once task 0 says it too (task 1 ended), the job's own order has no grace.
TEST_F(ControllerPreemptionTest, ATaskOfAGangEndsItsOwnGraceOnly) {
  Job gang;
  gang.command = {"train"};
  gang.request.gpus = 1;
  gang.request.tasks = 2;
  gang.request.cpu_milli = 100;
  gang.preemptible = true;
  gang.preempt_grace_s = 30;
  gang = c_->Submit(gang, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  gang = Get(gang.id);
  auto report = [&](int task, protocol::EventKind kind) {
    protocol::Event e;
    e.job_id = gang.id;
    e.attempt = gang.attempt;
    e.task_index = task;
    e.kind = kind;
    e.time_us = clock_.NowMicros();
    if (kind == protocol::EventKind::kStarted && task == 0) e.master_port = 29500;
    if (kind == protocol::EventKind::kExited) {
      e.exit_code = 0;
      e.cancelled = true;
    }
    return c_->ApplyEvents("n1", protocol::EventBatch{"n1", {e}, {}});
  };
  ASSERT_TRUE(report(0, protocol::EventKind::kStarted).ok());
  ASSERT_TRUE(report(1, protocol::EventKind::kStarted).ok());
  clock_.AdvanceMicros(int64_t{1800} * 1'000'000);
  const Job urgent = Submit(alice_, 10, /*preemptible=*/false);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(gang.id).preempted_by, urgent.id);
  AgentWork w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].grace_s, 30);
  EXPECT_EQ(w.cancel[0].task, -1);

  EXPECT_EQ(c_->CheckpointDone(gang.id, bob_, 1).status().code(), StatusCode::kPermissionDenied);
  Result<Job> r = c_->CheckpointDone(gang.id, alice_, 2);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind(
                "task: job " + std::to_string(gang.id) + " has tasks 0..1, not 2", 0),
            0u)
      << r.status().message();
  r = c_->CheckpointDone(gang.id, alice_, 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->tasks[1].checkpoint_done);
  EXPECT_FALSE(r->checkpoint_done);
  EXPECT_TRUE(store_->GetJob(gang.id)->tasks[1].checkpoint_done);  // stored
  w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.cancel.size(), 2u);
  EXPECT_EQ(w.cancel[0].task, -1);  // the job's: task 0 keeps its grace
  EXPECT_EQ(w.cancel[0].grace_s, 30);
  EXPECT_EQ(w.cancel[1].task, 1);  // task 1's own, without grace
  EXPECT_EQ(w.cancel[1].grace_s, 0);
  EXPECT_EQ(w.cancel[1].deadline_s, w.cancel[0].deadline_s);

  clock_.AdvanceMicros(1'000'000);
  ASSERT_TRUE(report(1, protocol::EventKind::kExited).ok());
  EXPECT_EQ(Get(gang.id).state, JobState::kRunning);  // task 0 still saves
  r = c_->CheckpointDone(gang.id, alice_, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->checkpoint_done);  // every task ended or said it
  w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].task, -1);
  EXPECT_EQ(w.cancel[0].grace_s, 0);
  ASSERT_TRUE(report(0, protocol::EventKind::kExited).ok());
  EXPECT_EQ(Get(gang.id).state, JobState::kPending);
  EXPECT_EQ(Get(gang.id).preemptions, 1);
}

// The victim's node is lost during its grace (its agent away past the node timeout): the
// victim is requeued as preempted (counted, the node's loss named). The agent comes back
// while the victim's supervisor still runs it (SIGKILL at the deadline): its GPUs are in
// use until that end is reported, so the preemptor does not start on them before.
TEST_F(ControllerPreemptionTest, ANodeLostInTheGraceKeepsTheVictimsGpusUntilItsEndIsReported) {
  Job victim = Submit(alice_, 0, /*preemptible=*/true);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  victim = Get(victim.id);
  ASSERT_TRUE(Report(victim, protocol::EventKind::kStarted).ok());
  clock_.AdvanceMicros(int64_t{1800} * 1'000'000);
  const Job urgent = Submit(alice_, 10, /*preemptible=*/false);  // her own: priority
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(victim.id).preempted_by, urgent.id);
  clock_.AdvanceMicros(int64_t{3600} * 1'000'000 * 25);  // past the node timeout
  ASSERT_TRUE(c_->SweepNodes().ok());
  const Job lost = Get(victim.id);
  EXPECT_EQ(lost.state, JobState::kPending);
  EXPECT_EQ(lost.preemptions, 1);
  EXPECT_NE(lost.reason.find("requeued: preempted by job " + std::to_string(urgent.id)),
            std::string::npos)
      << lost.reason;
  EXPECT_NE(lost.reason.find("n1"), std::string::npos) << lost.reason;
  protocol::Registration back = node_;
  back.running = {{victim.id, 0, 1}};
  ASSERT_TRUE(c_->RegisterNode(back, "").ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(urgent.id).state, JobState::kPending) << "placed on GPUs still in use";
  EXPECT_NE(Get(urgent.id).pending_reason.find("still used by attempt 1 of job"), std::string::npos)
      << Get(urgent.id).pending_reason;
  ASSERT_TRUE(Report(victim, protocol::EventKind::kExited).ok());  // attempt 1 killed
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(urgent.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(victim.id).state, JobState::kPending);
}

// As above, the victim an array's element: the reason the waiting job gets names it as its
// user does (ARRAY_INDEX), not by its store id.
TEST_F(ControllerPreemptionTest, AnEarlierAttemptOfAnArrayElementIsNamedArrayIndex) {
  Job victim;
  victim.command = {"train"};
  victim.request.gpus = 2;
  victim.request.cpu_milli = 100;
  victim.preemptible = true;
  victim.preempt_grace_s = 30;
  victim.array = "4";
  victim = c_->Submit(victim, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_TRUE(Report(Get(victim.id), protocol::EventKind::kStarted).ok());
  clock_.AdvanceMicros(int64_t{1800} * 1'000'000);
  const Job urgent = Submit(alice_, 10, /*preemptible=*/false);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(victim.id).preempted_by, urgent.id);
  clock_.AdvanceMicros(int64_t{3600} * 1'000'000 * 25);  // past the node timeout
  ASSERT_TRUE(c_->SweepNodes().ok());
  ASSERT_EQ(Get(victim.id).state, JobState::kPending);
  protocol::Registration back = node_;
  back.running = {{victim.id, 0, 1}};
  ASSERT_TRUE(c_->RegisterNode(back, "").ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_NE(Get(urgent.id).pending_reason.find("still used by attempt 1 of job " +
                                               std::to_string(victim.id) + "_4, which"),
            std::string::npos)
      << Get(urgent.id).pending_reason;
}

// The same after a restart of the controller, which does not know which GPUs the returning
// node's earlier attempt holds: nothing new is placed on that node until its end.
TEST_F(ControllerPreemptionTest, AnEarlierAttemptOfUnknownGpusKeepsItsNodeFromNewWork) {
  Job again = Submit(alice_, 0, /*preemptible=*/false);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  again = Get(again.id);
  ASSERT_TRUE(Report(again, protocol::EventKind::kStarted).ok());
  ASSERT_TRUE(c_->Cancel(again.id, alice_).ok());
  ASSERT_TRUE(Report(again, protocol::EventKind::kExited).ok());  // ended: no stray known
  ASSERT_EQ(Get(again.id).state, JobState::kCancelled);
  c_.reset();
  ControllerOptions o;
  o.node_timeout_us = int64_t{3600} * 1'000'000 * 24;
  c_ = Controller::Create(store_.get(), &clock_, o).value();
  const Job next = Submit(bob_, 0, /*preemptible=*/false);
  protocol::Registration back = node_;
  back.running = {{again.id, 0, 1}};  // its supervisor has not ended it yet
  ASSERT_TRUE(c_->RegisterNode(back, "").ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(next.id).state, JobState::kPending) << "placed beside a stray of unknown GPUs";
  ASSERT_TRUE(Report(again, protocol::EventKind::kExited).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(next.id).state, JobState::kAssigned);
}

// The victim's GPUs are held for its preemptor (docs/preemption.md): `earlier`, a job of
// another user submitted before the preemptor and so ahead of it in the fair order, does
// not take them when the victim ends; the preemptor starts there. Returns the jobs.
struct HoldJobs {
  Job victim, earlier, preemptor;
};

class ControllerPreemptionHoldTest : public ControllerPreemptionTest {
 protected:
  // The victim runs 30 min; `earlier` (carol) then the preemptor (alice, priority 10) are
  // submitted; a pass preempts the victim for the preemptor.
  HoldJobs Preempt() {
    HoldJobs j;
    j.victim = Submit(alice_, 0, /*preemptible=*/true);
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    j.victim = Get(j.victim.id);
    EXPECT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);
    EXPECT_TRUE(Report(j.victim, protocol::EventKind::kStarted).ok());
    clock_.AdvanceMicros(int64_t{1800} * 1'000'000);
    j.earlier = Submit(carol_, 0, /*preemptible=*/false);
    clock_.AdvanceMicros(1'000'000);
    j.preemptor = Submit(alice_, 10, /*preemptible=*/false);
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    EXPECT_EQ(Get(j.victim.id).preempted_by, j.preemptor.id);
    // Another pass while the victim stops: the preemptor's reason says what it holds.
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    const std::string why = Get(j.preemptor.id).pending_reason;
    EXPECT_NE(why.find("the GPUs of the jobs it preempted are held for it"), std::string::npos)
        << why;
    EXPECT_EQ(why.find("preempting"), std::string::npos) << why;  // nothing more
    return j;
  }
  // The victim's task ends, `after_s` after it was told to stop.
  void VictimEnds(const HoldJobs& j, int64_t after_s) {
    clock_.AdvanceMicros(after_s * 1'000'000);
    ASSERT_TRUE(Report(Get(j.victim.id), protocol::EventKind::kExited).ok());
    ASSERT_EQ(Get(j.victim.id).state, JobState::kPending);
  }
  Caller carol_{"carol", 1002, 1002, false};
};

TEST_F(ControllerPreemptionHoldTest, AnEarlierJobInTheFairOrderDoesNotTakeThePreemptorsGpus) {
  const HoldJobs j = Preempt();
  VictimEnds(j, 10);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job started = Get(j.preemptor.id);
  EXPECT_EQ(started.state, JobState::kAssigned);
  ASSERT_EQ(started.placement.size(), 1u);
  EXPECT_EQ(started.placement[0].gpu_uuids, (std::vector<std::string>{"GPU-0", "GPU-1"}));
  EXPECT_EQ(Get(j.earlier.id).state, JobState::kPending);
  EXPECT_EQ(Get(j.victim.id).state, JobState::kPending);
}

// The hold ends its victims' grace (30 s) and a margin (60 s) after the preemption, so a
// victim slower to end than that leaves its GPUs to the fair order (the preemptor may
// preempt again).
TEST_F(ControllerPreemptionHoldTest, AHoldExpiresAfterTheGraceAndAMargin) {
  const HoldJobs j = Preempt();
  VictimEnds(j, 30 + 60);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(j.earlier.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(j.preemptor.id).state, JobState::kPending);
}

TEST_F(ControllerPreemptionHoldTest, APreemptorCancelledReleasesItsHold) {
  const HoldJobs j = Preempt();
  ASSERT_TRUE(c_->Cancel(j.preemptor.id, alice_).ok());
  VictimEnds(j, 10);
  EXPECT_EQ(Get(j.victim.id).pending_reason, "");  // requeued: it waits for no one
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  // Its preemptor gone, the victim no longer waits, and it is the oldest job.
  EXPECT_EQ(Get(j.victim.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(j.earlier.id).state, JobState::kPending);
}

// The hold is stored with the preemption: a controller started anew on the store (a
// restart, a standby taking the lead) holds the victim's GPUs for the preemptor still,
// and `earlier`, first in the fair order, does not get them. The hold's row is deleted
// once the preemptor has started.
TEST_F(ControllerPreemptionHoldTest, AHoldOutlivesARestartOfTheController) {
  const HoldJobs j = Preempt();
  ASSERT_EQ(store_->ListPreemptHolds()->size(), 1u);
  EXPECT_EQ(store_->ListPreemptHolds()->at(0).grace_end_us,
            Get(j.victim.id).preempt_deadline_s * 1'000'000);
  c_.reset();
  ControllerOptions o;
  o.node_timeout_us = int64_t{3600} * 1'000'000 * 24;
  c_ = Controller::Create(store_.get(), &clock_, o).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const std::string why = Get(j.preemptor.id).pending_reason;
  EXPECT_NE(why.find(kHeldNote), std::string::npos) << why;
  EXPECT_EQ(why.find("preempting"), std::string::npos) << why;
  VictimEnds(j, 10);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(j.preemptor.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(j.earlier.id).state, JobState::kPending);
  EXPECT_EQ(Get(j.victim.id).state, JobState::kPending);  // it waits for its preemptor
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_TRUE(store_->ListPreemptHolds()->empty());
}

// A preemptor held by its user releases its hold too (it could wait for days).
TEST_F(ControllerPreemptionHoldTest, APreemptorHeldReleasesItsHold) {
  const HoldJobs j = Preempt();
  ASSERT_TRUE(c_->Hold(j.preemptor.id, alice_, true).ok());
  VictimEnds(j, 10);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(j.victim.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(j.preemptor.id).state, JobState::kPending);
}

// The red team: a requeued victim waited for its preemptor to start first for as long as
// the preemptor stayed PENDING, long after the hold on its GPUs had ended. Bob, below his
// share, preempted alice, then kept his preemptor from starting (here: his GPU limit; in
// a pool, his own jobs elsewhere filling it), and alice's job never ran again while the
// GPUs sat free. Her job waits for the preemptor only while the hold lasts.
TEST_F(ControllerPreemptionTest, AVictimWaitsForItsPreemptorOnlyWhileTheHoldLasts) {
  Job victim = Submit(alice_, 0, /*preemptible=*/true);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);
  ASSERT_TRUE(Report(Get(victim.id), protocol::EventKind::kStarted).ok());
  clock_.AdvanceMicros(int64_t{1800} * 1'000'000);
  Job small;  // bob's one GPU: below his share (1 of 2) while alice holds both
  small.command = {"train"};
  small.request.gpus = 1;
  small.request.cpu_milli = 100;
  small = c_->Submit(small, bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(victim.id).preempted_by, small.id);
  Limits limits;
  limits.users["bob"].max_gpus = 0;
  ASSERT_TRUE(c_->SetLimits(limits, root_).ok());
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(Report(Get(victim.id), protocol::EventKind::kExited).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(victim.id).state, JobState::kPending);  // the hold: 30 s grace + 60 s
  clock_.AdvanceMicros(int64_t{90} * 1'000'000);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(small.id).state, JobState::kPending) << Get(small.id).pending_reason;
  EXPECT_EQ(Get(victim.id).state, JobState::kAssigned)
      << Get(victim.id).pending_reason << " / " << Get(small.id).pending_reason;
}

// An array's element is named as its user names it (ARRAY_INDEX), not by its store id, in
// every reason that names another job: the victim's (preempted by it, waits for it), the
// preemptor's (preempting it) and the victim's JSON (preempted_by_name).
TEST_F(ControllerPreemptionTest, ArrayElementsAreNamedArrayIndexInPreemptionReasons) {
  Job victim;
  victim.command = {"train"};
  victim.request.gpus = 2;
  victim.request.cpu_milli = 100;
  victim.preemptible = true;
  victim.preempt_grace_s = 30;
  victim.array = "2";
  victim = c_->Submit(victim, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);
  ASSERT_TRUE(Report(Get(victim.id), protocol::EventKind::kStarted).ok());
  clock_.AdvanceMicros(int64_t{1800} * 1'000'000);
  Job urgent;
  urgent.command = {"train"};
  urgent.request.gpus = 2;
  urgent.request.cpu_milli = 100;
  urgent.priority = 10;
  urgent.array = "7";
  urgent = c_->Submit(urgent, alice_).value();
  const std::string urgent_name = std::to_string(urgent.id) + "_7";
  const std::string victim_name = std::to_string(victim.id) + "_2";
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job stopping = Get(victim.id);
  ASSERT_EQ(stopping.preempted_by, urgent.id);  // the store id, for the controller
  EXPECT_EQ(stopping.preempted_by_name, urgent_name);
  EXPECT_EQ(store_->GetJob(victim.id)->preempted_by_name, urgent_name);  // kept
  EXPECT_EQ(stopping.reason, "preempted by job " + urgent_name + ", of higher priority (10 > 0)");
  EXPECT_NE(Get(urgent.id).pending_reason.find("; preempting job " + victim_name + ", which"),
            std::string::npos)
      << Get(urgent.id).pending_reason;
  clock_.AdvanceMicros(5'000'000);
  ASSERT_TRUE(Report(stopping, protocol::EventKind::kExited).ok());
  EXPECT_EQ(Get(victim.id).reason, "requeued: preempted by job " + urgent_name +
                                       ", of higher priority (10 > 0) (attempt 1)");
  EXPECT_TRUE(Get(victim.id).preempted_by_name.empty());
  // From the moment it is requeued, the victim waits for its preemptor, by its name (it had
  // no reason until the next pass).
  EXPECT_EQ(Get(victim.id).pending_reason,
            "waits for job " + urgent_name + ", which preempted it, to start first");
  // The pass that starts the preemptor does not leave the victim waiting for it (the docs
  // audit: the reason stayed until the next pass, a whole period): it has none until the
  // pass that follows at once, which gives it its own.
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(urgent.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(victim.id).pending_reason, "");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_NE(Get(victim.id).pending_reason.find("needs 2 idle GPUs"), std::string::npos)
      << Get(victim.id).pending_reason;
}

// The hostile tester: bob, below his share, preempted alice's job and cancelled (or held)
// his preemptor during her grace, again and again: she was stopped and requeued each time
// and lost her work since her last checkpoint, and the GPUs went to whoever came next.
// Now a preemptor withdrawn by its user after it preempted another user's job bars that
// user from preempting others for --preempt-withdraw-cooldown (1h by default;
// docs/preemption.md, "A preemptor withdrawn").
class ControllerPreemptionWithdrawnTest : public ControllerPreemptionTest {
 protected:
  // alice's preemptible 2-GPU job, started and run 30 min (past its 10 min minimum).
  Job RunVictim() {
    Job v = Submit(alice_, 0, /*preemptible=*/true);
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    EXPECT_EQ(Get(v.id).state, JobState::kAssigned);
    EXPECT_TRUE(Report(Get(v.id), protocol::EventKind::kStarted).ok());
    clock_.AdvanceMicros(int64_t{1800} * 1'000'000);
    return Get(v.id);
  }
  // A 1-GPU job of `who`: below their share (1 of 2 GPUs) while alice holds both.
  Job Small(const Caller& who) {
    Job j;
    j.command = {"train"};
    j.request.gpus = 1;
    j.request.cpu_milli = 100;
    return c_->Submit(j, who).value();
  }
  // `who`'s small job after a pass: whether it preempted `victim`.
  bool Preempts(const Caller& who, const Job& victim, Job* small) {
    *small = Small(who);
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    return Get(victim.id).preempted_by == small->id;
  }
  // The victim, told to stop, ends 10 s later, is requeued, starts again (nothing else
  // waits) and runs 15 min, past its minimum run time again.
  void VictimRunsAgain(const Job& victim) {
    clock_.AdvanceMicros(10'000'000);
    ASSERT_TRUE(Report(Get(victim.id), protocol::EventKind::kExited).ok());
    ASSERT_EQ(Get(victim.id).state, JobState::kPending);
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    ASSERT_EQ(Get(victim.id).state, JobState::kAssigned) << Get(victim.id).pending_reason;
    ASSERT_TRUE(Report(Get(victim.id), protocol::EventKind::kStarted).ok());
    clock_.AdvanceMicros(int64_t{900} * 1'000'000);
  }
  void Restart() {
    c_.reset();
    ControllerOptions o;
    o.node_timeout_us = int64_t{3600} * 1'000'000 * 24;
    c_ = Controller::Create(store_.get(), &clock_, o).value();
  }
  Caller carol_{"carol", 1002, 1002, false};
};

TEST_F(ControllerPreemptionWithdrawnTest, ACancelledPreemptorBarsItsUserButNoOtherUser) {
  const Job victim = RunVictim();
  Job first;
  ASSERT_TRUE(Preempts(bob_, victim, &first));
  ASSERT_TRUE(c_->Cancel(first.id, bob_).ok());  // in alice's grace
  ASSERT_TRUE(c_->ScheduleOnce().ok());          // the hold ends: bob is barred
  VictimRunsAgain(victim);
  // 15 min later, alice's job has run its minimum again: bob's next job does not stop it,
  // and says why.
  Job second;
  EXPECT_FALSE(Preempts(bob_, victim, &second));
  const std::string why = Get(second.id).pending_reason;
  EXPECT_NE(why.find("; user bob preempts no other user's job until "), std::string::npos) << why;
  EXPECT_NE(why.find("bob withdrew job " + std::to_string(first.id) + " before it started"),
            std::string::npos)
      << why;
  PoolSnapshot none;
  const std::string metrics = c_->metrics().Render(none);
  EXPECT_NE(metrics.find("gpupool_preemptors_withdrawn_total 1\n"), std::string::npos) << metrics;
  // Carol, below her share too, is not barred: her job preempts alice's.
  ASSERT_TRUE(c_->Cancel(second.id, bob_).ok());  // it preempted nothing: no new bar
  Job carols;
  EXPECT_TRUE(Preempts(carol_, victim, &carols)) << Get(carols.id).pending_reason;
}

// The bar is stored: a controller started anew on the store (a restart, a standby taking
// the lead) keeps it; it ends after the cooldown, and bob preempts again. A preemptor held
// by its user is withdrawn as a cancelled one is.
TEST_F(ControllerPreemptionWithdrawnTest, AHeldPreemptorBarsItsUserForTheCooldownAcrossARestart) {
  const Job victim = RunVictim();
  Job first;
  ASSERT_TRUE(Preempts(bob_, victim, &first));
  ASSERT_TRUE(c_->Hold(first.id, bob_, true).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  VictimRunsAgain(victim);
  Restart();
  Job second;
  EXPECT_FALSE(Preempts(bob_, victim, &second));
  EXPECT_NE(Get(second.id).pending_reason.find("user bob preempts no other user's job until"),
            std::string::npos)
      << Get(second.id).pending_reason;
  // The cooldown (1h) counted from the withdrawal: 10 s and 15 min have passed.
  clock_.AdvanceMicros(int64_t{3600 - 900} * 1'000'000);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(victim.id).preempted_by, second.id) << Get(second.id).pending_reason;
}

// Only the user's own withdrawal bars them: an admin's cancel of bob's preemptor is the
// admin's decision, and alice withdrawing a preemptor of her own jobs (a priority) costs no
// one else. Bob withdrawing his own then bars him.
TEST_F(ControllerPreemptionWithdrawnTest, OnlyAUsersOwnWithdrawalOfAPreemptorOfAnothersJobBars) {
  const Job victim = RunVictim();
  const Job urgent = Submit(alice_, 10, /*preemptible=*/false);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(victim.id).preempted_by, urgent.id);
  ASSERT_TRUE(c_->Cancel(urgent.id, alice_).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  VictimRunsAgain(victim);
  Job by_bob;
  ASSERT_TRUE(Preempts(bob_, victim, &by_bob));
  ASSERT_TRUE(c_->Cancel(by_bob.id, root_).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  VictimRunsAgain(victim);
  Job again;
  ASSERT_TRUE(Preempts(bob_, victim, &again)) << Get(again.id).pending_reason;
  ASSERT_TRUE(c_->Cancel(again.id, bob_).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  VictimRunsAgain(victim);
  Job barred;
  EXPECT_FALSE(Preempts(bob_, victim, &barred));
}

}  // namespace preemption_test
}  // namespace gpupool::controller
