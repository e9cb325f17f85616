// End to end (client_e2e_test.h): what cancel says when it cancels nothing new, or is
// refused another user's jobs.

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cli/client/client_e2e_test.h"

namespace gpupool::cli {
namespace {

TEST_F(ClientE2eTest, CancelOfAnotherUsersJobsSaysCancelNotList) {
  Serve([](const HttpRequest&) {
    return JsonAnswer(403, R"({"error": "only admins may list other users' jobs"})");
  });
  RunResult r = Run({"cancel", "--user", "bob"});
  EXPECT_EQ(r.code, 4);
  EXPECT_EQ(r.err, "gpupool: cancel --user bob: only admins may cancel other users' jobs\n");
  EXPECT_EQ(Requests().size(), 1u);     // the list only: nothing cancelled
  r = Run({"queue", "--user", "bob"});  // queue does list: the server's words fit
  EXPECT_EQ(r.code, 4);
  EXPECT_EQ(r.err, "gpupool: only admins may list other users' jobs\n");
}

// `cancel -n "$NAME"` with NAME unset cancelled every job of the caller (the empty name
// was dropped from the list's query). An empty value of any selector is refused, before
// any request, naming its option; `queue` alike.
TEST_F(ClientE2eTest, AnEmptySelectorValueIsRefusedNotEveryJob) {
  Serve([](const HttpRequest&) { return JsonAnswer(200, R"({"jobs": []})"); });
  const std::string unset = " (an unset shell variable?)";
  for (const char* cmd : {"cancel", "queue"}) {
    RunResult r = Run({cmd, "-n", ""});
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_EQ(r.err,
              "gpupool: --name: a job name is empty" + unset + "; give job names as train,eval\n");
    r = Run({cmd, "-u", "alice", "--name", "train, "});
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_EQ(r.err,
              "gpupool: --name: a job name is empty" + unset + "; give job names as train,eval\n");
    r = Run({cmd, "-u", ""});
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_EQ(r.err, "gpupool: --user: the user name is empty" + unset + "; give a user name\n");
    for (const char* states : {"", "PENDING, "}) {
      r = Run({cmd, "-t", states});
      EXPECT_EQ(r.code, 2) << cmd << " -t '" << states << "'";
      EXPECT_EQ(r.err, "gpupool: --state: a state is empty" + unset +
                           "; give states as PENDING,RUNNING\n");
    }
  }
  EXPECT_TRUE(Requests().empty());
  RunResult r = Run({"cancel", "-n", "train"});  // a name still selects
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(Requests().size(), 1u);
  EXPECT_EQ(Requests()[0].query.at("name"), "train");
}

// Slurm's state names (squeue -t COMPLETED, -t PD) were refused without their mapping;
// those with one state here select it.
TEST_F(ClientE2eTest, SlurmStateNamesSelectTheirStates) {
  Serve([](const HttpRequest&) { return JsonAnswer(200, R"({"jobs": []})"); });
  RunResult r = Run({"queue", "-t", "completed,PD,r,CA,F,TO,NODE_FAIL"});
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(Requests().size(), 1u);
  EXPECT_EQ(Requests()[0].query.at("state"),
            "SUCCEEDED,PENDING,RUNNING,CANCELLED,FAILED,TIMEOUT,LOST");
  r = Run({"cancel", "-t", "CD"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --state CD: ended jobs cannot be cancelled; use PENDING, ASSIGNED "
            "or RUNNING\n");
  r = Run({"queue", "-t", "CG"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --state CG: unknown state; use PENDING, ASSIGNED, RUNNING, SUCCEEDED, "
            "FAILED, CANCELLED, TIMEOUT or LOST (or Slurm's PD, R, CD/COMPLETED, F, CA, TO, "
            "NF/NODE_FAIL)\n");
}

// A second cancel of an array while its running elements stop: said so, not counted again
// as running elements cancelled (as scancel, it is no error).
TEST_F(ClientE2eTest, ARepeatedArrayCancelCountsOnlyWhatItCancelled) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/jobs/14/cancel") {  // every running element is stopping already
      return JsonAnswer(200, R"({"job": {"state": "RUNNING"}, "array_cancelled": 7,
        "array": {"id": 14, "elements": 10, "queued": 0, "running": 0, "stopping": 7}})");
    }
    return JsonAnswer(200, R"({"job": {"state": "RUNNING"}, "array_cancelled": 6,
        "array": {"id": 15, "elements": 6, "queued": 3, "running": 1, "stopping": 2}})");
  });
  RunResult r = Run({"cancel", "14", "15"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "Array 14 is already cancelled: 7 running elements are being stopped (3 had "
            "already ended)\n"
            "Cancelled array 15: 3 queued and 1 running elements (the running ones are being "
            "stopped; 2 more were already being stopped)\n");
}

// The docs audit: "gpupool: job 3: job 3 has already ended". A refusal that names the job
// (or the array) says its id once; one that does not (another job's id that merely starts
// the same, a refused body) is told apart by the job's name in front. The same for hold,
// release and checkpoint-done.
TEST_F(ClientE2eTest, ARefusalNamesTheJobOnce) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/jobs/3/cancel") return JsonAnswer(404, R"js({"error": "no job 3"})js");
    if (r.path == "/v1/jobs/4/cancel") {
      return JsonAnswer(409, R"js({"error": "array 4 has already ended: none of its 2 elements )js"
                             R"js(is queued or running"})js");
    }
    if (r.path == "/v1/jobs/5_1/cancel") {
      return JsonAnswer(409, R"js({"error": "job 5_1 has already ended (SUCCEEDED)"})js");
    }
    if (r.path == "/v1/jobs/6/cancel") {
      return JsonAnswer(409, R"js({"error": "job 61 holds it; job 6_2 too"})js");
    }
    if (r.path == "/v1/jobs/9/checkpoint-done") {
      return JsonAnswer(409, R"js({"error": "job 9 is SUCCEEDED and not being preempted"})js");
    }
    if (r.path == "/v1/jobs/9/release") {
      return JsonAnswer(409, R"js({"error": "job 9 has ended (SUCCEEDED); only pending jobs are )js"
                             R"js(released"})js");
    }
    return JsonAnswer(400, R"js({"error": "request body: expected a JSON object"})js");
  });
  RunResult r = Run({"cancel", "3", "4", "5_1", "6", "7"});
  EXPECT_EQ(r.code, 3);  // the first failure's: not found
  EXPECT_EQ(r.err,
            "gpupool: no job 3\n"
            "gpupool: array 4 has already ended: none of its 2 elements is queued or running\n"
            "gpupool: job 5_1 has already ended (SUCCEEDED)\n"
            "gpupool: job 6: job 61 holds it; job 6_2 too\n"
            "gpupool: job 7: request body: expected a JSON object\n");
  r = Run({"checkpoint-done", "9"});
  EXPECT_EQ(r.err, "gpupool: job 9 is SUCCEEDED and not being preempted\n");
  r = Run({"release", "9"});
  EXPECT_EQ(r.err, "gpupool: job 9 has ended (SUCCEEDED); only pending jobs are released\n");
}

// `release 1_[5-99]` of an array 0-7: the elements it lacks are said once, as a range,
// after what was done to those it has (hold and cancel alike).
TEST_F(ClientE2eTest, ARangesElementsTheArrayLacksAreSaidOnce) {
  Serve([](const HttpRequest& r) {
    for (const char* action : {"/release", "/hold", "/cancel"}) {
      for (int i = 5; i <= 7; ++i) {
        if (r.path == "/v1/jobs/1_" + std::to_string(i) + action) {
          return JsonAnswer(200, R"js({"job": {"id": 9, "state": "CANCELLED"}})js");
        }
      }
    }
    const std::string index = r.path.substr(11, r.path.find('/', 11) - 11);  // "/v1/jobs/1_"
    return JsonAnswer(404, R"js({"error": "array 1 has no element )js" + index +
                               R"js( (it was submitted with --array 0-7)"})js");
  });
  RunResult r = Run({"release", "1_[5-99]"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "Released job 1_5\nReleased job 1_6\nReleased job 1_7\n");
  EXPECT_EQ(r.err, "gpupool: array 1 has no elements 8-99 (it was submitted with --array 0-7)\n");
  r = Run({"hold", "1_[9,11-12]", "1_6"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "Held job 1_6\n");
  EXPECT_EQ(r.err,
            "gpupool: array 1 has no elements 9,11-12 (it was submitted with --array 0-7)\n");
  r = Run({"cancel", "1_[7-8]"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "Cancelled job 1_7\n");
  EXPECT_EQ(r.err, "gpupool: array 1 has no element 8 (it was submitted with --array 0-7)\n");
}

// A job named twice is cancelled once, as scancel does (the repeat was refused, "has
// already ended", and the command exited 1).
TEST_F(ClientE2eTest, AJobNamedTwiceIsCancelledOnce) {
  std::atomic<int> cancels{0};
  Serve([&cancels](const HttpRequest& r) {
    if (r.path == "/v1/jobs/5_5/cancel" && cancels++ == 0) {
      return JsonAnswer(200, R"js({"job": {"id": 9, "state": "CANCELLED"}})js");
    }
    return JsonAnswer(409, R"js({"error": "job 5_5 has already ended"})js");
  });
  RunResult r = Run({"cancel", "5_5", "5_5", "5_[5]"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Cancelled job 5_5\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(Requests().size(), 1u);
}

// checkpoint-done run inside a task of a gang (GPUPOOL_JOB_ID and GPUPOOL_TASK_INDEX in its
// environment) says which task it is: only that task's grace ends (red team 7, finding
// 2). From outside the job (or naming another job) it says no task: the whole job's.
// --task names one explicitly; a task index that is none is refused naming it.
TEST_F(ClientE2eTest, CheckpointDoneInsideATaskSaysWhichTask) {
  Serve([](const HttpRequest& r) {
    if (r.path != "/v1/jobs/5/checkpoint-done" && r.path != "/v1/jobs/6/checkpoint-done") {
      return JsonAnswer(404, R"js({"error": "no such path"})js");
    }
    if (r.body.find(R"("task":7)") != std::string::npos) {
      return JsonAnswer(400, R"js({"error": "task: job 5 has tasks 0..3, not 7 (inside a task, )js"
                             R"js(GPUPOOL_TASK_INDEX is its index)"})js");
    }
    // The whole job's grace ended unless a task said it.
    const bool job_done = r.body.find("task") == std::string::npos;
    return JsonAnswer(200, std::string(R"js({"job": {"id": 5, "state": "RUNNING", )js") +
                               R"js("checkpoint_done": )js" + (job_done ? "true" : "false") + "}}");
  });
  env_["GPUPOOL_JOB_ID"] = "5";
  env_["GPUPOOL_TASK_INDEX"] = "1";
  RunResult r = Run({"checkpoint-done"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "Task 1 of job 5 has checkpointed: it is stopped now; the job's other tasks keep "
            "their grace\n");
  r = Run({"checkpoint-done", "5"});  // the job named is the task's own
  EXPECT_EQ(r.code, 0) << r.err;
  r = Run({"checkpoint-done", "6"});  // another job: said from outside it
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Job 6 has checkpointed: it is stopped now and goes back to the queue\n");
  r = Run({"checkpoint-done", "--task", "7"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: task: job 5 has tasks 0..3, not 7 (inside a task, GPUPOOL_TASK_INDEX is "
            "its index)\n");
  env_["GPUPOOL_TASK_INDEX"] = "one";
  r = Run({"checkpoint-done"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: checkpoint-done: GPUPOOL_TASK_INDEX=one is not a task index: give --task "
            "N\n");
  env_.clear();  // the user's terminal
  r = Run({"checkpoint-done", "5"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Job 5 has checkpointed: it is stopped now and goes back to the queue\n");
  r = Run({"checkpoint-done", "5", "--task", "2"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "Task 2 of job 5 has checkpointed: it is stopped now; the job's other tasks keep "
            "their grace\n");
  std::vector<std::string> bodies;
  for (const HttpRequest& q : Requests()) bodies.push_back(q.body);
  EXPECT_EQ(bodies, (std::vector<std::string>{R"({"task":1})", R"({"task":1})", "", R"({"task":7})",
                                              "", R"({"task":2})"}));
}

// gpupool cancel --signal SIG (scancel --signal): one request per job with the signal's
// number, no cancel; what the server says per job; a running job's tasks it could not
// reach are an error.
TEST_F(ClientE2eTest, CancelWithASignalSignalsRunningJobsInsteadOfCancellingThem) {
  Serve([](const HttpRequest& r) {
    if (r.path == "/v1/jobs/12/signal") {
      return JsonAnswer(200, R"({"signal": 10, "batch": false, "array": false, "jobs": 1,
                                 "tasks": 2, "missed": []})");
    }
    if (r.path == "/v1/jobs/13/signal") {
      return JsonAnswer(200, R"({"signal": 10, "batch": false, "array": true, "jobs": 3,
                                 "tasks": 3, "missed": []})");
    }
    if (r.path == "/v1/jobs/14/signal") {
      return JsonAnswer(200, R"({"signal": 10, "batch": false, "array": false, "jobs": 1,
                                 "tasks": 1, "missed": ["job 14 task 1: node n2 is down"],
                                 "unconfirmed": ["job 14 task 2: node n3 stopped answering"]})");
    }
    return JsonAnswer(409, R"js({"error": "job 15 is pending and has no process to signal: only )js"
                           R"js(a running job can be signalled"})js");
  });
  RunResult r = Run({"cancel", "--signal", "USR1", "12", "13"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "Signal USR1 sent to job 12 (2 tasks)\n"
            "Signal USR1 sent to array 13: 3 running elements (3 tasks)\n");
  ASSERT_EQ(Requests().size(), 2u);
  EXPECT_EQ(Requests()[0].method, "POST");
  EXPECT_EQ(Json::parse(Requests()[0].body), Json::parse(R"({"signal": 10, "batch": false})"));
  // scancel's spellings: -s, SIG prefix, a number, -b for the batch shell only.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"cancel", "-s", "SIGUSR1", "-b", "12"},
        std::vector<std::string>{"cancel", "--signal=10", "--batch", "12"}}) {
    r = Run(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(Json::parse(Requests().back().body), Json::parse(R"({"signal": 10, "batch": true})"));
  }
  r = Run({"cancel", "-s", "usr1", "-f", "14", "15"});
  EXPECT_EQ(r.code, 1);  // the first failure's
  EXPECT_EQ(r.out, "Signal USR1 sent to job 14 (1 task)\n");
  EXPECT_EQ(r.err,
            "gpupool: signal USR1 not sent to job 14 task 1: node n2 is down\n"
            "gpupool: signal USR1 not confirmed by job 14 task 2: node n3 stopped answering\n"
            "gpupool: job 15 is pending and has no process to signal: only a running job can "
            "be signalled\n");
  // Refused before any request, naming the option.
  const size_t sent = Requests().size();
  r = Run({"cancel", "--signal", "USR9", "12"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --signal USR9: 'USR9' is no signal; give a name (USR1, USR2, TERM, ...) or "
            "a number, e.g. --signal USR1\n");
  r = Run({"cancel", "--signal", "65", "12"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gpupool: --signal 65: use a whole number from 1 to 64, e.g. 10\n");
  r = Run({"cancel", "--batch", "12"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --batch: only with --signal SIG (gpupool cancel --signal USR1 --batch ID); "
            "a cancel stops every process of the job\n");
  r = Run({"cancel", "-f", "12"});  // its example showed --batch
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --full: only with --signal SIG (gpupool cancel --signal USR1 --full ID); "
            "a cancel stops every process of the job\n");
  // A task index that is no number, or out of range, says what to write (CLI11's own
  // said "Could not convert" or "Value x not in range 0 to 4095").
  for (const auto& [args, value] :
       {std::pair{std::vector<std::string>{"checkpoint-done", "--task", "1x", "5"}, "1x"},
        std::pair{std::vector<std::string>{"logs", "--task", "x", "5"}, "x"},
        std::pair{std::vector<std::string>{"exec", "--job", "5", "--task", "4096", "--", "true"},
                  "4096"}}) {
    r = Run(args);
    EXPECT_EQ(r.code, 2) << args[0];
    EXPECT_EQ(r.err, std::string("--task: '") + value +
                         "' is no task index: use a whole number from 0 to 4095, e.g. --task 1 "
                         "(task 0 is the first)\nRun with --help for more information.\n")
        << args[0];
  }
  r = Run({"cancel", "--signal", "USR1", "-u", "alice"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: cancel --signal: give job ids; --user, --state and --name select jobs to "
            "cancel only\n");
  EXPECT_EQ(Requests().size(), sent);
}

}  // namespace
}  // namespace gpupool::cli
