// End to end (client_e2e_test.h): what submit refuses or reads of what it is given, before
// any request: text that is not UTF-8, scripts that cannot run, sbatch scripts.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "cli/client/client_e2e_test.h"

namespace gpupool::cli {
namespace {

// Bytes that are not UTF-8 were replaced with U+FFFD on the way to the server: the job ran
// another command and -o wrote another file. They are refused before any request.
TEST_F(ClientE2eTest, NonUtf8ArgumentsAreRefusedBeforeAnyRequest) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 5}})"); });
  RunResult r = Run({"submit", "--", "echo", "caf\xe9"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("gpupool: the command's word 2 'caf\\xe9' is not UTF-8 text", 0), 0u)
      << r.err;
  r = Run({"submit", "-o", "o\xe9.out", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("gpupool: --output 'o\\xe9.out' is not UTF-8 text", 0), 0u) << r.err;
  r = Run({"submit", "--env", "FOO=caf\xe9", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("gpupool: --env FOO 'caf\\xe9' is not UTF-8 text", 0), 0u) << r.err;
  r = Run({"submit", "-J", "n\xe9", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("gpupool: --job-name 'n\\xe9' is not UTF-8 text", 0), 0u) << r.err;
  EXPECT_TRUE(Requests().empty());
  r = Run({"submit", "--", "echo", "caf\xc3\xa9"});  // UTF-8 goes through as it is
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(Requests().size(), 1u);
  EXPECT_EQ(Json::parse(Requests()[0].body)["command"][1], "caf\xc3\xa9");
}

// A plain sbatch script: its #SBATCH lines that mean the same here are read, the others
// said on stderr (they were all ignored without a word).
TEST_F(ClientE2eTest, AnSbatchScriptsLinesAreReadOrSaid) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 5}})"); });
  WriteScript("sb.sh",
              "#!/bin/bash\n#SBATCH --gpus=2\n#SBATCH --time=10\n#SBATCH --output=sb-%j.out\n"
              "#SBATCH --partition=gpu\npython train.py\n",
              true);
  RunResult r = Run({"submit", "--time", "20", "sb.sh"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err,
            "gpupool: warning: sb.sh:5: #SBATCH --partition=gpu ignored: gpupool has no "
            "partitions: every job may run on every node it fits (choose GPUs with --gpu-model, "
            "--vendor or --min-capability)\n");
  ASSERT_EQ(Requests().size(), 1u);
  Json body = Json::parse(Requests()[0].body);
  EXPECT_EQ(body["request"]["gpus"], 2);
  EXPECT_EQ(body["time_limit_s"], 1200);  // the command line wins
  EXPECT_EQ(body["output"], "sb-%j.out");
}

// `sbatch -n 2 job.sh` with `#SBATCH --gpus=2` asks 2 GPUs in all; `gpupool submit -n 2`
// took them per task (4). Refused before any request, naming the line; with -n 1 the
// script's #SBATCH -n 4 no longer matters.
TEST_F(ClientE2eTest, SbatchGpusPerJobWithTasksFromTheCommandLineIsRefused) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 5}})"); });
  WriteScript("g.sh", "#!/bin/bash\n#SBATCH --gpus=2\n#SBATCH -n 4\npython train.py\n", true);
  RunResult r = Run({"submit", "-n", "2", "g.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: g.sh:2: #SBATCH line: --gpus=2 with --ntasks 2: Slurm counts --gpus for "
            "the whole job, gpupool per task; write #SBATCH --gpus-per-task N (the GPUs each "
            "task needs), or give --gpus N (per task) on the command line\n");
  EXPECT_TRUE(Requests().empty());
  r = Run({"submit", "-n", "1", "g.sh"});
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(Requests().size(), 1u);
  Json body = Json::parse(Requests()[0].body);
  EXPECT_EQ(body["request"]["gpus"], 2);
  EXPECT_EQ(body["request"].value("tasks", 1), 1);
}

// Slurm's -w/--nodelist and -x/--exclude, hostlists expanded, from the command line and
// from #SBATCH lines (the command line wins); bad ones refused before any request.
TEST_F(ClientE2eTest, NodelistAndExcludeAreSentExpanded) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 5}})"); });
  RunResult r = Run({"submit", "-x", "node[01-02,07],gpu3", "--nodelist=n5", "--", "true"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  ASSERT_EQ(Requests().size(), 1u);
  Json body = Json::parse(Requests()[0].body);
  EXPECT_EQ(body["request"]["exclude"], Json::parse(R"(["node01", "node02", "node07", "gpu3"])"));
  EXPECT_EQ(body["request"]["nodelist"], Json::parse(R"(["n5"])"));

  WriteScript("w.sh",
              "#!/bin/bash\n#SBATCH -w node0\n#SBATCH --exclude=node[1-2]\npython train.py\n",
              true);
  r = Run({"submit", "w.sh"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // read, not "ignored"
  ASSERT_EQ(Requests().size(), 2u);
  body = Json::parse(Requests()[1].body);
  EXPECT_EQ(body["request"]["nodelist"], Json::parse(R"(["node0"])"));
  EXPECT_EQ(body["request"]["exclude"], Json::parse(R"(["node1", "node2"])"));
  r = Run({"submit", "--nodelist", "node3", "w.sh"});
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(Requests().size(), 3u);
  body = Json::parse(Requests()[2].body);
  EXPECT_EQ(body["request"]["nodelist"], Json::parse(R"(["node3"])"));

  r = Run({"submit", "-x", "node[3-1]", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --exclude node[3-1]: 'node[3-1]': the range 3-1 ends below its start (give "
            "node names or a hostlist like gpu[01-04])\n");
  r = Run({"submit", "-w", "n1", "-x", "n[0-1]", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --nodelist n1 and --exclude n[0-1] both name n1: leave it out of one of "
            "them\n");
  r = Run({"submit", "-w", "./hosts.txt", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("gpupool: --nodelist ./hosts.txt: gpupool does not read node names from "
                       "a file"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(Requests().size(), 3u);
}

// -w/-x name at most 4096 nodes (the server's bound), counted before anything is
// expanded: a longer list is refused naming the option and what to do instead, and
// nothing is sent.
TEST_F(ClientE2eTest, NodeListsPast4096NamesAreRefusedBeforeAnyRequest) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 5}})"); });
  RunResult r = Run({"submit", "-w", "a[0-65534],n1", "-x", "b[0-65535]", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --nodelist a[0-65534],n1: at most 4096 node names (got 65536); name fewer "
            "nodes, or exclude the few the job may not use (-x/--exclude), or choose nodes by "
            "their GPUs (--gpu-model, --min-capability)\n");
  r = Run({"submit", "-x", "b[1-4097]", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --exclude b[1-4097]: at most 4096 node names (got 4097); exclude fewer "
            "nodes, or name the few the job may use (-w/--nodelist), or choose nodes by their "
            "GPUs (--gpu-model, --min-capability)\n");
  EXPECT_EQ(Requests().size(), 0u);
  r = Run({"submit", "-w", "a[1-4096]", "-x", "b[1-4096]", "--", "true"});
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(Requests().size(), 1u);
  const Json body = Json::parse(Requests()[0].body);
  EXPECT_EQ(body["request"]["nodelist"].size(), 4096u);
  EXPECT_EQ(body["request"]["exclude"].size(), 4096u);
}

// The server accepts an --exclude name no node has, with a warning the client prints.
TEST_F(ClientE2eTest, TheServersSubmitWarningsArePrinted) {
  Serve([](const HttpRequest&) {
    return JsonAnswer(201, R"({"job": {"id": 5}, "warnings": ["--exclude nx: no such node"]})");
  });
  RunResult r = Run({"submit", "-x", "nx", "--", "true"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Submitted job 5\n");
  EXPECT_EQ(r.err, "gpupool: warning: --exclude nx: no such node\n");
}

TEST_F(ClientE2eTest, ScriptsThatCannotRunAreRefusedAtSubmit) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 5}})"); });
  WriteScript("plain.sh", "echo no shebang\n", true);
  RunResult r = Run({"submit", "plain.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("script 'plain.sh' has no #! line"), std::string::npos) << r.err;
  WriteScript("bom.sh", "\xEF\xBB\xBF#!/bin/bash\necho bom\n", true);
  r = Run({"submit", "bom.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("script 'bom.sh' starts with a byte-order mark"), std::string::npos)
      << r.err;
  WriteScript("big.sh", "#!/bin/sh\n" + std::string(2'100'010, '#') + "\n", true);
  r = Run({"submit", "big.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("script 'big.sh' is 2100021 bytes; a job keeps a copy of at most "
                       "1048576 (1 MiB)"),
            std::string::npos)
      << r.err;
  r = Run({"submit", "--gpus", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("a script is named as a file (gpupool submit job.sh), not read from "
                       "standard input"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(Requests().empty());
}

// sbatch --wait (-W): submit stays until the job ended and exits with its exit code; 1
// where it did not exit by itself; refused by run and alloc, which wait already.
TEST_F(ClientE2eTest, SubmitWaitExitsWithTheJobsExitCode) {
  std::atomic<int> looks = 0;
  std::string end = R"("state": "FAILED", "exit_code": 3, "reason": "exited with code 3")";
  Serve([&](const HttpRequest& r) {
    if (r.method == "POST") return JsonAnswer(201, R"({"job": {"id": 5, "state": "PENDING"}})");
    if (r.path != "/v1/jobs/5") return JsonAnswer(404, R"({"error": "no"})");
    if (++looks < 3) return JsonAnswer(200, R"({"job": {"id": 5, "state": "RUNNING"}})");
    return JsonAnswer(200, R"({"job": {"id": 5, )" + end + "}}");
  });
  RunResult r = Run({"submit", "--wait", "--", "false"});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(r.out, "Submitted job 5\n");
  EXPECT_EQ(r.err, "gpupool: job 5 FAILED: exited with code 3\n");
  EXPECT_EQ(looks, 3);
  EXPECT_FALSE(Json::parse(Requests()[0].body).contains("wait"));  // the client's own

  // From an #SBATCH line; a job that succeeded says nothing more.
  looks = 0;
  end = R"("state": "SUCCEEDED", "exit_code": 0)";
  WriteScript("w.sh", "#!/bin/bash\n#SBATCH -W\ntrue\n", true);
  r = Run({"submit", "w.sh"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(looks, 3);

  // Cancelled, timed out, killed by a signal: 1, as sbatch --wait.
  for (const char* how : {R"("state": "CANCELLED", "reason": "cancelled by alice")",
                          R"("state": "TIMEOUT", "signal": 15, "reason": "time limit")",
                          R"("state": "FAILED", "signal": 9, "reason": "ended by SIGKILL")"}) {
    looks = 0;
    end = how;
    r = Run({"submit", "-W", "--", "sleep", "100"});
    EXPECT_EQ(r.code, 1) << how << r.err;
  }
  EXPECT_EQ(r.err, "gpupool: job 5 FAILED: ended by SIGKILL\n");

  r = Run({"run", "--wait", "--", "true"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: --wait: gpupool run waits for its job already; --wait is for "
            "gpupool submit\n");
}

// Red team 8, finding 2: the server going away (a restart, a failover, a stop that removes
// its socket) ended the wait at once with exit code 5, read as the job's. The wait asks
// again until the server answers, says so once, and ends with the job.
TEST_F(ClientE2eTest, SubmitWaitGoesOnWhileTheServerIsAway) {
  std::atomic<int> looks = 0;
  const std::string away = socket_ + ".away";
  std::thread back;
  Serve([&](const HttpRequest& r) {
    if (r.method == "POST") return JsonAnswer(201, R"({"job": {"id": 5, "state": "PENDING"}})");
    const int n = ++looks;
    if (n == 1) {
      // Its socket goes for a while (a clean stop), after one refusal (a standby).
      std::filesystem::rename(socket_, away);
      back = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the outage
        std::filesystem::rename(away, socket_);
      });
      return JsonAnswer(503, R"({"error": "this controller is a standby; the leader is "})");
    }
    if (n < 4) return JsonAnswer(200, R"({"job": {"id": 5, "state": "RUNNING"}})");
    return JsonAnswer(200, R"({"job": {"id": 5, "state": "FAILED", "exit_code": 7,
                                      "reason": "exited with code 7"}})");
  });
  RunResult r = Run({"submit", "-W", "--", "false"});
  if (back.joinable()) back.join();
  EXPECT_EQ(r.code, 7) << r.err;
  EXPECT_EQ(looks, 4);
  const std::string said =
      "\n  still waiting for job 5, which goes on without the server: asking "
      "again until it answers (Ctrl-C stops the wait, not the job)\n"
      "gpupool: the server answers again\n"
      "gpupool: job 5 FAILED: exited with code 7\n";
  ASSERT_GT(r.err.size(), said.size()) << r.err;
  EXPECT_EQ(r.err.substr(r.err.size() - said.size()), said) << r.err;
  EXPECT_EQ(r.err.find("gpupool: "), 0u) << r.err;
  EXPECT_EQ(r.err.find("still waiting"), r.err.rfind("still waiting")) << r.err;  // once
}

// An array: every element's end is waited for; the highest exit code wins.
TEST_F(ClientE2eTest, SubmitWaitOfAnArrayExitsWithTheHighestCode) {
  std::atomic<int> lists = 0;
  Serve([&](const HttpRequest& r) {
    if (r.method == "POST") {
      return JsonAnswer(201, R"({"job": {"id": 7, "array_id": 7, "array": "0-2"}})");
    }
    if (r.path == "/v1/jobs" && r.Query("active") == "1") {
      // An element of another array, and then none of this one.
      return JsonAnswer(200, ++lists < 3 ? R"({"jobs": [{"id": 4, "array_id": 3},
                                                        {"id": 8, "array_id": 7}]})"
                                         : R"({"jobs": [{"id": 4, "array_id": 3}]})");
    }
    if (r.path == "/v1/jobs/7_0") {
      return JsonAnswer(200, R"({"job": {"id": 7, "state": "SUCCEEDED", "exit_code": 0}})");
    }
    if (r.path == "/v1/jobs/7_1") {
      return JsonAnswer(200, R"({"job": {"id": 8, "state": "FAILED", "exit_code": 2,
                                        "reason": "exited with code 2"}})");
    }
    if (r.path == "/v1/jobs/7_2") {
      return JsonAnswer(200, R"({"job": {"id": 9, "state": "TIMEOUT", "signal": 15}})");
    }
    return JsonAnswer(404, R"({"error": "no"})");
  });
  RunResult r = Run({"submit", "--wait", "--array", "0-2", "--", "true"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(lists, 3);
  EXPECT_EQ(r.err,
            "gpupool: job 7_1 FAILED: exited with code 2\n"
            "gpupool: array 7: 1 FAILED, 1 SUCCEEDED, 1 TIMEOUT; exit code 2\n");
}

// Red team 7, finding 6: the values of --gpus, --time, ... on an #SBATCH line were refused
// without the line; Slurm's typed --gpus got no word about --gpu-model.
TEST_F(ClientE2eTest, ABadValueOnAScriptLineNamesTheLine) {
  Serve([](const HttpRequest&) { return JsonAnswer(201, R"({"job": {"id": 5}})"); });
  WriteScript("sb.sh", "#!/bin/sh\n#SBATCH --time=10\n#SBATCH --gpus=a100:2\ntrue\n", true);
  RunResult r = Run({"submit", "sb.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gpupool: sb.sh:3: #SBATCH line: --gpus a100:2: Slurm's typed form; gpupool asks for "
            "the model apart: write --gpus 2 --gpu-model A100 (`gpupool nodes` shows the "
            "models)\n");
  WriteScript("sb.sh", "#!/bin/sh\n#SBATCH --time=abc\ntrue\n", true);
  r = Run({"submit", "sb.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("gpupool: sb.sh:2: #SBATCH line: --time abc: ", 0), 0u) << r.err;
  WriteScript("sb.sh", "#!/bin/sh\n#SBATCH -n 2\n#SBATCH --signal=B:FOO@10\ntrue\n", true);
  r = Run({"submit", "sb.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("gpupool: sb.sh:3: #SBATCH line: --signal B:FOO@10: ", 0), 0u) << r.err;
  // Red team 8, finding 6: a bad hostlist did not name its line.
  WriteScript("sb.sh", "#!/bin/sh\n#SBATCH -w n[1-99999999]\ntrue\n", true);
  r = Run({"submit", "sb.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("gpupool: sb.sh:2: #SBATCH line: --nodelist n[1-99999999]: ", 0), 0u)
      << r.err;
  WriteScript("sb.sh", "#!/bin/sh\n#SBATCH --exclude=/etc/hosts\ntrue\n", true);
  r = Run({"submit", "sb.sh"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("gpupool: sb.sh:2: #SBATCH line: --exclude /etc/hosts: ", 0), 0u) << r.err;
  EXPECT_TRUE(Requests().empty());
}

}  // namespace
}  // namespace gpupool::cli
