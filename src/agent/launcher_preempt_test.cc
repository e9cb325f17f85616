// A preemption's stop through the real launcher and shim (stop_request.h,
// docs/preemption.md): the deadline is in the job's GPUPOOL_PREEMPT_DEADLINE_FILE when
// its SIGTERM comes, and a second stop with a shorter grace (checkpoint-done) kills it
// at once instead of at the end of the first grace.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <csignal>

#include "agent/job_files.h"
#include "agent/launcher.h"
#include "agent/launcher_test_util.h"
#include "agent/run_id.h"
#include "agent/stop_request.h"

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

// The red team's hostage: a job that takes a lock on its own deadline file (flock works
// on a descriptor opened for reading) kept its shim waiting for the lock before the
// SIGTERM, so it was never stopped: its GPUs were kept past its grace, for ever. The
// deadline is written without the lock, and the file is the job user's alone (0600).
TEST(LauncherPreemptTest, ALockOnTheDeadlineFileDoesNotKeepTheJobFromBeingStopped) {
  ScratchDir dir;
  auto launcher = NewProcessLauncher(TestOptions(dir.path()));
  LaunchSpec spec = TestSpec(
      303, {"sh", "-c",
            "exec 9<\"$GPUPOOL_PREEMPT_DEADLINE_FILE\"; flock -x 9; trap '' TERM; echo ready; "
            "while :; do sleep 0.05; done"});
  spec.preemptible = true;
  ASSERT_TRUE(launcher->Launch(spec).ok());
  ASSERT_EQ(WaitForEvent(*launcher, 303, 5000)->kind, JobEvent::Kind::kStarted);
  const std::string run = JobDir(dir.path(), TaskRun(303));
  ASSERT_TRUE(WaitForFileContaining(run + "/" + kStdoutFile, "ready", 5000));
  struct stat st {};
  ASSERT_EQ(::stat((run + "/" + kPreemptDeadlineFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, spec.uid);
  ASSERT_TRUE(launcher->Stop(TaskRun(303), StopRequest{1, 1'700'000'001}).ok());
  // A grace of 1 s: killed within a few, the deadline written all the same.
  std::optional<JobEvent> e = WaitForEvent(*launcher, 303, 10'000);
  ASSERT_TRUE(e.has_value()) << "the job was never stopped";
  EXPECT_EQ(e->kind, JobEvent::Kind::kExited);
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_EQ(ReadWholeFile(run + "/" + kPreemptDeadlineFile), "1700000001\n");
}

// The file is the job user's, who may take a lease on it (F_SETLEASE), which held the
// shim's open for writing, and so the SIGTERM, for the kernel's lease-break-time (45 s).
TEST(LauncherPreemptTest, ALeaseOnTheDeadlineFileDoesNotDelayTheStop) {
  ScratchDir dir;
  auto launcher = NewProcessLauncher(TestOptions(dir.path()));
  LaunchSpec spec =
      TestSpec(304, {"/usr/bin/python3", "-c",
                     "import fcntl, os, signal, time\n"
                     "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                     "signal.signal(signal.SIGIO, signal.SIG_IGN)  # the lease break's\n"
                     "fd = os.open(os.environ['GPUPOOL_PREEMPT_DEADLINE_FILE'], os.O_RDONLY)\n"
                     "fcntl.fcntl(fd, 1024, fcntl.F_RDLCK)  # F_SETLEASE\n"
                     "print('ready', flush=True)\n"
                     "time.sleep(300)\n"});
  spec.preemptible = true;
  ASSERT_TRUE(launcher->Launch(spec).ok());
  ASSERT_EQ(WaitForEvent(*launcher, 304, 5000)->kind, JobEvent::Kind::kStarted);
  const std::string run = JobDir(dir.path(), TaskRun(304));
  ASSERT_TRUE(WaitForFileContaining(run + "/" + kStdoutFile, "ready", 5000))
      << ReadWholeFile(run + "/" + kStderrFile);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(launcher->Stop(TaskRun(304), StopRequest{1, 1'700'000'001}).ok());
  std::optional<JobEvent> e = WaitForEvent(*launcher, 304, 20'000);
  ASSERT_TRUE(e.has_value()) << "the job was not stopped within 20 s";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(e->signal, SIGKILL);
}

// The node's own stop (a stop with a reason: the GPU memory watch): a job that ignores
// SIGTERM and has a long grace is killed at once, is not cancelled (it fails), and its
// end gives the reason; a preemptible job's deadline file stays empty.
TEST(LauncherPreemptTest, TheNodesOwnStopKillsAtOnceAndTheJobFailsSayingWhy) {
  ScratchDir dir;
  auto launcher = NewProcessLauncher(TestOptions(dir.path()));
  LaunchSpec spec =
      TestSpec(305, {"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"});
  spec.preemptible = true;
  spec.grace_s = 100;
  ASSERT_TRUE(launcher->Launch(spec).ok());
  ASSERT_EQ(WaitForEvent(*launcher, 305, 5000)->kind, JobEvent::Kind::kStarted);
  const std::string run = JobDir(dir.path(), TaskRun(305));
  ASSERT_TRUE(WaitForFileContaining(run + "/" + kStdoutFile, "ready", 5000));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(launcher->Stop(TaskRun(305), StopRequest{0, 0, "over its GPU memory"}).ok());
  std::optional<JobEvent> e = WaitForEvent(*launcher, 305, 10'000);
  ASSERT_TRUE(e.has_value()) << "the job was not stopped";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(e->kind, JobEvent::Kind::kExited);
  EXPECT_FALSE(e->cancelled);
  EXPECT_FALSE(e->timed_out);
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_EQ(e->reason, "over its GPU memory (ended by SIGKILL)");
  // The cause as its own fields: the controller need not parse the words above.
  EXPECT_EQ(e->kill_cause, protocol::KillCause::kGpuMemWatch);
  EXPECT_EQ(e->kill_detail, "over its GPU memory");
  EXPECT_EQ(ReadWholeFile(run + "/" + kPreemptDeadlineFile), "");
}

// A node's stop whose signal never came (an agent killed after writing it) is not what a
// later plain cancel does: the cancel takes the request away, and the job ends cancelled.
TEST(LauncherPreemptTest, APlainCancelIsNotReadAsAStopLeftBehind) {
  ScratchDir dir;
  auto launcher = NewProcessLauncher(TestOptions(dir.path()));
  LaunchSpec spec = TestSpec(306, {"sh", "-c", "echo ready; exec sleep 300"});
  ASSERT_TRUE(launcher->Launch(spec).ok());
  ASSERT_EQ(WaitForEvent(*launcher, 306, 5000)->kind, JobEvent::Kind::kStarted);
  const std::string run = JobDir(dir.path(), TaskRun(306));
  ASSERT_TRUE(WaitForFileContaining(run + "/" + kStdoutFile, "ready", 5000));
  ASSERT_TRUE(WriteStopRequest(run, StopRequest{0, 0, "over its GPU memory"}).ok());
  ASSERT_TRUE(launcher->Cancel(TaskRun(306)).ok());
  std::optional<JobEvent> e = WaitForEvent(*launcher, 306, 10'000);
  ASSERT_TRUE(e.has_value()) << "the job was not stopped";
  EXPECT_TRUE(e->cancelled);
  EXPECT_EQ(e->reason.find("GPU memory"), std::string::npos) << e->reason;
  EXPECT_EQ(e->kill_cause, protocol::KillCause::kStopRequest);
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
