#include "controller/job_scheduler.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gpupool::controller
