// A preemption's stop through the real launcher and shim (stop_request.h,
// docs/preemption.md): the deadline is in the job's GPUPOOL_PREEMPT_DEADLINE_FILE when
// its SIGTERM comes, and a second stop with a shorter grace (checkpoint-done) kills it
// at once instead of at the end of the first grace.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>

#include "agent/job_files.h"
#include "agent/launcher.h"
#include "agent/launcher_test_util.h"
#include "agent/run_id.h"

namespace gpupool::agent {
namespace {

using testing::ReadWholeFile;
using testing::ScratchDir;
using testing::TaskRun;
using testing::TestOptions;
using testing::TestSpec;
using testing::WaitForEvent;
using testing::WaitForFileContaining;

TEST(LauncherPreemptTest, TheDeadlineComesBeforeTermAndAShorterGraceKillsSooner) {
  ScratchDir dir;
  auto launcher = NewProcessLauncher(TestOptions(dir.path()));
  LaunchSpec spec = TestSpec(
      301, {"sh", "-c",
            "echo \"file=$GPUPOOL_PREEMPT_DEADLINE_FILE [$(cat $GPUPOOL_PREEMPT_DEADLINE_FILE)]\"; "
            "trap 'echo term:$(cat $GPUPOOL_PREEMPT_DEADLINE_FILE)' TERM; echo ready; "
            "while :; do sleep 0.05; done"});
  spec.preemptible = true;
  spec.grace_s = 100;
  ASSERT_TRUE(launcher->Launch(spec).ok());
  ASSERT_EQ(WaitForEvent(*launcher, 301, 5000)->kind, JobEvent::Kind::kStarted);
  const std::string out = JobDir(dir.path(), TaskRun(301)) + "/" + kStdoutFile;
  ASSERT_TRUE(WaitForFileContaining(out, "ready", 5000));
  // The file exists from the start, empty, in the run's directory.
  EXPECT_NE(ReadWholeFile(out).find("file=" + JobDir(dir.path(), TaskRun(301)) + "/" +
                                    kPreemptDeadlineFile + " []"),
            std::string::npos)
      << ReadWholeFile(out);
  ASSERT_TRUE(launcher->Stop(TaskRun(301), StopRequest{60, 1'700'000'060}).ok());
  ASSERT_TRUE(WaitForFileContaining(out, "term:1700000060", 5000)) << ReadWholeFile(out);
  // It ignores the SIGTERM and has 60 s; told again with no grace, it is killed now.
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(launcher->Stop(TaskRun(301), StopRequest{0, 1'700'000'060}).ok());
  std::optional<JobEvent> e = WaitForEvent(*launcher, 301, 5000);
  ASSERT_TRUE(e.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(e->kind, JobEvent::Kind::kExited);
  EXPECT_TRUE(e->cancelled);
  EXPECT_EQ(e->signal, SIGKILL);
}

// Only the pool sets the variable, and only for a preemptible job.
TEST(LauncherPreemptTest, AJobThatIsNotPreemptibleHasNoDeadlineFile) {
  ScratchDir dir;
  auto launcher = NewProcessLauncher(TestOptions(dir.path()));
  LaunchSpec spec = TestSpec(302, {"sh", "-c", "echo \"file=[$GPUPOOL_PREEMPT_DEADLINE_FILE]\""});
  spec.env["GPUPOOL_PREEMPT_DEADLINE_FILE"] = "/etc/passwd";
  ASSERT_TRUE(launcher->Launch(spec).ok());
  ASSERT_EQ(WaitForEvent(*launcher, 302, 5000)->kind, JobEvent::Kind::kStarted);
  std::optional<JobEvent> e = WaitForEvent(*launcher, 302, 5000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_EQ(ReadWholeFile(JobDir(dir.path(), TaskRun(302)) + "/" + kStdoutFile), "file=[]\n");
}

}  // namespace
}  // namespace gpupool::agent
