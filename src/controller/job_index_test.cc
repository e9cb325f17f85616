// JobIndex (job_index.h): the controller's lookups over its active jobs stay what a walk
// of them makes through random sequences of every lifecycle transition: submissions
// (arrays, dependencies), starts, ends, cancels, holds, requeues, preemptions, node
// losses, re-registrations and restarts (Load, as a standby taking over does).
#include "controller/job_index.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/controller.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpupool::controller {
namespace job_index_test {

using jobs::Job;
using jobs::JobState;

TEST(JobIndexTest, RandomUpdatesMatchAWalk) {
  std::mt19937 rng(7);
  JobIndex index;
  std::map<int64_t, Job> active;
  const JobState states[] = {JobState::kPending, JobState::kAssigned, JobState::kRunning};
  for (int step = 0; step < 3000; ++step) {
    const int64_t id = 1 + static_cast<int64_t>(rng() % 60);
    if (rng() % 4 == 0) {
      active.erase(id);
      index.Update(id, nullptr);
    } else {
      Job j;
      j.id = id;
      j.user = "u" + std::to_string(rng() % 3);  // a job's user never changes in a pool,
      j.state = states[rng() % 3];               // but the index must not rely on it
      j.array_id = rng() % 3 == 0 ? 1 + static_cast<int64_t>(rng() % 5) : 0;
      if (rng() % 3 == 0) j.dependencies.push_back({static_cast<int64_t>(rng() % 60)});
      j.time_limit_s = rng() % 2 == 0 ? 60 : 0;
      if (rng() % 3 == 0) j.interactive = "run";
      if (rng() % 3 == 0) j.fences.push_back({"n1", static_cast<int64_t>(rng() % 100)});
      for (int t = 0, n = static_cast<int>(rng() % 3); t < n; ++t) {
        jobs::TaskPlacement p;
        p.node = "n" + std::to_string(rng() % 4);  // two tasks may share a node
        j.placement.push_back(p);
      }
      active[id] = j;
      index.Update(id, &j);
    }
    ASSERT_TRUE(index.Verify(active).ok())
        << "step " << step << ": " << index.Verify(active).ToString();
  }
  EXPECT_TRUE(index.OnNode("no such node").empty());
  EXPECT_TRUE(index.OfUser("nobody").empty());
  EXPECT_TRUE(index.ArrayElements(12345).empty());
  for (const auto& [id, j] : active) {
    EXPECT_EQ(index.PendingFenced().count(id) != 0,
              j.state == JobState::kPending && !j.fences.empty());
  }
}

TEST(JobIndexTest, VerifyNamesWhatAWalkDisagreesWith) {
  JobIndex index;
  std::map<int64_t, Job> active;
  Job j;
  j.id = 4;
  j.user = "alice";
  j.state = JobState::kRunning;
  j.placement.resize(1);
  j.placement[0].node = "n1";
  active[4] = j;
  index.Update(4, &j);
  ASSERT_TRUE(index.Verify(active).ok());
  active[4].placement[0].node = "n2";  // changed without an Update
  Status s = index.Verify(active);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("of node n1"), std::string::npos) << s.ToString();
  active[4] = j;
  active[4].time_limit_s = 60;
  EXPECT_NE(index.Verify(active).message().find("with a time limit"), std::string::npos);
  active[4] = j;
  active[4].interactive = "run";
  EXPECT_NE(index.Verify(active).message().find("`gpupool run` jobs"), std::string::npos);
  active.erase(4);
  EXPECT_NE(index.Verify(active).message().find("1 jobs kept, 0 active"), std::string::npos);
}

// A controller on a real SQLite store with four nodes of four GPUs, driven at random the
// way agents, users, admins and time drive it.
class ControllerIndexTest : public ::testing::Test {
 protected:
  static constexpr int kNodes = 4;
  static constexpr int64_t kTimeoutUs = 10'000'000;

  void SetUp() override {
    // The process's id: ctest runs each test in a process of its own, two at once, and
    // two started in the same millisecond got the same random seed, one store file, and
    // "table jobs already exists" (a CI run, 2026-11-30).
    path_ = ::testing::TempDir() + "job_index_test_" + std::to_string(::getpid()) + "_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".db";
    std::remove(path_.c_str());
    store_ = store::OpenSqliteStore(path_).value();
    Restart();
    for (int n = 0; n < kNodes; ++n) Register(n);
  }
  void TearDown() override {
    c_.reset();
    store_.reset();
    std::remove(path_.c_str());
  }
  // A new controller on the same store: what a restart, or a standby taking over, loads.
  void Restart() {
    c_.reset();
    ControllerOptions o;
    o.node_timeout_us = kTimeoutUs;
    o.preempt_min_runtime_s = 0;
    o.preempt_grace_s = 1;
    c_ = Controller::Create(store_.get(), &clock_, o).value();
  }
  static std::string Name(int n) { return "n" + std::to_string(n); }
  // (Re-)registers node n; `keep` says whether its agent lists what it runs (else its
  // started tasks are gone: AgentForgot).
  void Register(int n, bool keep = false) {
    protocol::Registration r;
    r.node = Name(n);
    r.info.hostname = r.node;
    for (int i = 0; i < 4; ++i) {
      gpu::GpuInfo g;
      g.vendor = gpu::Vendor::kNvidia;
      g.index = i;
      g.name = "NVIDIA A100-SXM4-80GB";
      g.uuid = "GPU-" + r.node + "-" + std::to_string(i);
      g.memory_total_bytes = uint64_t{80} << 30;
      r.info.gpus.push_back(g);
    }
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    if (keep) {
      for (const Job& j : Active()) {
        for (size_t t = 0; t < j.placement.size() && t < j.tasks.size(); ++t) {
          if (j.placement[t].node == r.node && j.tasks[t].start_time_us != 0 && !j.tasks[t].ended) {
            r.running.push_back({j.id, static_cast<int>(t), j.attempt});
          }
        }
      }
    }
    ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  }
  std::vector<Job> Active() {
    store::JobFilter f;
    f.active_only = true;
    return c_->List(f, root_).value();
  }
  std::vector<Job> InState(JobState s) {
    std::vector<Job> out;
    for (const Job& j : Active()) {
      if (j.state == s) out.push_back(j);
    }
    return out;
  }
  // One of `v` at random (a copy: `v` is often a temporary).
  template <typename T>
  std::optional<T> Pick(const std::vector<T>& v) {
    if (v.empty()) return std::nullopt;
    return v[rng_() % v.size()];
  }
  void Submit() {
    const Caller& who = rng_() % 2 == 0 ? alice_ : bob_;
    Job j;
    j.command = {"true"};
    j.request.gpus = 1 + static_cast<int>(rng_() % 3);
    j.request.cpu_milli = 100;
    j.request.tasks = rng_() % 5 == 0 ? 2 : 1;  // a gang may span nodes
    j.priority = static_cast<int>(rng_() % 3) * 10;
    j.preemptible = rng_() % 3 == 0;
    if (limits_rng_() % 3 == 0) j.time_limit_s = 3600;  // what the time-limit sweep walks
    if (rng_() % 6 == 0) j.array = "0-2";
    if (rng_() % 3 == 0 && !submitted_[who.user].empty()) {
      const std::vector<int64_t>& mine = submitted_[who.user];
      const auto kinds = {jobs::Dependency::Kind::kAfterOk, jobs::Dependency::Kind::kAfterAny,
                          jobs::Dependency::Kind::kAfterNotOk};
      j.dependencies.push_back({mine[rng_() % mine.size()], *(kinds.begin() + rng_() % 3)});
    }
    Result<Job> s = c_->Submit(j, who);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    submitted_[who.user].push_back(s->id);
  }
  // Agent reports for every task of `j` on its nodes: started, or ended.
  void Report(const Job& j, protocol::EventKind kind) {
    std::map<std::string, std::vector<Event>> by_node;
    for (size_t t = 0; t < j.placement.size(); ++t) {
      Event e;
      e.job_id = j.id;
      e.attempt = j.attempt;
      e.task_index = static_cast<int>(t);
      e.kind = kind;
      e.time_us = clock_.NowMicros();
      e.exit_code = rng_() % 3 == 0 ? 1 : 0;
      e.cancelled = j.cancel_requested;
      by_node[j.placement[t].node].push_back(e);
    }
    for (auto& [node, events] : by_node) {
      // Refusals (a job changed meanwhile) are the lifecycle's business, not the index's.
      (void)c_->ApplyEvents(node, EventBatch{node, std::move(events), {}});
    }
  }
  // Node n stops polling past the timeout while the others poll: its jobs are lost.
  void LoseNode(int n) {
    clock_.AdvanceMicros(kTimeoutUs + 1);
    for (int m = 0; m < kNodes; ++m) {
      if (m != n) (void)c_->WaitForWork(Name(m), 0);
    }
    ASSERT_TRUE(c_->SweepNodes().ok());
    lost_[n] = true;
  }
  void Step() {
    switch (rng_() % 13) {
      case 0:
      case 1:
        Submit();
        break;
      case 2:
      case 3:
        ASSERT_TRUE(c_->ScheduleOnce().ok());  // starts, preemptions, dependency ends
        break;
      case 4:
      case 5:
        if (std::optional<Job> j = Pick(InState(JobState::kAssigned))) {
          Report(*j, protocol::EventKind::kStarted);
        }
        break;
      case 6:
        if (std::optional<Job> j = Pick(InState(JobState::kRunning))) {
          Report(*j, protocol::EventKind::kExited);
        }
        break;
      case 7:
        if (std::optional<Job> j = Pick(Active())) (void)c_->Cancel(j->id, root_);
        break;
      case 8:
        if (std::optional<Job> j = Pick(InState(JobState::kPending))) {
          (void)c_->Hold(j->id, root_, rng_() % 2 == 0);
        }
        break;
      case 9:
        LoseNode(static_cast<int>(rng_() % kNodes));
        break;
      case 10: {
        const int n = static_cast<int>(rng_() % kNodes);
        Register(n, /*keep=*/!lost_[n] && rng_() % 2 == 0);
        lost_[n] = false;
        break;
      }
      case 11:
        for (int n = 0; n < kNodes; ++n) (void)c_->WaitForWork(Name(n), 0);  // orders, stops
        clock_.AdvanceMicros(static_cast<int64_t>(rng_() % 3'000'000));
        break;
      case 12:
        if (rng_() % 4 == 0) Restart();
        break;
    }
  }

  ManualClock clock_{1'700'000'000'000'000};
  std::string path_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
  std::mt19937 rng_{11};
  // Apart from rng_, whose sequence (which reaches a preemption) stays as it was.
  std::mt19937 limits_rng_{5};
  std::map<std::string, std::vector<int64_t>> submitted_;
  std::map<int, bool> lost_;
  Caller alice_{"alice", 1000, 1000, false};
  Caller bob_{"bob", 1001, 1001, false};
  Caller root_{"root", 0, 0, true};
};

TEST_F(ControllerIndexTest, RandomLifecyclesKeepEveryIndexExact) {
  std::map<JobState, int> seen;  // the sequence went through every state
  int preempted = 0;
  for (int step = 0; step < 1500; ++step) {
    ASSERT_NO_FATAL_FAILURE(Step());
    Status v = c_->VerifyIndexes();
    ASSERT_TRUE(v.ok()) << "after step " << step << ": " << v.ToString();
    for (const Job& j : Active()) {
      ++seen[j.state];
      if (j.preempted_by != 0) ++preempted;
    }
  }
  EXPECT_GT(seen[JobState::kPending], 0);
  EXPECT_GT(seen[JobState::kAssigned], 0);
  EXPECT_GT(seen[JobState::kRunning], 0);
  EXPECT_GT(preempted, 0);
}

// What the index serves: a user's list holds exactly that user's active jobs, in the
// order (and with the limit) the walk gave.
TEST_F(ControllerIndexTest, AUsersListIsTheirActiveJobs) {
  for (int i = 0; i < 40; ++i) Submit();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  std::vector<int64_t> alices;
  for (const Job& j : Active()) {
    if (j.user == "alice") alices.push_back(j.id);
  }
  ASSERT_FALSE(alices.empty());
  store::JobFilter f;
  f.active_only = true;
  auto ids = [&] {
    std::vector<int64_t> out;
    Result<std::vector<Job>> listed = c_->List(f, alice_);
    EXPECT_TRUE(listed.ok()) << listed.status().ToString();
    if (listed.ok()) {
      for (const Job& j : *listed) out.push_back(j.id);
    }
    return out;
  };
  EXPECT_EQ(ids(), alices);
  f.limit = 3;
  std::vector<int64_t> listed = ids();
  std::vector<int64_t> newest(alices.rbegin(),
                              alices.rbegin() + std::min<size_t>(3, alices.size()));
  EXPECT_EQ(listed, newest);
}

// Array lookups read the index of each array's elements: job 0 is no array, and a plain
// job (array_id 0, array_index 0) is no element of it. (The walk they replace matched
// array_id == 0, so `0_0` named the oldest active plain job.)
TEST_F(ControllerIndexTest, NoJobIsAnElementOfArrayZero) {
  Submit();
  Job plain;
  plain.command = {"true"};
  plain.request.gpus = 1;
  ASSERT_TRUE(c_->Submit(plain, alice_).ok());
  EXPECT_TRUE(c_->ArrayElements(0).empty());
  Result<int64_t> e = c_->ArrayElementId(0, 0, root_);
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound) << (e.ok() ? "found a job" : "");
}

}  // namespace job_index_test
}  // namespace gpupool::controller
