#include "controller/job_scheduler.h"

#include <gtest/gtest.h>

#include <vector>

#include "controller/sched_input.h"

namespace gpupool::controller {
namespace {

TEST(GpuModelKeyTest, ShortNames) {
  EXPECT_EQ(GpuModelKey("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(GpuModelKey("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(GpuModelKey("Tesla V100-SXM2-32GB"), "V100");
  EXPECT_EQ(GpuModelKey("AMD Instinct MI250X"), "MI250X");
  EXPECT_EQ(GpuModelKey("NVIDIA GeForce RTX 4090"), "4090");
  EXPECT_EQ(GpuModelKey(""), "GPU");
}

gpu::NodeInfo MpsNode(const std::string& host, const std::vector<std::string>& enforcement) {
  gpu::NodeInfo n;
  n.hostname = host;
  for (size_t i = 0; i < enforcement.size(); ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = static_cast<int>(i);
    g.name = "NVIDIA H100 80GB HBM3";
    g.uuid = host + "-GPU-" + std::to_string(i);
    g.memory_total_bytes = uint64_t{80} << 30;
    g.enforcement = enforcement[i];
    n.gpus.push_back(g);
  }
  return n;
}

jobs::Job Share(int64_t id, uint32_t uid, int milli, const std::string& node = "",
                const std::string& uuid = "") {
  jobs::Job j;
  j.id = id;
  j.uid = uid;
  j.user = "u" + std::to_string(uid);
  j.command = {"true"};
  j.request.gpus = 1;
  j.request.gpu_milli = milli;
  j.request.cpu_milli = 100;
  if (!node.empty()) {
    j.state = jobs::JobState::kRunning;
    j.placement = {jobs::TaskPlacement{node, {0}, {uuid}, milli}};
  }
  return j;
}

// Issue 28: GPUs whose node states MPS are single-owner unless the admin allows several
// users; a share is owned by its uid + 1; running shares hold their GPU's owner.
TEST(SchedInputTest, MpsGpusAreSingleOwnerAndSharesOwnedByTheirUser) {
  const gpu::NodeInfo a = MpsNode("a", {"mps", "none"}), b = MpsNode("b", {"mps", ""});
  const std::vector<SchedNode> nodes = {{"a", &a, 64000, 256000, false, {}},
                                        {"b", &b, 64000, 256000, false, {}}};
  SchedInput in(nodes);
  EXPECT_EQ(in.cluster.node(0).single_owner_gpus, 0b01u);
  EXPECT_EQ(in.cluster.node(1).single_owner_gpus, 0b01u);
  SchedInput multi(nodes, /*mps_multi_user=*/true);
  EXPECT_FALSE(multi.cluster.has_single_owner_gpus());

  EXPECT_EQ(in.TaskFor(Share(1, 1000, 300))->owner, 1001);
  jobs::Job by_memory = Share(2, 0, 1000);
  by_memory.request.gpu_memory_bytes = uint64_t{20} << 30;
  EXPECT_EQ(in.TaskFor(by_memory)->owner, 1);             // root's share: uid 0 is owner 1
  EXPECT_EQ(in.TaskFor(Share(3, 1000, 1000))->owner, 0);  // a whole GPU is no share
  jobs::Job two = Share(4, 1000, 1000);
  two.request.gpus = 2;
  EXPECT_EQ(in.TaskFor(two)->owner, 0);

  // Running: uid 1000's share holds GPU 0 of a. A share of uid 1001 already running there
  // (placed under --mps-multi-user) is still counted, without an owner.
  const jobs::Job first = Share(10, 1000, 300, "a", "a-GPU-0");
  const jobs::Job second = Share(11, 1001, 200, "a", "a-GPU-0");
  in.AddJobs({&first, &second}, {});
  EXPECT_EQ(in.cluster.OwnerOf(0, 0), 1001);
  EXPECT_EQ(in.cluster.node(0).gpu_free_milli[0], 500);
  EXPECT_EQ(in.running.size(), 2u);
}

}  // namespace
}  // namespace gpupool::controller
