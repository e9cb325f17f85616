// A job without cgroups of its own (a non-root agent, isolation off, cgroup v1 with
// nothing to limit), through the real shim: its processes outside its process group are
// the supervisor's descendants. A stop's SIGTERM reaches a worker in a session of its
// own, and what the job (or an exec session in it) leaves running when its main process
// ends is killed with it, as removing its cgroups would.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <memory>
#include <string>

#include "agent/job_files.h"
#include "agent/launcher.h"
#include "agent/launcher_test_util.h"
#include "agent/proc_util.h"
#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::agent {
namespace {

using testing::ReadWholeFile;
using testing::ScratchDir;
using testing::TaskRun;
using testing::TestOptions;
using testing::TestSpec;
using testing::WaitForEvent;
using testing::WaitForFileContaining;
using Kind = JobEvent::Kind;

class NoCgroupLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    LauncherOptions o = TestOptions(dir_.path());
    o.cgroup_root = "";  // no cgroups for any job
    launcher_ = NewProcessLauncher(o);
  }
  void TearDown() override {
    launcher_.reset();
    testing::KillLeftoverJobs(dir_.path());
    for (pid_t pid : strays_) ::kill(pid, SIGKILL);
  }
  void Start(const LaunchSpec& spec) {
    Status st = launcher_->Launch(spec);
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::optional<JobEvent> e = WaitForEvent(*launcher_, spec.id, 5000);
    ASSERT_TRUE(e.has_value());
    ASSERT_EQ(e->kind, Kind::kStarted) << e->reason;
  }
  std::string File(const char* name) const { return dir_.path() + "/" + name; }
  // The pid a job wrote to `path`, remembered so that a failing test kills it.
  pid_t PidIn(const std::string& path) {
    std::optional<uint64_t> pid = ParseUint64(Trim(ReadWholeFile(path)));
    if (!pid) return 0;
    strays_.push_back(static_cast<pid_t>(*pid));
    return static_cast<pid_t>(*pid);
  }
  // Whether `pid` still runs (a zombie does not).
  static bool Alive(pid_t pid) {
    Result<std::string> stat = ReadFileToString("/proc/" + std::to_string(pid) + "/stat", 4096);
    if (!stat.ok()) return false;
    std::optional<ProcStat> st = ParseProcStat(pid, *stat);
    return st && st->state != 'Z';
  }

  ScratchDir dir_;
  std::unique_ptr<Launcher> launcher_;
  std::vector<pid_t> strays_;
};

// The worker double-forks into a session of its own and the job's main process exits 0 at
// once: the worker would run on, holding the job's GPUs, with nothing to show for it.
TEST_F(NoCgroupLauncherTest, WhatAJobLeavesRunningEndsWithIt) {
  const std::string pidfile = File("worker.pid");
  Start(TestSpec(
      301, {"sh", "-c",
            "(setsid sh -c 'echo $$ > " + pidfile + ".tmp; mv " + pidfile + ".tmp " + pidfile +
                "; exec sleep 300' &); "
                "while [ ! -s " +
                pidfile + " ]; do sleep 0.01; done; echo ready"}));
  std::optional<JobEvent> e = WaitForEvent(*launcher_, 301, 10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kExited) << e->reason;
  EXPECT_EQ(e->exit_code, 0) << e->reason;
  const pid_t worker = PidIn(pidfile);
  ASSERT_GT(worker, 0);
  EXPECT_FALSE(Alive(worker)) << "the job's worker outlived it";
  EXPECT_NE(ReadWholeFile(JobDir(dir_.path(), TaskRun(301)) + "/" + kShimLogFile)
                .find("SIGKILL to 1 processes the job left running"),
            std::string::npos);
}

// An exec session (gpupool exec, mpirun's rsh agent) in a task without cgroups: what it
// leaves running when its command ends (a worker in a session of its own) ends with the
// session, not with the job, whose supervisor never sees it; the task runs on.
TEST_F(NoCgroupLauncherTest, WhatAnExecSessionLeavesRunningEndsWithIt) {
  Start(TestSpec(303, {"sleep", "30"}));
  const std::string pidfile = File("exec-worker.pid");
  LaunchSpec exec = TestSpec(
      303, {"sh", "-c",
            "(setsid sh -c 'echo $$ > " + pidfile + ".tmp; mv " + pidfile + ".tmp " + pidfile +
                "; exec sleep 300' &); "
                "while [ ! -s " +
                pidfile + " ]; do sleep 0.01; done; echo ready"});
  exec.id = RunId::ExecIn(TaskId{303, 0, 1}, 1);
  Start(exec);
  std::optional<JobEvent> e = WaitForEvent(*launcher_, exec.id, 10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kExited) << e->reason;
  EXPECT_EQ(e->exit_code, 0) << e->reason;
  const pid_t worker = PidIn(pidfile);
  ASSERT_GT(worker, 0);
  EXPECT_FALSE(Alive(worker)) << "the exec session's worker outlived it";
  EXPECT_NE(ReadWholeFile(JobDir(dir_.path(), exec.id) + "/" + kShimLogFile)
                .find("SIGKILL to 1 processes the job left running"),
            std::string::npos);
  const std::vector<RunId> running = launcher_->Running();
  EXPECT_NE(std::find(running.begin(), running.end(), TaskRun(303)), running.end());
}

// A cancel's SIGTERM reaches the worker in its own session, which ends in its grace; the
// main shell gets one SIGTERM (its process group's).
TEST_F(NoCgroupLauncherTest, ACancelsSigtermReachesAWorkerInItsOwnSession) {
  const std::string mark = File("worker-term");
  const std::string worker =
      "trap \"echo worker-term >> " + mark + "; exit 0\" TERM; echo ready; sleep 30 & wait";
  LaunchSpec spec = TestSpec(
      302, {"sh", "-c", "trap 'echo main-term' TERM; setsid sh -c '" + worker + "' & wait; wait"});
  spec.grace_s = 5;
  Start(spec);
  const std::string out = JobDir(dir_.path(), TaskRun(302)) + "/" + kStdoutFile;
  ASSERT_TRUE(WaitForFileContaining(out, "ready", 5000));
  ASSERT_TRUE(launcher_->Cancel(TaskRun(302)).ok());
  std::optional<JobEvent> e = WaitForEvent(*launcher_, 302, 10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->cancelled);
  EXPECT_EQ(ReadWholeFile(mark), "worker-term\n");
  EXPECT_EQ(ReadWholeFile(out), "ready\nmain-term\n");
  EXPECT_EQ(e->reason.find("SIGKILL after the grace period"), std::string::npos) << e->reason;
}

}  // namespace
}  // namespace gpupool::agent
