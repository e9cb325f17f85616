// Two agents under one node name (protocol::Registration::agent_id): a second agent of
// another identity is refused while the node's agent is alive, and its registration
// changes nothing (the first agent's jobs run on), also after a controller's restart (the
// id is stored with the node); a restart of the same agent, an older agent without an
// id, and a new agent on a node whose agent died are taken.
#include "controller/controller_test.h"

namespace gpupool::controller::controller_test {
namespace {

class AgentIdentityTest : public ControllerTest {
 protected:
  Result<protocol::RegistrationReply> RegisterAs(const std::string& id,
                                                 std::vector<protocol::RunningTask> running = {},
                                                 const std::string& remote = "10.0.0.1") {
    protocol::Registration r;
    r.node = "n1";
    r.agent_id = id;
    r.info = MakeNode(2);
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    r.running = std::move(running);
    return c_->RegisterNode(r, remote);
  }
  // A job of one GPU started on n1.
  Job Started() {
    Job job = c_->Submit(MakeJob(1), alice_).value();
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    job = Get(job.id);
    EXPECT_TRUE(Apply({Ev(job, protocol::EventKind::kStarted)}).ok());
    return Get(job.id);
  }
};

TEST_F(AgentIdentityTest, ASecondAgentUnderTheNameIsRefusedAndTheFirstJobRunsOn) {
  ASSERT_TRUE(RegisterAs("agent-a").ok());
  const Job job = Started();
  ASSERT_EQ(job.state, JobState::kRunning);
  clock_.AdvanceMicros(2'500'000);
  ASSERT_TRUE(c_->WaitForWork("n1", 0).ok());  // the first agent polls
  clock_.AdvanceMicros(1'000'000);
  Result<protocol::RegistrationReply> second = RegisterAs("agent-b", {}, "10.0.0.2");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
  const std::string& m = second.status().message();
  EXPECT_NE(m.find("node n1 is run by another agent (at 10.0.0.1, last poll 1.0 s ago"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("give this agent another --node-name, or stop the other agent"),
            std::string::npos)
      << m;
  // Nothing changed: the job still runs, the node keeps the first agent's address.
  EXPECT_EQ(Get(job.id).state, JobState::kRunning);
  EXPECT_EQ(Get(job.id).attempt, job.attempt);
  ASSERT_TRUE(RegisterAs("agent-a", {{job.id, 0, job.attempt}}).ok());  // its restart
  EXPECT_EQ(Get(job.id).state, JobState::kRunning);
}

TEST_F(AgentIdentityTest, AnAgentWithoutAnIdIsTakenAsBefore) {
  ASSERT_TRUE(RegisterAs("agent-a").ok());
  EXPECT_TRUE(RegisterAs("").ok());
  // Nor is an agent with an id refused after one without: nothing to tell them apart.
  EXPECT_TRUE(RegisterAs("agent-b").ok());
}

// A node whose agent stopped polling for the node timeout (10 s here) may be taken over
// by another agent: a reinstalled machine.
TEST_F(AgentIdentityTest, ANodeWhoseAgentDiedIsTakenOver) {
  ASSERT_TRUE(RegisterAs("agent-a").ok());
  clock_.AdvanceMicros(9'000'000);
  EXPECT_FALSE(RegisterAs("agent-b").ok());
  clock_.AdvanceMicros(1'000'000);  // the timeout, before any sweep marked it down
  EXPECT_TRUE(RegisterAs("agent-b").ok());
  // Now the first is the other agent.
  EXPECT_EQ(RegisterAs("agent-a").status().code(), StatusCode::kAlreadyExists);
}

TEST_F(AgentIdentityTest, ANodeSweptDownIsTakenOver) {
  ASSERT_TRUE(RegisterAs("agent-a").ok());
  clock_.AdvanceMicros(11'000'000);
  ASSERT_TRUE(c_->SweepNodes().ok());
  EXPECT_TRUE(RegisterAs("agent-b").ok());
}

// The agent's id is stored with its node: after a controller's restart a second agent
// under the name is refused as before it (it once was taken, and had the first agent's
// running job declared lost), and the node's own agent comes back to its job.
TEST_F(AgentIdentityTest, AfterAControllerRestartASecondAgentIsStillRefused) {
  ASSERT_TRUE(RegisterAs("agent-a").ok());
  const Job job = Started();
  Restart();
  clock_.AdvanceMicros(2'000'000);
  Result<protocol::RegistrationReply> second = RegisterAs("agent-b", {}, "10.0.0.2");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find(
                "node n1 is run by another agent (at 10.0.0.1, registered before the "
                "controller restarted, 2.0 s ago"),
            std::string::npos)
      << second.status().message();
  EXPECT_EQ(Get(job.id).state, JobState::kRunning);
  ASSERT_TRUE(RegisterAs("agent-a", {{job.id, 0, job.attempt}}).ok());
  EXPECT_EQ(Get(job.id).state, JobState::kRunning);
  EXPECT_EQ(Get(job.id).attempt, job.attempt);
  EXPECT_EQ(RegisterAs("agent-b").status().code(), StatusCode::kAlreadyExists);
}

// ... until the node timeout from the restart has passed without the node's agent: then
// the node may be taken over, as any node whose agent died.
TEST_F(AgentIdentityTest, AfterAControllerRestartAnAgentThatNeverCameBackIsTakenOver) {
  ASSERT_TRUE(RegisterAs("agent-a").ok());
  Restart();
  clock_.AdvanceMicros(9'000'000);
  EXPECT_FALSE(RegisterAs("agent-b").ok());
  clock_.AdvanceMicros(1'000'000);
  EXPECT_TRUE(RegisterAs("agent-b").ok());
  EXPECT_FALSE(RegisterAs("agent-a").ok());
}

}  // namespace
}  // namespace gpupool::controller::controller_test
