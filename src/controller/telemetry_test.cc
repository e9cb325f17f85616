// TelemetryHub under a manual clock: per-job figures, idle detection, GPU-hours with
// fractions, downsampling, retention, and the store round trip.
#include "controller/telemetry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "store/sqlite_store.h"

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

// A job that started after the GPU's previous sample is credited only from its start (the
// red team's sixth round: three 3 s jobs read 162%, 162% and 0% of what they held).
TEST_F(TelemetryHubTest, AJobIsCreditedOnlyFromItsStart) {
  TelemetryHub hub(&clock_);
  protocol::TelemetryBatch b;
  b.samples = {Sample(0, kT0Ms, 0, 1)};  // idle, no job
  hub.Ingest("n1", b);
  clock_.SetMicros((kT0Ms + 10'000) * 1000);
  protocol::TelemetryJob job{1, 1000, kT0Ms + 8'000};  // started 2 s before this sample
  b.samples = {Sample(0, kT0Ms + 10'000, 100, 1, {job})};
  hub.Ingest("n1", b);
  EXPECT_NEAR(hub.Job(1)->used_gpu_hours, 2.0 / 3600, 1e-9);
  // The next interval counts whole.
  clock_.SetMicros((kT0Ms + 20'000) * 1000);
  b.samples = {Sample(0, kT0Ms + 20'000, 100, 1, {job})};
  hub.Ingest("n1", b);
  EXPECT_NEAR(hub.Job(1)->used_gpu_hours, 12.0 / 3600, 1e-9);
  // A start after the sample (clocks apart) credits nothing rather than a negative.
  protocol::TelemetryJob later{2, 1000, kT0Ms + 25'000};
  b.samples = {Sample(1, kT0Ms + 10'000, 100, 1)};
  hub.Ingest("n1", b);
  b.samples = {Sample(1, kT0Ms + 20'000, 100, 1, {later})};
  hub.Ingest("n1", b);
  EXPECT_NEAR(hub.Job(2)->used_gpu_hours, 0, 1e-12);
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
  ASSERT_EQ(dirty.size(), 7u);  // 2 minutes x (GPU, job, pool), the job's total
  EXPECT_TRUE(hub.TakeDirty(&expire).empty());
  // A late sample makes its minute dirty again.
  protocol::TelemetryBatch b;
  b.samples = {Sample(0, kT0Ms + 1000, 40, 10, {{9, 500}})};
  hub.Ingest("n1", b);
  EXPECT_EQ(hub.TakeDirty(&expire).size(), 4u);  // the minute of GPU, job, pool; the total

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

// A windowed hub writing to a real (SQLite) store, beside one that keeps everything in
// memory: the series, totals and GPU-hours that the windowed one serves with the store's
// older points are the same, while it holds only the window.
class TelemetryWindowTest : public TelemetryHubTest {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gpupool-telemetry-window-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto st = store::OpenSqliteStore((dir_ / "s.db").string());
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    store_ = std::move(*st);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static TelemetryOptions Options(int64_t window_s) {
    TelemetryOptions o;
    o.retention_s = 7 * 24 * 3600;
    o.memory_window_s = window_s;
    return o;
  }
  void Flush(TelemetryHub& hub) {
    int64_t expire = 0;
    ASSERT_TRUE(store_->PutTelemetry(hub.TakeDirty(&expire)).ok());
  }
  // Three hours of node n1 (GPUs 0 and 1) every 30 s: job 5 on both GPUs for the first
  // two hours (busy, then idle for its last 40 minutes), job 6 on GPU 1 at half a GPU
  // for the third.
  void FeedThreeHours(std::vector<TelemetryHub*> hubs) {
    for (int i = 0; i < 360; ++i) {
      const int64_t at = kT0Ms + int64_t{i} * 30'000;
      clock_.SetMicros(at * 1000);
      const bool first_two = i < 240;
      const double u0 = first_two ? (i < 160 ? 80 + i % 7 : 1) : 0;
      const double u1 = first_two ? (i < 160 ? 60 : 2) : 30 + i % 11;
      std::vector<protocol::TelemetryJob> j0, j1;
      if (first_two) {
        j0 = {{5, 1000}};
        j1 = {{5, 1000}};
      } else {
        j1 = {{6, 500}};
      }
      protocol::TelemetryBatch b;
      b.node = "n1";
      b.samples = {Sample(0, at, u0, 1000 + i, j0), Sample(1, at, u1, 2000 + 2 * i, j1)};
      for (TelemetryHub* h : hubs) h->Ingest("n1", b);
      if (i % 20 == 19) Flush(*hubs[0]);  // every ten minutes, like TelemetryService::Flush
    }
    Flush(*hubs[0]);
  }
  // The store's points before the windowed hub's memory, as the API reads them.
  std::vector<store::TelemetryRecord> Older(store::TelemetryQuery q, int64_t split_ms,
                                            int64_t step_s) {
    q.until_ms = split_ms;
    q.step_ms = TelemetryHub::StepMs(step_s);
    auto r = store_->ListTelemetry(q);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::vector<store::TelemetryRecord>{};
  }

  std::filesystem::path dir_;
  std::unique_ptr<store::Store> store_;
};

void ExpectSameSeries(const std::vector<TelemetryPoint>& got,
                      const std::vector<TelemetryPoint>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].t_ms, want[i].t_ms) << i;
    EXPECT_NEAR(got[i].util_pct, want[i].util_pct, 1e-9) << i;
    EXPECT_EQ(got[i].mem_used_mib, want[i].mem_used_mib) << i;
    EXPECT_EQ(got[i].gpus, want[i].gpus) << i;
  }
}

TEST_F(TelemetryWindowTest, OlderPointsFromTheStoreGiveWhatMemoryWouldHave) {
  TelemetryHub windowed(&clock_, Options(3600));
  TelemetryHub everything(&clock_, Options(7 * 24 * 3600));
  FeedThreeHours({&windowed, &everything});

  // Memory holds the last hour (and a minute) of series, not three.
  const TelemetryHub::Footprint w = windowed.Size();
  const TelemetryHub::Footprint e = everything.Size();
  EXPECT_LE(w.gpu_points, 2u * 61);
  EXPECT_EQ(e.gpu_points, 2u * 180);
  EXPECT_LE(w.job_points, 61u);
  EXPECT_EQ(w.pool_points, 180u);  // the pool's series: the whole retention
  EXPECT_EQ(w.jobs, 2u);

  const int64_t split = windowed.MemoryFromMs();
  EXPECT_EQ(split, kT0Ms + 359 * 30'000 - 3'600'000 - (359 * 30'000) % 60'000);
  for (const int64_t step : {60, 300, 3600}) {
    for (const int64_t since : {int64_t{0}, kT0Ms + 2'400'000, split + 120'000}) {
      SCOPED_TRACE("step " + std::to_string(step) + " since " + std::to_string(since));
      ExpectSameSeries(
          windowed.JobSeries(5, since, step, split,
                             Older({.since_ms = since, .scope = "job", .key = "5"}, split, step)),
          everything.JobSeries(5, since, step));
      ExpectSameSeries(
          windowed.NodeSeries(
              "n1", -1, since, step, split,
              Older({.since_ms = since, .scope = "gpu", .key_prefix = "n1/"}, split, step)),
          everything.NodeSeries("n1", -1, since, step));
      ExpectSameSeries(windowed.NodeSeries(
                           "n1", 1, since, step, split,
                           Older({.since_ms = since, .scope = "gpu", .key = "n1/1"}, split, step)),
                       everything.NodeSeries("n1", 1, since, step));
    }
  }
  ExpectSameSeries(windowed.PoolSeries(0, 60), everything.PoolSeries(0, 60));
  // Job 5 ended two hours in: every point of it is the store's now.
  EXPECT_FALSE(windowed.JobSeries(5, 0, 60).size() == everything.JobSeries(5, 0, 60).size());

  // Per-job figures are running totals: the same as from every point.
  for (const int64_t id : {5, 6}) {
    std::optional<JobGpuUtil> a = windowed.Job(id);
    std::optional<JobGpuUtil> b = everything.Job(id);
    ASSERT_TRUE(a && b);
    EXPECT_NEAR(a->mean_pct, b->mean_pct, 1e-9);
    EXPECT_EQ(a->peak_pct, b->peak_pct);
    EXPECT_EQ(a->peak_mem_mib, b->peak_mem_mib);
    EXPECT_NEAR(a->used_gpu_hours, b->used_gpu_hours, 1e-9);
  }
  // GPU-hours over a range that starts before the window.
  const int64_t since = kT0Ms + 1'800'000;
  const int64_t until = kT0Ms + 3 * 3'600'000;
  std::map<int64_t, double> a = windowed.UsedGpuHours(
      since, until, split, Older({.since_ms = since, .scope = "job"}, split, 60));
  std::map<int64_t, double> b = everything.UsedGpuHours(since, until);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_NEAR(a[5], b[5], 1e-9);
  EXPECT_NEAR(a[6], b[6], 1e-9);
  // Taken once: the counter's increments add up to the totals.
  std::map<int64_t, double> used = windowed.TakeUsedGpuSeconds();
  EXPECT_NEAR(used[5] / 3600, windowed.Job(5)->used_gpu_hours, 1e-9);
  EXPECT_TRUE(windowed.TakeUsedGpuSeconds().empty());
  // Seconds given back come again with the next take; not those of a job unknown here.
  windowed.GiveBackUsedGpuSeconds({{5, 30.0}, {77, 9.0}});
  EXPECT_EQ(windowed.TakeUsedGpuSeconds(), (std::map<int64_t, double>{{5, 30.0}}));
}

TEST_F(TelemetryWindowTest, ARestartedHubRebuildsTotalsPoolAndIdleSpansFromTheStore) {
  TelemetryOptions o = Options(3600);
  o.idle_after_s = 30 * 60;
  TelemetryHub hub(&clock_, o);
  // Job 5 busy for 80 minutes, then below 5% for 40: idle.
  for (int i = 0; i < 240; ++i) {
    const int64_t at = kT0Ms + int64_t{i} * 30'000;
    clock_.SetMicros(at * 1000);
    protocol::TelemetryBatch b;
    b.samples = {Sample(0, at, i < 160 ? 90 : 1, 500, {{5, 1000}})};
    hub.Ingest("n1", b);
    if (i % 20 == 19) Flush(hub);
  }
  Flush(hub);
  ASSERT_EQ(hub.IdleJobs().count(5), 1u);

  // What TelemetryService::Configure reads.
  TelemetryHub again(&clock_, o);
  const int64_t now_ms = clock_.NowMicros() / 1000;
  std::vector<store::TelemetryRecord> records;
  for (const store::TelemetryQuery& q :
       {store::TelemetryQuery{.since_ms = now_ms - o.retention_s * 1000, .scope = "job_total"},
        store::TelemetryQuery{.since_ms = now_ms - o.retention_s * 1000, .scope = "pool"},
        store::TelemetryQuery{.since_ms = again.MemoryFromMs(), .scope = "gpu"},
        store::TelemetryQuery{.since_ms = again.MemoryFromMs(), .scope = "job"}}) {
    auto r = store_->ListTelemetry(q);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    records.insert(records.end(), r->begin(), r->end());
  }
  again.Load(records);
  std::optional<JobGpuUtil> a = again.Job(5);
  std::optional<JobGpuUtil> b = hub.Job(5);
  ASSERT_TRUE(a && b);
  EXPECT_NEAR(a->mean_pct, b->mean_pct, 1e-9);
  EXPECT_NEAR(a->used_gpu_hours, b->used_gpu_hours, 1e-9);
  EXPECT_EQ(a->peak_mem_mib, b->peak_mem_mib);
  ExpectSameSeries(again.PoolSeries(0, 300), hub.PoolSeries(0, 300));
  // The idle span comes back from the window's minutes (to the minute).
  std::map<int64_t, int64_t> idle = again.IdleJobs();
  ASSERT_EQ(idle.count(5), 1u);
  EXPECT_EQ(idle[5], kT0Ms + 80 * 60'000);
  // The restarted hub's counter starts from the stored totals.
  EXPECT_NEAR(again.TakeUsedGpuSeconds()[5] / 3600, b->used_gpu_hours, 1e-9);
}

TEST_F(TelemetryHubTest, ABacklogOlderThanTheWindowIsDroppedAClockBehindIsNow) {
  TelemetryOptions o;
  o.memory_window_s = 3600;
  TelemetryHub hub(&clock_, o);
  const int64_t now = kT0Ms + 5 * 3'600'000;
  clock_.SetMicros(now * 1000);
  // An agent back after two hours away: its backlog's old part is dropped.
  protocol::TelemetryBatch backlog;
  backlog.samples = {Sample(0, now - 2 * 3'600'000, 50, 1, {{8, 1000}}),
                     Sample(0, now - 60'000, 50, 1, {{8, 1000}})};
  EXPECT_EQ(hub.Ingest("n1", backlog), 1u);
  EXPECT_EQ(hub.NodeSeries("n1", 0, 0, 60).size(), 1u);
  // An agent whose clock is three hours behind: all its samples count, as now.
  protocol::TelemetryBatch behind;
  behind.samples = {Sample(1, now - 3 * 3'600'000, 70, 1)};
  EXPECT_EQ(hub.Ingest("n1", behind), 1u);
  std::vector<TelemetryPoint> g1 = hub.NodeSeries("n1", 1, 0, 60);
  ASSERT_EQ(g1.size(), 1u);
  EXPECT_EQ(g1[0].t_ms, now - now % 60'000);
  EXPECT_EQ(hub.LatestOfNode("n1")[1].at_ms, now);
}

// Two jobs at half a GPU each on a GPU busy at 60%: with per-process utilisation, the one
// whose processes did the work is charged (up to its share), the idle one nothing.
TEST_F(TelemetryHubTest, ASharedGpuChargesEachJobWhatItsProcessesUsed) {
  TelemetryHub hub(&clock_);
  TelemetryHub without(&clock_);
  for (int i = 0; i < 13; ++i) {
    const int64_t at = kT0Ms + int64_t{i} * 5000;
    clock_.SetMicros(at * 1000);
    protocol::TelemetryBatch b;
    b.samples = {Sample(0, at, 60, 100, {{1, 500}, {2, 500}})};
    protocol::TelemetryBatch plain = b;
    b.samples[0].processes = {{101, 1, 40, 45.0}, {102, 1, 10, 15.0}, {201, 2, 10, 0.0}};
    hub.Ingest("n1", b);
    without.Ingest("n1", plain);
  }
  // 60 s: job 1's processes used 60% of the GPU, more than its half: charged its half.
  EXPECT_NEAR(hub.Job(1)->used_gpu_hours, 0.5 * 60 / 3600, 1e-9);
  EXPECT_NEAR(hub.Job(2)->used_gpu_hours, 0, 1e-12);
  // Without per-process figures, each is charged its share of the GPU's 60%.
  EXPECT_NEAR(without.Job(1)->used_gpu_hours, 0.5 * 0.6 * 60 / 3600, 1e-9);
  EXPECT_NEAR(without.Job(2)->used_gpu_hours, 0.5 * 0.6 * 60 / 3600, 1e-9);
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
