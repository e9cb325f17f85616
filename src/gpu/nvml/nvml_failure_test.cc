// The NVML backend when things go wrong: no library, missing entry points, NVML that
// will not start, calls that fail, values that make no sense.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu/nvml/nvml_test_fixture.h"

namespace gpupool::gpu {
namespace {

using ::testing::HasSubstr;

TEST_F(NvmlBackendTest, MissingLibraryIsUnavailableWithAdvice) {
  const std::string absent = (root_ / "nowhere/libnvidia-ml.so.1").string();
  auto found = Run("h100_hgx_8gpu.json", absent);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(found.status().message(), HasSubstr(absent + " not found ("));
  EXPECT_THAT(found.status().message(), HasSubstr("No such file"));  // the loader's own words
  EXPECT_THAT(found.status().message(), HasSubstr("install the NVIDIA driver"));
}

TEST_F(NvmlBackendTest, MissingRequiredSymbolNamesItAndNeverStartsNvml) {
  auto found = Run("h100_hgx_8gpu.json", FAKE_NVML_NO_REQUIRED_LIBRARY);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(found.status().message(), HasSubstr("nvmlDeviceGetCount_v2"));
  EXPECT_THAT(found.status().message(),
              HasSubstr("driver is too old or its installation is broken"));
  ExpectCleanExit(FAKE_NVML_NO_REQUIRED_LIBRARY, /*expected_sessions=*/0);
}

TEST_F(NvmlBackendTest, DriverNotLoadedSaysSoAndUnloadsTheLibrary) {
  auto found = Run("driver_not_loaded.json");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(found.status().message(),
              HasSubstr("the NVIDIA kernel driver is not loaded: Driver Not Loaded "
                        "(NVML_ERROR_DRIVER_NOT_LOADED)"));
  // A failed nvmlInit must not be paired with nvmlShutdown.
  EXPECT_EQ(Called("nvmlInit_v2"), 1);
  EXPECT_EQ(Called("nvmlShutdown"), 0);
  EXPECT_EQ(dlopen(FAKE_NVML_LIBRARY, RTLD_NOW | RTLD_NOLOAD), nullptr);
}

TEST_F(NvmlBackendTest, LibraryKernelVersionMismatchSaysWhatToDo) {
  auto found = Run("version_mismatch.json");
  ASSERT_FALSE(found.ok());
  EXPECT_THAT(found.status().message(), HasSubstr("different versions"));
  EXPECT_THAT(found.status().message(), HasSubstr("NVML_ERROR_LIB_RM_VERSION_MISMATCH"));
}

TEST_F(NvmlBackendTest, AbsurdDeviceCountIsAnErrorAfterCleanShutdown) {
  auto found = Run("huge_count.json");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(found.status().message(), HasSubstr("NVML reports 4000000000 GPUs"));
  EXPECT_THAT(found.status().message(), HasSubstr("1024"));
  EXPECT_EQ(Called("nvmlDeviceGetHandleByIndex_v2"), 0);
  ExpectCleanExit();
}

TEST_F(NvmlBackendTest, FailingDeviceCountIsUnavailable) {
  auto found = Run("count_fails.json");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(found.status().message(),
              HasSubstr("nvmlDeviceGetCount_v2 failed: Unknown Error (NVML_ERROR_UNKNOWN)"));
  ExpectCleanExit();
}

TEST_F(NvmlBackendTest, PerCallErrorsLeaveOnlyTheirFieldsUnknown) {
  // NVML cannot say GPU 0's NUMA node or CPUs; sysfs can, and says something different
  // from the scenario's NVML answer, so the test sees which source won.
  AddSysfsGpu("0000:17:00.0", "1", "0-3,8-11");
  auto found = Run("per_call_errors.json");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const NodeInfo& node = *found;

  // GPU 1 cannot be opened: skipped, the others still reported under their own index.
  ASSERT_EQ(node.gpus.size(), 3u);
  EXPECT_EQ(node.gpus[0].index, 0);
  EXPECT_EQ(node.gpus[1].index, 2);
  EXPECT_EQ(node.gpus[2].index, 3);
  EXPECT_EQ(CountDiagnostics(node,
                             "GPU 1 is skipped: nvmlDeviceGetHandleByIndex_v2 failed: "
                             "Insufficient Permissions (NVML_ERROR_NO_PERMISSION); check "
                             "the permissions of /dev/nvidia*"),
            1)
      << AllDiagnostics(node);

  GpuInfo want0;
  want0.vendor = Vendor::kNvidia;
  want0.index = 0;
  want0.pci_bus_id = "0000:17:00.0";
  want0.numa_node = 1;
  want0.cpu_affinity = "0-3,8-11";
  want0.backend = "nvml";
  EXPECT_EQ(node.gpus[0], want0);

  const GpuInfo& g2 = node.gpus[1];
  EXPECT_EQ(g2.name, "NVIDIA A10");
  EXPECT_EQ(g2.minor_number, 7);
  EXPECT_EQ(g2.device_nodes, std::vector<std::string>{"/dev/nvidia7"});
  EXPECT_EQ(g2.numa_node, 1);
  EXPECT_EQ(g2.cpu_affinity, "8-15");
  EXPECT_EQ(g2.temperature_celsius, 35);
  EXPECT_EQ(node.gpus[2].temperature_celsius, std::nullopt);
  EXPECT_EQ(node.gpus[2].power_watts, 16.0);

  for (const char* expected : {
           "nvmlDeviceGetName failed for GPU 0: Unknown Error (NVML_ERROR_UNKNOWN)",
           "nvmlDeviceGetUUID failed for GPU 0: GPU is lost (NVML_ERROR_GPU_IS_LOST)",
           "nvmlDeviceGetMemoryInfo failed for GPU 0: GPU is lost",
           "nvmlDeviceGetCudaComputeCapability failed for GPU 0: Unknown Error",
           "nvmlDeviceGetMinorNumber failed for GPU 0: Unknown Error",
           "nvmlDeviceGetCpuAffinity failed for GPU 0: Unknown Error",
           "nvmlDeviceGetMigMode failed for GPU 0: Timeout (NVML_ERROR_TIMEOUT)",
           "nvmlDeviceGetEccMode failed for GPU 0: Timeout",
           "nvmlDeviceGetUtilizationRates failed for GPU 0: Insufficient Permissions",
           // One line for both GPUs that lost their sensor.
           "nvmlDeviceGetTemperature failed for GPUs 0, 3: GPU is lost (NVML_ERROR_GPU_IS_LOST); "
           "the value is left unknown",
           "nvmlDeviceGetPowerUsage failed for GPU 0: Not Supported (NVML_ERROR_NOT_SUPPORTED)",
           "nvmlDeviceGetEnforcedPowerLimit failed for GPU 0: Unknown Error",
           "nvmlDeviceGetNvLinkState failed for GPU 2: Unknown Error",
           "nvmlSystemGetDriverVersion failed: Unknown Error (NVML_ERROR_UNKNOWN)",
           "NVML reports topology level 35 between GPU 2 and GPU 3",
       }) {
    EXPECT_EQ(CountDiagnostics(node, expected), 1) << expected << "\n" << AllDiagnostics(node);
  }
  // NUMA "not supported" is the normal answer without NUMA: no complaint, sysfs decides.
  EXPECT_EQ(CountDiagnostics(node, "NumaNodeId"), 0) << AllDiagnostics(node);
  EXPECT_EQ(node.diagnostics.size(), 16u) << AllDiagnostics(node);
  for (const Diagnostic& d : node.diagnostics) EXPECT_EQ(d.backend, "nvml");

  // The driver version is unknown, so the listing falls back to real files of any
  // version (symlinks and non-compute libraries still left out).
  EXPECT_EQ(node.nvidia->version, "");
  EXPECT_EQ(node.nvidia->runtime_version, "12.2");
  const std::string dir = FakeDir();
  EXPECT_EQ(
      node.nvidia->libraries,
      (std::vector<std::string>{
          dir + "/libcuda.so.535.129.03", dir + "/libcuda.so.550.54.15",
          dir + "/libcudadebugger.so.550.54.15", dir + "/libnvidia-allocator.so.550.54.15",
          dir + "/libnvidia-cfg.so.550.54.15", dir + "/libnvidia-ml.so.1",
          dir + "/libnvidia-ml.so.550.54.15", dir + "/libnvidia-nvvm.so.550.54.15",
          dir + "/libnvidia-opencl.so.550.54.15", dir + "/libnvidia-ptxjitcompiler.so.550.54.15"}));

  // GPU 2-3 has an unknown level and no NVLink: no entry. GPU 0 has a bus id: it pairs.
  const std::vector<GpuLink> want_links = {
      {"0000:17:00.0", "0000:b1:00.0", 0, 0, PcieLevel::kSystem},
      {"0000:17:00.0", "0000:ca:00.0", 0, 0, PcieLevel::kSystem},
  };
  EXPECT_EQ(node.links, want_links);
  ExpectCleanExit();
}

TEST_F(NvmlBackendTest, HostileValuesAreBoundedSanitisedOrDropped) {
  AddSysfsGpu("0000:3b:00.0", "-1", "garbage");
  auto found = Run("hostile_values.json");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const NodeInfo& node = *found;
  ASSERT_EQ(node.gpus.size(), 3u);

  const GpuInfo& g0 = node.gpus[0];
  EXPECT_EQ(g0.name, "NVIDIA ??A");  // 0xff 0xfe are not UTF-8
  EXPECT_EQ(g0.memory_total_bytes, 0u);
  EXPECT_EQ(g0.compute_capability, std::nullopt);
  EXPECT_EQ(g0.minor_number, -1);
  EXPECT_TRUE(g0.device_nodes.empty());
  EXPECT_EQ(g0.numa_node, -1);     // NVML said 4294967295, sysfs said -1
  EXPECT_EQ(g0.cpu_affinity, "");  // empty mask, sysfs garbage
  EXPECT_EQ(g0.mig_enabled, std::nullopt);
  EXPECT_EQ(g0.ecc_enabled, std::nullopt);
  EXPECT_EQ(g0.utilization_percent, std::nullopt);
  EXPECT_EQ(g0.temperature_celsius, std::nullopt);
  EXPECT_EQ(g0.power_watts, std::nullopt);
  EXPECT_EQ(g0.power_limit_watts, 0.0);

  const GpuInfo& g1 = node.gpus[1];
  EXPECT_EQ(g1.name, std::string(96, 'A'));  // unterminated: bounded by the buffer
  EXPECT_EQ(g1.uuid.size(), 96u);
  EXPECT_EQ(g1.uuid.substr(0, 8), "GPU-GPU-");
  EXPECT_EQ(g1.memory_total_bytes, 17179869184u);
  EXPECT_EQ(g1.memory_used_bytes, 17179869184u);  // capped: used > total
  EXPECT_EQ(g1.mig_enabled, true);
  ASSERT_EQ(g1.mig_devices.size(), 1u);
  EXPECT_EQ(g1.mig_devices[0].uuid, "MIG?");
  EXPECT_EQ(g1.mig_devices[0].profile, "");
  EXPECT_EQ(g1.mig_devices[0].gpu_instance_id, -1);
  EXPECT_EQ(g1.mig_devices[0].compute_instance_id, 2);
  EXPECT_EQ(g1.mig_devices[0].memory_total_bytes, 1073741824u);

  EXPECT_EQ(node.gpus[2].pci_bus_id, "");
  EXPECT_EQ(node.gpus[2].name, "NVIDIA T4");

  for (const char* expected : {
           "GPU 0: NVML reports 0 bytes of memory",
           "GPU 0: NVML reports compute capability 0.0",
           "GPU 0: NVML reports device minor number 4294967295",
           "GPU 0: NVML reports MIG mode 7",
           "GPU 0: NVML reports ECC mode 9",
           "GPU 0: NVML reports 250% utilisation",
           "GPU 0: NVML reports 100000 degrees Celsius",
           "GPU 0: NVML reports 4294967295 mW of power draw",
           "GPU 1: NVML reports 34359738368 bytes used of 17179869184 in total",
           "GPU 1: NVML reports 4000000000 MIG slots; only the first 64 are read",
           "GPU 2: NVML reports an unusable PCI bus id 'not a bus id'",
           "NVML reports CUDA driver version -5",
       }) {
    EXPECT_EQ(CountDiagnostics(node, expected), 1) << expected << "\n" << AllDiagnostics(node);
  }

  // The unterminated, non-UTF-8 driver version is bounded and printable, and it is
  // never used to build file names.
  EXPECT_EQ(node.nvidia->version.size(), 80u);
  EXPECT_EQ(node.nvidia->version.substr(0, 6), "550.?/");
  EXPECT_EQ(node.nvidia->runtime_version, "");
  for (const std::string& lib : node.nvidia->libraries) {
    EXPECT_EQ(lib.find(".."), std::string::npos) << lib;
    EXPECT_EQ(lib.rfind(FakeDir() + "/lib", 0), 0u) << lib;
  }

  // GPU 2 has no bus id, so only 0-1 can be related.
  ASSERT_EQ(node.links.size(), 1u);
  EXPECT_EQ(node.links[0], (GpuLink{"0000:3b:00.0", "0000:5e:00.0", 0, 0, PcieLevel::kSystem}));
  ExpectCleanExit();
}

TEST_F(NvmlBackendTest, OldDriverWithoutOptionalSymbolsFallsBack) {
  for (int i = 0; i < 8; ++i) {
    const char* buses[] = {"1b", "43", "52", "61", "9d", "c3", "d1", "df"};
    // Different from what NVML would have said, so the source is visible.
    AddSysfsGpu(std::string("0000:") + buses[i] + ":00.0", i < 4 ? "2" : "3",
                i < 4 ? "0-7" : "8-15");
  }
  auto found = Run("h100_hgx_8gpu.json", FAKE_NVML_NO_OPTIONAL_LIBRARY);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const NodeInfo& node = *found;
  ASSERT_EQ(node.gpus.size(), 8u);
  for (const GpuInfo& g : node.gpus) {
    SCOPED_TRACE("GPU " + std::to_string(g.index));
    EXPECT_FALSE(g.pci_bus_id.empty());           // via nvmlDeviceGetPciInfo_v2
    EXPECT_EQ(g.numa_node, g.index < 4 ? 2 : 3);  // via sysfs
    EXPECT_EQ(g.cpu_affinity, g.index < 4 ? "0-7" : "8-15");
    EXPECT_EQ(g.mig_enabled, std::nullopt);
    EXPECT_EQ(g.ecc_enabled, true);
  }
  EXPECT_EQ(node.nvidia->runtime_version, "12.4");  // via the unversioned call
  EXPECT_EQ(Called("nvmlDeviceGetPciInfo_v2"), 1);
  EXPECT_EQ(Called("nvmlSystemGetCudaDriverVersion"), 1);
  EXPECT_EQ(Called("nvmlDeviceGetNvLinkRemotePciInfo_v1"), 1);

  // Switch links still found through the old call and the old struct layout.
  ASSERT_EQ(node.links.size(), 28u);
  for (const GpuLink& l : node.links) EXPECT_EQ(l.nvlink_count, 18) << l.a << "-" << l.b;

  // One line per missing symbol, however many GPUs needed it; none where an older entry
  // point stood in.
  EXPECT_EQ(CountDiagnostics(node, "lacks nvmlDeviceGetMigMode"), 1) << AllDiagnostics(node);
  EXPECT_EQ(CountDiagnostics(node, "lacks nvmlDeviceGetNumaNodeId"), 1);
  EXPECT_EQ(CountDiagnostics(node, "lacks nvmlDeviceGetCpuAffinity"), 1);
  EXPECT_EQ(node.diagnostics.size(), 3u) << AllDiagnostics(node);
  ExpectCleanExit(FAKE_NVML_NO_OPTIONAL_LIBRARY);
}

TEST_F(NvmlBackendTest, OldDriverFindsDirectNvLinkPeersWithoutRemoteDeviceType) {
  auto found = Run("a100_mig.json", FAKE_NVML_NO_OPTIONAL_LIBRARY);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_EQ(found->links.size(), 1u);
  EXPECT_EQ(found->links[0].nvlink_count, 12);
  // Without MIG entry points the MIG devices are unknown, not "none".
  EXPECT_EQ(found->gpus[0].mig_enabled, std::nullopt);
  EXPECT_TRUE(found->gpus[0].mig_devices.empty());
  ExpectCleanExit(FAKE_NVML_NO_OPTIONAL_LIBRARY);
}

}  // namespace
}  // namespace gpupool::gpu
