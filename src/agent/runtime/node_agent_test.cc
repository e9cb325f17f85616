// Which GPUs NVML's per-cgroup memory limits hold (HoldWithNvmlMemoryLimits), with the
// fake libnvidia-ml (tests/fakelib/nvml): its memory_limits build exports
// nvmlDeviceSetMemoryLimits_v1, its normal build (a driver before R615) does not.
#include "agent/runtime/node_agent.h"

#include <gtest/gtest.h>

#include "agent/nvml_memory.h"

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

}  // namespace
}  // namespace gpupool::agent
