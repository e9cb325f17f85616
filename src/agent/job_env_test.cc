#include "agent/job_env.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace gpupool::agent {
namespace {

LaunchSpec BaseSpec() {
  LaunchSpec s;
  s.id = {42, 0, 2, 0};
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
  EXPECT_EQ(env["GPUPOOL_GPU_ENFORCEMENT"], "exclusive");
  EXPECT_EQ(env.count("GPUPOOL_GPU_MEM_LIMIT_BYTES"), 0u);
}

// A share on an MPS GPU is that GPU's daemon's client, capped in threads and memory; the
// user's own MPS variables cannot point elsewhere or raise the cap.
TEST(JobEnvTest, MpsShareGetsItsDaemonAndCaps) {
  LaunchSpec s = BaseSpec();
  s.env = {{"CUDA_MPS_PIPE_DIRECTORY", "/tmp/mine"},
           {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=80G"},
           {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"},
           {"GPUPOOL_GPU_MEM_LIMIT_BYTES", "1"}};
  s.gpus = {{"nvidia", 2, "GPU-m", {"/dev/nvidia2"}, 333}};
  s.share_enforcement = "mps";
  s.share_memory_bytes = uint64_t{10} << 30;
  s.mps_pipe_dir = "/var/lib/gpupool/mps/GPU-m/pipe";
  auto env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["GPUPOOL_GPU_ENFORCEMENT"], "mps");
  EXPECT_EQ(env["GPUPOOL_GPU_MEM_LIMIT_BYTES"], "10737418240");
  EXPECT_EQ(env["CUDA_MPS_PIPE_DIRECTORY"], "/var/lib/gpupool/mps/GPU-m/pipe");
  EXPECT_EQ(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "34");
  EXPECT_EQ(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=10240M");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "GPU-m");
}

// Without enforcement the share is told its cap and told that nothing holds it there.
TEST(JobEnvTest, UnenforcedShareSaysSoAndKeepsNoMpsVariables) {
  LaunchSpec s = BaseSpec();
  s.env = {{"CUDA_MPS_PIPE_DIRECTORY", "/tmp/mine"},
           {"CUDA_MPS_CLIENT_PRIORITY", "0"},
           {"CUDA_MPS_ENABLE_PER_CTX_DEVICE_MULTIPROCESSOR_PARTITIONING", "1"}};
  s.gpus = {{"nvidia", 0, "GPU-n", {}, 500}};
  s.share_enforcement = "none";
  s.share_memory_bytes = 1000;
  auto env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["GPUPOOL_GPU_ENFORCEMENT"], "none");
  EXPECT_EQ(env["GPUPOOL_GPU_MEM_LIMIT_BYTES"], "1000");
  EXPECT_EQ(env.count("CUDA_MPS_PIPE_DIRECTORY"), 0u);
  EXPECT_EQ(env.count("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), 0u);
  EXPECT_EQ(env.count("CUDA_MPS_CLIENT_PRIORITY"), 0u);  // no CUDA_MPS_* of the user's
  EXPECT_EQ(env.count("CUDA_MPS_ENABLE_PER_CTX_DEVICE_MULTIPROCESSOR_PARTITIONING"), 0u);
  auto none = BuildJobEnvironment(BaseSpec(), LoginDefaults{});
  EXPECT_EQ(none.count("GPUPOOL_GPU_ENFORCEMENT"), 0u);
}

// A share's frameworks are told its cap (JAX's fraction, CuPy's pool limit, TensorFlow's
// growth on demand) unless the user set their own; a MIG instance and a whole GPU are not.
TEST(JobEnvTest, AShareTellsItsFrameworksItsCapUnlessTheUserDid) {
  LaunchSpec s = BaseSpec();
  s.gpus = {{"nvidia", 0, "GPU-n", {}, 250}};
  s.share_enforcement = "none";
  s.share_memory_bytes = uint64_t{20} << 30;
  auto env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["XLA_PYTHON_CLIENT_MEM_FRACTION"], "0.250");
  EXPECT_EQ(env["XLA_CLIENT_MEM_FRACTION"], "0.250");
  EXPECT_EQ(env["CUPY_GPU_MEMORY_LIMIT"], "21474836480");
  EXPECT_EQ(env["TF_FORCE_GPU_ALLOW_GROWTH"], "true");
  // The user's own settings stay (the GPU memory watch holds the share all the same).
  s.env = {{"XLA_CLIENT_MEM_FRACTION", ".1"},
           {"CUPY_GPU_MEMORY_LIMIT", "50%"},
           {"TF_FORCE_GPU_ALLOW_GROWTH", "false"}};
  env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["XLA_CLIENT_MEM_FRACTION"], ".1");
  EXPECT_EQ(env.count("XLA_PYTHON_CLIENT_MEM_FRACTION"), 0u);
  EXPECT_EQ(env["CUPY_GPU_MEMORY_LIMIT"], "50%");
  EXPECT_EQ(env["TF_FORCE_GPU_ALLOW_GROWTH"], "false");
  s.env.clear();
  s.share_enforcement = "mig";
  env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env.count("XLA_PYTHON_CLIENT_MEM_FRACTION"), 0u);
  EXPECT_EQ(env.count("CUPY_GPU_MEMORY_LIMIT"), 0u);
  LaunchSpec whole = BaseSpec();
  whole.gpus = {{"nvidia", 0, "GPU-n", {}, 1000}};
  env = BuildJobEnvironment(whole, LoginDefaults{});
  EXPECT_EQ(env.count("TF_FORCE_GPU_ALLOW_GROWTH"), 0u);
  EXPECT_EQ(env.count("XLA_CLIENT_MEM_FRACTION"), 0u);
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

// An AMD share gets its advisory CU mask on its one visible device, replacing the user's.
TEST(JobEnvTest, AmdShareGetsItsCuMaskOverTheUsers) {
  LaunchSpec s = BaseSpec();
  s.env = {{"HSA_CU_MASK", "0:0-303"}};
  s.gpus = {{"amd", 1, "GPU-1111", {}, 250}};
  s.share_enforcement = "none";
  s.cu_mask = "0-75";
  auto env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["HSA_CU_MASK"], "0:0-75");
  EXPECT_EQ(env["GPUPOOL_GPU_ENFORCEMENT"], "none");
  auto container = BuildContainerEnvironment(s);
  EXPECT_EQ(container["HSA_CU_MASK"], "0:0-75");
  // Without a mask of the pool's (a whole GPU, an unknown CU count) the user's stays.
  s.cu_mask.clear();
  EXPECT_EQ(BuildJobEnvironment(s, LoginDefaults{})["HSA_CU_MASK"], "0:0-303");
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

class EnvDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-envdir-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(EnvDirTest, CondaEnvironmentGoesFirstOnPath) {
  std::filesystem::create_directories(dir_ + "/conda-meta");
  LaunchSpec s = BaseSpec();
  s.env_dir = dir_;
  auto env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["PATH"], dir_ + "/bin:/usr/local/bin:/usr/bin:/bin");
  EXPECT_EQ(env["GPUPOOL_ENV_DIR"], dir_);
  EXPECT_EQ(env["CONDA_PREFIX"], dir_);
  EXPECT_EQ(env.count("VIRTUAL_ENV"), 0u);
}

TEST_F(EnvDirTest, VirtualenvKeepsTheUsersPathBehindIt) {
  std::ofstream(dir_ + "/pyvenv.cfg") << "home = /usr/bin\n";
  LaunchSpec s = BaseSpec();
  s.env_dir = dir_ + "/";  // a trailing slash is not repeated
  s.env = {{"PATH", "/home/alice/bin:/usr/bin"}};
  auto env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["PATH"], dir_ + "/bin:/home/alice/bin:/usr/bin");
  EXPECT_EQ(env["VIRTUAL_ENV"], dir_);
  EXPECT_EQ(env["GPUPOOL_ENV_DIR"], dir_);
  EXPECT_EQ(env.count("CONDA_PREFIX"), 0u);
}

TEST_F(EnvDirTest, PlainDirectoryGetsOnlyPathAndMarker) {
  LaunchSpec s = BaseSpec();
  s.env_dir = dir_;
  auto env = BuildJobEnvironment(s, LoginDefaults{});
  EXPECT_EQ(env["PATH"].rfind(dir_ + "/bin:", 0), 0u);
  EXPECT_EQ(env.count("CONDA_PREFIX"), 0u);
  EXPECT_EQ(env.count("VIRTUAL_ENV"), 0u);
}

TEST(JobEnvTest, NoEnvDirLeavesPathAlone) {
  auto env = BuildJobEnvironment(BaseSpec(), LoginDefaults{});
  EXPECT_EQ(env["PATH"], "/usr/local/bin:/usr/bin:/bin");
  EXPECT_EQ(env.count("GPUPOOL_ENV_DIR"), 0u);
}

TEST(JobEnvTest, ContainerEnvironmentHasNoHostLoginDefaults) {
  LaunchSpec s = BaseSpec();
  s.env = {{"FOO", "bar"}, {"CUDA_VISIBLE_DEVICES", "0,1,2"}};
  s.gpus = {{"nvidia", 1, "GPU-bbb", {"/dev/nvidia1"}, 1000}};
  auto env = BuildContainerEnvironment(s);
  EXPECT_EQ(env.count("PATH"), 0u);
  EXPECT_EQ(env.count("HOME"), 0u);
  EXPECT_EQ(env.count("SHELL"), 0u);
  EXPECT_EQ(env["USER"], "alice");
  EXPECT_EQ(env["FOO"], "bar");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "GPU-bbb");
  EXPECT_EQ(env["GPUPOOL_JOB_ID"], "42");
}

}  // namespace
}  // namespace gpupool::agent
