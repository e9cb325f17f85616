#include "sim/timed/openb_timed_reader.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "sim/timed/timed_test_util.h"

namespace gpupool::sim {
namespace {

const char kHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

Result<std::vector<TraceJob>> ReadOpenbRows(const std::string& rows) {
  auto t = CsvTable::Parse(kHeader + rows, "pods.csv");
  if (!t.ok()) return t.status();
  return ReadOpenbTimedJobs(*t);
}

TEST(OpenbTimedReader, RuntimeIsDeletionMinusScheduledOrCreation) {
  auto jobs = ReadOpenbRows(
      "p0,12000,16384,1,1000,,LS,Running,0,100,10\n"
      "p1,6000,12288,1,460,V100M16|V100M32,BE,Pending,50,80,\n"
      "p2,4000,1024,0,0,,BE,Running,5,6,5\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].submit_s, 0);
  EXPECT_EQ((*jobs)[0].duration_s, 90);
  EXPECT_EQ((*jobs)[0].user, "LS");
  EXPECT_EQ((*jobs)[1].duration_s, 30);
  EXPECT_EQ((*jobs)[1].tasks[0].gpu_models, (std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_EQ((*jobs)[1].tasks[0].gpu_milli, 460);
  EXPECT_EQ((*jobs)[2].tasks[0].num_gpu, 0);
}

TEST(OpenbTimedReader, BadInputNamesFileLineAndField) {
  struct Case {
    std::string rows;
    std::string message;
  };
  std::vector<Case> cases = {
      {"p,1,1,1,1001,,LS,Running,0,1,0\n", "pods.csv:2: field 'gpu_milli': GPU share 1001"},
      {"p,1,1,1,500,,LS,Running,0,10,20\n", "pods.csv:2: field 'deletion_time'"},
      {"p,1,-1,1,500,,LS,Running,0,10,0\n", "pods.csv:2: field 'memory_mib': negative"},
      {"p,1,1,two,500,,LS,Running,0,10,0\n", "pods.csv:2: field 'num_gpu'"},
      {"p,1,1,0,500,,LS,Running,0,10,0\n", "without GPUs"},
  };
  for (const Case& c : cases) {
    auto jobs = ReadOpenbRows(c.rows);
    ASSERT_FALSE(jobs.ok()) << c.rows;
    EXPECT_NE(jobs.status().message().find(c.message), std::string::npos)
        << jobs.status().message();
  }
  auto no_times = CsvTable::Parse("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\n",
                                  "multigpu20.csv");
  ASSERT_TRUE(no_times.ok());
  auto r = ReadOpenbTimedJobs(*no_times);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing column 'creation_time'"), std::string::npos);
}

TEST(OpenbTimedReader, ReadsTheDefaultTrace) {
  const std::filesystem::path path = testing::TracesDir() / "openb/openb_pod_list_default.csv";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "the openb trace is not at " << path << " (only in the project workspace)";
  }
  auto jobs = ReadOpenbTimedFile(path.string());
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ(jobs->size(), 8152u);
  for (const TraceJob& j : *jobs) EXPECT_GE(j.duration_s, 0);
}

}  // namespace
}  // namespace gpupool::sim
