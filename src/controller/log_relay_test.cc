#include "controller/log_relay.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace gpupool::controller {
namespace {

using std::chrono::milliseconds;

// Plays the agent of `node`: waits until the relay has a request for it, then answers.
std::thread Agent(LogRelay* relay, const std::string& node, const std::string& answer_as,
                  Result<LogChunk> answer, std::vector<LogRequest>* seen) {
  return std::thread([=]() mutable {
    for (int i = 0; i < 500; ++i) {
      std::vector<LogRequest> got = relay->Take(node);
      if (!got.empty()) {
        *seen = got;
        relay->Answer(answer_as, got.front().id, std::move(answer));
        return;
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
  });
}

TEST(LogRelayTest, FetchReturnsTheNodesAnswerAndWakesItsPoll) {
  std::atomic<int> woken{0};
  std::string woken_node;
  LogRelay relay([&](const std::string& node) {
    woken_node = node;
    ++woken;
  });
  std::vector<LogRequest> seen;
  std::thread agent = Agent(&relay, "n1", "n1", LogChunk{"hello\n", 42}, &seen);
  Result<LogChunk> got = relay.Fetch("n1", "/s/jobs/7/stdout.log", 10, 100, milliseconds(5000));
  agent.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->data, "hello\n");
  EXPECT_EQ(got->size, 42);
  EXPECT_EQ(woken.load(), 1);
  EXPECT_EQ(woken_node, "n1");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].path, "/s/jobs/7/stdout.log");
  EXPECT_EQ(seen[0].offset, 10);
  EXPECT_EQ(seen[0].max_bytes, 100);
  // Answered and gone: nothing is left for the node.
  EXPECT_FALSE(relay.HasWork("n1"));
  EXPECT_TRUE(relay.Take("n1").empty());
}

TEST(LogRelayTest, TheAgentsErrorComesBack) {
  LogRelay relay(nullptr);
  std::vector<LogRequest> seen;
  std::thread agent = Agent(&relay, "n1", "n1", Status::NotFound("no file"), &seen);
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
  LogRelay relay(nullptr);
  std::vector<LogRequest> seen_n2;
  std::thread intruder([&] {
    // n2 sees nothing of n1's request and its answer to it does not count.
    for (int i = 0; i < 20 && !relay.HasWork("n1"); ++i)
      std::this_thread::sleep_for(milliseconds(2));
    seen_n2 = relay.Take("n2");
    relay.Answer("n2", 1, LogChunk{"forged", 6});
  });
  Result<LogChunk> got = relay.Fetch("n1", "/p", 0, 10, milliseconds(100));
  intruder.join();
  EXPECT_TRUE(seen_n2.empty());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("did not ask"), std::string::npos);
}

TEST(LogRelayTest, ConcurrentReadersEachGetTheirOwnAnswer) {
  LogRelay relay(nullptr);
  std::atomic<bool> done{false};
  std::thread agent([&] {
    while (!done) {
      for (const LogRequest& r : relay.Take("n1")) {
        relay.Answer("n1", r.id, LogChunk{r.path, r.offset});
      }
      std::this_thread::sleep_for(milliseconds(1));
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
  agent.join();
  EXPECT_EQ(right.load(), 8);
}

}  // namespace
}  // namespace gpupool::controller
