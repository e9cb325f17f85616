// Issue 29 item 2 (docs/health.md, "Hardware health thresholds"): the hardware health fields
// of an agent's telemetry move its GPUs' health by the policy's threshold rows, through the
// controller's real store (SQLite) and scheduler.
#include <gtest/gtest.h>

#include "common/clock.h"
#include "controller/controller.h"
#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

using jobs::Job;
using jobs::JobState;

class HwHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    Restart();
    root_ = {"root", 0, 0, true};
    alice_ = {"alice", 1000, 1000, false};
  }
  void Restart(ControllerOptions options = {}) {
    c_.reset();
    options.node_timeout_us = 10'000'000;
    auto c = Controller::Create(store_.get(), &clock_, options);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c_ = std::move(c).value();
  }
  void Register(int gpus) {
    protocol::Registration r;
    r.node = "n1";
    for (int i = 0; i < gpus; ++i) {
      gpu::GpuInfo g;
      g.vendor = gpu::Vendor::kNvidia;
      g.index = i;
      g.name = "NVIDIA A100-SXM4-80GB";
      g.uuid = "GPU-" + std::to_string(1000 + i);
      g.pci_bus_id = "0000:0" + std::to_string(i) + ":00.0";
      g.memory_total_bytes = uint64_t{80} << 30;
      g.device_nodes = {"/dev/nvidia" + std::to_string(i)};
      r.info.gpus.push_back(g);
    }
    r.info.hostname = "n1";
    r.version = protocol::kVersion;
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  }
  static protocol::GpuTelemetry Sample(int index, gpu::HardwareHealth hw,
                                       std::optional<int64_t> ecc = std::nullopt) {
    protocol::GpuTelemetry s;
    s.index = index;
    s.uuid = "GPU-" + std::to_string(1000 + index);
    s.hw = hw;
    s.ecc_uncorrected = ecc;
    return s;
  }
  gpu::GpuHealthState State(const std::string& uuid) {
    const NodeView n = c_->Nodes().at(0);
    auto it = n.gpu_health.find(uuid);
    return it == n.gpu_health.end() ? gpu::GpuHealthState::kHealthy : it->second.state;
  }
  Job Get(int64_t id) { return c_->Get(id, root_).value(); }
  Job OneGpuJob() {
    Job j;
    j.command = {"true"};
    j.request.gpus = 1;
    j.request.gpu_milli = 1000;
    j.request.cpu_milli = 100;
    return c_->Submit(j, alice_).value();
  }

  ManualClock clock_{1'700'000'000'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
  Caller root_, alice_;
};

// A failed row remapping cordons the GPU (its job goes on; nothing new lands there); HW
// slowdown makes another suspect (it still takes work); uncorrected ECC errors growing
// make a third suspect, then cordon it. Stored: a restart keeps them.
TEST_F(HwHealthTest, EachRowMovesItsGpuAndCordonedOnesTakeNoWork) {
  Register(4);
  const Job running = OneGpuJob();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(running.id).state, JobState::kAssigned);
  const std::string held = Get(running.id).placement[0].gpu_uuids.at(0);
  const int held_index = held.back() - '0';
  const int others[3] = {(held_index + 1) % 4, (held_index + 2) % 4, (held_index + 3) % 4};
  gpu::HardwareHealth failed;
  failed.remapped_rows_failed = true;
  gpu::HardwareHealth slow;
  slow.hw_slowdown = true;
  ASSERT_TRUE(c_->ObserveHardwareHealth(
                    "n1", {Sample(held_index, failed), Sample(others[0], slow),
                           Sample(others[1], {}, 1), Sample(7, failed)})  // 7: not its GPU
                  .ok());
  const auto uuid = [](int i) { return "GPU-" + std::to_string(1000 + i); };
  EXPECT_EQ(State(held), gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(State(uuid(others[0])), gpu::GpuHealthState::kSuspect);
  EXPECT_EQ(State(uuid(others[1])), gpu::GpuHealthState::kSuspect);
  EXPECT_EQ(State(uuid(others[2])), gpu::GpuHealthState::kHealthy);
  EXPECT_EQ(Get(running.id).state, JobState::kAssigned);  // its job goes on
  const NodeView n = c_->Nodes().at(0);
  EXPECT_EQ(n.gpu_health.at(held).by, "policy");
  EXPECT_NE(n.gpu_health.at(held).reason.find("remapped-rows-failed"), std::string::npos);
  ASSERT_TRUE(c_->ObserveHardwareHealth("n1", {Sample(others[1], {}, 3)}).ok());
  EXPECT_EQ(State(uuid(others[1])), gpu::GpuHealthState::kCordoned);
  // Three one-GPU jobs: two land on the GPUs in service (the suspect one included), the
  // third waits: nothing lands on a cordoned GPU.
  const Job a = OneGpuJob(), b = OneGpuJob(), d = OneGpuJob();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  int placed = 0;
  for (int64_t id : {a.id, b.id, d.id}) {
    const Job j = Get(id);
    if (j.state != JobState::kAssigned) continue;
    ++placed;
    EXPECT_NE(j.placement[0].gpu_uuids.at(0), held);
    EXPECT_NE(j.placement[0].gpu_uuids.at(0), uuid(others[1]));
  }
  EXPECT_EQ(placed, 2);
  Restart();
  EXPECT_EQ(State(held), gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(State(uuid(others[1])), gpu::GpuHealthState::kCordoned);
}

// An admin puts a cordoned GPU back: the same reading does not cordon it again (also after
// a restart: the levels are stored), a worse one does.
TEST_F(HwHealthTest, AResumedGpuIsNotCordonedAgainForTheSameCount) {
  Register(1);
  gpu::HardwareHealth hw;
  hw.retired_pages = 60;
  ASSERT_TRUE(c_->ObserveHardwareHealth("n1", {Sample(0, hw)}).ok());
  EXPECT_EQ(State("GPU-1000"), gpu::GpuHealthState::kCordoned);
  ASSERT_TRUE(c_->ResumeGpu("n1", "0", root_).ok());
  hw.retired_pages = 61;
  ASSERT_TRUE(c_->ObserveHardwareHealth("n1", {Sample(0, hw)}).ok());
  EXPECT_EQ(State("GPU-1000"), gpu::GpuHealthState::kHealthy);
  Restart();
  Register(1);
  ASSERT_TRUE(c_->ObserveHardwareHealth("n1", {Sample(0, hw)}).ok());
  EXPECT_EQ(State("GPU-1000"), gpu::GpuHealthState::kHealthy);
  hw.remapped_rows_pending = true;
  ASSERT_TRUE(c_->ObserveHardwareHealth("n1", {Sample(0, hw)}).ok());
  EXPECT_EQ(State("GPU-1000"), gpu::GpuHealthState::kCordoned);
}

// The server's --health-threshold replaces rows; a bad one names the flag.
TEST_F(HwHealthTest, ThresholdOverridesApplyAndBadOnesNameTheFlag) {
  ControllerOptions o;
  o.health_threshold = "hw-slowdown:0:1";
  Restart(o);
  Register(1);
  gpu::HardwareHealth slow;
  slow.hw_slowdown = true;
  ASSERT_TRUE(c_->ObserveHardwareHealth("n1", {Sample(0, slow)}).ok());
  EXPECT_EQ(State("GPU-1000"), gpu::GpuHealthState::kCordoned);
  o.health_threshold = "hw-slowdown:0:2";
  Result<std::unique_ptr<Controller>> bad = Controller::Create(store_.get(), &clock_, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--health-threshold"), std::string::npos);
  EXPECT_NE(bad.status().message().find("hw-slowdown:0:2"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::controller
