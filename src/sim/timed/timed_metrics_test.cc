#include "sim/timed/timed_metrics.h"

#include <gtest/gtest.h>

#include "sim/timed/timed_report.h"

namespace gpupool::sim {
namespace {

TEST(Describe, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  Distribution d = Describe(v);
  EXPECT_EQ(d.count, 100u);
  EXPECT_DOUBLE_EQ(d.mean, 50.5);
  EXPECT_DOUBLE_EQ(d.median, 50);
  EXPECT_DOUBLE_EQ(d.p95, 95);
  EXPECT_DOUBLE_EQ(d.p99, 99);
  EXPECT_DOUBLE_EQ(d.max, 100);
  Distribution one = Describe({7});
  EXPECT_DOUBLE_EQ(one.p99, 7);
  EXPECT_EQ(Describe({}).count, 0u);
}

TEST(JainIndex, EqualIsOneAndMonopolyIsOneOverN) {
  EXPECT_DOUBLE_EQ(JainIndex({2, 2, 2}), 1);
  EXPECT_DOUBLE_EQ(JainIndex({1, 0, 0, 0}), 0.25);
  EXPECT_DOUBLE_EQ(JainIndex({}), 1);
  EXPECT_NEAR(JainIndex({1, 3}), 16.0 / 20.0, 1e-12);
}

TimedRun HandRun() {
  TimedRun run;
  run.capacity = sched::Resources{8000, 8192, 2000};
  auto job = [](std::string id, std::string user, int64_t submit, int64_t start, int64_t end,
                int64_t gpu) {
    JobRecord j;
    j.id = std::move(id);
    j.user = user;
    j.project = "p";
    j.submit_s = submit;
    j.start_s = start;
    j.end_s = end;
    j.duration_s = end - start;
    j.gpu_milli = gpu;
    j.fate = JobFate::kFinished;
    return j;
  };
  run.jobs = {job("a", "x", 0, 0, 100, 2000), job("b", "y", 0, 100, 200, 1000)};
  JobRecord never;
  never.id = "n";
  never.fate = JobFate::kNeverFits;
  run.jobs.push_back(never);
  run.timeline = {{0, 2000, 1, 1}, {100, 1000, 1, 0}, {200, 0, 0, 0}};
  return run;
}

TEST(Summarize, FairnessAllocationAndSamples) {
  TimedSummary s = Summarize(HandRun(), sched::FairShareGroup::kUser, 50);
  EXPECT_EQ(s.finished, 2u);
  EXPECT_EQ(s.never_fits, 1u);
  EXPECT_EQ(s.makespan_s, 200);
  EXPECT_DOUBLE_EQ(s.mean_gpu_alloc_pct, 75);
  EXPECT_DOUBLE_EQ(s.peak_gpu_alloc_pct, 100);
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(s.groups[0].group, "x");
  EXPECT_DOUBLE_EQ(s.groups[0].service_ratio, 1);
  EXPECT_DOUBLE_EQ(s.groups[1].service_ratio, 0.5);
  EXPECT_NEAR(s.groups[0].gpu_hours_share, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(s.jain_index, 2.25 / 2.5, 1e-12);
  ASSERT_EQ(s.samples.size(), 5u);  // 0, 50, 100, 150, 200
  EXPECT_DOUBLE_EQ(s.samples[1].gpu_alloc_pct, 100);
  EXPECT_DOUBLE_EQ(s.samples[2].gpu_alloc_pct, 50);
  EXPECT_DOUBLE_EQ(s.samples[4].gpu_alloc_pct, 0);
  TimedSummary by_project = Summarize(HandRun(), sched::FairShareGroup::kProject, 50);
  EXPECT_EQ(by_project.groups.size(), 1u);
  EXPECT_EQ(AllocationCsv(s).substr(0, 43), "time_s,gpu_alloc_pct,running_jobs,pending_j");
  EXPECT_NE(GroupsCsv(s).find("\ny,1,"), std::string::npos);
  EXPECT_NE(JobsCsv(HandRun()).find("n,,,0,-1,-1,0,0,0,never_fits,,-1,0,0,0\n"), std::string::npos);
}

// jobs.csv carries each job's wait over every attempt and what preemptions and GPU
// failures cost it, not only its first start (which hides a victim's second wait).
TEST(Summarize, JobsCsvCarriesWaitsAndPreemptions) {
  TimedRun run = HandRun();
  run.jobs[1].waited_s = 250;  // preempted once after its first start at 100
  run.jobs[1].preemptions = 1;
  run.jobs[1].lost_s = 40;
  run.jobs[1].gpu_failures = 2;
  const std::string csv = JobsCsv(run);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "id,user,project,submit_s,start_s,end_s,duration_s,gpu_milli,tasks,fate,reason,"
            "waited_s,preemptions,lost_s,gpu_failures");
  EXPECT_NE(csv.find("\na,x,p,0,0,100,100,2000,0,finished,,0,0,0,0\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nb,y,p,0,100,200,100,1000,0,finished,,250,1,40,2\n"), std::string::npos)
      << csv;
}

}  // namespace
}  // namespace gpupool::sim
