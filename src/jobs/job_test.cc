#include "jobs/job.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "jobs/job_json.h"

namespace gpupool::jobs {
namespace {

TEST(JobStateTest, TransitionsFollowTheStateMachine) {
  EXPECT_TRUE(IsValidTransition(JobState::kPending, JobState::kAssigned));
  EXPECT_TRUE(IsValidTransition(JobState::kAssigned, JobState::kRunning));
  EXPECT_TRUE(IsValidTransition(JobState::kRunning, JobState::kSucceeded));
  EXPECT_TRUE(IsValidTransition(JobState::kRunning, JobState::kPending));  // a requeue
  EXPECT_TRUE(IsValidTransition(JobState::kAssigned, JobState::kFailed));
  EXPECT_TRUE(IsValidTransition(JobState::kRunning, JobState::kRunning));
  EXPECT_FALSE(IsValidTransition(JobState::kLost, JobState::kPending));
  EXPECT_FALSE(IsValidTransition(JobState::kRunning, JobState::kAssigned));
  EXPECT_FALSE(IsValidTransition(JobState::kSucceeded, JobState::kRunning));
  EXPECT_FALSE(IsValidTransition(JobState::kPending, JobState::kRunning));
  EXPECT_FALSE(IsValidTransition(JobState::kPending, JobState::kFailed));
  EXPECT_FALSE(IsValidTransition(JobState::kCancelled, JobState::kPending));
  // An end reported late: a requeued job's lost attempt succeeded; a LOST job's record.
  EXPECT_TRUE(IsValidTransition(JobState::kPending, JobState::kSucceeded));
  EXPECT_TRUE(IsValidTransition(JobState::kLost, JobState::kLost));
  EXPECT_FALSE(IsValidTransition(JobState::kLost, JobState::kSucceeded));
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
  j.request.nodelist = {"node1", "node3"};
  j.request.exclude = {"node2"};
  j.time_limit_s = 3600;
  j.state = JobState::kRunning;
  j.submit_time_us = 1'800'000'000'000'000;
  j.placed_time_us = 1'800'000'060'000'000;
  j.launch_failures = 2;
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

// A placement's charge (a MIG instance held whole: its part of the GPU, sched::
// ChargedGpuMilli) is kept with the job and counts in its GPU-hours; written only where it
// differs from the share, so that other records stay as they were, and a record stored
// before the field reads as charged its share.
TEST(JobJsonTest, APlacementsChargeRoundTripsAndCountsInItsGpus) {
  Job j;
  j.request.gpus = 1;
  j.request.gpu_milli = 1;
  j.placement = {{"n1", {0}, {"MIG-a"}, 1, 125}};
  const OrderedJson json = JobToJson(j);
  EXPECT_EQ(json["placement"][0].value("charged_milli", 0), 125);
  Result<Job> back = JobFromJson(Json::parse(DumpJson(json)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, j);
  EXPECT_DOUBLE_EQ(PlacedGpus(back->placement[0]), 0.125);
  j.placement = {{"n1", {0}, {"GPU-a"}, 250}};
  EXPECT_FALSE(JobToJson(j)["placement"][0].contains("charged_milli"));
  EXPECT_DOUBLE_EQ(PlacedGpus(j.placement[0]), 0.25);
  Json old = Json::parse(DumpJson(JobToJson(j)));  // a record from before the field
  back = JobFromJson(old);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->placement[0].charged_milli, 0);
  EXPECT_EQ(ChargedMilli(back->placement[0]), 250);
  old["placement"][0]["charged_milli"] = 1001;
  EXPECT_NE(JobFromJson(old).status().message().find("placement[0].charged_milli"),
            std::string::npos)
      << JobFromJson(old).status().ToString();
}

// gpupool alloc's mark that its client says it is alive while the job waits: kept with
// the job (the store keeps jobs as this JSON), so a restarted controller still watches it.
TEST(JobJsonTest, AnAllocClientsKeepaliveMarkRoundTrips) {
  Job j;
  j.interactive = "alloc";
  j.client_keepalive = true;
  const OrderedJson json = JobToJson(j);
  EXPECT_EQ(json.value("client_keepalive", false), true);
  Result<Job> back = JobFromJson(Json::parse(DumpJson(json)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->client_keepalive);
  EXPECT_FALSE(JobToJson(Job{}).contains("client_keepalive"));
}

// The preemptor's name as its user knows it ("7_3") is kept with the job (the store keeps
// jobs as this JSON), beside its store id.
TEST(JobJsonTest, APreemptorsNameRoundTrips) {
  Job j;
  j.id = 12;
  j.state = JobState::kRunning;
  j.preempted_by = 9;
  j.preempted_by_name = "7_3";
  j.preempt_deadline_s = 1'800'000'000;
  const Json json = JobToJson(j);
  EXPECT_EQ(json.value("preempted_by_name", ""), "7_3");
  Result<Job> back = JobFromJson(Json::parse(DumpJson(json)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, j);
}

// A gang's task that said checkpoint-done keeps the mark in its task record (the store
// keeps jobs as this JSON); a job stored before the mark existed reads as none said it.
TEST(JobJsonTest, ATasksCheckpointDoneRoundTripsAndIsAbsentFromOlderStores) {
  Job j;
  j.id = 12;
  j.state = JobState::kRunning;
  j.preempted_by = 9;
  j.preempt_deadline_s = 1'800'000'000;
  j.placement = {{"n1", {0}, {"GPU-0"}, 1000}, {"n1", {1}, {"GPU-1"}, 1000}};
  j.tasks.resize(2);
  j.tasks[1].checkpoint_done = true;
  const Json json = JobToJson(j);
  EXPECT_FALSE(json["tasks"][0].contains("checkpoint_done"));
  EXPECT_EQ(json["tasks"][1]["checkpoint_done"], true);
  EXPECT_FALSE(json.contains("checkpoint_done"));  // the job's own grace goes on
  Result<Job> back = JobFromJson(Json::parse(DumpJson(json)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, j);
  Json old = json;
  old["tasks"][1].erase("checkpoint_done");
  Result<Job> older = JobFromJson(old);
  ASSERT_TRUE(older.ok()) << older.status().ToString();
  EXPECT_FALSE(older->tasks[1].checkpoint_done);
}

// An ended attempt's run is kept with the job, for the usage of a window (the current
// attempt's times say nothing of it); a job requeued again and again keeps at most
// kMaxEarlierAttempts of them, the oldest merged, its GPU-hours exact.
TEST(JobJsonTest, EarlierAttemptsRoundTripAndStayBounded) {
  Job j;
  j.id = 12;
  j.preemptions = 1;
  j.preempted_gpu_hours = 0.5;
  AddEarlierAttempt(j, {.attempt = 1,
                        .start_time_us = 100,
                        .end_time_us = 200,
                        .gpu_hours = 0.5,
                        .reason = "preempted by job 9"});
  Result<Job> back = JobFromJson(Json::parse(DumpJson(JobToJson(j))));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, j);
  for (int i = 1; i <= static_cast<int>(kMaxEarlierAttempts); ++i) {
    AddEarlierAttempt(j, {.attempt = 1 + i,
                          .ended_by = AttemptEnd::kLost,
                          .start_time_us = 100 + 1000 * i,
                          .end_time_us = 200 + 1000 * i,
                          .gpu_hours = 1,
                          .reason = "node n" + std::to_string(i) + " stopped responding"});
  }
  ASSERT_EQ(j.earlier_attempts.size(), kMaxEarlierAttempts);
  EXPECT_EQ(j.earlier_attempts[0], (EarlierAttempt{.attempt = 1,
                                                   .merged = 2,
                                                   .ended_by = AttemptEnd::kLost,
                                                   .start_time_us = 100,
                                                   .end_time_us = 1200,
                                                   .gpu_hours = 1.5,
                                                   .reason = "node n1 stopped responding"}));
  EXPECT_EQ(j.earlier_attempts.back().start_time_us, 100 + 1000 * kMaxEarlierAttempts);
  back = JobFromJson(Json::parse(DumpJson(JobToJson(j))));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, j);
  EXPECT_EQ(JobToJson(j)["earlier_attempts"][0]["ended_by"], "lost");
  // A stored job can hold no more, nor a run without its GPU-hours or its end.
  Json more = JobToJson(j);
  more["earlier_attempts"].push_back(more["earlier_attempts"][0]);
  EXPECT_EQ(JobFromJson(more).status().message(), "job.earlier_attempts: at most 16 attempts");
  EXPECT_FALSE(JobFromJson(Json::parse(R"({"earlier_attempts": [{"start_time_us": 1, )"
                                       R"("end_time_us": 2, "ended_by": "lost"}]})"))
                   .ok());
  EXPECT_EQ(JobFromJson(Json::parse(R"({"earlier_attempts": [{"start_time_us": 1, )"
                                    R"("end_time_us": 2, "gpu_hours": 1, "ended_by": "x"}]})"))
                .status()
                .message(),
            "job.earlier_attempts[0].ended_by: unknown 'x'; expected preempted, lost or "
            "gpu_failed");
  // A reason is cut to its bound, on a character's first byte.
  Job cut;
  AddEarlierAttempt(cut, {.reason = std::string(kMaxAttemptReason - 1, 'a') + "\xc3\xa9"});
  EXPECT_EQ(cut.earlier_attempts[0].reason, std::string(kMaxAttemptReason - 1, 'a'));
}

// Jobs stored by the previous version kept only their preempted attempts, as
// preempted_attempts without a cause: they read as preempted attempts and are written
// back in the new form.
// An end reported late (docs/health.md): the job's, its task's and an earlier attempt's
// records round-trip (a restarted controller, either store, reads them from the body).
TEST(JobJsonTest, LateEndsRoundTrip) {
  Job j;
  j.id = 7;
  j.state = JobState::kLost;
  j.late_end_time_us = 500;
  j.late_exit_code = 0;
  j.late_reason = "exited with code 0, reported after the loss (the job stays LOST)";
  j.placement = {{"n1", {0}, {"GPU-0"}, 1000}};
  j.tasks.resize(1);
  j.tasks[0].reported_late = true;
  j.tasks[0].exit_code = 0;
  AddEarlierAttempt(j, {.attempt = 1,
                        .ended_by = AttemptEnd::kLost,
                        .start_time_us = 100,
                        .end_time_us = 400,
                        .gpu_hours = 0.25,
                        .reason = "node n1 stopped responding",
                        .gpus = 2,
                        .nodes = {"n1", "n1"},
                        .lost_time_us = 200,
                        .late_reason = "exited with code 3, reported after the loss",
                        .late_ends = {LateTaskEnd::kUnreported, LateTaskEnd::kFailedOrStopped},
                        .late_end_times_us = {0, 400}});
  const Json json = Json::parse(DumpJson(JobToJson(j)));
  EXPECT_EQ(json["late_end_time_us"], 500);
  EXPECT_EQ(json["tasks"][0]["reported_late"], true);
  EXPECT_EQ(json["earlier_attempts"][0]["lost_time_us"], 200);
  EXPECT_EQ(json["earlier_attempts"][0]["late_ends"],
            Json::parse(R"(["unreported", "failed_or_stopped"])"));
  Result<Job> back = JobFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, j);
  Json bad = json;
  bad["earlier_attempts"][0]["gpus"] = -1;
  EXPECT_FALSE(JobFromJson(bad).ok());
  bad = json;
  bad["earlier_attempts"][0]["late_ends"][1] = "ok";
  EXPECT_EQ(JobFromJson(bad).status().message(),
            "job.earlier_attempts[0].late_ends[1]: unknown 'ok'; expected unreported, "
            "succeeded or failed_or_stopped");
  EXPECT_EQ(json["earlier_attempts"][0]["late_end_times_us"], Json::parse("[0, 400]"));
  bad = json;
  bad["earlier_attempts"][0]["late_end_times_us"][1] = -1;
  EXPECT_EQ(JobFromJson(bad).status().message(),
            "job.earlier_attempts[0].late_end_times_us: expected at most 4096 times in "
            "microseconds (0 or more), one per task");
}

// The nodes a requeued job waits for (docs/health.md, "A node cut off from the
// controller") round-trip as `fences`; the lost one whose lease ends last is also written
// as `fence_node` and `fence_until_us`, all a job stored before `fences` had, which reads
// as one fence.
TEST(JobJsonTest, FencesRoundTripAndTheOlderFormReadsAsOneFence) {
  Job j;
  j.id = 7;
  j.state = JobState::kPending;
  j.fences = {{"n1", 500}, {"n2", 700}, {"n3", 0}};
  const Json json = Json::parse(DumpJson(JobToJson(j)));
  EXPECT_EQ(json["fence_node"], "n2");
  EXPECT_EQ(json["fence_until_us"], 700);
  EXPECT_EQ(json["fences"], Json::parse(R"([{"node": "n1", "until_us": 500},)"
                                        R"( {"node": "n2", "until_us": 700},)"
                                        R"( {"node": "n3", "until_us": 0}])"));
  Result<Job> back = JobFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, j);
  // A job stored by an older server: one node.
  Result<Job> old = JobFromJson(
      Json::parse(R"({"state": "PENDING", "fence_node": "n1", "fence_until_us": 500})"));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->fences, (std::vector<NodeFence>{{"n1", 500}}));
  EXPECT_EQ(FenceUntilUs(*old), 500);
  // None written for a job without fences; none lost: no fence_node.
  EXPECT_FALSE(JobToJson(Job{}).contains("fences"));
  Job up_only;
  up_only.fences = {{"n3", 0}};
  EXPECT_FALSE(JobToJson(up_only).contains("fence_node"));
  Json bad = json;
  bad["fences"][1]["node"] = "n1";
  EXPECT_EQ(JobFromJson(bad).status().message(),
            "job.fences[1].node: expected a node name of 1..253 bytes, each node once");
}

TEST(JobJsonTest, PreemptedAttemptsOfAnOlderStoreReadAsEarlierAttempts) {
  Result<Job> old = JobFromJson(
      Json::parse(R"({"preemptions": 1, "preempted_gpu_hours": 4, "preempted_attempts": [)"
                  R"({"start_time_us": 10, "end_time_us": 20, "gpu_hours": 4}]})"));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  ASSERT_EQ(old->earlier_attempts.size(), 1u);
  EXPECT_EQ(old->earlier_attempts[0], (EarlierAttempt{.ended_by = AttemptEnd::kPreempted,
                                                      .start_time_us = 10,
                                                      .end_time_us = 20,
                                                      .gpu_hours = 4}));
  const Json again = JobToJson(*old);
  EXPECT_FALSE(again.contains("preempted_attempts"));
  EXPECT_EQ(JobFromJson(again).value(), *old);
  // Both forms at once would count its attempts twice.
  Json both = again;
  both["preempted_attempts"] = Json::array();
  EXPECT_FALSE(JobFromJson(both).ok());
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
// A name, project or working directory past 64 KiB is refused naming its field (it said
// "job: longer than 65536 bytes").
TEST(JobJsonTest, ALongStringIsRefusedNamingItsField) {
  for (const char* field : {"name", "project", "workdir"}) {
    Json j = Json::object();
    j[field] = std::string(70'000, 'x');
    EXPECT_EQ(JobFromJson(j).status().message(),
              "job." + std::string(field) + ": longer than 65536 bytes")
        << field;
  }
}

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

// --nodelist / --exclude: node names as agents register them; a CPU-only job may name
// them (they bind every task), a name that cannot be a node's or is in both is refused.
TEST(JobJsonTest, NodeListsAreCheckedNamingTheirField) {
  auto err = [](const std::string& text) {
    Result<Job> r = JobFromJson(Json::parse(text));
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_EQ(err(R"({"request": {"nodelist": ["n0", "n1"], "exclude": ["n2"]}})"), "ok");
  EXPECT_EQ(err(R"({"request": {"nodelist": ["node[01-02]"]}})"),
            "job.request: nodelist: 'node[01-02]' is not a node name (1..255 characters, no "
            "spaces, commas or brackets; expand a hostlist like node[01-03] into its names)");
  EXPECT_EQ(err(R"({"request": {"exclude": [""]}})").substr(0, 44),
            "job.request: exclude: '' is not a node name ");
  EXPECT_EQ(err(R"({"request": {"exclude": ["a b"]}})").substr(0, 47),
            "job.request: exclude: 'a b' is not a node name ");
  EXPECT_EQ(err(R"({"request": {"nodelist": ["n0", "n1"], "exclude": ["n1"]}})"),
            "job.request: nodelist, exclude: node 'n1' is in both; leave it out of one of them");
  EXPECT_EQ(err(R"({"request": {"nodelist": "n0"}})").substr(0, 22), "job.request.nodelist: ");
}

// The check that no name is in both lists, on lists of thousands of names: it sorts one
// list (O(n log n) whatever the names), so it finds the one shared name wherever it is.
TEST(JobJsonTest, ANameInBothOfLongListsIsFound) {
  ResourceRequest r;
  for (int i = 0; i < 4096; ++i) {
    r.nodelist.push_back("a" + std::to_string(i));
    r.exclude.push_back("b" + std::to_string(4095 - i));
  }
  EXPECT_TRUE(ValidateRequest(r).ok());
  r.exclude[0] = "a4095";  // the last of --nodelist, the first of --exclude
  EXPECT_EQ(ValidateRequest(r).message(),
            "nodelist, exclude: node 'a4095' is in both; leave it out of one of them");
  r.exclude[0] = "b4095";
  r.exclude.back() = "a0";
  r.exclude.push_back("a17");  // the first of --nodelist in both is named
  EXPECT_EQ(ValidateRequest(r).message(),
            "nodelist, exclude: node 'a0' is in both; leave it out of one of them");
}

// What max-submission-bytes bounds: each string given with its NUL, as execve counts
// argv and envp; fields left empty count nothing.
TEST(SubmissionBytesTest, CountsEachStringGivenWithItsNul) {
  Job j;
  EXPECT_EQ(SubmissionBytes(j), 0);
  j.command = {"python3", "train.py"};   // 8 + 9
  j.env = {{"HOME", "/home/alice"}};     // HOME=/home/alice\0: 17
  j.workdir = "/home/alice";             // 12
  j.mounts = {{"/data", "/mnt", true}};  // 6 + 5
  j.request.gpu_models = {"A100"};       // 5
  j.array = "0-9";                       // 4
  j.request.nodelist = {"n1"};           // 3
  j.request.exclude = {"gpu7"};          // 5
  EXPECT_EQ(SubmissionBytes(j), 8 + 9 + 17 + 12 + 6 + 5 + 5 + 4 + 3 + 5);
  // Server-set state is no part of it.
  Job later = j;
  later.reason = std::string(1000, 'x');
  later.placement = {{"n1", {0}, {"GPU-1"}, 1000}};
  EXPECT_EQ(SubmissionBytes(later), SubmissionBytes(j));
}

}  // namespace
}  // namespace gpupool::jobs

namespace gpupool::jobs {
namespace {

TEST(ArraySpecTest, ParsesFormsAndStopsAtTheBoundItIsGiven) {
  Result<ArraySpec> s = ParseArraySpec("0-9:3,20%2");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->indices, (std::vector<int>{0, 3, 6, 9, 20}));
  EXPECT_EQ(s->max_running, 2);

  // The server's bound, named as the caller says.
  EXPECT_TRUE(ParseArraySpec("0-9", 10).ok());
  s = ParseArraySpec("0-10", 10, "max-array-size");
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(),
            "array '0-10': more than 10 elements (max-array-size); use e.g. 0-99, 0-99%10 (at "
            "most 10 at once), 1,3,5-7 or 0-30:10 (every 10th)");
  EXPECT_NE(ParseArraySpec("0-9%11", 10).status().message().find("the limit after % must be 1..10"),
            std::string::npos);
}

// Issue 25 item 7: ranges were walked whole however often repeated, so a spec of
// ",0-999" repeated (under the 1 MiB request limit) made 80,000 walks of 1,000 indices,
// seconds of the controller's CPU, while adding nothing past the first. Repeats count
// against the bound now.
TEST(ArraySpecTest, RepeatedRangesCountAgainstTheBound) {
  std::string spec = "0-999";
  for (int i = 0; i < 80'000; ++i) spec += ",0-999";
  const auto start = std::chrono::steady_clock::now();
  Result<ArraySpec> s = ParseArraySpec(spec, kDefaultMaxArraySize);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("more than 1001 elements"), std::string::npos);
  EXPECT_EQ(ParseArraySpec("0-600,0-600", kDefaultMaxArraySize).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseArraySpec("0-500,0-499", kDefaultMaxArraySize).ok());
}

TEST(ArraySpecTest, ElementsFindTheirArrayInTheirEnvironment) {
  Job j;
  EXPECT_TRUE(ArrayEnvironment(j).empty());
  j.array = "4-10:3";
  j.array_id = 40;
  j.array_index = 7;
  EXPECT_EQ(ArrayEnvironment(j), (std::map<std::string, std::string>{
                                     {"GPUPOOL_ARRAY_JOB_ID", "40"},
                                     {"GPUPOOL_ARRAY_TASK_ID", "7"},
                                     {"GPUPOOL_ARRAY_TASK_COUNT", "3"},
                                     {"GPUPOOL_ARRAY_TASK_MIN", "4"},
                                     {"GPUPOOL_ARRAY_TASK_MAX", "10"},
                                 }));
}

// Issue 30: a job without --name is named as Slurm names it, after its script or command.
TEST(DefaultJobNameTest, IsTheBaseNameOfTheScriptOrCommand) {
  Job j;
  j.command = {"./jobs/train.sh", "--epochs", "3"};
  EXPECT_EQ(DefaultJobName(j), "train.sh");
  j.command = {"python3", "x.py"};
  EXPECT_EQ(DefaultJobName(j), "python3");
  j.command = {"/usr/bin/env"};
  EXPECT_EQ(DefaultJobName(j), "env");
  j.command = {"dir/"};
  EXPECT_EQ(DefaultJobName(j), "dir");
  j.command = {"/"};
  EXPECT_EQ(DefaultJobName(j), "/");
  j.command = {"a\nb" + std::string(200, 'x')};
  EXPECT_EQ(DefaultJobName(j), "a?b" + std::string(125, 'x'));
  j.command = std::vector<std::string>{};
  EXPECT_EQ(DefaultJobName(j), "");
  j.interactive = "alloc";
  EXPECT_EQ(DefaultJobName(j), "alloc");
}

}  // namespace
}  // namespace gpupool::jobs
