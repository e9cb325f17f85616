#include "jobs/job.h"

#include <gtest/gtest.h>

#include "jobs/job_json.h"

namespace gpupool::jobs {
namespace {

TEST(JobStateTest, TransitionsFollowTheStateMachine) {
  EXPECT_TRUE(IsValidTransition(JobState::kPending, JobState::kAssigned));
  EXPECT_TRUE(IsValidTransition(JobState::kAssigned, JobState::kRunning));
  EXPECT_TRUE(IsValidTransition(JobState::kRunning, JobState::kSucceeded));
  EXPECT_TRUE(IsValidTransition(JobState::kLost, JobState::kPending));
  EXPECT_FALSE(IsValidTransition(JobState::kSucceeded, JobState::kRunning));
  EXPECT_FALSE(IsValidTransition(JobState::kPending, JobState::kRunning));
  EXPECT_FALSE(IsValidTransition(JobState::kCancelled, JobState::kPending));
  for (JobState s : {JobState::kSucceeded, JobState::kFailed, JobState::kCancelled,
                     JobState::kTimeout, JobState::kLost}) {
    EXPECT_TRUE(IsTerminal(s));
    EXPECT_EQ(ParseJobState(JobStateName(s)), s);
  }
  EXPECT_FALSE(IsTerminal(JobState::kRunning));
}

TEST(JobJsonTest, RoundTrip) {
  Job j;
  j.id = 12;
  j.user = "alice";
  j.uid = 1000;
  j.gid = 1000;
  j.project = "vision";
  j.name = "train";
  j.command = {"python3", "train.py", "--lr", "0.1"};
  j.env = {{"A", "1"}};
  j.workdir = "/home/alice";
  j.request.gpus = 1;
  j.request.gpu_milli = 250;
  j.request.gpu_models = {"A100"};
  j.request.min_capability = "8.0";
  j.time_limit_s = 3600;
  j.state = JobState::kRunning;
  j.exit_code = 3;
  j.placement = {{"node1", {2}, {"GPU-abc"}, 250}};
  j.image = "localhost/train:1";
  j.mounts = {{"/data", "/data", true}, {"/home/alice/out", "/out", false}};
  j.environment = "torch:2.4";
  j.needs.source = "image localhost/train:1";
  j.needs.cuda = "12.4";
  j.needs.min_driver = "550.54.14";
  j.needs.min_driver_minor_compat = "525.60.13";
  j.needs.sass = {"sm_80", "sm_90"};
  j.needs.ptx = {"compute_90"};
  Result<Job> back = JobFromJson(Json::parse(DumpJson(JobToJson(j))));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, j);
}

TEST(JobJsonTest, RejectsBadRequests) {
  auto err = [](const char* text) {
    Result<Job> r = JobFromJson(Json::parse(text));
    return r.ok() ? std::string("OK") : r.status().message();
  };
  EXPECT_EQ(err(R"({"request": {"gpus": -1}})"),
            "job.request.gpus: -1 is outside the range 0..1024");
  EXPECT_EQ(err(R"({"request": {"gpus": 2, "gpu_milli": 500}})"),
            "job.request: gpu_milli: a GPU share below 1000 needs gpus = 1; ask for whole GPUs "
            "or for one shared GPU");
  EXPECT_EQ(err(R"({"request": {"gpus": 1, "gpu_milli": 1001}})"),
            "job.request.gpu_milli: 1001 is outside the range 1..1000");
  EXPECT_EQ(err(R"({"request": {"gpus": 1, "min_capability": "eight"}})"),
            "job.request: min_capability: 'eight' is not MAJOR.MINOR, e.g. 8.0");
  EXPECT_EQ(err(R"({"colour": "red"})").substr(0, 26), "job.colour: unknown field;");
  EXPECT_EQ(err(R"({"env": {"A": 1}})"), "job.env.A: expected a string value");
  EXPECT_EQ(err(R"({"state": "DANCING"})"), "job.state: unknown state 'DANCING'");
  EXPECT_EQ(err(R"({"mounts": [{"source": "/data"}]})"),
            "job.mounts[0].target: required field is missing");
  EXPECT_EQ(err(R"({"needs": {"cuda": "12.4"}})"), "job.needs.source: required field is missing");
  EXPECT_EQ(err(R"({"request": {"tasks": 0}})"),
            "job.request.tasks: 0 is outside the range 1..4096");
}

// Issue 15 A.2, "constraints silently dropped": `submit --vendor amd -- true` and
// `--min-capability 9.5` without --gpus ran as CPU jobs.
TEST(JobJsonTest, GpuConstraintsWithoutGpusAreRefusedByName) {
  auto err = [](const std::string& text) {
    Result<Job> r = JobFromJson(Json::parse(text));
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(err(R"({"request": {"vendor": "amd"}})").find("request: vendor: a GPU constraint"),
            std::string::npos)
      << err(R"({"request": {"vendor": "amd"}})");
  EXPECT_NE(err(R"({"request": {"min_capability": "9.5"}})").find("min_capability: "),
            std::string::npos);
  EXPECT_NE(err(R"({"request": {"gpu_models": ["H100"]}})").find("add --gpus N"),
            std::string::npos);
  EXPECT_EQ(err(R"({"request": {"gpus": 1, "vendor": "amd", "min_capability": "9.0"}})"), "ok");
}

}  // namespace
}  // namespace gpupool::jobs
