#include "agent/runtime/agent_identity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include "agent/runtime/agent_loop.h"
#include "agent/runtime/idle_launcher_for_test.h"
#include "protocol/fake_controller_link.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using test_util::IdleLauncher;

class AgentIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gpupool-agentid-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "agent");
    Machine("machine-a\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Machine(const std::string& id) const { std::ofstream(dir_ / "machine-id") << id; }
  Result<std::string> Identity() {
    return AgentIdentity((dir_ / "agent").string(), (dir_ / "machine-id").string(), [this] {
      ++draws_;
      return Result<std::string>(std::string(31, '0') + std::to_string(draws_));
    });
  }

  fs::path dir_;
  int draws_ = 0;
};

// A restart of one agent on one machine and state directory registers as the same agent.
TEST_F(AgentIdentityTest, DrawnOnceAndKeptAcrossRestarts) {
  Result<std::string> first = Identity();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->substr(0, 33), std::string(31, '0') + "1:");
  EXPECT_EQ(first->size(), 33u + 16u);
  Result<std::string> again = Identity();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(draws_, 1);
}

// A cloned machine (its state directory copied, its machine id made anew) is another agent.
TEST_F(AgentIdentityTest, AnotherMachineIdIsAnotherAgent) {
  Result<std::string> first = Identity();
  Machine("machine-b\n");
  Result<std::string> clone = Identity();
  ASSERT_TRUE(first.ok() && clone.ok());
  EXPECT_EQ(first->substr(0, 32), clone->substr(0, 32));
  EXPECT_NE(*first, *clone);
  fs::remove(dir_ / "machine-id");
  Result<std::string> none = Identity();
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->substr(32), ":-");
}

// A damaged id file is replaced by a new id.
TEST_F(AgentIdentityTest, AnUnreadableIdIsDrawnAgain) {
  std::ofstream(dir_ / "agent" / "agent-id") << "not an id\n";
  Result<std::string> id = Identity();
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(draws_, 1);
  EXPECT_EQ(id->substr(0, 32), std::string(31, '0') + "1");
}

TEST(AgentIdDraw, ThirtyTwoHexDigitsEachTimeAnother) {
  Result<std::string> a = DrawAgentId();
  Result<std::string> b = DrawAgentId();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 32u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(*a, *b);
}

// Two agents on one state directory would fight over its job files: the second refuses,
// naming the directory, the first one's pid and what to do.
TEST_F(AgentIdentityTest, ASecondAgentOnTheStateDirectoryIsRefused) {
  const std::string state = dir_.string();
  const std::string agent = (dir_ / "agent").string();
  Result<FileLock> first = LockAgentStateDir(state, agent);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Result<FileLock> second = LockAgentStateDir(state, agent);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(
      second.status().message().find("another gpupool agent (pid " + std::to_string(::getpid()) +
                                     ") uses the state directory '" + state + "'"),
      std::string::npos)
      << second.status().message();
  EXPECT_NE(second.status().message().find("stop it first"), std::string::npos);
  *first = FileLock();
  EXPECT_TRUE(LockAgentStateDir(state, agent).ok());
}

// adv5 finding 3: an agent restarted under another --node-name while jobs it started
// still run would report them for the new name (stopped there as strays, lost on the
// old node). Refused, naming both names, the jobs and the fix; an idle node may be renamed.
TEST_F(AgentIdentityTest, AnotherNodeNameIsRefusedWhileTheOldNodesJobsRun) {
  const std::string agent = (dir_ / "agent").string();
  std::filesystem::create_directories(agent);
  EXPECT_TRUE(CheckNodeName(agent, "nodeB", {5}).ok()) << "nothing recorded yet";
  RecordNodeName(agent, "nodeA");
  EXPECT_TRUE(CheckNodeName(agent, "nodeA", {5}).ok());
  EXPECT_TRUE(CheckNodeName(agent, "nodeB", {}).ok()) << "an idle node may be renamed";
  const Status s = CheckNodeName(agent, "nodeB", {6, 5, 6});
  ASSERT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.message().find("belongs to node 'nodeA', and 2 job(s) it started there still run "
                             "(job 5, job 6); started as node 'nodeB'"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("--node-name nodeA"), std::string::npos) << s.message();
}

// adv5 finding 3: the agent of node n1, started again as n2 on the same state directory
// while a job it started as n1 still runs, stops at once without registering (exit 2 from
// the daemon: AlreadyExists); it registers as n1, and as n2 once nothing runs.
TEST_F(AgentIdentityTest, AnAgentRenamedWhileItsJobsRunStopsWithoutRegistering) {
  AgentLoopOptions ao;
  ao.node_name = "n1";
  ao.state_dir = (dir_ / "agent").string();
  ao.telemetry_interval_s = 0;
  std::filesystem::create_directories(ao.state_dir);
  {
    auto link = std::make_shared<protocol::FakeControllerLink>();
    IdleLauncher launcher;
    AgentLoop loop(ao, link, &launcher);
    std::thread t([&] { EXPECT_TRUE(loop.Run().ok()); });
    ASSERT_TRUE(link->WaitFor([](const auto& r) { return r.polls > 0; }));  // registered as n1
    loop.Stop();
    t.join();
  }
  agent::JobEvent running;
  running.id = RunId{7, 0, 1, 0};
  running.adopted = true;
  ao.node_name = "n2";
  auto link = std::make_shared<protocol::FakeControllerLink>();
  IdleLauncher launcher;
  launcher.adopt = {running};
  AgentLoop loop(ao, link, &launcher);
  std::promise<Status> ended;
  std::thread t([&] { ended.set_value(loop.Run()); });  // returns by itself: no Stop
  std::future<Status> f = ended.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "the agent is still trying";
  t.join();
  const Status s = f.get();
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.message().find("belongs to node 'n1'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("(job 7)"), std::string::npos) << s.message();
  EXPECT_TRUE(link->recorded().registrations.empty());
  // Nothing runs any more: n2 it is.
  auto idle_link = std::make_shared<protocol::FakeControllerLink>();
  IdleLauncher idle;
  AgentLoop renamed(ao, idle_link, &idle);
  std::thread t2([&] { EXPECT_TRUE(renamed.Run().ok()); });
  ASSERT_TRUE(idle_link->WaitFor([](const auto& r) { return r.polls > 0; }));
  EXPECT_EQ(idle_link->recorded().registrations.at(0).node, "n2");
  renamed.Stop();
  t2.join();
}

}  // namespace
}  // namespace gpupool::agent
