#include "gpu/rocm/rocm_smi_library.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "gpu/sysfs/fake_sysfs_tree.h"

namespace gpupool::gpu::rocm {
namespace {

using gpupool::gpu::testing::FakeSysfsTree;

TEST(RocmSmiLibraryCandidatesTest, BareDefaultNameAlsoTriesVersionedSonames) {
  std::vector<std::string> c = RocmSmiLibraryCandidates("librocm_smi64.so");
  ASSERT_GE(c.size(), 3u);
  EXPECT_EQ(c[0], "librocm_smi64.so");
  EXPECT_EQ(c[1], "librocm_smi64.so.1");
  EXPECT_EQ(c[2], "librocm_smi64.so.5");
  EXPECT_EQ(RocmSmiLibraryCandidates("/x/librocm_smi64.so"),
            (std::vector<std::string>{"/x/librocm_smi64.so"}));
  EXPECT_EQ(RocmSmiLibraryCandidates("libother.so"), (std::vector<std::string>{"libother.so"}));
}

TEST(RocmSmiLibraryTest, LoadsTheFullFake) {
  Result<std::unique_ptr<RocmSmiLibrary>> lib = RocmSmiLibrary::Load(GPUPOOL_FAKE_ROCM_SMI);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_TRUE((*lib)->missing_optional().empty());
  EXPECT_EQ((*lib)->path(), GPUPOOL_FAKE_ROCM_SMI);
  EXPECT_NE((*lib)->api().dev_name_get, nullptr);
  // Our names, then the library's own words when it has rsmi_status_string.
  EXPECT_EQ((*lib)->ErrorString(4), "RSMI_STATUS_PERMISSION: fake permission denied");
  EXPECT_EQ((*lib)->ErrorString(3), "RSMI_STATUS_FILE_ERROR (fake status)");
}

TEST(RocmSmiLibraryTest, MissingOptionalSymbolsAreListed) {
  Result<std::unique_ptr<RocmSmiLibrary>> lib =
      RocmSmiLibrary::Load(GPUPOOL_FAKE_ROCM_SMI_WITHOUT_OPTIONAL);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_EQ((*lib)->missing_optional(),
            (std::vector<std::string>{"rsmi_dev_busy_percent_get", "rsmi_dev_power_ave_get",
                                      "rsmi_topo_get_link_type", "rsmi_version_get",
                                      "rsmi_status_string"}));
  EXPECT_EQ((*lib)->api().dev_busy_percent_get, nullptr);
  EXPECT_EQ((*lib)->ErrorString(4), "RSMI_STATUS_PERMISSION");
  EXPECT_EQ((*lib)->ErrorString(0xFFFFFFFFu), "RSMI_STATUS_UNKNOWN_ERROR");
  EXPECT_EQ((*lib)->ErrorString(999), "rsmi status 999");
}

// The process calls are optional: a library before ROCm 5.7 lacks the per-device one, an
// old or stripped one all four; both still load.
TEST(RocmSmiLibraryTest, ProcessCallsAreOptional) {
  Result<std::unique_ptr<RocmSmiLibrary>> full = RocmSmiLibrary::Load(GPUPOOL_FAKE_ROCM_SMI);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_NE((*full)->api().compute_process_info_by_device_get, nullptr);
  Result<std::unique_ptr<RocmSmiLibrary>> old =
      RocmSmiLibrary::Load(GPUPOOL_FAKE_ROCM_SMI_WITHOUT_BY_DEVICE);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ((*old)->missing_optional(),
            (std::vector<std::string>{"rsmi_compute_process_info_by_device_get"}));
  EXPECT_NE((*old)->api().compute_process_gpus_get, nullptr);
  Result<std::unique_ptr<RocmSmiLibrary>> none =
      RocmSmiLibrary::Load(GPUPOOL_FAKE_ROCM_SMI_WITHOUT_PROCESSES);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(
      (*none)->missing_optional(),
      (std::vector<std::string>{"rsmi_compute_process_info_get", "rsmi_compute_process_gpus_get",
                                "rsmi_compute_process_info_by_pid_get",
                                "rsmi_compute_process_info_by_device_get"}));
}

TEST(RocmSmiLibraryTest, MissingRequiredSymbolIsUnavailableAndNamed) {
  Result<std::unique_ptr<RocmSmiLibrary>> lib =
      RocmSmiLibrary::Load(GPUPOOL_FAKE_ROCM_SMI_WITHOUT_REQUIRED);
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("rsmi_num_monitor_devices"), std::string::npos)
      << lib.status().message();
}

TEST(RocmSmiLibraryTest, AbsentFileIsUnavailable) {
  Result<std::unique_ptr<RocmSmiLibrary>> lib =
      RocmSmiLibrary::Load("/nonexistent/librocm_smi64.so");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("/nonexistent/librocm_smi64.so could not be loaded"),
            std::string::npos)
      << lib.status().message();
}

TEST(RocmSmiLibraryTest, InitFailureCarriesTheLibrarysWords) {
  FakeSysfsTree tree;
  tree.Write("scenario.json", R"({"init_status": 8})");
  setenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO", tree.Path("scenario.json").c_str(), 1);
  Result<std::unique_ptr<RocmSmiLibrary>> lib = RocmSmiLibrary::Load(GPUPOOL_FAKE_ROCM_SMI);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  Status s = (*lib)->Init();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("rsmi_init failed: RSMI_STATUS_INIT_ERROR: fake init error"),
            std::string::npos)
      << s.message();
  unsetenv("GPUPOOL_FAKE_ROCM_SMI_SCENARIO");
}

}  // namespace
}  // namespace gpupool::gpu::rocm
