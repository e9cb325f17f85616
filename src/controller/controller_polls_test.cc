// Agents' long polls without a thread each (Controller::AwaitWork, issue 31): answered at
// once when there is work, by the notification of new work, or at their deadline by the
// one poll thread on the injected clock; forgotten when cancelled; answered when the
// controller stops. And PollWaiters, its bookkeeping.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include "common/clock.h"
#include "controller/controller.h"
#include "controller/poll_waiters.h"
#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

int ThreadCount() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// What the polls' callbacks got, by poll number.
class Answers {
 public:
  Controller::WorkCallback For(int n) {
    return [this, n](Result<AgentWork> work) {
      std::lock_guard lock(mu_);
      EXPECT_EQ(got_.count(n), 0u) << "poll " << n << " answered twice";
      got_.emplace(n, std::move(work));
      cv_.notify_all();
    };
  }
  // Waits (real time) until `count` polls are answered.
  bool WaitFor(size_t count) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return got_.size() >= count; });
  }
  size_t size() {
    std::lock_guard lock(mu_);
    return got_.size();
  }
  std::optional<Result<AgentWork>> Of(int n) {
    std::lock_guard lock(mu_);
    auto it = got_.find(n);
    if (it == got_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Result<AgentWork>> got_;
};

class PollsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    ControllerOptions options;
    options.node_timeout_us = 120'000'000;  // polls may wait their full 60 s
    c_ = Controller::Create(store_.get(), &clock_, options).value();
  }
  void Register(const std::string& node, int gpus) {
    protocol::Registration r;
    r.node = node;
    r.info.hostname = node;
    for (int i = 0; i < gpus; ++i) {
      gpu::GpuInfo g;
      g.vendor = gpu::Vendor::kNvidia;
      g.index = i;
      g.name = "NVIDIA A100-SXM4-80GB";
      g.uuid = "GPU-" + node + "-" + std::to_string(i);
      g.memory_total_bytes = uint64_t{80} << 30;
      g.compute_capability = gpu::ComputeCapability{8, 0};
      r.info.gpus.push_back(g);
    }
    r.version = protocol::kVersion;
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  }
  jobs::Job Submit() {
    jobs::Job j;
    j.command = {"true"};
    j.request.gpus = 1;
    j.request.gpu_milli = 1000;
    j.request.cpu_milli = 100;
    return c_->Submit(j, Caller{"alice", 1000, 1000, false}).value();
  }

  ManualClock clock_{1'700'000'000'000'000};
  Answers answers_;  // outlives the controller, which answers what still waits as it stops
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(PollsTest, AnsweredAtOnceWhenThereIsWorkOrNoSuchNode) {
  Register("n1", 1);
  Submit();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(c_->AwaitWork("n1", 30'000, answers_.For(0)), 0u);
  ASSERT_EQ(answers_.size(), 1u);  // on this thread, before AwaitWork returned
  EXPECT_EQ(answers_.Of(0)->value().launch.size(), 1u);
  EXPECT_EQ(c_->AwaitWork("nope", 30'000, answers_.For(1)), 0u);
  EXPECT_EQ(answers_.Of(1)->status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c_->AwaitWork("n1", 0, answers_.For(2)), 0u);  // no wait asked
  EXPECT_TRUE(answers_.Of(2)->value().empty());
  EXPECT_EQ(c_->WaitingPolls(), 0u);
}

// A waiting poll is answered by the notification of work for its node, and only its
// node's: the other node's poll waits on.
TEST_F(PollsTest, TheNotificationAnswersThePollOfItsNode) {
  Register("n1", 1);
  Register("n2", 0);
  EXPECT_NE(c_->AwaitWork("n1", 30'000, answers_.For(1)), 0u);
  EXPECT_NE(c_->AwaitWork("n2", 30'000, answers_.For(2)), 0u);
  EXPECT_EQ(c_->WaitingPolls(), 2u);
  Submit();
  ASSERT_TRUE(c_->ScheduleOnce().ok());  // places it on n1, whose agent is told
  ASSERT_TRUE(answers_.WaitFor(1));
  EXPECT_EQ(answers_.Of(1)->value().launch.size(), 1u);
  EXPECT_FALSE(answers_.Of(2).has_value());
  EXPECT_EQ(c_->WaitingPolls(), 1u);
}

// Hundreds of waiting polls cost one thread, and each ends at its own deadline, on the
// injected clock, with nothing; an order not acknowledged is sent again after
// kResendAfterUs to a poll waiting meanwhile.
TEST_F(PollsTest, DeadlinesRunFromOneThreadOnTheClock) {
  constexpr int kNodes = 300;
  for (int i = 0; i < kNodes; ++i) Register("n" + std::to_string(i), 0);
  const int threads_before = ThreadCount();
  for (int i = 0; i < kNodes; ++i) {
    // Half wait 2 s, half 20 s.
    EXPECT_NE(c_->AwaitWork("n" + std::to_string(i), i % 2 == 0 ? 2'000 : 20'000, answers_.For(i)),
              0u);
  }
  EXPECT_LE(ThreadCount(), threads_before + 1);  // the poll thread
  EXPECT_EQ(c_->WaitingPolls(), static_cast<size_t>(kNodes));
  clock_.AdvanceMicros(2'000'000);
  ASSERT_TRUE(answers_.WaitFor(kNodes / 2));
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_EQ(answers_.Of(i).has_value(), i % 2 == 0) << i;
    if (i % 2 == 0) {
      EXPECT_TRUE(answers_.Of(i)->value().empty()) << i;
    }
  }
  clock_.AdvanceMicros(18'000'000);
  ASSERT_TRUE(answers_.WaitFor(kNodes));
  EXPECT_EQ(c_->WaitingPolls(), 0u);
}

TEST_F(PollsTest, AnOrderNotAcknowledgedIsSentAgainToAWaitingPoll) {
  Register("n1", 1);
  Submit();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(c_->AwaitWork("n1", 30'000, answers_.For(0)), 0u);  // the launch, once
  ASSERT_NE(c_->AwaitWork("n1", 30'000, answers_.For(1)), 0u);  // sent just now: waits
  clock_.AdvanceMicros(5'100'000);                              // past kResendAfterUs
  ASSERT_TRUE(answers_.WaitFor(2));
  EXPECT_EQ(answers_.Of(1)->value().launch.size(), 1u);
}

TEST_F(PollsTest, ACancelledWaitIsNeverAnswered) {
  Register("n1", 1);
  const uint64_t ticket = c_->AwaitWork("n1", 2'000, answers_.For(0));
  ASSERT_NE(ticket, 0u);
  c_->CancelWorkWait(ticket);
  c_->CancelWorkWait(ticket);  // idempotent
  EXPECT_EQ(c_->WaitingPolls(), 0u);
  Submit();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  clock_.AdvanceMicros(3'000'000);
  // Its node's notification and its deadline passed: a poll now gets the launch, the
  // cancelled one nothing.
  EXPECT_EQ(c_->AwaitWork("n1", 2'000, answers_.For(1)), 0u);
  EXPECT_EQ(answers_.Of(1)->value().launch.size(), 1u);
  EXPECT_FALSE(answers_.Of(0).has_value());
}

TEST_F(PollsTest, StopAnswersWaitingPollsAndLaterOnesAtOnce) {
  Register("n1", 1);
  ASSERT_NE(c_->AwaitWork("n1", 30'000, answers_.For(0)), 0u);
  c_->Stop();
  ASSERT_EQ(answers_.size(), 1u);  // before Stop returned
  EXPECT_TRUE(answers_.Of(0)->value().empty());
  EXPECT_EQ(c_->AwaitWork("n1", 30'000, answers_.For(1)), 0u);
  EXPECT_EQ(c_->WaitingPolls(), 0u);
}

TEST(PollWaitersTest, DueByTimeAndByDirtyNode) {
  PollWaiters w;
  auto none = [](Result<protocol::Work>) {};
  const uint64_t a = w.Add("a", 100, 50, none);
  const uint64_t b = w.Add("b", 200, 300, none);  // due no later than its deadline
  const uint64_t a2 = w.Add("a", 400, 400, none);
  EXPECT_EQ(w.NextDue(), 50);
  EXPECT_TRUE(w.TakeDue(10).empty());
  w.MarkDirty("a");
  w.MarkDirty("zzz");  // nobody waits for it: nothing marked
  EXPECT_EQ(w.TakeDue(10), (std::vector<uint64_t>{a, a2}));
  EXPECT_FALSE(w.dirty());
  EXPECT_EQ(w.TakeDue(200), (std::vector<uint64_t>{a, b}));
  w.Reschedule(a, 1000);  // not past its deadline
  EXPECT_EQ(w.Find(a)->due_us, 100);
  w.MarkAllDirty();
  EXPECT_EQ(w.TakeDue(0), (std::vector<uint64_t>{a, b, a2}));
  ASSERT_TRUE(w.Remove(b).has_value());
  EXPECT_FALSE(w.Remove(b).has_value());
  EXPECT_EQ(w.size(), 2u);
  w.MarkDirty("b");
  EXPECT_TRUE(w.TakeDue(0).empty());
  EXPECT_EQ(w.NextDue(), 100);
}

}  // namespace
}  // namespace gpupool::controller
