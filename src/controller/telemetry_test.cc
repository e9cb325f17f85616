// TelemetryHub under a manual clock: per-job figures, idle detection, GPU-hours with
// fractions, downsampling, retention, and the store round trip.
#include "controller/telemetry.h"

#include <gtest/gtest.h>

#include <functional>

namespace gpupool::controller {
namespace {

constexpr int64_t kT0Ms = 1'700'000'040'000;  // a minute boundary + 0

protocol::GpuTelemetry Sample(int index, int64_t at_ms, double util, int64_t mem_mib,
                              std::vector<protocol::TelemetryJob> jobs = {}) {
  protocol::GpuTelemetry g;
  g.index = index;
  g.uuid = "GPU-" + std::to_string(index);
  g.at_ms = at_ms;
  g.util_pct = util;
  g.mem_used_mib = mem_mib;
  g.mem_total_mib = 81920;
  g.jobs = std::move(jobs);
  return g;
}

class TelemetryHubTest : public ::testing::Test {
 protected:
  TelemetryHubTest() : clock_(kT0Ms * 1000) {}
  // Feeds one sample of each listed GPU every `every_s` for `count` rounds.
  void Feed(TelemetryHub& hub, const std::string& node, int64_t start_ms, int every_s, int count,
            const std::function<protocol::GpuTelemetry(int64_t at_ms)>& make) {
    for (int i = 0; i < count; ++i) {
      const int64_t at = start_ms + int64_t{i} * every_s * 1000;
      clock_.SetMicros(at * 1000);
      protocol::TelemetryBatch b;
      b.node = node;
      b.samples.push_back(make(at));
      hub.Ingest(node, b);
    }
  }
  ManualClock clock_;
};

TEST_F(TelemetryHubTest, LatestSamplePerGpuAndForget) {
  TelemetryHub hub(&clock_);
  protocol::TelemetryBatch b;
  b.samples = {Sample(0, kT0Ms, 10, 1), Sample(1, kT0Ms, 20, 2), Sample(0, kT0Ms + 5000, 30, 3)};
  EXPECT_EQ(hub.Ingest("n1", b), 3u);
  auto latest = hub.LatestOfNode("n1");
  ASSERT_EQ(latest.size(), 2u);
  EXPECT_EQ(latest[0].util_pct, 30);
  EXPECT_EQ(latest[1].mem_used_mib, 2);
  EXPECT_TRUE(hub.LatestOfNode("n10").empty());  // no prefix confusion
  EXPECT_EQ(hub.AllLatest().size(), 2u);
  EXPECT_EQ(hub.AllLatest()[0].node, "n1");
  // An older sample arriving late does not replace the latest.
  b.samples = {Sample(0, kT0Ms + 1000, 99, 9)};
  hub.Ingest("n1", b);
  EXPECT_EQ(hub.LatestOfNode("n1")[0].util_pct, 30);
  hub.ForgetNode("n1");
  EXPECT_TRUE(hub.LatestOfNode("n1").empty());
}

TEST_F(TelemetryHubTest, AgentClockFarAheadOrTooOldIsTakenAsNow) {
  TelemetryHub hub(&clock_);
  protocol::TelemetryBatch b;
  b.samples = {Sample(0, kT0Ms + 3'600'000, 10, 1), Sample(1, 5, 10, 1)};
  hub.Ingest("n1", b);
  for (const auto& [i, g] : hub.LatestOfNode("n1")) EXPECT_EQ(g.at_ms, kT0Ms) << i;
}

TEST_F(TelemetryHubTest, JobFiguresMeanPeakMemoryAndFractionalGpuHours) {
  TelemetryHub hub(&clock_);
  EXPECT_FALSE(hub.Job(7).has_value());
  // Job 7 holds half of GPU 0: 50% busy for an hour (samples every 5 s), then 100% for
  // an hour. Job 8 holds all of GPU 1 at 25%.
  Feed(hub, "n1", kT0Ms, 5, 720 * 2 + 1, [](int64_t at) {
    const double util = at < kT0Ms + 3'600'000 ? 50 : 100;
    return Sample(0, at, util, at < kT0Ms + 3'600'000 ? 1000 : 3000, {{7, 500}});
  });
  Feed(hub, "n2", kT0Ms, 5, 721, [](int64_t at) { return Sample(1, at, 25, 10, {{8, 1000}}); });
  std::optional<JobGpuUtil> u = hub.Job(7);
  ASSERT_TRUE(u.has_value());
  EXPECT_NEAR(u->mean_pct, 75, 0.1);
  EXPECT_EQ(u->peak_pct, 100);
  EXPECT_EQ(u->peak_mem_mib, 3000);
  // 0.5 x (0.5 x 1 h + 1.0 x 1 h) = 0.75 GPU-hours (the first interval counts 50% busy).
  EXPECT_NEAR(u->used_gpu_hours, 0.75, 0.001);
  EXPECT_FALSE(u->idle);
  std::optional<JobGpuUtil> v = hub.Job(8);
  ASSERT_TRUE(v.has_value());
  EXPECT_NEAR(v->used_gpu_hours, 0.25, 0.001);
  // Windowed: only the second hour of job 7.
  auto used = hub.UsedGpuHours(kT0Ms + 3'600'000, kT0Ms + 7'200'000 + 60'000);
  EXPECT_NEAR(used[7], 0.5, 0.01);
}

TEST_F(TelemetryHubTest, GapsCountAtMostAMinute) {
  TelemetryHub hub(&clock_);
  protocol::TelemetryBatch b;
  b.samples = {Sample(0, kT0Ms, 100, 1, {{1, 1000}})};
  hub.Ingest("n1", b);
  clock_.SetMicros((kT0Ms + 3'600'000) * 1000);
  b.samples = {Sample(0, kT0Ms + 3'600'000, 100, 1, {{1, 1000}})};
  hub.Ingest("n1", b);
  EXPECT_NEAR(hub.Job(1)->used_gpu_hours, 60.0 / 3600, 1e-9);
}

TEST_F(TelemetryHubTest, IdleAfterThirtyMinutesBelowTheThresholdAndBusyAgainClearsIt) {
  TelemetryOptions o;
  TelemetryHub hub(&clock_, o);
  // Two GPUs of job 5: GPU 0 idle throughout, GPU 1 busy for 10 minutes then idle.
  auto both = [&](int64_t start, int count) {
    for (int i = 0; i < count; ++i) {
      const int64_t at = start + int64_t{i} * 5000;
      clock_.SetMicros(at * 1000);
      protocol::TelemetryBatch b;
      const double busy = at < kT0Ms + 600'000 ? 80 : 1;
      b.samples = {Sample(0, at, 2, 1, {{5, 1000}}), Sample(1, at, busy, 1, {{5, 1000}})};
      hub.Ingest("n1", b);
    }
  };
  both(kT0Ms, 12 * 39);  // 39 minutes: idle for 29 of them
  EXPECT_FALSE(hub.Job(5)->idle);
  EXPECT_TRUE(hub.IdleJobs().empty());
  both(kT0Ms + 12 * 39 * 5000, 12 * 2);  // 41 minutes: idle for 31
  std::optional<JobGpuUtil> u = hub.Job(5);
  ASSERT_TRUE(u->idle);
  EXPECT_EQ(u->idle_since_ms, kT0Ms + 600'000);
  EXPECT_EQ(hub.IdleJobs().count(5), 1u);
  // One busy sample clears it.
  protocol::TelemetryBatch b;
  b.samples = {Sample(1, clock_.NowMicros() / 1000 + 5000, 50, 1, {{5, 1000}})};
  hub.Ingest("n1", b);
  EXPECT_FALSE(hub.Job(5)->idle);
}

TEST_F(TelemetryHubTest, SeriesAreDownsampledPerMinuteAndStep) {
  TelemetryHub hub(&clock_);
  // GPU 0 of n1 at 10% then 30% (one minute each); GPU 1 at 50%; job 3 on both.
  for (int i = 0; i < 24; ++i) {
    const int64_t at = kT0Ms + int64_t{i} * 5000;
    clock_.SetMicros(at * 1000);
    protocol::TelemetryBatch b;
    b.samples = {Sample(0, at, i < 12 ? 10 : 30, 100, {{3, 1000}}),
                 Sample(1, at, 50, 200, {{3, 1000}})};
    hub.Ingest("n1", b);
  }
  std::vector<TelemetryPoint> g0 = hub.NodeSeries("n1", 0, 0, 60);
  ASSERT_EQ(g0.size(), 2u);
  EXPECT_EQ(g0[0], (TelemetryPoint{kT0Ms, 10, 100, 1}));
  EXPECT_EQ(g0[1], (TelemetryPoint{kT0Ms + 60'000, 30, 100, 1}));
  std::vector<TelemetryPoint> node = hub.NodeSeries("n1", -1, 0, 60);
  ASSERT_EQ(node.size(), 2u);
  EXPECT_EQ(node[0], (TelemetryPoint{kT0Ms, 30, 300, 2}));  // mean of 10 and 50, memory summed
  std::vector<TelemetryPoint> pool = hub.PoolSeries(0, 120);
  ASSERT_EQ(pool.size(), 1u);  // one 2-minute step
  EXPECT_DOUBLE_EQ(pool[0].util_pct, 35);
  EXPECT_EQ(pool[0].gpus, 2);
  std::vector<TelemetryPoint> job = hub.JobSeries(3, 0, 60);
  ASSERT_EQ(job.size(), 2u);
  EXPECT_EQ(job[1], (TelemetryPoint{kT0Ms + 60'000, 40, 200, 2}));  // memory: the peak GPU
  EXPECT_EQ(hub.JobSeries(3, kT0Ms + 60'000, 60).size(), 1u);       // since
  EXPECT_TRUE(hub.JobSeries(99, 0, 60).empty());
  EXPECT_TRUE(hub.NodeSeries("n1", 7, 0, 60).empty());
}

TEST_F(TelemetryHubTest, DirtyPointsRoundTripThroughTheStoreAndExpire) {
  TelemetryOptions o;
  o.retention_s = 3600;
  TelemetryHub hub(&clock_, o);
  Feed(hub, "n1", kT0Ms, 5, 24, [](int64_t at) { return Sample(0, at, 40, 10, {{9, 500}}); });
  int64_t expire = 0;
  std::vector<store::TelemetryRecord> dirty = hub.TakeDirty(&expire);
  // The last sample was at kT0Ms + 115 s: the cut is the minute an hour before.
  EXPECT_EQ(expire, kT0Ms + 60'000 - 3'600'000);
  ASSERT_EQ(dirty.size(), 4u);  // 2 minutes x (GPU, job)
  EXPECT_TRUE(hub.TakeDirty(&expire).empty());
  // A late sample makes its minute dirty again.
  protocol::TelemetryBatch b;
  b.samples = {Sample(0, kT0Ms + 1000, 40, 10, {{9, 500}})};
  hub.Ingest("n1", b);
  EXPECT_EQ(hub.TakeDirty(&expire).size(), 2u);

  // A new hub (a restarted controller) rebuilds the figures from the points.
  TelemetryHub again(&clock_, o);
  again.Load(dirty);
  std::optional<JobGpuUtil> u = again.Job(9);
  ASSERT_TRUE(u.has_value());
  EXPECT_DOUBLE_EQ(u->mean_pct, 40);
  EXPECT_NEAR(u->used_gpu_hours, hub.Job(9)->used_gpu_hours - 0, 1e-3);
  EXPECT_EQ(again.NodeSeries("n1", 0, 0, 60).size(), 2u);

  // Past the retention, points leave memory and the store is told where to cut.
  clock_.SetMicros((kT0Ms + 2 * 3'600'000) * 1000);
  again.TakeDirty(&expire);
  EXPECT_EQ(expire, kT0Ms + 3'600'000);
  EXPECT_FALSE(again.Job(9).has_value());
  EXPECT_TRUE(again.NodeSeries("n1", 0, 0, 60).empty());
}

TEST(TelemetryOptionsTest, BadOptionsNameTheFlag) {
  TelemetryOptions o;
  EXPECT_TRUE(ValidateTelemetryOptions(o).ok());
  o.idle_action = "kill";
  EXPECT_NE(ValidateTelemetryOptions(o).message().find("--idle-action"), std::string::npos);
  o = {};
  o.retention_s = 10;
  EXPECT_NE(ValidateTelemetryOptions(o).message().find("--telemetry-retention"), std::string::npos);
  o = {};
  o.idle_below_pct = 120;
  EXPECT_NE(ValidateTelemetryOptions(o).message().find("--idle-threshold"), std::string::npos);
  o = {};
  o.idle_after_s = 1;
  EXPECT_NE(ValidateTelemetryOptions(o).message().find("--idle-after"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::controller
