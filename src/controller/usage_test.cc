#include "controller/usage.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace gpupool::controller {
namespace {

constexpr int64_t kHour = 3'600'000'000;
constexpr int64_t kT0 = 1000 * kHour;  // times below are relative to this

jobs::Job Ran(const std::string& user, const std::string& project, int gpus, int milli,
              int64_t start, int64_t end) {
  jobs::Job j;
  j.user = user;
  j.project = project;
  j.start_time_us = kT0 + start;
  j.end_time_us = end == 0 ? 0 : kT0 + end;
  jobs::TaskPlacement p;
  p.node = "n";
  p.gpu_milli = milli;
  for (int i = 0; i < gpus; ++i) p.gpu_uuids.push_back("GPU-" + std::to_string(i));
  j.placement = {p};
  return j;
}

TEST(UsageTest, WeightsFractionsAndClipsToTheWindow) {
  std::vector<jobs::Job> js = {
      Ran("alice", "vision", 2, 1000, 0, 2 * kHour),       // 4 GPU-hours
      Ran("alice", "nlp", 1, 250, 0, 4 * kHour),           // 1 GPU-hour
      Ran("bob", "vision", 1, 1000, 3 * kHour, 0),         // still running: 2 h by now
      Ran("carol", "x", 1, 1000, 10 * kHour, 11 * kHour),  // outside the window
  };
  js.push_back(jobs::Job{});  // never started
  auto by_user = ComputeUsage(js, kT0, kT0 + 6 * kHour, kT0 + 5 * kHour, "user");
  ASSERT_EQ(by_user.size(), 2u);
  EXPECT_EQ(by_user[0].key, "alice");
  EXPECT_DOUBLE_EQ(by_user[0].gpu_hours, 5.0);
  EXPECT_EQ(by_user[0].jobs, 2);
  EXPECT_EQ(by_user[1].key, "bob");
  EXPECT_DOUBLE_EQ(by_user[1].gpu_hours, 2.0);
  auto by_project = ComputeUsage(js, kT0 + kHour, kT0 + 6 * kHour, kT0 + 5 * kHour, "project");
  ASSERT_EQ(by_project.size(), 2u);
  EXPECT_EQ(by_project[0].key, "vision");
  EXPECT_DOUBLE_EQ(by_project[0].gpu_hours, 2.0 + 2.0);  // alice 1 h x 2 GPUs + bob 2 h
  EXPECT_DOUBLE_EQ(by_project[1].gpu_hours, 0.75);
}

TEST(UsageTest, UsedGpuHoursAndEfficiencyPerUserAndProject) {
  std::vector<jobs::Job> js = {
      Ran("alice", "vision", 2, 1000, 0, 2 * kHour),  // 4 GPU-hours allocated
      Ran("alice", "nlp", 1, 250, 0, 4 * kHour),      // 1 GPU-hour (a quarter GPU)
      Ran("bob", "vision", 1, 1000, 0, kHour),        // 1 GPU-hour, never sampled
  };
  js[0].id = 1;
  js[1].id = 2;
  js[2].id = 3;
  // Job 1 used its GPUs half the time; job 2 its quarter at 40% (0.25 x 0.4 x 4 h).
  const std::map<int64_t, double> used = {{1, 2.0}, {2, 0.4}, {99, 7.0}};
  auto by_user = ComputeUsage(js, kT0, kT0 + 6 * kHour, kT0 + 6 * kHour, "user", used);
  ASSERT_EQ(by_user.size(), 2u);
  EXPECT_DOUBLE_EQ(by_user[0].gpu_hours, 5.0);
  EXPECT_DOUBLE_EQ(by_user[0].used_gpu_hours, 2.4);
  EXPECT_DOUBLE_EQ(by_user[0].efficiency(), 0.48);
  EXPECT_DOUBLE_EQ(by_user[1].used_gpu_hours, 0);  // no samples: nothing counted as used
  EXPECT_DOUBLE_EQ(by_user[1].efficiency(), 0);
  auto by_project = ComputeUsage(js, kT0, kT0 + 6 * kHour, kT0 + 6 * kHour, "project", used);
  ASSERT_EQ(by_project.size(), 2u);
  EXPECT_EQ(by_project[1].key, "nlp");
  EXPECT_DOUBLE_EQ(by_project[1].efficiency(), 0.4);
  EXPECT_DOUBLE_EQ(UsageRow{}.efficiency(), 0);
}

// By project, a job without a project counts in its user's own group: the row named after
// the user, marked own_group (GET /v1/usage's "own_group": true). A project entry named
// after the user is the same group, its jobs in that row; a row only charged by name
// (carol's jobs charging project "bob") is no one's own group, and by user none is.
TEST(UsageTest, JobsWithoutAProjectAreTheirUsersOwnGroup) {
  const std::vector<jobs::Job> js = {
      Ran("alice", "", 1, 1000, 0, kHour),       // her own group
      Ran("alice", "alice", 1, 1000, 0, kHour),  // the entry named after her: the same group
      Ran("bob", "vision", 3, 1000, 0, kHour),
      Ran("carol", "bob", 1, 500, 0, kHour),
  };
  const std::vector<UsageRow> by_project =
      ComputeUsage(js, kT0, kT0 + 2 * kHour, kT0 + 2 * kHour, "project");
  ASSERT_EQ(by_project.size(), 3u);
  EXPECT_EQ(by_project[0].key, "vision");
  EXPECT_FALSE(by_project[0].own_group);
  EXPECT_EQ(by_project[1].key, "alice");
  EXPECT_TRUE(by_project[1].own_group);
  EXPECT_EQ(by_project[1].jobs, 2);
  EXPECT_DOUBLE_EQ(by_project[1].gpu_hours, 2.0);
  EXPECT_EQ(by_project[2].key, "bob");
  EXPECT_FALSE(by_project[2].own_group);
  for (const UsageRow& r : ComputeUsage(js, kT0, kT0 + 2 * kHour, kT0 + 2 * kHour, "user")) {
    EXPECT_FALSE(r.own_group) << r.key;
  }
}

// A preempted attempt held its GPUs too: it counts once, its GPU-hours (as its tasks ran)
// spread over its run for a window that covers part of it, also while the job waits
// again (the current attempt's start and end are cleared by the requeue).
TEST(UsageTest, APreemptedAttemptCountsOnceInsideTheWindow) {
  jobs::Job j = Ran("alice", "", 2, 1000, 3 * kHour, 4 * kHour);  // attempt 2: 2 GPU-hours
  j.earlier_attempts = {{.start_time_us = kT0, .end_time_us = kT0 + 2 * kHour, .gpu_hours = 4}};
  EXPECT_DOUBLE_EQ(JobGpuHours(j, kT0, kT0 + 6 * kHour, kT0 + 6 * kHour), 6.0);
  EXPECT_DOUBLE_EQ(JobGpuHours(j, kT0 + kHour, kT0 + 6 * kHour, kT0 + 6 * kHour), 4.0);
  EXPECT_DOUBLE_EQ(JobGpuHours(j, kT0 + 3 * kHour, kT0 + 6 * kHour, kT0 + 6 * kHour), 2.0);
  jobs::Job waiting = j;
  waiting.start_time_us = waiting.end_time_us = 0;
  waiting.placement.clear();
  const std::vector<UsageRow> rows =
      ComputeUsage({waiting}, kT0, kT0 + 6 * kHour, kT0 + 6 * kHour, "user");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].gpu_hours, 4.0);
  EXPECT_EQ(rows[0].jobs, 1);
  EXPECT_TRUE(
      ComputeUsage({waiting}, kT0 + 2 * kHour, kT0 + 6 * kHour, kT0 + 6 * kHour, "user").empty());
}

}  // namespace
}  // namespace gpupool::controller
