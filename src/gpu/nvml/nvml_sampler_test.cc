// The NVML telemetry sampler against the fake libnvidia-ml.so.1, with values a test
// rewrites while the sampler keeps its session open ($FAKE_NVML_TELEMETRY).
#include <gtest/gtest.h>

#include "gpu/nvml/nvml_test_fixture.h"
#include "gpu/telemetry.h"

namespace gpupool::gpu {
namespace {

class NvmlSamplerTest : public NvmlBackendTest {
 protected:
  void WriteTelemetry(const std::string& text) {
    // A new file each time (renamed into place): the fake notices the change by mtime
    // and size, and never reads a half-written file.
    const std::string tmp = (root_ / "telemetry.tmp").string();
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, telemetry_);
  }
  void TearDown() override {
    unsetenv("FAKE_NVML_TELEMETRY");
    NvmlBackendTest::TearDown();
  }
  std::string telemetry_;
};

TEST_F(NvmlSamplerTest, ReadsEveryFigureAndFollowsScriptedChanges) {
  Result<NodeInfo> node = Run("h100_hgx_8gpu.json");
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  telemetry_ = (root_ / "telemetry.json").string();
  setenv("FAKE_NVML_TELEMETRY", telemetry_.c_str(), 1);
  WriteTelemetry(R"({"devices": {"2": {"utilization_gpu": 73, "memory_used": 2147483648,
      "power_mw": 350500, "temperature": 61, "ecc_total": 3,
      "processes": [{"pid": 4242, "used_memory": 1073741824, "sm_util": 40}]}}})");
  Result<std::unique_ptr<TelemetrySampler>> sampler = NewNvmlSampler(FAKE_NVML_LIBRARY, *node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  Result<std::vector<GpuSample>> s = (*sampler)->Sample(0);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), node->gpus.size());
  const GpuSample& g = (*s)[2];
  EXPECT_EQ(g.index, 2);
  EXPECT_EQ(g.uuid, node->gpus[2].uuid);
  EXPECT_EQ(g.util_pct, 73);
  EXPECT_EQ(g.mem_used_mib, 2048);
  EXPECT_EQ(g.mem_total_mib, static_cast<int64_t>(node->gpus[2].memory_total_bytes >> 20));
  EXPECT_EQ(g.power_w, 350.5);
  EXPECT_EQ(g.temp_c, 61);
  EXPECT_EQ(g.xid_errors, 3);
  ASSERT_EQ(g.processes.size(), 1u);
  EXPECT_EQ(g.processes[0].pid, 4242);
  EXPECT_EQ(g.processes[0].used_mib, 1024);
  EXPECT_EQ(g.processes[0].util_pct, 40);

  // The same session sees new values.
  WriteTelemetry(R"({"devices": {"2": {"utilization_gpu": 5, "processes": []}}})");
  s = (*sampler)->Sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[2].util_pct, 5);
  EXPECT_TRUE((*s)[2].processes.empty());
  // A half-written file changes nothing.
  WriteTelemetry(R"({"devices": {"2": {"utilization_gpu": )");
  s = (*sampler)->Sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[2].util_pct, 5);
}

TEST_F(NvmlSamplerTest, AbsentOptionalSymbolsLeaveTheirFieldsUnset) {
  Result<NodeInfo> node = Run("h100_hgx_8gpu.json", FAKE_NVML_NO_OPTIONAL_LIBRARY);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  Result<std::unique_ptr<TelemetrySampler>> sampler =
      NewNvmlSampler(FAKE_NVML_NO_OPTIONAL_LIBRARY, *node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  Result<std::vector<GpuSample>> s = (*sampler)->Sample(0);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_FALSE(s->empty());
  EXPECT_FALSE((*s)[0].xid_errors.has_value());
  EXPECT_TRUE((*s)[0].processes.empty());
  EXPECT_TRUE((*s)[0].util_pct.has_value());
}

TEST_F(NvmlSamplerTest, NoKnownGpuOrNoLibraryIsUnavailable) {
  Result<NodeInfo> node = Run("h100_hgx_8gpu.json");
  ASSERT_TRUE(node.ok());
  // A node whose GPUs NVML does not know: nothing to bind.
  NodeInfo other = *node;
  for (GpuInfo& g : other.gpus) {
    g.uuid = "GPU-not-here";
    g.index = 100 + g.index;
  }
  setenv("FAKE_NVML_SCENARIO", Scenario("h100_hgx_8gpu.json").c_str(), 1);
  Result<std::unique_ptr<TelemetrySampler>> none = NewNvmlSampler(FAKE_NVML_LIBRARY, other);
  EXPECT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  Result<std::unique_ptr<TelemetrySampler>> missing =
      NewNvmlSampler("/nonexistent/libnvml.so", *node);
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace gpupool::gpu
