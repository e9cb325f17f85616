#include "cli/client/render.h"

#include <gtest/gtest.h>

#include "common/strings.h"
#include "jobs/job_sort.h"

namespace gpupool::cli {
namespace {

constexpr int64_t kRenderNow = 1'793'491'200'000'000;  // 2026-11-01T00:00:00Z
constexpr int64_t kMin = 60'000'000;

Json Parse(const char* text) { return Json::parse(text); }

TEST(RenderQueueTest, CannedJobs) {
  const Json answer = Parse(R"({"jobs": [
    {"id": 17, "user": "alice", "name": "train", "state": "RUNNING",
     "request": {"gpus": 2, "gpu_milli": 1000, "tasks": 1},
     "submit_time_us": 1793490000000000, "start_time_us": 1793491080000000,
     "placement": [{"node": "gpu1", "gpu_indices": [0, 1], "gpu_uuids": ["GPU-a", "GPU-b"],
                    "gpu_milli": 1000}]},
    {"id": 18, "user": "bob", "name": "nb", "state": "PENDING",
     "request": {"gpus": 1, "gpu_milli": 250},
     "submit_time_us": 1793491170000000,
     "pending_reason": "needs 1 GPU with 0.25 free; every GPU is full", "placement": []},
    {"id": 19, "user": "carol", "name": "", "state": "RUNNING", "cancel_requested": true,
     "request": {"gpus": 1, "gpu_milli": 1000, "gpu_memory_bytes": 21474836480},
     "start_time_us": 1793491197000000,
     "placement": [{"node": "gpu2", "gpu_milli": 500}]},
    {"id": 20, "user": "dave", "name": "gang", "state": "PENDING",
     "request": {"gpus": 2, "tasks": 4}, "submit_time_us": 0},
    {"id": 21, "user": "erin", "state": "ASSIGNED", "request": {"gpus": 0},
     "placement": [{"node": "gpu1"}, {"node": "gpu2"}, {"node": "gpu1"}]}
  ]})");
  EXPECT_EQ(RenderQueue(answer, kRenderNow),
            "ID  USER   NAME   STATE     GPUS  NODES       TIME  REASON\n"
            "17  alice  train  RUNNING      2  gpu1       2m00s\n"
            "18  bob    nb     PENDING   0.25  -            30s  needs 1 GPU with 0.25 free; "
            "every GPU is full\n"
            "19  carol         RUNNING    0.5  gpu2          3s  cancelling\n"
            "20  dave   gang   PENDING    4x2  -              -\n"
            "21  erin          ASSIGNED     0  gpu1,gpu2      -\n");
}

TEST(RenderQueueTest, EmptyAndMalformedAnswersStillRender) {
  EXPECT_EQ(RenderQueue(Parse(R"({"jobs": []})"), kRenderNow),
            "ID  USER  NAME  STATE  GPUS  NODES  TIME  REASON\n");
  // Wrong types read as absent rather than failing: a newer server must not break us.
  EXPECT_EQ(
      RenderQueue(Parse(R"({"jobs": [{"id": "x", "state": 3, "request": []}, 5]})"), kRenderNow),
      "ID  USER  NAME  STATE  GPUS  NODES  TIME  REASON\n"
      " 0                        0  -         -\n"
      " 0                        0  -         -\n");
  EXPECT_EQ(RenderQueue(Parse(R"([1, 2])"), kRenderNow),
            "ID  USER  NAME  STATE  GPUS  NODES  TIME  REASON\n");
}

TEST(RenderJobTest, EveryFieldReadably) {
  const Json job = Parse(R"({"id": 17, "user": "alice", "uid": 1000, "gid": 100,
    "project": "vision", "name": "train", "command": ["/home/alice/run.sh", "--lr", "0.1 x"],
    "env": {"A": "1"}, "workdir": "/home/alice", "image": "pytorch:2",
    "request": {"gpus": 2, "gpu_milli": 1000, "cpu_milli": 4000, "memory_bytes": 17179869184,
                "gpu_models": ["A100", "H100"], "vendor": "nvidia", "min_capability": "8.0",
                "tasks": 1},
    "priority": 5, "time_limit_s": 5400, "requeue": true, "state": "FAILED",
    "submit_time_us": 1793491080000000, "placed_time_us": 1793491110000000,
    "start_time_us": 1793491140000000, "end_time_us": 1793491200000000, "exit_code": 3,
    "placement": [{"node": "gpu1", "gpu_indices": [0, 1], "gpu_uuids": ["GPU-a", "GPU-b"],
                   "gpu_milli": 1000}],
    "pending_reason": "", "reason": "exited with code 3", "attempt": 1,
    "cancel_requested": false, "stdout_path": "/var/log/17.out",
    "stderr_path": "/var/log/17.err"})");
  EXPECT_EQ(RenderJob(job, kRenderNow),
            "Job 17 (train): FAILED\n"
            "  User:       alice (uid 1000, gid 100)\n"
            "  Project:    vision\n"
            "  Command:    /home/alice/run.sh --lr '0.1 x'\n"
            "  Workdir:    /home/alice\n"
            "  Image:      pytorch:2\n"
            "  Env:        A=1\n"
            "  Request:    2 GPUs (model A100 or H100, vendor nvidia, capability >= 8.0), 4 CPU, "
            "16 GiB memory\n"
            "  Priority:   5\n"
            "  Time limit: 1h30m\n"
            "  Requeue:    yes, if its node is lost or a GPU it holds fails\n"
            "  Submitted:  2026-10-31T23:58:00Z\n"
            "  Placed:     2026-10-31T23:58:30Z\n"
            "  Started:    2026-10-31T23:59:00Z\n"
            "  Ended:      2026-11-01T00:00:00Z\n"
            "  Runtime:    1m00s\n"
            "  Exit code:  3\n"
            "  Reason:     exited with code 3\n"
            "  Attempt:    1\n"
            "  Placement:  gpu1: GPU 0,1 (GPU-a, GPU-b)\n"
            "  Stdout:     /var/log/17.out\n"
            "  Stderr:     /var/log/17.err\n");
}

// A requeued job waiting again keeps its last attempt's placement time, which says
// nothing of its next: no Placed line.
TEST(RenderJobTest, APendingJobShowsNoPlacement) {
  const Json job = Parse(R"({"id": 8, "state": "PENDING", "attempt": 1,
    "submit_time_us": 1793491080000000, "placed_time_us": 1793491110000000})");
  EXPECT_EQ(RenderJob(job, kRenderNow).find("Placed"), std::string::npos);
  const Json assigned = Parse(R"({"id": 8, "state": "ASSIGNED", "attempt": 2,
    "submit_time_us": 1793491080000000, "placed_time_us": 1793491110000000})");
  EXPECT_NE(RenderJob(assigned, kRenderNow).find("  Placed:     2026-10-31T23:58:30Z\n"),
            std::string::npos);
}

// Attempts a node could not start (launch_failures) are said, and only when there were.
TEST(RenderJobTest, AttemptsNodesCouldNotStartAreSaid) {
  const Json job = Parse(R"({"id": 8, "state": "PENDING", "attempt": 2, "launch_failures": 2,
    "reason": "requeued: node n1 could not start it: No space left on device"})");
  EXPECT_NE(RenderJob(job, kRenderNow)
                .find("  Attempt:    2\n"
                      "  Not started: 2 times by a node's fault (each put it back in the queue)\n"),
            std::string::npos)
      << RenderJob(job, kRenderNow);
  EXPECT_EQ(RenderJob(Parse(R"({"id": 8, "state": "PENDING", "attempt": 1})"), kRenderNow)
                .find("Not started"),
            std::string::npos);
}

// Why a task was killed (its kill_cause): a one-task job's own line, a gang's per task;
// a task of an older agent (no cause), and one that ended by itself, show none.
TEST(RenderJobTest, AKilledTasksKillCause) {
  const Json one = Parse(R"({"id": 5, "state": "FAILED", "signal": 9,
    "reason": "killed by the kernel's OOM killer: node gpu1 ran out of memory; ended by SIGKILL",
    "placement": [{"node": "gpu1", "gpu_indices": [0]}],
    "tasks": [{"host": "gpu1", "ended": true, "signal": 9, "kill_cause": "oom_node"}]})");
  std::string out = RenderJob(one, kRenderNow);
  EXPECT_NE(out.find("  Reason:     killed by the kernel's OOM killer: node gpu1 ran out of "
                     "memory; ended by SIGKILL\n"
                     "  Kill cause: oom_node\n"),
            std::string::npos)
      << out;
  const Json quiet = Parse(R"({"id": 5, "state": "SUCCEEDED", "exit_code": 0,
    "tasks": [{"ended": true, "exit_code": 0, "kill_cause": "none"}]})");
  EXPECT_EQ(RenderJob(quiet, kRenderNow).find("Kill cause"), std::string::npos);
  const Json old = Parse(R"({"id": 5, "state": "FAILED", "signal": 9,
    "tasks": [{"ended": true, "signal": 9}]})");
  EXPECT_EQ(RenderJob(old, kRenderNow).find("Kill cause"), std::string::npos);
  const Json gang = Parse(R"({"id": 6, "state": "FAILED",
    "placement": [{"node": "n1", "gpu_indices": [0]}, {"node": "n2", "gpu_indices": [0]}],
    "tasks": [{"host": "n1", "ended": true, "cancelled": true, "signal": 15,
               "kill_cause": "stop_request"},
              {"host": "n2", "ended": true, "signal": 9, "kill_cause": "gpu_mem_watch"}]})");
  out = RenderJob(gang, kRenderNow);
  EXPECT_NE(out.find("  Task 0:     n1: GPU 0; stopped, signal 15, kill cause stop_request\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("  Task 1:     n2: GPU 0; ended, signal 9, kill cause gpu_mem_watch\n"),
            std::string::npos)
      << out;
}

// A requeued job's earlier attempts, each with when it ran, its GPU-hours and how it
// ended (a record of the older preempted_attempts form has no number).
TEST(RenderJobTest, EarlierAttempts) {
  const Json job = Parse(R"({"id": 9, "state": "RUNNING", "attempt": 4, "earlier_attempts": [
    {"start_time_us": 1793491080000000, "end_time_us": 1793491140000000, "gpu_hours": 0.5},
    {"attempt": 2, "ended_by": "lost", "start_time_us": 1793491200000000,
     "end_time_us": 1793527200000000, "gpu_hours": 10, "reason": "node n1 stopped responding"},
    {"attempt": 3, "ended_by": "gpu_failed", "start_time_us": 1793527260000000,
     "end_time_us": 1793527320000000, "gpu_hours": 0.25, "reason": "GPU G on node n2 failed"}]})");
  const std::string out = RenderJob(job, kRenderNow);
  EXPECT_NE(out.find("  Earlier run: 2026-10-31T23:58:00Z, ran 1m00s, 0.500 GPU-hours; preempted\n"
                     "  Attempt 2:  2026-11-01T00:00:00Z, ran 10h00m, 10.000 GPU-hours; lost: node "
                     "n1 stopped responding\n"
                     "  Attempt 3:  2026-11-01T10:01:00Z, ran 1m00s, 0.250 GPU-hours; its GPU "
                     "failed: GPU G on node n2 failed\n"
                     "  Attempt:    4\n"),
            std::string::npos)
      << out;
  // Lost, then its end reported late (docs/health.md, "An end reported late").
  const Json late = Parse(R"j({"id": 9, "state": "LOST", "attempt": 1,
    "late_end_time_us": 1793527200000000, "late_exit_code": 0,
    "late_reason": "exited with code 0, reported after the loss (the job stays LOST)",
    "earlier_attempts": [{"attempt": 1, "ended_by": "lost", "start_time_us": 1793491200000000,
     "end_time_us": 1793491260000000, "gpu_hours": 1, "lost_time_us": 1793491230000000,
     "late_reason": "exited with code 3, reported after the loss"}]})j");
  EXPECT_NE(RenderJob(late, kRenderNow)
                .find("  Late end:   2026-11-01T10:00:00Z, exited with code 0, reported after the "
                      "loss (the job stays LOST)\n"),
            std::string::npos)
      << RenderJob(late, kRenderNow);
  EXPECT_NE(RenderJob(late, kRenderNow)
                .find("lost; then it exited with code 3, reported after the loss at "
                      "2026-11-01T00:01:00Z\n"),
            std::string::npos)
      << RenderJob(late, kRenderNow);
  const Json merged = Parse(R"({"id": 9, "attempt": 20, "earlier_attempts": [{"attempt": 1,
    "merged": 3, "ended_by": "preempted", "start_time_us": 1, "end_time_us": 1,
    "gpu_hours": 1}]})");
  EXPECT_NE(RenderJob(merged, kRenderNow).find("  Attempts 1-3: "), std::string::npos)
      << RenderJob(merged, kRenderNow);
}

TEST(RenderJobTest, PendingShareAndGang) {
  const Json job = Parse(R"({"id": 3, "user": "bob", "state": "PENDING",
    "request": {"gpus": 1, "gpu_milli": 250, "cpu_milli": 500},
    "pending_reason": "waiting for a GPU", "signal": 9})");
  const std::string out = RenderJob(job, kRenderNow);
  EXPECT_NE(out.find("Job 3: PENDING\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  Request:    0.25 of 1 GPU, 0.5 CPU\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("  Nodes:"), std::string::npos) << out;  // no choice made: no line
  EXPECT_NE(out.find("  Waiting:    waiting for a GPU\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  Signal:     9\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  Time limit: none\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("Runtime"), std::string::npos) << out;
  const Json run = Parse(R"({"id": 6, "interactive": "run", "pty": true, "command": ["bash"]})");
  EXPECT_NE(RenderJob(run, kRenderNow)
                .find("  Interactive: run: the command runs in task 0 with its client's terminal "
                      "(--pty)\n"),
            std::string::npos)
      << RenderJob(run, kRenderNow);
  const Json gang = Parse(R"({"id": 4, "request": {"gpus": 8, "tasks": 2},
    "placement": [{"node": "a", "gpu_indices": [0]}, {"node": "b", "gpu_milli": 500}]})");
  const std::string g = RenderJob(gang, kRenderNow);
  EXPECT_NE(g.find("8 GPUs, 1 CPU, each of 2 tasks"), std::string::npos) << g;
  EXPECT_NE(g.find("  Task 0:     a: GPU 0\n  Task 1:     b, share 0.5\n"), std::string::npos) << g;
  // With per-task records: each task's host and what happened to it, and the rendezvous.
  const Json tasks = Parse(R"({"id": 5, "request": {"gpus": 1, "tasks": 3}, "master_port": 41000,
    "placement": [{"node": "a"}, {"node": "b"}, {"node": "c"}],
    "tasks": [{"host": "10.0.0.1", "start_time_us": 1, "ended": true, "exit_code": 3},
              {"host": "10.0.0.2", "start_time_us": 1, "ended": true, "cancelled": true,
               "signal": 15},
              {"host": "c"}]})");
  const std::string t = RenderJob(tasks, kRenderNow);
  EXPECT_NE(t.find("  Task 0:     a, host 10.0.0.1; ended, exit code 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("  Task 1:     b, host 10.0.0.2; stopped, signal 15\n"), std::string::npos) << t;
  EXPECT_NE(t.find("  Task 2:     c; not started\n"), std::string::npos) << t;
  EXPECT_NE(t.find("  Rendezvous: 10.0.0.1:41000\n"), std::string::npos) << t;
}

// show names an array's element, and its dependencies, as their user does (12_3; a
// dependency by job_name, by job_id when an older server sends no name).
TEST(RenderJobTest, AnArrayElementAndDependenciesByTheirNames) {
  const Json job = Parse(R"({"id": 9, "array_id": 8, "array_index": 1, "dependencies": [
    {"job_id": 7, "kind": "after-ok", "job_name": "5_3"},
    {"job_id": 5, "kind": "after-any", "job_name": "5"}, {"job_id": 2, "kind": "after-ok"}]})");
  const std::string out = RenderJob(job, kRenderNow);
  EXPECT_EQ(out.rfind("Job 8_1: ", 0), 0u) << out;  // the element itself: ARRAY_INDEX too
  EXPECT_NE(out.find("  Depends:    after-ok 5_3, after-any 5, after-ok 2\n"), std::string::npos)
      << out;
}

// Issue 28: a job being preempted, and one preempted before, in show and queue.
TEST(RenderJobTest, Preemptions) {
  const Json stopping = Parse(R"({"id": 5, "user": "alice", "state": "RUNNING",
    "request": {"gpus": 4}, "preemptible": true, "min_runtime_s": 1800,
    "preempt_grace_s": 60, "preempted_by": 9, "preempt_deadline_s": 1800000000,
    "cancel_requested": true, "checkpoint_done": true})");
  std::string out = RenderJob(stopping, kRenderNow);
  EXPECT_NE(out.find("  Preempted:  by job 9; SIGKILL at 2027-01-15T08:00:00Z (checkpoint done: "
                     "now)\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("Cancel:"), std::string::npos) << out;
  EXPECT_NE(out.find("  Preemptible: yes, min runtime 30m00s, grace 1m00s\n"), std::string::npos)
      << out;
  // A gang's tasks that said it themselves: their own grace ended, the job's goes on.
  Json gang = stopping;
  gang["checkpoint_done"] = false;
  gang["tasks"] = Parse(R"([{}, {"checkpoint_done": true}, {}, {"checkpoint_done": true}])");
  out = RenderJob(gang, kRenderNow);
  EXPECT_NE(out.find("2027-01-15T08:00:00Z (checkpoint done: tasks 1, 3)\n"), std::string::npos)
      << out;
  gang["tasks"][3].erase("checkpoint_done");
  out = RenderJob(gang, kRenderNow);
  EXPECT_NE(out.find("2027-01-15T08:00:00Z (checkpoint done: task 1)\n"), std::string::npos) << out;
  const Json again = Parse(R"({"id": 5, "user": "alice", "state": "PENDING",
    "request": {"gpus": 4}, "pending_reason": "waits for job 9, which preempted it, to start first",
    "preemptions": 2, "preempted_gpu_hours": 1.25})");
  out = RenderJob(again, kRenderNow);
  EXPECT_NE(out.find("  Preemptions: 2, costing 1.250 GPU-hours of work\n"), std::string::npos)
      << out;
  Json queue = Json::object();
  queue["jobs"] = Json::array({stopping, again});
  out = RenderQueue(queue, kRenderNow);
  EXPECT_NE(out.find("PREEMPTED by job 9: stopping"), std::string::npos) << out;
  EXPECT_NE(out.find("to start first [preempted 2x]"), std::string::npos) << out;
}

// A job preempted by an array's element names it as its user does (the server's
// preempted_by_name), not by its store id, in show and queue.
TEST(RenderJobTest, APreemptingArrayElementIsNamedArrayIndex) {
  const Json stopping = Parse(R"({"id": 5, "user": "alice", "state": "RUNNING",
    "request": {"gpus": 4}, "preemptible": true, "preempted_by": 9,
    "preempted_by_name": "7_3", "preempt_deadline_s": 1800000000, "cancel_requested": true})");
  EXPECT_NE(RenderJob(stopping, kRenderNow).find("  Preempted:  by job 7_3; SIGKILL at "),
            std::string::npos)
      << RenderJob(stopping, kRenderNow);
  Json queue = Json::object();
  queue["jobs"] = Json::array({stopping});
  EXPECT_NE(RenderQueue(queue, kRenderNow).find("PREEMPTED by job 7_3: stopping"),
            std::string::npos)
      << RenderQueue(queue, kRenderNow);
}

// An alloc whose command ended keeps cancel_requested (its release): show said "Cancel:
// requested; the job is being stopped" on a FAILED job. Only a running job is being stopped.
TEST(RenderJobTest, ACancelIsBeingStoppedOnlyWhileTheJobRuns) {
  const Json running = Parse(R"({"id": 5, "state": "RUNNING", "cancel_requested": true})");
  EXPECT_NE(
      RenderJob(running, kRenderNow).find("  Cancel:     requested; the job is being stopped"),
      std::string::npos);
  const Json ended = Parse(R"({"id": 5, "state": "FAILED", "cancel_requested": true})");
  EXPECT_EQ(RenderJob(ended, kRenderNow).find("Cancel:"), std::string::npos);
}

TEST(RenderLimitsTest, APreemptibleColumnOnlyWhereSomeEntryHasDefaults) {
  const Json plain = Parse(R"({"default": {"max_queued": 500}, "users": {}, "projects": {}})");
  EXPECT_EQ(RenderLimits(plain).find("PREEMPTIBLE"), std::string::npos);
  const Json qos = Parse(R"({"default": {}, "users": {"alice": {"preemptible": true,
    "min_runtime_s": 1800, "preempt_grace_s": 45}}, "projects": {"ml": {"preemptible": false}}})");
  const std::string out = RenderLimits(qos);
  EXPECT_NE(out.find("PREEMPTIBLE"), std::string::npos) << out;
  EXPECT_NE(out.find("yes, min 30m00s, grace 45s"), std::string::npos) << out;
  EXPECT_NE(out.find("project ml"), std::string::npos) << out;
}

// Associations: MEMBERS and DEFAULT_PROJECT columns only where some entry has them.
TEST(RenderLimitsTest, MembersAndDefaultProjectColumnsOnlyWhereSomeEntryHasThem) {
  const Json plain = Parse(R"({"default": {}, "users": {}, "projects": {"ml": {"max_gpus": 4}}})");
  EXPECT_EQ(RenderLimits(plain).find("MEMBERS"), std::string::npos);
  EXPECT_EQ(RenderLimits(plain).find("DEFAULT_PROJECT"), std::string::npos);
  const Json assoc = Parse(R"({"default": {}, "users": {"alice": {"default_project": "ml"}},
    "projects": {"ml": {"members": ["alice", "bob"]}}})");
  const std::string out = RenderLimits(assoc);
  EXPECT_NE(out.find("MEMBERS"), std::string::npos) << out;
  EXPECT_NE(out.find("DEFAULT_PROJECT"), std::string::npos) << out;
  EXPECT_NE(out.find("alice,bob"), std::string::npos) << out;
  const size_t alice = out.find("user alice");
  ASSERT_NE(alice, std::string::npos);
  EXPECT_NE(out.substr(alice, out.find('\n', alice) - alice).find(" ml"), std::string::npos) << out;
}

TEST(ShellJoinTest, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(ShellJoin({"python", "-c", "print('hi')", "", "a=b"}),
            "python -c 'print('\\''hi'\\'')' '' a=b");
}

// Issue 15 B.1: an array's pending elements share one row, as squeue shows them.
TEST(RenderQueueTest, ArrayElementsPendingTogetherShareARow) {
  const Json answer = Parse(R"({"jobs": [
    {"id": 40, "array_id": 40, "array_index": 0, "array_max_running": 2, "user": "a",
     "state": "RUNNING", "request": {"gpus": 1}},
    {"id": 41, "array_id": 40, "array_index": 1, "array_max_running": 2, "user": "a",
     "state": "PENDING", "pending_reason": "array 40 runs at most 2", "request": {"gpus": 1}},
    {"id": 42, "array_id": 40, "array_index": 2, "array_max_running": 2, "user": "a",
     "state": "PENDING", "request": {"gpus": 1}},
    {"id": 43, "array_id": 40, "array_index": 3, "array_max_running": 2, "user": "a",
     "state": "PENDING", "request": {"gpus": 1}},
    {"id": 44, "array_id": 40, "array_index": 7, "array_max_running": 2, "user": "a",
     "state": "PENDING", "request": {"gpus": 1}},
    {"id": 45, "user": "b", "state": "PENDING", "request": {"gpus": 1}},
    {"id": 46, "array_id": 46, "array_index": 5, "user": "b", "state": "PENDING",
     "request": {"gpus": 1}}]})");
  EXPECT_EQ(RenderQueue(answer, kRenderNow),
            "          ID  USER  NAME  STATE    GPUS  NODES  TIME  REASON\n"
            "        40_0  a           RUNNING     1  -         -\n"
            "40_[1-3,7%2]  a           PENDING     1  -         -  array 40 runs at most 2\n"
            "          45  b           PENDING     1  -         -\n"
            "        46_5  b           PENDING     1  -         -\n");
}

// `gpupool hold 40_[2-3]` hid the hold: the held elements shared the array's pending row
// and its throttle reason. They get rows of their own, as squeue splits an array by reason.
TEST(RenderQueueTest, HeldArrayElementsDoNotShareTheRowOfThoseNotHeld) {
  const Json answer = Parse(R"({"jobs": [
    {"id": 41, "array_id": 40, "array_index": 1, "user": "a", "state": "PENDING",
     "pending_reason": "throttled", "request": {"gpus": 1}},
    {"id": 42, "array_id": 40, "array_index": 2, "user": "a", "state": "PENDING",
     "held_by": "a", "pending_reason": "held by a", "request": {"gpus": 1}},
    {"id": 43, "array_id": 40, "array_index": 3, "user": "a", "state": "PENDING",
     "held_by": "a", "pending_reason": "held by a", "request": {"gpus": 1}},
    {"id": 44, "array_id": 40, "array_index": 4, "user": "a", "state": "PENDING",
     "pending_reason": "throttled", "request": {"gpus": 1}}]})");
  EXPECT_EQ(RenderQueue(answer, kRenderNow),
            "      ID  USER  NAME  STATE    GPUS  NODES  TIME  REASON\n"
            "    40_1  a           PENDING     1  -         -  throttled\n"
            "40_[2-3]  a           PENDING     1  -         -  held by a\n"
            "    40_4  a           PENDING     1  -         -  throttled\n");
}

TEST(RenderNodesTest, FractionsAndModels) {
  const Json answer = Parse(R"js({"nodes": [
    {"name": "gpu1", "state": "draining", "address": "10.0.0.1",
     "last_heartbeat_us": 1793491197000000, "running_jobs": 3, "cpu_milli": 64000,
     "cpu_allocated_milli": 2500, "memory_mib": 257024, "memory_allocated_mib": 12800,
     "drain_reason": "disk swap (root)",
     "gpus": [{"index": 0, "name": "H100", "allocated_milli": 1000,
               "holders": [{"job_id": 41, "array_id": 40, "array_index": 1, "user": "alice",
                            "gpu_milli": 1000}]},
              {"index": 1, "name": "H100", "allocated_milli": 250,
               "holders": [{"job_id": 7, "user": "alice", "gpu_milli": 125},
                           {"other_user": true, "gpu_milli": 125}],
               "health": {"state": "cordoned", "reason": "Xid 95: uncontained ECC error",
                          "evidence": "Xid 95 x1", "since_us": 1, "by": "policy"}},
              {"index": 2, "name": "A100", "allocated_milli": 0}]},
    {"name": "gpu2", "state": "down", "running_jobs": [5, 6], "gpus": []},
    {"name": "gpu3", "state": "up", "health_check_pending": true, "gpus": [
      {"index": 0, "name": "H100", "enforcement": "mps"},
      {"index": 1, "name": "H100", "enforcement": "mps"},
      {"index": 6, "name": "H100", "enforcement": "mps"},
      {"index": 2, "name": "H100", "enforcement": "mps"},
      {"index": 3, "name": "H100", "enforcement": "none"},
      {"index": 4, "name": "H100"},
      {"index": 5, "name": "H100", "enforcement": "mps"},
      {"index": 7, "name": "H100", "enforcement": "none"}]}]})js");
  EXPECT_EQ(RenderNodes(answer, kRenderNow),
            "NODE  STATE     ADDRESS     GPUS    CPUS          MEMORY  RUNNING    SEEN  MODELS\n"
            "gpu1  draining  10.0.0.1  1.25/3  2.5/64  12.5/251.0 GiB        3  3s ago  2x H100, "
            "1x A100\n"
            "gpu2  down      -            0/0     0/0     0.0/0.0 GiB        2   never  -\n"
            "gpu3  up        -            0/8     0/0     0.0/0.0 GiB        0   never  8x H100\n"
            "GPUs held (job, user, share):\n"
            "gpu1 GPU 0: 40_1 alice\n"
            "gpu1 GPU 1: 7 alice 0.125, another user's job 0.125\n"
            "drained:\n"
            "gpu1: disk swap (root)\n"
            "GPU health (docs/health.md):\n"
            "gpu1 GPU 1: cordoned: Xid 95: uncontained ECC error\n"
            "waiting for their health check's first verdict (no new work until it comes):\n"
            "gpu3\n"
            "GPU share enforcement (docs/sharing.md):\n"
            "gpu3 GPUs 0-2,5,6: mps\n"
            "gpu3 GPUs 3,7: none\n");
}

// A GPU in MIG mode: its instances, one a line, with the job holding each as its user
// names it (an array's element ARRAY_INDEX, not its store id; another user's unnamed;
// hostile strings cleaned); both views.
// A GPU whose MIG layout changed under running jobs (docs/sharing.md) says so.
TEST(RenderNodesTest, AGpuHeldByJobsItsLayoutChangedUnder) {
  const Json answer = Parse(R"js({"nodes": [{"name": "n1", "state": "up", "gpus": [
      {"index": 0, "name": "A100", "allocated_milli": 1000, "enforcement": "none",
       "layout_changed_under": [{"job_id": 1, "user": "alice", "gpu_milli": 1000},
                                {"other_user": true, "gpu_milli": 1000}]},
      {"index": 1, "name": "A100", "allocated_milli": 0, "enforcement": "none"}]}]})js");
  const std::string line =
      "GPUs taking no new work (docs/sharing.md):\n"
      "n1 GPU 0: layout changed under running jobs 1, another user's job: held until they end\n";
  const std::string all = RenderNodes(answer, kRenderNow);
  EXPECT_NE(all.find(line), std::string::npos) << all;
  Result<std::string> one = RenderNode(answer, "n1", kRenderNow);
  ASSERT_TRUE(one.ok());
  EXPECT_NE(one->find(line), std::string::npos) << *one;
  EXPECT_EQ(all.find("GPU 1: layout"), std::string::npos);
}

TEST(RenderNodesTest, MigInstancesAndWhoHoldsThem) {
  const Json answer = Parse(R"js({"nodes": [{"name": "gpu4", "state": "up", "gpus": [
      {"index": 0, "name": "A100", "allocated_milli": 375, "enforcement": "mig",
       "mig_devices": [{"uuid": "MIG-a", "profile": "3g.40gb", "memory_total_bytes": 1},
                       {"uuid": "MIG-b", "profile": "2g.20gb\u001b[2J", "job": 12},
                       {"uuid": "MIG-c", "profile": "1g.10gb", "job": 13},
                       {"uuid": "MIG-d", "profile": "1g.10gb", "job": 43, "array_id": 40,
                        "array_index": 3},
                       {"uuid": "MIG-e", "profile": "1g.10gb", "other_user": true}]},
      {"index": 1, "name": "A100", "allocated_milli": 0, "enforcement": "none"}]}]})js");
  const std::string instances =
      "MIG instances, each held whole by one job:\n"
      "gpu4 GPU 0 3g.40gb (MIG-a): free\n"
      "gpu4 GPU 0 2g.20gb [2J (MIG-b): job 12\n"
      "gpu4 GPU 0 1g.10gb (MIG-c): job 13\n"
      "gpu4 GPU 0 1g.10gb (MIG-d): job 40_3\n"
      "gpu4 GPU 0 1g.10gb (MIG-e): another user's job\n";
  const std::string all = RenderNodes(answer, kRenderNow);
  EXPECT_NE(all.find("GPU share enforcement (docs/sharing.md):\ngpu4 GPU 0: mig\n"
                     "gpu4 GPU 1: none\n" +
                     instances),
            std::string::npos)
      << all;
  Result<std::string> one = RenderNode(answer, "gpu4", kRenderNow);
  ASSERT_TRUE(one.ok());
  EXPECT_NE(one->find(instances), std::string::npos) << *one;
  EXPECT_EQ(RenderNodes(Parse(R"({"nodes": [{"name": "n", "state": "up", "gpus": [
                {"index": 0, "name": "A100"}]}]})"),
                        kRenderNow)
                .find("MIG"),
            std::string::npos);
}

// A GPU in MIG mode out of service (cordoned, failed, its layout changed under jobs): its
// idle instances are not available, saying why, in both views; a held one names its job.
TEST(RenderNodesTest, TheIdleInstancesOfAGpuOutOfServiceAreNotFree) {
  const Json answer = Parse(R"js({"nodes": [{"name": "gpu4", "state": "up", "gpus": [
      {"index": 0, "name": "A100", "allocated_milli": 125, "enforcement": "mig",
       "out_of_service": "cordoned: Xid 95: uncontained ECC error",
       "health": {"state": "cordoned", "reason": "Xid 95: uncontained ECC error"},
       "mig_devices": [{"uuid": "MIG-a", "profile": "3g.40gb", "out_of_service": true},
                       {"uuid": "MIG-b", "profile": "1g.10gb", "job": 12}]},
      {"index": 1, "name": "A100", "allocated_milli": 0, "enforcement": "mig",
       "mig_devices": [{"uuid": "MIG-c", "profile": "7g.80gb"}]}]}]})js");
  const std::string instances =
      "MIG instances, each held whole by one job:\n"
      "gpu4 GPU 0 3g.40gb (MIG-a): not available: GPU cordoned: Xid 95: uncontained ECC error\n"
      "gpu4 GPU 0 1g.10gb (MIG-b): job 12\n"
      "gpu4 GPU 1 7g.80gb (MIG-c): free\n";
  const std::string all = RenderNodes(answer, kRenderNow);
  EXPECT_NE(all.find(instances), std::string::npos) << all;
  Result<std::string> one = RenderNode(answer, "gpu4", kRenderNow);
  ASSERT_TRUE(one.ok());
  EXPECT_NE(one->find(instances), std::string::npos) << *one;
}

TEST(RenderNodeTest, OneNodeInFullWithItsGpusHealth) {
  const Json answer = Parse(R"js({"nodes": [
    {"name": "gpu0", "state": "up", "gpus": []},
    {"name": "gpu1", "state": "draining", "address": "10.0.0.1", "protocol": "1.3",
     "last_heartbeat_us": 1793491197000000, "running_jobs": 3, "cpu_milli": 64000,
     "cpu_allocated_milli": 2500, "memory_mib": 257024, "memory_allocated_mib": 12800,
     "drain_reason": "health: GPU GPU-b Xid 79: GPU has fallen off the bus",
     "health_check_pending": true,
     "gpus": [{"index": 0, "name": "H100", "uuid": "GPU-a", "memory_total_bytes": 85899345920,
               "allocated_milli": 500, "enforcement": "mps",
               "holders": [{"job_id": 12, "user": "alice", "gpu_milli": 500}],
               "telemetry": {"util_pct": 57, "mem_used_mib": 2048, "temp_c": 41, "power_w": 250.4,
                             "xid_errors": 0, "retired_pages": 2, "retired_pages_pending": true,
                             "remapped_rows": 0, "hw_slowdown": false, "ecc_uncorrected": 1}},
              {"index": 1, "name": "H100", "uuid": "GPU-b", "memory_total_bytes": 85899345920,
               "allocated_milli": 0,
               "health": {"state": "failed", "reason": "Xid 79: fallen off the bus; needs service",
                          "evidence": "Xid 79 x1", "since_us": 1793491200000000, "by": "policy",
                          "strikes": 3}}]}]})js");
  Result<std::string> text = RenderNode(answer, "gpu1", kRenderNow);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(
      *text,
      "Node gpu1: draining, address 10.0.0.1, protocol 1.3, last seen 3s ago\n"
      "CPUs 2.5/64, memory 12.5/251.0 GiB, running jobs 3\n"
      "Drained: health: GPU GPU-b Xid 79: GPU has fallen off the bus (`gpupool node resume "
      "gpu1` ends it)\n"
      "Health check: its first verdict is still to come; no new work until it does\n"
      "GPU  MODEL  MEMORY  ALLOCATED  ENFORCEMENT  HEALTH   UTIL     USED  TEMP  POWER  LAST XID  "
      "HELD BY\n"
      "  0  H100   80 GiB        0.5  mps          healthy   57%  2.0 GiB  41 C  250 W         0  "
      "12 alice 0.5\n"
      "  1  H100   80 GiB          0  -            failed      -        -     -      -         -  "
      "-\n"
      "GPU health (docs/health.md):\n"
      "GPU 0 hardware: 2 retired pages, a page retirement waits for a reset, 1 uncorrected ECC "
      "error\n"
      "GPU 1 (GPU-b): failed since 2026-11-01T00:00:00Z by policy: Xid 79: fallen off the bus; "
      "needs service (evidence: Xid 79 x1); strikes 3 of 3\n");
  Result<std::string> none = RenderNode(answer, "gpu9", kRenderNow);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no node 'gpu9'"), std::string::npos);
  EXPECT_EQ(RenderNode(answer, "gpu0", kRenderNow)->find("Disk:"), std::string::npos)
      << "no report, no line";
}

// The agent's disk watch (docs/health.md): the room left and, under pressure, why.
TEST(RenderNodeTest, TheDiskWatchsReport) {
  const Json answer = Parse(R"js({"nodes": [
    {"name": "gpu0", "state": "up", "gpus": [],
     "disk": {"path": "/var/lib/gpupool/agent", "pressure": false, "reason": "",
              "free_bytes": 53687091200, "total_bytes": 107374182400}},
    {"name": "gpu1", "state": "drained", "gpus": [],
     "drain_reason": "disk pressure: /v has 12 MiB free of 50 GiB, below 1 GiB",
     "disk": {"path": "/v", "pressure": true, "reason": "/v has 12 MiB free of 50 GiB, below 1 GiB",
              "free_bytes": 12582912, "total_bytes": 53687091200}}]})js");
  Result<std::string> room = RenderNode(answer, "gpu0", kRenderNow);
  ASSERT_TRUE(room.ok()) << room.status().ToString();
  EXPECT_NE(room->find("\nDisk: /var/lib/gpupool/agent: 50 GiB free of 100 GiB\n"),
            std::string::npos)
      << *room;
  Result<std::string> full = RenderNode(answer, "gpu1", kRenderNow);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_NE(full->find("\nDisk: /v: 12 MiB free of 50 GiB; under pressure: /v has 12 MiB free "
                       "of 50 GiB, below 1 GiB\n"),
            std::string::npos)
      << *full;
}

// A node that stopped answering, while its lease runs and once it ran out (docs/health.md).
TEST(RenderNodeTest, ALostNodesLease) {
  const Json answer = Parse(R"js({"nodes": [
    {"name": "gpu0", "state": "down", "gpus": [], "lease_until_us": 1793491500000000},
    {"name": "gpu1", "state": "down", "gpus": [], "lease_until_us": 1793491100000000},
    {"name": "gpu2", "state": "up", "gpus": []}]})js");
  Result<std::string> running = RenderNode(answer, "gpu0", kRenderNow);
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  EXPECT_NE(running->find("\nLease: its --requeue and preemptible jobs are stopped there by "
                          "2026-11-01T00:05:00Z (in 5m00s), and start elsewhere only then, or "
                          "once it registers again\n"),
            std::string::npos)
      << *running;
  Result<std::string> over = RenderNode(answer, "gpu1", kRenderNow);
  ASSERT_TRUE(over.ok()) << over.status().ToString();
  EXPECT_NE(over->find("\nLease: ran out at 2026-10-31T23:58:20Z; its --requeue and preemptible "
                       "jobs may start elsewhere\n"),
            std::string::npos)
      << *over;
  Result<std::string> up = RenderNode(answer, "gpu2", kRenderNow);
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(up->find("Lease"), std::string::npos) << *up;
  const std::string all = RenderNodes(answer, kRenderNow);
  EXPECT_NE(all.find("leases of nodes that stopped answering (docs/health.md):\ngpu0: its "
                     "--requeue and preemptible jobs are stopped there by 2026-11-01T00:05:00Z"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("\ngpu1: ran out at 2026-10-31T23:58:20Z"), std::string::npos) << all;
  EXPECT_EQ(all.find("gpu2: "), std::string::npos) << all;
}

TEST(RenderUsageTest, RowsAndTotal) {
  const Json answer = Parse(R"({"since_us": 1790899200000000, "until_us": 1793491200000000,
    "by": "project", "rows": [{"key": "vision", "gpu_hours": 12.5, "jobs": 4},
                              {"key": "", "gpu_hours": 0.25, "jobs": 1}]})");
  EXPECT_EQ(RenderUsage(answer),
            "GPU-hours allocated from 2026-10-02T00:00:00Z to 2026-11-01T00:00:00Z, by project\n"
            "PROJECT  GPU-HOURS  JOBS\n"
            "vision       12.50     4\n"
            "(none)        0.25     1\n"
            "TOTAL        12.75     5\n");
}

// By project, a user's jobs without a project are their own fair-share group, named after
// them (own_group): marked so, with its weight and share; the CSV says so in a last column.
TEST(RenderUsageTest, AUsersOwnGroupIsMarked) {
  const Json answer = Parse(R"({"since_us": 1790899200000000, "until_us": 1793491200000000,
    "by": "project", "fair_share_by": "project",
    "rows": [{"key": "vision", "gpu_hours": 12.5, "jobs": 4, "fair_share": 2, "norm_share": 0.5},
             {"key": "alice", "own_group": true, "gpu_hours": 0.25, "jobs": 1, "fair_share": 1,
              "norm_share": 0.25},
             {"key": "bob", "own_group": true, "gpu_hours": 0.25, "jobs": 1, "fair_share": 1,
              "norm_share": 0.25}]})");
  EXPECT_EQ(RenderUsage(answer),
            "GPU-hours allocated from 2026-10-02T00:00:00Z to 2026-11-01T00:00:00Z, by project "
            "(this pool's fair-share groups)\n"
            "PROJECT             GPU-HOURS  JOBS  FAIR_SHARE  NORM_SHARE\n"
            "vision                  12.50     4           2       0.500\n"
            "alice (user's own)       0.25     1           1       0.250\n"
            "bob (user's own)         0.25     1           1       0.250\n"
            "TOTAL                   13.00     6\n");
  EXPECT_EQ(RenderUsageCsv(answer),
            "project,gpu_hours,used_gpu_hours,efficiency,jobs,own_group\n"
            "vision,12.500000,0.000000,0.000000,4,0\n"
            "alice,0.250000,0.000000,0.000000,1,1\n"
            "bob,0.250000,0.000000,0.000000,1,1\n");
}

// Rows of the pool's fair-share groups carry their weight and normalised share (sshare's
// RawShares and NormShares): two more columns.
TEST(RenderUsageTest, FairShareGroupsShowTheirWeightAndNormalisedShare) {
  const Json answer = Parse(R"({"since_us": 1790899200000000, "until_us": 1793491200000000,
    "by": "user", "fair_share_by": "user",
    "rows": [{"key": "alice", "gpu_hours": 12.5, "jobs": 4, "fair_share": 2, "norm_share": 0.6666667},
             {"key": "bob", "gpu_hours": 0.25, "jobs": 1, "fair_share": 1, "norm_share": 0.3333333}]})");
  EXPECT_EQ(RenderUsage(answer),
            "GPU-hours allocated from 2026-10-02T00:00:00Z to 2026-11-01T00:00:00Z, by user\n"
            "USER   GPU-HOURS  JOBS  FAIR_SHARE  NORM_SHARE\n"
            "alice      12.50     4           2       0.667\n"
            "bob         0.25     1           1       0.333\n"
            "TOTAL      12.75     5\n");
}

TEST(RenderTokensAndWhoamiTest, Canned) {
  const int64_t now = 1793491200000000 + 3600'000'000;  // an hour after the first was made
  EXPECT_EQ(RenderTokens(Parse(R"({"tokens": [{"id": 2, "user": "alice", "kind": "user",
              "created_us": 1793491200000000}, {"id": "n1", "user": "gpu7", "kind": "node"},
              {"id": "m1", "user": "prom", "kind": "metrics", "created_us": 1793491200000000,
               "expires_us": 1793491200000000, "last_used_us": 1793494620000000},
              {"id": "u2", "user": "bob", "kind": "user", "created_us": 1793491200000000,
               "expires_us": 1794355200000000, "last_used_us": 1793491200000000}]})"),
                         now),
            "ID  KIND     USER/NODE  CREATED               EXPIRES                         "
            "LAST USED\n"
            "2   user     alice      2026-11-01T00:00:00Z  never                           "
            "never\n"
            "n1  node     gpu7       -                     never                           "
            "never\n"
            "m1  metrics  prom       2026-11-01T00:00:00Z  2026-11-01T00:00:00Z (expired)  "
            "3m00s ago\n"
            "u2  user     bob        2026-11-01T00:00:00Z  2026-11-11T00:00:00Z            "
            "1h00m ago\n");
  EXPECT_EQ(RenderWhoami(Parse(R"({"user": "alice", "uid": 1000, "admin": false})")),
            "alice (uid 1000)\n");
  EXPECT_EQ(RenderWhoami(Parse(R"({"user": "root", "uid": 0, "admin": true})")),
            "root (uid 0), admin\n");
}

TEST(RenderControllersTest, LeaderStandbysAndALoneController) {
  EXPECT_EQ(RenderControllers(Parse(R"({"leader": {"id": "c1:8421:10-aa", "address":
              "http://c1:8421", "epoch": 3, "expires_in_ms": 4210}, "lease_ms": 5000,
              "controllers": [{"id": "c1:8421:10-aa", "address": "http://c1:8421", "role":
              "leader", "seen_ms_ago": 420, "started_ms_ago": 7200000}, {"id": "c2:8421:9-bb",
              "address": "http://c2:8421", "role": "standby", "seen_ms_ago": 1610,
              "started_ms_ago": 65000}]})")),
            "Leader: c1:8421:10-aa at http://c1:8421, epoch 3, lease 4210 ms left\n"
            "CONTROLLER     ADDRESS         ROLE     SEEN    UP\n"
            "c1:8421:10-aa  http://c1:8421  leader   0s ago  2h00m\n"
            "c2:8421:9-bb   http://c2:8421  standby  1s ago  1m05s\n");
  EXPECT_EQ(RenderControllers(Parse(R"({"leader": null, "controllers": [{"id": "c2", "address":
              "http://c2:8421", "role": "standby", "seen_ms_ago": 0, "started_ms_ago": 0}]})")),
            "No controller leads at the moment (a standby takes over when the lease ends).\n"
            "CONTROLLER  ADDRESS         ROLE     SEEN    UP\n"
            "c2          http://c2:8421  standby  0s ago  0s\n");
  EXPECT_EQ(RenderControllers(Parse(R"({"leader": null, "controllers": [], "note": "alone"})")),
            "One controller: alone\n");
}

}  // namespace
}  // namespace gpupool::cli

namespace gpupool::cli {
namespace {

// Issue 17: utilisation in show, idle flags in queue, used GPU-hours in usage.
TEST(RenderTelemetryTest, ShowQueueAndUsage) {
  const int64_t now_us = 1793491200000000;
  const Json job = Parse(R"({"id": 7, "user": "alice", "state": "RUNNING",
    "start_time_us": 1793487600000000, "request": {"gpus": 1},
    "gpu_util": {"mean_pct": 41.25, "peak_pct": 97, "peak_mem_mib": 30720,
                 "used_gpu_hours": 0.41, "idle": true, "idle_since_ms": 1793489400000}})");
  const std::string shown = RenderJob(job, now_us);
  EXPECT_NE(shown.find("GPU util:   mean 41%, peak 97%, peak memory 30.0 GiB, used 0.41 GPU-hours"),
            std::string::npos)
      << shown;
  EXPECT_NE(shown.find("Idle:"), std::string::npos) << shown;
  Json answer = Json::object();
  answer["jobs"] = Json::array({job});
  const std::string queue = RenderQueue(answer, now_us);
  EXPECT_NE(queue.find("IDLE: GPUs unused for 30m"), std::string::npos) << queue;
  // A job that ended is not flagged, whatever its last figures said.
  answer["jobs"][0]["state"] = "SUCCEEDED";
  EXPECT_EQ(RenderQueue(answer, now_us).find("IDLE"), std::string::npos);

  const Json usage = Parse(R"({"since_us": 1790899200000000, "until_us": 1793491200000000,
    "by": "user", "rows": [{"key": "alice", "gpu_hours": 10, "used_gpu_hours": 4.5,
    "efficiency": 0.45, "jobs": 3}, {"key": "b,c", "gpu_hours": 0, "used_gpu_hours": 0,
    "efficiency": 0, "jobs": 1}]})");
  EXPECT_EQ(RenderUsage(usage),
            "GPU-hours allocated from 2026-10-02T00:00:00Z to 2026-11-01T00:00:00Z, by user\n"
            "USER   GPU-HOURS  USED  EFFICIENCY  JOBS\n"
            "alice      10.00  4.50         45%     3\n"
            "b,c         0.00  0.00           -     1\n"
            "TOTAL      10.00  4.50         45%     4\n");
  EXPECT_EQ(RenderUsageCsv(usage),
            "user,gpu_hours,used_gpu_hours,efficiency,jobs\n"
            "alice,10.000000,4.500000,0.450000,3\n"
            "\"b,c\",0.000000,0.000000,0.000000,1\n");
  // A pool whose fair share is by project (server --fair-by project) says so.
  Json by_project = usage;
  by_project["fair_share_by"] = "project";
  EXPECT_NE(RenderUsage(by_project)
                .find(", by user (this pool's fair share is by project: "
                      "--by project)\n"),
            std::string::npos)
      << RenderUsage(by_project);
  by_project["by"] = "project";
  EXPECT_NE(RenderUsage(by_project).find(", by project (this pool's fair-share groups)\n"),
            std::string::npos)
      << RenderUsage(by_project);
}

// Issue 30: `queue --format` takes fields by name, in any case, and names the unknown one.
TEST(QueueFormatTest, ParsesNamesAndRefusesUnknownOnes) {
  Result<std::vector<std::string>> f = ParseQueueFields("ID, Name,state,,start");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f, (std::vector<std::string>{"id", "name", "state", "start"}));
  f = ParseQueueFields("id,nmae");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "--format id,nmae: unknown field 'nmae'; the fields are id,user,name,state,gpus,"
            "nodes,time,runtime,wait,reason,project,priority,tasks,cpus,memory,time_limit,"
            "submitted,start,ended,exit,command,workdir");
  EXPECT_FALSE(ParseQueueFields(" , ").ok());
  EXPECT_NE(QueueFieldsHelp().find("  start: start time, or the scheduler's planned start"),
            std::string::npos);
}

// The fields as columns, arrays grouped as in the default view; START says "N/A" for a
// pending job the scheduler has no plan for (with the server's note when it gives one).
TEST(QueueFormatTest, ColumnsInTheOrderGiven) {
  const Json answer = Parse(R"({"jobs": [
    {"id": 30, "name": "big", "state": "PENDING", "project": "vision", "priority": 5,
     "request": {"gpus": 8, "cpu_milli": 500, "memory_bytes": 17179869184, "tasks": 2},
     "submit_time_us": 1793490000000000, "start_estimate_us": 1793494920000000,
     "time_limit_s": 7200, "command": ["python3", "train.py", "--lr", "0.1 x"],
     "workdir": "/home/a"},
    {"id": 31, "array_id": 31, "array_index": 0, "state": "PENDING", "request": {}},
    {"id": 32, "array_id": 31, "array_index": 1, "state": "PENDING", "request": {}},
    {"id": 33, "state": "FAILED", "start_time_us": 1793487600000000,
     "end_time_us": 1793487660000000, "exit_code": 3, "request": {}},
    {"id": 34, "state": "CANCELLED", "signal": 15, "request": {}}]})");
  Result<std::vector<std::string>> f = ParseQueueFields(
      "id,name,project,priority,tasks,cpus,memory,time_limit,start,exit,command,workdir");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(RenderQueue(answer, kRenderNow, *f),
            "      ID  NAME  PROJECT  PRIORITY  TASKS  CPUS  MEMORY  TIME_LIMIT  START           "
            "                      EXIT  COMMAND                        WORKDIR\n"
            "      30  big   vision          5      2   0.5  16 GiB       2h00m  2026-11-01T01:02"
            ":00Z (in 1h02m)          -  python3 train.py --lr '0.1 x'  /home/a\n"
            "31_[0-1]                        0      1     1       -        none  N/A             "
            "                         -\n"
            "      33                        0      1     1       -        none  2026-10-31T23:00"
            ":00Z                     3\n"
            "      34                        0      1     1       -        none  -               "
            "                 signal 15\n");
  EXPECT_EQ(RenderQueue(answer, kRenderNow, StartQueueFields()).substr(0, 50),
            "      ID  USER  NAME  STATE      GPUS  START      ");
  EXPECT_EQ(RenderQueue(answer, kRenderNow), RenderQueue(answer, kRenderNow, DefaultQueueFields()));
  const Json noted = Parse(R"({"jobs": [{"id": 35, "state": "PENDING", "request": {},
    "start_estimate_note": "a job in its way has no time limit"}]})");
  EXPECT_EQ(RenderQueue(noted, kRenderNow, {"id", "start"}),
            "ID  START\n35  N/A (a job in its way has no time limit)\n");
}

// `--sort runtime` worked and `--format runtime` was refused: every field the list sorts
// by is a column too, and runtime and wait show what they sort by.
TEST(QueueFormatTest, EverySortFieldIsAColumn) {
  for (const std::string& name : Split(jobs::JobSortFieldList(), ',')) {
    EXPECT_TRUE(ParseQueueFields(std::string(Trim(name))).ok()) << name;
  }
  const Json answer = Parse(R"({"jobs": [
    {"id": 1, "state": "PENDING", "submit_time_us": 1793487600000000, "request": {}},
    {"id": 2, "state": "RUNNING", "submit_time_us": 1793487600000000,
     "start_time_us": 1793487660000000, "request": {}},
    {"id": 3, "state": "SUCCEEDED", "submit_time_us": 1793487600000000,
     "start_time_us": 1793487660000000, "end_time_us": 1793487780000000, "request": {}}]})");
  Result<std::vector<std::string>> f = ParseQueueFields("id,runtime,wait");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(RenderQueue(answer, kRenderNow, *f),
            "ID  RUNTIME   WAIT\n"
            " 1        -  1h00m\n"
            " 2   59m00s  1m00s\n"
            " 3    2m00s  1m00s\n");
}

// Issue 30: a user's row shows what it leaves to the default; unknown users never reach it.
TEST(RenderLimitsTest, AUsersRowShowsWhatItInherits) {
  const Json answer = Parse(R"({"default": {"max_queued": 500},
    "users": {"alice": {"max_gpus": 8}}, "projects": {"vision": {"max_gpus": 16}}})");
  EXPECT_EQ(RenderLimits(answer),
            "FOR                   MAX_GPUS  MAX_RUNNING  MAX_QUEUED\n"
            "every user (default)         -            -         500\n"
            "user alice                   8      default     default\n"
            "project vision              16            -           -\n");
}

// docs/monitoring.md: `gpupool nodes` shows each GPU's latest sample where there is one.
TEST(RenderNodesTest, EachGpusLatestSample) {
  const Json answer = Parse(R"js({"nodes": [
    {"name": "gpu1", "state": "up", "gpus": [
      {"index": 0, "name": "H100", "allocated_milli": 1000,
       "telemetry": {"at_ms": 1, "util_pct": 97.4, "mem_used_mib": 72909, "mem_total_mib": 81559,
                     "power_w": 612.2, "temp_c": 66, "xid_count": 0}},
      {"index": 1, "name": "H100", "allocated_milli": 250, "telemetry": {"at_ms": 1}}]},
    {"name": "gpu2", "state": "down", "gpus": [{"index": 0, "name": "H100"}]}]})js");
  const std::string shown = RenderNodes(answer, kRenderNow);
  EXPECT_NE(shown.find("GPUs, latest sample:\n"
                       "NODE  GPU  ALLOC  UTIL         MEMORY  POWER  TEMP  XIDS\n"
                       "gpu1    0      1   97%  71.2/79.6 GiB  612 W  66 C     0\n"
                       "gpu1    1   0.25     -              -      -     -     -\n"),
            std::string::npos)
      << shown;
  EXPECT_EQ(shown.find("gpu2    0"), std::string::npos) << shown;
}

// --nodelist / --exclude show on a line of their own, a long list cut (--json has it all).
TEST(RenderJobTest, TheJobsNodeChoiceIsShown) {
  Json job = Parse(R"({"id": 3, "user": "alice", "state": "PENDING", "command": ["true"],
    "request": {"gpus": 0, "cpu_milli": 1000, "nodelist": ["n0", "n1"], "exclude": ["gpu7"]}})");
  std::string out = RenderJob(job, kRenderNow);
  EXPECT_NE(out.find("  Nodes:      only on n0, n1 (--nodelist); not on gpu7 (--exclude)\n"),
            std::string::npos)
      << out;
  job["request"].erase("nodelist");
  for (int i = 0; i < 20; ++i) job["request"]["exclude"].push_back("x" + std::to_string(i));
  out = RenderJob(job, kRenderNow);
  EXPECT_NE(out.find("  Nodes:      not on gpu7, x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, "
                     "x12, x13, x14 and 5 more (--exclude)\n"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace gpupool::cli
