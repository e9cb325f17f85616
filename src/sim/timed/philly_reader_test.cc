#include "sim/timed/philly_reader.h"

#include <gtest/gtest.h>

#include "sim/timed/civil_time.h"

namespace gpupool::sim {
namespace {

Result<std::vector<TraceJob>> ReadPhilly(const std::string& text, PhillyOptions o = {}) {
  auto t = CsvTable::Parse(text, "philly.csv");
  if (!t.ok()) return t.status();
  return ReadPhillyJobs(*t, o);
}

TEST(CivilTime, ParsesCalendarAndNumericTimes) {
  EXPECT_EQ(DaysFromCivil(1970, 1, 1), 0);
  EXPECT_EQ(DaysFromCivil(2000, 3, 1), 11017);
  EXPECT_EQ(*ParseTimestampSeconds("2017-09-04 10:30:41"), 1504521041);
  EXPECT_EQ(*ParseTimestampSeconds("2017-09-04T10:30:41Z"), 1504521041);
  EXPECT_EQ(*ParseTimestampSeconds("2016-02-29"), 1456704000);
  EXPECT_EQ(*ParseTimestampSeconds("  1234.9 "), 1234);
  EXPECT_FALSE(ParseTimestampSeconds("2017-02-29 00:00:00").has_value());
  EXPECT_FALSE(ParseTimestampSeconds("2017-09-04 25:00:00").has_value());
  EXPECT_FALSE(ParseTimestampSeconds("yesterday").has_value());
  EXPECT_FALSE(ParseTimestampSeconds("").has_value());
}

TEST(PhillyReader, ReadsJobsAndSplitsWideOnesIntoPerNodeTasks) {
  PhillyOptions o;
  o.cpu_milli_per_gpu = 4000;
  o.memory_mib_per_gpu = 1000;
  o.time_limit_factor = 1.5;
  auto jobs = ReadPhilly(
      "timestamp,duration,num_gpus,gpu_time,cluster\n"
      "2017-09-04 10:30:41,100.0,1,100.0,vcA\n"
      "2017-09-04 10:31:41,7.2,12,86.4,vcB\n",
      o);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  const TraceJob& a = (*jobs)[0];
  EXPECT_EQ(a.user, "vcA");
  EXPECT_EQ(a.project, "vcA");
  EXPECT_EQ(a.submit_s, 1504521041);
  EXPECT_EQ(a.duration_s, 100);
  EXPECT_EQ(a.time_limit_s, 150);
  ASSERT_EQ(a.tasks.size(), 1u);
  EXPECT_EQ(a.tasks[0].cpu_milli, 4000);
  const TraceJob& b = (*jobs)[1];
  EXPECT_EQ(b.duration_s, 8);  // rounded up to whole seconds
  ASSERT_EQ(b.tasks.size(), 2u);
  EXPECT_EQ(b.tasks[0].num_gpu, 8);
  EXPECT_EQ(b.tasks[1].num_gpu, 4);
  EXPECT_EQ(b.tasks[1].memory_mib, 4000);
  EXPECT_EQ(b.TotalGpuMilli(), 12000);
  EXPECT_EQ(SplitGpusPerNode(16, 8), (std::vector<int>{8, 8}));
  EXPECT_EQ(SplitGpusPerNode(3, 2), (std::vector<int>{2, 1}));
}

TEST(PhillyReader, MaxJobsReadsOnlyTheFirst) {
  PhillyOptions o;
  o.max_jobs = 1;
  auto jobs = ReadPhilly(
      "timestamp,duration,num_gpus,cluster\n1,1,1,a\n2,1,1,a\nbroken line is never read,1,1,a\n",
      o);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ(jobs->size(), 1u);
}

TEST(PhillyReader, BadInputNamesFileLineAndField) {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::string header = "timestamp,duration,num_gpus,gpu_time,cluster\n";
  std::vector<Case> cases = {
      {"timestamp,num_gpus,cluster\n1,1,a\n", "philly.csv:1: missing column 'duration'"},
      {header + "2017-09-04 10:30:41,-5,1,1,a\n",
       "philly.csv:2: field 'duration': negative value -5 is not allowed"},
      {header + "1,5,x,1,a\n2,5,1,1,a\n",
       "philly.csv:2: field 'num_gpus': 'x' is not a whole number"},
      {header + "1,5,1,1,a\n2017-13-01 00:00:00,5,1,1,a\n", "philly.csv:3: field 'timestamp'"},
      {header + "1,5,1,1,\n", "philly.csv:2: field 'cluster': empty"},
      {header + "1,5,1,oops,a\n", "philly.csv:2: field 'gpu_time': 'oops' is not a number"},
  };
  for (const Case& c : cases) {
    auto jobs = ReadPhilly(c.text);
    ASSERT_FALSE(jobs.ok()) << c.text;
    EXPECT_EQ(jobs.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(jobs.status().message().find(c.message), std::string::npos)
        << jobs.status().message();
  }
  PhillyOptions bad;
  bad.gpus_per_node = 0;
  EXPECT_FALSE(ReadPhilly(header, bad).ok());
}

TEST(PhillyReader, MissingFileIsAnError) {
  auto jobs = ReadPhillyFile("/nonexistent/philly.csv", {});
  ASSERT_FALSE(jobs.ok());
  EXPECT_NE(jobs.status().message().find("/nonexistent/philly.csv"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::sim
