// GPU telemetry through the API (issue 17): node reports, the nodes' and jobs' views,
// series and usage, the idle policy, /metrics' Xid and ECC counts.
#include <tuple>

#include "controller/api_test.h"

namespace gpupool::controller::api_test {
namespace {

// Issue 17: telemetry through the API: node tokens report only for their node, the
// latest sample shows on the node, the job gets gpu_util, series and usage follow, the
// idle policy cancels, points reach the store.
class ApiTelemetryTest : public ApiAccessTest {
 protected:
  // One sample of GPU 0 of vm (holding `job` at full share) and GPU 1 (free).
  std::string Batch(int64_t job, double util, int64_t at_ms) {
    return R"({"node": "vm", "samples": [{"index": 0, "at_ms": )" + std::to_string(at_ms) +
           R"(, "util_pct": )" + std::to_string(util) +
           R"(, "mem_used_mib": 2048, "mem_total_mib": 81920, "power_w": 300, "temp_c": 50,
           "jobs": [{"job_id": )" +
           std::to_string(job) + R"(}]}, {"index": 1, "at_ms": )" + std::to_string(at_ms) +
           R"(, "util_pct": 0}]})";
  }
  // Samples every 5 s for `seconds`, advancing the clock; after each, what the telemetry
  // service's thread would do (no thread runs unless the test starts the Api).
  void Report(const std::string& token, int64_t job, double util, int seconds,
              bool run_service = true) {
    for (int s = 0; s < seconds; s += 5) {
      clock_.AdvanceMicros(5'000'000);
      net::HttpResponse r = WithToken(token, "POST", "/v1/agent/telemetry", {},
                                      Batch(job, util, clock_.NowMicros() / 1000));
      ASSERT_EQ(r.status, 200) << r.body;
      if (run_service) api_->telemetry_service().RunOnce();
    }
  }
  Json Body(const net::HttpResponse& r) { return ParseJson(r.body, "answer").value(); }
  // Root's 2-element array on a 2-GPU node vm; element 1 (store id `*id`, unlike its
  // array's `*array`) is placed, and vm reports its GPU at 42% for it.
  void SampleArrayElement(std::string* array, int64_t* id) {
    const std::string vm = Token("vm", "node");
    ASSERT_EQ(WithToken(vm, "POST", "/v1/agent/register", {}, RegisterBody("vm", 2)).status, 200);
    net::HttpResponse sub = AsUid(0, "POST", "/v1/jobs", {},
                                  R"({"command": ["true"], "workdir": "/", "array": "0-1", )"
                                  R"("request": {"gpus": 1}})");
    ASSERT_EQ(sub.status, 201) << sub.body;
    *array = std::to_string(Body(sub)["job"]["id"].get<int64_t>());
    ASSERT_TRUE(controller_->ScheduleOnce().ok());
    const Json element = Body(AsUid(0, "GET", "/v1/jobs/" + *array + "_1"))["job"];
    *id = element["id"].get<int64_t>();
    ASSERT_NE(std::to_string(*id), *array);
    const int gpu = element["placement"][0]["gpu_indices"][0].get<int>();
    net::HttpResponse r =
        WithToken(vm, "POST", "/v1/agent/telemetry", {},
                  R"({"node": "vm", "samples": [{"index": )" + std::to_string(gpu) +
                      R"(, "at_ms": )" + std::to_string(clock_.NowMicros() / 1000) +
                      R"(, "util_pct": 42, "jobs": [{"job_id": )" + std::to_string(*id) + "}]}]}");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // The idle policy: idle after 10 minutes, cancelled 5 minutes later.
  static TelemetryOptions CancelAfterFifteenIdleMinutes() {
    TelemetryOptions o;
    o.idle_action = "cancel";
    o.idle_after_s = 600;
    o.idle_cancel_after_s = 300;
    return o;
  }
};

TEST_F(ApiTelemetryTest, NodesJobsSeriesAndUsageShowTheSamples) {
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  // Before any sample: no telemetry, no gpu_util.
  Json job = Body(AsUid(0, "GET", "/v1/jobs/" + std::to_string(id)));
  EXPECT_FALSE(job["job"].contains("gpu_util"));
  Report(vm, id, 60, 120);
  Report(vm, id, 100, 60);

  Json nodes = Body(AsUid(user_uid_, "GET", "/v1/nodes"));
  const Json& gpu0 = nodes["nodes"][0]["gpus"][0];
  ASSERT_TRUE(gpu0.contains("telemetry")) << nodes.dump();
  EXPECT_EQ(gpu0["telemetry"]["util_pct"], 100);
  EXPECT_EQ(gpu0["telemetry"]["mem_total_mib"], 81920);
  EXPECT_FALSE(nodes["nodes"][0]["gpus"][1]["telemetry"].contains("power_w"));

  job = Body(AsUid(0, "GET", "/v1/jobs/" + std::to_string(id)));
  const Json& u = job["job"]["gpu_util"];
  EXPECT_NEAR(u["mean_pct"].get<double>(), (24 * 60 + 12 * 100) / 36.0, 0.01);
  EXPECT_EQ(u["peak_pct"], 100);
  EXPECT_EQ(u["peak_mem_mib"], 2048);
  EXPECT_EQ(u["idle"], false);
  EXPECT_FALSE(u.contains("idle_since_ms"));
  Json list = Body(AsUid(0, "GET", "/v1/jobs"));
  EXPECT_TRUE(list["jobs"][0].contains("gpu_util"));

  // Series: the pool's two GPUs, the node's GPU 0, the job.
  Json pool = Body(AsUid(user_uid_, "GET", "/v1/telemetry"));
  ASSERT_FALSE(pool["points"].empty()) << pool.dump();
  EXPECT_EQ(pool["points"][0]["gpus"], 2);
  Json one = Body(WithToken(Token(user_, "metrics"), "GET", "/v1/telemetry",
                            {{"node", "vm"}, {"gpu", "0"}, {"step_s", "600"}}));
  ASSERT_EQ(one["points"].size(), 1u) << one.dump();
  EXPECT_EQ(one["points"][0]["gpus"], 1);
  Json series = Body(AsUid(0, "GET", "/v1/telemetry", {{"job", std::to_string(id)}}));
  EXPECT_FALSE(series["points"].empty());

  // Usage: 3 minutes allocated, used 60% for 2 and 100% for 1 (the first interval of the
  // job's GPU has no predecessor and counts nothing).
  // (The window is [since, until): a second on, so that the last sample, in the minute
  // that starts now, is inside.)
  clock_.AdvanceMicros(1'000'000);
  Json usage = Body(AsUid(0, "GET", "/v1/usage"));
  const Json& row = usage["rows"][0];
  EXPECT_GT(row["used_gpu_hours"].get<double>(), 0);
  EXPECT_LE(row["used_gpu_hours"].get<double>(), row["gpu_hours"].get<double>());
  EXPECT_NEAR(row["used_gpu_hours"].get<double>(), (115 * 0.6 + 60 * 1.0) / 3600, 1e-6);
  EXPECT_NEAR(row["efficiency"].get<double>(),
              row["used_gpu_hours"].get<double>() / row["gpu_hours"].get<double>(), 1e-9);

  // The points reach the store.
  api_->telemetry_service().Flush();
  Result<std::vector<store::TelemetryRecord>> stored = store_->ListTelemetry({});
  ASSERT_TRUE(stored.ok());
  EXPECT_FALSE(stored->empty());
}

TEST_F(ApiTelemetryTest, WhoMayReportAndReadAndBadInput) {
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  const std::string vm2 = Token("vm2", "node");
  EXPECT_EQ(WithToken(vm2, "POST", "/v1/agent/register", {}, RegisterBody("vm2", 1)).status, 200);
  // vm2's token cannot report for vm; people cannot report at all.
  net::HttpResponse r = WithToken(vm2, "POST", "/v1/agent/telemetry", {}, Batch(id, 50, 1));
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(AsUid(user_uid_, "POST", "/v1/agent/telemetry", {}, Batch(id, 50, 1)).status, 403);
  EXPECT_TRUE(api_->telemetry().LatestOfNode("vm").empty());
  // Bad batches name the field.
  r = WithToken(vm, "POST", "/v1/agent/telemetry", {},
                R"({"node": "vm", "samples": [{"index": 0, "at_ms": 1, "util_pct": 250}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("samples[0].util_pct"), std::string::npos) << r.body;
  EXPECT_EQ(WithToken(vm, "POST", "/v1/agent/telemetry", {}, "not json").status, 400);
  // An unregistered node.
  const std::string ghost = Token("ghost", "node");
  EXPECT_EQ(WithToken(ghost, "POST", "/v1/agent/telemetry", {}, R"({"samples": []})").status, 404);

  Report(vm, id, 50, 10);
  // A job's series: its owner (root here) yes, another user no, metrics tokens no.
  EXPECT_EQ(AsUid(user_uid_, "GET", "/v1/telemetry", {{"job", std::to_string(id)}}).status, 403);
  EXPECT_EQ(
      WithToken(Token(user_, "metrics"), "GET", "/v1/telemetry", {{"job", std::to_string(id)}})
          .status,
      403);
  // Bad queries.
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"job", "x"}}).status, 400);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"job", "1"}, {"node", "vm"}}).status, 400);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"gpu", "0"}}).status, 400);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"node", "nope"}}).status, 404);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"step_s", "10"}}).status, 400);
  // From the start of time: from the start of the retention (7 days: 10080 minutes).
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"since_ms", "0"}}).status, 200);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"job", "999"}}).status, 404);
}

// A node reports its own GPUs only, and the jobs holding them now at their given share:
// a free GPU claimed for a job, GPU index 7 of a 2-GPU node and an
// unknown job id are all left out, so a node token cannot charge, idle or bloat anything.
TEST_F(ApiTelemetryTest, ANodeReportsOnlyItsOwnGpusAndTheJobsHoldingThem) {
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);  // on GPU 0
  const std::string job = std::to_string(id);
  for (int s = 0; s < 60; s += 5) {
    clock_.AdvanceMicros(5'000'000);
    const std::string at = std::to_string(clock_.NowMicros() / 1000);
    net::HttpResponse r =
        WithToken(vm, "POST", "/v1/agent/telemetry", {},
                  R"({"node": "vm", "samples": [)"
                  R"({"index": 0, "at_ms": )" +
                      at + R"(, "util_pct": 0, "jobs": [{"job_id": )" + job +
                      R"(}, {"job_id": 999}]},)"
                      R"({"index": 1, "at_ms": )" +
                      at + R"(, "util_pct": 100, "jobs": [{"job_id": )" + job +
                      R"(, "gpu_milli": 1000}]},)"
                      R"({"index": 7, "at_ms": )" +
                      at + R"(, "util_pct": 100, "jobs": [{"job_id": )" + job + R"(}]}]})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Body(r)["accepted"], 2);  // GPU 7 is not vm's
  }
  const std::optional<JobGpuUtil> u = api_->telemetry().Job(id);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->peak_pct, 0);  // only GPU 0's samples count for the job
  EXPECT_EQ(u->used_gpu_hours, 0);
  EXPECT_FALSE(api_->telemetry().Job(999).has_value());
  EXPECT_EQ(api_->telemetry().LatestOfNode("vm").count(7), 0u);
}

TEST_F(ApiTelemetryTest, SeriesReachingPastTheMemoryWindowComeFromTheStore) {
  TelemetryOptions o;
  o.memory_window_s = 600;
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  const int64_t start_ms = clock_.NowMicros() / 1000;
  Report(vm, id, 60, 20 * 60);
  Report(vm, id, 90, 10 * 60);
  api_->telemetry_service().Flush();
  // Memory holds the last ten minutes (and one) of the 30.
  EXPECT_LE(api_->telemetry().Size().job_points, 11u);
  EXPECT_LE(api_->telemetry().Size().gpu_points, 2u * 11);

  auto Series = [&](std::map<std::string, std::string> q) {
    q["since_ms"] = std::to_string(start_ms);
    net::HttpResponse r = AsUid(0, "GET", "/v1/telemetry", q);
    EXPECT_EQ(r.status, 200) << r.body;
    return Body(r)["points"];
  };
  const Json job = Series({{"job", std::to_string(id)}});
  ASSERT_GE(job.size(), 30u) << job.dump();
  EXPECT_EQ(job[0]["util_pct"], 60);  // from the store
  EXPECT_EQ(job[job.size() - 1]["util_pct"], 90);
  const Json job10 = Series({{"job", std::to_string(id)}, {"step_s", "600"}});
  ASSERT_GE(job10.size(), 3u) << job10.dump();
  ASSERT_LE(job10.size(), 4u) << job10.dump();
  EXPECT_EQ(job10[0]["util_pct"], 60);  // merged by the store
  EXPECT_EQ(job10[job10.size() - 1]["util_pct"], 90);
  const Json gpu0 = Series({{"node", "vm"}, {"gpu", "0"}});
  EXPECT_EQ(gpu0.size(), job.size());
  const Json node = Series({{"node", "vm"}});
  ASSERT_EQ(node.size(), job.size());
  EXPECT_EQ(node[0]["gpus"], 2);
  EXPECT_EQ(node[0]["util_pct"], 30);  // GPU 0 at 60%, GPU 1 at 0%
  const Json pool = Series({});
  EXPECT_EQ(pool.size(), job.size());
  const Json before = Body(AsUid(0, "GET", "/v1/jobs/" + std::to_string(id)))["job"]["gpu_util"];
  EXPECT_NEAR(before["mean_pct"].get<double>(), 70, 0.5);
  const double used_before = Body(AsUid(0, "GET", "/v1/usage"))["rows"][0]["used_gpu_hours"];
  EXPECT_NEAR(used_before, (20 * 60 * 0.6 + 10 * 60 * 0.9) / 3600, 0.01);

  // A restarted controller reads its figures back from the store.
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  const Json after = Body(AsUid(0, "GET", "/v1/jobs/" + std::to_string(id)))["job"]["gpu_util"];
  EXPECT_NEAR(after["mean_pct"].get<double>(), before["mean_pct"].get<double>(), 1e-9);
  EXPECT_EQ(after["peak_pct"], before["peak_pct"]);
  EXPECT_NEAR(after["used_gpu_hours"].get<double>(), before["used_gpu_hours"].get<double>(), 1e-9);
  EXPECT_EQ(Series({{"job", std::to_string(id)}}), job);
  EXPECT_EQ(Series({}), pool);
  EXPECT_NEAR(Body(AsUid(0, "GET", "/v1/usage"))["rows"][0]["used_gpu_hours"].get<double>(),
              used_before, 1e-9);
}

// DCGM_FI_DEV_XID_ERRORS is the last Xid a GPU reported, as dcgm-exporter has it, and the
// uncorrected ECC count is DCGM_FI_DEV_ECC_DBE_VOL_TOTAL; GET /v1/nodes shows both and
// the Xid count. A GPU whose source has no Xid figures has no series.
TEST_F(ApiTelemetryTest, MetricsShowTheLastXidAndTheEccCountApart) {
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);  // on GPU 0
  auto report = [&](const std::string& gpu0_figures) {
    clock_.AdvanceMicros(5'000'000);
    const std::string at = std::to_string(clock_.NowMicros() / 1000);
    net::HttpResponse r =
        WithToken(vm, "POST", "/v1/agent/telemetry", {},
                  R"({"node": "vm", "samples": [{"index": 0, "at_ms": )" + at + ", " +
                      gpu0_figures + R"(, "jobs": [{"job_id": )" + std::to_string(id) +
                      R"(}]}, {"index": 1, "at_ms": )" + at + R"(, "util_pct": 0}]})");
    ASSERT_EQ(r.status, 200) << r.body;
  };
  // The value of the series of `name` for vm's GPU `gpu` (-1: none).
  auto series = [](const std::string& text, const std::string& name, int gpu) {
    const std::string start = name + "{gpu=\"" + std::to_string(gpu) + "\",";
    for (const std::string& line : Split(text, '\n')) {
      if (line.rfind(start, 0) == 0 && line.find("Hostname=\"vm\"") != std::string::npos) {
        return std::stod(line.substr(line.rfind(' ') + 1));
      }
    }
    return -1.0;
  };
  report(R"("util_pct": 90, "xid_errors": 0, "xid_count": 0, "ecc_uncorrected": 2)");
  std::string m = AsUid(0, "GET", "/metrics").body;
  EXPECT_EQ(series(m, "DCGM_FI_DEV_XID_ERRORS", 0), 0) << m;
  EXPECT_EQ(series(m, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0), 2) << m;
  report(R"("util_pct": 90, "xid_errors": 79, "xid_count": 1, "ecc_uncorrected": 2)");
  m = AsUid(0, "GET", "/metrics").body;
  EXPECT_EQ(series(m, "DCGM_FI_DEV_XID_ERRORS", 0), 79) << m;
  EXPECT_EQ(series(m, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0), 2) << m;
  EXPECT_EQ(series(m, "DCGM_FI_DEV_XID_ERRORS", 1), -1) << m;  // GPU 1 sent none
  EXPECT_NE(m.find("# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered"),
            std::string::npos);
  EXPECT_NE(m.find("# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"), std::string::npos);
  EXPECT_NE(m.find("# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n"), std::string::npos);
  // The job's labels, as on the other DCGM series.
  EXPECT_NE(m.find("DCGM_FI_DEV_XID_ERRORS{gpu=\"0\",UUID=\""), std::string::npos) << m;
  EXPECT_NE(m.find(",hpc_job=\"" + std::to_string(id) + "\",user=\"root\"} 79\n"),
            std::string::npos)
      << m;

  Json nodes = Body(AsUid(user_uid_, "GET", "/v1/nodes"));
  const Json& t = nodes["nodes"][0]["gpus"][0]["telemetry"];
  EXPECT_EQ(t["xid_errors"], 79) << nodes.dump();
  EXPECT_EQ(t["xid_count"], 1);
  EXPECT_EQ(t["ecc_uncorrected"], 2);
  EXPECT_FALSE(t.contains("retired_pages")) << t.dump();  // the agent sent no such reading

  // The hardware health readings (docs/health.md, the threshold rows' inputs) as the
  // agent sent them, for an admin to see what a threshold acts on.
  report(R"("util_pct": 90, "retired_pages": 3, "retired_pages_pending": true,
            "remapped_rows": 0, "remapped_rows_failed": false, "hw_slowdown": true)");
  nodes = Body(AsUid(user_uid_, "GET", "/v1/nodes"));
  const Json& hw = nodes["nodes"][0]["gpus"][0]["telemetry"];
  EXPECT_EQ(hw["retired_pages"], 3) << hw.dump();
  EXPECT_EQ(hw["retired_pages_pending"], true);
  EXPECT_EQ(hw["remapped_rows"], 0);
  EXPECT_EQ(hw["remapped_rows_failed"], false);
  EXPECT_EQ(hw["hw_slowdown"], true);
  EXPECT_FALSE(hw.contains("remapped_rows_pending"));
  EXPECT_FALSE(nodes["nodes"][0]["gpus"][1]["telemetry"].contains("xid_count"));
}

// The DCGM series' hpc_job names an array's element as its user does, ARRAY_INDEX, not by
// its store id.
TEST_F(ApiTelemetryTest, MetricsNameAnArrayElementHoldingAGpuByItsArrayAndIndex) {
  std::string array;
  int64_t id = 0;
  SampleArrayElement(&array, &id);
  if (HasFatalFailure()) return;
  const std::string m = AsUid(0, "GET", "/metrics").body;
  EXPECT_NE(m.find(",hpc_job=\"" + array + "_1\",user=\"root\"} 42\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("hpc_job=\"" + std::to_string(id) + "\""), std::string::npos) << m;
}

// ?job= takes an array's element as ARRAY_INDEX, as the job routes do, and the answer
// names it so beside its store id.
TEST_F(ApiTelemetryTest, AJobSeriesTakesAndNamesAnArrayElementByItsArrayAndIndex) {
  std::string array;
  int64_t id = 0;
  SampleArrayElement(&array, &id);
  if (HasFatalFailure()) return;
  for (const std::string& ref : {array + "_1", std::to_string(id)}) {
    net::HttpResponse series = AsUid(0, "GET", "/v1/telemetry", {{"job", ref}});
    ASSERT_EQ(series.status, 200) << ref << ": " << series.body;
    const Json s = Body(series);
    EXPECT_EQ(s["job"], id) << s.dump();
    EXPECT_EQ(s.value("job_name", ""), array + "_1") << s.dump();
    ASSERT_EQ(s["points"].size(), 1u) << s.dump();
    EXPECT_EQ(s["points"][0]["util_pct"], 42) << s.dump();
  }
  net::HttpResponse s = AsUid(0, "GET", "/v1/telemetry", {{"job", array}});  // the array's first
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(Body(s).value("job_name", ""), array + "_0") << s.body;
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"job", array + "_7"}}).status, 404);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"job", array + "_x"}}).status, 400);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"job", "0"}}).status, 400);
}

TEST_F(ApiTelemetryTest, TheIdlePolicyWarnsThenCancelsIdleJobs) {
  const TelemetryOptions o = CancelAfterFifteenIdleMinutes();
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  EXPECT_FALSE(api_->ConfigureTelemetry(TelemetryOptions{.idle_action = "kill"}).ok());
  // A longer retention: a query for all of it in minutes asks too much.
  ASSERT_TRUE(api_->ConfigureTelemetry(TelemetryOptions{.retention_s = 30 * 86400}).ok());
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"since_ms", "0"}}).status, 400);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"since_ms", "0"}, {"step_s", "300"}}).status, 200);
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  const std::string path = "/v1/jobs/" + std::to_string(id);
  Report(vm, id, 2, 9 * 60);  // idle 9 minutes: not yet
  EXPECT_EQ(Body(AsUid(0, "GET", path))["job"]["gpu_util"]["idle"], false);
  Report(vm, id, 2, 2 * 60);  // 11 minutes: idle, warned, not cancelled
  Json job = Body(AsUid(0, "GET", path));
  EXPECT_EQ(job["job"]["gpu_util"]["idle"], true);
  EXPECT_EQ(job["job"]["state"], "RUNNING");
  EXPECT_GT(job["job"]["gpu_util"]["idle_since_ms"].get<int64_t>(), 0);
  Report(vm, id, 2, 5 * 60);  // 16 minutes: past idle_after + idle_cancel_after
  job = Body(AsUid(0, "GET", path));
  EXPECT_TRUE(job["job"]["cancel_requested"].get<bool>()) << job.dump();
  EXPECT_NE(job["job"]["reason"].get<std::string>().find("the idle policy"), std::string::npos)
      << job.dump();
}

TEST_F(ApiTelemetryTest, TheWarnPolicyWarnsAndLeavesTheJobRunning) {
  TelemetryOptions o;
  o.idle_action = "warn";
  o.idle_after_s = 300;
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  const std::string path = "/v1/jobs/" + std::to_string(id);
  Report(vm, id, 1, 4 * 60);
  EXPECT_FALSE(Body(AsUid(0, "GET", path))["job"]["gpu_util"].contains("warning"));
  Report(vm, id, 1, 3 * 60);
  Json job = Body(AsUid(0, "GET", path));
  EXPECT_EQ(job["job"]["gpu_util"]["idle"], true);
  EXPECT_NE(job["job"]["gpu_util"]["warning"].get<std::string>().find("below 5%"),
            std::string::npos);
  Report(vm, id, 1, 30 * 60);
  job = Body(AsUid(0, "GET", path));
  EXPECT_EQ(job["job"]["state"], "RUNNING");
  EXPECT_FALSE(job["job"]["cancel_requested"].get<bool>());
  // Busy again: no longer idle.
  Report(vm, id, 60, 10);
  EXPECT_EQ(Body(AsUid(0, "GET", path))["job"]["gpu_util"]["idle"], false);
}

// Issue 27: the idle policy and the store writes run on the telemetry service's own
// thread, not on the agent's request: a report only hands samples over and wakes the
// thread, and the writes also come every TelemetryService::kFlushPeriodUs of the clock.
// Under the ManualClock nothing here sleeps.
TEST_F(ApiTelemetryTest, TheServiceThreadAppliesThePolicyAndWritesOnItsClock) {
  const TelemetryOptions o = CancelAfterFifteenIdleMinutes();
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  const std::string path = "/v1/jobs/" + std::to_string(id);
  Report(vm, id, 2, 16 * 60, /*run_service=*/false);
  // The requests alone cancelled nothing and wrote nothing.
  EXPECT_FALSE(Body(AsUid(0, "GET", path))["job"]["cancel_requested"].get<bool>());
  EXPECT_TRUE(store_->ListTelemetry({})->empty());

  api_->Start();
  const PeriodicThread& worker = api_->telemetry_service().worker();
  ASSERT_TRUE(worker.WaitForRuns(1));  // the reports' wake-up
  EXPECT_TRUE(Body(AsUid(0, "GET", path))["job"]["cancel_requested"].get<bool>());
  EXPECT_FALSE(store_->ListTelemetry({})->empty());

  // A report within the period is kept in memory; the period's end writes it.
  int64_t minute = 0;  // of the report below
  auto stored_now = [&] {
    Result<std::vector<store::TelemetryRecord>> stored = store_->ListTelemetry({});
    if (!stored.ok()) return false;
    for (const store::TelemetryRecord& t : *stored) {
      if (t.scope == "gpu" && t.t_ms == minute) return true;
    }
    return false;
  };
  clock_.AdvanceMicros(TelemetryService::kFlushPeriodUs);  // a run on the clock
  ASSERT_TRUE(worker.WaitForRuns(2));
  clock_.AdvanceMicros(60'000'000);  // a minute with no points yet
  ASSERT_TRUE(worker.WaitForRuns(3));
  minute = clock_.NowMicros() / 1000 / 60'000 * 60'000;
  ASSERT_EQ(
      WithToken(vm, "POST", "/v1/agent/telemetry", {}, Batch(id, 50, clock_.NowMicros() / 1000))
          .status,
      200);
  ASSERT_TRUE(worker.WaitForRuns(4));  // its wake-up: the policy, but no write yet
  EXPECT_FALSE(stored_now());
  clock_.AdvanceMicros(TelemetryService::kFlushPeriodUs);
  ASSERT_TRUE(worker.WaitForRuns(5));
  EXPECT_TRUE(stored_now());
  api_->Stop();
}

// The accounting for GET /metrics folds the telemetry's used GPU-seconds in on its own
// thread every PoolAccounting::kFoldPeriodUs, so the hub hands them over even when nobody
// scrapes, and a scrape still counts them.
TEST_F(ApiTelemetryTest, TheAccountingTakesTheUsedSecondsOnItsClock) {
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  Report(vm, id, 100, 60);
  api_->Start();
  const PeriodicThread& worker = api_->accounting().worker();
  ASSERT_TRUE(clock_.WaitForWaiters(2));  // both services wait on the clock
  clock_.AdvanceMicros(PoolAccounting::kFoldPeriodUs);
  ASSERT_TRUE(worker.WaitForRuns(1));
  EXPECT_TRUE(api_->telemetry().TakeUsedGpuSeconds().empty());  // handed over
  const std::string m = AsUid(0, "GET", "/metrics").body;
  const std::string line = "gpupool_used_gpu_seconds_total{user=\"root\",project=\"(none)\"} ";
  const size_t at = m.find(line);
  ASSERT_NE(at, std::string::npos) << m;
  EXPECT_NEAR(std::stod(m.substr(at + line.size())), 55, 1e-6);  // 55 s at 100%
  api_->Stop();
}

}  // namespace
}  // namespace gpupool::controller::api_test

namespace gpupool::controller::api_test {
namespace {

// Fair share by project (the server's --fair-by project; docs/deploy.md, "Fair share"):
// GET /v1/usage says what fair share divides between, and groups by it unless asked.
TEST_F(ApiAccessTest, UsageGroupsByTheFairShareGroupsUnlessAsked) {
  Json usage = ParseJson(AsUid(0, "GET", "/v1/usage").body, "answer").value();
  EXPECT_EQ(usage["by"], "user");
  EXPECT_EQ(usage["fair_share_by"], "user");
  ControllerOptions options;
  options.fair_by = sched::FairShareGroup::kProject;
  Restart(options);
  usage = ParseJson(AsUid(0, "GET", "/v1/usage").body, "answer").value();
  EXPECT_EQ(usage["by"], "project");
  EXPECT_EQ(usage["fair_share_by"], "project");
  usage = ParseJson(AsUid(0, "GET", "/v1/usage", {{"by", "user"}}).body, "answer").value();
  EXPECT_EQ(usage["by"], "user");
  EXPECT_EQ(usage["fair_share_by"], "project");
}

// A job of `user` (uid `uid`) that ended an hour before `now_us` after an hour on GPU 0
// of vm: one GPU-hour for usage.
jobs::Job HourOnOneGpuOf(const std::string& user, int64_t uid, const std::string& project,
                         int64_t now_us) {
  jobs::Job j;
  j.user = user;
  j.uid = uid;
  j.project = project;
  j.command = {"true"};
  j.request.gpus = 1;
  j.state = jobs::JobState::kSucceeded;
  j.submit_time_us = now_us - 7'200'000'000;
  j.start_time_us = now_us - 7'200'000'000;
  j.end_time_us = now_us - 3'600'000'000;
  j.placement = {jobs::TaskPlacement{"vm", {0}, {"GPU-0"}, 1000}};
  return j;
}

// Fair-share weights (the limits' fair_share): GET /v1/usage gives each row of the pool's
// fair-share groups its weight and normalised share (sshare's RawShares, NormShares): its
// weight over the sum of the weights of every group that held GPUs in the window. A user
// who sees only their own row gets the same share as an admin does; rows grouped otherwise
// than fair share (?by=project under fair share by user) get neither.
TEST_F(ApiAccessTest, UsageGivesTheFairShareGroupsWeightsAndNormalisedShares) {
  const int64_t now = clock_.NowMicros();
  for (const std::string& user : {std::string("alice"), std::string("bob"), user_}) {
    ASSERT_TRUE(
        store_->InsertJob(HourOnOneGpuOf(user, user == user_ ? user_uid_ : 5000, "", now)).ok());
  }
  Limits limits;
  limits.users["alice"].fair_share = 2;
  limits.users["carol"].fair_share = 5;  // no usage in the window: not counted
  ASSERT_TRUE(controller_->SetLimits(limits, Caller{"root", 0, 0, true}).ok());
  Json usage = ParseJson(AsUid(0, "GET", "/v1/usage").body, "answer").value();
  std::map<std::string, std::pair<double, double>> shares;
  for (const Json& row : usage["rows"]) {
    shares[row["key"]] = {row["fair_share"].get<double>(), row["norm_share"].get<double>()};
  }
  EXPECT_EQ(shares, (std::map<std::string, std::pair<double, double>>{
                        {"alice", {2, 0.5}}, {"bob", {1, 0.25}}, {user_, {1, 0.25}}}))
      << usage.dump();
  usage = ParseJson(AsUid(user_uid_, "GET", "/v1/usage").body, "answer").value();
  ASSERT_EQ(usage["rows"].size(), 1u) << usage.dump();
  EXPECT_EQ(usage["rows"][0]["key"], user_);
  EXPECT_EQ(usage["rows"][0]["fair_share"], 1.0);
  EXPECT_EQ(usage["rows"][0]["norm_share"], 0.25);
  usage = ParseJson(AsUid(0, "GET", "/v1/usage", {{"by", "project"}}).body, "answer").value();
  ASSERT_EQ(usage["rows"].size(), 3u) << usage.dump();  // each user's own group
  for (const Json& row : usage["rows"]) EXPECT_FALSE(row.contains("norm_share")) << row.dump();
  // ?shares=0 leaves them out (the dashboard's per-day calls, which sum GPU-hours only).
  usage = ParseJson(AsUid(user_uid_, "GET", "/v1/usage", {{"shares", "0"}}).body, "answer").value();
  ASSERT_EQ(usage["rows"].size(), 1u) << usage.dump();
  EXPECT_FALSE(usage["rows"][0].contains("fair_share")) << usage.dump();
  EXPECT_EQ(AsUid(0, "GET", "/v1/usage", {{"shares", "yes"}}).status, 400);
}

// Under fair share by project, a job without a project is in its user's own group, named
// after the user, as limits and fair share count it: one row per user (own_group), with its
// weight and normalised share, not one "(none)" row for all; a project named after a user
// is the same group (bob's job charging "alice" lands in alice's row).
TEST_F(ApiAccessTest, UsageByProjectCountsJobsWithoutOneInTheirUsersOwnGroup) {
  ControllerOptions options;
  options.fair_by = sched::FairShareGroup::kProject;
  Restart(options);
  const int64_t now = clock_.NowMicros();
  const std::vector<std::pair<std::string, std::string>> owners = {
      {"alice", ""}, {"bob", ""}, {"bob", "alice"}, {user_, "vision"}};
  for (const auto& [user, project] : owners) {
    ASSERT_TRUE(
        store_->InsertJob(HourOnOneGpuOf(user, user == user_ ? user_uid_ : 5000, project, now))
            .ok());
  }
  Limits limits;
  limits.projects["alice"].fair_share = 2;
  ASSERT_TRUE(controller_->SetLimits(limits, Caller{"root", 0, 0, true}).ok());
  Json usage = ParseJson(AsUid(0, "GET", "/v1/usage").body, "answer").value();
  ASSERT_EQ(usage["by"], "project");
  // key -> (jobs, own_group, fair_share, norm_share)
  std::map<std::string, std::tuple<int, bool, double, double>> rows;
  for (const Json& row : usage["rows"]) {
    rows[row["key"]] = {row["jobs"].get<int>(), row.value("own_group", false),
                        row["fair_share"].get<double>(), row["norm_share"].get<double>()};
  }
  EXPECT_EQ(rows, (std::map<std::string, std::tuple<int, bool, double, double>>{
                      {"alice", {2, true, 2, 0.5}},
                      {"bob", {1, true, 1, 0.25}},
                      {"vision", {1, false, 1, 0.25}}}))
      << usage.dump();
  // A user sees their own rows, with the share an admin sees.
  usage = ParseJson(AsUid(user_uid_, "GET", "/v1/usage").body, "answer").value();
  ASSERT_EQ(usage["rows"].size(), 1u) << usage.dump();
  EXPECT_EQ(usage["rows"][0]["key"], "vision");
  EXPECT_FALSE(usage["rows"][0].contains("own_group")) << usage.dump();
  EXPECT_EQ(usage["rows"][0]["norm_share"], 0.25);
  // By user, no row is a group of jobs without a project.
  usage = ParseJson(AsUid(0, "GET", "/v1/usage", {{"by", "user"}}).body, "answer").value();
  for (const Json& row : usage["rows"]) EXPECT_FALSE(row.contains("own_group")) << row.dump();
}

}  // namespace
}  // namespace gpupool::controller::api_test
