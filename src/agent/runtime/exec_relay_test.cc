// The exec relay's back-offs and stop under a ManualClock (issue 27 item 3): a controller
// that answers kUnavailable is tried again only as the test advances the clock, the
// output is given up after a minute of the clock's time, and Stop cuts a back-off short.
// Real pipes for the session's streams; no real sleeps.
#include "agent/runtime/exec_relay.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "protocol/controller_link.h"

namespace gpupool::agent {
namespace {

// A controller that answers the two exec calls as scripted and records, with the clock's
// time, every try. The other calls are not the relay's.
class ScriptedLink final : public protocol::ControllerLink {
 public:
  struct Recorded {
    std::vector<int64_t> output_tries;  // clock time of each PostExecOutput
    std::vector<protocol::ExecOutput> outputs;
    std::vector<int64_t> input_tries;  // clock time of each TakeExecInput
  };

  explicit ScriptedLink(const Clock* clock) : clock_(clock) {}

  // The next `n` output posts (input takes) are answered kUnavailable; -1: all of them.
  void RefuseOutput(int n) {
    std::lock_guard lock(mu_);
    refuse_output_ = n;
  }
  void RefuseInput(int n) {
    std::lock_guard lock(mu_);
    refuse_input_ = n;
  }
  // What the next accepted TakeExecInput answers (by default: a hang-up, so that the
  // input relay ends and only the output relay waits on the clock).
  void AnswerInput(protocol::ExecInput in) {
    std::lock_guard lock(mu_);
    input_ = std::move(in);
  }

  Recorded recorded() const {
    std::lock_guard lock(mu_);
    return recorded_;
  }
  // Blocks (real time, up to 10 s) until `done(recorded)` holds.
  bool WaitFor(const std::function<bool(const Recorded&)>& done) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return done(recorded_); });
  }

  Result<protocol::ExecOutputAck> PostExecOutput(int64_t, const std::string&,
                                                 const protocol::ExecOutput& output, int) override {
    std::lock_guard lock(mu_);
    recorded_.output_tries.push_back(clock_->MonotonicMicros());
    recorded_.outputs.push_back(output);
    cv_.notify_all();
    if (Take(&refuse_output_)) return Status::Unavailable("the controller is busy (scripted)");
    return protocol::ExecOutputAck{};
  }
  Result<protocol::ExecInput> TakeExecInput(int64_t, const std::string&, int64_t, int) override {
    std::lock_guard lock(mu_);
    recorded_.input_tries.push_back(clock_->MonotonicMicros());
    cv_.notify_all();
    if (Take(&refuse_input_)) return Status::Unavailable("the controller is busy (scripted)");
    return input_;
  }

  Result<protocol::RegistrationReply> Register(const protocol::Registration&) override {
    return Status::Unimplemented("not the relay's");
  }
  Result<protocol::Work> PollWork(const std::string&, int) override {
    return Status::Unimplemented("not the relay's");
  }
  Status PostEvents(const protocol::EventBatch&) override {
    return Status::Unimplemented("not the relay's");
  }
  Status PostTelemetry(const protocol::TelemetryBatch&) override {
    return Status::Unimplemented("not the relay's");
  }
  Status AnswerLogRead(const protocol::LogAnswer&) override {
    return Status::Unimplemented("not the relay's");
  }
  void Shutdown() override {}

 private:
  // Whether to refuse this call (one refusal used up).
  static bool Take(int* left) {
    if (*left == 0) return false;
    if (*left > 0) --*left;
    return true;
  }

  const Clock* clock_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // a try was recorded
  int refuse_output_ = 0;
  int refuse_input_ = 0;
  protocol::ExecInput input_{{}, /*hangup=*/true};
  Recorded recorded_;
};

class ExecRelayTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (relay_) relay_->Stop();
    const bool gone = RelayGone();
    // A relay whose threads still run (the test failed) keeps using the clock: leave it
    // to them rather than free it under them.
    if (gone) delete clock_;
    if (stdout_w_ >= 0) ::close(stdout_w_);
    if (stdin_r_ >= 0) ::close(stdin_r_);
  }

  // Starts a relay on pipes; the test keeps the command's stdout (to print) and stdin (to
  // read what the relay writes, and its end: the relay's state is gone).
  void Start() {
    Result<std::unique_ptr<SessionStreams>> streams = MakeSessionStreams(false, 0, 0, ::geteuid());
    ASSERT_TRUE(streams.ok()) << streams.status().ToString();
    stdout_w_ = ::dup((*streams)->child.out);
    stdin_r_ = ::dup((*streams)->child.in);
    ASSERT_GE(stdout_w_, 0);
    ASSERT_GE(stdin_r_, 0);
    relay_ = ExecRelay::Start(
        7, "n1", std::move(*streams), link_, [] { return 0; }, clock_);
  }
  void Print(const std::string& text) {
    ASSERT_EQ(::write(stdout_w_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  // Reads what the relay writes to the command's stdin until the write end closes, which
  // happens when the relay's state goes (both its threads have ended and the handle is
  // dropped). Real time, up to 10 s; returns whether the end came.
  bool ReadStdinToEnd(std::string* got = nullptr) {
    relay_.reset();
    if (stdin_r_ < 0) return true;  // never started
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      struct pollfd p = {stdin_r_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(stdin_r_, buf, sizeof buf);
      if (n == 0) return true;
      if (n > 0 && got != nullptr) got->append(buf, static_cast<size_t>(n));
    }
  }
  bool RelayGone() { return ReadStdinToEnd(); }

  static size_t Tries(const ScriptedLink::Recorded& r) { return r.output_tries.size(); }
  // Waits until the relay has tried the output `n` times.
  bool WaitForOutputTries(size_t n) {
    return link_->WaitFor([n](const ScriptedLink::Recorded& r) { return Tries(r) >= n; });
  }
  bool WaitForInputTries(size_t n) {
    return link_->WaitFor(
        [n](const ScriptedLink::Recorded& r) { return r.input_tries.size() >= n; });
  }

  static constexpr int64_t kT0 = 1'800'000'000'000'000;
  ManualClock* clock_ = new ManualClock(kT0);
  std::shared_ptr<ScriptedLink> link_ = std::make_shared<ScriptedLink>(clock_);
  std::shared_ptr<ExecRelay> relay_;
  int stdout_w_ = -1;
  int stdin_r_ = -1;
};

// The output is tried again after 50, 100 and 200 ms of the clock's time, never sooner,
// and the same bytes go each time until the controller takes them.
TEST_F(ExecRelayTest, OutputIsTriedAgainOnlyAsTheClockAdvances) {
  link_->RefuseOutput(3);
  Start();
  Print("hello");
  ASSERT_TRUE(WaitForOutputTries(1));
  size_t tries = 1;
  for (const int64_t pause : {50'000, 100'000, 200'000}) {
    ASSERT_TRUE(clock_->WaitForWaiters(1)) << "the relay does not back off on its clock";
    clock_->AdvanceMicros(pause - 1'000);
    ASSERT_TRUE(clock_->WaitForWaiters(1));
    EXPECT_EQ(Tries(link_->recorded()), tries) << "tried again before its " << pause << " us";
    clock_->AdvanceMicros(1'000);
    ASSERT_TRUE(WaitForOutputTries(++tries));
  }
  const ScriptedLink::Recorded r = link_->recorded();
  EXPECT_EQ(r.output_tries,
            (std::vector<int64_t>{kT0, kT0 + 50'000, kT0 + 150'000, kT0 + 350'000}));
  for (const protocol::ExecOutput& out : r.outputs) {
    EXPECT_EQ(out.stdout_data, "hello");
    EXPECT_EQ(out.stdout_offset, 0);
    EXPECT_FALSE(out.eof);
  }
}

// A controller away for more than a minute of the clock's time: the output relay gives
// up (and the relay's state goes); at a minute exactly it still waits for it.
TEST_F(ExecRelayTest, OutputIsGivenUpAfterAMinuteOfTheClocksTime) {
  link_->RefuseOutput(-1);
  Start();
  Print("x");
  ASSERT_TRUE(WaitForOutputTries(1));
  size_t tries = 1;
  for (const int64_t step : {30'000'000, 30'000'000, 1'000'000}) {
    ASSERT_TRUE(clock_->WaitForWaiters(1)) << "gave up before a minute";
    clock_->AdvanceMicros(step);
    ASSERT_TRUE(WaitForOutputTries(++tries));
  }
  EXPECT_TRUE(RelayGone()) << "still trying past a minute";
  EXPECT_EQ(link_->recorded().output_tries,
            (std::vector<int64_t>{kT0, kT0 + 30'000'000, kT0 + 60'000'000, kT0 + 61'000'000}));
}

// Stop ends a back-off at once: the clock does not move, yet the relay is gone, with no
// further try.
TEST_F(ExecRelayTest, StopCutsTheOutputsBackOffShort) {
  link_->RefuseOutput(-1);
  Start();
  Print("x");
  ASSERT_TRUE(WaitForOutputTries(1));
  ASSERT_TRUE(clock_->WaitForWaiters(1));
  relay_->Stop();
  EXPECT_TRUE(RelayGone()) << "Stop did not end the back-off";
  EXPECT_EQ(Tries(link_->recorded()), 1u);
  EXPECT_EQ(clock_->NowMicros(), kT0);
}

// The input long poll backs off on the clock too; what it then gets reaches the command.
TEST_F(ExecRelayTest, InputIsTriedAgainOnlyAsTheClockAdvances) {
  link_->RefuseInput(2);
  link_->AnswerInput({{protocol::ExecInputItem{1, "typed\n"}}, /*hangup=*/true});
  Start();
  ASSERT_TRUE(WaitForInputTries(1));
  ASSERT_TRUE(clock_->WaitForWaiters(1)) << "the input relay does not back off on its clock";
  clock_->AdvanceMicros(49'000);
  ASSERT_TRUE(clock_->WaitForWaiters(1));
  EXPECT_EQ(link_->recorded().input_tries.size(), 1u) << "tried again before 50 ms";
  clock_->AdvanceMicros(1'000);
  ASSERT_TRUE(WaitForInputTries(2));
  ASSERT_TRUE(clock_->WaitForWaiters(1));
  clock_->AdvanceMicros(100'000);
  ASSERT_TRUE(WaitForInputTries(3));
  relay_->Stop();  // the output relay, which waits for the command's output
  std::string got;
  EXPECT_TRUE(ReadStdinToEnd(&got));
  EXPECT_EQ(got, "typed\n");
  EXPECT_EQ(link_->recorded().input_tries,
            (std::vector<int64_t>{kT0, kT0 + 50'000, kT0 + 150'000}));
}

// Finish (the command ended) ends the input's back-off at once: its last try is made
// without the clock moving, and the input relay ends.
TEST_F(ExecRelayTest, FinishCutsTheInputsBackOffShort) {
  link_->RefuseInput(-1);
  Start();
  ASSERT_TRUE(WaitForInputTries(1));
  ASSERT_TRUE(clock_->WaitForWaiters(1));
  relay_->Finish();
  ASSERT_TRUE(WaitForInputTries(2));
  EXPECT_EQ(link_->recorded().input_tries, (std::vector<int64_t>{kT0, kT0}));
  relay_->Stop();
  EXPECT_TRUE(RelayGone());
  EXPECT_EQ(link_->recorded().input_tries.size(), 2u);
}

}  // namespace
}  // namespace gpupool::agent
