// Agents' event batches written together (issue 31: Controller::ApplyEvents' group commit).
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "controller/controller.h"
#include "store/forwarding_store.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpupool::controller {
namespace {

using jobs::Job;
using jobs::JobState;

// A store that counts the job writes (transactions) and the jobs each one that held
// wrote, and holds at a gate the writes that end a job (state kSucceeded) while closed.
class CountingStore final : public store::ForwardingStore {
 public:
  explicit CountingStore(std::unique_ptr<store::Store> inner) : ForwardingStore(std::move(inner)) {}
  void Close() {
    std::lock_guard l(m_);
    open_ = false;
  }
  void Open() {
    std::lock_guard l(m_);
    open_ = true;
    cv_.notify_all();
  }
  // Lets one held write (or the next) through while closed.
  void PassOne() {
    std::lock_guard l(m_);
    ++passes_;
    cv_.notify_all();
  }
  void WaitUntilHeld(int n) {
    std::unique_lock l(m_);
    cv_.wait(l, [&] { return held_ >= n; });
  }
  // From now on a write of job `id` fails, as a database that cannot write would.
  void FailWritesOf(int64_t id) {
    std::lock_guard l(m_);
    fail_id_ = id;
  }
  int writes() {
    std::lock_guard l(m_);
    return writes_;
  }
  int conflicts() {
    std::lock_guard l(m_);
    return conflicts_;
  }
  // How many writes that held moved job `id` to `state`.
  int Wrote(int64_t id, JobState state) {
    std::lock_guard l(m_);
    return written_[{id, state}];
  }

  Status UpdateJobs(const std::vector<JobUpdate>& updates,
                    std::vector<store::JobConflict>* conflicts) override {
    std::unique_lock l(m_);
    ++writes_;
    const bool gated = std::any_of(updates.begin(), updates.end(), [](const JobUpdate& u) {
      return u.job.state == JobState::kSucceeded;
    });
    if (gated) {
      ++held_;
      cv_.notify_all();
      cv_.wait(l, [&] { return open_ || passes_ > 0; });
      if (!open_) --passes_;
    }
    if (std::any_of(updates.begin(), updates.end(),
                    [&](const JobUpdate& u) { return u.job.id == fail_id_; })) {
      return Status::Unavailable("the database cannot write job " + std::to_string(fail_id_));
    }
    l.unlock();
    Status s = inner()->UpdateJobs(updates, conflicts);
    l.lock();
    if (!s.ok()) ++conflicts_;
    for (const JobUpdate& u : updates) {
      if (s.ok()) ++written_[{u.job.id, u.job.state}];
    }
    return s;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = true;
  int passes_ = 0;
  int held_ = 0;
  int writes_ = 0;
  int conflicts_ = 0;
  int64_t fail_id_ = -1;
  std::map<std::pair<int64_t, JobState>, int> written_;
};

// Three one-GPU nodes, each running one job.
class ControllerEventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = std::make_unique<CountingStore>(store::OpenSqliteStore(":memory:").value());
    store_ = s.get();
    owned_ = std::move(s);
    c_ = Controller::Create(owned_.get(), &clock_, {}).value();
    for (const std::string& node : nodes_) {
      protocol::Registration r;
      r.node = node;
      gpu::GpuInfo g;
      g.vendor = gpu::Vendor::kNvidia;
      g.name = "NVIDIA A100-SXM4-80GB";
      g.uuid = "GPU-" + node;
      g.pci_bus_id = "0000:01:00.0";
      g.memory_total_bytes = uint64_t{80} << 30;
      g.compute_capability = gpu::ComputeCapability{8, 0};
      g.device_nodes = {"/dev/nvidia0"};
      r.info.hostname = node;
      r.info.gpus.push_back(g);
      r.version = protocol::kVersion;
      r.cpu_milli = 64'000;
      r.memory_mib = 256'000;
      ASSERT_TRUE(c_->RegisterNode(r, "").ok());
    }
    for (size_t k = 0; k < nodes_.size(); ++k) {
      Job j;
      j.command = {"true"};
      j.request.gpus = 1;
      j.request.cpu_milli = 100;
      ASSERT_TRUE(c_->Submit(j, alice_).ok());
    }
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    store::JobFilter active;
    active.active_only = true;
    jobs_ = c_->List(active, root_).value();
    ASSERT_EQ(jobs_.size(), nodes_.size());
    for (const Job& j : jobs_) {
      ASSERT_EQ(j.state, JobState::kAssigned);
      ASSERT_TRUE(Report(j, protocol::EventKind::kStarted).ok());
    }
  }
  Status Report(const Job& j, protocol::EventKind kind) {
    protocol::Event e;
    e.job_id = j.id;
    e.attempt = j.attempt;
    e.kind = kind;
    e.time_us = clock_.NowMicros();
    if (kind == protocol::EventKind::kExited) e.exit_code = 0;
    const std::string& node = j.placement.at(0).node;
    return c_->ApplyEvents(node, EventBatch{node, {e}, {}});
  }
  JobState StoredState(int64_t id) { return store_->GetJob(id).value().state; }

  ManualClock clock_{1'700'000'000'000'000};
  std::unique_ptr<store::Store> owned_;
  CountingStore* store_ = nullptr;
  std::unique_ptr<Controller> c_;
  std::vector<std::string> nodes_ = {"n1", "n2", "n3"};
  std::vector<Job> jobs_;
  Caller alice_{"alice", 1000, 1000, false};
  Caller root_{"root", 0, 0, true};
};

// The batches that arrive while one is written are written after it in one transaction;
// each agent is answered once its own events are stored, and each event is applied once.
TEST_F(ControllerEventsTest, BatchesThatArriveWhileOneIsWrittenAreWrittenTogether) {
  store_->Close();
  const int before = store_->writes();
  std::vector<Status> answers(jobs_.size(), Status::Internal("not answered"));
  std::vector<std::thread> agents;
  agents.emplace_back([&] { answers[0] = Report(jobs_[0], protocol::EventKind::kExited); });
  store_->WaitUntilHeld(1);  // the first batch's write is in flight
  for (size_t k = 1; k < jobs_.size(); ++k) {
    agents.emplace_back([&, k] { answers[k] = Report(jobs_[k], protocol::EventKind::kExited); });
  }
  c_->WaitForEventBatches(jobs_.size() - 1);
  store_->Open();
  for (std::thread& t : agents) t.join();
  EXPECT_EQ(store_->writes() - before, 2);  // the first, then the two others together
  for (size_t k = 0; k < jobs_.size(); ++k) {
    EXPECT_TRUE(answers[k].ok()) << answers[k].ToString();
    EXPECT_EQ(StoredState(jobs_[k].id), JobState::kSucceeded);
    EXPECT_EQ(store_->Wrote(jobs_[k].id, JobState::kSucceeded), 1);
  }
  EXPECT_EQ(c_->EventBatchesWaiting(), 0u);
  EXPECT_TRUE(c_->VerifyIndexes().ok());
}

// A job of a group changed by another writer between the group's steps and its write
// (a cancel): the write's compare-and-set fails for it, and the group is stepped again
// and written once that change is in; the other batches' events are applied once, and
// each agent hears its own answer.
TEST_F(ControllerEventsTest, AFailedCompareAndSetInAGroupIsOnlyItsJobs) {
  store_->Close();
  const int before = store_->writes();
  std::vector<Status> answers(jobs_.size(), Status::Internal("not answered"));
  std::vector<std::thread> agents;
  agents.emplace_back([&] { answers[0] = Report(jobs_[0], protocol::EventKind::kExited); });
  store_->WaitUntilHeld(1);
  for (size_t k = 1; k < jobs_.size(); ++k) {
    agents.emplace_back([&, k] { answers[k] = Report(jobs_[k], protocol::EventKind::kExited); });
  }
  c_->WaitForEventBatches(jobs_.size() - 1);
  store_->PassOne();         // the first batch's write
  store_->WaitUntilHeld(2);  // the group's write, stepped, is in flight
  const Result<Job> cancelled = c_->Cancel(jobs_[1].id, root_);  // not held: lands first
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  store_->Open();
  for (std::thread& t : agents) t.join();
  // The first alone; the group's, refused for job 1; the group again; the cancel.
  EXPECT_EQ(store_->writes() - before, 4);
  EXPECT_EQ(store_->conflicts(), 1);
  for (size_t k = 0; k < jobs_.size(); ++k) {
    EXPECT_TRUE(answers[k].ok()) << k << ": " << answers[k].ToString();
  }
  for (size_t k : {size_t{0}, size_t{2}}) {
    EXPECT_EQ(StoredState(jobs_[k].id), JobState::kSucceeded);
    EXPECT_EQ(store_->Wrote(jobs_[k].id, JobState::kSucceeded), 1);
  }
  EXPECT_TRUE(jobs::IsTerminal(StoredState(jobs_[1].id)));
  EXPECT_TRUE(c_->VerifyIndexes().ok());
}

// A group whose write fails (the store's error, not a compare-and-set) is written again
// batch by batch: only the batch the failure is about hears it; the others are applied.
TEST_F(ControllerEventsTest, AGroupWhoseWriteFailsIsWrittenBatchByBatch) {
  store_->Close();
  const int before = store_->writes();
  std::vector<Status> answers(jobs_.size(), Status::Internal("not answered"));
  std::vector<std::thread> agents;
  agents.emplace_back([&] { answers[0] = Report(jobs_[0], protocol::EventKind::kExited); });
  store_->WaitUntilHeld(1);
  for (size_t k = 1; k < jobs_.size(); ++k) {
    agents.emplace_back([&, k] { answers[k] = Report(jobs_[k], protocol::EventKind::kExited); });
  }
  c_->WaitForEventBatches(jobs_.size() - 1);
  store_->FailWritesOf(jobs_[1].id);
  store_->Open();
  for (std::thread& t : agents) t.join();
  // The first alone; the group's, failed; then each of its batches alone.
  EXPECT_EQ(store_->writes() - before, 4);
  EXPECT_TRUE(answers[0].ok()) << answers[0].ToString();
  EXPECT_EQ(answers[1].code(), StatusCode::kUnavailable) << answers[1].ToString();
  EXPECT_TRUE(answers[2].ok()) << answers[2].ToString();
  EXPECT_EQ(StoredState(jobs_[1].id), JobState::kRunning);
  EXPECT_EQ(c_->Get(jobs_[1].id, root_).value().state, JobState::kRunning);
  for (size_t k : {size_t{0}, size_t{2}}) {
    EXPECT_EQ(StoredState(jobs_[k].id), JobState::kSucceeded);
    EXPECT_EQ(store_->Wrote(jobs_[k].id, JobState::kSucceeded), 1);
  }
  EXPECT_TRUE(c_->VerifyIndexes().ok());
}

}  // namespace
}  // namespace gpupool::controller
