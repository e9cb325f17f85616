// The launcher across restarts: a task's shim outlives its launcher and is adopted by
// the next, whatever killed the agent; a killed shim is reported lost.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>

#include "agent/job_files.h"
#include "agent/launcher.h"
#include "agent/launcher_test_fixture.h"
#include "agent/launcher_test_util.h"

namespace gpupool::agent {
namespace {

using testing::LauncherTest;
using testing::ProcessAlive;
using testing::ReadWholeFile;
using testing::TaskRun;
using testing::TestOptions;
using testing::TestSpec;
using testing::WaitForEvent;
using testing::WaitForExit;
using testing::WaitForFileContaining;
using Kind = JobEvent::Kind;

TEST_F(LauncherTest, ShimOutlivesTheLauncherAndIsAdopted) {
  LaunchSpec spec = TestSpec(241, {"sh", "-c", "read x < fifo; exit 7"});
  spec.workdir = dir_.path();
  ASSERT_EQ(::mkfifo((dir_.path() + "/fifo").c_str(), 0600), 0);
  Start(spec);
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(241)));
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  launcher_.reset();  // the agent "dies"
  // Nothing ties the shim to the launcher (the start report's pipe is closed): both
  // processes are there now, and they are still there through the adoption below, as
  // the job's own exit code in the end shows (a killed job or shim would be reported as
  // signalled or lost).
  ASSERT_TRUE(ProcessAlive(rec->pid));
  ASSERT_TRUE(ProcessAlive(rec->job_pid));

  launcher_ = NewProcessLauncher(TestOptions(dir_.path()));
  Result<std::vector<JobEvent>> adopted = launcher_->Adopt();
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  ASSERT_EQ(adopted->size(), 1u);
  EXPECT_EQ((*adopted)[0].kind, Kind::kStarted);
  EXPECT_TRUE((*adopted)[0].adopted);
  EXPECT_EQ((*adopted)[0].start_time_us, rec->start_time_us);
  EXPECT_EQ(launcher_->Running(), std::vector<RunId>{TaskRun(241)});
  // Adopting twice does not duplicate.
  EXPECT_TRUE(launcher_->Adopt()->empty());

  // Let the job finish; the new launcher reports it.
  {
    FILE* f = std::fopen((dir_.path() + "/fifo").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("go\n", f);
    std::fclose(f);
  }
  JobEvent e = Finish(241);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_EQ(e.exit_code, 7);
}

// A status that cannot be written when the job ends (a full disk; here a directory in
// the way of its temporary file) is not a lost job: the shim stays, tries again, and
// once the write lands the launcher reports how the job really ended, and when.
TEST_F(LauncherTest, AStatusThatCannotBeWrittenYetIsReportedOnceItIsNotLost) {
  LaunchSpec spec = TestSpec(245, {"sh", "-c", "read x < fifo; exit 5"});
  spec.workdir = dir_.path();
  ASSERT_EQ(::mkfifo((dir_.path() + "/fifo").c_str(), 0600), 0);
  Start(spec);
  const std::string squatter = JobFile(245, kStatusFile) + ".tmp";
  ASSERT_EQ(::mkdir(squatter.c_str(), 0700), 0);
  {
    FILE* f = std::fopen((dir_.path() + "/fifo").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("go\n", f);
    std::fclose(f);
  }
  ASSERT_TRUE(
      WaitForFileContaining(JobFile(245, kShimLogFile), "cannot record the job's status", 10'000))
      << ReadWholeFile(JobFile(245, kShimLogFile));
  const int64_t failed_at_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
  EXPECT_EQ(launcher_->Running(), std::vector<RunId>{TaskRun(245)});
  ASSERT_EQ(::rmdir(squatter.c_str()), 0);
  JobEvent e = Finish(245, 60'000);
  EXPECT_EQ(e.kind, Kind::kExited) << e.reason;
  EXPECT_EQ(e.exit_code, 5);
  EXPECT_LE(e.time_us, failed_at_us);  // its real end, not the moment the write landed
  EXPECT_NE(ReadWholeFile(JobFile(245, kShimLogFile)).find("recorded the job's status at try"),
            std::string::npos);
}

// The shim's own writes fail by the node's fault too (its host file here; a full disk
// fails them the same way): the task was not started, and the node says so.
TEST_F(LauncherTest, AHostFileTheShimCannotWriteIsTheNodesFault) {
  const std::string marker = dir_.path() + "/ran";
  LaunchSpec spec = TestSpec(247, {"touch", marker});
  spec.hostfile = "10.0.0.1 slots=1\n";
  const std::string squatter = JobFile(247, kHostFile) + ".tmp";
  ASSERT_TRUE(std::filesystem::create_directories(squatter));
  ASSERT_TRUE(launcher_->Launch(spec).ok());
  JobEvent e = Finish(247);
  EXPECT_EQ(e.kind, Kind::kLost) << e.reason;
  EXPECT_TRUE(e.not_started);
  EXPECT_NE(e.reason.find("hostfile.tmp"), std::string::npos) << e.reason;
  EXPECT_NE(::access(marker.c_str(), F_OK), 0) << "the command ran";
}

// Runs live where users see them (STATE/jobs/<job>/<task>.<attempt>, exec sessions in
// STATE/jobs/<job>/exec-<id>), and a task holds one attempt on a node at a time: a later
// attempt is refused while an earlier one runs, whatever else of the job runs beside it.
TEST_F(LauncherTest, ATaskRunsOneAttemptAtATimeInDirectoriesNamedByItsIdentity) {
  LaunchSpec first = TestSpec(300, {"sh", "-c", "echo first; exec sleep 30"});
  Start(first);
  EXPECT_EQ(ReadShimRecord(dir_.path() + "/jobs/300/0.1").value_or(ShimRecord{}).id, first.id);
  ASSERT_TRUE(WaitForFileContaining(dir_.path() + "/jobs/300/0.1/stdout.log", "first", 5000));

  LaunchSpec second = first;
  second.id.attempt = 2;
  Status refused = launcher_->Launch(second);
  EXPECT_EQ(refused.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(refused.message().find("job 300 task 0 attempt 1 still runs"), std::string::npos)
      << refused.message();
  // Another task of the job, and a session in the running attempt, may run beside it.
  LaunchSpec other_task = TestSpec(300, {"sh", "-c", "echo task1"});
  other_task.id.task = 1;
  Start(other_task);
  LaunchSpec session = TestSpec(300, {"sh", "-c", "echo session"});
  session.id.exec = 9;
  Start(session);
  std::optional<JobEvent> ended = WaitForEvent(*launcher_, session.id, 10'000);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->dir, dir_.path() + "/jobs/300/exec-9");
  EXPECT_EQ(ReadWholeFile(dir_.path() + "/jobs/300/exec-9/stdout.log"), "session\n");
  ended = WaitForEvent(*launcher_, other_task.id, 10'000);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ReadWholeFile(dir_.path() + "/jobs/300/1.1/stdout.log"), "task1\n");

  // Once the first attempt has ended, the second starts in a directory of its own.
  ASSERT_TRUE(launcher_->Cancel(first.id).ok());
  EXPECT_EQ(Finish(300).kind, Kind::kExited);
  second.argv = {"sh", "-c", "echo second"};
  Start(second);
  std::optional<JobEvent> done = WaitForEvent(*launcher_, second.id, 10'000);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->dir, dir_.path() + "/jobs/300/0.2");
  EXPECT_EQ(ReadWholeFile(dir_.path() + "/jobs/300/0.2/stdout.log"), "second\n");
  EXPECT_EQ(ReadWholeFile(dir_.path() + "/jobs/300/0.1/stdout.log"), "first\n");
}

// An agent upgraded while a job it started under the previous layout (STATE/jobs/<key>/,
// the key packed from job and task) still runs adopts that job where it runs: it reports
// it by its (job, task, attempt), cancels it, reads its logs, forgets it; and a later
// attempt of the same task waits for it, whatever the layout.
TEST_F(LauncherTest, AJobStartedUnderThePreviousLayoutIsAdoptedWhereItRuns) {
  const int64_t key = (int64_t{1} << 50) + 77 * 4096 + 1;  // job 77, task 1 of 2
  const std::string legacy = dir_.path() + "/jobs/" + std::to_string(key);
  std::filesystem::create_directories(legacy);
  const std::string spec =
      R"({"job_id": )" + std::to_string(key) +
      R"(, "attempt": 2, "pool_job_id": 77, "task_index": 1, "num_tasks": 2, "user": "tester", "uid": )" +
      std::to_string(::geteuid()) + R"(, "gid": )" + std::to_string(::getegid()) +
      R"(, "argv": ["sh", "-c", "echo legacy; exec sleep 30"], "workdir": "/", "grace_s": 1})";
  ASSERT_TRUE(WriteFileDurably(legacy + "/" + kSpecFile, spec, 0600).ok());
  Result<int> shim = testing::StartShimIn(legacy);
  ASSERT_TRUE(shim.ok()) << shim.status().ToString();

  Result<std::vector<JobEvent>> adopted = launcher_->Adopt();
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  ASSERT_EQ(adopted->size(), 1u);
  const RunId id{77, 1, 2, 0};
  EXPECT_EQ((*adopted)[0].id, id);
  EXPECT_EQ((*adopted)[0].kind, Kind::kStarted);
  EXPECT_EQ((*adopted)[0].dir, legacy);
  EXPECT_EQ(launcher_->Running(), std::vector<RunId>{id});
  // Its next attempt waits: one attempt of a task at a time, across layouts.
  LaunchSpec next = TestSpec(77, {"true"});
  next.id = {77, 1, 3, 0};
  EXPECT_EQ(launcher_->Launch(next).code(), StatusCode::kAlreadyExists);
  // Its log, at the path its job record names, is served to `gpupool logs`.
  ASSERT_TRUE(WaitForFileContaining(legacy + "/stdout.log", "legacy", 5000));
  Result<LogSlice> log = ReadJobLogSlice(dir_.path(), legacy + "/stdout.log", 0, 100);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ(log->data, "legacy\n");

  ASSERT_TRUE(launcher_->Cancel(id).ok());
  std::optional<JobEvent> end = WaitForEvent(*launcher_, id, 10'000);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->kind, Kind::kExited);
  EXPECT_TRUE(end->cancelled);
  EXPECT_EQ(end->dir, legacy);
  ASSERT_TRUE(launcher_->Forget(id).ok());
  EXPECT_EQ(ReadWholeFile(legacy + "/" + kSpecFile), "");
  EXPECT_TRUE(launcher_->Adopt()->empty());
  Start(next);
  EXPECT_EQ(::access((dir_.path() + "/jobs/77/1.3/stdout.log").c_str(), F_OK), 0);
}

TEST_F(LauncherTest, AgentProcessKilledWithSigkillLeavesTheJobRunning) {
  // A real agent process (a forked child of the test) launches the job and is killed -9.
  const std::string go = dir_.path() + "/go";
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  pid_t agent = ::fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {
    ::close(pipefd[0]);
    auto launcher = NewProcessLauncher(TestOptions(dir_.path()));
    LaunchSpec spec = TestSpec(245, {"sh", "-c", "while [ ! -e " + go + " ]; do sleep 0.02; done"});
    char ok = launcher->Launch(spec).ok() ? 'y' : 'n';
    (void)!::write(pipefd[1], &ok, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(pipefd[1]);
  char ok = 0;
  ASSERT_EQ(::read(pipefd[0], &ok, 1), 1);
  ::close(pipefd[0]);
  ASSERT_EQ(ok, 'y');
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  ASSERT_EQ(::waitpid(agent, nullptr, 0), agent);

  Result<std::vector<JobEvent>> adopted = launcher_->Adopt();
  ASSERT_TRUE(adopted.ok());
  ASSERT_EQ(adopted->size(), 1u);
  EXPECT_EQ((*adopted)[0].kind, Kind::kStarted);
  FILE* f = std::fopen(go.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  JobEvent e = Finish(245);
  EXPECT_EQ(e.kind, Kind::kExited) << e.reason;
  EXPECT_EQ(e.exit_code, 0);
}

TEST_F(LauncherTest, JobThatEndedWhileTheAgentWasDownIsReportedUntilForgotten) {
  LaunchSpec spec = TestSpec(251, {"sh", "-c", "exit 4"});
  spec.env = {{"API_TOKEN", "s3cr3t-251"}};
  Start(spec);
  launcher_.reset();
  ASSERT_TRUE(WaitForFileContaining(JobFile(251, kStatusFile), "exit_code", 5000));

  for (int round = 0; round < 2; ++round) {
    launcher_ = NewProcessLauncher(TestOptions(dir_.path()));
    Result<std::vector<JobEvent>> adopted = launcher_->Adopt();
    ASSERT_TRUE(adopted.ok());
    ASSERT_EQ(adopted->size(), 1u) << "round " << round;
    EXPECT_EQ((*adopted)[0].kind, Kind::kExited);
    EXPECT_EQ((*adopted)[0].exit_code, 4);
    EXPECT_TRUE((*adopted)[0].adopted);
    EXPECT_TRUE(launcher_->Running().empty());
  }
  EXPECT_NE(ReadWholeFile(JobFile(251, kSpecFile)).find("s3cr3t-251"), std::string::npos);
  ASSERT_TRUE(launcher_->Forget(TaskRun(251)).ok());
  EXPECT_TRUE(launcher_->Adopt()->empty());
  EXPECT_TRUE(launcher_->Adopt()->empty());  // and stays forgotten
  // The job's variables do not outlive it on disk; logs stay for `gpupool logs`.
  EXPECT_EQ(ReadWholeFile(JobFile(251, kSpecFile)).find("s3cr3t-251"), std::string::npos);
  EXPECT_EQ(::access(JobFile(251, kStdoutFile).c_str(), F_OK), 0);
}

TEST_F(LauncherTest, KilledShimIsLostAndItsJobDoesNotLinger) {
  LaunchSpec spec = TestSpec(261, {"sleep", "100"});
  spec.cpu_milli = 1000;  // a cgroup to clean up where the host has them
  Start(spec);
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(261)));
  ASSERT_TRUE(rec.ok());
  for (const std::string& d : rec->cgroup_dirs) ASSERT_EQ(::access(d.c_str(), F_OK), 0) << d;
  launcher_.reset();
  ASSERT_EQ(::kill(rec->pid, SIGKILL), 0);

  launcher_ = NewProcessLauncher(TestOptions(dir_.path()));
  // The shim was a child of this test process: the kernel ends it after kill() returns.
  ASSERT_TRUE(WaitForExit(rec->pid, 5000));
  Result<std::vector<JobEvent>> adopted = launcher_->Adopt();
  ASSERT_TRUE(adopted.ok());
  ASSERT_EQ(adopted->size(), 1u);
  const JobEvent& e = (*adopted)[0];
  EXPECT_EQ(e.kind, Kind::kLost);
  EXPECT_NE(e.reason.find("supervisor (pid " + std::to_string(rec->pid) + ")"), std::string::npos)
      << e.reason;
  EXPECT_NE(e.reason.find("remaining processes were killed"), std::string::npos) << e.reason;
  // It was sent SIGKILL: it ends as soon as the kernel delivers it.
  EXPECT_TRUE(WaitForExit(rec->job_pid, 5000));
  // The cgroups the dead shim could not remove are gone as well.
  for (const std::string& d : rec->cgroup_dirs) EXPECT_NE(::access(d.c_str(), F_OK), 0) << d;
}

TEST_F(LauncherTest, ShimKilledUnderARunningLauncherIsLost) {
  Start(TestSpec(271, {"sleep", "100"}));
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(271)));
  ASSERT_TRUE(rec.ok());
  ASSERT_EQ(::kill(rec->pid, SIGKILL), 0);
  JobEvent e = Finish(271, 5000);
  EXPECT_EQ(e.kind, Kind::kLost);
  EXPECT_NE(e.reason.find("without recording the job's status"), std::string::npos) << e.reason;
  EXPECT_TRUE(launcher_->Running().empty());
}

}  // namespace
}  // namespace gpupool::agent
