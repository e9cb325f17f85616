// Runs the first jobs of the real traces through the whole time-driven pipeline and
// checks invariants that must hold for any correct scheduler. Skipped when the traces
// (../shared/traces, only in the project workspace) are absent.
#include <gtest/gtest.h>

#include <filesystem>

#include "sim/openb_reader.h"
#include "sim/timed/cluster_spec.h"
#include "sim/timed/openb_timed_reader.h"
#include "sim/timed/philly_reader.h"
#include "sim/timed/timed_experiment.h"
#include "sim/timed/timed_metrics.h"
#include "sim/timed/timed_test_util.h"

namespace gpupool::sim {
namespace {

std::filesystem::path Traces() { return testing::TracesDir(); }

// The production default when the placement policies are registered, else the
// first-fit test double (so this test does not depend on which policies exist).
TimedOptions Options(const std::string& queue, sched::StartRule rule) {
  TimedOptions o;
  o.queue_policy = queue;
  o.start_rule = rule;
  o.seed = 42;
  if (sched::BuiltinPlacementPolicies().Contains("default")) {
    o.placement_policy = "default";
  } else {
    o.placement_policy = "first-fit";
    o.placement_registry = &testing::FirstFitRegistry();
  }
  return o;
}

void CheckInvariants(const TimedRun& run, size_t expected_jobs) {
  ASSERT_EQ(run.jobs.size(), expected_jobs);
  for (const JobRecord& j : run.jobs) {
    if (j.fate == JobFate::kNeverFits) continue;
    ASSERT_NE(j.fate, JobFate::kNeverStarted) << j.id;
    EXPECT_GE(j.start_s, j.submit_s) << j.id;  // queueing delay >= 0
    EXPECT_GE(j.end_s, j.start_s) << j.id;
  }
  for (const AllocationPoint& p : run.timeline) {
    ASSERT_LE(p.gpu_milli_used, run.capacity.gpu_milli) << "at t=" << p.time_s;
    ASSERT_GE(p.gpu_milli_used, 0);
  }
  ASSERT_FALSE(run.timeline.empty());
  EXPECT_EQ(run.timeline.back().gpu_milli_used, 0);
}

TEST(PhillyTimedRun, First2000JobsAllFinishUnderEveryQueuePolicy) {
  const auto path = Traces() / "philly/philly_2017-09_10.csv";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "the Philly trace is not at " << path << " (only in the project workspace)";
  }
  PhillyOptions po;
  po.max_jobs = 2000;
  po.time_limit_factor = 2;
  po.cpu_milli_per_gpu = 4000;
  po.memory_mib_per_gpu = 16384;
  auto jobs = ReadPhillyFile(path.string(), po);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2000u);
  auto nodes = ParseClusterSpec("16x8:V100");
  ASSERT_TRUE(nodes.ok());
  auto cluster = BuildCluster(*nodes);
  ASSERT_TRUE(cluster.ok());
  for (const char* queue : {"fifo", "sjf", "fair"}) {
    for (sched::StartRule rule : {sched::StartRule::kStrict, sched::StartRule::kEasyBackfill}) {
      auto run = RunTimedExperiment(*cluster, *jobs, Options(queue, rule));
      ASSERT_TRUE(run.ok()) << run.status().ToString();
      CheckInvariants(*run, jobs->size());
      TimedSummary s = Summarize(*run, sched::FairShareGroup::kProject);
      // Wide jobs become per-node gangs (32 GPUs = 4 x 8), so every job fits somewhere.
      EXPECT_EQ(s.never_fits, 0u) << queue;
      EXPECT_EQ(s.finished + s.timed_out, jobs->size());
      EXPECT_EQ(s.timed_out, 0u);  // limits are twice the run time
      EXPECT_GE(s.delay_s.mean, 0);
      EXPECT_LE(s.peak_gpu_alloc_pct, 100);
    }
  }
}

TEST(OpenbTimedRun, First2000PodsOnTheOpenbNodes) {
  const auto pods = Traces() / "openb/openb_pod_list_default.csv";
  const auto nodes_csv = Traces() / "openb/openb_node_list_gpu_node.csv";
  if (!std::filesystem::exists(pods) || !std::filesystem::exists(nodes_csv)) {
    GTEST_SKIP() << "the openb trace is not under " << Traces()
                 << " (only in the project workspace)";
  }
  auto jobs = ReadOpenbTimedFile(pods.string(), 2000);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  auto nodes = ReadOpenbNodes(nodes_csv.string());
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  auto cluster = BuildCluster(*nodes);
  ASSERT_TRUE(cluster.ok());
  auto run = RunTimedExperiment(*cluster, *jobs, Options("fifo", sched::StartRule::kSkipBlocked));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  CheckInvariants(*run, jobs->size());
}

}  // namespace
}  // namespace gpupool::sim
