// gpupool cancel --signal through the process launcher and a real shim (Launcher::SignalJob,
// stop_request.h): the signal reaches the job's processes, the job goes on running.
#include <gtest/gtest.h>
#include <signal.h>

#include <csignal>
#include <string>

#include "agent/job_files.h"
#include "agent/launcher.h"
#include "agent/launcher_test_fixture.h"
#include "agent/launcher_test_util.h"

namespace gpupool::agent {
namespace {

using testing::LauncherTest;
using testing::ReadWholeFile;
using testing::TaskRun;
using testing::TestSpec;
using testing::WaitForFileContaining;
using Kind = JobEvent::Kind;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool Supervised(Launcher& launcher, const RunId& id) {
  for (const RunId& r : launcher.Running()) {
    if (r == id) return true;
  }
  return false;
}

// The main shell and a worker in a session (and process group) of its own each note USR1
// and USR2 and run on until `stop` exists; the worker says "ready" once its traps are set.
std::vector<std::string> TrappingJob(const std::string& stop) {
  const std::string loop = "while [ ! -e " + stop + " ]; do sleep 0.05; done";
  const std::string worker =
      "trap \"echo worker-usr1\" USR1; trap \"echo worker-usr2\" USR2; "
      "echo ready; " +
      loop;
  return {"sh", "-c",
          "trap 'echo main-usr1' USR1; trap 'echo main-usr2' USR2; setsid sh -c '" + worker +
              "' & " + loop + "; wait; echo done"};
}

TEST_F(LauncherTest, ASignalReachesEveryProcessOfTheJobWhichGoesOn) {
  const std::string stop = dir_.path() + "/stop-181";
  Start(TestSpec(181, TrappingJob(stop)));
  const std::string out = JobFile(181, kStdoutFile);
  ASSERT_TRUE(WaitForFileContaining(out, "ready", 5000));
  ASSERT_TRUE(launcher_->SignalJob(TaskRun(181), SIGUSR1, /*main_only=*/false).ok());
  ASSERT_TRUE(WaitForFileContaining(out, "main-usr1", 5000)) << ReadWholeFile(out);
  ASSERT_TRUE(WaitForFileContaining(out, "worker-usr1", 5000)) << ReadWholeFile(out);
  // Two in a row are each carried out (queued, not merged), and the job still runs.
  ASSERT_TRUE(launcher_->SignalJob(TaskRun(181), SIGUSR2, false).ok());
  ASSERT_TRUE(launcher_->SignalJob(TaskRun(181), SIGUSR1, false).ok());
  ASSERT_TRUE(
      testing::PollUntil([&] { return Count(ReadWholeFile(out), "worker-usr1") == 2; }, 5000))
      << ReadWholeFile(out);
  ASSERT_TRUE(WaitForFileContaining(out, "worker-usr2", 5000)) << ReadWholeFile(out);
  EXPECT_TRUE(Supervised(*launcher_, TaskRun(181)));
  EXPECT_NE(ReadWholeFile(JobFile(181, kShimLogFile)).find("gpupool cancel --signal: SIGUSR1 to"),
            std::string::npos)
      << ReadWholeFile(JobFile(181, kShimLogFile));
  ASSERT_TRUE(WriteFileDurably(stop, "", 0644, false).ok());
  JobEvent e = Finish(181);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
  EXPECT_FALSE(e.cancelled);
  EXPECT_NE(ReadWholeFile(out).find("done"), std::string::npos) << ReadWholeFile(out);
}

// Slurm's --batch: the main process only, not the worker in its own process group. The
// USR2 that follows to every process is the event to wait for: the worker would run a
// USR1 that reached it before it (the lower signal first, and sent first).
TEST_F(LauncherTest, ASignalToTheMainProcessOnlyMissesTheOthers) {
  const std::string stop = dir_.path() + "/stop-182";
  Start(TestSpec(182, TrappingJob(stop)));
  const std::string out = JobFile(182, kStdoutFile);
  ASSERT_TRUE(WaitForFileContaining(out, "ready", 5000));
  ASSERT_TRUE(launcher_->SignalJob(TaskRun(182), SIGUSR1, /*main_only=*/true).ok());
  ASSERT_TRUE(WaitForFileContaining(out, "main-usr1", 5000)) << ReadWholeFile(out);
  ASSERT_TRUE(launcher_->SignalJob(TaskRun(182), SIGUSR2, false).ok());
  ASSERT_TRUE(WaitForFileContaining(out, "worker-usr2", 5000)) << ReadWholeFile(out);
  EXPECT_EQ(ReadWholeFile(out).find("worker-usr1"), std::string::npos) << ReadWholeFile(out);
  EXPECT_NE(ReadWholeFile(JobFile(182, kShimLogFile)).find("(the main process only)"),
            std::string::npos);
  ASSERT_TRUE(WriteFileDurably(stop, "", 0644, false).ok());
  JobEvent e = Finish(182);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
}

// A shim started by an agent before signal requests would die of the request's real-time
// signal: it is not sent one. Nor is a run the launcher does not supervise.
TEST_F(LauncherTest, ASignalIsNotSentToAShimThatTakesNoRequests) {
  const std::string stop = dir_.path() + "/stop-183";
  Start(TestSpec(183, TrappingJob(stop)));
  const std::string run_dir = JobDir(dir_.path(), TaskRun(183));
  ASSERT_TRUE(WaitForFileContaining(JobFile(183, kStdoutFile), "ready", 5000));
  Result<ShimRecord> rec = ReadShimRecord(run_dir);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_TRUE(rec->signal_requests);
  rec->signal_requests = false;  // as an older shim wrote it
  ASSERT_TRUE(
      WriteFileDurably(run_dir + "/" + kShimFile, ShimRecordToJson(*rec), 0600, false).ok());
  Status st = launcher_->SignalJob(TaskRun(183), SIGUSR1, false);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("older gpupool agent"), std::string::npos) << st.message();
  EXPECT_EQ(launcher_->SignalJob(TaskRun(999), SIGUSR1, false).code(), StatusCode::kNotFound);
  EXPECT_EQ(launcher_->SignalJob(TaskRun(183), 65, false).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Supervised(*launcher_, TaskRun(183)));
  ASSERT_TRUE(WriteFileDurably(stop, "", 0644, false).ok());
  JobEvent e = Finish(183);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
  EXPECT_EQ(ReadWholeFile(JobFile(183, kStdoutFile)).find("usr1"), std::string::npos);
}

// Red team 8, finding 4: a signal request and a stop pending at the shim together (it is
// frozen here, as a busy one would be): the lowest-numbered signal is taken first, so the
// stop's SIGTERM came before the USR1 sent before it (a checkpoint request arriving after
// the stop). The queued requests are carried out first, as the shim's log shows (the job
// itself cannot tell: signals pending together reach its traps by number).
TEST_F(LauncherTest, ASignalSentBeforeAStopIsCarriedOutBeforeIt) {
  LaunchSpec spec =
      TestSpec(184, {"sh", "-c",
                     "trap 'echo usr1' USR1; trap 'echo term; exit 0' TERM; echo ready; "
                     "while :; do sleep 0.05; done"});
  spec.grace_s = 30;
  Start(spec);
  const std::string out = JobFile(184, kStdoutFile);
  ASSERT_TRUE(WaitForFileContaining(out, "ready", 5000));
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(184)));
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  ASSERT_EQ(::kill(rec->pid, SIGSTOP), 0);
  ASSERT_TRUE(launcher_->SignalJob(TaskRun(184), SIGUSR1, false).ok());
  ASSERT_TRUE(launcher_->Cancel(TaskRun(184)).ok());
  ASSERT_EQ(::kill(rec->pid, SIGCONT), 0);
  JobEvent e = Finish(184);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
  EXPECT_EQ(ReadWholeFile(out), "ready\nusr1\nterm\n");
  const std::string log = ReadWholeFile(JobFile(184, kShimLogFile));
  const size_t usr1 = log.find("gpupool cancel --signal: SIGUSR1 to");
  ASSERT_NE(usr1, std::string::npos) << log;
  EXPECT_LT(usr1, log.find("cancel: SIGTERM to")) << log;
}

// ... and a STOP asked for while the job is being stopped is not sent: frozen, the job
// could not run its SIGTERM handler, and would be killed at the grace's end.
TEST_F(LauncherTest, AStopSignalIsNotSentToAJobBeingStopped) {
  LaunchSpec spec = TestSpec(
      185, {"sh", "-c",
            "trap 'sleep 0.5; echo term; exit 0' TERM; echo ready; while :; do sleep 0.05; "
            "done"});
  spec.grace_s = 30;
  Start(spec);
  const std::string out = JobFile(185, kStdoutFile);
  const std::string log = JobFile(185, kShimLogFile);
  ASSERT_TRUE(WaitForFileContaining(out, "ready", 5000));
  ASSERT_TRUE(launcher_->Cancel(TaskRun(185)).ok());
  ASSERT_TRUE(WaitForFileContaining(log, "SIGCONT after it", 5000)) << ReadWholeFile(log);
  ASSERT_TRUE(launcher_->SignalJob(TaskRun(185), SIGSTOP, false).ok());
  JobEvent e = Finish(185);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
  EXPECT_FALSE(e.signal.has_value()) << e.reason;
  EXPECT_EQ(ReadWholeFile(out), "ready\nterm\n");
  EXPECT_NE(ReadWholeFile(log).find("SIGSTOP not sent, the job is being stopped"),
            std::string::npos)
      << ReadWholeFile(log);
}

}  // namespace
}  // namespace gpupool::agent
