// Test fixture for the NVML backend: runs the real backend against a fake
// libnvidia-ml.so.1 (tests/fakelib/nvml) through the real dlopen path, with a private
// temporary sysfs and /dev tree, and reads back the fake's call log.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gpu/gpu_backend.h"
#include "gpu/nvml/nvml_backend.h"

namespace gpupool::gpu {

class NvmlBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "nvml_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    std::filesystem::create_directories(root_ / "sys");
    std::filesystem::create_directories(root_ / "dev");
    std::filesystem::create_directories(root_ / "proc");
    log_ = (root_ / "calls.log").string();
    setenv("FAKE_NVML_LOG", log_.c_str(), 1);
  }

  void TearDown() override {
    unsetenv("FAKE_NVML_LOG");
    unsetenv("FAKE_NVML_SCENARIO");
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  static std::string Scenario(const std::string& name) {
    return std::string(FAKE_NVML_SCENARIO_DIR) + "/" + name;
  }
  static std::string FakeDir() {
    return std::filesystem::path(FAKE_NVML_LIBRARY).parent_path().string();
  }

  DiscoveryOptions Options(const std::string& library = FAKE_NVML_LIBRARY) const {
    DiscoveryOptions o;
    o.backends = {"nvml"};
    o.nvml_library = library;
    o.sysfs_root = (root_ / "sys").string();
    o.dev_root = (root_ / "dev").string();
    o.proc_root = (root_ / "proc").string();
    return o;
  }

  Result<NodeInfo> Run(const std::string& scenario,
                       const std::string& library = FAKE_NVML_LIBRARY) {
    setenv("FAKE_NVML_SCENARIO", Scenario(scenario).c_str(), 1);
    return NewNvmlBackend(Options(library))->Discover();
  }

  void WriteFile(const std::string& relative, const std::string& text) const {
    const auto path = root_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }

  // The driver's list of MIG capability minors, as /proc/driver/nvidia-caps/mig-minors
  // has it for a100_mig.json's GPU 0 (minor 0; GIs 1, 5, 13 with CI 0 each) and for an
  // instance no device uses.
  void WriteA100MigMinors() const {
    WriteFile("proc/driver/nvidia-caps/mig-minors",
              "config 1\nmonitor 2\n"
              "gpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n"
              "gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi1/ci1/access 14\n"
              "gpu0/gi5/access 48\ngpu0/gi5/ci0/access 49\n"
              "gpu0/gi13/access 120\ngpu0/gi13/ci0/access 121\n"
              "gpu1/gi1/access 147\ngpu1/gi1/ci0/access 148\n");
  }

  // A sysfs PCI device directory with the given numa_node and local_cpulist.
  void AddSysfsGpu(const std::string& bus_id, const std::string& numa, const std::string& cpus) {
    WriteFile("sys/bus/pci/devices/" + bus_id + "/numa_node", numa + "\n");
    WriteFile("sys/bus/pci/devices/" + bus_id + "/local_cpulist", cpus + "\n");
  }

  std::vector<std::string> LogLines() const {
    std::vector<std::string> lines;
    std::ifstream in(log_);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  int Called(const std::string& name) const {
    const auto lines = LogLines();
    return static_cast<int>(std::count(lines.begin(), lines.end(), name));
  }

  // The backend must leave nothing behind: NVML shut down as often as it was started,
  // and the library unloaded (RTLD_NOLOAD finds only libraries still mapped).
  void ExpectCleanExit(const std::string& library = FAKE_NVML_LIBRARY,
                       int expected_sessions = 1) const {
    EXPECT_EQ(Called("nvmlInit_v2"), expected_sessions);
    EXPECT_EQ(Called("nvmlShutdown"), expected_sessions);
    void* still = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
    EXPECT_EQ(still, nullptr) << library << " is still loaded: the backend did not dlclose it";
    if (still != nullptr) dlclose(still);
  }

  static int CountDiagnostics(const NodeInfo& node, const std::string& needle) {
    return static_cast<int>(std::count_if(
        node.diagnostics.begin(), node.diagnostics.end(),
        [&](const Diagnostic& d) { return d.message.find(needle) != std::string::npos; }));
  }
  static std::string AllDiagnostics(const NodeInfo& node) {
    std::string out;
    for (const Diagnostic& d : node.diagnostics) out += "  [" + d.backend + "] " + d.message + "\n";
    return out;
  }

  std::filesystem::path root_;
  std::string log_;
};

}  // namespace gpupool::gpu
