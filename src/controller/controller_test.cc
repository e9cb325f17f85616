#include "controller/controller.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/clock.h"
#include "store/forwarding_store.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpupool::controller {
namespace {

using jobs::Job;
using jobs::JobState;

gpu::NodeInfo MakeNode(int gpus, const std::string& model = "NVIDIA A100-SXM4-80GB") {
  gpu::NodeInfo n;
  n.hostname = "n1";
  for (int i = 0; i < gpus; ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = i;
    g.name = model;
    g.uuid = "GPU-" + std::to_string(1000 + i);
    g.pci_bus_id = "0000:0" + std::to_string(i) + ":00.0";
    g.memory_total_bytes = uint64_t{80} << 30;
    g.compute_capability = gpu::ComputeCapability{8, 0};
    g.device_nodes = {"/dev/nvidia" + std::to_string(i)};
    n.gpus.push_back(g);
  }
  return n;
}

Job MakeJob(int gpus, int milli = 1000) {
  Job j;
  j.command = {"true"};
  j.request.gpus = gpus;
  j.request.gpu_milli = milli;
  j.request.cpu_milli = 100;
  return j;
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenSqliteStore(":memory:");
    Restart();
    alice_ = {"alice", 1000, 1000, false};
    bob_ = {"bob", 1001, 1001, false};
    root_ = {"root", 0, 0, true};
  }
  void Restart(ControllerOptions options = {}) {
    c_.reset();
    options.node_timeout_us = 10'000'000;
    auto c = Controller::Create(store_.get(), &clock_, options);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c_ = std::move(c).value();
  }
  static std::unique_ptr<store::Store> OpenSqliteStore(const std::string& path) {
    return store::OpenSqliteStore(path).value();
  }
  void Register(int gpus, std::vector<std::pair<int64_t, int>> running = {},
                const std::string& node = "n1") {
    protocol::Registration r;
    r.node = node;
    r.info = MakeNode(gpus);
    for (gpu::GpuInfo& g : r.info.gpus) g.enforcement = enforcement_;
    if (node != "n1") {
      for (gpu::GpuInfo& g : r.info.gpus) g.uuid += "-" + node;
    }
    r.address = address_.count(node) ? address_[node] : "";
    r.version = version_;
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    for (const auto& [id, attempt] : running) r.running.push_back({id, 0, attempt});
    ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  }
  Status Apply(std::vector<Event> events, const std::string& node = "n1") {
    return c_->ApplyEvents(node, EventBatch{node, std::move(events), {}});
  }
  Job Get(int64_t id) { return c_->Get(id, root_).value(); }
  Event Ev(const Job& j, protocol::EventKind kind, int exit_code = 0, int task = 0) {
    Event e;
    e.task_index = task;
    e.job_id = j.id;
    e.attempt = j.attempt;
    e.kind = kind;
    e.time_us = clock_.NowMicros();
    if (kind == protocol::EventKind::kExited) e.exit_code = exit_code;
    return e;
  }

  std::map<std::string, std::string> address_;
  std::string enforcement_;  // every GPU's, as Register states it (gpu::GpuInfo)
  protocol::Version version_ = protocol::kVersion;
  ManualClock clock_{1'700'000'000'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
  Caller alice_, bob_, root_;
};

// A store whose writes of assignments wait at a gate: what the controller does while the
// database is slow.
class GateStore final : public store::ForwardingStore {
 public:
  explicit GateStore(std::unique_ptr<store::Store> inner) : ForwardingStore(std::move(inner)) {}
  // Holds from now on the writes that move a job to `state`.
  void Close(JobState state = JobState::kAssigned) {
    std::lock_guard l(m_);
    open_ = false;
    gated_ = state;
    held_ = 0;  // writes that went through before do not count
  }
  void Open() {
    std::lock_guard l(m_);
    open_ = true;
    cv_.notify_all();
  }
  // Waits until `n` writes wait at the gate.
  void WaitUntilHeld(int n = 1) {
    std::unique_lock l(m_);
    cv_.wait(l, [&] { return held_ >= n; });
  }

  Status UpdateJobs(const std::vector<JobUpdate>& updates,
                    std::vector<store::JobConflict>* conflicts) override {
    std::unique_lock l(m_);
    const bool gated = std::any_of(updates.begin(), updates.end(),
                                   [this](const JobUpdate& u) { return u.job.state == gated_; });
    if (gated) {
      ++held_;
      cv_.notify_all();
      cv_.wait(l, [&] { return open_; });
    }
    l.unlock();
    return inner()->UpdateJobs(updates, conflicts);
  }
  // From now on another job is stored before each element of an array after its first,
  // as a submission made meanwhile on PostgreSQL (whose ids come from a sequence, outside
  // the transaction) can be: the elements' ids are not consecutive.
  void InterleaveArrayElements() { interleave_ = true; }
  Result<std::vector<Job>> InsertJobs(std::vector<Job> jobs, store::InsertAs as) override {
    if (on_insert) on_insert(jobs);
    if (!interleave_ || as != store::InsertAs::kArray || jobs.empty()) {
      return inner()->InsertJobs(std::move(jobs), as);
    }
    GP_ASSIGN_OR_RETURN(std::vector<Job> stored, inner()->InsertJobs({jobs[0]}, as));
    for (size_t k = 1; k < jobs.size(); ++k) {
      Job other = MakeJob(0);
      other.user = "carol";
      GP_RETURN_IF_ERROR(inner()->InsertJob(other).status());
      Job e = jobs[k];
      e.array_id = stored[0].id;
      e.submit_key.clear();
      GP_ASSIGN_OR_RETURN(std::vector<Job> one, inner()->InsertJobs({e}, store::InsertAs::kJobs));
      stored.push_back(one[0]);
    }
    return stored;
  }
  // Runs before each InsertJobs with its jobs, unlocked.
  std::function<void(const std::vector<Job>&)> on_insert;

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = true;
  JobState gated_ = JobState::kAssigned;
  int held_ = 0;
  bool interleave_ = false;
};

// The fixture's controller, restarted on a GateStore over a new in-memory store, with a
// 2-GPU node.
class GatedControllerTest : public ControllerTest {
 protected:
  GateStore* UseGateStore() {
    auto gate = std::make_unique<GateStore>(OpenSqliteStore(":memory:"));
    GateStore* g = gate.get();
    store_ = std::move(gate);
    Restart();
    Register(2);
    return g;
  }
};

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

// Returns a 1-GPU job of `who` RUNNING on n1.
Job StartOne(Controller* c, const Caller& who, ManualClock& clock) {
  Job j = c->Submit(MakeJob(1), who).value();
  EXPECT_TRUE(c->ScheduleOnce().ok());
  EXPECT_EQ(c->WaitForWork("n1", 0)->launch.size(), 1u);
  j = c->Get(j.id, who).value();
  Event e;
  e.job_id = j.id;
  e.attempt = j.attempt;
  e.kind = protocol::EventKind::kStarted;
  e.time_us = clock.NowMicros();
  EXPECT_TRUE(c->ApplyEvents("n1", EventBatch{"n1", {e}, {}}).ok());
  j = c->Get(j.id, who).value();
  EXPECT_EQ(j.state, JobState::kRunning);
  return j;
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

// Issue 27's TimeLimit event: a running job that its node lets run past --time by the
// grace (the node's shim would have stopped it) is stopped by the controller, and ends
// TIMEOUT when its task's end comes back. Within the grace, nothing happens.
TEST_F(ControllerTest, TheControllerStopsAJobItsNodeLetRunPastItsTimeLimit) {
  ControllerOptions o;
  o.time_limit_grace_s = 60;
  Restart(o);
  Register(2);
  Job j = MakeJob(1);
  j.time_limit_s = 30;
  j = c_->Submit(j, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);
  j = Get(j.id);
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}).ok());
  ASSERT_EQ(Get(j.id).state, JobState::kRunning);
  for (int s = 0; s < 85; s += 5) {  // to 85 s, within 30 + 60 s, the agent polling
    clock_.AdvanceMicros(5'000'000);
    ASSERT_TRUE(c_->WaitForWork("n1", 0).ok());
    ASSERT_TRUE(c_->SweepTimeLimits().ok());
    ASSERT_FALSE(Get(j.id).cancel_requested) << "after " << s + 5 << " s";
  }
  clock_.AdvanceMicros(6'000'000);  // 91 s
  ASSERT_TRUE(c_->SweepTimeLimits().ok());
  const Job stopping = Get(j.id);
  EXPECT_TRUE(stopping.cancel_requested);
  EXPECT_TRUE(stopping.time_limit_hit);
  EXPECT_TRUE(store_->GetJob(j.id)->time_limit_hit);
  const AgentWork w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].job_id, j.id);
  Event end = Ev(j, protocol::EventKind::kExited);
  end.exit_code.reset();
  end.signal = 15;
  end.cancelled = true;
  ASSERT_TRUE(Apply({end}).ok());
  const Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kTimeout);
  EXPECT_NE(done.reason.find("time limit of 30 s"), std::string::npos) << done.reason;
  EXPECT_EQ(store_->GetJob(j.id)->state, JobState::kTimeout);
}

// An agent's telemetry sample of one GPU with Xid `xid`, its `count`-th since the agent
// started.
protocol::GpuTelemetry XidSample(const std::string& uuid, int64_t xid, int64_t count) {
  protocol::GpuTelemetry s;
  s.index = 0;
  s.uuid = uuid;
  s.xid_errors = xid;
  s.xid_count = count;
  return s;
}

// Issue 29: a reset-class Xid (95) on the GPU a job holds ends the job FAILED with the
// reason, cordons that GPU (nothing new lands on it) and leaves the node's other GPU in
// service. The same count reported again changes nothing; another node's GPU is ignored.
TEST_F(ControllerTest, AResetClassXidFailsTheJobAndCordonsOnlyThatGpu) {
  Register(2);
  const Job a = StartOne(c_.get(), alice_, clock_);
  const std::string bad = a.placement[0].gpu_uuids.at(0);
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-elsewhere", 95, 1)}).ok());
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample(bad, 95, 1)}).ok());
  const Job failed = Get(a.id);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_NE(failed.reason.find("Xid 95"), std::string::npos) << failed.reason;
  EXPECT_EQ(store_->GetJob(a.id)->state, JobState::kFailed);
  const NodeView n = c_->Nodes().at(0);
  ASSERT_EQ(n.gpu_health.count(bad), 1u);
  EXPECT_EQ(n.gpu_health.at(bad).state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(n.state, "up");  // the node's other GPU keeps working
  PoolSnapshot pool = c_->MetricsSnapshot();
  EXPECT_EQ(pool.gpus_by_health["cordoned"], 1);
  EXPECT_EQ(pool.gpus_by_health["healthy"], 1);
  // Reported again (the next telemetry batch): nothing more.
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample(bad, 95, 1)}).ok());
  // Two one-GPU jobs: one lands on the healthy GPU, the other waits.
  const Job b = c_->Submit(MakeJob(1), bob_).value();
  const Job d = c_->Submit(MakeJob(1), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  int placed = 0;
  for (int64_t id : {b.id, d.id}) {
    const Job j = Get(id);
    if (j.state == JobState::kAssigned) {
      ++placed;
      EXPECT_NE(j.placement[0].gpu_uuids.at(0), bad);
    }
  }
  EXPECT_EQ(placed, 1);
  // Stored: a restarted controller (or the next leader) keeps the GPU out of service.
  Restart();
  EXPECT_EQ(c_->Nodes().at(0).gpu_health.at(bad).state, gpu::GpuHealthState::kCordoned);
  EXPECT_NE(c_->Nodes().at(0).gpu_health.at(bad).reason.find("Xid 95"), std::string::npos);
  Register(2);  // its agent registers again: still cordoned
  EXPECT_EQ(c_->Nodes().at(0).gpu_health.at(bad).state, gpu::GpuHealthState::kCordoned);
  const Job e = c_->Submit(MakeJob(2), bob_).value();  // needs both GPUs: never now
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(e.id).state, JobState::kPending);
  // An admin puts it back (by index or UUID); users may not.
  EXPECT_EQ(c_->ResumeGpu("n1", bad, alice_).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c_->ResumeGpu("n1", "7", root_).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c_->ResumeGpu("n1", "GPU-1001", root_).status().code(),
            StatusCode::kFailedPrecondition);  // in service already
  Result<NodeView> resumed = c_->ResumeGpu("n1", bad, root_);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_TRUE(resumed->gpu_health.empty());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  bool lands = false;  // the 1-GPU job still waiting gets it
  for (int64_t id : {b.id, d.id}) {
    const Job j = Get(id);
    lands = lands || (j.state == JobState::kAssigned && j.placement[0].gpu_uuids.at(0) == bad);
  }
  EXPECT_TRUE(lands);
  Restart();  // stored healthy
  EXPECT_TRUE(c_->Nodes().at(0).gpu_health.empty());
}

// Issue 29 item 4: the health program's verdicts. A GPU it names is cordoned by it (jobs
// there go on; nothing new lands); a node it calls bad is drained; a pass returns exactly
// what it took out, and not a GPU the Xid policy cordoned.
TEST_F(ControllerTest, TheHealthProgramCordonsAndReturnsOnlyWhatItTookOut) {
  Register(2);
  protocol::HealthReport bad;
  bad.gpus = {{1, "fan at 0 rpm"}, {7, "no such GPU"}};
  bad.output = "gpu=1 bad fan at 0 rpm\n";
  ASSERT_TRUE(c_->ObserveHealthReport("n1", bad).ok());
  NodeView n = c_->Nodes().at(0);
  ASSERT_EQ(n.gpu_health.count("GPU-1001"), 1u);
  EXPECT_EQ(n.gpu_health.at("GPU-1001").state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(n.gpu_health.at("GPU-1001").reason, "health check: fan at 0 rpm");
  EXPECT_EQ(n.gpu_health.at("GPU-1001").by, "health-check");
  EXPECT_NE(n.gpu_health.at("GPU-1001").evidence.find("gpu=1 bad"), std::string::npos);
  const Job two = c_->Submit(MakeJob(2), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(two.id).state, JobState::kPending);
  // GPU 0 meets a reset-class Xid meanwhile: the policy's cordon is not the program's.
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 95, 1)}).ok());
  protocol::HealthReport pass;
  pass.passed = true;
  ASSERT_TRUE(c_->ObserveHealthReport("n1", pass).ok());
  n = c_->Nodes().at(0);
  EXPECT_TRUE(n.gpu_health.count("GPU-1001") == 0 ||
              gpu::TakesWork(n.gpu_health.at("GPU-1001").state));
  EXPECT_EQ(n.gpu_health.at("GPU-1000").state, gpu::GpuHealthState::kCordoned);
  // The node: drained with the program's words, undrained by a pass; an admin's drain is
  // not the program's to lift.
  protocol::HealthReport node_bad;
  node_bad.node_reason = "the health check exited 2: PSU degraded";
  ASSERT_TRUE(c_->ObserveHealthReport("n1", node_bad).ok());
  EXPECT_EQ(c_->Nodes().at(0).drain_reason,
            "health check: the health check exited 2: PSU degraded");
  ASSERT_TRUE(c_->ObserveHealthReport("n1", pass).ok());
  EXPECT_EQ(c_->Nodes().at(0).state, "up");
  ASSERT_TRUE(c_->DrainNode("n1", "maintenance", root_).ok());
  ASSERT_TRUE(c_->ObserveHealthReport("n1", pass).ok());
  EXPECT_EQ(c_->Nodes().at(0).drain_reason, "maintenance (root)");
  EXPECT_EQ(c_->ObserveHealthReport("nope", pass).code(), StatusCode::kNotFound);
  Restart();  // stored
  EXPECT_EQ(c_->Nodes().at(0).gpu_health.at("GPU-1000").state, gpu::GpuHealthState::kCordoned);
}

// Issue 29 item 6: the circuit breaker. With 10 nodes (10%: one node an hour), the first
// node's cordon goes through; the second's, within the hour, is recorded (suspect, the
// reason, the metric) but not acted on: its job goes on. An hour later cordons act again.
TEST_F(ControllerTest, TheHealthBreakerHoldsBackCordonsPastItsShareOfThePool) {
  Register(1);
  for (int k = 2; k <= 10; ++k) Register(1, {}, "n" + std::to_string(k));
  Job j = MakeJob(1);
  j = c_->Submit(j, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  const std::string node = j.placement[0].node;
  const std::string uuid = j.placement[0].gpu_uuids.at(0);
  const std::string first = node == "n1" ? "n2" : "n1";
  const std::string first_uuid = first == "n1" ? "GPU-1000" : "GPU-1000-" + first;
  ASSERT_TRUE(c_->ObserveGpuErrors(first, {XidSample(first_uuid, 95, 1)}).ok());
  auto health_of = [&](const std::string& n, const std::string& u) {
    for (const NodeView& v : c_->Nodes()) {
      if (v.name == n && v.gpu_health.count(u) != 0) return v.gpu_health.at(u);
    }
    return gpu::GpuHealth{};
  };
  EXPECT_EQ(health_of(first, first_uuid).state, gpu::GpuHealthState::kCordoned);
  // The job's node, within the hour: held back.
  ASSERT_TRUE(c_->ObserveGpuErrors(node, {XidSample(uuid, 95, 1)}).ok());
  const gpu::GpuHealth held = health_of(node, uuid);
  EXPECT_EQ(held.state, gpu::GpuHealthState::kSuspect);
  EXPECT_NE(held.reason.find("circuit breaker"), std::string::npos) << held.reason;
  EXPECT_EQ(Get(j.id).state, JobState::kAssigned);  // not ended
  EXPECT_EQ(c_->MetricsSnapshot().health_actions_held, 1);
  // An hour later the breaker lets the next one through.
  clock_.AdvanceMicros(int64_t{3601} * 1'000'000);
  ASSERT_TRUE(c_->ObserveGpuErrors(node, {XidSample(uuid, 95, 2)}).ok());
  EXPECT_EQ(health_of(node, uuid).state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(Get(j.id).state, JobState::kFailed);
  // A fraction outside (0, 1] is refused, naming the flag.
  ControllerOptions o;
  o.health_breaker_fraction = 0;
  Result<std::unique_ptr<Controller>> bad = Controller::Create(store_.get(), &clock_, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--health-breaker"), std::string::npos);
}

// A reboot-class Xid (79) drains the whole node with the reason; application Xids (13)
// leave the GPU in service until the third within an hour.
TEST_F(ControllerTest, AFallenOffTheBusXidDrainsTheNodeAndApplicationXidsCordonOnRepeats) {
  Register(2);
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 13, 1)}).ok());
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 13, 2)}).ok());
  EXPECT_TRUE(c_->Nodes().at(0).gpu_health.empty());  // still healthy
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 13, 3)}).ok());
  EXPECT_EQ(c_->Nodes().at(0).gpu_health.at("GPU-1000").state, gpu::GpuHealthState::kCordoned);
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1001", 79, 1)}).ok());
  const NodeView n = c_->Nodes().at(0);
  EXPECT_EQ(n.state, "drained");
  EXPECT_NE(n.drain_reason.find("Xid 79"), std::string::npos) << n.drain_reason;
  const Job j = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(j.id).state, JobState::kPending);
  // The drain is stored: it outlives a restart of the controller.
  Restart();
  EXPECT_NE(c_->Nodes().at(0).drain_reason.find("Xid 79"), std::string::npos);
  // A bad override names the flag.
  ControllerOptions o;
  o.health_xid = "79:reboot";
  Result<std::unique_ptr<Controller>> bad = Controller::Create(store_.get(), &clock_, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--health-xid"), std::string::npos);
}

TEST_F(ControllerTest, JobRunsThroughItsStates) {
  Register(2);
  Job j = c_->Submit(MakeJob(1), alice_).value();
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.user, "alice");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  ASSERT_EQ(j.state, JobState::kAssigned);
  ASSERT_EQ(j.placement.size(), 1u);
  EXPECT_EQ(j.placement[0].node, "n1");
  EXPECT_EQ(j.attempt, 1);

  AgentWork work = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(work.launch.size(), 1u);
  const LaunchOrder& o = work.launch[0];
  ASSERT_EQ(o.gpus.size(), 1u);
  EXPECT_EQ(o.gpus[0].uuid, j.placement[0].gpu_uuids[0]);
  ASSERT_EQ(o.denied_device_nodes.size(), 1u);  // the other GPU's node
  EXPECT_NE(o.denied_device_nodes[0], o.gpus[0].device_nodes[0]);
  // Not sent again right away.
  EXPECT_TRUE(c_->WaitForWork("n1", 0)->launch.empty());

  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}).ok());
  EXPECT_EQ(Get(j.id).state, JobState::kRunning);
  clock_.AdvanceMicros(5'000'000);
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kExited, 0)}).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kSucceeded);
  EXPECT_EQ(done.exit_code, 0);
  // A resent event changes nothing.
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kExited, 3)}).ok());
  EXPECT_EQ(Get(j.id).state, JobState::kSucceeded);
}

TEST_F(ControllerTest, NonZeroExitFailsAndStoreHasEveryTransition) {
  Register(1);
  Job j = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kExited, 2)}).ok());
  Job stored = store_->GetJob(j.id).value();
  EXPECT_EQ(stored.state, JobState::kFailed);
  EXPECT_EQ(stored.exit_code, 2);
}

TEST_F(ControllerTest, SharedGpuHoldsTwoHalfJobs) {
  Register(1);
  Job a = c_->Submit(MakeJob(1, 500), alice_).value();
  Job b = c_->Submit(MakeJob(1, 500), bob_).value();
  Job c = c_->Submit(MakeJob(1, 500), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  b = Get(b.id);
  c = Get(c.id);
  ASSERT_EQ(a.state, JobState::kAssigned);
  ASSERT_EQ(b.state, JobState::kAssigned);
  EXPECT_EQ(a.placement[0].gpu_uuids, b.placement[0].gpu_uuids);
  EXPECT_EQ(a.placement[0].gpu_milli, 500);
  EXPECT_EQ(c.state, JobState::kPending);
  EXPECT_EQ(c.pending_reason,
            "needs 0.5 of one GPU; the most free on any GPU: 0; 0/1 nodes are available: 1 "
            "insufficient GPU share");
  auto nodes = c_->Nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].allocated_milli[0], 1000);
}

// Issue 28: MPS serves one Unix user per GPU at a time, so a GPU whose node states MPS
// takes one user's shares at a time: bob's share waits, saying why, until alice's ends.
TEST_F(ControllerTest, MpsGpuTakesOneUsersSharesAtATime) {
  enforcement_ = "mps";
  Register(1);
  Job a = c_->Submit(MakeJob(1, 300), alice_).value();
  Job b = c_->Submit(MakeJob(1, 300), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  ASSERT_EQ(a.state, JobState::kAssigned);
  EXPECT_EQ(Get(b.id).state, JobState::kPending);
  EXPECT_EQ(Get(b.id).pending_reason,
            "needs 0.3 of one GPU; the MPS GPUs that fit are held by another user's shares; MPS "
            "serves one user per GPU (gpupool server --mps-multi-user allows several); 0/1 nodes "
            "are available: 1 single-owner GPUs held by another owner");
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kPending);  // alice's share still runs
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kExited, 0)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  b = Get(b.id);
  ASSERT_EQ(b.state, JobState::kAssigned);
  EXPECT_EQ(b.placement[0].gpu_uuids, a.placement[0].gpu_uuids);
  // Now bob holds it: alice's next share waits for him.
  Job a2 = c_->Submit(MakeJob(1, 300), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a2.id).state, JobState::kPending);
  EXPECT_NE(Get(a2.id).pending_reason.find("held by another user's shares"), std::string::npos);
}

// Where the admin lets MPS serve several users (--mps-multi-user), two users' shares
// share an MPS GPU at once.
TEST_F(ControllerTest, MpsMultiUserLetsSeveralUsersShareAnMpsGpu) {
  ControllerOptions options;
  options.mps_multi_user = true;
  Restart(options);
  enforcement_ = "mps";
  Register(1);
  Job a = c_->Submit(MakeJob(1, 300), alice_).value();
  Job b = c_->Submit(MakeJob(1, 300), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(a.id).state, JobState::kAssigned);
  ASSERT_EQ(Get(b.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(a.id).placement[0].gpu_uuids, Get(b.id).placement[0].gpu_uuids);
}

// A GPU that is not an MPS GPU ("none": shares scheduled, not enforced) takes any user's.
TEST_F(ControllerTest, AGpuWithoutMpsTakesSeveralUsersShares) {
  enforcement_ = "none";
  Register(1);
  Job a = c_->Submit(MakeJob(1, 300), alice_).value();
  Job b = c_->Submit(MakeJob(1, 300), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(b.id).state, JobState::kAssigned);
}

TEST_F(ControllerTest, PendingReasonNamesTheLargestIdleBlock) {
  Register(2);
  Job busy = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job want = MakeJob(2);
  want.request.gpu_models = {"a100"};
  want = c_->Submit(want, bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(busy.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(want.id).pending_reason,
            "needs 2 idle GPUs of model A100; largest idle block on any node: 1; 0/1 nodes are "
            "available: 1 insufficient GPUs");
}

TEST_F(ControllerTest, ImpossibleJobsAreRefusedAtSubmit) {
  Register(2);
  Job tooBig = MakeJob(4);
  Result<Job> r = c_->Submit(tooBig, alice_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  Job wrongModel = MakeJob(1);
  wrongModel.request.gpu_models = {"H100"};
  r = c_->Submit(wrongModel, alice_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no node has GPUs of model H100 (models here: A100)"),
            std::string::npos)
      << r.status().message();
  Job noCommand = MakeJob(1);
  noCommand.command.clear();
  EXPECT_EQ(c_->Submit(noCommand, alice_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->ListJobs({})->empty());
}

// Issue 15 A.2: a refusal named none of the constraints ("no node could ever host task 1
// (9 GPUs x 1000 thousandths ...)"); now it names the one that fails.
TEST_F(ControllerTest, ConstraintRefusalsNameTheConstraint) {
  Register(2);
  auto refusal = [&](Job j) {
    Result<Job> r = c_->Submit(j, alice_);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  Job cap = MakeJob(1);
  cap.request.min_capability = "9.5";
  EXPECT_NE(refusal(cap).find("compute capability 9.5 or newer (--min-capability): the newest of "
                              "the nodes that could otherwise host it is 8.0"),
            std::string::npos)
      << refusal(cap);
  Job amd = MakeJob(1);
  amd.request.vendor = "amd";
  EXPECT_NE(refusal(amd).find("no node has GPUs of vendor amd (models here: A100)"),
            std::string::npos);
  Job cpus = MakeJob(1);
  cpus.request.cpu_milli = 100'000;
  EXPECT_NE(refusal(cpus).find("it asks for 100 CPUs (--cpus); the most any node with the GPUs "
                               "has is 64 CPUs"),
            std::string::npos)
      << refusal(cpus);
  Job mem = MakeJob(0);
  mem.request.memory_bytes = uint64_t{300'000} << 20;
  EXPECT_NE(refusal(mem).find("300000 MiB of memory (--mem); the most any node has is 256000 MiB"),
            std::string::npos)
      << refusal(mem);
  Job gpus = MakeJob(9);
  EXPECT_NE(refusal(gpus).find("it asks for 9 GPUs on one node; the most any node has is 2"),
            std::string::npos)
      << refusal(gpus);
}

// Issue 15 B.4: an admin drains a node; what runs there finishes, nothing new starts,
// and the drain outlives agent re-registration and a controller restart.
TEST_F(ControllerTest, DrainedNodeFinishesItsJobsAndStartsNothingNew) {
  Register(2);
  Job a = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  ASSERT_EQ(a.state, JobState::kAssigned);
  EXPECT_EQ(c_->DrainNode("n1", "disk swap", alice_).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(c_->DrainNode("n1", "", root_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c_->DrainNode("n1", "bad\nline", root_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c_->DrainNode("nosuch", "x", root_).status().code(), StatusCode::kNotFound);
  Result<NodeView> v = c_->DrainNode("n1", "disk swap", root_);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->state, "draining");  // a job still runs there
  EXPECT_EQ(v->drain_reason, "disk swap (root)");

  Job b = c_->Submit(MakeJob(1), bob_).value();  // a GPU is idle, but not for new jobs
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kPending);
  EXPECT_EQ(Get(b.id).pending_reason,
            "needs 1 idle GPU; largest idle block on any node: 0; 0/1 nodes are available: 1 "
            "draining (n1)");
  EXPECT_EQ(Get(a.id).state, JobState::kAssigned);  // what ran goes on

  Register(2, {{a.id, a.attempt}});  // the agent restarts
  Restart();                         // and so does the controller
  EXPECT_EQ(c_->Nodes()[0].state, "draining");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kPending);

  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kExited, 0)}).ok());
  EXPECT_EQ(c_->Nodes()[0].state, "drained");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kPending);

  EXPECT_EQ(c_->ResumeNode("n1", bob_).status().code(), StatusCode::kPermissionDenied);
  v = c_->ResumeNode("n1", root_);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->state, "up");
  EXPECT_EQ(v->drain_reason, "");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kAssigned);
}

// Issue 31: a pass applies only the pending reasons that changed, yet after each pass a
// job shows the pass's reason, also when a transition set or cleared its reason since the
// last pass while the scheduler's stayed the same.
TEST_F(ControllerTest, AfterAPassEachPendingJobShowsThePasssReason) {
  Register(1);
  Job a = c_->Submit(MakeJob(1), alice_).value();
  Job b = c_->Submit(MakeJob(1), alice_).value();
  Job c = c_->Submit(MakeJob(1), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(a.id).state, JobState::kAssigned);
  const std::string waits = Get(b.id).pending_reason;
  ASSERT_EQ(waits.rfind("needs ", 0), 0u) << waits;
  EXPECT_EQ(Get(c.id).pending_reason, waits);
  // Held and released between two passes: the transitions set and cleared b's reason.
  ASSERT_TRUE(c_->Hold(b.id, alice_, true).ok());
  ASSERT_TRUE(c_->Hold(b.id, alice_, false).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).pending_reason, waits);
  EXPECT_EQ(Get(c.id).pending_reason, waits);
  // a ends: b starts (its reason goes), c still waits.
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(Get(a.id), protocol::EventKind::kExited, 0)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(b.id).pending_reason, "");
  EXPECT_EQ(Get(c.id).pending_reason, waits);
  // Held: the pass's reason is the hold's.
  ASSERT_TRUE(c_->Hold(c.id, bob_, true).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(c.id).pending_reason.rfind("held by bob", 0), 0u) << Get(c.id).pending_reason;
  EXPECT_EQ(c_->MetricsSnapshot().pending_by_reason["held"], 1);
}

// A held array element is named as its user knows it (ARRAY_INDEX), by the hold and by
// the scheduler's pass alike.
TEST_F(ControllerTest, AHeldArrayElementsReasonNamesItArrayIndex) {
  Register(2);
  Job j = MakeJob(1);
  j.array = "3-4";
  const Job arr = c_->Submit(j, alice_).value();
  const std::vector<int64_t> ids = c_->ArrayElements(arr.id);
  ASSERT_EQ(ids.size(), 2u);
  ASSERT_TRUE(c_->Hold(ids[1], root_, true).ok());
  const std::string reason = "held by root (admin): `gpupool release " + std::to_string(arr.id) +
                             "_4` by an admin lets it start";
  EXPECT_EQ(Get(ids[1]).pending_reason, reason);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(ids[1]).state, JobState::kPending);
  EXPECT_EQ(Get(ids[1]).pending_reason, reason);
  EXPECT_EQ(
      c_->Hold(ids[1], alice_, false).status().message(),
      "job " + std::to_string(arr.id) + "_4 was held by admin root; ask an admin to release it");
}

// Issue 15 B.3: hold and release, for owners on their own jobs and admins on any.
TEST_F(ControllerTest, HeldJobsWaitUntilReleasedAndAdminHoldsNeedAnAdmin) {
  Register(2);
  Job a = c_->Submit(MakeJob(1), alice_).value();
  EXPECT_EQ(c_->Hold(a.id, bob_, true).status().code(), StatusCode::kPermissionDenied);
  Result<Job> held = c_->Hold(a.id, alice_, true);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(held->held_by, "alice");
  const std::string reason =
      "held by alice: `gpupool release " + std::to_string(a.id) + "` lets it start";
  EXPECT_EQ(Get(a.id).pending_reason, reason);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kPending);  // two idle GPUs, but held
  EXPECT_EQ(Get(a.id).pending_reason, reason);
  EXPECT_TRUE(c_->Hold(a.id, alice_, true).ok());  // holding twice changes nothing
  Restart();                                       // the hold is stored
  EXPECT_EQ(Get(a.id).held_by, "alice");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kPending);
  ASSERT_TRUE(c_->Hold(a.id, alice_, false).ok());
  EXPECT_EQ(Get(a.id).held_by, "");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  EXPECT_EQ(a.state, JobState::kAssigned);
  Result<Job> running = c_->Hold(a.id, alice_, true);  // only pending jobs
  EXPECT_EQ(running.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(running.status().message().find("only pending jobs are held"), std::string::npos);

  // An admin's hold on alice's job: alice cannot release it, an admin can.
  Job b = c_->Submit(MakeJob(2), alice_).value();
  ASSERT_TRUE(c_->Hold(b.id, root_, true).ok());
  EXPECT_TRUE(Get(b.id).held_by_admin);
  Result<Job> refused = c_->Hold(b.id, alice_, false);
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("held by admin root"), std::string::npos);
  EXPECT_TRUE(c_->Hold(b.id, root_, false).ok());
  EXPECT_EQ(c_->Hold(424242, alice_, true).status().code(), StatusCode::kNotFound);
}

// Issue 15 B.2: dependencies wait with a reason naming the job, start when met, and end
// the job (and the jobs after it) when they can never be met.
TEST_F(ControllerTest, DependenciesWaitStartOrEndTheJobWithAReason) {
  Register(2);
  using K = jobs::Dependency::Kind;
  auto after = [&](std::vector<jobs::Dependency> deps, int gpus = 1) {
    Job j = MakeJob(gpus);
    j.dependencies = std::move(deps);
    return c_->Submit(j, alice_).value();
  };
  Job a = c_->Submit(MakeJob(1), alice_).value();
  Job ok = after({{a.id, K::kAfterOk}}, 0);
  Job chain = after({{ok.id, K::kAfterOk}}, 0);
  Job not_ok = after({{a.id, K::kAfterNotOk}}, 0);
  Job any = after({{a.id, K::kAfterAny}, {not_ok.id, K::kAfterAny}}, 0);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());  // reasons are as the pass began: see them settled
  a = Get(a.id);
  ASSERT_EQ(a.state, JobState::kAssigned);
  EXPECT_EQ(Get(ok.id).pending_reason,
            "waits for job " + std::to_string(a.id) + " (ASSIGNED) to succeed (--after-ok)");
  EXPECT_EQ(Get(chain.id).pending_reason,
            "waits for job " + std::to_string(ok.id) + " (PENDING) to succeed (--after-ok)");
  EXPECT_EQ(Get(not_ok.id).pending_reason,
            "waits for job " + std::to_string(a.id) + " (ASSIGNED) to fail (--after-not-ok)");
  EXPECT_EQ(Get(any.id).state, JobState::kPending);

  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kExited, 3)}).ok());
  Restart();  // what was decided is in the store
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job ended = Get(ok.id);
  EXPECT_EQ(ended.state, JobState::kCancelled);
  EXPECT_EQ(ended.reason, "dependency can never be met: job " + std::to_string(a.id) +
                              " ended FAILED, and --after-ok needs it to succeed");
  ended = Get(chain.id);  // in the same pass
  EXPECT_EQ(ended.state, JobState::kCancelled);
  EXPECT_EQ(ended.reason, "dependency can never be met: job " + std::to_string(ok.id) +
                              " ended CANCELLED, and --after-ok needs it to succeed");
  EXPECT_EQ(Get(not_ok.id).state, JobState::kAssigned);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(any.id).state, JobState::kPending);  // not_ok has not ended yet
  EXPECT_EQ(Get(any.id).pending_reason,
            "waits for job " + std::to_string(not_ok.id) + " (ASSIGNED) to end (--after-any)");
}

// A dependency on one element of an array (`--after-ok 582_2`, resolved by the client to
// the element's own id) is named in the reason as its user named it, not by that id; one
// on the array (its id, its first element's) still names the array.
TEST_F(ControllerTest, ADependencyOnAnArrayElementIsNamedArrayIndex) {
  Register(2);
  Job j = MakeJob(1);
  j.array = "3-4";
  const Job arr = c_->Submit(j, alice_).value();
  const std::vector<int64_t> ids = c_->ArrayElements(arr.id);
  ASSERT_EQ(ids.size(), 2u);
  ASSERT_NE(ids[1], arr.id);
  Job on_element = MakeJob(0);
  on_element.dependencies = {{ids[1], jobs::Dependency::Kind::kAfterOk}};
  on_element = c_->Submit(on_element, alice_).value();
  Job on_array = MakeJob(0);
  on_array.dependencies = {{arr.id, jobs::Dependency::Kind::kAfterAny}};
  on_array = c_->Submit(on_array, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());  // reasons are as the pass began: see them settled
  ASSERT_EQ(Get(ids[1]).state, JobState::kAssigned);
  EXPECT_EQ(Get(on_element.id).pending_reason,
            "waits for job " + std::to_string(arr.id) + "_4 (ASSIGNED) to succeed (--after-ok)");
  EXPECT_EQ(Get(on_array.id).pending_reason,
            "waits for job " + std::to_string(arr.id) + " (ASSIGNED) to end (--after-any)");
}

// An ended element is named so too: once it has left the controller's memory, by what the
// store says of it (it was named by its store id).
TEST_F(ControllerTest, ADependencyOnAnEndedArrayElementIsNamedArrayIndex) {
  Register(2);
  Job j = MakeJob(1);
  j.array = "3-4";
  const Job arr = c_->Submit(j, alice_).value();
  const std::vector<int64_t> ids = c_->ArrayElements(arr.id);
  ASSERT_EQ(ids.size(), 2u);
  Job on_element = MakeJob(0);
  on_element.dependencies = {{ids[1], jobs::Dependency::Kind::kAfterOk}};
  on_element = c_->Submit(on_element, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job element = Get(ids[1]);
  ASSERT_EQ(element.state, JobState::kAssigned);
  ASSERT_TRUE(Apply({Ev(element, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(element, protocol::EventKind::kExited, 3)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job ended = Get(on_element.id);
  EXPECT_EQ(ended.state, JobState::kCancelled);
  EXPECT_EQ(ended.reason, "dependency can never be met: job " + std::to_string(arr.id) +
                              "_4 ended FAILED, and --after-ok needs it to succeed");
}

TEST_F(ControllerTest, DependenciesNameJobsThatExistAndAreTheCallers) {
  Register(2);
  Job bobs = c_->Submit(MakeJob(1), bob_).value();
  Job j = MakeJob(1);
  // A job can only depend on jobs submitted before it, so dependencies never form a
  // cycle: naming itself or a later job is naming a job that does not exist yet.
  j.dependencies = {{bobs.id + 1, jobs::Dependency::Kind::kAfterOk}};
  Result<Job> r = c_->Submit(j, alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "--after-ok " + std::to_string(bobs.id + 1) +
                                      ": there is no job " + std::to_string(bobs.id + 1));
  j.dependencies = {{bobs.id, jobs::Dependency::Kind::kAfterAny}};
  r = c_->Submit(j, alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find("another user's"), std::string::npos);
  EXPECT_TRUE(c_->Submit(j, root_).ok());  // admins may
}

// Issue 15 B.1: an array is one job per index, with its index in the environment, and
// at most %N of them run at once.
TEST_F(ControllerTest, ArrayElementsRunAtMostTheLimitAtOnce) {
  Register(2);
  Job j = MakeJob(0);
  j.array = "0-9:3%2";  // 0, 3, 6, 9; two at a time
  Result<Job> first = c_->Submit(j, alice_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->array_id, first->id);
  std::vector<int64_t> ids = c_->ArrayElements(first->id);
  ASSERT_EQ(ids.size(), 4u);
  std::vector<int> indices;
  for (int64_t id : ids) {
    Job e = Get(id);
    EXPECT_EQ(e.array_id, first->id);
    EXPECT_EQ(e.array_max_running, 2);
    indices.push_back(e.array_index);
  }
  EXPECT_EQ(indices, (std::vector<int>{0, 3, 6, 9}));
  EXPECT_EQ(c_->ArrayElements(first->id, 6).size(), 1u);

  ASSERT_TRUE(c_->ScheduleOnce().ok());
  // Each element finds its index and the array's in its environment, added at launch.
  Result<AgentWork> work = c_->WaitForWork("n1", 0);
  ASSERT_TRUE(work.ok());
  ASSERT_EQ(work->launch.size(), 2u);
  for (const LaunchOrder& o : work->launch) {
    const auto& env = o.job.env;
    EXPECT_EQ(env.at("GPUPOOL_ARRAY_TASK_ID"), std::to_string(o.job.array_index));
    EXPECT_EQ(env.at("GPUPOOL_ARRAY_JOB_ID"), std::to_string(first->id));
    EXPECT_EQ(env.at("GPUPOOL_ARRAY_TASK_COUNT"), "4");
    EXPECT_EQ(env.at("GPUPOOL_ARRAY_TASK_MIN"), "0");
    EXPECT_EQ(env.at("GPUPOOL_ARRAY_TASK_MAX"), "9");
  }
  auto states = [&] {
    std::vector<JobState> out;
    for (int64_t id : ids) out.push_back(Get(id).state);
    return out;
  };
  EXPECT_EQ(states(), (std::vector<JobState>{JobState::kAssigned, JobState::kAssigned,
                                             JobState::kPending, JobState::kPending}));
  EXPECT_EQ(
      Get(ids[2]).pending_reason,
      "array " + std::to_string(first->id) +
          " runs at most 2 elements at once (--array ...%2); its earlier elements come first");
  Job e0 = Get(ids[0]);
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kExited, 0)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(states(), (std::vector<JobState>{JobState::kSucceeded, JobState::kAssigned,
                                             JobState::kAssigned, JobState::kPending}));
}

// Runs `sql` on the SQLite database at `path`, beside the store's own connection.
void ExecSqlite(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << err;
  sqlite3_free(err);
  sqlite3_close(db);
}

// Issue 27: an array's elements were stored one by one, so a store failure part-way
// left the elements before it (the first holding the array's submit_key), and the
// client's retry was answered with that partial array. The array is one transaction now.
TEST_F(ControllerTest, AnArrayIsStoredWholeOrNotAtAll) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("gpupool-array-txn-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "state.db").string();
  store_ = OpenSqliteStore(path);
  ControllerOptions o;
  o.max_queued_total = 5;
  Restart(o);
  Register(2);
  // The database refuses the fourth job (as a full disk would).
  ExecSqlite(path,
             "CREATE TRIGGER fail_fourth BEFORE INSERT ON jobs WHEN (SELECT COUNT(*) FROM "
             "jobs) >= 3 BEGIN SELECT RAISE(ABORT, 'injected failure'); END");
  Job five = MakeJob(1);
  five.array = "0-4";
  five.submit_key = "retry-7f3c";
  Result<Job> failed = c_->Submit(five, alice_);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("injected failure"), std::string::npos)
      << failed.status().ToString();
  EXPECT_TRUE(store_->ListJobs({}).value().empty());
  EXPECT_FALSE(store_->FindSubmitKey(alice_.uid, "retry-7f3c").value().has_value());
  EXPECT_TRUE(c_->List({}, root_).value().empty());

  // The client's retry makes the whole array, and the reservation of the failed one was
  // given back (the pool's bound is the array's size).
  ExecSqlite(path, "DROP TRIGGER fail_fourth");
  bool duplicate = false;
  Result<Job> again = c_->Submit(five, alice_, &duplicate);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(duplicate);
  const std::vector<int64_t> ids = c_->ArrayElements(again->id);
  ASSERT_EQ(ids.size(), 5u);
  for (size_t k = 0; k < ids.size(); ++k) {
    const Job stored = store_->GetJob(ids[k]).value();
    EXPECT_EQ(stored.array_id, again->id) << k;
    EXPECT_EQ(stored.array_index, static_cast<int>(k));
    EXPECT_EQ(stored.version, 1);
    EXPECT_EQ(Get(ids[k]).version, 1) << "memory and store agree";
    EXPECT_EQ(stored.submit_key, k == 0 ? "retry-7f3c" : "") << k;
  }
  EXPECT_EQ(store_->FindSubmitKey(alice_.uid, "retry-7f3c").value(),
            std::optional<int64_t>(again->id));
  EXPECT_EQ(c_->Submit(MakeJob(1), bob_).status().code(), StatusCode::kResourceExhausted);
  c_.reset();
  store_.reset();
  std::filesystem::remove_all(dir);
}

// Issue 25.6: an element is found by its ARRAY_INDEX in any state, also when other jobs
// were stored between the array's elements; cancelling the array after its first element
// ended cancels the others and says how many were queued and how many running.
TEST_F(GatedControllerTest, ArrayElementsAreFoundByIndexAndCancelledTogether) {
  GateStore* g = UseGateStore();
  g->InterleaveArrayElements();
  Job j = MakeJob(1);
  j.array = "0-5:1%3";  // three at once on the two GPUs: 0 and 1 run, the rest wait
  const Job arr = c_->Submit(j, alice_).value();
  std::vector<int64_t> ids = c_->ArrayElements(arr.id);
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(ids[1], arr.id + 2);  // a job of carol's came between
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job e0 = Get(ids[0]);
  ASSERT_EQ(e0.state, JobState::kAssigned);
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kExited, 0)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());  // element 2 takes element 0's GPU
  for (size_t k = 1; k < 3; ++k) {
    ASSERT_TRUE(Apply({Ev(Get(ids[k]), protocol::EventKind::kStarted)}).ok());
    ASSERT_EQ(Get(ids[k]).state, JobState::kRunning) << k;
  }

  for (int index = 0; index < 6; ++index) {
    Result<int64_t> id = c_->ArrayElementId(arr.id, index, alice_);
    ASSERT_TRUE(id.ok()) << index << ": " << id.status().ToString();
    EXPECT_EQ(*id, ids[static_cast<size_t>(index)]) << index;
  }
  EXPECT_EQ(c_->ArrayElementId(arr.id, 0, root_).value(), arr.id);  // admins too
  EXPECT_EQ(c_->ArrayElementId(arr.id, 0, bob_).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c_->ArrayElementId(arr.id, 3, bob_).status().code(), StatusCode::kPermissionDenied);
  Result<int64_t> none = c_->ArrayElementId(arr.id, 6, alice_);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(), "array " + std::to_string(arr.id) +
                                         " has no element 6 (it was submitted with --array "
                                         "0-5:1%3)");
  EXPECT_EQ(c_->ArrayElementId(arr.id + 1, 0, root_).status().message(),
            "job " + std::to_string(arr.id + 1) +
                " is not an array, so it has no element 0; name it " + std::to_string(arr.id + 1));

  Result<ArrayCancelled> cancelled = c_->CancelArray(arr.id, alice_);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->head.id, arr.id);
  EXPECT_EQ(cancelled->head.state, JobState::kSucceeded);
  EXPECT_EQ(cancelled->elements, 6);
  EXPECT_EQ(cancelled->queued, 3);   // 3, 4, 5
  EXPECT_EQ(cancelled->running, 2);  // 1, 2: being stopped
  for (size_t k = 3; k < 6; ++k) EXPECT_EQ(Get(ids[k]).state, JobState::kCancelled) << k;
  // Again while 1 and 2 are being stopped: no error (scancel), and not counted again.
  Result<ArrayCancelled> stopping = c_->CancelArray(arr.id, alice_);
  ASSERT_TRUE(stopping.ok()) << stopping.status().ToString();
  EXPECT_EQ(stopping->queued, 0);
  EXPECT_EQ(stopping->running, 0);
  EXPECT_EQ(stopping->stopping, 2);
  for (size_t k = 1; k < 3; ++k) {
    const Job e = Get(ids[k]);
    EXPECT_TRUE(e.cancel_requested) << k;
    ASSERT_TRUE(Apply({Ev(e, protocol::EventKind::kExited, 0)}).ok());
  }
  EXPECT_TRUE(c_->ArrayElements(arr.id).empty());
  Result<ArrayCancelled> again = c_->CancelArray(arr.id, alice_);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().message(),
            "array " + std::to_string(arr.id) +
                " has already ended: none of its 6 elements is queued or running");
  EXPECT_EQ(c_->CancelArray(arr.id, bob_).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(ControllerTest, ADependencyOnAnArrayWaitsForEveryElement) {
  Register(2);
  Job arr = MakeJob(1);
  arr.array = "0-1";
  arr = c_->Submit(arr, alice_).value();
  Job after = MakeJob(0);
  after.dependencies = {{arr.id, jobs::Dependency::Kind::kAfterOk}};
  after = c_->Submit(after, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  std::vector<int64_t> ids = c_->ArrayElements(arr.id);
  ASSERT_EQ(ids.size(), 2u);
  Job e0 = Get(ids[0]);
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kExited, 0)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(after.id).state, JobState::kPending);  // element 1 still runs
  Job e1 = Get(ids[1]);
  ASSERT_TRUE(Apply({Ev(e1, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(e1, protocol::EventKind::kExited, 1)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job ended = Get(after.id);
  EXPECT_EQ(ended.state, JobState::kCancelled);
  EXPECT_EQ(ended.reason, "dependency can never be met: job " + std::to_string(arr.id) +
                              " ended FAILED, and --after-ok needs it to succeed");
}

TEST_F(ControllerTest, ArraySpecsOverTheLimitsOrMalformedAreRefused) {
  Register(2);
  for (const char* bad : {"0-1001", "5-1", "x", "0-9%0", "0-9%", "1,,2", "0-9:0", "-3", "0-2000000",
                          "0-9%1002", "0-600,0-600"}) {
    Job j = MakeJob(0);
    j.array = bad;
    Result<Job> r = c_->Submit(j, alice_);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("array '"), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(store_->ListJobs({})->empty());
  Job ok = MakeJob(0);
  ok.array = "0-1000";  // 1001 elements: the most an array may have (Slurm's default too)
  ASSERT_TRUE(c_->Submit(ok, alice_).ok());
  EXPECT_EQ(store_->ListJobs({})->size(), 1001u);
}

// Issue 25 item 7: no bound applied by default, and one unprivileged user queued 107,000
// jobs in 25 s. The server's bounds (from its config file) refuse a submission that
// would pass one, whole, naming the bound and its key; admins' submissions too.
TEST_F(ControllerTest, QueueBoundsRefuseAFloodNamingTheBoundAndItsKey) {
  ControllerOptions o;
  o.max_queued_per_user = 5;
  o.max_queued_total = 8;
  o.max_array_size = 4;
  Restart(o);
  Register(2);
  Job arr = MakeJob(1);
  arr.array = "0-4";
  Result<Job> r = c_->Submit(arr, alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "array '0-4': more than 4 elements (the server's max-array-size; an admin raises it "
            "in the [server] section of its config file); use e.g. 0-99, 0-99%10 (at most 10 at "
            "once), 1,3,5-7 or 0-30:10 (every 10th)");
  arr.array = "0-3";
  const Job first = c_->Submit(arr, alice_).value();
  ASSERT_TRUE(c_->Submit(MakeJob(1), alice_).ok());  // alice: 5 queued
  r = c_->Submit(MakeJob(1), alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "user alice has 5 jobs queued; 1 more would pass the limit (max-queued-per-user 5): "
            "wait for some to start, or ask an admin to raise it: [server] max-queued-per-user "
            "in the server's config file, or max_queued for one user with `gpupool limits`");
  // The pool's bound counts every user's, an admin's too.
  Job three = MakeJob(1);
  three.array = "0-2";
  ASSERT_TRUE(c_->Submit(three, bob_).ok());  // 8 in all
  r = c_->Submit(MakeJob(1), root_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "the pool has 8 jobs queued; 1 more would pass the limit (max-queued-total 8): wait "
            "for some to start, or ask an admin to raise it: [server] max-queued-total in the "
            "server's config file");
  EXPECT_EQ(store_->ListJobs({})->size(), 8u);  // nothing of a refused submission stored

  // Held jobs still count; started and cancelled ones no longer do.
  ASSERT_TRUE(c_->Hold(first.id, alice_, true).ok());
  EXPECT_EQ(c_->Submit(MakeJob(1), root_).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c_->ScheduleOnce().ok());             // two of the others start on the node's 2 GPUs
  ASSERT_TRUE(c_->Submit(MakeJob(1), root_).ok());  // 7
  ASSERT_TRUE(c_->Cancel(first.id, alice_).ok());   // 6
  ASSERT_TRUE(c_->Submit(MakeJob(1), root_).ok());
  ASSERT_TRUE(c_->Submit(MakeJob(1), root_).ok());
  EXPECT_EQ(c_->Submit(MakeJob(1), root_).status().code(), StatusCode::kResourceExhausted);

  // A restarted controller counts the stored queue.
  Restart(o);
  EXPECT_EQ(c_->Submit(MakeJob(1), bob_).status().code(), StatusCode::kResourceExhausted);

  // `gpupool limits` max_queued for a user replaces the server's per-user bound, above
  // or below it (not the pool's).
  o.max_queued_total = 100;
  Restart(o);
  const Caller carol{"carol", 1002, 1002, false};
  Limits l;
  l.users["carol"].max_queued = 7;
  ASSERT_TRUE(c_->SetLimits(l, root_).ok());
  Job four = MakeJob(1);
  four.array = "0-3";
  ASSERT_TRUE(c_->Submit(four, carol).ok());
  ASSERT_TRUE(c_->Submit(three, carol).ok());  // 7, past max-queued-per-user 5
  r = c_->Submit(MakeJob(1), carol);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("carol has 7 jobs queued; 1 more would pass the limit "
                                      "(max_queued 7)"),
            std::string::npos)
      << r.status().message();
}

// While an array is being stored, its elements count once, as the submission's
// reservation, and once stored once, as queued jobs: a submission meanwhile sees the
// queue as it is (it was refused here while the array seemed twice its size).
TEST_F(GatedControllerTest, AnArrayBeingStoredCountsEachElementOnce) {
  GateStore* g = UseGateStore();
  ControllerOptions o;
  o.max_queued_total = 6;
  Restart(o);
  Register(2);
  Result<Job> during = Status::Internal("not submitted");
  g->on_insert = [&](const std::vector<Job>& jobs) {
    if (jobs.size() != 5 || jobs[0].user != "alice") return;
    // The five elements are reserved: 5 of 6.
    during = c_->Submit(MakeJob(1), bob_);
  };
  Job five = MakeJob(1);
  five.array = "0-4";
  ASSERT_TRUE(c_->Submit(five, alice_).ok());
  EXPECT_TRUE(during.ok()) << during.status().ToString();
  EXPECT_EQ(c_->Submit(MakeJob(1), bob_).status().code(), StatusCode::kResourceExhausted);
}

TEST_F(ControllerTest, ConcurrentSubmittersCannotPassThePoolsBoundTogether) {
  ControllerOptions o;
  o.max_queued_total = 30;
  Restart(o);
  Register(2);
  const Caller users[] = {alice_, bob_, {"carol", 1002, 1002, false}, root_};
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  // Half submit single jobs, half arrays of 2. The singles alone would pass the bound,
  // so it is reached exactly: a refused single means that there was no room left.
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Job job = MakeJob(0);
      if (t >= 4) job.array = "0-1";
      for (int i = 0; i < 10; ++i) {
        if (c_->Submit(job, users[t % 4]).ok()) accepted += t >= 4 ? 2 : 1;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(accepted.load(), 30);
  EXPECT_EQ(store_->ListJobs({})->size(), 30u);
}

// A job whose submission (jobs::SubmissionBytes) is `bytes`: MakeJob's, an --array
// spec, and variables PAD0, PAD1, ... of up to 50,000 bytes (a value may have 64 KiB).
Job SizedJob(int64_t bytes, const std::string& array = "") {
  Job j = MakeJob(1);
  j.array = array;
  j.name = "sized";  // its own: the name the server gives a job without one would add bytes
  for (int i = 0; jobs::SubmissionBytes(j) < bytes; ++i) {
    const std::string name = "PAD" + std::to_string(i);
    const int64_t left = bytes - jobs::SubmissionBytes(j) - static_cast<int64_t>(name.size()) - 2;
    j.env[name] = std::string(static_cast<size_t>(std::clamp<int64_t>(left, 0, 50'000)), 'x');
  }
  EXPECT_EQ(jobs::SubmissionBytes(j), bytes);
  return j;
}

// The map a job's environment is held in: the same one for jobs that share it.
const void* EnvHeldAt(const Job& j) {
  const std::map<std::string, std::string>& env = j.env;
  return &env;
}

// Issue 25 item 7: the job bounds counted jobs, not bytes, and a submission was bounded
// only by the HTTP body (1 MiB). Now the server's max-submission-bytes (default 1 MiB)
// refuses one whole, naming its size, the bound and the key.
TEST_F(ControllerTest, ASubmissionOverMaxSubmissionBytesIsRefusedNamingItsSizeAndTheKey) {
  Job big = SizedJob((int64_t{1} << 20) + 10);
  Result<Job> r = c_->Submit(big, alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "the job's submission is 1048586 bytes (its command, environment variables and "
            "paths, each string with its NUL), over the server's max-submission-bytes of "
            "1048576: pass fewer or shorter --env variables (or a long command as a script "
            "file), or ask an admin to raise max-submission-bytes in the [server] section of "
            "its config file");
  big.array = "0-9";
  EXPECT_EQ(c_->Submit(big, root_).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(store_->ListJobs({})->empty());                        // nothing of it stored
  EXPECT_TRUE(c_->Submit(SizedJob(int64_t{1} << 20), alice_).ok());  // at the bound

  ControllerOptions o;
  o.max_submission_bytes = 4096;
  Restart(o);
  EXPECT_TRUE(c_->Submit(SizedJob(4096), alice_).ok());
  r = c_->Submit(SizedJob(4097), alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("4097 bytes"), std::string::npos);
  EXPECT_NE(r.status().message().find("max-submission-bytes of 4096"), std::string::npos);
}

// Issue 25 item 7: each element of an array held its own copy of the submission in the
// controller (100 elements of a 0.9 MB environment: +96 MB of RSS). They share one now,
// as they come from the submission and as a restarted controller loads them, and the
// variables an element gets at launch (GPUPOOL_ARRAY_*) are not added to the shared one.
TEST_F(ControllerTest, AnArraysElementsShareOneCopyOfTheirSubmissionInMemory) {
  Register(1);
  const Job sweep = SizedJob(100'000, "0-99");
  const Job first = c_->Submit(sweep, alice_).value();
  auto held_at = [&] {
    store::JobFilter queued;
    queued.active_only = true;
    std::set<const void*> at;
    const std::vector<Job> jobs = c_->List(queued, root_).value();
    EXPECT_EQ(jobs.size(), 100u);
    for (const Job& j : jobs) at.insert(EnvHeldAt(j));
    return at;
  };
  EXPECT_EQ(held_at().size(), 1u);
  Restart();
  Register(1);
  EXPECT_EQ(held_at().size(), 1u);

  ASSERT_TRUE(c_->ScheduleOnce().ok());
  AgentWork work = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(work.launch.size(), 1u);
  EXPECT_EQ(work.launch[0].job.env.at("GPUPOOL_ARRAY_JOB_ID"), std::to_string(first.id));
  EXPECT_EQ(work.launch[0].job.env.at("PAD1"), sweep.env.at("PAD1"));
  EXPECT_EQ(Get(first.id + 1).env.count("GPUPOOL_ARRAY_JOB_ID"), 0u);
  EXPECT_EQ(held_at().size(), 1u);
}

// Issue 25 item 7: within the job bounds one user could hold 10,000 x 1 MiB of the
// controller. The bounds on queued bytes refuse a submission that would pass them,
// counting an array's shared submission once, and a submission's bytes count until its
// last queued job leaves the queue.
TEST_F(ControllerTest, QueuedBytesBoundsCountAnArraysSharedSubmissionOnce) {
  ControllerOptions o;
  o.max_submission_bytes = 65536;
  o.max_queued_bytes_per_user = 100'000;
  o.max_queued_bytes_total = 150'000;
  Restart(o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c_->Submit(SizedJob(30'000), alice_).ok());
  // 500,000 bytes if each element counted its own.
  const Job sweep = SizedJob(10'000, "0-49");
  const Job first = c_->Submit(sweep, alice_).value();
  Result<Job> r = c_->Submit(SizedJob(1'000), alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "user alice has 100000 bytes of submissions queued (commands, environments, paths; "
            "an array's once); 1000 more would pass the limit (max-queued-bytes-per-user "
            "100000): wait for some to start, submit less (an array holds one copy for all its "
            "elements), or ask an admin to raise it: [server] max-queued-bytes-per-user in the "
            "server's config file");
  // The pool's bound counts every user's, an admin's too.
  ASSERT_TRUE(c_->Submit(SizedJob(30'000), bob_).ok());
  r = c_->Submit(SizedJob(30'000), root_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("the pool has 130000 bytes of submissions queued"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("(max-queued-bytes-total 150000)"), std::string::npos);
  EXPECT_EQ(store_->ListJobs({})->size(), 54u);  // nothing of the refused ones stored

  // The array's submission counts while any of its elements is queued.
  for (int i = 1; i < 50; ++i) ASSERT_TRUE(c_->Cancel(first.id + i, alice_).ok());
  EXPECT_EQ(c_->Submit(SizedJob(1'000), alice_).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c_->Cancel(first.id, alice_).ok());
  ASSERT_TRUE(c_->Submit(SizedJob(10'000), alice_).ok());  // 100,000 again

  // A restarted controller counts the stored queue.
  Restart(o);
  EXPECT_EQ(c_->Submit(SizedJob(1'000), alice_).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c_->Submit(SizedJob(20'000), bob_).ok());  // 150,000 in all
  EXPECT_EQ(c_->Submit(SizedJob(1'000), bob_).status().code(), StatusCode::kResourceExhausted);
}

// While an array is being stored (one transaction) its bytes count as the submission's
// reservation; once its elements land they count once for all of them, and go when the
// last element leaves the queue.
TEST_F(GatedControllerTest, AnArrayBeingStoredCountsItsBytesOnceThenWithItsElements) {
  GateStore* g = UseGateStore();
  ControllerOptions o;
  o.max_queued_bytes_total = 25'000;
  Restart(o);
  Result<Job> during = Status::Internal("not submitted");
  Result<Job> past = Status::Internal("not submitted");
  g->on_insert = [&](const std::vector<Job>& jobs) {
    if (jobs.empty() || jobs[0].user != "alice") return;
    during = c_->Submit(SizedJob(15'000), bob_);  // 25,000 with alice's reservation
    past = c_->Submit(SizedJob(1'000), bob_);
  };
  const Job first = c_->Submit(SizedJob(10'000, "0-4"), alice_).value();
  g->on_insert = nullptr;
  EXPECT_TRUE(during.ok()) << during.status().ToString();
  EXPECT_EQ(past.status().code(), StatusCode::kResourceExhausted);
  // Landed: five elements, 10,000 bytes once.
  EXPECT_EQ(c_->Submit(SizedJob(1'000), bob_).status().code(), StatusCode::kResourceExhausted);
  store::JobFilter alices;
  alices.user = "alice";
  alices.active_only = true;
  const std::vector<Job> landed = c_->List(alices, root_).value();
  ASSERT_EQ(landed.size(), 5u);
  for (size_t k = 0; k + 1 < landed.size(); ++k) ASSERT_TRUE(c_->Cancel(landed[k].id, root_).ok());
  EXPECT_EQ(c_->Submit(SizedJob(1'000), bob_).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c_->Cancel(landed.back().id, root_).ok());
  EXPECT_TRUE(c_->Submit(SizedJob(1'000), bob_).ok());
  EXPECT_EQ(landed.front().array_id, first.id);
}

TEST_F(ControllerTest, ConcurrentSubmittersCannotPassTheQueuedBytesBoundTogether) {
  ControllerOptions o;
  o.max_queued_bytes_total = 300'000;
  Restart(o);
  const Caller users[] = {alice_, bob_, {"carol", 1002, 1002, false}, root_};
  std::atomic<int64_t> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      // An array's 10,000 bytes count once for its elements.
      const Job job = SizedJob(10'000, t >= 4 ? "0-9" : "");
      for (int i = 0; i < 10; ++i) {
        if (c_->Submit(job, users[t % 4]).ok()) accepted += 10'000;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(accepted.load(), 300'000);
}

// Issue 15 B.5: limits per user and project on GPUs in use, running and queued jobs.
TEST_F(ControllerTest, LimitsHoldJobsWithAReasonAndRefuseQueueingPastTheMax) {
  Register(2, {}, "n1");
  Register(2, {}, "n2");
  Limits l;
  // alice's own row: her max_running above the default's; her max_queued the default's.
  l.users["alice"] = {/*max_gpus=*/3, /*max_running=*/10, /*max_queued=*/-1};
  l.user_default = {-1, /*max_running=*/1, /*max_queued=*/3};
  l.projects["vision"] = {-1, -1, -1};
  l.projects["vision"].max_gpus = 1;
  EXPECT_EQ(c_->SetLimits(l, alice_).status().code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(c_->SetLimits(l, root_).ok());

  // alice: at most 3 GPUs in use.
  Job a1 = c_->Submit(MakeJob(2), alice_).value();
  Job a2 = c_->Submit(MakeJob(2), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a1.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(a2.id).state, JobState::kPending);  // 2 GPUs idle on n2, but 2 + 2 > 3
  EXPECT_EQ(Get(a2.id).pending_reason,
            "waits: user alice has 2 GPUs in use or next to start; this job's 2 more would pass "
            "the limit (max_gpus 3, `gpupool limits`)");
  // bob (the default): one job running at once, three queued at most.
  Job b1 = c_->Submit(MakeJob(0), bob_).value();
  Job b2 = c_->Submit(MakeJob(0), bob_).value();
  ASSERT_TRUE(c_->Submit(MakeJob(0), bob_).ok());
  Result<Job> b4 = c_->Submit(MakeJob(0), bob_);
  EXPECT_EQ(b4.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(b4.status().message(),
            "user bob has 3 jobs queued; 1 more would pass the limit (max_queued 3): wait for "
            "some to start, or ask an admin (`gpupool limits`)");
  Job arr = MakeJob(0);
  arr.array = "0-9";
  EXPECT_EQ(c_->Submit(arr, bob_).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b1.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(b2.id).state, JobState::kPending);
  EXPECT_EQ(Get(b2.id).pending_reason,
            "waits: user bob has 1 jobs running or next to start, the limit (max_running 1, "
            "`gpupool limits`)");
  // A project's limit applies to all its members' jobs.
  Job v = MakeJob(2);
  v.project = "vision";
  v = c_->Submit(v, root_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_NE(Get(v.id).pending_reason.find("project vision has 0 GPUs in use"), std::string::npos)
      << Get(v.id).pending_reason;

  Restart();  // the limits are stored
  EXPECT_EQ(c_->GetLimits(), l);
  ASSERT_TRUE(c_->Cancel(v.id, root_).ok());
  // Raising them lets the jobs start.
  ASSERT_TRUE(c_->SetLimits(Limits{}, root_).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a2.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(b2.id).state, JobState::kAssigned);
}

TEST_F(ControllerTest, ConcurrentSubmissionsCannotPassMaxQueuedTogether) {
  Register(2);
  Limits l;
  l.users["alice"].max_queued = 10;
  ASSERT_TRUE(c_->SetLimits(l, root_).ok());
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        if (c_->Submit(MakeJob(0), alice_).ok()) ++accepted;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(accepted.load(), 10);
  EXPECT_EQ(store_->ListJobs({})->size(), 10u);
}

TEST_F(ControllerTest, NodesShowCpuAndMemoryAllocatedAndTotal) {
  Register(2);
  Job j = MakeJob(1);
  j.request.cpu_milli = 2500;
  j.request.memory_bytes = (uint64_t{3} << 30) + 1;  // rounds up to whole MiB
  j = c_->Submit(j, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  NodeView v = c_->Nodes().at(0);
  EXPECT_EQ(v.cpu_milli, 64'000);
  EXPECT_EQ(v.cpu_allocated_milli, 2500);
  EXPECT_EQ(v.memory_mib, 256'000);
  EXPECT_EQ(v.memory_allocated_mib, 3 * 1024 + 1);
}

TEST_F(ControllerTest, ARetriedSubmissionIsCreatedOnce) {
  Register(4);
  Job j = MakeJob(1);
  j.submit_key = "c0ffee-1";
  bool duplicate = true;
  Result<Job> first = c_->Submit(j, alice_, &duplicate);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(duplicate);
  Result<Job> again = c_->Submit(j, alice_, &duplicate);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(duplicate);
  EXPECT_EQ(again->id, first->id);
  // After a restart (a failover reloads the store) and once it runs, still the same job.
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Restart();
  again = c_->Submit(j, alice_, &duplicate);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(duplicate);
  EXPECT_EQ(again->id, first->id);
  EXPECT_EQ(again->state, JobState::kAssigned);
  // Keys are per user: bob's is his own job.
  Result<Job> bobs = c_->Submit(j, bob_, &duplicate);
  ASSERT_TRUE(bobs.ok());
  EXPECT_FALSE(duplicate);
  EXPECT_NE(bobs->id, first->id);
  // An array's key is its first element's: retried, no new elements.
  Job arr = MakeJob(1);
  arr.array = "0-3";
  arr.submit_key = "array-9";
  const int64_t head = c_->Submit(arr, alice_, &duplicate)->id;
  const size_t jobs_now = store_->ListJobs({})->size();
  EXPECT_EQ(c_->Submit(arr, alice_, &duplicate)->id, head);
  EXPECT_TRUE(duplicate);
  EXPECT_EQ(store_->ListJobs({})->size(), jobs_now);
  Job bad = MakeJob(1);
  bad.submit_key = "no spaces please";
  Result<Job> refused = c_->Submit(bad, alice_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message().rfind("submit_key:", 0), 0u) << refused.status().message();
}

TEST_F(ControllerTest, UsersOnlySeeAndCancelTheirOwnJobs) {
  Register(1);
  Job j = c_->Submit(MakeJob(1), alice_).value();
  EXPECT_EQ(c_->Get(j.id, bob_).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c_->Cancel(j.id, bob_).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(c_->List({}, bob_)->empty());
  EXPECT_EQ(c_->List({}, root_)->size(), 1u);
  EXPECT_EQ(Get(j.id).state, JobState::kPending);
}

TEST_F(ControllerTest, CancelPendingAndRunning) {
  Register(1);
  Job run = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job wait = c_->Submit(MakeJob(1), alice_).value();
  EXPECT_EQ(c_->Cancel(wait.id, alice_)->state, JobState::kCancelled);
  EXPECT_EQ(c_->Cancel(wait.id, alice_).status().code(), StatusCode::kFailedPrecondition);

  run = Get(run.id);
  ASSERT_TRUE(Apply({Ev(run, protocol::EventKind::kStarted)}).ok());
  (void)c_->WaitForWork("n1", 0);
  ASSERT_TRUE(c_->Cancel(run.id, alice_).ok());
  AgentWork w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.cancel, (std::vector<protocol::CancelOrder>{{run.id, Get(run.id).attempt, 0}}));
  Event e = Ev(Get(run.id), protocol::EventKind::kExited);
  e.exit_code.reset();
  e.signal = 15;
  e.cancelled = true;
  ASSERT_TRUE(Apply({e}).ok());
  EXPECT_EQ(Get(run.id).state, JobState::kCancelled);
}

TEST_F(ControllerTest, SilentNodeLosesItsJobsAndRequeuesWhenAsked) {
  Register(2);
  Job plain = c_->Submit(MakeJob(1), alice_).value();
  Job again = MakeJob(1);
  again.requeue = true;
  again = c_->Submit(again, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  clock_.AdvanceMicros(11'000'000);
  ASSERT_TRUE(c_->SweepNodes().ok());
  Job lost = Get(plain.id);
  EXPECT_EQ(lost.state, JobState::kLost);
  EXPECT_EQ(lost.reason, "node n1 stopped responding (no heartbeat for 10 s)");
  Job requeued = Get(again.id);
  EXPECT_EQ(requeued.state, JobState::kPending);
  EXPECT_TRUE(requeued.placement.empty());
  // Nothing schedules onto the down node. It comes back by registering again (a poll
  // is told to: it lists what still runs there), not by polling.
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(again.id).state, JobState::kPending);
  Result<AgentWork> poll = c_->WaitForWork("n1", 0);
  ASSERT_FALSE(poll.ok());
  EXPECT_EQ(poll.status().code(), StatusCode::kNotFound);
  EXPECT_NE(poll.status().message().find("register it again"), std::string::npos);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(again.id).state, JobState::kPending);
  Register(2);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(again.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(again.id).attempt, 2);
}

TEST_F(ControllerTest, RestartKeepsJobsAndAgentReconciles) {
  Register(2);
  Job a = c_->Submit(MakeJob(1), alice_).value();
  Job b = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  b = Get(b.id);
  ASSERT_TRUE(
      Apply({Ev(a, protocol::EventKind::kStarted), Ev(b, protocol::EventKind::kStarted)}).ok());
  Restart();  // the controller dies and comes back on the same store
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  // The agent re-registers knowing only job a: b is gone.
  Register(2, {{a.id, a.attempt}});
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  EXPECT_EQ(Get(b.id).state, JobState::kLost);
  EXPECT_NE(Get(b.id).reason.find("restarted"), std::string::npos);
  // a finishes after the restart and its state arrives.
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kExited, 0)}).ok());
  EXPECT_EQ(Get(a.id).state, JobState::kSucceeded);
}

// Issue 25 item 1: jobs that ended while the agent was down (kill -9 of `gpupool up`)
// were recorded LOST when it registered again, before their ends arrived.
TEST_F(ControllerTest, ATaskThatEndedWhileTheAgentWasDownIsNotLostWhenItRegisters) {
  Register(2);
  Job a = c_->Submit(MakeJob(1), alice_).value();
  Job b = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  b = Get(b.id);
  ASSERT_TRUE(
      Apply({Ev(a, protocol::EventKind::kStarted), Ev(b, protocol::EventKind::kStarted)}).ok());
  Restart();
  // The agent comes back: a ended meanwhile (its end is not reported yet), b vanished.
  protocol::Registration r;
  r.node = "n1";
  r.info = MakeNode(2);
  r.cpu_milli = 64'000;
  r.memory_mib = 256'000;
  r.ended = {{a.id, 0, a.attempt}};
  ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  EXPECT_EQ(Get(b.id).state, JobState::kLost);
  // No stop order for a: its task is over, not a stray (b's is sent, in case).
  const AgentWork work = c_->WaitForWork("n1", 0).value();
  for (const protocol::CancelOrder& o : work.cancel) EXPECT_NE(o.job_id, a.id);
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kExited, 0)}).ok());
  EXPECT_EQ(Get(a.id).state, JobState::kSucceeded);
}

// Issue 25 item 2: a --requeue job whose node came back while its first attempt still
// ran there. The old attempt is stopped; the job is not placed again (on any node)
// until that attempt's end is reported, so two attempts never run at once.
TEST_F(ControllerTest, ARequeuedJobWaitsForItsEarlierAttemptToStopOnAReturningNode) {
  Register(2);
  Job again = MakeJob(1);
  again.requeue = true;
  again = c_->Submit(again, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  again = Get(again.id);
  ASSERT_TRUE(Apply({Ev(again, protocol::EventKind::kStarted)}).ok());
  clock_.AdvanceMicros(11'000'000);
  ASSERT_TRUE(c_->SweepNodes().ok());
  ASSERT_EQ(Get(again.id).state, JobState::kPending);
  // The agent returns; attempt 1's supervisor kept the job running.
  Register(2, {{again.id, 1}});
  AgentWork w = c_->WaitForWork("n1", 0).value();
  EXPECT_EQ(w.cancel, (std::vector<protocol::CancelOrder>{{again.id, 1, 0}}));
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job waiting = Get(again.id);
  EXPECT_EQ(waiting.state, JobState::kPending);
  EXPECT_NE(waiting.pending_reason.find("attempt 1"), std::string::npos) << waiting.pending_reason;
  EXPECT_NE(waiting.pending_reason.find("n1"), std::string::npos) << waiting.pending_reason;
  // Attempt 1 ends (stopped): attempt 2 may start.
  Event stopped = Ev(again, protocol::EventKind::kExited);
  stopped.attempt = 1;
  stopped.exit_code.reset();
  stopped.signal = 15;
  stopped.cancelled = true;
  ASSERT_TRUE(Apply({stopped}).ok());
  EXPECT_EQ(Get(again.id).state, JobState::kPending);  // a stale attempt's end changes nothing
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(again.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(again.id).attempt, 2);
  ASSERT_EQ(c_->WaitForWork("n1", 0).value().launch.size(), 1u);
}

TEST_F(ControllerTest, FairShareInterleavesUsers) {
  Register(2);
  std::vector<Job> alice;
  for (int i = 0; i < 3; ++i) alice.push_back(c_->Submit(MakeJob(1), alice_).value());
  Job bob = c_->Submit(MakeJob(1), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  // Two GPUs: one for alice, one for bob, although alice queued first.
  EXPECT_EQ(Get(bob.id).state, JobState::kAssigned);
  int alice_running = 0;
  for (const Job& j : alice) alice_running += Get(j.id).state == JobState::kAssigned ? 1 : 0;
  EXPECT_EQ(alice_running, 1);
}

// The node view and the agent's work come from the index of jobs holding resources:
// it must follow every transition (assign, start, end, cancel, loss, requeue, restart).
TEST_F(ControllerTest, NodeViewFollowsEveryTransition) {
  Register(4);
  auto allocated = [&] {
    std::vector<NodeView> nodes = c_->Nodes();
    EXPECT_EQ(nodes.size(), 1u);
    int sum = 0;
    for (int m : nodes[0].allocated_milli) sum += m;
    return std::pair<int, int>{nodes[0].running_jobs, sum};
  };
  Job a = c_->Submit(MakeJob(1), alice_).value();
  Job b = c_->Submit(MakeJob(1, 250), alice_).value();
  Job again = MakeJob(2);
  again.requeue = true;
  again = c_->Submit(again, bob_).value();
  Job queued = c_->Submit(MakeJob(4), bob_).value();
  EXPECT_EQ(allocated(), (std::pair<int, int>{0, 0}));  // pending jobs hold nothing
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(queued.id).state, JobState::kPending);
  EXPECT_EQ(allocated(), (std::pair<int, int>{3, 3250}));
  EXPECT_EQ(c_->WaitForWork("n1", 0).value().launch.size(), 3u);
  a = Get(a.id);
  ASSERT_TRUE(
      Apply({Ev(a, protocol::EventKind::kStarted), Ev(a, protocol::EventKind::kExited, 0)}).ok());
  EXPECT_EQ(allocated(), (std::pair<int, int>{2, 2250}));
  ASSERT_TRUE(c_->Cancel(queued.id, bob_).ok());  // pending: never indexed
  EXPECT_EQ(allocated(), (std::pair<int, int>{2, 2250}));
  Restart();
  EXPECT_EQ(allocated(), (std::pair<int, int>{2, 2250}));  // rebuilt from the store
  clock_.AdvanceMicros(11'000'000);
  ASSERT_TRUE(c_->SweepNodes().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kLost);
  EXPECT_EQ(Get(again.id).state, JobState::kPending);  // requeued: holds nothing
  EXPECT_EQ(allocated(), (std::pair<int, int>{0, 0}));
  EXPECT_FALSE(c_->WaitForWork("n1", 0).ok());  // declared lost: it registers again
  Register(4);
  EXPECT_TRUE(c_->WaitForWork("n1", 0).value().launch.empty());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(allocated(), (std::pair<int, int>{1, 2000}));
  AgentWork w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.launch.size(), 1u);
  EXPECT_EQ(w.launch[0].job.id, again.id);
}

// The scheduler thread: submissions to a full pool wait for one batched pass, while freed
// resources are planned at once. It runs on the ManualClock: time moves only here.
TEST_F(ControllerTest, LoopBatchesArrivalsWhileFullButPlansFreedResourcesAtOnce) {
  ControllerOptions o;
  o.scheduler_period_us = 60'000'000;
  o.arrival_batch_us = 4'000'000;
  Restart(o);
  Register(1);
  c_->Start();
  // What the loop does without time moving, it does at once; this waits for it.
  auto eventually = [&](const std::function<bool()>& done) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    return done();
  };
  // After each pass the loop leaves a short gap (at most 20 ms) before the next.
  auto end_gap = [&] {
    ASSERT_TRUE(clock_.WaitForWaiters(1));
    clock_.AdvanceMicros(20'000);
  };
  end_gap();  // after the pass the node's registration asked for
  Job a = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(eventually([&] { return Get(a.id).state == JobState::kAssigned; }));  // at once
  end_gap();
  Job b = c_->Submit(MakeJob(1), bob_).value();  // its pass starts nothing
  ASSERT_TRUE(eventually([&] { return !Get(b.id).pending_reason.empty(); }));
  EXPECT_EQ(Get(b.id).state, JobState::kPending);
  end_gap();
  Job cpu_only = c_->Submit(MakeJob(0), bob_).value();  // would fit, but is batched
  ASSERT_TRUE(clock_.WaitForWaiters(1));
  clock_.AdvanceMicros(500'000);
  ASSERT_TRUE(clock_.WaitForWaiters(1));
  EXPECT_EQ(Get(cpu_only.id).state, JobState::kPending);
  EXPECT_TRUE(Get(cpu_only.id).pending_reason.empty());  // no pass has seen it
  a = Get(a.id);
  ASSERT_TRUE(
      Apply({Ev(a, protocol::EventKind::kStarted), Ev(a, protocol::EventKind::kExited, 0)}).ok());
  // Well before the batch ends (no time passes): the freed GPU goes to b, and cpu_only
  // rides along.
  EXPECT_TRUE(eventually([&] { return Get(b.id).state == JobState::kAssigned; }));
  EXPECT_TRUE(eventually([&] { return Get(cpu_only.id).state == JobState::kAssigned; }));
  c_->Stop();
}

// Issue 31: --max-starts-per-pass. Capped passes, run one after the other, place the
// jobs one uncapped pass places, each on the same GPUs (the walk is the same up to each
// cap), under every start rule with fair share; the jobs a capped pass did not reach
// say so.
TEST_F(ControllerTest, CappedPassesPlaceWhatOneUncappedPassPlaces) {
  const int gpus[] = {1, 2, 1, 1, 2, 1, 4, 1, 2, 1};
  const int64_t limits[] = {60, 0, 600, 60, 30, 0, 60, 900, 20, 60};
  for (const char* rule : {"strict", "easy", "skip"}) {
    std::map<size_t, std::map<int64_t, std::vector<std::string>>> placed;  // cap -> job -> GPUs
    for (size_t cap : {size_t{0}, size_t{2}}) {
      SCOPED_TRACE(std::string(rule) + ", cap " + std::to_string(cap));
      store_ = OpenSqliteStore(":memory:");
      ControllerOptions o;
      o.start_rule = rule;
      o.max_starts_per_pass = cap;
      Restart(o);
      Register(4, {}, "n1");
      Register(4, {}, "n2");
      Register(4, {}, "n3");
      Job busy = MakeJob(3);  // three of n1's GPUs until it ends (no time limit)
      busy = c_->Submit(busy, root_).value();
      ASSERT_TRUE(c_->ScheduleOnce().ok());
      ASSERT_EQ(Get(busy.id).state, JobState::kAssigned);
      std::vector<int64_t> ids;
      for (size_t i = 0; i < std::size(gpus); ++i) {
        Job j = MakeJob(gpus[i]);
        j.time_limit_s = limits[i];
        ids.push_back(c_->Submit(j, i % 3 == 0 ? bob_ : alice_).value().id);
      }
      int passes = 0;
      for (size_t before = 0;; ++passes) {
        ASSERT_TRUE(c_->ScheduleOnce().ok());
        size_t now = 0;
        for (int64_t id : ids) now += Get(id).state == JobState::kAssigned ? 1 : 0;
        if (cap > 0) {
          EXPECT_LE(now - before, cap);
        }
        if (passes == 0 && cap > 0) {
          // The last job of the queue was not reached by the first capped pass.
          EXPECT_EQ(Get(ids.back())
                        .pending_reason.rfind(
                            "waiting for its turn: the last pass started its maximum of 2 jobs", 0),
                    0u)
              << Get(ids.back()).pending_reason;
        }
        if (now == before && passes > 0) break;
        before = now;
        ASSERT_LT(passes, 20);
      }
      size_t assigned = 0;
      for (int64_t id : ids) assigned += Get(id).state == JobState::kAssigned ? 1 : 0;
      if (cap > 0) {
        EXPECT_GE(static_cast<size_t>(passes), (assigned + cap - 1) / cap);  // the cap did cut
      }
      for (int64_t id : ids) {
        const Job j = Get(id);
        if (j.state != JobState::kAssigned) continue;
        for (const jobs::TaskPlacement& p : j.placement) {
          for (const std::string& uuid : p.gpu_uuids)
            placed[cap][id].push_back(p.node + "/" + uuid);
        }
      }
    }
    SCOPED_TRACE(rule);
    EXPECT_GE(placed[0].size(), 5u);
    EXPECT_EQ(placed[2], placed[0]);
  }
}

// After a capped pass the loop runs the next at once: neither the period nor an arrival
// batch is waited for. On the ManualClock only the 20 ms gaps after each pass pass.
TEST_F(ControllerTest, LoopRunsTheNextPassAtOnceAfterACappedOne) {
  ControllerOptions o;
  o.scheduler_period_us = 60'000'000;
  o.arrival_batch_us = 4'000'000;
  o.max_starts_per_pass = 1;
  Restart(o);
  Register(4);
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(c_->Submit(MakeJob(1), alice_).value().id);
  c_->Start();
  auto assigned = [&] {
    int n = 0;
    for (int64_t id : ids) n += Get(id).state == JobState::kAssigned ? 1 : 0;
    return n;
  };
  // What the loop does without time moving, it does at once; this waits for it.
  auto eventually = [&](const std::function<bool()>& done) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    return done();
  };
  // Each pass places one job and is followed by a gap of at most 20 ms.
  for (int n = 1; n <= 3; ++n) {
    ASSERT_TRUE(eventually([&] { return assigned() >= n; })) << n << " passes";
    ASSERT_TRUE(clock_.WaitForWaiters(1));
    clock_.AdvanceMicros(20'000);
  }
  EXPECT_EQ(assigned(), 3);
  c_->Stop();
}

TEST_F(ControllerTest, UnknownPolicyIsAConfigurationError) {
  ControllerOptions o;
  o.placement_policy = "nonsense";
  auto c = Controller::Create(store_.get(), &clock_, o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("scheduler configuration"), std::string::npos);
}

// --- gangs ---

class GangTest : public ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    address_ = {{"n1", "10.0.0.1"}, {"n2", "10.0.0.2"}};
    Register(2, {}, "n1");
    Register(2, {}, "n2");
  }
  // A 2-task gang of 2 GPUs per task: one task per node. Returns it ASSIGNED.
  Job SubmitGang(bool mpi = false) {
    Job j = MakeJob(2);
    j.request.tasks = 2;
    j.mpi = mpi;
    j = c_->Submit(j, alice_).value();
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    j = Get(j.id);
    EXPECT_EQ(j.state, JobState::kAssigned);
    EXPECT_EQ(j.tasks.size(), 2u);
    return j;
  }
  std::string NodeOf(const Job& j, int task) { return j.placement[static_cast<size_t>(task)].node; }
  // Starts both tasks the way agents do: task 0 first, with its port.
  Job StartBoth(Job j) {
    AgentWork w0 = c_->WaitForWork(NodeOf(j, 0), 0).value();
    EXPECT_EQ(w0.launch.size(), 1u);
    // Task 1 waits for task 0's port, except the held task of an --mpi job: it runs
    // nothing of the user's, and exec requests carry the port.
    AgentWork early = c_->WaitForWork(NodeOf(j, 1), 0).value();
    EXPECT_EQ(early.launch.size(), j.mpi ? 1u : 0u);
    Event s0 = Ev(j, protocol::EventKind::kStarted, 0, 0);
    s0.master_port = 41000;
    EXPECT_TRUE(Apply({s0}, NodeOf(j, 0)).ok());
    EXPECT_EQ(Get(j.id).state, JobState::kAssigned);  // not every task runs yet
    AgentWork w1 = j.mpi ? early : c_->WaitForWork(NodeOf(j, 1), 0).value();
    EXPECT_EQ(w1.launch.size(), 1u);
    if (!w1.launch.empty()) {
      const protocol::Rendezvous& r = w1.launch[0].rendezvous;
      EXPECT_EQ(r.task_index, 1);
      EXPECT_EQ(r.num_tasks, 2);
      EXPECT_EQ(r.master_port, j.mpi ? 0 : 41000);
      EXPECT_EQ(r.hosts[0], address_[NodeOf(j, 0)]);
      EXPECT_EQ(r.hosts[1], address_[NodeOf(j, 1)]);
      EXPECT_EQ(r.slots, (std::vector<int>{2, 2}));
    }
    EXPECT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted, 0, 1)}, NodeOf(j, 1)).ok());
    Job running = Get(j.id);
    EXPECT_EQ(running.state, JobState::kRunning);
    return running;
  }
  Event Exit(const Job& j, int task, int code, bool cancelled = false) {
    Event e = Ev(j, protocol::EventKind::kExited, code, task);
    e.cancelled = cancelled;
    if (cancelled) {
      e.exit_code.reset();
      e.signal = 15;
    }
    return e;
  }
};

TEST_F(GangTest, TasksSpreadStartInOrderAndSucceedTogether) {
  Job j = SubmitGang();
  EXPECT_NE(NodeOf(j, 0), NodeOf(j, 1));
  j = StartBoth(j);
  EXPECT_EQ(j.master_port, 41000);
  ASSERT_TRUE(Apply({Exit(j, 1, 0)}, NodeOf(j, 1)).ok());
  EXPECT_EQ(Get(j.id).state, JobState::kRunning);  // task 0 still runs
  ASSERT_TRUE(Apply({Exit(j, 0, 0)}, NodeOf(j, 0)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kSucceeded);
  EXPECT_TRUE(done.tasks[0].ended && done.tasks[1].ended);
}

TEST_F(GangTest, OneFailedTaskStopsTheOthersAndNamesItself) {
  Job j = StartBoth(SubmitGang());
  (void)c_->WaitForWork(NodeOf(j, 0), 0);
  ASSERT_TRUE(Apply({Exit(j, 1, 3)}, NodeOf(j, 1)).ok());
  Job stopping = Get(j.id);
  EXPECT_TRUE(stopping.cancel_requested);
  // Task 0's node is told to stop it.
  AgentWork w = c_->WaitForWork(NodeOf(j, 0), 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].job_id, j.id);
  EXPECT_EQ(w.cancel[0].attempt, j.attempt);
  ASSERT_TRUE(Apply({Exit(j, 0, 0, /*cancelled=*/true)}, NodeOf(j, 0)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kFailed);
  EXPECT_EQ(done.exit_code, 3);
  EXPECT_NE(done.reason.find("task 1 (node " + NodeOf(j, 1) + ") exited with code 3"),
            std::string::npos)
      << done.reason;
}

TEST_F(GangTest, TaskStateSurvivesAControllerRestartBetweenTwoExits) {
  Job j = StartBoth(SubmitGang());
  ASSERT_TRUE(Apply({Exit(j, 1, 0)}, NodeOf(j, 1)).ok());
  Restart();  // what kill -9 leaves: only the store
  Job reloaded = Get(j.id);
  ASSERT_EQ(reloaded.tasks.size(), 2u);
  EXPECT_TRUE(reloaded.tasks[1].ended);
  EXPECT_EQ(reloaded.tasks[1].exit_code, 0);
  EXPECT_FALSE(reloaded.tasks[0].ended);
  ASSERT_TRUE(Apply({Exit(j, 0, 0)}, NodeOf(j, 0)).ok());
  EXPECT_EQ(Get(j.id).state, JobState::kSucceeded);
}

TEST_F(GangTest, CancelBeforeTheOthersStartEndsTheUnsentTasks) {
  Job j = SubmitGang();
  (void)c_->WaitForWork(NodeOf(j, 0), 0);  // task 0's order is out; task 1's is not
  ASSERT_TRUE(c_->Cancel(j.id, alice_).ok());
  Job stopping = Get(j.id);
  EXPECT_TRUE(stopping.tasks[1].ended);  // never sent, so it will never start
  Event e = Exit(j, 0, 0, true);
  ASSERT_TRUE(Apply({e}, NodeOf(j, 0)).ok());
  EXPECT_EQ(Get(j.id).state, JobState::kCancelled);
}

TEST_F(GangTest, MpiJobEndsWithTaskZeroAndReleasesTheHeldTasks) {
  Job j = StartBoth(SubmitGang(/*mpi=*/true));
  (void)c_->WaitForWork(NodeOf(j, 1), 0);
  // mpirun's daemon on the held task gets the port the task was launched without.
  Result<int64_t> x = c_->StartExec(j.id, 1, {"orted"}, alice_);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  AgentWork daemon = c_->WaitForWork(NodeOf(j, 1), 0).value();
  ASSERT_EQ(daemon.exec.size(), 1u);
  EXPECT_EQ(daemon.exec[0].master_port, 41000);
  ASSERT_TRUE(Apply({Exit(j, 0, 0)}, NodeOf(j, 0)).ok());
  AgentWork w = c_->WaitForWork(NodeOf(j, 1), 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);  // the held task is released
  ASSERT_TRUE(Apply({Exit(j, 1, 0, /*cancelled=*/true)}, NodeOf(j, 1)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kSucceeded) << done.reason;
  EXPECT_EQ(done.exit_code, 0);
}

// mpirun starts all of a node's ranks in one place: in a gang held for it (--mpi, run,
// alloc) the first task on each node holds every GPU (and the limits) of the job's tasks
// there. A gang whose every task runs the command (torchrun) keeps one GPU set per task.
TEST_F(GangTest, TheFirstTaskOnANodeOfAHeldGangHoldsAllTheGangsGpusThere) {
  for (const std::string kind : {"mpi", "alloc", "torchrun"}) {
    SCOPED_TRACE(kind);
    Job j = MakeJob(1);
    j.request.tasks = 4;  // 2 nodes of 2 GPUs: two tasks on each
    j.mpi = kind == "mpi";
    if (kind == "alloc") {
      j.interactive = "alloc";
      j.command.clear();
    }
    j = c_->Submit(j, alice_).value();
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    j = Get(j.id);
    ASSERT_EQ(j.state, JobState::kAssigned);
    std::map<int, LaunchOrder> orders;
    auto collect = [&] {
      for (const std::string node : {"n1", "n2"}) {
        AgentWork w = c_->WaitForWork(node, 0).value();
        for (LaunchOrder& o : w.launch) {
          if (o.job.id == j.id) orders[o.task_index] = std::move(o);
        }
      }
    };
    collect();
    if (orders.size() < 4) {  // the others wait for task 0's port
      Event s0 = Ev(j, protocol::EventKind::kStarted, 0, 0);
      s0.master_port = 41000;
      ASSERT_TRUE(Apply({s0}, NodeOf(j, 0)).ok());
      collect();
    }
    ASSERT_EQ(orders.size(), 4u);
    const bool held = kind != "torchrun";
    for (int t = 0; t < 4; ++t) {
      SCOPED_TRACE(t);
      const LaunchOrder& o = orders[t];
      std::vector<int> on_node;
      for (int u = 0; u < 4; ++u) {
        if (NodeOf(j, u) == NodeOf(j, t)) on_node.push_back(u);
      }
      ASSERT_EQ(on_node.size(), 2u);
      std::vector<std::string> gpus;
      for (const protocol::GpuGrant& g : o.gpus) gpus.push_back(g.uuid);
      if (held && t == on_node[0]) {
        EXPECT_EQ(o.node_tasks, on_node);
        std::vector<std::string> both = j.placement[on_node[0]].gpu_uuids;
        both.push_back(j.placement[on_node[1]].gpu_uuids.at(0));
        std::sort(both.begin(), both.end());  // in the node's order
        EXPECT_EQ(gpus, both);
        EXPECT_TRUE(o.denied_device_nodes.empty());
      } else {
        EXPECT_TRUE(o.node_tasks.empty());
        EXPECT_EQ(gpus, j.placement[t].gpu_uuids);
        EXPECT_EQ(o.denied_device_nodes.size(), 1u);
      }
    }
    ASSERT_TRUE(c_->Cancel(j.id, alice_).ok());
    for (int t = 0; t < 4; ++t) {
      ASSERT_TRUE(Apply({Exit(j, t, 0, /*cancelled=*/true)}, NodeOf(j, t)).ok());
    }
    ASSERT_TRUE(Get(j.id).tasks[3].ended);
  }
}

TEST_F(GangTest, LosingOneNodeStopsTheTasksOnTheOthers) {
  Job j = StartBoth(SubmitGang());
  const std::string lost = NodeOf(j, 1);
  const std::string alive = NodeOf(j, 0);
  (void)c_->WaitForWork(alive, 0);
  clock_.AdvanceMicros(11'000'000);
  (void)c_->WaitForWork(alive, 0);  // the live node keeps polling
  ASSERT_TRUE(c_->SweepNodes().ok());
  EXPECT_EQ(Get(j.id).state, JobState::kLost);
  AgentWork w = c_->WaitForWork(alive, 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].job_id, j.id);
  EXPECT_EQ(w.cancel[0].attempt, j.attempt);
  // Resent until that node reports the task's end.
  clock_.AdvanceMicros(6'000'000);
  EXPECT_EQ(c_->WaitForWork(alive, 0)->cancel.size(), 1u);
  ASSERT_TRUE(Apply({Exit(j, 0, 0, true)}, alive).ok());
  clock_.AdvanceMicros(6'000'000);
  EXPECT_TRUE(c_->WaitForWork(alive, 0)->cancel.empty());
}

TEST_F(GangTest, AnAgentRunningATaskNobodyExpectsIsToldToStopIt) {
  Register(2, {{424242, 3}}, "n2");
  AgentWork w = c_->WaitForWork("n2", 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].job_id, 424242);
  EXPECT_EQ(w.cancel[0].attempt, 3);
  // Resent while unanswered, and given up once the node has shown for a minute that it
  // runs nothing of that job (no exit reported).
  clock_.AdvanceMicros(6'000'000);
  EXPECT_EQ(c_->WaitForWork("n2", 0)->cancel.size(), 1u);
  clock_.AdvanceMicros(60'000'000);
  (void)c_->WaitForWork("n2", 0);
  clock_.AdvanceMicros(6'000'000);
  EXPECT_TRUE(c_->WaitForWork("n2", 0)->cancel.empty());
}

TEST_F(GangTest, ExecRunsInARunningTaskForItsOwnerOnly) {
  Job j = SubmitGang();
  // Asked before task 1 has started (mpirun does): held until it runs.
  Result<int64_t> early = c_->StartExec(j.id, 1, {"true"}, alice_);
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_TRUE(c_->WaitForWork(NodeOf(j, 1), 0)->exec.empty());
  j = StartBoth(j);
  EXPECT_EQ(c_->StartExec(j.id, 1, {"hostname"}, bob_).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(c_->StartExec(j.id, 5, {"hostname"}, alice_).status().code(),
            StatusCode::kInvalidArgument);
  Result<int64_t> x = c_->StartExec(j.id, 1, {"hostname"}, alice_);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  AgentWork w = c_->WaitForWork(NodeOf(j, 1), 0).value();
  ASSERT_EQ(w.exec.size(), 2u);
  EXPECT_EQ(w.exec[0].id, *early);
  w.exec.erase(w.exec.begin());
  EXPECT_EQ(w.exec[0].id, *x);
  EXPECT_EQ(w.exec[0].task_index, 1);
  EXPECT_EQ(w.exec[0].argv, std::vector<std::string>{"hostname"});
  EXPECT_EQ(c_->WaitExec(*x, bob_, false, false, 0).status().code(), StatusCode::kNotFound);
  EventBatch b{NodeOf(j, 1), {}, {{*x, true, false, {}, {}, "", "/o", "/e"}}};
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 1), b).ok());
  ExecSession s = c_->WaitExec(*x, alice_, false, false, 1000).value();
  EXPECT_TRUE(s.started);
  EXPECT_EQ(s.stdout_path, "/o");
  b.exec = {{*x, true, true, 7, {}, "", "", ""}};
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 1), b).ok());
  s = c_->WaitExec(*x, alice_, true, false, 1000).value();
  EXPECT_TRUE(s.ended);
  EXPECT_EQ(s.exit_code, 7);
  // A job that ended takes no more.
  ASSERT_TRUE(c_->Cancel(j.id, alice_).ok());
  EXPECT_EQ(c_->StartExec(j.id, 1, {"true"}, alice_).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(GangTest, AnExecsOutputThatCameWithItsEndIsKeptForItsClient) {
  Job j = StartBoth(SubmitGang());
  Result<int64_t> x = c_->StartExec(j.id, 1, {"hostname"}, alice_);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  Result<int64_t> y = c_->StartExec(j.id, 1, {"hostname"}, alice_);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ASSERT_EQ(c_->WaitForWork(NodeOf(j, 1), 0)->exec.size(), 2u);
  protocol::ExecReport end{*x, true, true, 0, {}, "", "/o", "/e"};
  end.output_complete = true;
  end.stdout_data = "n1\n";
  end.stderr_data = "warning\n";
  protocol::ExecReport plain{*y, true, true, 0, {}, "", "/o2", "/e2"};  // an older agent's
  EventBatch b{NodeOf(j, 1), {}, {end, plain}};
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 1), b).ok());
  ExecSession s = c_->WaitExec(*x, alice_, false, false, 0).value();
  EXPECT_TRUE(s.ended);
  EXPECT_TRUE(s.output_complete);
  EXPECT_EQ(s.complete_output[0], "n1\n");
  EXPECT_EQ(s.complete_output[1], "warning\n");
  // Without the inline output, reads are relayed from the node's files as before.
  s = c_->WaitExec(*y, alice_, false, false, 0).value();
  EXPECT_TRUE(s.ended);
  EXPECT_FALSE(s.output_complete);
  EXPECT_EQ(s.stdout_path, "/o2");
}

TEST_F(GangTest, ProtocolVersionsOneMinorApartWorkAndFartherOnesAreRefused) {
  protocol::Registration r;
  r.node = "n3";
  r.info = MakeNode(1);
  r.info.gpus[0].uuid = "GPU-n3";
  const int minor = protocol::kVersion.minor;
  r.version = {1, minor + 2};
  Result<protocol::RegistrationReply> far = c_->RegisterNode(r, "");
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.status().message().find("upgrade gpupool"), std::string::npos);
  r.version = {1, minor - 2};
  EXPECT_FALSE(c_->RegisterNode(r, "").ok());
  r.version = {1, minor + 1};
  EXPECT_TRUE(c_->RegisterNode(r, "").ok());
  r.version = {1, minor - 1};
  Result<protocol::RegistrationReply> old = c_->RegisterNode(r, "192.0.2.7:5555");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->address, "192.0.2.7");  // no --address: where it connected from
  EXPECT_EQ(old->version, protocol::kVersion);
  // An agent one minor older runs jobs and plain execs (and interactive ones from 1.2 on).
  Job j = MakeJob(1);
  j.request.gpu_models = {"A100"};
  j = c_->Submit(j, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  const std::string node = j.placement[0].node;
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}, node).ok());
  if (node == "n3") {
    EXPECT_TRUE(c_->StartExec(j.id, 0, {"true"}, alice_).ok());
    Result<int64_t> x = c_->StartExec(j.id, 0, {"bash"}, alice_, {true, true, 24, 80});
    if (protocol::SupportsInteractiveExec(r.version)) {
      EXPECT_TRUE(x.ok()) << x.status().ToString();
    } else {
      ASSERT_FALSE(x.ok());
      EXPECT_NE(x.status().message().find("which has no interactive exec"), std::string::npos)
          << x.status().message();
    }
  }
}

// --- interactive sessions (exec_sessions.cc) ---

protocol::ExecInputItem Data(int64_t seq, std::string bytes) {
  protocol::ExecInputItem i;
  i.seq = seq;
  i.data = std::move(bytes);
  return i;
}

TEST_F(GangTest, InteractiveExecRelaysInputAndOutputInOrderForItsOwnerAndNode) {
  Job j = StartBoth(SubmitGang());
  const std::string node = NodeOf(j, 1);
  (void)c_->WaitForWork(node, 0);
  Result<int64_t> x = c_->StartExec(j.id, 1, {"bash"}, alice_, {true, true, 30, 100});
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  AgentWork w = c_->WaitForWork(node, 0).value();
  ASSERT_EQ(w.exec.size(), 1u);
  EXPECT_TRUE(w.exec[0].tty);
  EXPECT_TRUE(w.exec[0].stdin_open);
  EXPECT_EQ(w.exec[0].rows, 30);
  EXPECT_EQ(w.exec[0].cols, 100);

  // Input: in order, a resent item ignored, a gap refused naming seq.
  ASSERT_TRUE(c_->PushExecInput(*x, alice_, Data(1, "ls\n")).ok());
  ASSERT_TRUE(c_->PushExecInput(*x, alice_, Data(1, "ls\n")).ok());
  Status gap = c_->PushExecInput(*x, alice_, Data(3, "x"));
  ASSERT_FALSE(gap.ok());
  EXPECT_EQ(gap.message().rfind("seq: expected 2", 0), 0u) << gap.message();
  EXPECT_EQ(c_->PushExecInput(*x, bob_, Data(2, "rm -rf ~\n")).code(), StatusCode::kNotFound);
  protocol::ExecInputItem resize;
  resize.seq = 2;
  resize.rows = 50;
  resize.cols = 132;
  ASSERT_TRUE(c_->PushExecInput(*x, alice_, resize).ok());
  Result<protocol::ExecInput> in = c_->TakeExecInput(node, *x, 0, 0);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_EQ(in->items.size(), 2u);
  EXPECT_EQ(in->items[0].data, "ls\n");
  EXPECT_EQ(in->items[1].cols, 132);
  EXPECT_FALSE(in->hangup);
  EXPECT_TRUE(c_->TakeExecInput(node, *x, 2, 0)->items.empty());  // applied: dropped
  EXPECT_EQ(c_->TakeExecInput(NodeOf(j, 0), *x, 0, 0).status().code(), StatusCode::kNotFound);

  // Output: a resent, overlapping part is not doubled; the client's offset drops the rest.
  protocol::ExecOutput out;
  out.stdout_data = "hello";
  ASSERT_TRUE(c_->PutExecOutput(node, *x, out).ok());
  out.stdout_data = "hello world\r\n";
  Result<protocol::ExecOutputAck> ack = c_->PutExecOutput(node, *x, out);
  ASSERT_TRUE(ack.ok());
  EXPECT_EQ(ack->stdout_end, 13);
  EXPECT_FALSE(ack->full);
  out.stdout_offset = 20;
  EXPECT_EQ(c_->PutExecOutput(node, *x, out).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c_->PutExecOutput(NodeOf(j, 0), *x, out).status().code(), StatusCode::kNotFound);
  Result<ExecStreamRead> r = c_->ReadExecStream(*x, alice_, 0, 0, false, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, "hello world\r\n");
  EXPECT_EQ(r->stdout_next, 13);
  EXPECT_FALSE(r->eof);
  EXPECT_TRUE(c_->ReadExecStream(*x, alice_, 13, 0, false, 0)->stdout_data.empty());
  EXPECT_EQ(c_->ReadExecStream(*x, alice_, 5, 0, false, 0).status().code(),
            StatusCode::kInvalidArgument);  // before what it still holds
  EXPECT_EQ(c_->ReadExecStream(*x, bob_, 13, 0, false, 0).status().code(), StatusCode::kNotFound);

  // The end: exit status, the agent's eof, and a hangup for the input side.
  protocol::ExecReport end;
  end.id = *x;
  end.started = true;
  end.ended = true;
  end.exit_code = 7;
  ASSERT_TRUE(c_->ApplyEvents(node, EventBatch{node, {}, {end}}).ok());
  EXPECT_FALSE(c_->ReadExecStream(*x, alice_, 13, 0, true, 0)->eof);
  protocol::ExecOutput last;
  last.stdout_offset = 13;
  last.stdout_data = "bye\r\n";
  last.eof = true;
  ASSERT_TRUE(c_->PutExecOutput(node, *x, last).ok());
  r = c_->ReadExecStream(*x, alice_, 13, 0, true, 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stdout_data, "bye\r\n");
  EXPECT_TRUE(r->ended);
  EXPECT_TRUE(r->eof);
  EXPECT_EQ(r->exit_code, 7);
  EXPECT_TRUE(c_->TakeExecInput(node, *x, 2, 0)->hangup);
  EXPECT_EQ(c_->PushExecInput(*x, alice_, Data(3, "x")).code(), StatusCode::kFailedPrecondition);
}

// Issue 25: exec session ids were sequential, so a user could count the sessions others
// started and tell (403 against 404) whether an id existed. They come from the random
// source now, and are not handed out twice.
TEST_F(GangTest, ExecIdsComeFromTheRandomSourceAndAreNotReused) {
  std::vector<uint64_t> draws = {0,  // 0: drawn again
                                 uint64_t{0x12345678abcdef} << 11,
                                 uint64_t{0x12345678abcdef} << 11,  // in use: drawn again
                                 ~uint64_t{0}, uint64_t{7} << 11};
  size_t next = 0;
  ControllerOptions o;
  o.random = [&] { return draws.at(next++); };
  Restart(o);
  Register(2, {}, "n1");
  Register(2, {}, "n2");
  Job j = StartBoth(SubmitGang());
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    Result<int64_t> x = c_->StartExec(j.id, 1, {"true"}, alice_);
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    ids.push_back(*x);
  }
  // The top 53 bits of each draw: an exact number for every JSON reader.
  EXPECT_EQ(ids, (std::vector<int64_t>{0x12345678abcdef, (int64_t{1} << 53) - 1, 7}));
  EXPECT_EQ(next, draws.size());
  // Handed to the agent in the order they were started, whatever their ids.
  AgentWork w = c_->WaitForWork(NodeOf(j, 1), 0).value();
  ASSERT_EQ(w.exec.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(w.exec[i].id, ids[i]);
  // A source that only repeats itself is an error, not a loop.
  draws = std::vector<uint64_t>(16, uint64_t{7} << 11);
  next = 0;
  Result<int64_t> stuck = c_->StartExec(j.id, 1, {"true"}, alice_);
  EXPECT_EQ(stuck.status().code(), StatusCode::kUnavailable) << stuck.status().ToString();
}

TEST_F(GangTest, ExecIdsFromTheKernelAreNeitherSequentialNorRepeated) {
  Job j = StartBoth(SubmitGang());
  std::set<int64_t> ids;
  int64_t last = 0;
  int adjacent = 0;
  for (int i = 0; i < 200; ++i) {
    Result<int64_t> x = c_->StartExec(j.id, 1, {"true"}, alice_);
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    EXPECT_GT(*x, 0);
    EXPECT_LT(*x, int64_t{1} << 53);
    if (last != 0 && (*x - last == 1 || last - *x == 1)) ++adjacent;
    last = *x;
    ids.insert(*x);
  }
  EXPECT_EQ(ids.size(), 200u);
  EXPECT_EQ(adjacent, 0);
  // Spread over the range, not counted up from somewhere: some in each half.
  EXPECT_GT(std::count_if(ids.begin(), ids.end(), [](int64_t v) { return v < (int64_t{1} << 52); }),
            20);
  EXPECT_GT(
      std::count_if(ids.begin(), ids.end(), [](int64_t v) { return v >= (int64_t{1} << 52); }), 20);
}

// Issue 25: another user's session and one that does not exist are answered alike, to
// the byte, by every call a user can make on a session; so are a node's calls for a
// session on another node and for none.
TEST_F(GangTest, AnotherUsersExecSessionLooksLikeNoSession) {
  Job j = StartBoth(SubmitGang());
  Result<int64_t> x = c_->StartExec(j.id, 1, {"bash"}, alice_, {true, true, 30, 100});
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  int64_t missing = *x + 1;
  while (c_->WaitExec(missing, root_, false, false, 0).ok()) ++missing;
  auto answers = [&](int64_t id, const Caller& who) {
    std::vector<Status> out;
    out.push_back(c_->WaitExec(id, who, false, false, 0).status());
    out.push_back(c_->CancelExec(id, who));
    out.push_back(c_->PushExecInput(id, who, Data(1, "x")));
    out.push_back(c_->ReadExecStream(id, who, 0, 0, false, 0).status());
    return out;
  };
  const std::vector<Status> theirs = answers(*x, bob_);
  const std::vector<Status> none = answers(missing, bob_);
  ASSERT_EQ(theirs.size(), none.size());
  for (size_t i = 0; i < theirs.size(); ++i) {
    EXPECT_EQ(theirs[i].code(), StatusCode::kNotFound) << i << ": " << theirs[i].ToString();
    EXPECT_EQ(theirs[i].ToString(), none[i].ToString()) << i;
    EXPECT_EQ(theirs[i].message().find(std::to_string(*x)), std::string::npos);
  }
  // Bob's probing changed nothing: the session is alice's and still runs.
  Result<ExecSession> s = c_->WaitExec(*x, alice_, false, false, 0);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->ended);
  EXPECT_FALSE(s->hung_up);
  EXPECT_EQ(s->input_seq, 0);

  const std::string other = NodeOf(j, 0);  // the session runs on task 1's node
  Status a = c_->TakeExecInput(other, *x, 0, 0).status();
  Status b = c_->TakeExecInput(other, missing, 0, 0).status();
  EXPECT_EQ(a.code(), StatusCode::kNotFound);
  EXPECT_EQ(b.code(), StatusCode::kNotFound);
  std::string a_text = a.ToString();
  a_text.replace(a_text.find(std::to_string(*x)), std::to_string(*x).size(),
                 std::to_string(missing));
  EXPECT_EQ(a_text, b.ToString());
}

TEST_F(GangTest, AnInteractiveSessionWhoseClientGoesSilentIsHungUp) {
  Job j = StartBoth(SubmitGang());
  const std::string node = NodeOf(j, 0);
  (void)c_->WaitForWork(node, 0);
  Result<int64_t> x = c_->StartExec(j.id, 0, {"bash"}, alice_, {true, true, 24, 80});
  ASSERT_TRUE(x.ok());
  ASSERT_EQ(c_->WaitForWork(node, 0)->exec.size(), 1u);
  protocol::ExecReport started;
  started.id = *x;
  started.started = true;
  ASSERT_TRUE(c_->ApplyEvents(node, EventBatch{node, {}, {started}}).ok());
  // A client that keeps asking keeps it.
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->ReadExecStream(*x, alice_, 0, 0, true, 0).ok());
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_FALSE(c_->TakeExecInput(node, *x, 0, 0)->hangup);
  // Silent for longer than the timeout: its agent is told to stop it.
  clock_.AdvanceMicros(16'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_TRUE(c_->TakeExecInput(node, *x, 0, 0)->hangup);
  AgentWork w = c_->WaitForWork(node, 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].exec_id, *x);
  protocol::ExecReport end = started;
  end.ended = true;
  end.signal = 1;
  ASSERT_TRUE(c_->ApplyEvents(node, EventBatch{node, {}, {end}}).ok());
  Result<ExecStreamRead> r = c_->ReadExecStream(*x, alice_, 0, 0, true, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ended);
  EXPECT_EQ(r->signal, 1);
  // The job itself goes on: only `gpupool run`'s command is the job's.
  EXPECT_EQ(Get(j.id).state, JobState::kRunning);
}

TEST_F(GangTest, InteractiveSessionsAreBoundedPerUserAndInWhatTheyHold) {
  Job j = StartBoth(SubmitGang());
  const std::string node = NodeOf(j, 0);
  std::vector<int64_t> open;
  for (int i = 0; i < 12; ++i) {
    Result<int64_t> x = c_->StartExec(j.id, 0, {"bash"}, alice_, {true, true, 24, 80});
    ASSERT_TRUE(x.ok()) << i << ": " << x.status().ToString();
    open.push_back(*x);
  }
  Result<int64_t> more = c_->StartExec(j.id, 0, {"bash"}, alice_, {true, true, 24, 80});
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("12 interactive sessions open"), std::string::npos)
      << more.status().message();
  EXPECT_TRUE(c_->StartExec(j.id, 0, {"hostname"}, alice_).ok());  // plain ones are not
  // An agent that does not pause is refused past 8 MiB held for the client.
  protocol::ExecOutput out;
  out.stdout_data = std::string(protocol::kMaxExecChunk, 'x');
  for (int i = 0; i < 40; ++i) {
    Result<protocol::ExecOutputAck> ack = c_->PutExecOutput(node, open[0], out);
    if (!ack.ok()) {
      EXPECT_EQ(ack.status().code(), StatusCode::kResourceExhausted);
      EXPECT_EQ(i, 32);  // 8 MiB in 256 KiB parts are held; the next part is not
      break;
    }
    EXPECT_EQ(ack->full, out.stdout_offset + out.stdout_data.size() > (1u << 20));
    out.stdout_offset += static_cast<int64_t>(out.stdout_data.size());
    ASSERT_LT(i, 39) << "never refused";
  }
  // Once one ends, another may open.
  protocol::ExecReport end;
  end.id = open[1];
  end.ended = true;
  end.error = "gone";
  ASSERT_TRUE(c_->ApplyEvents(node, EventBatch{node, {}, {end}}).ok());
  EXPECT_TRUE(c_->StartExec(j.id, 0, {"bash"}, alice_, {true, true, 24, 80}).ok());
}

class RunJobTest : public GangTest {
 protected:
  Job SubmitRun(int tasks = 2) {
    Job j = MakeJob(2);
    j.request.tasks = tasks;
    j.interactive = "run";
    j.pty = true;
    j.command = {"python3", "-i"};
    j = c_->Submit(j, alice_).value();
    return j;
  }
};

TEST_F(RunJobTest, TheJobEndsWithItsCommandAndTakesItsStatus) {
  Job j = SubmitRun();
  Job seen;
  // Pending: no session yet, and the answer says why it waits.
  Result<int64_t> early = c_->AttachRun(j.id, alice_, 40, 120, 0, &seen);
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_EQ(*early, 0);
  EXPECT_EQ(seen.state, JobState::kPending);
  EXPECT_EQ(c_->AttachRun(j.id, bob_, 40, 120, 0, &seen).status().code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = StartBoth(Get(j.id));
  Result<int64_t> x = c_->AttachRun(j.id, alice_, 40, 120, 0, &seen);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  ASSERT_GT(*x, 0);
  EXPECT_EQ(*c_->AttachRun(j.id, alice_, 40, 120, 0, &seen), *x);  // attached once
  AgentWork w = c_->WaitForWork(NodeOf(j, 0), 0).value();
  ASSERT_EQ(w.exec.size(), 1u);
  EXPECT_EQ(w.exec[0].argv, (std::vector<std::string>{"python3", "-i"}));
  EXPECT_EQ(w.exec[0].task_index, 0);
  EXPECT_TRUE(w.exec[0].tty);
  EXPECT_EQ(w.exec[0].rows, 40);
  protocol::ExecReport end;
  end.id = *x;
  end.started = true;
  end.ended = true;
  end.exit_code = 3;
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 0), EventBatch{NodeOf(j, 0), {}, {end}}).ok());
  // The held tasks are released.
  EXPECT_EQ(c_->WaitForWork(NodeOf(j, 0), 0)->cancel.size(), 1u);
  EXPECT_EQ(c_->WaitForWork(NodeOf(j, 1), 0)->cancel.size(), 1u);
  ASSERT_TRUE(Apply({Exit(j, 0, 0, true)}, NodeOf(j, 0)).ok());
  ASSERT_TRUE(Apply({Exit(j, 1, 0, true)}, NodeOf(j, 1)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kFailed);
  EXPECT_EQ(done.exit_code, 3);
  EXPECT_EQ(done.reason, "the command exited with code 3");
  // A late attach finds the session and its end; then the job's end.
  EXPECT_EQ(*c_->AttachRun(j.id, alice_, 40, 120, 0, &seen), *x);
}

TEST_F(RunJobTest, ACommandThatSucceedsMakesTheJobSucceed) {
  Job j = SubmitRun(1);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}, NodeOf(j, 0)).ok());
  Job seen;
  Result<int64_t> x = c_->AttachRun(j.id, alice_, 0, 0, 0, &seen);
  ASSERT_TRUE(x.ok() && *x > 0);
  (void)c_->WaitForWork(NodeOf(j, 0), 0);
  protocol::ExecReport end;
  end.id = *x;
  end.started = true;
  end.ended = true;
  end.exit_code = 0;
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 0), EventBatch{NodeOf(j, 0), {}, {end}}).ok());
  ASSERT_TRUE(Apply({Exit(j, 0, 0, true)}, NodeOf(j, 0)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kSucceeded) << done.reason;
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_TRUE(done.command_ended);
}

TEST_F(RunJobTest, AJobNobodyAttachesToIsCancelledWithAReason) {
  Job j = SubmitRun();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = StartBoth(Get(j.id));
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_FALSE(Get(j.id).cancel_requested);
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_TRUE(Get(j.id).cancel_requested);
  ASSERT_TRUE(Apply({Exit(j, 0, 0, true)}, NodeOf(j, 0)).ok());
  ASSERT_TRUE(Apply({Exit(j, 1, 0, true)}, NodeOf(j, 1)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kCancelled);
  EXPECT_NE(done.reason.find("no terminal attached within 15 s"), std::string::npos) << done.reason;
}

TEST_F(RunJobTest, TheClientGoingAwayEndsTheJobWithTheReason) {
  Job j = SubmitRun(1);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}, NodeOf(j, 0)).ok());
  Job seen;
  const int64_t x = c_->AttachRun(j.id, alice_, 0, 0, 0, &seen).value();
  (void)c_->WaitForWork(NodeOf(j, 0), 0);
  clock_.AdvanceMicros(16'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  protocol::ExecReport end;
  end.id = x;
  end.started = true;
  end.ended = true;
  end.signal = 1;
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 0), EventBatch{NodeOf(j, 0), {}, {end}}).ok());
  ASSERT_TRUE(Apply({Exit(j, 0, 0, true)}, NodeOf(j, 0)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kFailed);
  EXPECT_EQ(done.signal, 1);
  EXPECT_NE(done.reason.find("its terminal went away"), std::string::npos) << done.reason;
}

TEST_F(RunJobTest, AllocHoldsWithoutACommandAndBadCombinationsAreRefused) {
  Job a = MakeJob(1);
  a.interactive = "alloc";
  a.command.clear();
  a = c_->Submit(a, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kStarted)}, NodeOf(a, 0)).ok());
  Job seen;
  Result<int64_t> x = c_->AttachRun(a.id, alice_, 0, 0, 0, &seen);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(*x, 0);  // no command: gpupool exec enters it
  EXPECT_EQ(seen.state, JobState::kRunning);
  Job batch = c_->Submit(MakeJob(1), alice_).value();
  Result<int64_t> not_run = c_->AttachRun(batch.id, alice_, 0, 0, 0, &seen);
  ASSERT_FALSE(not_run.ok());
  EXPECT_NE(not_run.status().message().find("gpupool exec --job ID --pty"), std::string::npos);
  // Its tasks hold the allocation past the sweep (no command to attach).
  clock_.AdvanceMicros(60'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_FALSE(Get(a.id).cancel_requested);

  auto refused = [&](Job j, const std::string& field) {
    Result<Job> r = c_->Submit(j, alice_);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().message().rfind(field + ":", 0), 0u) << r.status().message();
  };
  Job bad = MakeJob(1);
  bad.interactive = "later";
  refused(bad, "interactive");
  bad = MakeJob(1);
  bad.pty = true;
  refused(bad, "pty");
  bad = MakeJob(1);
  bad.interactive = "alloc";
  refused(bad, "command");  // alloc runs no command
  bad = MakeJob(1);
  bad.interactive = "run";
  bad.mpi = true;
  refused(bad, "mpi");
}

}  // namespace
}  // namespace gpupool::controller
