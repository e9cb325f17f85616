// The agent's side of GPU telemetry that needs no controller: mapping a process to the
// job whose cgroup it runs in.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "agent/launcher.h"
#include "agent/runtime/agent_loop.h"
#include "net/http_server.h"
#include "protocol/agent_protocol.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

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
  // A task of a gang: the cgroup is named by the task's launcher key.
  const int64_t key = agent::TaskKey(44, 3, 4);
  Cgroup(15, "0::/gpupool/job-" + std::to_string(key) + "-1-9\n");
  EXPECT_EQ(JobOfProcess(root_.string(), 10), 42);
  EXPECT_EQ(JobOfProcess(root_.string(), 11), 43);
  EXPECT_EQ(JobOfProcess(root_.string(), 12), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 13), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 14), 0);
  EXPECT_EQ(JobOfProcess(root_.string(), 15), 44);
  EXPECT_EQ(JobOfProcess(root_.string(), 99), 0);  // gone
}

// A launcher that runs nothing; with `accept` it records what it was asked to launch.
class IdleLauncher final : public agent::Launcher {
 public:
  using agent::Launcher::Launch;
  Status Launch(const agent::LaunchSpec& spec, const agent::JobStdio&) override {
    std::lock_guard lock(mu);
    if (!accept) return Status::Unavailable("not in this test");
    launched.push_back(spec);
    return Status::Ok();
  }
  std::mutex mu;
  bool accept = false;
  std::vector<agent::LaunchSpec> launched;
  Status Cancel(int64_t) override { return Status::NotFound("none"); }
  std::vector<agent::JobEvent> Poll() override { return {}; }
  std::vector<agent::JobEvent> Wait(int timeout_ms) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 20)));
    return {};
  }
  Result<std::vector<agent::JobEvent>> Adopt() override { return std::vector<agent::JobEvent>{}; }
  Status Forget(int64_t) override { return Status::Ok(); }
  std::vector<int64_t> Running() const override { return {}; }
};

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

// A controller of protocol `minor` that records the telemetry batches it is sent and can
// be made to refuse them (away).
class TelemetryAgentTest : public JobOfProcessTest {
 protected:
  void Start(int minor) {
    net::HttpServerOptions o;
    o.unix_socket_path = (root_ / "c.sock").string();
    auto server = net::StartHttpServer(o, [this, minor](const net::HttpRequest& r) {
      net::HttpResponse a;
      std::unique_lock lock(mu_);
      if (r.path == "/v1/agent/register") {
        registered_ = true;
        a.body =
            R"({"ok": true, "protocol": "1.)" + std::to_string(minor) + R"(", "address": "x"})";
      } else if (r.path == "/v1/agent/telemetry") {
        ++posts_;
        if (away_) {
          a.status = 503;
          a.body = R"({"error": "away"})";
        } else {
          Result<protocol::TelemetryBatch> b = protocol::DecodeTelemetryBatch(Json::parse(r.body));
          if (b.ok()) received_.insert(received_.end(), b->samples.begin(), b->samples.end());
          a.body = R"({"ok": true, "accepted": 1})";
        }
      } else if (r.path == "/v1/agent/work") {
        ++polls_;
        if (hold_polls_) {
          // A long poll the controller holds (released when the test ends).
          polled_.notify_all();
          released_.wait_for(lock, std::chrono::seconds(20), [this] { return !hold_polls_; });
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        a.body = work_.empty() ? "{}" : std::move(work_);
        work_.clear();
      } else {
        a.body = R"({"ok": true})";
      }
      return a;
    });
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    AgentLoopOptions ao;
    ao.node_name = "n1";
    ao.state_dir = (root_ / "state").string();
    ao.telemetry_interval_s = 0;  // rounds driven by the test
    ao.sampler = std::make_shared<OneGpu>();
    ao.clock = &clock_;
    net::ServerAddress addr;
    addr.path = o.unix_socket_path;
    loop_ = std::make_unique<AgentLoop>(ao, net::HttpClient(addr, "t"), &launcher_);
    thread_ = std::thread([this] { loop_->Run(); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard lock(mu_);
        if (registered_) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  void TearDown() override {
    if (loop_) {
      loop_->Stop();
      thread_.join();
    }
    {
      std::lock_guard lock(mu_);
      hold_polls_ = false;
    }
    released_.notify_all();
    server_.reset();
    JobOfProcessTest::TearDown();
  }

  ManualClock clock_{1'800'000'000'000'000};
  IdleLauncher launcher_;
  std::unique_ptr<net::HttpServer> server_;
  std::unique_ptr<AgentLoop> loop_;
  std::thread thread_;
  std::mutex mu_;
  bool registered_ = false;
  bool away_ = false;
  bool hold_polls_ = false;
  int polls_ = 0;
  std::condition_variable polled_;
  std::condition_variable released_;
  int posts_ = 0;
  std::vector<protocol::GpuTelemetry> received_;
  std::string work_;  // the next poll's answer
};

// Stopping the agent does not wait for the controller to answer its long poll (it used
// to take up to the poll's 10 s, plus its 10 s of grace with a frozen controller).
TEST_F(TelemetryAgentTest, StopCutsTheLongPollShort) {
  {
    std::lock_guard lock(mu_);
    hold_polls_ = true;
  }
  Start(3);
  {
    std::unique_lock lock(mu_);
    ASSERT_TRUE(polled_.wait_for(lock, std::chrono::seconds(10), [this] { return polls_ > 0; }));
  }
  const auto start = std::chrono::steady_clock::now();
  loop_->Stop();
  thread_.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  loop_.reset();
}

TEST_F(TelemetryAgentTest, AOneMinorOlderControllerIsSentNoTelemetry) {
  Start(2);
  // Rounds until the loop has read the registration answer (it then drops its samples).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (loop_->TelemetryRound() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(loop_->TelemetryRound(), 0u);
  std::lock_guard lock(mu_);
  EXPECT_EQ(posts_, 0);
}

TEST_F(TelemetryAgentTest, BatchesGoToA13ControllerAndWaitWhileItIsAway) {
  Start(3);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (loop_->TelemetryRound() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    std::lock_guard lock(mu_);
    ASSERT_FALSE(received_.empty());
    EXPECT_EQ(received_.back().util_pct, 42);
    EXPECT_EQ(received_.back().mem_used_mib, 7);
    EXPECT_EQ(received_.back().xid_errors, 79);
    EXPECT_EQ(received_.back().xid_count, 2);
    EXPECT_EQ(received_.back().ecc_uncorrected, 5);
    EXPECT_EQ(received_.back().at_ms, 1'800'000'000'000);  // the injected clock
    received_.clear();
    away_ = true;
  }
  EXPECT_EQ(loop_->TelemetryRound(), 1u);
  clock_.AdvanceMicros(5'000'000);
  EXPECT_EQ(loop_->TelemetryRound(), 2u);  // kept, oldest first
  {
    std::lock_guard lock(mu_);
    away_ = false;
  }
  clock_.AdvanceMicros(5'000'000);
  EXPECT_EQ(loop_->TelemetryRound(), 0u);
  std::lock_guard lock(mu_);
  ASSERT_EQ(received_.size(), 3u);  // the two kept rounds and this one, in one batch
  EXPECT_LT(received_[0].at_ms, received_[2].at_ms);
}

// The first task on a node of an --mpi gang covers the job's other task there
// (LaunchOrder::node_tasks): its GPUs came in the order, its limits are both tasks'. The
// GPU the two specs share is one job's, listed once: the controller counts each listing.
TEST_F(TelemetryAgentTest, ANodesLaunchUnitTakesItsTasksLimitsAndListsItsJobOncePerGpu) {
  {
    std::lock_guard lock(launcher_.mu);
    launcher_.accept = true;
  }
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
  {
    std::lock_guard lock(mu_);
    work_ = DumpJson(protocol::EncodeWork(work));
  }
  Start(3);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard lock(launcher_.mu);
      if (launcher_.launched.size() == 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    std::lock_guard lock(launcher_.mu);
    ASSERT_EQ(launcher_.launched.size(), 2u);
    for (const agent::LaunchSpec& spec : launcher_.launched) {
      SCOPED_TRACE(spec.task_index);
      const int64_t tasks = spec.task_index == 0 ? 2 : 1;
      EXPECT_EQ(spec.cpu_milli, 1500 * tasks);
      EXPECT_EQ(spec.memory_bytes, (uint64_t{3} << 30) * static_cast<uint64_t>(tasks));
      EXPECT_EQ(spec.gpus.size(), static_cast<size_t>(tasks));
      const std::vector<std::string> held_argv = {"sleep", "infinity"};
      EXPECT_EQ(spec.argv, spec.task_index == 0 ? unit.job.command.get() : held_argv);
    }
  }
  while (loop_->TelemetryRound() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::lock_guard lock(mu_);
  ASSERT_FALSE(received_.empty());
  ASSERT_EQ(received_.back().jobs.size(), 1u);  // GPU 0: in both specs, one job
  EXPECT_EQ(received_.back().jobs[0].job_id, 7);
}

}  // namespace
}  // namespace gpupool::agent
