#include "controller/log_relay.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace gpupool::controller {
namespace {

using std::chrono::milliseconds;

// The nodes' long polls, as the relay's `wake_node` wakes them: counts each node's
// wake-ups, and lets a test thread wait for the next one.
class NodePolls {
 public:
  std::function<void(const std::string&)> Waker() {
    return [this](const std::string& node) {
      std::lock_guard lock(mu_);
      ++wakes_[node];
      cv_.notify_all();
    };
  }
  // Blocks (real time, up to 10 s) until `node` has been woken more than `seen` times or
  // Close(); returns how many times it was woken.
  int WaitForWake(const std::string& node, int seen) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return closed_ || wakes_[node] > seen; });
    return wakes_[node];
  }
  int Wakes(const std::string& node) {
    std::lock_guard lock(mu_);
    return wakes_[node];
  }
  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, int> wakes_;
  bool closed_ = false;
};

// Plays the agent of `node`: its poll is woken when the relay has a request for it
// (`polls` is the relay's waker), then it takes the request and answers.
std::thread Agent(NodePolls* polls, LogRelay* relay, const std::string& node,
                  const std::string& answer_as, Result<LogChunk> answer,
                  std::vector<LogRequest>* seen) {
  return std::thread([=]() mutable {
    polls->WaitForWake(node, 0);
    std::vector<LogRequest> got = relay->Take(node);
    if (got.empty()) return;  // never woken: the test fails on Fetch's answer
    *seen = got;
    relay->Answer(answer_as, got.front().id, std::move(answer));
  });
}

TEST(LogRelayTest, FetchReturnsTheNodesAnswerAndWakesItsPoll) {
  NodePolls polls;
  LogRelay relay(polls.Waker());
  std::vector<LogRequest> seen;
  std::thread agent = Agent(&polls, &relay, "n1", "n1", LogChunk{"hello\n", 42}, &seen);
  Result<LogChunk> got = relay.Fetch("n1", "/s/jobs/7/stdout.log", 10, 100, milliseconds(5000));
  agent.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->data, "hello\n");
  EXPECT_EQ(got->size, 42);
  EXPECT_EQ(polls.Wakes("n1"), 1);
  EXPECT_EQ(polls.Wakes("n2"), 0);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].path, "/s/jobs/7/stdout.log");
  EXPECT_EQ(seen[0].offset, 10);
  EXPECT_EQ(seen[0].max_bytes, 100);
  // Answered and gone: nothing is left for the node.
  EXPECT_FALSE(relay.HasWork("n1"));
  EXPECT_TRUE(relay.Take("n1").empty());
}

TEST(LogRelayTest, TheAgentsErrorComesBack) {
  NodePolls polls;
  LogRelay relay(polls.Waker());
  std::vector<LogRequest> seen;
  std::thread agent = Agent(&polls, &relay, "n1", "n1", Status::NotFound("no file"), &seen);
  Result<LogChunk> got = relay.Fetch("n1", "/p", 0, 10, milliseconds(5000));
  agent.join();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(got.status().message(), "no file");
}

TEST(LogRelayTest, NoAnswerTimesOutAndALateAnswerIsIgnored) {
  LogRelay relay(nullptr);
  Result<LogChunk> got = relay.Fetch("n1", "/p", 0, 10, milliseconds(30));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("node n1 did not ask for the log"), std::string::npos)
      << got.status().message();
  // The request was dropped with the reader: the node does not get it afterwards.
  EXPECT_FALSE(relay.HasWork("n1"));
  relay.Answer("n1", 1, LogChunk{"late", 4});  // no reader: ignored, no crash
  EXPECT_TRUE(relay.Take("n1").empty());
}

TEST(LogRelayTest, RequestsGoToTheirNodeAndOnlyThatNodeMayAnswer) {
  // The reader waits on a manual clock: its request stays open until the test has had
  // n2 try it, however slow this machine is.
  ManualClock clock(1'000'000);
  NodePolls polls;
  LogRelay relay(polls.Waker(), &clock);
  Result<LogChunk> got = Status::Internal("not fetched");
  std::thread reader([&] { got = relay.Fetch("n1", "/p", 0, 10, milliseconds(100)); });
  ASSERT_EQ(polls.WaitForWake("n1", 0), 1);
  // n2 sees nothing of n1's request and its answer to it does not count.
  EXPECT_TRUE(relay.Take("n2").empty());
  relay.Answer("n2", 1, LogChunk{"forged", 6});
  EXPECT_TRUE(relay.HasWork("n1"));
  clock.AdvanceMicros(100'000);  // the reader gives up
  reader.join();
  EXPECT_EQ(polls.Wakes("n2"), 0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("did not ask"), std::string::npos);
}

TEST(LogRelayTest, ConcurrentReadersEachGetTheirOwnAnswer) {
  NodePolls polls;
  LogRelay relay(polls.Waker());
  std::atomic<bool> done{false};
  std::thread agent([&] {
    // Each wake-up may stand for several requests: all that are there are taken.
    for (int seen = 0; !done;) {
      seen = polls.WaitForWake("n1", seen);
      for (const LogRequest& r : relay.Take("n1")) {
        relay.Answer("n1", r.id, LogChunk{r.path, r.offset});
      }
    }
  });
  std::vector<std::thread> readers;
  std::atomic<int> right{0};
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&, i] {
      const std::string path = "/j/" + std::to_string(i);
      Result<LogChunk> got = relay.Fetch("n1", path, i, 10, milliseconds(5000));
      if (got.ok() && got->data == path && got->size == i) ++right;
    });
  }
  for (std::thread& t : readers) t.join();
  done = true;
  polls.Close();
  agent.join();
  EXPECT_EQ(right.load(), 8);
}

}  // namespace
}  // namespace gpupool::controller
