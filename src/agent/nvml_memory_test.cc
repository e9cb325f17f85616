// NVML's per-cgroup memory limits through the fake libnvidia-ml (tests/fakelib/nvml),
// loaded by the real dlopen path: its memory_limits build exports
// nvmlDeviceSetMemoryLimits_v1, its normal build (a driver before R615) does not.
#include "agent/nvml_memory.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "agent/cgroup.h"
#include "common/file_util.h"

namespace gpupool::agent {
namespace {

constexpr char kGpu0[] = "GPU-c2000000-0000-4000-8000-000000000000";
constexpr char kGpu1[] = "GPU-c2000000-0000-4000-8000-000000000001";  // refuses (4)

class NvmlMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-nvmlmem-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    cgroup_ = dir_ + "/gpupool/job-7-0.1-99";
    std::filesystem::create_directories(cgroup_);
    record_ = dir_ + "/limits";
    ::setenv("FAKE_NVML_SCENARIO", FAKE_NVML_SCENARIO_DIR "/memory_limits.json", 1);
    ::setenv("FAKE_NVML_MEMORY_LIMITS", record_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("FAKE_NVML_SCENARIO");
    ::unsetenv("FAKE_NVML_MEMORY_LIMITS");
    std::filesystem::remove_all(dir_);
  }
  NvmlMemoryLimit Limit(const std::string& gpu) const {
    return {FAKE_NVML_LIBRARY, gpu, cgroup_, uint64_t{2} << 30, uint64_t{2} << 30};
  }
  std::string dir_, cgroup_, record_;
};

TEST_F(NvmlMemoryTest, OnlyALibraryThatExportsTheCallOffersIt) {
  const std::string found = NvmlMemoryLimitsLibrary(FAKE_NVML_LIBRARY);
  EXPECT_EQ(std::filesystem::weakly_canonical(found),
            std::filesystem::weakly_canonical(FAKE_NVML_LIBRARY));
  EXPECT_EQ(NvmlMemoryLimitsLibrary(FAKE_NVML_OLD_LIBRARY), "");
  EXPECT_EQ(NvmlMemoryLimitsLibrary(dir_ + "/no-such-libnvidia-ml.so.1"), "");
}

// Soft and hard limit on the cgroup's directory, for that GPU, as NVML records them.
TEST_F(NvmlMemoryTest, TheLimitIsSetOnTheCgroupForTheGpu) {
  Status st = ApplyNvmlMemoryLimit(Limit(kGpu0));
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ReadFileToString(record_).value_or(""),
            std::string(kGpu0) + " " + cgroup_ + " 2147483648 2147483648\n");
}

// A failing call is an error naming the GPU, the cgroup and NVML's answer; nothing is set.
TEST_F(NvmlMemoryTest, AFailingCallNamesTheGpuTheCgroupAndTheAnswer) {
  Status st = ApplyNvmlMemoryLimit(Limit(kGpu1));
  ASSERT_FALSE(st.ok());
  for (const std::string& part :
       {std::string(kGpu1), "'" + cgroup_ + "'", std::string("nvmlDeviceSetMemoryLimits_v1"),
        std::string("Insufficient Permissions (NVML error 4)")}) {
    EXPECT_NE(st.message().find(part), std::string::npos) << part << " in " << st.message();
  }
  EXPECT_FALSE(std::filesystem::exists(record_));

  st = ApplyNvmlMemoryLimit(Limit("GPU-not-here"));
  EXPECT_NE(st.message().find("nvmlDeviceGetHandleByUUID: Not Found"), std::string::npos)
      << st.message();
  NvmlMemoryLimit old = Limit(kGpu0);
  old.library = FAKE_NVML_OLD_LIBRARY;
  st = ApplyNvmlMemoryLimit(old);
  EXPECT_NE(st.message().find("a driver before R615"), std::string::npos) << st.message();
  EXPECT_FALSE(std::filesystem::exists(record_));
}

// A job cgroup asked for NVML's cap says it is not in place where it could not be set:
// no cgroup v2 here, or no way to load NVML (the slim shim's null setter).
TEST_F(NvmlMemoryTest, ACgroupWithoutTheLimitSaysSo) {
  CgroupRequest req;
  req.id = RunId{7, 0, 1, 0};
  req.nvml_library = FAKE_NVML_LIBRARY;
  req.nvml_gpu_uuid = kGpu0;
  req.nvml_limit = &ApplyNvmlMemoryLimit;
  req.dmem_bytes = uint64_t{1} << 30;
  EXPECT_FALSE(JobCgroup::Create("", req)->dmem_enforced());
  EXPECT_FALSE(JobCgroup::Create(dir_, req)->dmem_enforced());  // not a cgroup file system
  EXPECT_FALSE(std::filesystem::exists(record_));
}

}  // namespace
}  // namespace gpupool::agent
