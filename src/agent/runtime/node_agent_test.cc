// Which GPUs NVML's per-cgroup memory limits hold (HoldWithNvmlMemoryLimits), with the
// fake libnvidia-ml (tests/fakelib/nvml): its memory_limits build exports
// nvmlDeviceSetMemoryLimits_v1, its normal build (a driver before R615) does not. And
// NodeAgent::WaitEnded, which `gpupool agent` waits on, against an in-process controller.
#include "agent/runtime/node_agent.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <stop_token>

#include "agent/nvml_memory.h"
#include "protocol/fake_controller_link.h"

namespace gpupool::agent {
namespace {

gpu::GpuInfo Gpu(const std::string& uuid, const std::string& enforcement) {
  gpu::GpuInfo g;
  g.vendor = gpu::Vendor::kNvidia;
  g.uuid = uuid;
  g.backend = "nvml";
  g.enforcement = enforcement;
  return g;
}

// The users systemd keeps a manager for (one file each under /var/lib/systemd/linger),
// sorted; none without the directory.
TEST(LingeringUsersTest, OneFilePerUserSortedAndNoneWithoutTheDirectory) {
  const std::string dir = ::testing::TempDir() + "linger-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(LingeringUsers(dir).empty());
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(LingeringUsers(dir).empty());
  for (const char* u : {"bob", "alice"}) std::ofstream(dir + "/" + u) << "";
  EXPECT_EQ(LingeringUsers(dir), (std::vector<std::string>{"alice", "bob"}));
  std::filesystem::remove_all(dir);
}

// GPUs found through NVML that no other mode holds; never a GPU in MIG mode, one MPS or
// the kernel's dmem controller holds, or one replayed from a file.
TEST(NvmlMemoryLimitsTest, HoldOnlyNvmlGpusNoOtherModeHolds) {
  gpu::NodeInfo node;
  node.gpus = {Gpu("GPU-free", "none"),   Gpu("GPU-mig", "mig"),          Gpu("GPU-mps", "mps"),
               Gpu("GPU-kernel", "dmem"), Gpu("GPU-pending-mig", "none"), Gpu("GPU-file", "none")};
  node.gpus[4].mig_enabled = true;
  node.gpus[5].backend = "fake";
  const std::string library = NvmlMemoryLimitsLibrary(FAKE_NVML_LIBRARY);
  ASSERT_FALSE(library.empty());
  std::map<std::string, std::string> held;
  EXPECT_EQ(HoldWithNvmlMemoryLimits(library, &node, &held), 1);
  EXPECT_EQ(held, (std::map<std::string, std::string>{{"GPU-free", library}}));
  std::vector<std::string> modes;
  for (const gpu::GpuInfo& g : node.gpus) modes.push_back(g.enforcement);
  EXPECT_EQ(modes, (std::vector<std::string>{"dmem", "mig", "mps", "dmem", "none", "none"}));
}

// A driver without the call (before R615) holds none.
TEST(NvmlMemoryLimitsTest, ALibraryWithoutTheCallHoldsNone) {
  gpu::NodeInfo node;
  node.gpus = {Gpu("GPU-free", "none")};
  std::map<std::string, std::string> held;
  EXPECT_EQ(HoldWithNvmlMemoryLimits(NvmlMemoryLimitsLibrary(FAKE_NVML_OLD_LIBRARY), &node, &held),
            0);
  EXPECT_TRUE(held.empty());
  EXPECT_EQ(node.gpus[0].enforcement, "none");
}

// A node agent on a replayed one-GPU node, with nothing to probe (no podman, no MPS).
class NodeAgentWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gpupool-nawait-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    link_ = std::make_shared<protocol::FakeControllerLink>();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  NodeAgentOptions Options() const {
    NodeAgentOptions o;
    o.state_dir = dir_.string();
    o.fake_file = GPUPOOL_SOURCE_DIR "/examples/nodes/nvidia-1gpu.json";
    o.node_name = "n1";
    o.telemetry_interval_s = 0;
    o.gpu_enforcement = "none";
    o.podman = (dir_ / "no-podman").string();
    return o;
  }

  std::filesystem::path dir_;
  std::shared_ptr<protocol::FakeControllerLink> link_;
};

// Ten seconds is no timing of the wake-up: a wait that ended on its event returns at
// once, one that does not wake would hang (WaitEnded has no deadline).
constexpr auto kEnds = std::chrono::seconds(10);

// A controller too far from this agent's protocol ends its loop: the wait ends with it.
TEST_F(NodeAgentWaitTest, AnAgentThatItsControllerEndedEndsTheWait) {
  link_->SetVersion({protocol::kVersion.major + 1, 0});
  NodeAgent agent(Options());
  ASSERT_TRUE(agent.Start(link_).ok());
  std::stop_source never;
  std::future<bool> ended =
      std::async(std::launch::async, [&] { return agent.WaitEnded(never.get_token()); });
  ASSERT_EQ(ended.wait_for(kEnds), std::future_status::ready) << "the wait did not end";
  EXPECT_TRUE(ended.get());
  EXPECT_TRUE(agent.ended());
  EXPECT_EQ(agent.Stop().code(), StatusCode::kFailedPrecondition);
}

// A stop requested (Ctrl-C) ends the wait of an agent that runs on.
TEST_F(NodeAgentWaitTest, AStopRequestEndsTheWaitAtOnce) {
  NodeAgent agent(Options());
  ASSERT_TRUE(agent.Start(link_).ok());
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return !r.registrations.empty(); }));
  std::stop_source stop;
  std::future<bool> ended =
      std::async(std::launch::async, [&] { return agent.WaitEnded(stop.get_token()); });
  EXPECT_EQ(ended.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  stop.request_stop();
  ASSERT_EQ(ended.wait_for(kEnds), std::future_status::ready) << "the wait did not end";
  EXPECT_FALSE(ended.get());
  EXPECT_FALSE(agent.ended());
  EXPECT_TRUE(agent.Stop().ok());
}

// `gpupool agent` twice on one state directory: the second does not start.
TEST_F(NodeAgentWaitTest, ASecondAgentOnTheStateDirectoryDoesNotStart) {
  NodeAgent first(Options());
  ASSERT_TRUE(first.Start(link_).ok());
  NodeAgent second(Options());
  const Status s = second.Start(std::make_shared<protocol::FakeControllerLink>());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("another gpupool agent"), std::string::npos) << s.message();
  EXPECT_TRUE(first.Stop().ok());
}

// The agent registers with its identity: the same after a restart on the directory.
TEST_F(NodeAgentWaitTest, TheIdentityOutlivesARestart) {
  std::string id;
  for (int start = 0; start < 2; ++start) {
    link_ = std::make_shared<protocol::FakeControllerLink>();
    NodeAgent agent(Options());
    ASSERT_TRUE(agent.Start(link_).ok());
    ASSERT_TRUE(link_->WaitFor([](const auto& r) { return !r.registrations.empty(); }));
    const std::string sent = link_->recorded().registrations[0].agent_id;
    EXPECT_FALSE(sent.empty());
    if (start == 0) id = sent;
    EXPECT_EQ(sent, id);
    EXPECT_TRUE(agent.Stop().ok());
  }
}

}  // namespace
}  // namespace gpupool::agent
