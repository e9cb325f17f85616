#include "sim/timed/generic_trace_reader.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace gpupool::sim {
namespace {

TEST(GenericTraceCsv, RequeueIsZeroOrOne) {
  auto jobs = ReadGenericTraceText(
      "job_id,submit_time,duration,gpus_per_task,requeue\nj1,0,10,1,1\nj2,0,10,1,\n", "jobs.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_TRUE((*jobs)[0].requeue);
  EXPECT_FALSE((*jobs)[1].requeue);
  auto json = ReadGenericTraceText(
      R"([{"job_id": "j1", "submit_time": 0, "duration": 10, "requeue": 1}])", "jobs.json");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_TRUE((*json)[0].requeue);
  auto bad = ReadGenericTraceText("job_id,submit_time,duration,requeue\nj1,0,10,2\n", "jobs.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("jobs.csv:2: field 'requeue'"), std::string::npos)
      << bad.status().message();
}

TEST(GenericTraceCsv, GpuMemoryIsAShareAsk) {
  auto jobs = ReadGenericTraceText(
      "job_id,submit_time,duration,gpus_per_task,gpu_milli,gpu_memory_mib\nj1,0,10,1,100,10240\n"
      "j2,0,10,1,100,\n",
      "jobs.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ((*jobs)[0].tasks[0].gpu_memory_mib, 10240);
  EXPECT_EQ((*jobs)[1].tasks[0].gpu_memory_mib, 0);
  auto json = ReadGenericTraceText(
      R"([{"job_id": "j", "submit_time": 0, "duration": 1, "gpus_per_task": 1, "gpu_milli": 250,
          "gpu_memory_mib": 4096}])",
      "jobs.json");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ((*json)[0].tasks[0].gpu_memory_mib, 4096);
  auto bad = ReadGenericTraceText(
      "job_id,submit_time,duration,gpus_per_task,gpu_memory_mib\nj1,0,10,1,10240\n", "jobs.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("jobs.csv:2: field 'gpu_memory_mib': only a share"),
            std::string::npos)
      << bad.status().message();
  bad = ReadGenericTraceText(
      "job_id,submit_time,duration,gpus_per_task,gpu_milli,gpu_memory_mib\nj1,0,10,1,100,-1\n",
      "jobs.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("field 'gpu_memory_mib'"), std::string::npos)
      << bad.status().message();
}

TEST(GenericTraceCsv, ReadsEveryColumnWithDefaults) {
  auto jobs = ReadGenericTraceText(
      "job_id,user,project,submit_time,duration,time_limit,runtime_estimate,tasks,gpus_per_task,"
      "gpu_milli,cpu_milli,memory_mib,gpu_model,priority\n"
      "j1,alice,vision,10,100,200,150,2,4,,8000,32768,A100|H100,5\n"
      "j2,,,2017-09-04 10:30:41,7,,,,1,250,,,,\n",
      "jobs.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  const TraceJob& a = (*jobs)[0];
  EXPECT_EQ(a.id, "j1");
  EXPECT_EQ(a.user, "alice");
  EXPECT_EQ(a.project, "vision");
  EXPECT_EQ(a.submit_s, 10);
  EXPECT_EQ(a.duration_s, 100);
  EXPECT_EQ(a.time_limit_s, 200);
  EXPECT_EQ(a.runtime_estimate_s, 150);
  EXPECT_EQ(a.priority, 5);
  ASSERT_EQ(a.tasks.size(), 2u);
  EXPECT_EQ(a.tasks[1].num_gpu, 4);
  EXPECT_EQ(a.tasks[1].gpu_milli, 1000);
  EXPECT_EQ(a.tasks[1].cpu_milli, 8000);
  EXPECT_EQ(a.tasks[1].gpu_models, (std::vector<std::string>{"A100", "H100"}));
  const TraceJob& b = (*jobs)[1];
  EXPECT_EQ(b.user, "default");
  EXPECT_EQ(b.project, "default");
  EXPECT_EQ(b.submit_s, 1504521041);
  EXPECT_EQ(b.time_limit_s, 0);
  ASSERT_EQ(b.tasks.size(), 1u);
  EXPECT_EQ(b.tasks[0].gpu_milli, 250);
  EXPECT_TRUE(b.tasks[0].gpu_models.empty());
}

TEST(GenericTraceCsv, BadInputNamesFileLineAndField) {
  struct Case {
    std::string text;
    std::string message;
  };
  std::vector<Case> cases = {
      {"job_id,duration\nj,1\n", "jobs.csv:1: missing column 'submit_time'"},
      {"job_id,submit_time,duration,gpus_per_task,gpu_milli\nj,0,1,1,1500\n",
       "jobs.csv:2: field 'gpu_milli': GPU share 1500 is above 1000"},
      {"job_id,submit_time,duration,gpus_per_task,gpu_milli\nj,0,1,2,500\n",
       "fractional shares are for single-GPU tasks only"},
      {"job_id,submit_time,duration\nj,0,-1\n", "jobs.csv:2: field 'duration': negative value"},
      {"job_id,submit_time,duration\nj,0,1\nk,soon,1\n", "jobs.csv:3: field 'submit_time'"},
      {"job_id,submit_time,duration,gpu_modle\nj,0,1,A100\n", "unknown column 'gpu_modle'"},
      {"job_id,submit_time,duration,tasks\nj,0,1,0\n", "jobs.csv:2: field 'tasks'"},
      {"job_id,submit_time,duration\n,0,1\n", "jobs.csv:2: field 'job_id': empty"},
  };
  for (const Case& c : cases) {
    auto jobs = ReadGenericTraceText(c.text, "jobs.csv");
    ASSERT_FALSE(jobs.ok()) << c.text;
    EXPECT_NE(jobs.status().message().find(c.message), std::string::npos)
        << jobs.status().message();
  }
}

TEST(GenericTraceCsv, ReadsArraysAndHolds) {
  auto jobs = ReadGenericTraceText(
      "job_id,submit_time,duration,array,array_max_running,held_for\n"
      "e0,0,10,sweep,2,\ne1,0,10,sweep,2,60\nplain,0,10,,,\n",
      "jobs.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ((*jobs)[0].array, "sweep");
  EXPECT_EQ((*jobs)[0].array_max_running, 2);
  EXPECT_EQ((*jobs)[0].held_for_s, 0);
  EXPECT_EQ((*jobs)[1].held_for_s, 60);
  EXPECT_EQ((*jobs)[2].array, "");
  EXPECT_EQ((*jobs)[2].array_max_running, 0);
  auto bad =
      ReadGenericTraceText("job_id,submit_time,duration,array_max_running\nj,0,1,2\n", "jobs.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "jobs.csv:2: field 'array_max_running': bounds an array's elements; name the array "
            "in 'array'");
  auto json = ReadGenericTraceText(
      R"([{"job_id":"j","submit_time":0,"duration":1,"array":"a","array_max_running":1,)"
      R"("held_for":5}])",
      "jobs.json");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ((*json)[0].array, "a");
  EXPECT_EQ((*json)[0].held_for_s, 5);
  EXPECT_FALSE(ReadGenericTraceText(
                   R"([{"job_id":"j","submit_time":0,"duration":1,"held_for":-5}])", "jobs.json")
                   .ok());
}

TEST(GenericTraceJson, ReadsArrayAndObjectForms) {
  const std::string job = R"({"job_id":"j1","user":"u","submit_time":5,"duration":60,"tasks":3,)"
                          R"("gpus_per_task":1,"gpu_milli":500,"gpu_model":"T4","priority":-2})";
  for (const std::string& text :
       {fmt::format("[{}]", job), fmt::format(R"({{"jobs":[{}]}})", job)}) {
    auto jobs = ReadGenericTraceText(text, "jobs.json");
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    ASSERT_EQ(jobs->size(), 1u);
    const TraceJob& j = (*jobs)[0];
    EXPECT_EQ(j.project, "u");
    EXPECT_EQ(j.priority, -2);
    ASSERT_EQ(j.tasks.size(), 3u);
    EXPECT_EQ(j.tasks[2].gpu_milli, 500);
    EXPECT_EQ(j.tasks[2].gpu_models, (std::vector<std::string>{"T4"}));
  }
}

TEST(GenericTraceJson, BadInputNamesTheField) {
  struct Case {
    std::string text;
    std::string message;
  };
  std::vector<Case> cases = {
      {R"([{"job_id":"j","submit_time":0}])", "jobs[0].duration"},
      {R"([{"job_id":"j","submit_time":0,"duration":1,"gpus_per_task":1,"gpu_milli":2000}])",
       "jobs[0].gpu_milli: GPU share 2000 is above 1000"},
      {R"([{"job_id":"j","submit_time":-1,"duration":1}])", "jobs[0].submit_time"},
      {R"([{"job_id":"j","submit_time":0,"duration":"long"}])", "jobs[0].duration"},
      {R"([{"job_id":"j","submit_time":0,"duration":1,"colour":"red"}])", "colour"},
      {R"({"work":[]})", "work"},
      {R"([1])", "jobs[0]: found integer"},
      {R"([{"job_id":"j",)", "jobs.json"},
  };
  for (const Case& c : cases) {
    auto jobs = ReadGenericTraceText(c.text, "jobs.json");
    ASSERT_FALSE(jobs.ok()) << c.text;
    EXPECT_NE(jobs.status().message().find(c.message), std::string::npos)
        << jobs.status().message();
  }
}

}  // namespace
}  // namespace gpupool::sim
