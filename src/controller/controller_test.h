// The fixtures shared by the controller's tests (controller_test.cc and the
// controller_*_test.cc beside it that include this): a Controller over an in-memory SQLite
// store under a manual clock (ControllerTest), the same on a store whose writes wait at a
// gate (GatedControllerTest), and two 2-GPU nodes for gangs (GangTest).
#pragma once

#include <gtest/gtest.h>
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
#include "controller/controller.h"
#include "store/forwarding_store.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpupool::controller::controller_test {

using jobs::Job;
using jobs::JobState;

inline gpu::NodeInfo MakeNode(int gpus, const std::string& model = "NVIDIA A100-SXM4-80GB") {
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

inline Job MakeJob(int gpus, int milli = 1000) {
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
  // Every stored node's agent polls once: a restarted controller places work only on
  // nodes heard from since (ARestartedControllerPlacesNothingOnANodeUntilItsAgentIsHeard).
  void HearEveryNode() {
    for (const NodeView& n : c_->Nodes()) ASSERT_TRUE(c_->WaitForWork(n.name, 0).ok()) << n.name;
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
  // The same, false after `timeout`: a write expected at the gate that went elsewhere.
  bool WaitUntilHeldFor(std::chrono::milliseconds timeout, int n = 1) {
    std::unique_lock l(m_);
    return cv_.wait_for(l, timeout, [&] { return held_ >= n; });
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

// Returns a 1-GPU job of `who` RUNNING on n1.
inline Job StartOne(Controller* c, const Caller& who, ManualClock& clock) {
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

}  // namespace gpupool::controller::controller_test
