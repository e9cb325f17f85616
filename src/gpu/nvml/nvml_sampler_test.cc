// The NVML telemetry sampler against the fake libnvidia-ml.so.1, with values a test
// rewrites while the sampler keeps its session open ($FAKE_NVML_TELEMETRY).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <map>

#include "common/json.h"
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
  // The node of the 8-GPU H100 scenario, and the sampler's telemetry file set up (empty).
  NodeInfo H100Node() {
    Result<NodeInfo> node = Run("h100_hgx_8gpu.json");
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    telemetry_ = (root_ / "telemetry.json").string();
    setenv("FAKE_NVML_TELEMETRY", telemetry_.c_str(), 1);
    WriteTelemetry("{}");
    return node.ok() ? *node : NodeInfo{};
  }
  // The h100 scenario changed by `edit`, as the scenario the sampler's session loads.
  void UseEditedH100Scenario(const std::function<void(Json&)>& edit) {
    std::ifstream in(Scenario("h100_hgx_8gpu.json"));
    Json j = Json::parse(in);
    edit(j);
    const std::string path = (root_ / "edited_scenario.json").string();
    std::ofstream(path) << j.dump();
    setenv("FAKE_NVML_SCENARIO", path.c_str(), 1);
  }
  static std::vector<GpuSample> SampleOk(TelemetrySampler& sampler) {
    Result<std::vector<GpuSample>> s = sampler.Sample(0);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : std::vector<GpuSample>{};
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
  EXPECT_EQ(g.ecc_uncorrected, 3);
  EXPECT_EQ(g.xid_errors, 0);  // the ECC count is not an Xid
  EXPECT_EQ(g.xid_count, 0);
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
  EXPECT_FALSE((*s)[0].ecc_uncorrected.has_value());
  EXPECT_TRUE((*s)[0].processes.empty());
  EXPECT_TRUE((*s)[0].util_pct.has_value());
  // No event entry points: no Xid figures, said once, and sampling goes on.
  for (const GpuSample& g : *s) {
    EXPECT_FALSE(g.xid_errors.has_value());
    EXPECT_FALSE(g.xid_count.has_value());
  }
  EXPECT_NE((*sampler)->note().find("Xid errors are not reported: libnvidia-ml lacks "
                                    "nvmlEventSetCreate"),
            std::string::npos)
      << (*sampler)->note();
  EXPECT_TRUE((*sampler)->Sample(0).ok());
}

// Issue 29's default check: faults injected through the fake NVML (a failed and a pending
// row remapping, a pending page retirement, HW slowdown, uncorrected ECC errors that grow,
// retired pages past the thresholds) show in the sample's fields, and the health policy
// puts each GPU in the state its table row says.
TEST_F(NvmlSamplerTest, InjectedHardwareFaultsReachThePolicysStates) {
  const NodeInfo node = H100Node();
  Result<std::unique_ptr<TelemetrySampler>> sampler = NewNvmlSampler(FAKE_NVML_LIBRARY, node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  const HealthPolicy policy = HealthPolicy::Create().value();
  std::vector<GpuHealth> health(node.gpus.size());
  auto step = [&] {
    const std::vector<GpuSample> s = SampleOk(**sampler);
    for (size_t i = 0; i < s.size() && i < health.size(); ++i) {
      health[i] =
          OnReadings(health[i], HealthReadings(s[i].hw, s[i].ecc_uncorrected), 0, policy).next;
    }
    return s;
  };
  std::vector<GpuSample> s = step();  // all well
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].hw.retired_pages, 0);
    EXPECT_EQ(s[i].hw.retired_pages_pending, false);
    EXPECT_EQ(s[i].hw.remapped_rows, 0);
    EXPECT_EQ(s[i].hw.remapped_rows_failed, false);
    EXPECT_EQ(s[i].hw.hw_slowdown, false);
    EXPECT_EQ(health[i].state, GpuHealthState::kHealthy) << i;
  }
  WriteTelemetry(R"({"devices": {
      "0": {"remapped_rows_failure": true, "remapped_rows_uncorrectable": 2},
      "1": {"retired_pages_pending": true},
      "2": {"clocks_event_reasons": 8},
      "3": {"clocks_event_reasons": 128},
      "4": {"clocks_event_reasons": 36},
      "5": {"ecc_total": 1},
      "6": {"remapped_rows_pending": true},
      "7": {"retired_pages_sbe": 7, "retired_pages_dbe": 5}}})");
  s = step();
  EXPECT_EQ(s[0].hw.remapped_rows, 2);
  EXPECT_EQ(s[0].hw.remapped_rows_failed, true);
  EXPECT_EQ(s[1].hw.retired_pages_pending, true);
  EXPECT_EQ(s[2].hw.hw_slowdown, true);   // HW slowdown
  EXPECT_EQ(s[3].hw.hw_slowdown, true);   // HW power brake slowdown
  EXPECT_EQ(s[4].hw.hw_slowdown, false);  // SW thermal and SW power cap: not the hardware
  EXPECT_EQ(s[7].hw.retired_pages, 12);
  using S = GpuHealthState;
  const S after[] = {S::kCordoned, S::kCordoned, S::kSuspect,  S::kSuspect,
                     S::kHealthy,  S::kSuspect,  S::kCordoned, S::kSuspect};
  for (size_t i = 0; i < std::size(after); ++i) {
    EXPECT_EQ(health[i].state, after[i]) << "GPU " << i << ": " << health[i].reason;
  }
  EXPECT_NE(health[0].reason.find("remapped-rows-failed"), std::string::npos);
  // Uncorrected ECC errors grow to the cordon threshold; retired pages past theirs.
  WriteTelemetry(R"({"devices": {"5": {"ecc_total": 3}, "7": {"retired_pages_dbe": 55}}})");
  s = step();
  EXPECT_EQ(s[5].ecc_uncorrected, 3);
  EXPECT_EQ(health[5].state, S::kCordoned) << health[5].reason;
  EXPECT_EQ(health[7].state, S::kCordoned) << health[7].reason;
}

// A GPU without a feature (NOT_SUPPORTED, as an A100 answers for page retirement) leaves its
// fields unset; an old driver has neither the remapping nor the retirement calls, and its
// clock reasons come from nvmlDeviceGetCurrentClocksThrottleReasons.
TEST_F(NvmlSamplerTest, UnsupportedOrMissingHealthCallsLeaveTheirFieldsUnset) {
  const NodeInfo node = H100Node();
  UseEditedH100Scenario([](Json& j) {
    j["devices"][0]["errors"] = {{"nvmlDeviceGetRetiredPages", 3},
                                 {"nvmlDeviceGetRetiredPagesPendingStatus", 3},
                                 {"nvmlDeviceGetRemappedRows", 3},
                                 {"nvmlDeviceGetCurrentClocksEventReasons", 3}};
    j["devices"][1]["clocks_event_reasons"] = 64;  // HW thermal slowdown
  });
  Result<std::unique_ptr<TelemetrySampler>> sampler = NewNvmlSampler(FAKE_NVML_LIBRARY, node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  std::vector<GpuSample> s = SampleOk(**sampler);
  ASSERT_GE(s.size(), 2u);
  EXPECT_EQ(s[0].hw, HardwareHealth{});
  EXPECT_TRUE(s[0].util_pct.has_value());  // the rest is read
  EXPECT_EQ(s[1].hw.hw_slowdown, true);
  Result<std::unique_ptr<TelemetrySampler>> old =
      NewNvmlSampler(FAKE_NVML_NO_OPTIONAL_LIBRARY, node);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  s = SampleOk(**old);
  ASSERT_GE(s.size(), 2u);
  EXPECT_FALSE(s[1].hw.retired_pages.has_value());
  EXPECT_FALSE(s[1].hw.retired_pages_pending.has_value());
  EXPECT_FALSE(s[1].hw.remapped_rows.has_value());
  EXPECT_FALSE(s[1].hw.remapped_rows_failed.has_value());
  EXPECT_EQ(s[1].hw.hw_slowdown, true);
}

// DCGM_FI_DEV_XID_ERRORS is the last Xid: a scripted Xid 79 on GPU 1 shows on GPU 1
// only, stays until the next, and is counted; the drains never wait.
TEST_F(NvmlSamplerTest, AnXidShowsOnItsGpuAsTheLastXidAndIsCounted) {
  const NodeInfo node = H100Node();
  Result<std::unique_ptr<TelemetrySampler>> sampler = NewNvmlSampler(FAKE_NVML_LIBRARY, node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  EXPECT_EQ((*sampler)->note(), "");
  std::vector<GpuSample> s = SampleOk(**sampler);
  ASSERT_EQ(s.size(), 8u);
  for (const GpuSample& g : s) {
    EXPECT_EQ(g.xid_errors, 0) << "GPU " << g.index;  // none yet, but watched
    EXPECT_EQ(g.xid_count, 0) << "GPU " << g.index;
  }

  WriteTelemetry(R"({"devices": {"1": {"xid_events": [79]}}})");
  s = SampleOk(**sampler);
  ASSERT_EQ(s.size(), 8u);
  EXPECT_EQ(s[1].xid_errors, 79);
  EXPECT_EQ(s[1].xid_count, 1);
  EXPECT_EQ(s[0].xid_errors, 0);
  EXPECT_EQ(s[0].xid_count, 0);
  for (size_t i = 2; i < s.size(); ++i) EXPECT_EQ(s[i].xid_errors, 0) << "GPU " << i;
  // A gauge: the next sample, with no new event, still says 79.
  s = SampleOk(**sampler);
  EXPECT_EQ(s[1].xid_errors, 79);
  EXPECT_EQ(s[1].xid_count, 1);
  // The agent's Xid watch reads the counts between samples (a drain that does not wait);
  // what it drains the next sample still reports.
  WriteTelemetry(R"({"devices": {"1": {"xid_events": [95]}}})");
  const std::map<int, int64_t> counts = (*sampler)->XidCounts(0);
  ASSERT_EQ(counts.size(), 8u);
  EXPECT_EQ(counts.at(1), 2);
  EXPECT_EQ(counts.at(0), 0);
  s = SampleOk(**sampler);
  EXPECT_EQ(s[1].xid_errors, 95);
  EXPECT_EQ(s[1].xid_count, 2);

  // Two more in one interval: the last one shows, both count. One scripted a sample
  // later arrives a sample later.
  WriteTelemetry(R"({"devices": {"1": {"xid_events": [48, 13, {"xid": 94, "after_samples": 1}]},
      "0": {"xid_events": [31]}}})");
  s = SampleOk(**sampler);
  EXPECT_EQ(s[1].xid_errors, 13);
  EXPECT_EQ(s[1].xid_count, 4);
  EXPECT_EQ(s[0].xid_errors, 31);
  EXPECT_EQ(s[0].xid_count, 1);
  s = SampleOk(**sampler);
  EXPECT_EQ(s[1].xid_errors, 94);
  EXPECT_EQ(s[1].xid_count, 5);

  EXPECT_EQ(Called("nvmlEventSetCreate"), 1);
  EXPECT_EQ(Called("nvmlEventSetWait_v2"), 1);
  EXPECT_EQ(Called("nvmlEventSetWait with a timeout"), 0);
  sampler->reset();
  // The set was freed, before nvmlShutdown (the fake notes a set left at shutdown).
  EXPECT_EQ(Called("nvmlEventSetFree"), 1);
  EXPECT_EQ(Called("nvmlShutdown with an event set not freed"), 0);
  ExpectCleanExit(FAKE_NVML_LIBRARY, /*expected_sessions=*/2);  // discovery's and the sampler's
}

// An Xid scripted in the scenario, a sample after the start, through a driver without
// nvmlEventSetWait_v2: the v1 call is used.
TEST_F(NvmlSamplerTest, ADriverWithoutWaitV2UsesTheV1Call) {
  const NodeInfo node = H100Node();
  UseEditedH100Scenario([](Json& j) {
    j["devices"][1]["xid_events"] = Json::array({Json{{"xid", 79}, {"after_samples", 1}}});
  });
  Result<std::unique_ptr<TelemetrySampler>> sampler =
      NewNvmlSampler(FAKE_NVML_NO_WAIT_V2_LIBRARY, node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  std::vector<GpuSample> s = SampleOk(**sampler);
  ASSERT_EQ(s.size(), 8u);
  EXPECT_EQ(s[1].xid_errors, 0);
  s = SampleOk(**sampler);
  EXPECT_EQ(s[1].xid_errors, 79);
  EXPECT_EQ(s[1].xid_count, 1);
  EXPECT_EQ(s[0].xid_errors, 0);
  EXPECT_EQ(Called("nvmlEventSetWait_v1"), 1);
  EXPECT_EQ(Called("nvmlEventSetWait_v2"), 0);
}

// A GPU that cannot register for Xid events (NOT_SUPPORTED) or whose registration fails
// has no Xid figures; the others have, and the note says which and why in one line.
TEST_F(NvmlSamplerTest, AGpuThatCannotRegisterHasNoXidFigures) {
  const NodeInfo node = H100Node();
  UseEditedH100Scenario([](Json& j) {
    j["devices"][0]["errors"]["nvmlDeviceRegisterEvents"] = 3;  // NVML_ERROR_NOT_SUPPORTED
    j["devices"][3]["errors"]["nvmlDeviceRegisterEvents"] = 3;
    j["devices"][5]["errors"]["nvmlDeviceRegisterEvents"] = 999;
  });
  Result<std::unique_ptr<TelemetrySampler>> sampler = NewNvmlSampler(FAKE_NVML_LIBRARY, node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  WriteTelemetry(R"({"devices": {"0": {"xid_events": [79]}, "1": {"xid_events": [79]}}})");
  std::vector<GpuSample> s = SampleOk(**sampler);
  ASSERT_EQ(s.size(), 8u);
  for (int i : {0, 3, 5}) {
    EXPECT_FALSE(s[i].xid_errors.has_value()) << "GPU " << i;
    EXPECT_FALSE(s[i].xid_count.has_value()) << "GPU " << i;
    EXPECT_TRUE(s[i].util_pct.has_value()) << "GPU " << i;  // the rest is still read
  }
  EXPECT_EQ(s[1].xid_errors, 79);
  EXPECT_EQ(s[2].xid_errors, 0);
  const std::string note = (*sampler)->note();
  EXPECT_NE(note.find("GPUs 0, 3: Xid events not supported"), std::string::npos) << note;
  EXPECT_NE(note.find("GPU 5: nvmlDeviceRegisterEvents failed"), std::string::npos) << note;
  EXPECT_EQ(note.find('\n'), std::string::npos) << note;
}

// No event set (nvmlEventSetCreate fails) or none of the GPUs can register: no Xid
// figures anywhere, sampling goes on, and no set is left behind.
TEST_F(NvmlSamplerTest, NoEventSetMeansNoXidFigures) {
  const NodeInfo node = H100Node();
  UseEditedH100Scenario([](Json& j) { j["errors"]["nvmlEventSetCreate"] = 999; });
  Result<std::unique_ptr<TelemetrySampler>> sampler = NewNvmlSampler(FAKE_NVML_LIBRARY, node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  for (const GpuSample& g : SampleOk(**sampler)) EXPECT_FALSE(g.xid_errors.has_value());
  EXPECT_NE((*sampler)->note().find("nvmlEventSetCreate failed"), std::string::npos);
  EXPECT_EQ(Called("nvmlEventSetWait_v2"), 0);
  sampler->reset();

  UseEditedH100Scenario([](Json& j) {
    for (Json& d : j["devices"]) d["errors"]["nvmlDeviceRegisterEvents"] = 3;
  });
  sampler = NewNvmlSampler(FAKE_NVML_LIBRARY, node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  for (const GpuSample& g : SampleOk(**sampler)) EXPECT_FALSE(g.xid_count.has_value());
  EXPECT_NE((*sampler)->note().find("GPUs 0, 1, 2, 3, 4, 5, 6, 7: Xid events not supported"),
            std::string::npos)
      << (*sampler)->note();
  sampler->reset();
  EXPECT_EQ(Called("nvmlShutdown with an event set not freed"), 0);
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

// On a machine with an NVIDIA driver: the real library's event sets take the GPUs'
// registration (or say why not, once), and draining them does not block a sample.
// Elsewhere it skips.
TEST(NvmlRealDriverSamplerTest, XidEventsRegisterAndDrainWithoutBlocking) {
  DiscoveryOptions options;  // the real libnvidia-ml.so.1, /sys and /dev
  options.backends = {"nvml"};
  Result<NodeInfo> node = NewNvmlBackend(options)->Discover();
  if (!node.ok() || node->gpus.empty()) GTEST_SKIP() << "no usable NVIDIA driver or GPU here";
  Result<std::unique_ptr<TelemetrySampler>> sampler = NewNvmlSampler(options.nvml_library, *node);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  std::cout << "note: " << (*sampler)->note() << "\n";
  for (int k = 0; k < 3; ++k) {
    const auto start = std::chrono::steady_clock::now();
    Result<std::vector<GpuSample>> s = (*sampler)->Sample(0);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
    for (const GpuSample& g : *s) {
      EXPECT_EQ(g.xid_errors.has_value(), g.xid_count.has_value());
      EXPECT_GE(g.xid_count.value_or(0), 0);
      std::cout << "GPU " << g.index << ": xid_errors "
                << (g.xid_errors ? std::to_string(*g.xid_errors) : "-") << ", xid_count "
                << (g.xid_count ? std::to_string(*g.xid_count) : "-") << ", ecc_uncorrected "
                << (g.ecc_uncorrected ? std::to_string(*g.ecc_uncorrected) : "-") << "\n";
    }
  }
}

}  // namespace
}  // namespace gpupool::gpu
