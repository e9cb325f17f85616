// End to end (client_e2e_test.h): what submit refuses or reads of what it is given, before
// any request: text that is not UTF-8, scripts that cannot run, sbatch scripts.
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

}  // namespace
}  // namespace gpupool::cli
