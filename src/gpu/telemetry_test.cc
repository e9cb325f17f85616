// The samplers that need no vendor library: the fake node's profile and amdgpu sysfs.
#include "gpu/telemetry.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "gpu/gpu_backend.h"

namespace gpupool::gpu {
namespace {

namespace fs = std::filesystem;

class TelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "telemetry_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = root_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  static constexpr const char* kNode = R"({"schema": "gpupool.node/v1", "hostname": "n1",
    "gpus": [{"vendor": "nvidia", "index": 0, "name": "Fake", "uuid": "GPU-a",
              "pci_bus_id": "0000:01:00.0", "memory_total_bytes": 8589934592,
              "memory_used_bytes": 1048576, "utilization_percent": 7},
             {"vendor": "nvidia", "index": 1, "name": "Fake", "uuid": "GPU-b",
              "pci_bus_id": "0000:02:00.0", "memory_total_bytes": 8589934592}])";
  fs::path root_;
};

TEST_F(TelemetryTest, FakeProfileStepsThroughItsSeriesByTheCallersClock) {
  std::string text = kNode;
  text += R"(, "telemetry": {"step_s": 10, "gpus": {"1": {"util_pct": [10, 90, 50],
             "mem_used_mib": 100, "power_w": [200.5], "temp_c": [40], "xid_errors": [0, 2], "xid_count": [0, 1]}}}})";
  const std::string file = Write("node.json", text);
  DiscoveryOptions o;
  o.backends = {"fake"};
  o.fake_node_file = file;
  // The node file with a profile still reads as a node.
  Result<NodeInfo> node = DiscoverNode(o);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  Result<std::unique_ptr<TelemetrySampler>> sampler = CreateTelemetrySampler(o, *node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  EXPECT_EQ((*sampler)->name(), "fake");
  auto at = [&](int64_t seconds) {
    Result<std::vector<GpuSample>> s = (*sampler)->Sample(seconds * 1'000'000);
    EXPECT_TRUE(s.ok());
    return *s;
  };
  std::vector<GpuSample> s = at(0);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].util_pct, 7);  // no profile: the node's static figures
  EXPECT_EQ(s[0].mem_used_mib, 1);
  EXPECT_EQ(s[0].mem_total_mib, 8192);
  EXPECT_EQ(s[1].util_pct, 10);
  EXPECT_EQ(s[1].mem_used_mib, 100);
  EXPECT_EQ(s[1].power_w, 200.5);
  EXPECT_EQ(s[1].xid_errors, 0);
  EXPECT_EQ(at(15)[1].util_pct, 90);
  EXPECT_EQ(at(15)[1].xid_errors, 2);
  EXPECT_EQ(at(25)[1].util_pct, 50);
  EXPECT_EQ(at(35)[1].util_pct, 10);  // wraps round
  // The Xid counts alone, as the agent's Xid watch reads them between samples: the GPUs
  // whose profile scripts them.
  EXPECT_EQ((*sampler)->XidCounts(0), (std::map<int, int64_t>{{1, 0}}));
  EXPECT_EQ((*sampler)->XidCounts(15'000'000), (std::map<int, int64_t>{{1, 1}}));
  EXPECT_EQ(at(15)[1].xid_count, 1);
}

TEST_F(TelemetryTest, BadProfilesAreErrorsNamingTheField) {
  struct Case {
    const char* profile;
    const char* error;
  };
  const Case cases[] = {
      {R"("telemetry": 3)", "telemetry: expected an object"},
      {R"("telemetry": {"step_s": 0})", "step_s"},
      {R"("telemetry": {"gpus": {"x": {}}})", "telemetry.gpus.x: the key must be a GPU index"},
      {R"("telemetry": {"gpus": {"0": {"util": [1]}}})", "telemetry.gpus.0.util: unknown field"},
      {R"("telemetry": {"gpus": {"0": {"util_pct": ["a"]}}})", "telemetry.gpus.0.util_pct"},
      {R"("telemetry": {"gpus": {"0": {"util_pct": []}}})", "expected 1 to 100000 numbers"},
      {R"("telemetry": {"gpus": {"0": {"power_w": [-1]}}})", "non-negative"},
  };
  for (const Case& c : cases) {
    std::string text = kNode;
    text += std::string(", ") + c.profile + "}";
    const std::string file = Write("bad.json", text);
    Result<NodeInfo> node = NodeInfo{};
    Result<std::unique_ptr<TelemetrySampler>> s = NewFakeSampler(file, NodeInfo{});
    ASSERT_FALSE(s.ok()) << c.profile;
    EXPECT_NE(s.status().message().find(c.error), std::string::npos)
        << c.profile << " -> " << s.status().message();
  }
}

TEST_F(TelemetryTest, AmdSysfsReadsBusyMemoryPowerAndTemperature) {
  const std::string dev = "bus/pci/devices/0000:03:00.0";
  Write(dev + "/gpu_busy_percent", "42\n");
  Write(dev + "/mem_info_vram_used", "1073741824\n");
  Write(dev + "/mem_info_vram_total", "68719476736\n");
  Write(dev + "/hwmon/hwmon3/power1_average", "215000000\n");
  Write(dev + "/hwmon/hwmon3/temp1_input", "55500\n");
  NodeInfo node;
  GpuInfo g;
  g.vendor = Vendor::kAmd;
  g.index = 0;
  g.pci_bus_id = "0000:03:00.0";
  node.gpus.push_back(g);
  std::unique_ptr<TelemetrySampler> s = NewAmdSysfsSampler(root_.string(), node);
  Result<std::vector<GpuSample>> r = s->Sample(0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].util_pct, 42);
  EXPECT_EQ((*r)[0].mem_used_mib, 1024);
  EXPECT_EQ((*r)[0].mem_total_mib, 65536);
  EXPECT_EQ((*r)[0].power_w, 215);
  EXPECT_EQ((*r)[0].temp_c, 55.5);

  // Garbage and absent files leave fields unset; no readable busy figure is an error.
  Write(dev + "/gpu_busy_percent", "lots\n");
  Write(dev + "/mem_info_vram_used", "-5\n");
  r = s->Sample(0);
  EXPECT_FALSE(r.ok());
  Write(dev + "/gpu_busy_percent", "3\n");
  r = s->Sample(0);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)[0].mem_used_mib.has_value());
}

TEST_F(TelemetryTest, NoGpusNoSampler) {
  DiscoveryOptions o;
  Result<std::unique_ptr<TelemetrySampler>> s = CreateTelemetrySampler(o, NodeInfo{});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gpupool::gpu
