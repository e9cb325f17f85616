// The agent loop against an in-process controller (protocol::FakeControllerLink): GPU
// telemetry, log reads, launch units, stopping; and mapping a process to its job.
#include "agent/runtime/agent_loop.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/cu_mask.h"
#include "agent/job_env.h"
#include "agent/launcher.h"
#include "agent/runtime/idle_launcher_for_test.h"
#include "gpu/telemetry.h"
#include "protocol/agent_protocol.h"
#include "protocol/fake_controller_link.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using test_util::IdleLauncher;

class JobOfProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "job_of_process.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  void Cgroup(int pid, const std::string& text) {
    fs::create_directories(root_ / std::to_string(pid));
    std::ofstream(root_ / std::to_string(pid) / "cgroup") << text;
  }
  fs::path root_;
};

TEST_F(JobOfProcessTest, FindsTheJobOfV1AndV2CgroupsAndNothingElse) {
  Cgroup(10, "0::/gpupool/job-42-1-777\n");
  Cgroup(11,
         "12:memory:/gpupool/job-43-2-5\n11:devices:/gpupool/job-43-2-5\n"
         "1:name=systemd:/system.slice/gpupool-agent.service\n");
  Cgroup(12, "0::/user.slice/user-1000.slice/session-3.scope\n");
  Cgroup(13, "0::/gpupool/job-x-1-2\n");
  Cgroup(14, "0::/gpupool/job-\n");
  // A task of a gang, as the previous layout named its cgroup: by the task's launcher key
  // (2^50 + 44 * 4096 + 3); and as it is named now, by job, task and attempt.
  Cgroup(15, "0::/gpupool/job-1125899907022851-1-9\n");
  Cgroup(16, "0::/gpupool/job-45-3.1-9\n");
  Cgroup(17, "12:memory:/gpupool/job-46-0.2-7\n");
  EXPECT_EQ(JobOfProcess(root_.string(), 10), 42);
  EXPECT_EQ(JobOfProcess(root_.string(), 11), 43);
  EXPECT_EQ(JobOfProcess(root_.string(), 12), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 13), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 14), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 15), 44);
  EXPECT_EQ(JobOfProcess(root_.string(), 16), 45);
  EXPECT_EQ(JobOfProcess(root_.string(), 17), 46);
  EXPECT_EQ(JobOfProcess(root_.string(), 99), 0);  // gone
}

// A user may make cgroups of any name in a tree systemd delegates to them: a process of
// bob's in ".../user@1001.service/gpupool/job-5-0.1-0" (outside the pool, with the GPU's
// device open) was counted as job 5's, so alice's share was over its memory and the GPU
// memory watch stopped it (the fourth red team).
TEST_F(JobOfProcessTest, ACgroupNamedLikeAJobsOutsideTheAgentsTreeIsNoJobs) {
  Cgroup(20, "0::/user.slice/user-1001.slice/user@1001.service/app.slice/gpupool/job-5-0.1-0\n");
  Cgroup(21,
         "12:memory:/user.slice/user-1001.slice\n"
         "1:name=systemd:/user.slice/user-1001.slice/user@1001.service/gpupool/job-5-0.1-0\n");
  Cgroup(22, "0::/x/gpupool/job-5-0.1-0\n");
  Cgroup(23, "0::/gpupool/job-5-0.1-0/libpod-abc.scope/container\n");  // a container's
  EXPECT_EQ(JobOfProcess(root_.string(), 20), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 21), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 22), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 23), 5);
}

// One GPU at a fixed 42%, that had two Xid errors (the last 79) and 5 uncorrected ECC.
class OneGpu final : public gpu::TelemetrySampler {
 public:
  std::string_view name() const override { return "test"; }
  Result<std::vector<gpu::GpuSample>> Sample(int64_t) override {
    gpu::GpuSample s;
    s.index = 0;
    s.uuid = "GPU-0";
    s.util_pct = 42;
    s.mem_used_mib = 7;
    s.xid_errors = 79;
    s.xid_count = 2;
    s.ecc_uncorrected = 5;
    return std::vector<gpu::GpuSample>{s};
  }
};

// One GPU whose Xid count the test raises (an Xid 95 each time), read by samples and by
// the agent's Xid watch between them.
class ScriptedXids final : public gpu::TelemetrySampler {
 public:
  std::string_view name() const override { return "test-xids"; }
  Result<std::vector<gpu::GpuSample>> Sample(int64_t) override {
    gpu::GpuSample s;
    s.index = 0;
    s.uuid = "GPU-0";
    s.util_pct = 10;
    s.xid_count = count_.load();
    s.xid_errors = s.xid_count > 0 ? 95 : 0;
    return std::vector<gpu::GpuSample>{s};
  }
  std::map<int, int64_t> XidCounts(int64_t) override { return {{0, count_.load()}}; }
  void Xid() { ++count_; }

 private:
  std::atomic<int64_t> count_{0};
};

// Options of an agent on node n1 with its state under `root`, telemetry rounds driven by
// the test (interval 0) and `clock` (null: the system clock).
AgentLoopOptions TestAgentOptions(const fs::path& root, const Clock* clock = nullptr) {
  AgentLoopOptions ao;
  ao.node_name = "n1";
  ao.state_dir = (root / "state").string();
  ao.telemetry_interval_s = 0;
  ao.clock = clock;
  return ao;
}

// An agent whose controller (an in-process fake) speaks protocol 1.`minor`; the fake
// records the telemetry batches it is sent and can be made to refuse them (away).
class TelemetryAgentTest : public JobOfProcessTest {
 protected:
  void Start(int minor) {
    link_->SetVersion({1, minor});
    AgentLoopOptions ao = Options();
    ao.sampler = std::make_shared<OneGpu>();
    Run(ao);
    // The loop polls once registered (the reply's version read): telemetry rounds from
    // here on know what the controller takes.
    EXPECT_TRUE(link_->WaitFor([](const auto& r) { return r.polls > 0; }));
  }
  AgentLoopOptions Options() const { return TestAgentOptions(root_, &clock_); }
  // Runs an agent with `ao` on thread_ (stopped by TearDown).
  void Run(const AgentLoopOptions& ao) {
    loop_ = std::make_unique<AgentLoop>(ao, link_, &launcher_);
    thread_ = std::thread([this] { EXPECT_TRUE(loop_->Run().ok()); });
  }
  void AcceptLaunches() {
    std::lock_guard lock(launcher_.mu);
    launcher_.accept = true;
  }
  // Waits (up to 10 s) for `n` launches to be recorded; returns with the launcher's lock.
  std::unique_lock<std::mutex> WaitForLaunches(size_t n) {
    std::unique_lock lock(launcher_.mu);
    launcher_.cv.wait_for(lock, std::chrono::seconds(10),
                          [&] { return launcher_.launched.size() == n; });
    return lock;
  }
  void TearDown() override {
    if (loop_) {
      loop_->Stop();
      thread_.join();
    }
    JobOfProcessTest::TearDown();
  }
  ManualClock clock_{1'800'000'000'000'000};
  IdleLauncher launcher_;
  std::shared_ptr<protocol::FakeControllerLink> link_ =
      std::make_shared<protocol::FakeControllerLink>();
  std::unique_ptr<AgentLoop> loop_;
  std::thread thread_;
};

// Stopping the agent does not wait for the controller to answer its long poll: Stop()
// shuts the link down (the HTTP link's side: HttpControllerLinkTest.ShutdownCutsALongPollShort).
TEST_F(TelemetryAgentTest, StopCutsTheLongPollShort) {
  link_->HoldPolls(true);
  Start(3);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return r.polls > 0; }));
  const auto start = std::chrono::steady_clock::now();
  loop_->Stop();
  thread_.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_TRUE(link_->recorded().shut_down);
  loop_.reset();
}

// Issue 27: a controller that cannot talk to this agent's protocol ends the agent at once,
// with a message naming both versions and which side to upgrade; it used to take the
// refusal for "unavailable" and retry forever.
TEST_F(JobOfProcessTest, AControllerOfAnIncompatibleProtocolStopsTheAgent) {
  auto link = std::make_shared<protocol::FakeControllerLink>();
  const protocol::Version far{protocol::kVersion.major + 1, 0};
  link->SetVersion(far);
  const AgentLoopOptions ao = TestAgentOptions(root_);
  IdleLauncher launcher;
  AgentLoop loop(ao, link, &launcher);
  std::promise<Status> ended;
  std::thread t([&] { ended.set_value(loop.Run()); });  // returns by itself: no Stop
  std::future<Status> f = ended.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "the agent is still trying";
  t.join();
  const Status s = f.get();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "the controller speaks agent protocol " + protocol::VersionString(far) +
                             " and this agent (node n1) " +
                             protocol::VersionString(protocol::kVersion) +
                             "; they are too far apart (the same major and minors at most one "
                             "apart work together): upgrade gpupool on this agent (node n1)");
  EXPECT_EQ(link->recorded().registrations.size(), 1u);
  EXPECT_EQ(link->recorded().polls, 0);
}

// Issue 27 item 3: the back-off after a failed call runs on the agent's clock. Under a
// ManualClock the loop waits there (no real sleep), and tries again once the test has
// advanced time by the back-off (200 ms after the first failure), not before.
TEST_F(JobOfProcessTest, TheAgentsBackOffRunsOnItsClock) {
  ManualClock clock{1'800'000'000'000'000};
  auto link = std::make_shared<protocol::FakeControllerLink>(&clock);
  link->SetAway(true);
  const AgentLoopOptions ao = TestAgentOptions(root_, &clock);
  IdleLauncher launcher;
  AgentLoop loop(ao, link, &launcher);
  std::thread t([&] { EXPECT_TRUE(loop.Run().ok()); });
  ASSERT_TRUE(clock.WaitForWaiters(1)) << "the agent does not wait on its clock";
  link->SetAway(false);
  clock.AdvanceMicros(199'000);
  ASSERT_TRUE(clock.WaitForWaiters(1));
  EXPECT_TRUE(link->recorded().registrations.empty()) << "tried again before its back-off";
  clock.AdvanceMicros(1'000);
  EXPECT_TRUE(link->WaitFor([](const auto& r) { return r.registrations.size() == 1; }));
  loop.Stop();
  t.join();
}

// Refused because another agent runs the node (a 409 for Registration::agent_id): tried
// again 30 s later on the agent's clock, not sooner, and never given up (the node is free
// once the other agent has stopped polling: one whose state directory was wiped, started
// again at once, registers then).
TEST_F(JobOfProcessTest, ARegistrationRefusedForATakenNodeIsTriedAgainEvery30s) {
  ManualClock clock{1'800'000'000'000'000};
  auto link = std::make_shared<protocol::FakeControllerLink>(&clock);
  link->RefuseRegistrations(Status::AlreadyExists("node n1 is run by another agent"));
  const AgentLoopOptions ao = TestAgentOptions(root_, &clock);
  IdleLauncher launcher;
  AgentLoop loop(ao, link, &launcher);
  std::thread t([&] { EXPECT_TRUE(loop.Run().ok()); });
  ASSERT_TRUE(link->WaitFor([](const auto& r) { return r.registrations.size() == 1; }));
  ASSERT_TRUE(clock.WaitForWaiters(1)) << "the agent does not wait on its clock";
  link->RefuseRegistrations(Status::Ok());  // the other agent has gone
  clock.AdvanceMicros(kTakenRetryUs - 1'000);
  ASSERT_TRUE(clock.WaitForWaiters(1));
  EXPECT_EQ(link->recorded().registrations.size(), 1u) << "tried again before 30 s";
  clock.AdvanceMicros(1'000);
  EXPECT_TRUE(link->WaitFor([](const auto& r) { return r.registrations.size() == 2; }));
  loop.Stop();
  t.join();
}

// A controller away (any error but a protocol too far off) is tried again until Stop,
// and Run then returns Ok.
TEST_F(TelemetryAgentTest, AControllerAwayIsTriedAgainAndStopEndsRunWithOk) {
  link_->SetAway(true);
  AgentLoopOptions ao = Options();
  AgentLoop loop(ao, link_, &launcher_);
  std::promise<Status> ended;
  std::thread t([&] { ended.set_value(loop.Run()); });
  std::future<Status> f = ended.get_future();
  // Its registration failed and it backs off (on its clock) to try again: it goes on.
  ASSERT_TRUE(clock_.WaitForWaiters(1));
  EXPECT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  loop.Stop();
  t.join();
  EXPECT_TRUE(f.get().ok());
}

// Issue 29 item 3: a new Xid goes to the controller at once, not with the next round.
// With a 60 s telemetry interval, an Xid that comes after the first round is sent one
// second (the Xid watch) later, on the agent's clock.
TEST_F(TelemetryAgentTest, ANewXidIsSentAtOnceNotWithTheNextRound) {
  auto xids = std::make_shared<ScriptedXids>();
  AgentLoopOptions ao = Options();
  ao.telemetry_interval_s = 60;
  ao.sampler = xids;
  Run(ao);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return r.polls > 0; }));
  // The telemetry thread waits on the clock (the only one here: the fake link's polls
  // wait in real time) for its next look at the Xids.
  ASSERT_TRUE(clock_.WaitForWaiters(1));
  xids->Xid();
  clock_.AdvanceMicros(1'000'000);
  auto sent = [](const protocol::FakeControllerLink::Recorded& r) {
    return std::any_of(r.telemetry.begin(), r.telemetry.end(),
                       [](const auto& t) { return t.xid_count == 1 && t.xid_errors == 95; });
  };
  EXPECT_TRUE(link_->WaitFor(sent)) << "the Xid waits for the next round, 59 s on";
}

// The disk watch (disk_watch.h) on the agent's clock: a report after each registration,
// one at every check while the disk is under pressure (so that an admin's resume does not
// outlast it), one when it ends, and nothing more while it has room; a task the node could
// not start makes it look at once.
TEST_F(TelemetryAgentTest, TheDiskWatchReportsPressureAtEveryCheckAndItsEndOnce) {
  struct Disk {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t free = uint64_t{50} << 30;
    int checks = 0;
  };
  auto disk = std::make_shared<Disk>();
  AgentLoopOptions ao = Options();
  ao.disk_check_interval_s = 10;
  ao.disk_min_free = {DiskMinFree::Kind::kBytes, uint64_t{1} << 30, 0};
  ao.disk_usage = [disk](const std::string&) -> Result<DiskUsage> {
    std::lock_guard lock(disk->mu);
    ++disk->checks;
    disk->cv.notify_all();
    return DiskUsage{uint64_t{100} << 30, disk->free, 0, 0};
  };
  auto set_free = [&](uint64_t free) {
    std::lock_guard lock(disk->mu);
    disk->free = free;
  };
  auto checks = [&] {
    std::lock_guard lock(disk->mu);
    return disk->checks;
  };
  // Waits for the check after `before`, then for the watch to wait again: what it sent
  // is then recorded.
  auto settled_after = [&](int before) {
    SCOPED_TRACE("the check after " + std::to_string(before));
    std::unique_lock lock(disk->mu);
    ASSERT_TRUE(
        disk->cv.wait_for(lock, std::chrono::seconds(10), [&] { return disk->checks > before; }));
    lock.unlock();
    ASSERT_TRUE(clock_.WaitForWaiters(1));
  };
  auto reports = [&] { return link_->recorded().disk_reports; };
  auto next_check = [&] {
    const int before = checks();
    clock_.AdvanceMicros(10'000'000);
    settled_after(before);
  };
  Run(ao);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return !r.disk_reports.empty(); }));
  ASSERT_TRUE(clock_.WaitForWaiters(1));
  ASSERT_EQ(reports().size(), 1u);
  EXPECT_FALSE(reports()[0].pressure);
  EXPECT_EQ(reports()[0].path, ao.state_dir);
  next_check();
  EXPECT_EQ(reports().size(), 1u) << "a disk with room is not news";

  set_free(uint64_t{100} << 20);
  next_check();
  ASSERT_EQ(reports().size(), 2u);
  EXPECT_TRUE(reports()[1].pressure);
  EXPECT_NE(reports()[1].reason.find("has 100 MiB free of 100 GiB"), std::string::npos)
      << reports()[1].reason;
  next_check();
  ASSERT_EQ(reports().size(), 3u) << "every check while under pressure is sent";
  set_free((uint64_t{1} << 30) + (uint64_t{100} << 20));  // above the level, not a quarter
  next_check();
  ASSERT_EQ(reports().size(), 4u);
  EXPECT_TRUE(reports()[3].pressure);
  set_free(uint64_t{50} << 30);
  next_check();
  ASSERT_EQ(reports().size(), 5u);
  EXPECT_FALSE(reports()[4].pressure);
  next_check();
  EXPECT_EQ(reports().size(), 5u);

  // A launch the node cannot carry out (this launcher refuses it) wakes the watch: a
  // check without the clock moving.
  int before = checks();
  protocol::Work work;
  protocol::LaunchOrder order;
  order.job.id = 5;
  order.job.command = {"true"};
  order.gpus = {{"nvidia", 0, "GPU-0", {}, 1000}};
  work.launch = {order};
  link_->QueueWork(work);
  settled_after(before);
  EXPECT_TRUE(link_->WaitFor([](const auto& r) {
    const auto events = r.Events();
    return std::any_of(events.begin(), events.end(),
                       [](const protocol::Event& e) { return e.job_id == 5 && e.not_started; });
  }));
  // A registration anew hears the disk's state once.
  before = checks();
  link_->ForgetNode();
  ASSERT_TRUE(clock_.WaitForWaiters(2));  // the agent backs off 200 ms before it registers
  clock_.AdvanceMicros(200'000);
  settled_after(before);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return r.disk_reports.size() == 6; }));
  EXPECT_FALSE(reports()[5].pressure);
}

// Issue 29 item 3: an agent with a health program registers saying its verdict is still
// to come (the controller then places nothing on the node) and sends the verdict at once.
TEST_F(TelemetryAgentTest, AnAgentWithAHealthProgramRegistersWithItsVerdictPending) {
  const fs::path program = root_ / "check.sh";
  std::ofstream(program) << "#!/bin/sh\necho gpu=0 bad fan\n";
  fs::permissions(program, fs::perms::owner_all);
  AgentLoopOptions ao = Options();
  ao.health_check = program.string();
  Run(ao);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return r.telemetry_posts > 0; }));
  const auto r = link_->recorded();
  ASSERT_EQ(r.registrations.size(), 1u);
  EXPECT_TRUE(r.registrations[0].health_pending);
  // Without a program: nothing pending.
  auto other = std::make_shared<protocol::FakeControllerLink>();
  ao.health_check.clear();
  AgentLoop plain(ao, other, &launcher_);
  std::thread t([&] { EXPECT_TRUE(plain.Run().ok()); });
  EXPECT_TRUE(other->WaitFor([](const auto& rec) { return rec.polls > 0; }));
  EXPECT_FALSE(other->recorded().registrations.at(0).health_pending);
  plain.Stop();
  t.join();
}

// A 1.2 controller takes no telemetry (1.3 added it). Since 1.4 (signal orders) it is two
// minors older than the agent: refused at registration, it is sent nothing at all.
TEST_F(TelemetryAgentTest, AControllerOlderThanTelemetryIsRefusedAndSentNone) {
  link_->SetVersion({1, 2});
  AgentLoopOptions ao = Options();
  ao.sampler = std::make_shared<OneGpu>();
  AgentLoop loop(ao, link_, &launcher_);
  const Status st = loop.Run();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("upgrade gpupool on the controller"), std::string::npos)
      << st.message();
  EXPECT_EQ(link_->recorded().polls, 0);
  EXPECT_EQ(link_->recorded().telemetry_posts, 0);
}

TEST_F(TelemetryAgentTest, BatchesGoToA13ControllerAndWaitWhileItIsAway) {
  Start(3);
  EXPECT_EQ(loop_->TelemetryRound(), 0u);
  {
    const std::vector<protocol::GpuTelemetry> received = link_->recorded().telemetry;
    ASSERT_FALSE(received.empty());
    EXPECT_EQ(received.back().util_pct, 42);
    EXPECT_EQ(received.back().mem_used_mib, 7);
    EXPECT_EQ(received.back().xid_errors, 79);
    EXPECT_EQ(received.back().xid_count, 2);
    EXPECT_EQ(received.back().ecc_uncorrected, 5);
    EXPECT_EQ(received.back().at_ms, 1'800'000'000'000);  // the injected clock
  }
  const size_t before = link_->recorded().telemetry.size();
  link_->SetAway(true);
  EXPECT_EQ(loop_->TelemetryRound(), 1u);
  clock_.AdvanceMicros(5'000'000);
  EXPECT_EQ(loop_->TelemetryRound(), 2u);  // kept, oldest first
  link_->SetAway(false);
  clock_.AdvanceMicros(5'000'000);
  EXPECT_EQ(loop_->TelemetryRound(), 0u);
  const std::vector<protocol::GpuTelemetry> received = link_->recorded().telemetry;
  ASSERT_EQ(received.size(), before + 3);  // the two kept rounds and this one, in one batch
  EXPECT_LT(received[before].at_ms, received[before + 2].at_ms);
}

// A controller that forgot the node (404 to a telemetry batch) is registered with again.
TEST_F(TelemetryAgentTest, ANodeTheControllerForgotRegistersAgain) {
  Start(3);
  EXPECT_EQ(loop_->TelemetryRound(), 0u);
  link_->ForgetNode();
  EXPECT_EQ(loop_->TelemetryRound(), 1u);
  // The poll that found the node forgotten fails; the agent backs off on its clock (at
  // most 5 s) and registers again.
  ASSERT_TRUE(clock_.WaitForWaiters(1));
  clock_.AdvanceMicros(5'000'000);
  EXPECT_TRUE(link_->WaitFor([](const auto& r) { return r.registrations.size() == 2; }));
}

// The first task on a node of an --mpi gang covers the job's other task there
// (LaunchOrder::node_tasks): its GPUs came in the order, its limits are both tasks'. The
// GPU the two specs share is one job's, listed once: the controller counts each listing.
TEST_F(TelemetryAgentTest, ANodesLaunchUnitTakesItsTasksLimitsAndListsItsJobOncePerGpu) {
  AcceptLaunches();
  protocol::Work work;
  protocol::LaunchOrder unit;
  unit.job.id = 7;
  unit.job.user = "alice";
  unit.job.command = {"mpirun", "true"};
  unit.job.mpi = true;
  unit.job.request.tasks = 2;
  unit.job.request.gpus = 1;
  unit.job.request.cpu_milli = 1500;
  unit.job.request.memory_bytes = uint64_t{3} << 30;
  unit.task_index = 0;
  unit.gpus = {{"nvidia", 0, "GPU-0", {}, 1000}, {"nvidia", 1, "GPU-1", {}, 1000}};
  unit.rendezvous = {0, 2, {"h", "h"}, {1, 1}, 0};
  unit.node_tasks = {0, 1};
  protocol::LaunchOrder held = unit;
  held.task_index = 1;
  held.gpus = {{"nvidia", 0, "GPU-0", {}, 1000}};  // task 1 was given GPU 0, task 0 GPU 1
  held.denied_device_nodes = {"/dev/nvidia1"};
  held.rendezvous.task_index = 1;
  held.node_tasks.clear();
  work.launch = {unit, held};
  link_->QueueWork(work);
  Start(3);
  {
    std::unique_lock lock = WaitForLaunches(2);
    ASSERT_EQ(launcher_.launched.size(), 2u);
    for (const agent::LaunchSpec& spec : launcher_.launched) {
      SCOPED_TRACE(spec.id.task);
      const int64_t tasks = spec.id.task == 0 ? 2 : 1;
      EXPECT_EQ(spec.cpu_milli, 1500 * tasks);
      EXPECT_EQ(spec.memory_bytes, (uint64_t{3} << 30) * static_cast<uint64_t>(tasks));
      EXPECT_EQ(spec.gpus.size(), static_cast<size_t>(tasks));
      const std::vector<std::string> held_argv = {"sleep", "infinity"};
      EXPECT_EQ(spec.argv, spec.id.task == 0 ? unit.job.command.get() : held_argv);
    }
  }
  EXPECT_EQ(loop_->TelemetryRound(), 0u);
  const std::vector<protocol::GpuTelemetry> received = link_->recorded().telemetry;
  ASSERT_FALSE(received.empty());
  ASSERT_EQ(received.back().jobs.size(), 1u);  // GPU 0: in both specs, one job
  EXPECT_EQ(received.back().jobs[0].job_id, 7);
}

// An 80 GiB NVIDIA GPU of the node, of enforcement mode `enforcement`.
gpu::GpuInfo Nvidia80G(int index, const std::string& uuid, const std::string& enforcement) {
  gpu::GpuInfo g;
  g.vendor = gpu::Vendor::kNvidia;
  g.index = index;
  g.uuid = uuid;
  g.memory_total_bytes = uint64_t{80} << 30;
  g.enforcement = enforcement;
  return g;
}

// Job `id` of alice's, one GPU with --gpu-mem 8G, granted `gpus`.
protocol::LaunchOrder EightGibShare(int64_t id, std::vector<protocol::GpuGrant> gpus) {
  protocol::LaunchOrder order;
  order.job.id = id;
  order.job.user = "alice";
  order.job.command = {"true"};
  order.job.request.gpus = 1;
  order.job.request.gpu_memory_bytes = uint64_t{8} << 30;
  order.rendezvous = {0, 1, {"h"}, {1}, 0};
  order.gpus = std::move(gpus);
  return order;
}

// A share granted a MIG instance (docs/sharing.md) runs with that instance's MIG- UUID
// visible, enforcement "mig" and the instance's memory as its cap; a share of a GPU
// without MIG on the same node stays "none" (a node without MPS or dmem).
TEST_F(TelemetryAgentTest, AShareGrantedAMigInstanceSeesItsUuidAndMemory) {
  AcceptLaunches();
  gpu::GpuInfo mig = Nvidia80G(0, "GPU-0", "mig");
  mig.mig_enabled = true;
  mig.mig_devices = {
      {"MIG-a", "3g.40gb", 1, 0, uint64_t{40} << 30, {"/dev/nvidia-caps/nvidia-cap15"}},
      {"MIG-b", "1g.10gb", 9, 0, uint64_t{10} << 30, {"/dev/nvidia-caps/nvidia-cap36"}}};
  const gpu::GpuInfo plain = Nvidia80G(1, "GPU-1", "none");
  protocol::Work work;
  protocol::LaunchOrder order = EightGibShare(
      8, {{"nvidia", 0, "MIG-b", {"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap36"}, 100}});
  protocol::LaunchOrder other = order;
  other.job.id = 9;
  other.gpus = {{"nvidia", 1, "GPU-1", {"/dev/nvidia1"}, 100}};
  work.launch = {order, other};
  link_->QueueWork(work);
  AgentLoopOptions ao = Options();
  ao.node.gpus = {mig, plain};
  Run(ao);
  std::unique_lock lock = WaitForLaunches(2);
  ASSERT_EQ(launcher_.launched.size(), 2u);
  for (const agent::LaunchSpec& spec : launcher_.launched) {
    const auto env = BuildJobEnvironment(spec, {});
    if (spec.id.job == 8) {
      EXPECT_EQ(spec.share_enforcement, "mig");
      EXPECT_EQ(spec.share_memory_bytes, uint64_t{10} << 30);  // the instance's, not the ask
      EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "MIG-b");
      EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), "MIG-b");
      EXPECT_EQ(env.at("GPUPOOL_GPU_ENFORCEMENT"), "mig");
      EXPECT_EQ(env.at("GPUPOOL_GPU_MEM_LIMIT_BYTES"), std::to_string(uint64_t{10} << 30));
      EXPECT_EQ(env.count("CUDA_MPS_PIPE_DIRECTORY"), 0u);
    } else {
      EXPECT_EQ(spec.share_enforcement, "none");
      EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "GPU-1");
    }
  }
}

// A share on a dmem GPU gets the GPU's VRAM region and its memory as the cap, a
// container share too (its container's cgroups go below the capped job cgroup, shim.cc);
// a dmem GPU without a known region stays "none".
TEST_F(TelemetryAgentTest, ProcessAndContainerSharesOnADmemGpuGetTheCap) {
  AcceptLaunches();
  gpu::GpuInfo dmem;
  dmem.vendor = gpu::Vendor::kAmd;
  dmem.index = 0;
  dmem.uuid = "GPU-D";
  dmem.memory_total_bytes = uint64_t{64} << 30;
  dmem.enforcement = "dmem";
  gpu::GpuInfo no_region = dmem;
  no_region.index = 1;
  no_region.uuid = "GPU-N";
  protocol::Work work;
  protocol::LaunchOrder order =
      EightGibShare(20, {{"amd", 0, "GPU-D", {"/dev/dri/renderD128"}, 125}});
  protocol::LaunchOrder container = order;
  container.job.id = 21;
  container.job.image = "localhost/app:1";
  protocol::LaunchOrder elsewhere = order;
  elsewhere.job.id = 22;
  elsewhere.gpus = {{"amd", 1, "GPU-N", {"/dev/dri/renderD129"}, 125}};
  work.launch = {order, container, elsewhere};
  link_->QueueWork(work);
  AgentLoopOptions ao = Options();
  ao.node.gpus = {dmem, no_region};
  ao.dmem_regions = {{"GPU-D", "drm/0000:03:00.0/vram0"}};
  ao.cdi_kind = "gpupool.local/gpu";
  Run(ao);
  std::unique_lock lock = WaitForLaunches(3);
  ASSERT_EQ(launcher_.launched.size(), 3u);
  for (const agent::LaunchSpec& spec : launcher_.launched) {
    SCOPED_TRACE(spec.id.job);
    EXPECT_EQ(spec.share_memory_bytes, uint64_t{8} << 30);
    if (spec.id.job == 22) {
      EXPECT_EQ(spec.share_enforcement, "none");
      EXPECT_TRUE(spec.dmem_region.empty());
      continue;
    }
    EXPECT_EQ(spec.share_enforcement, "dmem");
    EXPECT_EQ(spec.dmem_region, "drm/0000:03:00.0/vram0");
    EXPECT_EQ(BuildJobEnvironment(spec, {}).at("GPUPOOL_GPU_ENFORCEMENT"), "dmem");
  }
}

// A share on a GPU NVML's per-cgroup limits hold (enforcement "dmem", no dmem region) gets
// the library that caps it and its memory, a container share too; its --gpu-mem, else its
// share of the GPU's memory.
TEST_F(TelemetryAgentTest, SharesOnAGpuHeldByNvmlGetTheLibraryThatCapsThem) {
  AcceptLaunches();
  const gpu::GpuInfo held = Nvidia80G(0, "GPU-V", "dmem");
  protocol::Work work;
  protocol::LaunchOrder order = EightGibShare(23, {{"nvidia", 0, "GPU-V", {"/dev/nvidia0"}, 250}});
  protocol::LaunchOrder container = order;
  container.job.id = 24;
  container.job.image = "localhost/app:1";
  container.job.request.gpu_memory_bytes = 0;
  work.launch = {order, container};
  link_->QueueWork(work);
  AgentLoopOptions ao = Options();
  ao.node.gpus = {held};
  ao.nvml_memory_limits = {{"GPU-V", "/usr/lib/libnvidia-ml.so.1"}};
  ao.cdi_kind = "gpupool.local/gpu";
  Run(ao);
  std::unique_lock lock = WaitForLaunches(2);
  ASSERT_EQ(launcher_.launched.size(), 2u);
  for (const agent::LaunchSpec& spec : launcher_.launched) {
    SCOPED_TRACE(spec.id.job);
    EXPECT_EQ(spec.share_enforcement, "dmem");
    EXPECT_TRUE(spec.dmem_region.empty());
    EXPECT_EQ(spec.nvml_library, "/usr/lib/libnvidia-ml.so.1");
    EXPECT_EQ(spec.share_memory_bytes,
              spec.id.job == 23 ? uint64_t{8} << 30 : (uint64_t{80} << 30) / 1000 * 250);
  }
}

// Shares of an AMD GPU whose CU count discovery found (a CPX partition of an MI300X: 38
// CUs) get disjoint advisory CU masks of their size, and stay "none" (docs/sharing.md,
// "AMD"); a share of an AMD GPU with an unknown CU count gets no mask.
TEST_F(TelemetryAgentTest, AmdSharesOfOneGpuGetDisjointCuMasks) {
  AcceptLaunches();
  gpu::GpuInfo part;
  part.vendor = gpu::Vendor::kAmd;
  part.index = 0;
  part.uuid = "0x00000000000003e9";
  part.memory_total_bytes = uint64_t{24} << 30;
  part.compute_partition = "CPX";
  part.memory_partition = "NPS4";
  part.compute_units = 38;
  part.enforcement = "none";
  gpu::GpuInfo unknown = part;
  unknown.index = 1;
  unknown.uuid = "0x00000000000003ea";
  unknown.compute_units = 0;
  protocol::Work work;
  protocol::LaunchOrder half;
  half.job.id = 20;
  half.job.user = "alice";
  half.job.command = {"true"};
  half.job.request.gpus = 1;
  half.rendezvous = {0, 1, {"h"}, {1}, 0};
  half.gpus = {{"amd", 0, part.uuid, {"/dev/dri/renderD128"}, 500}};
  protocol::LaunchOrder quarter = half;
  quarter.job.id = 21;
  quarter.gpus[0].gpu_milli = 250;
  protocol::LaunchOrder elsewhere = half;
  elsewhere.job.id = 22;
  elsewhere.gpus = {{"amd", 1, unknown.uuid, {"/dev/dri/renderD129"}, 500}};
  work.launch = {half, quarter, elsewhere};
  link_->QueueWork(work);
  AgentLoopOptions ao = Options();
  ao.node.gpus = {part, unknown};
  Run(ao);
  std::unique_lock lock = WaitForLaunches(3);
  ASSERT_EQ(launcher_.launched.size(), 3u);
  std::vector<int> cus;
  for (const agent::LaunchSpec& spec : launcher_.launched) {
    SCOPED_TRACE(spec.id.job);
    EXPECT_EQ(spec.share_enforcement, "none");
    const auto env = BuildJobEnvironment(spec, {});
    EXPECT_EQ(env.at("GPUPOOL_GPU_ENFORCEMENT"), "none");
    if (spec.id.job == 22) {
      EXPECT_EQ(spec.cu_mask, "");
      EXPECT_EQ(env.count("HSA_CU_MASK"), 0u);
      continue;
    }
    ASSERT_FALSE(spec.cu_mask.empty());
    EXPECT_EQ(env.at("HSA_CU_MASK"), "0:" + spec.cu_mask);
    const std::vector<int> mine = agent::ParseCuList(spec.cu_mask, 38);
    EXPECT_EQ(mine.size(), spec.id.job == 20 ? 19u : 9u);
    cus.insert(cus.end(), mine.begin(), mine.end());
  }
  std::sort(cus.begin(), cus.end());
  EXPECT_EQ(std::adjacent_find(cus.begin(), cus.end()), cus.end()) << "the masks overlap";
  EXPECT_EQ(cus.size(), 28u);
}

// The controller relays `gpupool logs` reads to the node: each is answered through the
// link, with the bytes of a job's log, or why not (LogAnswer).
TEST_F(TelemetryAgentTest, LogReadsAreAnsweredWithTheBytesOrWhyNot) {
  const fs::path job = root_ / "state" / "jobs" / "9";
  fs::create_directories(job);
  std::ofstream(job / "stdout.log") << "hello\n";
  protocol::Work work;
  work.logs = {{1, (job / "stdout.log").string(), 1, 100},
               {2, (job / "stderr.log").string(), 0, 100},
               {3, "/etc/passwd", 0, 100}};
  link_->QueueWork(work);
  Start(3);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return r.log_answers.size() == 3; }));
  const std::vector<protocol::LogAnswer> got = link_->recorded().log_answers;
  EXPECT_EQ(got[0].id, 1);
  EXPECT_TRUE(got[0].status.ok()) << got[0].status.ToString();
  EXPECT_EQ(got[0].data, "ello\n");
  EXPECT_EQ(got[0].size, 6);
  EXPECT_EQ(got[0].node, "n1");
  EXPECT_EQ(got[1].status.code(), StatusCode::kNotFound);
  EXPECT_EQ(got[2].status.code(), StatusCode::kPermissionDenied);
}

// GPU 0, whose processes (and the memory each holds) the test sets.
class ProcessesOnGpu0 final : public gpu::TelemetrySampler {
 public:
  explicit ProcessesOnGpu0(std::vector<gpu::ProcessSample> processes)
      : processes_(std::move(processes)) {}
  std::string_view name() const override { return "test-processes"; }
  Result<std::vector<gpu::GpuSample>> Sample(int64_t) override {
    gpu::GpuSample s;
    s.index = 0;
    s.uuid = "GPU-0";
    s.processes = processes_;
    return std::vector<gpu::GpuSample>{s};
  }

 private:
  const std::vector<gpu::ProcessSample> processes_;
};

// The GPU memory watch (gpu_mem_watch.h) of an agent on one unenforced GPU 0, whose
// processes 100 and 101 run in the cgroups of jobs 30 and 31.
class GpuMemWatchAgentTest : public TelemetryAgentTest {
 protected:
  // Launches 8 GiB shares of jobs `jobs` on the 80 GiB NVIDIA GPU 0, with `processes` on
  // it and the watch's `slack`, runs two telemetry rounds and returns the stops asked for.
  std::vector<std::pair<RunId, StopRequest>> TwoRounds(const std::vector<int64_t>& jobs,
                                                       std::vector<gpu::ProcessSample> processes,
                                                       int64_t slack) {
    return TwoRoundsOn(Nvidia80G(0, "GPU-0", "none"), "nvidia", jobs,
                       std::make_shared<ProcessesOnGpu0>(std::move(processes)), slack);
  }
  // The same on `gpu0` (of `vendor`), sampled by `sampler`.
  std::vector<std::pair<RunId, StopRequest>> TwoRoundsOn(
      const gpu::GpuInfo& gpu0, const std::string& vendor, const std::vector<int64_t>& jobs,
      std::shared_ptr<gpu::TelemetrySampler> sampler, int64_t slack) {
    AcceptLaunches();
    const std::string node = vendor == "amd" ? "/dev/dri/renderD128" : "/dev/nvidia0";
    protocol::Work work;
    for (int64_t job : jobs) {
      work.launch.push_back(EightGibShare(job, {{vendor, 0, gpu0.uuid, {node}, 100}}));
    }
    link_->QueueWork(work);
    Cgroup(100, "0::/gpupool/job-30-0.1-5\n");
    Cgroup(101, "0::/gpupool/job-31-0.1-6\n");
    AgentLoopOptions ao = Options();
    ao.node.gpus = {gpu0};
    ao.sampler = std::move(sampler);
    ao.proc_root = root_.string();
    ao.gpu_mem_slack_bytes = slack;
    Run(ao);
    WaitForLaunches(jobs.size()).unlock();
    loop_->TelemetryRound();
    loop_->TelemetryRound();  // a share still over is not stopped twice
    std::lock_guard lock(launcher_.mu);
    return launcher_.stops;
  }
};

// A round that finds a share's processes over its memory and the slack stops it at once
// (no grace), saying why, and only once; a share within its slack runs on.
TEST_F(GpuMemWatchAgentTest, AShareOverItsMemoryAndTheSlackIsStoppedOnce) {
  // Job 30: 9.5 GiB against 8 GiB and the default slack of 1 GiB; job 31: 8.5 GiB.
  const auto stops = TwoRounds({30, 31}, {{100, 9728, {}}, {101, 8704, {}}}, int64_t{1} << 30);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].first, (RunId{30, 0, 0, 0}));  // the order's attempt
  EXPECT_EQ(stops[0].second.grace_s, 0);
  EXPECT_EQ(stops[0].second.reason,
            "its processes used 9728 MiB of GPU 0 (GPU-0)'s memory, more than its share's "
            "8192 MiB and the node's slack of 1024 MiB: stopped by the node's GPU memory watch "
            "(the GPU's enforcement: none)");
}

TEST_F(GpuMemWatchAgentTest, WithTheWatchOffNoShareIsStopped) {
  EXPECT_TRUE(TwoRounds({30}, {{100, 40 * 1024, {}}}, -1).empty());
}

// On an AMD GPU (docs/sharing.md, "AMD GPUs": no MIG or MPS there, so the watch is what
// holds a share to its memory): the ROCm SMI sampler, with the fake librocm_smi64.so
// loaded through the real dlopen path, lists job 30's process at 9.5 GiB and job 31's at
// 8.5 GiB on the MI300X's partition; job 30's 8 GiB share is stopped, naming the GPU.
TEST_F(GpuMemWatchAgentTest, AnAmdShareOverItsMemoryIsStoppedFromRocmSmisProcesses) {
  constexpr uint64_t kMiB = 1 << 20;
  const nlohmann::json scenario = {
      {"devices", {{{"bdfid", 0xc1u << 8}, {"busy_percent", 50}, {"vram_total", 24ull << 30}}}},
      {"processes",
       {{{"pid", 100}, {"devices", {0}}, {"vram", {9728 * kMiB}}},
        {{"pid", 101}, {"devices", {0}}, {"vram", {8704 * kMiB}}}}}};
  std::ofstream(root_ / "rsmi.json") << scenario.dump();
  setenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO", (root_ / "rsmi.json").c_str(), 1);
  gpu::GpuInfo part;
  part.vendor = gpu::Vendor::kAmd;
  part.index = 0;
  part.uuid = "0x00000000000003e9";
  part.pci_bus_id = "0000:c1:00.0";
  part.memory_total_bytes = uint64_t{24} << 30;
  part.compute_units = 38;
  part.enforcement = "none";
  gpu::NodeInfo node;
  node.gpus = {part};
  Result<std::unique_ptr<gpu::TelemetrySampler>> sampler =
      gpu::NewRocmSmiSampler(FAKE_ROCM_SMI_LIBRARY, node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  const auto stops = TwoRoundsOn(part, "amd", {30, 31}, std::move(*sampler), int64_t{1} << 30);
  unsetenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO");
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].first, (RunId{30, 0, 0, 0}));
  EXPECT_EQ(stops[0].second.grace_s, 0);
  EXPECT_EQ(stops[0].second.reason,
            "its processes used 9728 MiB of GPU 0 (0x00000000000003e9)'s memory, more than its "
            "share's 8192 MiB and the node's slack of 1024 MiB: stopped by the node's GPU memory "
            "watch (the GPU's enforcement: none)");
}

}  // namespace
}  // namespace gpupool::agent
