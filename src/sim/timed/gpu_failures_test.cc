#include "sim/timed/gpu_failures.h"

#include <gtest/gtest.h>

#include <map>

#include "common/json.h"
#include "sim/timed/cluster_spec.h"
#include "sim/timed/timed_experiment.h"
#include "sim/timed/timed_metrics.h"
#include "sim/timed/timed_report.h"
#include "sim/timed/timed_test_util.h"

namespace gpupool::sim {
namespace failures_test {

using testing::Cluster;
using testing::FirstFitRegistry;
using testing::TJob;

// FIFO, strict, first fit in node order: placements are predictable.
TimedOptions Options(std::vector<GpuFailureEvent> events, int64_t repair_s = 5000) {
  TimedOptions o;
  o.placement_policy = "first-fit";
  o.placement_registry = &FirstFitRegistry();
  o.shuffle_nodes = false;
  o.gpu_failures.events = std::move(events);
  o.gpu_failures.repair_s = repair_s;
  return o;
}

std::map<std::string, JobRecord> ById(const TimedRun& run) {
  std::map<std::string, JobRecord> m;
  for (const JobRecord& j : run.jobs) m[j.id] = j;
  return m;
}

// On 1x4: a on GPU 0, b on GPU 1, c on GPUs 2 and 3, all from 0 to 1000.
std::vector<TraceJob> ThreeJobsOnOneNode() {
  return {TJob("a", "u", 0, 1000, 1), TJob("b", "u", 0, 1000, 1), TJob("c", "u", 0, 1000, 2)};
}

TEST(GpuFailures, CordonGpuKillsExactlyTheJobsOnThatGpuAndNothingLandsThereUntilRepair) {
  std::vector<TraceJob> jobs = ThreeJobsOnOneNode();
  jobs.push_back(TJob("d", "u", 200, 10, 1));  // fits at 200 only on the cordoned GPU 1
  jobs.push_back(TJob("e", "u", 300, 10, 4));  // needs GPU 1 back
  // Xid 95 (uncontained ECC error) is cordon-gpu in the policy's table.
  auto run = RunTimedExperiment(Cluster("1x4"), jobs, Options({{100, "node-0000", 1, 95, ""}}));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto j = ById(*run);
  EXPECT_EQ(j["b"].fate, JobFate::kGpuFailed);
  EXPECT_EQ(j["b"].end_s, 100);
  EXPECT_NE(j["b"].reason.find("GPU 1 on node node-0000 failed: Xid 95"), std::string::npos)
      << j["b"].reason;
  EXPECT_EQ(j["a"].fate, JobFate::kFinished);
  EXPECT_EQ(j["a"].end_s, 1000);
  EXPECT_EQ(j["c"].fate, JobFate::kFinished);
  EXPECT_EQ(j["c"].end_s, 1000);
  EXPECT_EQ(j["d"].start_s, 1000);  // not at 200 on GPU 1
  EXPECT_EQ(j["e"].start_s, 5100);  // GPU 1 is back 5000 s after it failed
  EXPECT_EQ(run->gpu_failure_events, (std::map<std::string, size_t>{{"cordon-gpu", 1}}));
  EXPECT_EQ(run->failed_jobs_by_gpu_failure, 1u);
  EXPECT_EQ(run->requeues_by_gpu_failure, 0u);
  EXPECT_DOUBLE_EQ(run->gpu_failure_lost_gpu_s, 100.0);  // b's 100 s on one GPU
  EXPECT_DOUBLE_EQ(run->out_of_service_gpu_s, 5000.0);
  // The allocation never counts the held GPU as work.
  for (const AllocationPoint& p : run->timeline) EXPECT_LE(p.gpu_milli_used, 4000);
  TimedSummary s = Summarize(*run, sched::FairShareGroup::kUser);
  EXPECT_EQ(s.gpu_failed, 1u);
  OrderedJson json = TimedReportJson({}, *run, s);
  EXPECT_EQ(json["gpu_failures"]["cordon-gpu"], 1);
  EXPECT_EQ(json["failed_jobs_by_gpu_failure"], 1);
  EXPECT_DOUBLE_EQ(json["gpu_hours_out_of_service"].get<double>(), 1.389);
  const std::string text = TimedReportText({}, *run, s);
  EXPECT_NE(text.find("GPU failures 1 Xids (cordon-gpu 1): 1 jobs failed, 0 requeued"),
            std::string::npos)
      << text;
}

TEST(GpuFailures, ACordonedJobRequeuesWithTheSwitchOrItsOwnFlagAndKeepsItsCheckpoint) {
  for (bool by_flag : {false, true}) {
    std::vector<TraceJob> jobs = ThreeJobsOnOneNode();
    TimedOptions o = Options({{100, "node-0000", 1, 95, ""}});
    if (by_flag) {
      jobs[1].requeue = true;
    } else {
      o.gpu_failures.requeue = true;
    }
    o.checkpoint_interval_s = 60;
    auto run = RunTimedExperiment(Cluster("1x4"), jobs, o);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    auto j = ById(*run);
    EXPECT_EQ(j["b"].fate, JobFate::kFinished) << by_flag;
    // Back in the queue at 100; a GPU frees at 1000; 940 s were left after the checkpoint.
    EXPECT_EQ(j["b"].end_s, 1940) << by_flag;
    EXPECT_EQ(j["b"].lost_s, 40);
    EXPECT_EQ(j["b"].gpu_failures, 1);
    EXPECT_EQ(run->requeues_by_gpu_failure, 1u);
    EXPECT_EQ(run->failed_jobs_by_gpu_failure, 0u);
    EXPECT_DOUBLE_EQ(run->gpu_failure_lost_gpu_s, 40.0);
  }
}

TEST(GpuFailures, AnApplicationXidFailsOnlyItsJobAndTheGpuStaysInService) {
  std::vector<TraceJob> jobs = ThreeJobsOnOneNode();
  jobs.push_back(TJob("d", "u", 200, 10, 1));
  TimedOptions o = Options({{100, "node-0000", 1, 13, ""}});
  o.gpu_failures.requeue = true;  // an application's own failure is not requeued
  auto run = RunTimedExperiment(Cluster("1x4"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto j = ById(*run);
  EXPECT_EQ(j["b"].fate, JobFate::kGpuFailed);
  EXPECT_EQ(j["b"].end_s, 100);
  EXPECT_EQ(j["a"].fate, JobFate::kFinished);
  EXPECT_EQ(j["c"].fate, JobFate::kFinished);
  EXPECT_EQ(j["d"].start_s, 200);  // on GPU 1, still in service
  EXPECT_EQ(run->gpu_failure_events, (std::map<std::string, size_t>{{"application", 1}}));
  EXPECT_EQ(run->requeues_by_gpu_failure, 0u);
  EXPECT_DOUBLE_EQ(run->out_of_service_gpu_s, 0.0);
}

TEST(GpuFailures, ThreeApplicationXidsWithinAnHourCordonTheGpu) {
  // The policy's repeat rule: the third cordons GPU 0 (no job there to fail by then).
  std::vector<TraceJob> jobs = {TJob("a", "u", 0, 10, 1), TJob("big", "u", 500, 10, 4)};
  auto run = RunTimedExperiment(Cluster("1x4"), jobs,
                                Options({{100, "node-0000", 0, 13, ""},
                                         {200, "node-0000", 0, 31, ""},
                                         {300, "node-0000", 0, 43, ""}},
                                        1000));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(ById(*run)["big"].start_s, 1300);
  EXPECT_DOUBLE_EQ(run->out_of_service_gpu_s, 1000.0);
}

TEST(GpuFailures, CordonNodeDrainsTheNodeAndEndsOnlyTheFailedGpusJob) {
  std::vector<TraceJob> jobs = {TJob("a1", "u", 0, 1000, 2),     // node-0000 GPUs 0,1
                                TJob("a2", "u", 0, 1000, 2),     // node-0000 GPUs 2,3
                                TJob("b", "u", 0, 1000, 4),      // node-0001
                                TJob("c", "u", 200, 10, 1),      // would land on node-0000 at 200
                                TJob("e", "u", 300, 10, 4, 2)};  // a gang on both nodes
  // Xid 79 (fallen off the bus) is cordon-node.
  auto run =
      RunTimedExperiment(Cluster("2x4"), jobs, Options({{100, "node-0000", 2, 79, ""}}, 3000));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto j = ById(*run);
  EXPECT_EQ(j["a2"].fate, JobFate::kGpuFailed);
  EXPECT_EQ(j["a1"].fate, JobFate::kFinished);  // a drain lets running jobs finish
  EXPECT_EQ(j["a1"].end_s, 1000);
  EXPECT_EQ(j["c"].start_s, 1000);  // on node-0001 once b is done
  EXPECT_EQ(j["e"].start_s, 3100);  // node-0000 is back 3000 s after the Xid
  EXPECT_EQ(run->gpu_failure_events, (std::map<std::string, size_t>{{"cordon-node", 1}}));
  EXPECT_DOUBLE_EQ(run->out_of_service_gpu_s, 4 * 3000.0);
}

std::vector<TraceJob> ManyJobs() {
  std::vector<TraceJob> jobs;
  for (int i = 0; i < 300; ++i) {
    jobs.push_back(TJob("j" + std::to_string(i), "u" + std::to_string(i % 5), i * 120,
                        600 + (i * 7919) % 20000, 1 << (i % 4), 1, 40000));
  }
  return jobs;
}

std::string DrawnRunJson(uint64_t seed) {
  TimedOptions o = Options({}, 7200);
  o.gpu_failures.rate_per_gpu_day = 0.5;
  o.gpu_failures.seed = seed;
  o.gpu_failures.requeue = true;
  o.start_rule = sched::StartRule::kEasyBackfill;
  auto run = RunTimedExperiment(Cluster("4x8"), ManyJobs(), o);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  if (!run.ok()) return "";
  EXPECT_GT(run->gpu_failure_events.size(), 1u);
  return DumpJson(TimedReportJson({}, *run, Summarize(*run, sched::FairShareGroup::kUser)), 2) +
         JobsCsv(*run);
}

TEST(GpuFailures, DrawnFailuresAreTheSameForASeedAndDifferForAnother) {
  const std::string first = DrawnRunJson(7);
  EXPECT_NE(first.find("\"gpu_failures\""), std::string::npos);
  EXPECT_EQ(first, DrawnRunJson(7));
  EXPECT_NE(first, DrawnRunJson(8));
}

TEST(GpuFailures, EventsCsvParsesAndBadRowsNameTheLineAndField) {
  auto ok = ParseGpuFailureEvents("xid,time_s,node,gpu\n95,100,node-0001,3\n", "ev.csv");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].time_s, 100);
  EXPECT_EQ((*ok)[0].node, "node-0001");
  EXPECT_EQ((*ok)[0].gpu, 3);
  EXPECT_EQ((*ok)[0].xid, 95);
  EXPECT_EQ((*ok)[0].where, "ev.csv:2");

  auto bad_gpu = ParseGpuFailureEvents("time_s,node,gpu,xid\n1,n,0,95\n2,n,x,95\n", "ev.csv");
  ASSERT_FALSE(bad_gpu.ok());
  EXPECT_NE(bad_gpu.status().message().find("ev.csv:3"), std::string::npos)
      << bad_gpu.status().message();
  EXPECT_NE(bad_gpu.status().message().find("gpu"), std::string::npos);

  auto short_row = ParseGpuFailureEvents("time_s,node,gpu,xid\n1,n,0\n", "ev.csv");
  ASSERT_FALSE(short_row.ok());
  EXPECT_NE(short_row.status().message().find("ev.csv:2"), std::string::npos)
      << short_row.status().message();

  auto negative = ParseGpuFailureEvents("time_s,node,gpu,xid\n-5,n,0,95\n", "ev.csv");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("time_s"), std::string::npos);

  auto extra = ParseGpuFailureEvents("time_s,node,gpu,xid,when\n1,n,0,95,x\n", "ev.csv");
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.status().message().find("unknown column 'when'"), std::string::npos);

  auto missing = ParseGpuFailureEvents("time_s,node,gpu\n1,n,0\n", "ev.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("xid"), std::string::npos);
}

TEST(GpuFailures, AnUnknownNodeOrGpuStopsTheRunNamingTheEvent) {
  auto events = ParseGpuFailureEvents("time_s,node,gpu,xid\n10,node-0007,0,95\n", "ev.csv");
  ASSERT_TRUE(events.ok());
  auto run = RunTimedExperiment(Cluster("1x4"), ThreeJobsOnOneNode(), Options(*events));
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("ev.csv:2: field 'node': unknown node 'node-0007'"),
            std::string::npos)
      << run.status().message();

  auto gpu = RunTimedExperiment(Cluster("1x4"), ThreeJobsOnOneNode(),
                                Options({{10, "node-0000", 4, 95, ""}}));
  ASSERT_FALSE(gpu.ok());
  EXPECT_NE(gpu.status().message().find("field 'gpu': node node-0000 has no GPU 4"),
            std::string::npos)
      << gpu.status().message();

  TimedOptions bad_xid = Options({{10, "node-0000", 0, 95, ""}});
  bad_xid.gpu_failures.health_xid = "95:explode";
  auto policy = RunTimedExperiment(Cluster("1x4"), ThreeJobsOnOneNode(), bad_xid);
  ASSERT_FALSE(policy.ok());
  EXPECT_NE(policy.status().message().find("95:explode"), std::string::npos);
}

TEST(GpuFailures, HealthXidOverridesApplyAsOnTheServer) {
  // 95 made harmless: b runs on.
  TimedOptions o = Options({{100, "node-0000", 1, 95, ""}});
  o.gpu_failures.health_xid = "95:ignore";
  auto run = RunTimedExperiment(Cluster("1x4"), ThreeJobsOnOneNode(), o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(ById(*run)["b"].fate, JobFate::kFinished);
  EXPECT_EQ(run->gpu_failure_events, (std::map<std::string, size_t>{{"ignore", 1}}));
}

TEST(GpuFailures, XidMixParsesAndRefusesBadEntries) {
  auto mix = ParseXidMix("79:1, 13:2.5");
  ASSERT_TRUE(mix.ok());
  ASSERT_EQ(mix->size(), 2u);
  EXPECT_EQ((*mix)[1].xid, 13);
  EXPECT_DOUBLE_EQ((*mix)[1].weight, 2.5);
  for (const char* bad : {"79", "79:0", "x:1", "79:-1", ""}) {
    EXPECT_FALSE(ParseXidMix(bad).ok()) << bad;
  }
  EXPECT_NE(ParseXidMix("79:0").status().message().find("'79:0'"), std::string::npos);
}

}  // namespace failures_test
}  // namespace gpupool::sim
