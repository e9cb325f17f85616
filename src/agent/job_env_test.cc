#include "agent/job_env.h"

#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

LaunchSpec BaseSpec() {
  LaunchSpec s;
  s.job_id = 42;
  s.attempt = 2;
  s.user = "alice";
  s.argv = {"true"};
  return s;
}

TEST(JobEnvTest, NvidiaGrantSetsUuidsAndShares) {
  LaunchSpec s = BaseSpec();
  s.gpus = {{"nvidia", 3, "GPU-aaa", {"/dev/nvidia3"}, 1000},
            {"nvidia", 5, "GPU-bbb", {"/dev/nvidia5"}, 1000}};
  auto env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "GPU-aaa,GPU-bbb");
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "GPU-aaa,GPU-bbb");
  EXPECT_EQ(env["GPUPOOL_GPU_MILLI"], "1000");
  EXPECT_EQ(env["GPUPOOL_JOB_ID"], "42");
  EXPECT_EQ(env["GPUPOOL_ATTEMPT"], "2");
  EXPECT_EQ(env.count("ROCR_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(env.count("HIP_VISIBLE_DEVICES"), 0u);
}

TEST(JobEnvTest, AmdGrantWithUuidsSetsBothVariables) {
  LaunchSpec s = BaseSpec();
  s.gpus = {{"amd", 1, "GPU-1111", {}, 250}};
  auto env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["ROCR_VISIBLE_DEVICES"], "GPU-1111");
  EXPECT_EQ(env["HIP_VISIBLE_DEVICES"], "GPU-1111");
  EXPECT_EQ(env["GPUPOOL_GPU_MILLI"], "250");
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
}

TEST(JobEnvTest, AmdGrantWithoutUuidUsesIndicesThenPositions) {
  LaunchSpec s = BaseSpec();
  s.gpus = {{"amd", 4, "", {}, 1000}, {"amd", 6, "GPU-x", {}, 1000}};
  auto env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["ROCR_VISIBLE_DEVICES"], "4,6");
  EXPECT_EQ(env["HIP_VISIBLE_DEVICES"], "0,1");
}

TEST(JobEnvTest, NoGpuHidesEverything) {
  auto env = BuildJobEnvironment(BaseSpec(), LoginDefaults{});
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "void");
  EXPECT_EQ(env["ROCR_VISIBLE_DEVICES"], "");
  EXPECT_EQ(env["HIP_VISIBLE_DEVICES"], "");
  EXPECT_EQ(env.count("GPUPOOL_GPU_MILLI"), 0u);
}

TEST(JobEnvTest, UserCannotWidenVisibilityOrFakeJobId) {
  LaunchSpec s = BaseSpec();
  s.env = {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
           {"ROCR_VISIBLE_DEVICES", "0"},
           {"GPUPOOL_JOB_ID", "7"},
           {"GPUPOOL_GPU_MILLI", "1000"}};
  s.gpus = {{"nvidia", 0, "GPU-z", {}, 500}};
  auto env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "GPU-z");
  EXPECT_EQ(env.count("ROCR_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(env["GPUPOOL_JOB_ID"], "42");
  EXPECT_EQ(env["GPUPOOL_GPU_MILLI"], "500");
}

TEST(JobEnvTest, LoginDefaultsFillOnlyWhatTheUserLeftOut) {
  LaunchSpec s = BaseSpec();
  s.env = {{"PATH", "/opt/bin"}, {"FOO", "bar"}};
  LoginDefaults d;
  d.home = "/home/alice";
  d.shell = "/bin/zsh";
  auto env = BuildJobEnvironment(s, d);
  EXPECT_EQ(env["PATH"], "/opt/bin");
  EXPECT_EQ(env["FOO"], "bar");
  EXPECT_EQ(env["HOME"], "/home/alice");
  EXPECT_EQ(env["USER"], "alice");
  EXPECT_EQ(env["LOGNAME"], "alice");
  EXPECT_EQ(env["SHELL"], "/bin/zsh");
  EXPECT_EQ(EnvironmentStrings({{"A", "1"}, {"B", ""}}), (std::vector<std::string>{"A=1", "B="}));
}

}  // namespace
}  // namespace gpupool::agent
