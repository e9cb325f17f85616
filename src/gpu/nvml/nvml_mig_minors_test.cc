#include "gpu/nvml/nvml_mig_minors.h"

#include <gtest/gtest.h>

namespace gpupool::gpu::nvml {
namespace {

TEST(MigMinorsTest, BothNodesOfAnInstanceOrNone) {
  const MigMinors m = MigMinors::Parse(
      "config 1\nmonitor 2\n"
      "gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
      "gpu3/gi2/access 30\t\ngpu3/gi2/ci7/access 31\n"
      "gpu3/gi4/access 40\n"                                   // no compute instance listed
      "gpu3/gi5/ci0/access 51\n"                               // no GPU instance listed
      "gpu3/gi6/access 99999999999\ngpu3/gi6/ci0/access 61\n"  // minor out of range
      "no number here\n\n");
  using Nodes = std::vector<std::string>;
  EXPECT_EQ(m.DeviceNodes(0, 1, 0),
            (Nodes{"/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"}));
  // gpu<N> is the minor number; instances are matched exactly (gi2 is not gi20).
  EXPECT_EQ(m.DeviceNodes(3, 2, 7),
            (Nodes{"/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"}));
  EXPECT_TRUE(m.DeviceNodes(3, 20, 7).empty());
  EXPECT_TRUE(m.DeviceNodes(0, 1, 1).empty());
  EXPECT_TRUE(m.DeviceNodes(3, 4, 0).empty());
  EXPECT_TRUE(m.DeviceNodes(3, 5, 0).empty());
  EXPECT_TRUE(m.DeviceNodes(3, 6, 0).empty());
  EXPECT_TRUE(m.DeviceNodes(-1, 1, 0).empty());
  EXPECT_TRUE(m.DeviceNodes(0, -1, 0).empty());
  EXPECT_TRUE(MigMinors::Parse("").DeviceNodes(0, 1, 0).empty());
}

TEST(MigMinorsTest, PathIsBelowTheProcRoot) {
  EXPECT_EQ(MigMinorsPath("/proc"), "/proc/driver/nvidia-caps/mig-minors");
  EXPECT_EQ(MigMinorsPath("/tmp/p/"), "/tmp/p/driver/nvidia-caps/mig-minors");
}

}  // namespace
}  // namespace gpupool::gpu::nvml
