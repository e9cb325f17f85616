// The agent loop's side of the node lease (agent_lease.cc, agent/node_lease.h) against an
// in-process controller: the lease file it writes after each exchange, which tasks it
// fences, and a task killed by its shim while the controller is away.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/job_files.h"
#include "agent/launcher_test_util.h"
#include "agent/node_lease.h"
#include "agent/runtime/agent_loop.h"
#include "protocol/fake_controller_link.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using Kind = protocol::EventKind;

constexpr int64_t kBoot0 = 5'000'000'000;  // the injected boot clock's start

class AgentLoopLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    launcher_ = NewProcessLauncher(testing::TestOptions(dir_.path()));
  }
  void TearDown() override {
    if (loop_) {
      loop_->Stop();
      thread_.join();
    }
    launcher_.reset();
    testing::KillLeftoverJobs(dir_.path());
  }
  // `fake_boot`: the loop reads the boot clock from boot_ instead of the kernel's.
  void StartLoop(bool fake_boot) {
    AgentLoopOptions ao;
    ao.node_name = "n1";
    ao.state_dir = dir_.path();
    ao.fake_node = true;
    ao.telemetry_interval_s = 0;
    ao.cancel_grace_s = 1;
    ao.poll_wait_ms = 50;  // the fake answers an empty poll after this long
    if (fake_boot) ao.boot_clock = [this] { return boot_.load(); };
    loop_ = std::make_unique<AgentLoop>(ao, link_, launcher_.get());
    thread_ = std::thread([this] { EXPECT_TRUE(loop_->Run().ok()); });
  }
  std::string LeaseFile() const { return dir_.path() + "/" + kNodeLeaseFile; }
  std::string RunDir(int64_t job) const {
    return dir_.path() + "/jobs/" + std::to_string(job) + "/0.1";
  }
  // Waits until `n` more polls than now have reached the controller: the exchanges before
  // the last of them have been answered and renewed the lease.
  void WaitForPolls(int n) {
    const int target = link_->recorded().polls + n;
    ASSERT_TRUE(link_->WaitFor([&](const auto& r) { return r.polls >= target; }));
  }
  // A launch order of task 0 of single-task job `job` (attempt 1) running `script`.
  static protocol::Work Launch(int64_t job, const std::string& script, bool requeue,
                               bool preemptible = false) {
    protocol::LaunchOrder o;
    o.job.id = job;
    o.job.attempt = 1;
    o.job.user = "tester";
    o.job.uid = ::geteuid();
    o.job.gid = ::getegid();
    o.job.workdir = "/";
    o.job.command = std::vector<std::string>{"sh", "-c", script};
    o.job.requeue = requeue;
    o.job.preemptible = preemptible;
    o.rendezvous = {0, 1, {"h"}, {1}, 0};
    protocol::Work w;
    w.launch = {o};
    return w;
  }
  static const protocol::Event* Find(const std::vector<protocol::Event>& events, Kind kind,
                                     int64_t job) {
    auto it = std::find_if(events.begin(), events.end(), [&](const protocol::Event& e) {
      return e.kind == kind && e.job_id == job;
    });
    return it == events.end() ? nullptr : &*it;
  }
  bool Started(int64_t job) const {
    return link_->WaitFor(
        [job](const auto& r) { return Find(r.Events(), Kind::kStarted, job) != nullptr; });
  }

  testing::ScratchDir dir_;
  std::unique_ptr<Launcher> launcher_;
  std::shared_ptr<protocol::FakeControllerLink> link_ =
      std::make_shared<protocol::FakeControllerLink>();
  std::unique_ptr<AgentLoop> loop_;
  std::thread thread_;
  std::atomic<int64_t> boot_{kBoot0};
};

// D = the exchange's send time + 3/4 of the lease, on the boot clock; rewritten only once
// it moved by a second.
TEST_F(AgentLoopLeaseTest, TheLeaseFileHoldsThreeQuartersOfTheLeaseFromTheSend) {
  link_->SetNodeLease(8000);
  StartLoop(/*fake_boot=*/true);
  WaitForPolls(1);  // registered, and the lease written
  Result<NodeLease> lease = ReadNodeLease(LeaseFile());
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(*lease, (NodeLease{kBoot0 + 6'000'000, kBoot0}));
  struct stat st {};
  ASSERT_EQ(::stat(LeaseFile().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  boot_ += 900'000;  // polls now move D by 0.9 s: not written
  WaitForPolls(3);
  EXPECT_EQ(*ReadNodeLease(LeaseFile()), (NodeLease{kBoot0 + 6'000'000, kBoot0}));
  boot_ += 200'000;  // 1.1 s: written, with the time it was written
  WaitForPolls(3);
  const int64_t now = kBoot0 + 1'100'000;
  EXPECT_EQ(*ReadNodeLease(LeaseFile()), (NodeLease{now + 6'000'000, now}));
}

// Only the tasks of a job the controller would requeue once the node is lost carry the
// lease file (jobs::FencedOnLoss); exec sessions never do. Their warning comes the node's
// cancel grace (a requeue job) or the job's preemption grace before the lease runs out,
// at most an eighth of the lease.
TEST_F(AgentLoopLeaseTest, OnlyRequeuedAndPreemptibleTasksAreFenced) {
  link_->SetNodeLease(60'000);  // an eighth: 7.5 s, so 7 s at most
  link_->QueueWork(Launch(31, "exec sleep 30", /*requeue=*/true));
  link_->QueueWork(Launch(32, "exec sleep 30", /*requeue=*/false));
  link_->QueueWork(Launch(33, "exec sleep 30", /*requeue=*/false, /*preemptible=*/true));
  protocol::Work own_grace = Launch(34, "exec sleep 30", /*requeue=*/false, /*preemptible=*/true);
  own_grace.launch[0].job.preempt_grace_s = 3;
  link_->QueueWork(own_grace);
  protocol::Work long_grace = Launch(35, "exec sleep 30", /*requeue=*/true, /*preemptible=*/true);
  long_grace.launch[0].job.preempt_grace_s = 600;
  link_->QueueWork(long_grace);
  StartLoop(/*fake_boot=*/false);
  for (int64_t job : {31, 32, 33, 34, 35}) ASSERT_TRUE(Started(job)) << job;
  auto spec_of = [this](int64_t job) {
    Result<ShimConfig> c = ReadShimConfig(RunDir(job));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c->spec : LaunchSpec{};
  };
  EXPECT_EQ(spec_of(31).lease_file, LeaseFile());
  EXPECT_EQ(spec_of(32).lease_file, "");
  EXPECT_EQ(spec_of(33).lease_file, LeaseFile());
  EXPECT_EQ(spec_of(34).lease_file, LeaseFile());
  EXPECT_EQ(spec_of(31).lease_grace_s, 1);  // the node's cancel grace
  EXPECT_EQ(spec_of(32).lease_grace_s, 0);  // not fenced
  EXPECT_EQ(spec_of(33).lease_grace_s, 7);  // the server's preemption grace: an eighth
  EXPECT_EQ(spec_of(34).lease_grace_s, 3);  // its own
  EXPECT_EQ(spec_of(35).lease_grace_s, 7);  // its own, cut to an eighth
  EXPECT_EQ(spec_of(31).node_name, "n1");   // its messages name the node as the agent's do
  // An exec session in the fenced task: not fenced itself (it ends with its task).
  protocol::Work w;
  protocol::ExecRequest x;
  x.id = 7;
  x.job_id = 31;
  x.task_index = 0;
  x.attempt = 1;
  x.argv = {"sleep", "30"};
  w.exec = {x};
  link_->QueueWork(w);
  const std::string exec_dir = dir_.path() + "/jobs/31/exec-7";
  ASSERT_TRUE(testing::PollUntil([&] { return fs::exists(exec_dir + "/" + kShimFile); }, 10'000));
  Result<ShimConfig> exec = ReadShimConfig(exec_dir);
  ASSERT_TRUE(exec.ok()) << exec.status().ToString();
  EXPECT_EQ(exec->spec.lease_file, "");
}

// The pool's stop grace (server --kill-wait, Slurm's KillWait) comes with the registration
// and is the grace of the tasks started after it; without it, the agent's own.
TEST_F(AgentLoopLeaseTest, ThePoolsKillWaitIsTheGraceOfTheTasksItStarts) {
  link_->SetKillWait(42);
  link_->QueueWork(Launch(36, "exec sleep 30", /*requeue=*/true));
  StartLoop(/*fake_boot=*/false);
  ASSERT_TRUE(Started(36));
  Result<ShimConfig> c = ReadShimConfig(RunDir(36));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->spec.grace_s, 42);
  EXPECT_EQ(c->spec.lease_grace_s, 0);  // no lease here
}

// A controller without a lease (0): the file an earlier registration left is removed, and
// no task carries it.
TEST_F(AgentLoopLeaseTest, NoLeaseRemovesTheFileAndFencesNothing) {
  ASSERT_TRUE(WriteNodeLease(LeaseFile(), {1, 1}).ok());
  link_->QueueWork(Launch(41, "exec sleep 30", /*requeue=*/true));
  StartLoop(/*fake_boot=*/true);
  ASSERT_TRUE(Started(41));
  WaitForPolls(1);
  EXPECT_FALSE(fs::exists(LeaseFile()));
  Result<ShimConfig> c = ReadShimConfig(RunDir(41));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->spec.lease_file, "");
}

// The whole path: the controller goes away, the agent stops renewing the lease, and the
// shim of the requeue job kills it (reported as node_lease once the controller is back);
// the plain job beside it runs on.
TEST_F(AgentLoopLeaseTest, ARequeueTaskIsKilledWhenTheControllerIsAwayForThreeQuartersOfTheLease) {
  link_->SetNodeLease(4000);
  link_->QueueWork(Launch(51, "exec sleep 30", /*requeue=*/true));
  link_->QueueWork(Launch(52, "exec sleep 30", /*requeue=*/false));
  StartLoop(/*fake_boot=*/false);
  ASSERT_TRUE(Started(51));
  ASSERT_TRUE(Started(52));
  const auto t0 = std::chrono::steady_clock::now();
  link_->SetAway(true);
  // The shim's status is all there is to wait on while nobody hears the agent.
  ASSERT_TRUE(
      testing::PollUntil([&] { return fs::exists(RunDir(51) + "/" + kStatusFile); }, 15'000, 50));
  const auto fenced_after = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(fenced_after, std::chrono::seconds(8));
  link_->SetAway(false);
  ASSERT_TRUE(
      link_->WaitFor([](const auto& r) { return Find(r.Events(), Kind::kExited, 51) != nullptr; }));
  const std::vector<protocol::Event> events = link_->recorded().Events();
  const protocol::Event* e = Find(events, Kind::kExited, 51);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->kill_cause, protocol::KillCause::kNodeLease);
  EXPECT_NE(e->reason.find("node lease ran out"), std::string::npos) << e->reason;
  EXPECT_EQ(Find(events, Kind::kExited, 52), nullptr);
  const std::vector<RunId> running = launcher_->Running();
  EXPECT_NE(std::find(running.begin(), running.end(), RunId{52, 0, 1, 0}), running.end());
}

}  // namespace
}  // namespace gpupool::agent
