#include "jobs/job_sort.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace gpupool::jobs {
namespace {

Job MakeJob(int64_t id, const std::string& user, int priority, int64_t submit_us,
            int64_t start_us = 0) {
  Job j;
  j.id = id;
  j.user = user;
  j.priority = priority;
  j.submit_time_us = submit_us;
  j.start_time_us = start_us;
  if (start_us > 0) j.state = JobState::kRunning;
  return j;
}

std::vector<int64_t> Order(std::vector<Job> jobs, const std::string& sort, int64_t now_us) {
  Result<std::vector<JobSortKey>> keys = ParseJobSort(sort, false, "sort");
  EXPECT_TRUE(keys.ok()) << keys.status().message();
  std::sort(jobs.begin(), jobs.end(),
            [&](const Job& a, const Job& b) { return JobSortLess(a, b, *keys, now_us); });
  std::vector<int64_t> ids;
  for (const Job& j : jobs) ids.push_back(j.id);
  return ids;
}

TEST(JobSortTest, ParsesSignsAndTheDefaultDirection) {
  Result<std::vector<JobSortKey>> k = ParseJobSort("state,-priority,+id", false, "sort");
  ASSERT_TRUE(k.ok()) << k.status().message();
  ASSERT_EQ(k->size(), 3u);
  EXPECT_EQ((*k)[0].field, JobSortField::kState);
  EXPECT_FALSE((*k)[0].descending);
  EXPECT_TRUE((*k)[1].descending);
  EXPECT_FALSE((*k)[2].descending);
  EXPECT_EQ(JobSortText(*k), "state,-priority,id");
  k = ParseJobSort("wait", true, "sort");
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(k->front().descending);
}

TEST(JobSortTest, RefusesUnknownFieldsNamingTheAllowedOnes) {
  Result<std::vector<JobSortKey>> k = ParseJobSort("state,colour", false, "--sort");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(k.status().message().find("--sort: unknown field 'colour'"), std::string::npos)
      << k.status().message();
  EXPECT_NE(k.status().message().find("id, user, name"), std::string::npos);
  EXPECT_FALSE(ParseJobSort(",", false, "sort").ok());
  EXPECT_FALSE(ParseJobSort("-", false, "sort").ok());
}

TEST(JobSortTest, OrdersByEachKeyThenById) {
  const int64_t now = 1'000'000'000;
  std::vector<Job> jobs = {MakeJob(1, "bob", 5, 100), MakeJob(2, "alice", 5, 200),
                           MakeJob(3, "bob", 9, 300, 400), MakeJob(4, "alice", 1, 50)};
  EXPECT_EQ(Order(jobs, "user,-priority", now), (std::vector<int64_t>{2, 4, 3, 1}));
  EXPECT_EQ(Order(jobs, "-priority", now), (std::vector<int64_t>{3, 2, 1, 4}));  // ties: id desc
  EXPECT_EQ(Order(jobs, "priority", now), (std::vector<int64_t>{4, 1, 2, 3}));
  // Wait: to the start for a started job (100 µs), else to now.
  EXPECT_EQ(Order(jobs, "wait", now), (std::vector<int64_t>{3, 2, 1, 4}));
  // Runtime: 0 while not started.
  EXPECT_EQ(Order(jobs, "-runtime", now), (std::vector<int64_t>{3, 4, 2, 1}));
  // State in lifecycle order: PENDING before RUNNING.
  EXPECT_EQ(Order(jobs, "-state", now).front(), 3);
  EXPECT_EQ(Order(jobs, "submitted", now), (std::vector<int64_t>{4, 1, 2, 3}));
}

}  // namespace
}  // namespace gpupool::jobs
