#include "cli/client/submit_flags.h"

#include <gtest/gtest.h>

#include "cli/client/units.h"
#include "cli/usage.h"

namespace gpupool::cli {
namespace {

// Parses command-line words (after `submit`) with the real option definitions.
SubmitFlags ParseArgs(std::vector<std::string> words) {
  SubmitFlags flags;
  CLI::App app;
  AddSubmitOptions(app, &flags);
  std::vector<std::string> reversed(words.rbegin(), words.rend());
  app.parse(reversed);
  return flags;
}

std::string Body(const SubmitFlags& f, std::vector<std::string> cmd = {"python", "train.py"}) {
  auto b = BuildSubmission(f, cmd, "/home/alice/proj");
  return b.ok() ? DumpJson(*b) : "ERROR: " + b.status().message();
}

std::string Error(std::vector<std::string> words) {
  auto b = BuildSubmission(ParseArgs(std::move(words)), {"x"}, "/w");
  return b.ok() ? "OK" : b.status().message();
}

TEST(BuildSubmissionTest, MinimalBodyIsExact) {
  EXPECT_EQ(
      Body({}),
      R"({"command":["python","train.py"],"workdir":"/home/alice/proj",)"
      R"("request":{"gpus":0,"gpu_milli":1000,"cpu_milli":1000,"memory_bytes":0,"tasks":1}})");
}

TEST(BuildSubmissionTest, EveryOptionLandsInItsField) {
  SubmitFlags f = ParseArgs({"--gpus",
                             "2",
                             "--gpu-model",
                             "A100,H100",
                             "--gpu-model",
                             "L40S",
                             "--min-capability",
                             "8.0",
                             "--vendor",
                             "NVIDIA",
                             "--cpus",
                             "0.5",
                             "--mem",
                             "16G",
                             "--time",
                             "1:30:00",
                             "--name",
                             "train",
                             "--project",
                             "vision",
                             "--priority",
                             "-5",
                             "--env",
                             "A=1",
                             "--env",
                             "B=x=y",
                             "--env",
                             "A=2",
                             "--workdir",
                             "sub/dir",
                             "--tasks",
                             "3",
                             "--image",
                             "docker.io/pytorch:2",
                             "--requeue"});
  EXPECT_EQ(Body(f),
            R"({"name":"train","project":"vision","command":["python","train.py"],)"
            R"("env":{"A":"2","B":"x=y"},"workdir":"/home/alice/proj/sub/dir",)"
            R"("image":"docker.io/pytorch:2","request":{"gpus":2,"gpu_milli":1000,)"
            R"("cpu_milli":500,"memory_bytes":17179869184,"gpu_models":["A100","H100","L40S"],)"
            R"("vendor":"nvidia","min_capability":"8.0","tasks":3},"priority":-5,)"
            R"("time_limit_s":5400,"requeue":true})");
}

TEST(BuildSubmissionTest, ShareImpliesOneGpu) {
  EXPECT_NE(Body(ParseArgs({"--gpu-share", "0.25"})).find(R"("gpus":1,"gpu_milli":250)"),
            std::string::npos);
  EXPECT_NE(Body(ParseArgs({"--gpus", "1", "--gpu-share", "25%"})).find(R"("gpu_milli":250)"),
            std::string::npos);
  EXPECT_NE(Body(ParseArgs({"--gpu-mem", "20G"}))
                .find(R"("gpus":1,"gpu_milli":1000,"gpu_memory_bytes":21474836480)"),
            std::string::npos);
}

TEST(BuildSubmissionTest, WorkdirAbsoluteReplacesCwd) {
  EXPECT_NE(Body(ParseArgs({"--workdir", "/data/run"})).find(R"("workdir":"/data/run")"),
            std::string::npos);
  EXPECT_NE(Body(ParseArgs({"--workdir", "../other"})).find(R"("workdir":"/home/alice/other")"),
            std::string::npos);
}

TEST(BuildSubmissionTest, NoRequeueIsSentAsFalse) {
  EXPECT_NE(Body(ParseArgs({"--no-requeue"})).find(R"("requeue":false)"), std::string::npos);
}

TEST(BuildSubmissionTest, ShmSizeAndInitAreForContainerJobs) {
  const std::string body = Body(ParseArgs({"--image", "img", "--shm-size", "8G", "--no-init"}));
  EXPECT_NE(body.find(R"("shm_bytes":8589934592)"), std::string::npos) << body;
  EXPECT_NE(body.find(R"("init":false)"), std::string::npos) << body;
  EXPECT_EQ(Body(ParseArgs({"--image", "img"})).find("init"), std::string::npos);  // default
  EXPECT_EQ(Error({"--shm-size", "8G"}),
            "--shm-size 8G: sizes a container's /dev/shm; add --image REF or --env NAME:VERSION");
  EXPECT_EQ(Error({"--image", "img", "--shm-size", "0"}), "--shm-size 0: must be more than 0");
}

TEST(BuildSubmissionTest, DependenciesLandWithTheirKinds) {
  const std::string body =
      Body(ParseArgs({"--after-ok", "12,14", "--after-not-ok", "3", "--after-any", "5"}));
  EXPECT_NE(body.find(R"("dependencies":[{"job_id":12,"kind":"after-ok"},)"
                      R"({"job_id":14,"kind":"after-ok"},{"job_id":5,"kind":"after-any"},)"
                      R"({"job_id":3,"kind":"after-not-ok"}])"),
            std::string::npos)
      << body;
  const std::string element = " (ARRAY_INDEX, e.g. 12_3, for one element of an array)";
  EXPECT_EQ(Error({"--after-ok", "12,x"}),
            "--after-ok x: give job ids, e.g. --after-ok 12,14" + element);
  EXPECT_EQ(Error({"--after-any", "0"}),
            "--after-any 0: give job ids, e.g. --after-any 12,14" + element);
  EXPECT_EQ(Error({"--after-any", "12_x"}),
            "--after-any 12_x: give job ids, e.g. --after-any 12,14" + element);
}

// The body a submission makes, or its error, with `resolve` for array elements.
std::string BodyResolving(std::vector<std::string> words, const ElementResolver& resolve) {
  auto b = BuildSubmission(ParseArgs(std::move(words)), {"x"}, "/w", resolve);
  return b.ok() ? DumpJson(*b) : "ERROR: " + b.status().message();
}

TEST(BuildSubmissionTest, SbatchShortAndLongNamesAreGpupoolsOptions) {
  // Each short option and Slurm spelling gives the body its gpupool option gives.
  const std::string gpupool =
      Body(ParseArgs({"--time", "90", "--name", "train", "--cpus", "2", "--gpus", "1", "--tasks",
                      "2", "--array", "0-3", "--workdir", "sub", "--hold", "--after-ok", "7"}));
  EXPECT_EQ(Body(ParseArgs({"-t", "90", "-J", "train", "-c", "2", "-G", "1", "-n", "2", "-a", "0-3",
                            "-D", "sub", "-H", "-d", "afterok:7"})),
            gpupool);
  EXPECT_EQ(Body(ParseArgs({"--time=90", "--job-name=train", "--cpus-per-task=2",
                            "--gpus-per-task=1", "--ntasks=2", "--array=0-3", "--chdir=sub",
                            "--hold", "--dependency=afterok:7"})),
            gpupool);
  EXPECT_NE(gpupool.find(R"("hold":true)"), std::string::npos) << gpupool;
  EXPECT_NE(gpupool.find(R"("time_limit_s":5400)"), std::string::npos) << gpupool;
  EXPECT_NE(gpupool.find(R"("workdir":"/home/alice/proj/sub")"), std::string::npos) << gpupool;
  EXPECT_EQ(Body(ParseArgs({})).find("hold"), std::string::npos);
}

TEST(BuildSubmissionTest, SlurmDependenciesBecomeGpupoolsKinds) {
  EXPECT_NE(Body(ParseArgs({"--dependency", "afterok:12:14,afterany:13", "-d", "afternotok:5",
                            "--after-any", "3"}))
                .find(R"("dependencies":[{"job_id":3,"kind":"after-any"},)"
                      R"({"job_id":12,"kind":"after-ok"},{"job_id":14,"kind":"after-ok"},)"
                      R"({"job_id":13,"kind":"after-any"},{"job_id":5,"kind":"after-not-ok"}])"),
            std::string::npos);
  EXPECT_NE(Body(ParseArgs({"-d", "AfterOK:9"})).find(R"({"job_id":9,"kind":"after-ok"})"),
            std::string::npos);
  EXPECT_NE(Body(ParseArgs({"-d", "afterok:4,singleton"}))
                .find(R"("singleton":true,"dependencies":[{"job_id":4,"kind":"after-ok"}])"),
            std::string::npos)
      << Body(ParseArgs({"-d", "afterok:4,singleton"}));
  EXPECT_EQ(Error({"-d", "singleton:4"}), "--dependency singleton:4: singleton takes no job ids");
  EXPECT_EQ(Error({"-d", "after:12"}),
            "--dependency after:12: type 'after' is not supported; use afterok, afterany or "
            "afternotok (after, aftercorr, aftersomething+TIME and expand do not exist in "
            "gpupool)");
  EXPECT_EQ(Error({"-d", "afterok:12?afterany:13"}),
            "--dependency afterok:12?afterany:13: '?' (any one of them) is not supported: a job "
            "waits for all its dependencies");
  EXPECT_EQ(Error({"-d", "afterok"}),
            "--dependency afterok: afterok needs job ids: afterok:ID[:ID...], e.g. afterok:12");
  EXPECT_EQ(Error({"-d", "afterok:12+5"}),
            "--dependency afterok:12+5: a delay (afterok:ID+MINUTES) is not supported");
  EXPECT_EQ(Error({"-d", "afterany:x"}),
            "--dependency x: give job ids, e.g. --dependency afterany:12:14 (ARRAY_INDEX, e.g. "
            "12_3, for one element of an array)");
  EXPECT_EQ(Error({"-d", ""}), "--dependency : give TYPE:ID, e.g. --dependency afterok:12");
}

TEST(BuildSubmissionTest, AnArrayElementDependencyIsTheElementsOwnJob) {
  std::vector<std::string> asked;
  const ElementResolver resolve = [&](const std::string& e) -> Result<int64_t> {
    asked.push_back(e);
    if (e == "12_3") return 15;
    if (e == "12_0") return 12;
    return Status::NotFound("array 12 has no element 9 (it was submitted with --array 0-3)");
  };
  EXPECT_NE(BodyResolving({"--after-ok", "12_3", "-d", "afterany:12"}, resolve)
                .find(R"("dependencies":[{"job_id":15,"kind":"after-ok"},)"
                      R"({"job_id":12,"kind":"after-any"}])"),
            std::string::npos);
  EXPECT_EQ(asked, std::vector<std::string>{"12_3"});  // the array's own id is not asked
  EXPECT_EQ(BodyResolving({"-d", "afterok:12_0"}, resolve),
            "ERROR: --dependency 12_0: the first element of an array has the array's own id, 12, "
            "which in a dependency waits for every element; depend on 12 (the whole array) "
            "instead");
  EXPECT_EQ(BodyResolving({"--after-ok", "12_9"}, resolve),
            "ERROR: --after-ok 12_9: array 12 has no element 9 (it was submitted with --array "
            "0-3)");
  EXPECT_EQ(BodyResolving({"--after-ok", "12_3"}, nullptr),
            "ERROR: --after-ok 12_3: an array element needs the server to find its job id");
  // Every local check comes before the server is asked.
  asked.clear();
  EXPECT_EQ(BodyResolving({"--after-ok", "12_3", "--gpus", "x"}, resolve),
            "ERROR: --gpus x: use a whole number from 0 to 1024, e.g. 2");
  EXPECT_TRUE(asked.empty());
}

TEST(BuildSubmissionTest, NodesAndPartitionsSayWhatGpupoolHasInstead) {
  EXPECT_EQ(Error({"-N", "1"}), "OK");
  EXPECT_EQ(Error({"--nodes", "1", "--tasks", "1"}), "OK");
  const std::string tasks =
      ": gpupool places tasks, not nodes: ask for -n/--tasks N tasks (a gang, placed on one "
      "node or several), each with its own --gpus, --cpus and --mem; --nodes 1 is accepted "
      "for a one-task job only";
  EXPECT_EQ(Error({"-N", "2"}), "--nodes 2" + tasks);
  EXPECT_EQ(Error({"-N", "1", "-n", "4"}), "--nodes 1" + tasks);
  EXPECT_EQ(Error({"-p", "gpu"}),
            "--partition gpu: gpupool has no partitions: every job may run on every node it "
            "fits. Choose GPUs with --gpu-model (e.g. A100,H100), --vendor or "
            "--min-capability; `gpupool nodes` shows what each node has");
}

TEST(BuildSubmissionTest, EveryBadValueNamesItsOption) {
  EXPECT_EQ(Error({"--gpu-share", "1.5"}), "--gpu-share 1.5: a share must be in (0, 1]");
  EXPECT_EQ(Error({"--gpu-share", "0.5", "--gpus", "2"}),
            "--gpu-share 0.5: a share is part of one GPU and needs --gpus 1 (got --gpus 2)");
  EXPECT_EQ(Error({"--gpu-mem", "20G", "--gpus", "0"}),
            "--gpu-mem 20G: a share sized by memory is part of one GPU and needs --gpus 1 (got "
            "--gpus 0)");
  EXPECT_EQ(Error({"--gpu-mem", "20G", "--gpu-share", "0.5"}),
            "--gpu-share and --gpu-mem both size a share of one GPU; give one or the other");
  EXPECT_EQ(Error({"--gpu-mem", "0"}), "--gpu-mem 0: must be more than 0");
  // A bare number was bytes ("--gpu-mem 10": a 10-byte share); memory sizes need a unit.
  EXPECT_EQ(Error({"--gpu-mem", "10"}),
            "--gpu-mem 10: a size needs a unit (a bare number would be 10 bytes); write 10G or "
            "10240M");
  EXPECT_EQ(Error({"--mem", "4000"}),
            "--mem 4000: a size needs a unit (a bare number would be 4000 bytes); write 4000M or "
            "4000G");
  EXPECT_EQ(Error({"--image", "ubuntu", "--shm-size", "64"}),
            "--shm-size 64: a size needs a unit (a bare number would be 64 bytes); write 64G or "
            "65536M");
  EXPECT_EQ(Error({"--mem", "0"}), "OK");  // no explicit request, as before
  // Past the server's bounds they were refused by the server as "job.preempt_grace_s:
  // 172800 is outside the range 0..86400", naming neither the flag nor a bound it takes.
  EXPECT_EQ(Error({"--preemptible", "--grace", "2d"}), "--grace 2d: at most 24h");
  EXPECT_EQ(Error({"--preemptible", "--grace", "24h"}), "OK");
  EXPECT_EQ(Error({"--preemptible", "--min-runtime", "400d"}), "--min-runtime 400d: at most 365d");
  EXPECT_EQ(Error({"--preemptible", "--grace", "0"}),
            "--grace 0: give a positive duration, e.g. 10m");
  // Red team 7, finding 8: 60 was 60 minutes; Slurm's GraceTime counts seconds.
  EXPECT_EQ(Error({"--preemptible", "--grace", "60"}),
            "--grace 60: give a unit: 60s or 60m (a bare number would be minutes, as --time "
            "reads it)");
  EXPECT_EQ(Error({"--preemptible", "--min-runtime", "10"}),
            "--min-runtime 10: give a unit: 10s or 10m (a bare number would be minutes, as "
            "--time reads it)");
  EXPECT_EQ(Error({"--preemptible", "--grace", "90s", "--min-runtime", "1:00:00"}), "OK");
  EXPECT_EQ(Error({"--gpus", "two"}), "--gpus two: use a whole number from 0 to 1024, e.g. 2");
  EXPECT_EQ(Error({"--gpus", "-1"}), "--gpus -1: use a whole number from 0 to 1024, e.g. 2");
  EXPECT_EQ(Error({"--gpus", "1.5"}), "--gpus 1.5: use a whole number from 0 to 1024, e.g. 2");
  EXPECT_EQ(Error({"--tasks", "0"}), "--tasks 0: use a whole number from 1 to 4096, e.g. 4");
  EXPECT_EQ(Error({"--priority", "high"}),
            "--priority high: use a whole number from -1000000 to 1000000, e.g. 10");
  EXPECT_EQ(Error({"--vendor", "intel"}), "--vendor intel: use nvidia or amd");
  EXPECT_EQ(Error({"--gpus", "1", "--min-capability", "8"}),
            "--min-capability 8: use MAJOR.MINOR, e.g. 8.0");
  EXPECT_EQ(Error({"--gpu-model", "A100"}), "--gpu-model: the job asks for no GPU; add --gpus N");
  // docs/cli.md: every value is checked here, naming the option (the server said "vendor:").
  EXPECT_EQ(Error({"--vendor", "amd"}), "--vendor: the job asks for no GPU; add --gpus N");
  EXPECT_EQ(Error({"--min-capability", "8.0"}),
            "--min-capability: the job asks for no GPU; add --gpus N");
  EXPECT_EQ(Error({"--gpus", "1", "--gpu-model", "A100, ,H100"}),
            "--gpu-model: an empty model name; use e.g. A100 or A100,H100");
  const std::string env_fix =
      ": use NAME=VALUE for a variable (e.g. --env OMP_NUM_THREADS=4) or NAME:VERSION for a "
      "named environment (e.g. --env torch:2.4)";
  EXPECT_EQ(Error({"--env", "FOO"}), "--env FOO" + env_fix);
  EXPECT_EQ(Error({"--env", "1X=2"}), "--env 1X=2" + env_fix);
  // Slurm's spellings of no limit: said to leave --time out.
  EXPECT_EQ(Error({"--time", "0"}),
            "--time 0: a time limit must be positive; for no time limit leave --time out");
  EXPECT_EQ(Error({"-t", "UNLIMITED"}),
            "--time UNLIMITED: gpupool has no such word; for no time limit leave --time out");
  EXPECT_EQ(Error({"-t", "infinite"}),
            "--time infinite: gpupool has no such word; for no time limit leave --time out");
  EXPECT_EQ(Error({"--time", "11000d"}), "--time 11000d: a time limit must be at most 10 years");
  EXPECT_NE(Error({"--time", "soon"}).find("--time soon: 'soon' is not a duration"),
            std::string::npos);
  EXPECT_NE(Error({"--mem", "16X"}).find("--mem 16X: '16X' is not a size"), std::string::npos);
  EXPECT_NE(Error({"--cpus", "-2"}).find("--cpus -2: a job asks for at least 0.001 CPU"),
            std::string::npos);
  EXPECT_NE(Error({"--gpu-mem", "lots"}).find("--gpu-mem lots: 'lots' is not a size"),
            std::string::npos);
  EXPECT_EQ(Error({"--workdir", ""}), "--workdir '': give a directory");
  EXPECT_EQ(Error({"--image", " "}), "--image '': give an image reference");
}

TEST(BuildSubmissionTest, NamedEnvironmentsAndMounts) {
  EXPECT_EQ(
      Body(ParseArgs({"--env", "torch:2.4", "--env", "A=1", "--mount", "data:/data:ro", "--mount",
                      "/scratch:/scratch"})),
      R"({"command":["python","train.py"],"env":{"A":"1"},"environment":"torch:2.4",)"
      R"("mounts":[{"source":"/home/alice/proj/data","target":"/data","read_only":true},)"
      R"({"source":"/scratch","target":"/scratch","read_only":false}],)"
      R"("workdir":"/home/alice/proj",)"
      R"("request":{"gpus":0,"gpu_milli":1000,"cpu_milli":1000,"memory_bytes":0,"tasks":1}})");
  EXPECT_EQ(Error({"--env", "torch:2.4", "--env", "jax:0.4"}),
            "--env jax:0.4: only one named environment per job; already given torch:2.4");
  EXPECT_EQ(Error({"--env", "torch:2.4", "--image", "x"}),
            "--env torch:2.4: a named environment already sets the image; drop --image");
  EXPECT_EQ(Error({"--mount", "/a:/b"}),
            "--mount /a:/b: mounts are for container jobs; add --image REF or --env NAME:VERSION");
  for (const char* bad : {"/a", "/a:b", "/a:/b:rx", "/a:/b:ro:x", ":/b"}) {
    EXPECT_EQ(Error({"--image", "x", "--mount", bad}),
              std::string("--mount ") + bad +
                  ": use SRC:DST[:ro] with an absolute DST, e.g. --mount /data:/data:ro");
  }
  EXPECT_EQ(Error({"--image", "x", "--mount", "/a:/b:ro"}), "OK");
}

TEST(BuildSubmissionTest, EmptyCommandIsAUsageError) {
  auto b = BuildSubmission({}, {}, "/w");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("nothing to run"), std::string::npos);
}

TEST(ScriptDirectivesTest, ReadsTheLeadingCommentBlockOnly) {
  const char* script =
      "#!/bin/bash\n"
      "# a comment\n"
      "#GPUPOOL --gpus 2 --name 'my run'\n"
      "\n"
      "#GPUPOOL   --env \"MSG=hello world\" # trailing comment\n"
      "#GPUPOOLX --gpus 9\n"
      "#SBATCH --gpus 7\n"
      "echo start\n"
      "#GPUPOOL --gpus 5\n";
  auto d = ReadScriptDirectives(script, "job.sh");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->size(), 3u);
  EXPECT_EQ((*d)[0].line, 3);
  EXPECT_EQ((*d)[0].words, (std::vector<std::string>{"--gpus", "2", "--name", "my run"}));
  EXPECT_EQ((*d)[1].line, 5);
  EXPECT_EQ((*d)[1].words, (std::vector<std::string>{"--env", "MSG=hello world"}));
  EXPECT_FALSE((*d)[1].sbatch);
  EXPECT_EQ((*d)[2].line, 7);
  EXPECT_EQ((*d)[2].words, (std::vector<std::string>{"--gpus", "7"}));
  EXPECT_TRUE((*d)[2].sbatch);
}

// A plain sbatch script's #SBATCH lines were ignored without a word: the job ran with no
// GPU, no limit and its output in $HOME. The options gpupool spells and means as sbatch
// does are read now (#GPUPOOL lines and the command line win); the rest are said.
// Slurm's --signal=[B:]SIG[@TIME], on the command line or an #SBATCH line.
TEST(BuildSubmissionTest, SignalIsSlurmsSpelling) {
  auto fields = [](std::vector<std::string> words) {
    words.insert(words.begin(), {"--time", "2h"});
    auto b = BuildSubmission(ParseArgs(std::move(words)), {"x"}, "/w");
    if (!b.ok()) return "ERROR: " + b.status().message();
    std::string out = std::to_string((*b)["warn_signal"].get<int>()) + "@" +
                      std::to_string((*b)["warn_time_s"].get<int64_t>());
    if (b->contains("warn_main_only")) out += " main";
    return out;
  };
  EXPECT_EQ(fields({"--signal", "USR1"}), "10@60");  // Slurm's default: 60 s before
  EXPECT_EQ(fields({"--signal=B:USR1@120"}), "10@120 main");
  EXPECT_EQ(fields({"--signal", "sigusr2@300"}), "12@300");
  EXPECT_EQ(fields({"--signal", "b:10@0"}), "10@0 main");
  EXPECT_EQ(fields({"--signal", "TERM"}), "15@60");
  EXPECT_EQ(Error({"--time", "1h", "--signal", "R:USR1@60"}).rfind("--signal R:USR1@60: R: ", 0),
            0u);
  EXPECT_EQ(Error({"--time", "1h", "--signal", "USR9"}),
            "--signal USR9: 'USR9' is no signal; give a name (USR1, USR2, TERM, ...) or a number, "
            "e.g. --signal B:USR1@120");
  EXPECT_NE(Error({"--time", "1h", "--signal", "65"}).find("--signal"), std::string::npos);
  EXPECT_NE(Error({"--time", "1h", "--signal", "USR1@-5"}).find("--signal"), std::string::npos);
  EXPECT_NE(Error({"--time", "1h", "--signal", "USR1@70000"}).find("--signal"), std::string::npos);
  EXPECT_NE(Error({"--time", "1h", "--signal", "X:USR1"}).find("[B:]SIG[@SECONDS]"),
            std::string::npos);
  // An #SBATCH line is read for it.
  auto d = ReadScriptDirectives("#!/bin/sh\n#SBATCH --signal=B:USR1@90\nrun\n", "job.sh");
  ASSERT_TRUE(d.ok());
  std::vector<std::string> ignored;
  auto f = ParseDirectives(*d, "job.sh", &ignored);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->signal, "B:USR1@90");
  EXPECT_TRUE(ignored.empty()) << ignored[0];
}

TEST(ScriptDirectivesTest, SbatchLinesAreReadWhereTheyMeanTheSameAndTheRestAreSaid) {
  const char* script =
      "#!/bin/bash\n"
      "#SBATCH --gpus=2\n"
      "#SBATCH --time 1:00:00 -J sb\n"
      "#SBATCH --output=%x-%j.out\n"
      "#SBATCH --partition=gpu --account proj\n"
      "#SBATCH --gres=gpu:2\n"
      "#SBATCH -c4 --mem=8G --requeue --exclusive\n"
      "#SBATCH --priority 5\n"
      "#SBATCH --grace 60s\n"
      "#GPUPOOL -J gp\n"
      "python train.py\n";
  auto d = ReadScriptDirectives(script, "job.sh");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::vector<std::string> ignored;
  auto f = ParseDirectives(*d, "job.sh", &ignored);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->gpus, "2");
  EXPECT_EQ(f->time, "1:00:00");
  EXPECT_EQ(f->name, "gp");  // #GPUPOOL wins
  EXPECT_EQ(f->output, "%x-%j.out");
  EXPECT_EQ(f->cpus, "4");
  EXPECT_EQ(f->mem, "8G");
  EXPECT_EQ(f->requeue, true);
  EXPECT_FALSE(f->partition);
  EXPECT_FALSE(f->priority);
  ASSERT_EQ(ignored.size(), 6u);
  EXPECT_EQ(ignored[0],
            "job.sh:5: #SBATCH --partition=gpu ignored: gpupool has no partitions: every job may "
            "run on every node it fits (choose GPUs with --gpu-model, --vendor or "
            "--min-capability)");
  EXPECT_EQ(ignored[1],
            "job.sh:5: #SBATCH --account proj ignored: Slurm's account is --project PROJECT here "
            "(docs/slurm.md)");
  EXPECT_EQ(ignored[2].rfind("job.sh:6: #SBATCH --gres=gpu:2 ignored: --gres=gpu:N is --gpus N "
                             "here",
                             0),
            0u)
      << ignored[2];
  EXPECT_EQ(ignored[3].rfind("job.sh:7: #SBATCH --exclusive ignored: placement is the "
                             "scheduler's",
                             0),
            0u)
      << ignored[3];
  EXPECT_EQ(ignored[4],
            "job.sh:8: #SBATCH --priority 5 ignored: it means something else in Slurm; write "
            "gpupool's option on a #GPUPOOL line");
  // Red team 8, finding 6: sbatch has no --grace; it said "means something else in Slurm".
  EXPECT_EQ(ignored[5],
            "job.sh:9: #SBATCH --grace 60s ignored: not an sbatch option (a gpupool one): write "
            "it on a #GPUPOOL line, which takes gpupool's options");
  // The command line wins over both.
  SubmitFlags cmdline;
  cmdline.gpus = "1";
  EXPECT_EQ(MergeFlags(*f, cmdline).gpus, "1");
  // A bad value names its #SBATCH line.
  auto bad = ParseDirectives({{3, {"--mem=4000"}, true}}, "job.sh");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "job.sh:3: #SBATCH line: --mem 4000: " + ParseMemorySize("4000").status().message());
}

// #SBATCH --begin was left out with a warning, so the job started at once although its user
// asked for a later start: it is refused (exit 2), saying what to do instead.
TEST(ScriptDirectivesTest, SbatchBeginIsRefusedNotIgnored) {
  for (const std::vector<std::string>& words : {std::vector<std::string>{"--begin=now+1hour"},
                                                {"-c", "2", "--begin", "16:00"},
                                                {"-b", "now+60"},
                                                {"-bnow+60"}}) {
    std::vector<std::string> ignored;
    auto f = ParseDirectives({{4, words, true}}, "job.sh", &ignored);
    ASSERT_FALSE(f.ok()) << words[0];
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
    const std::string msg = f.status().message();
    EXPECT_EQ(msg.rfind("job.sh:4: #SBATCH -", 0), 0u) << msg;
    EXPECT_NE(msg.find("gpupool has no deferred start: submit the job when it should start, or "
                       "submit it held (-H/--hold) and `gpupool release ID` it then"),
              std::string::npos)
        << msg;
  }
  // The command line's --begin is refused by the parser, with the same words.
  CLI::App app("script lines");
  EXPECT_NE(ExplainUnknown(app, "--begin=16:00", "gpupool submit")
                .find("'--begin' of `gpupool submit`: gpupool has no deferred start"),
            std::string::npos);
}

// Slurm's --gpus counts for the whole job, gpupool's per task: with several tasks the
// same words would ask for more GPUs, so they are refused naming --gpus-per-task. The task
// count is the merged one: `gpupool submit -n 2 job.sh` or a #GPUPOOL --ntasks line with
// #SBATCH --gpus=2 was taken as 2 GPUs per task, and #SBATCH -n 4 refused though the
// command line said -n 1.
TEST(ScriptDirectivesTest, SbatchGpusPerJobWithTasksIsRefused) {
  const std::string why =
      ": Slurm counts --gpus for the whole job, gpupool per task; write #SBATCH "
      "--gpus-per-task N (the GPUs each task needs), or give --gpus N (per task) on the "
      "command line";
  // The script and command line merged, and checked, as submit does.
  auto check = [](const std::vector<Directive>& lines, const SubmitFlags& cmdline) {
    auto f = ParseDirectives(lines, "job.sh");
    if (!f.ok()) return f.status().message();
    Status s = CheckPerJobGpus(MergeFlags(*f, cmdline));
    return s.ok() ? std::string("OK") : s.message();
  };
  SubmitFlags none;
  EXPECT_EQ(check({{2, {"--ntasks=4"}, true}, {3, {"--gpus=8"}, true}}, none),
            "job.sh:3: #SBATCH line: --gpus=8 with --ntasks 4" + why);
  SubmitFlags two_tasks;
  two_tasks.tasks = "2";
  EXPECT_EQ(check({{2, {"--gpus=2"}, true}}, two_tasks),
            "job.sh:2: #SBATCH line: --gpus=2 with --ntasks 2" + why);
  EXPECT_EQ(check({{2, {"--ntasks", "2"}, false}, {3, {"-G", "2"}, true}}, none),
            "job.sh:3: #SBATCH line: -G 2 with --ntasks 2" + why);
  // One task in the end, whichever line said more: per job and per task are the same.
  SubmitFlags one_task;
  one_task.tasks = "1";
  EXPECT_EQ(check({{2, {"-n", "4"}, true}, {3, {"--gpus=2"}, true}}, one_task), "OK");
  EXPECT_EQ(check({{2, {"--gpus=2"}, true}}, none), "OK");
  // GPUs given per task elsewhere replace the #SBATCH line's count.
  SubmitFlags gpus;
  gpus.gpus = "2";
  EXPECT_EQ(check({{2, {"-n", "4"}, true}, {3, {"--gpus=8"}, true}}, gpus), "OK");
  EXPECT_EQ(
      check({{2, {"-n", "4"}, true}, {3, {"--gpus=8"}, true}, {4, {"--gpus", "2"}, false}}, none),
      "OK");
  auto per_task =
      ParseDirectives({{2, {"-n", "4"}, true}, {3, {"--gpus-per-task=2"}, true}}, "job.sh");
  ASSERT_TRUE(per_task.ok()) << per_task.status().ToString();
  EXPECT_EQ(per_task->gpus, "2");
  EXPECT_EQ(per_task->tasks, "4");
  EXPECT_TRUE(CheckPerJobGpus(*per_task).ok());
  auto replaced = ParseDirectives(
      {{2, {"-n", "4"}, true}, {3, {"-G", "8"}, true}, {4, {"--gpus-per-task", "2"}, true}},
      "job.sh");
  ASSERT_TRUE(replaced.ok()) << replaced.status().ToString();
  EXPECT_EQ(replaced->gpus, "2");
  EXPECT_TRUE(CheckPerJobGpus(*replaced).ok());
}

TEST(ScriptDirectivesTest, NoShebangAndBackslashes) {
  auto d = ReadScriptDirectives("#GPUPOOL --name a\\ b --env X=a#b\npython x.py\n", "s");
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].words, (std::vector<std::string>{"--name", "a b", "--env", "X=a#b"}));
}

// A bad size on a #GPUPOOL line names its line, as the line's other errors do (it was
// reported later, by the submission's checks, without one); a good one, or --mem 0 (no
// explicit request), passes.
TEST(ScriptDirectivesTest, ABadSizeNamesItsLine) {
  auto err = [](const char* script) {
    auto d = ReadScriptDirectives(script, "run.sh");
    if (!d.ok()) return d.status().message();
    auto f = ParseDirectives(*d, "run.sh");
    return f.ok() ? std::string("OK") : f.status().message();
  };
  EXPECT_EQ(err("#!/bin/sh\n#GPUPOOL --gpus 1\n#GPUPOOL --mem 10Q\n"),
            "run.sh:3: #GPUPOOL line: --mem 10Q: " + ParseMemorySize("10Q").status().message());
  EXPECT_EQ(err("#GPUPOOL --mem 16G\n#GPUPOOL --shm-size 64\n"),
            "run.sh:2: #GPUPOOL line: --shm-size 64: " + ParseMemorySize("64").status().message());
  EXPECT_EQ(err("#GPUPOOL --gpus 1\n\n#GPUPOOL --gpu-mem 0\n"),
            "run.sh:3: #GPUPOOL line: --gpu-mem 0: must be more than 0");
  EXPECT_EQ(err("#GPUPOOL --mem 0 --shm-size 1G\n#GPUPOOL --gpus 1 --gpu-mem 20G\n"), "OK");
}

TEST(ScriptDirectivesTest, UnterminatedQuoteNamesTheLine) {
  auto d = ReadScriptDirectives("#!/bin/sh\n#GPUPOOL --name 'oops\n", "run.sh");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), "run.sh:2: #GPUPOOL line: unterminated ' quote");
}

TEST(ScriptDirectivesTest, ParsedOptionsAndTheirErrors) {
  auto d =
      ReadScriptDirectives("#GPUPOOL --gpus 2\n#GPUPOOL --env A=1\n#GPUPOOL --env B=2\n", "s.sh");
  ASSERT_TRUE(d.ok());
  auto f = ParseDirectives(*d, "s.sh");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->gpus, "2");
  EXPECT_EQ(f->env, (std::vector<std::string>{"A=1", "B=2"}));

  auto bad = ParseDirectives({{4, {"--gpus", "2", "--bogus"}}}, "s.sh");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("s.sh:4: #GPUPOOL line: "), std::string::npos);
  EXPECT_NE(bad.status().message().find("--bogus"), std::string::npos);
  auto typo = ParseDirectives({{2, {"--gpu", "2"}}}, "s.sh");
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().message(),
            "s.sh:2: #GPUPOOL line: unknown option '--gpu' of `gpupool submit`; did you mean "
            "--gpus? (`gpupool submit --help` lists its options)");
  auto slurm = ParseDirectives({{3, {"-J", "x", "-t", "10", "-H", "-d", "afterok:4"}}}, "s.sh");
  ASSERT_TRUE(slurm.ok()) << slurm.status().ToString();
  EXPECT_EQ(slurm->name, "x");
  EXPECT_EQ(slurm->time, "10");
  EXPECT_EQ(slurm->hold, true);
  EXPECT_EQ(slurm->slurm_dependencies, std::vector<std::string>{"afterok:4"});
  EXPECT_FALSE(ParseDirectives({{1, {"stray"}}}, "s.sh").ok());
  EXPECT_FALSE(ParseDirectives({{1, {"--help"}}}, "s.sh").ok());
}

TEST(MergeFlagsTest, CommandLineOverridesScript) {
  SubmitFlags script = ParseArgs({"--gpus", "2", "--name", "from-script", "--env", "A=1",
                                  "--gpu-model", "A100", "--time", "1h", "--requeue"});
  SubmitFlags cmdline = ParseArgs({"--gpus", "4", "--env", "A=2", "--no-requeue"});
  SubmitFlags m = MergeFlags(script, cmdline);
  EXPECT_FALSE(m.hold.has_value());
  EXPECT_EQ(MergeFlags(ParseArgs({"-H", "-d", "afterok:1"}), ParseArgs({"-d", "afterany:2"}))
                .slurm_dependencies,
            (std::vector<std::string>{"afterok:1", "afterany:2"}));
  EXPECT_EQ(MergeFlags(ParseArgs({}), ParseArgs({"-H"})).hold, true);
  EXPECT_EQ(m.gpus, "4");
  EXPECT_EQ(m.name, "from-script");
  EXPECT_EQ(m.time, "1h");
  EXPECT_EQ(m.gpu_models, std::vector<std::string>{"A100"});
  EXPECT_EQ(m.requeue, false);
  EXPECT_NE(Body(m).find(R"("env":{"A":"2"})"), std::string::npos);
}

TEST(MergeFlagsTest, CommandLineShareReplacesScriptMemoryShare) {
  SubmitFlags m = MergeFlags(ParseArgs({"--gpu-mem", "20G"}), ParseArgs({"--gpu-share", "0.5"}));
  EXPECT_FALSE(m.gpu_mem.has_value());
  EXPECT_NE(Body(m).find(R"("gpus":1,"gpu_milli":500,"cpu_milli")"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::cli
