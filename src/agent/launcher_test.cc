// The process launcher with real shims and real processes.
#include "agent/launcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <set>

#include "agent/job_files.h"
#include "agent/job_mounts.h"
#include "agent/launcher_test_fixture.h"
#include "agent/launcher_test_util.h"
#include "common/strings.h"

namespace gpupool::agent {
namespace {

using testing::LauncherTest;
using testing::ProcessAlive;
using testing::ReadWholeFile;
using testing::ScratchDir;
using testing::TaskRun;
using testing::TestOptions;
using testing::TestSpec;
using testing::WaitForEvent;
using testing::WaitForExit;
using testing::WaitForFileContaining;
using Kind = JobEvent::Kind;

std::map<std::string, std::string> ParseEnvOutput(const std::string& text) {
  std::map<std::string, std::string> env;
  for (const std::string& line : Split(text, '\n')) {
    if (line.empty()) continue;
    size_t eq = line.find('=');
    env[line.substr(0, eq)] = eq == std::string::npos ? "" : line.substr(eq + 1);
  }
  return env;
}

// The fixture: launcher_test_fixture.h.

TEST_F(LauncherTest, JobSeesExactlyItsGpusAndVariables) {
  LaunchSpec spec = TestSpec(101, {"env"});
  spec.env = {{"FOO", "bar baz"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"}};
  spec.gpus = {{"nvidia", 2, "GPU-2222", {"/dev/nvidia2"}, 1000},
               {"nvidia", 5, "GPU-5555", {"/dev/nvidia5"}, 1000}};
  Start(spec);
  JobEvent e = Finish(101);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(e.reason, "");
  std::map<std::string, std::string> env = ParseEnvOutput(ReadWholeFile(JobFile(101, kStdoutFile)));
  std::vector<std::string> keys;
  for (const auto& [k, v] : env) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "CUDA_VISIBLE_DEVICES", "FOO", "GPUPOOL_ATTEMPT", "GPUPOOL_DEV_SHM",
                      "GPUPOOL_GPU_ENFORCEMENT", "GPUPOOL_GPU_MILLI", "GPUPOOL_JOB_ID", "HOME",
                      "LOGNAME", "NVIDIA_VISIBLE_DEVICES", "PATH", "SHELL", "USER"}));
  EXPECT_EQ(env["GPUPOOL_GPU_ENFORCEMENT"], "exclusive");
  // Its own /dev/shm where the host allows it (launcher_shm_test.cc).
  EXPECT_EQ(env["GPUPOOL_DEV_SHM"], ProbePrivateDevShm().ok() ? "private" : "shared");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "GPU-2222,GPU-5555");
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "GPU-2222,GPU-5555");
  EXPECT_EQ(env["GPUPOOL_JOB_ID"], "101");
  EXPECT_EQ(env["GPUPOOL_GPU_MILLI"], "1000");
  EXPECT_EQ(env["FOO"], "bar baz");
  EXPECT_EQ(env["USER"], "tester");
}

TEST_F(LauncherTest, TwoJobsShareOneGpuWithTheirShares) {
  LaunchSpec a = TestSpec(111, {"sh", "-c", "echo $CUDA_VISIBLE_DEVICES $GPUPOOL_GPU_MILLI"});
  a.gpus = {{"nvidia", 0, "GPU-0000", {}, 250}};
  LaunchSpec b = a;
  b.id.job = 112;
  b.gpus[0].gpu_milli = 750;
  ASSERT_TRUE(launcher_->Launch(a).ok());
  ASSERT_TRUE(launcher_->Launch(b).ok());
  for (int64_t id : {111, 112}) {
    std::optional<JobEvent> e;
    do {
      e = WaitForEvent(*launcher_, id, 5000);
    } while (e && e->kind == Kind::kStarted);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->exit_code, 0);
  }
  EXPECT_EQ(ReadWholeFile(JobFile(111, kStdoutFile)), "GPU-0000 250\n");
  EXPECT_EQ(ReadWholeFile(JobFile(112, kStdoutFile)), "GPU-0000 750\n");
}

TEST_F(LauncherTest, AmdGrantSetsRocmVariables) {
  LaunchSpec spec = TestSpec(121, {"sh", "-c", "echo $ROCR_VISIBLE_DEVICES/$HIP_VISIBLE_DEVICES"});
  spec.gpus = {{"amd", 1, "GPU-abcd", {}, 1000}};
  Start(spec);
  EXPECT_EQ(Finish(121).exit_code, 0);
  EXPECT_EQ(ReadWholeFile(JobFile(121, kStdoutFile)), "GPU-abcd/GPU-abcd\n");
}

TEST_F(LauncherTest, ExitCodeAndStderrAreReported) {
  Start(TestSpec(131, {"sh", "-c", "echo out; echo oops >&2; exit 3"}));
  JobEvent e = Finish(131);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_FALSE(e.signal.has_value());
  EXPECT_EQ(e.reason, "exited with code 3");
  EXPECT_GE(e.time_us, e.start_time_us);
  EXPECT_EQ(ReadWholeFile(JobFile(131, kStdoutFile)), "out\n");
  EXPECT_EQ(ReadWholeFile(JobFile(131, kStderrFile)), "oops\n");
}

// Each file a run creates costs an inode allocation, most of a trivial job's cost on ext4
// (docs/benchmarks.md): a job that starts and ends normally leaves exactly these, its
// shim record rewritten in place rather than replaced, and no shim.log; one that fails
// leaves a shim.log that tells the whole story, the routine notes before the failure.
TEST_F(LauncherTest, ANormalRunCreatesOnlyTheFilesItNeeds) {
  Start(TestSpec(135, {"true"}));
  EXPECT_EQ(Finish(135).kind, Kind::kExited);
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(JobDir(dir_.path(), TaskRun(135)))) {
    names.insert(entry.path().filename().string());
  }
  EXPECT_EQ(names,
            (std::set<std::string>{kSpecFile, kShimFile, kStatusFile, kStdoutFile, kStderrFile}));
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(135)));
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_GT(rec->job_pid, 0);  // the second write landed
  EXPECT_GT(rec->start_time_us, 0);

  ASSERT_TRUE(launcher_->Launch(TestSpec(136, {"gpupool-no-such-command"})).ok());
  EXPECT_EQ(Finish(136).kind, Kind::kFailed);
  const std::string log = ReadWholeFile(JobFile(136, kShimLogFile));
  const size_t isolation = log.find("isolation: ");
  const size_t failed = log.find("finished: command 'gpupool-no-such-command' not found");
  EXPECT_NE(isolation, std::string::npos) << log;
  EXPECT_NE(failed, std::string::npos) << log;
  EXPECT_LT(isolation, failed) << log;
}

TEST_F(LauncherTest, ABatchRunWritesItsOutputOnceAndRunsItsScriptCopy) {
  // -o without -e: one file for both streams, where the user asked, and no logs in the run
  // directory; the script's copy runs, not the (edited, here missing) original.
  const std::string out = dir_.path() + "/out/gpupool-137.out";
  std::filesystem::create_directories(dir_.path() + "/out");
  LaunchSpec spec = TestSpec(137, {dir_.path() + "/gone.sh", "arg1"});
  spec.script = "#!/bin/sh\necho \"script $1 $0\"\necho err >&2\n";
  spec.stdout_file = out;
  spec.stderr_file = out;
  Start(spec);
  JobEvent e = Finish(137);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
  EXPECT_EQ(e.stdout_file, out);
  EXPECT_EQ(e.stderr_file, out);
  const std::string copy = JobDir(dir_.path(), TaskRun(137)) + "/" + kScriptFile;
  EXPECT_EQ(ReadWholeFile(out), "script arg1 " + copy + "\nerr\n");
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(JobDir(dir_.path(), TaskRun(137)))) {
    names.insert(entry.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{kSpecFile, kShimFile, kStatusFile, kScriptFile}));
  // An output file that cannot be made fails the start, naming it.
  LaunchSpec bad = TestSpec(138, {"true"});
  bad.stdout_file = dir_.path() + "/no-such-dir/o.out";
  ASSERT_TRUE(launcher_->Launch(bad).ok());
  JobEvent failed = Finish(138);
  EXPECT_EQ(failed.kind, Kind::kFailed);
  EXPECT_NE(failed.reason.find("no-such-dir/o.out"), std::string::npos) << failed.reason;
}

TEST_F(LauncherTest, DeathBySignalIsReported) {
  Start(TestSpec(141, {"sh", "-c", "kill -USR1 $$"}));
  JobEvent e = Finish(141);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_EQ(e.signal, SIGUSR1);
  EXPECT_FALSE(e.exit_code.has_value());
  EXPECT_FALSE(e.cancelled);
  EXPECT_NE(e.reason.find("SIGUSR1"), std::string::npos) << e.reason;
  // Its own signal: nothing of the node's killed it.
  EXPECT_EQ(e.kill_cause, protocol::KillCause::kNone);
  EXPECT_EQ(e.kill_detail, "");
}

TEST_F(LauncherTest, CancelSendsTermToTheProcessGroup) {
  // The background sleep shares the job's process group and must die with it.
  Start(TestSpec(151, {"sh", "-c", "sleep 100 & echo $! > bg.pid; wait"}));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(launcher_->Cancel(TaskRun(151)).ok());
  JobEvent e = Finish(151, 5000);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_TRUE(e.cancelled);
  EXPECT_FALSE(e.timed_out);
  EXPECT_EQ(e.signal, SIGTERM);
  EXPECT_NE(e.reason.find("cancelled"), std::string::npos) << e.reason;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
}

TEST_F(LauncherTest, CancelKillsAJobThatIgnoresTermAfterGrace) {
  LaunchSpec spec =
      TestSpec(161, {"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"});
  spec.grace_s = 1;
  Start(spec);
  ASSERT_TRUE(WaitForFileContaining(JobFile(161, kStdoutFile), "ready", 5000));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(launcher_->Cancel(TaskRun(161)).ok());
  JobEvent e = Finish(161, 5000);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(e.cancelled);
  EXPECT_EQ(e.signal, SIGKILL);
  EXPECT_NE(e.reason.find("SIGKILL after the grace period of 1 s"), std::string::npos) << e.reason;
  EXPECT_EQ(e.kill_cause, protocol::KillCause::kStopRequest);
  EXPECT_EQ(e.kill_detail, "cancelled; SIGKILL after the grace period of 1 s");
  EXPECT_GE(took, std::chrono::milliseconds(900));
  EXPECT_LT(took, std::chrono::milliseconds(3000));
}

// A worker the job put in a session of its own (setsid) has left the job's process group
// but not its cgroup: the cancel's SIGTERM reaches it there, and it ends in its grace.
TEST_F(LauncherTest, CancelSendsTermToAWorkerInItsOwnSession) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for the job's cgroups";
  const std::string mark = dir_.path() + "/worker-term";
  // The main shell waits for the worker after its own SIGTERM; the worker says it is
  // ready once its trap is set.
  const std::string worker =
      "trap \"echo worker-term >> " + mark + "; exit 0\" TERM; echo ready; sleep 30 & wait";
  LaunchSpec spec = TestSpec(
      152, {"sh", "-c", "trap 'echo main-term' TERM; setsid sh -c '" + worker + "' & wait; wait"});
  spec.memory_bytes = 256ull << 20;  // a cgroup under v1 too (v1 makes none for no limit)
  spec.grace_s = 5;
  Start(spec);
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(152)));
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  if (rec->cgroup_dirs.empty()) GTEST_SKIP() << "no cgroup for the job here";
  ASSERT_TRUE(WaitForFileContaining(JobFile(152, kStdoutFile), "ready", 5000));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(launcher_->Cancel(TaskRun(152)).ok());
  JobEvent e = Finish(152, 10'000);
  EXPECT_TRUE(e.cancelled);
  EXPECT_EQ(ReadWholeFile(mark), "worker-term\n");
  // One SIGTERM for the main shell too (its process group's, not again as the cgroup's).
  EXPECT_EQ(ReadWholeFile(JobFile(152, kStdoutFile)), "ready\nmain-term\n");
  EXPECT_EQ(e.reason.find("SIGKILL after the grace period"), std::string::npos) << e.reason;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(4000));
}

// An exec session joins its task's cgroups but its cancel's SIGTERM is its own: the
// task's processes, listed there too, are left alone.
TEST_F(LauncherTest, CancellingAnExecSessionLeavesItsTaskAlone) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for the job's cgroups";
  const std::string mark = dir_.path() + "/task-term";
  // The task notes every SIGTERM and runs on: killed after the grace of its own cancel.
  LaunchSpec task = TestSpec(
      154, {"sh", "-c",
            "trap 'echo task-term >> " + mark + "' TERM; while :; do sleep 60 & wait; done"});
  task.memory_bytes = 256ull << 20;  // a cgroup under v1 too
  task.grace_s = 1;
  Start(task);
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(154)));
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  if (rec->cgroup_dirs.empty()) GTEST_SKIP() << "no cgroup for the job here";
  LaunchSpec exec = task;
  exec.id = RunId::ExecIn(TaskId{154, 0, 1}, 1);
  exec.argv = {"sh", "-c", "echo ready; sleep 60"};
  exec.join_cgroups = rec->cgroup_dirs;
  exec.join_job_pid = rec->job_pid;
  exec.join_job_start_ticks = rec->job_start_ticks;
  ASSERT_TRUE(launcher_->Launch(exec).ok());
  std::optional<JobEvent> started = WaitForEvent(*launcher_, exec.id, 5000);
  ASSERT_TRUE(started.has_value());
  ASSERT_EQ(started->kind, Kind::kStarted) << started->reason;
  const std::string exec_dir = JobDir(dir_.path(), exec.id);
  ASSERT_TRUE(WaitForFileContaining(exec_dir + "/" + kStdoutFile, "ready", 5000));
  ASSERT_TRUE(launcher_->Cancel(exec.id).ok());
  std::optional<JobEvent> ended = WaitForEvent(*launcher_, exec.id, 5000);
  ASSERT_TRUE(ended.has_value());
  EXPECT_TRUE(ended->cancelled);
  // Its own cancel is the only SIGTERM the task got.
  ASSERT_TRUE(launcher_->Cancel(TaskRun(154)).ok());
  JobEvent e = Finish(154);
  EXPECT_TRUE(e.cancelled) << e.reason;
  EXPECT_EQ(e.signal, SIGKILL) << e.reason;
  EXPECT_EQ(ReadWholeFile(mark), "task-term\n");
}

// An exec session in its task's cgroups: what it leaves running when its command ends
// goes with it (it used to stay in the task's cgroups until the task ended), and the task
// runs on.
TEST_F(LauncherTest, WhatAnExecSessionInItsTasksCgroupsLeavesRunningEndsWithIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for the job's cgroups";
  LaunchSpec task = TestSpec(155, {"sleep", "30"});
  task.memory_bytes = 256ull << 20;  // a cgroup under v1 too
  Start(task);
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(155)));
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  if (rec->cgroup_dirs.empty()) GTEST_SKIP() << "no cgroup for the job here";
  const std::string pidfile = dir_.path() + "/exec-worker.pid";
  LaunchSpec exec = task;
  exec.id = RunId::ExecIn(TaskId{155, 0, 1}, 1);
  exec.argv = {"sh", "-c",
               "(setsid sh -c 'echo $$ > " + pidfile + ".tmp; mv " + pidfile + ".tmp " + pidfile +
                   "; exec sleep 300' &); while [ ! -s " + pidfile + " ]; do sleep 0.01; done"};
  exec.join_cgroups = rec->cgroup_dirs;
  Start(exec);
  std::optional<JobEvent> ended = WaitForEvent(*launcher_, exec.id, 10'000);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->exit_code, 0) << ended->reason;
  const std::optional<uint64_t> worker = ParseUint64(Trim(ReadWholeFile(pidfile)));
  ASSERT_TRUE(worker.has_value());
  const bool alive = ProcessAlive(static_cast<int>(*worker));
  if (alive) ::kill(static_cast<pid_t>(*worker), SIGKILL);
  EXPECT_FALSE(alive) << "the exec session's worker outlived it";
  const std::vector<RunId> running = launcher_->Running();
  EXPECT_NE(std::find(running.begin(), running.end(), TaskRun(155)), running.end());
}

// A stopped job (kill -STOP) gets SIGCONT with its SIGTERM, so that its handler runs
// instead of a SIGKILL after the grace.
TEST_F(LauncherTest, CancelContinuesAStoppedJob) {
  const std::string mark = dir_.path() + "/term-ran";
  LaunchSpec spec = TestSpec(
      153, {"sh", "-c", "trap 'echo term-ran >> " + mark + "; exit 0' TERM; kill -STOP $$"});
  spec.grace_s = 5;
  Start(spec);
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(153)));
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  const std::string stat_path = "/proc/" + std::to_string(rec->job_pid) + "/stat";
  // Stopped: state T, after the ") " that ends the command name.
  ASSERT_TRUE(testing::PollUntil(
      [&] {
        const std::string stat = ReadWholeFile(stat_path);
        const size_t end = stat.rfind(") ");
        return end != std::string::npos && stat.compare(end + 2, 1, "T") == 0;
      },
      5000));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(launcher_->Cancel(TaskRun(153)).ok());
  JobEvent e = Finish(153, 10'000);
  EXPECT_TRUE(e.cancelled);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(ReadWholeFile(mark), "term-ran\n");
  EXPECT_EQ(e.reason.find("SIGKILL after the grace period"), std::string::npos) << e.reason;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(4000));
}

// Reads `fd` until EOF (or EIO: a terminal's last holder closed) or `timeout_ms`.
std::string ReadUntilEnd(int fd, int timeout_ms, const std::string& stop_at = "") {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    struct pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (!stop_at.empty() && out.find(stop_at) != std::string::npos) break;
  }
  return out;
}

TEST_F(LauncherTest, AnInteractiveJobUsesTheStreamsItWasGiven) {
  int in[2], out[2], err[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(err, O_CLOEXEC), 0);
  LaunchSpec spec = TestSpec(171, {"sh", "-c", "read a; echo \"got $a\"; echo oops >&2"});
  spec.stdio_relayed = true;
  EXPECT_EQ(launcher_->Launch(spec).code(), StatusCode::kInvalidArgument);  // no streams
  Status st = launcher_->Launch(spec, JobStdio{in[0], out[1], err[1]});
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (int fd : {in[0], out[1], err[1]}) ::close(fd);
  ASSERT_EQ(::write(in[1], "hi\n", 3), 3);
  ::close(in[1]);
  EXPECT_EQ(ReadUntilEnd(out[0], 10'000), "got hi\n");
  EXPECT_EQ(ReadUntilEnd(err[0], 10'000), "oops\n");
  JobEvent e;
  do {
    e = Finish(171);
  } while (e.kind == Kind::kStarted);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
  for (int fd : {out[0], err[0]}) ::close(fd);
}

TEST_F(LauncherTest, ATerminalJobOwnsItsTerminalAndACancelHangsItUp) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(slave, 0);
  LaunchSpec spec = TestSpec(
      172, {"sh", "-c",
            "tty; trap 'echo got HUP; exit 9' HUP; echo ready; while :; do sleep 0.05; done"});
  spec.stdio_relayed = true;
  spec.tty = true;
  Status st = launcher_->Launch(spec, JobStdio{slave, slave, slave});
  ASSERT_TRUE(st.ok()) << st.ToString();
  ::close(slave);
  const std::string shown = ReadUntilEnd(master, 10'000, "ready");
  EXPECT_NE(shown.find("/dev/pts/"), std::string::npos) << shown;  // its controlling terminal
  ASSERT_TRUE(launcher_->Cancel(TaskRun(172)).ok());
  EXPECT_NE(ReadUntilEnd(master, 10'000, "got HUP").find("got HUP"), std::string::npos);
  JobEvent e;
  do {
    e = Finish(172);
  } while (e.kind == Kind::kStarted);
  EXPECT_TRUE(e.cancelled);
  EXPECT_EQ(e.exit_code, 9) << e.reason;
  ::close(master);
}

TEST_F(LauncherTest, TimeLimitStopsTheJob) {
  LaunchSpec spec = TestSpec(171, {"sleep", "100"});
  spec.time_limit_s = 1;
  Start(spec);
  JobEvent e = Finish(171, 5000);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_TRUE(e.timed_out);
  EXPECT_FALSE(e.cancelled);
  EXPECT_EQ(e.signal, SIGTERM);
  EXPECT_NE(e.reason.find("time limit of 1 s reached"), std::string::npos) << e.reason;
  EXPECT_EQ(e.kill_cause, protocol::KillCause::kTimeLimit);
  EXPECT_EQ(e.kill_detail, "time limit of 1 s reached");
  EXPECT_GE(e.time_us - e.start_time_us, 900'000);
}

// Slurm's --signal: warn_signal warn_time_s before the time limit, to every process of
// the job, or (B:) to its main process only. The script reports how its child ended: by
// the warning (10, USR1: exit status 138) or by the script's own TERM after it (143).
std::vector<std::string> WarnedScript() {
  return {"sh", "-c",
          "trap 'echo warned' USR1; sleep 30 & c=$!; wait $c; kill $c 2>/dev/null; wait $c; "
          "echo \"child $?\"; exit 5"};
}

TEST_F(LauncherTest, SignalIsSentBeforeTheTimeLimitToTheWholeJob) {
  LaunchSpec spec = TestSpec(174, WarnedScript());
  spec.time_limit_s = 3;
  spec.warn_signal = SIGUSR1;
  spec.warn_time_s = 2;
  Start(spec);
  JobEvent e = Finish(174, 8000);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_FALSE(e.timed_out) << e.reason;  // it ended on the warning, a second in
  EXPECT_EQ(e.exit_code, 5) << e.reason;
  EXPECT_GE(e.time_us - e.start_time_us, 900'000);
  EXPECT_EQ(ReadWholeFile(JobFile(174, kStdoutFile)), "warned\nchild 138\n");
}

TEST_F(LauncherTest, SignalWithBIsSentToTheMainProcessOnly) {
  LaunchSpec spec = TestSpec(175, WarnedScript());
  spec.time_limit_s = 3;
  spec.warn_signal = SIGUSR1;
  spec.warn_time_s = 2;
  spec.warn_main_only = true;
  Start(spec);
  JobEvent e = Finish(175, 8000);
  EXPECT_FALSE(e.timed_out) << e.reason;
  EXPECT_EQ(e.exit_code, 5) << e.reason;
  EXPECT_GE(e.time_us - e.start_time_us, 900'000);
  EXPECT_EQ(ReadWholeFile(JobFile(175, kStdoutFile)), "warned\nchild 143\n");
}

TEST_F(LauncherTest, MissingCommandFailsWithReason) {
  ASSERT_TRUE(launcher_->Launch(TestSpec(181, {"gpupool-no-such-command", "x"})).ok());
  JobEvent e = Finish(181);
  EXPECT_EQ(e.kind, Kind::kFailed);
  EXPECT_EQ(e.reason, "command 'gpupool-no-such-command' not found");
  EXPECT_EQ(e.start_time_us, 0);
  EXPECT_TRUE(launcher_->Running().empty());

  // A file without execute permission, and one with it but no executable format.
  const std::string plain = dir_.path() + "/plain";
  const std::string junk = dir_.path() + "/junk";
  for (const auto& [path, mode] : {std::pair{plain, 0644}, std::pair{junk, 0755}}) {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("\x01\x02 not a program\n", f);
    std::fclose(f);
    ASSERT_EQ(::chmod(path.c_str(), static_cast<mode_t>(mode)), 0);
  }
  ASSERT_TRUE(launcher_->Launch(TestSpec(182, {plain})).ok());
  e = Finish(182);
  EXPECT_EQ(e.kind, Kind::kFailed);
  EXPECT_NE(e.reason.find("is not executable by user 'tester'"), std::string::npos) << e.reason;
  ASSERT_TRUE(launcher_->Launch(TestSpec(183, {junk})).ok());
  e = Finish(183);
  EXPECT_EQ(e.kind, Kind::kFailed);
  EXPECT_NE(e.reason.find("is not an executable file"), std::string::npos) << e.reason;
}

TEST_F(LauncherTest, ImageJobOnANodeWithoutPodmanFails) {
  LauncherOptions o = TestOptions(dir_.path());
  o.container.unavailable = "'podman' not found (install podman)";
  std::unique_ptr<Launcher> launcher = NewProcessLauncher(o);
  LaunchSpec spec = TestSpec(185, {"true"});
  spec.image = "localhost/some:1";
  ASSERT_TRUE(launcher->Launch(spec).ok());
  std::optional<JobEvent> e = WaitForEvent(*launcher, 185, 10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kFailed);
  EXPECT_EQ(e->reason.rfind("podman is not installed on node ", 0), 0u) << e->reason;
  EXPECT_NE(e->reason.find("'podman' not found"), std::string::npos) << e->reason;

  // Detected as present, but gone by the time the job starts.
  o.container.unavailable = "";
  o.container.podman = "/nonexistent/podman";
  launcher = NewProcessLauncher(o);
  spec.id.job = 186;
  ASSERT_TRUE(launcher->Launch(spec).ok());
  e = WaitForEvent(*launcher, 186, 10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kFailed);
  EXPECT_EQ(e->reason.rfind("podman is not installed on node ", 0), 0u) << e->reason;
  EXPECT_NE(e->reason.find("/nonexistent/podman"), std::string::npos) << e->reason;
}

// A container share on a dmem GPU runs only under its cap, as a process share does: where
// the cap cannot be set (here: isolation off) it fails closed, before podman runs.
TEST_F(LauncherTest, AContainerShareOnADmemGpuNeverRunsWithoutItsCap) {
  const std::string podman = dir_.path() + "/podman";
  const std::string ran = dir_.path() + "/podman-ran";
  FILE* f = std::fopen(podman.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fprintf(f, "#!/bin/sh\necho \"$@\" >> %s\n", ran.c_str());
  std::fclose(f);
  ASSERT_EQ(::chmod(podman.c_str(), 0755), 0);
  LauncherOptions o = TestOptions(dir_.path());
  o.cgroup_root = "";
  o.container.podman = podman;
  std::unique_ptr<Launcher> launcher = NewProcessLauncher(o);
  LaunchSpec spec = TestSpec(189, {"true"});
  spec.image = "localhost/some:1";
  spec.share_enforcement = "dmem";
  spec.dmem_region = "drm/0000:03:00.0/vram0";
  spec.share_memory_bytes = uint64_t{2} << 30;
  ASSERT_TRUE(launcher->Launch(spec).ok());
  std::optional<JobEvent> e = WaitForEvent(*launcher, 189, 10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kFailed);
  EXPECT_NE(e->reason.find("the kernel's dmem controller) could not be set"), std::string::npos)
      << e->reason;
  EXPECT_NE(::access(ran.c_str(), F_OK), 0) << "podman ran without the cap";

  // An exec session's container goes below its task's capped cgroup (one cap for both),
  // never a cap of its own; with that cgroup gone it does not start.
  const std::string task_cgroup = dir_.path() + "/cg/gpupool/job-189-0.1-77";
  std::filesystem::create_directories(task_cgroup);
  LaunchSpec session = spec;
  session.id.exec = 3;
  session.join_cgroups = {task_cgroup};
  {
    Status st = launcher->Launch(session);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  e = WaitForEvent(*launcher, session.id, 10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kStarted) << e->reason;
  e = WaitForEvent(*launcher, session.id, 10'000);  // podman (here: the stand-in) ran
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kExited) << e->reason;
  const std::string args = ReadWholeFile(ran);
  EXPECT_NE(args.find("--cgroup-manager cgroupfs run "), std::string::npos) << args;
  EXPECT_NE(args.find(" --cgroup-parent /gpupool/job-189-0.1-77 "), std::string::npos) << args;
  EXPECT_TRUE(std::filesystem::is_directory(task_cgroup));  // the task's, left to it
  session.id.exec = 4;
  session.join_cgroups = {dir_.path() + "/cg/gpupool/job-189-0.1-78"};
  {
    Status st = launcher->Launch(session);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  e = WaitForEvent(*launcher, session.id, 10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kFailed);
  EXPECT_NE(e->reason.find("its task's cgroup, which is gone"), std::string::npos) << e->reason;
}

TEST_F(LauncherTest, EnvDirCommandsComeFirst) {
  const std::string env_dir = dir_.path() + "/venv";
  ASSERT_EQ(::mkdir(env_dir.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((env_dir + "/bin").c_str(), 0755), 0);
  FILE* cfg = std::fopen((env_dir + "/pyvenv.cfg").c_str(), "w");
  ASSERT_NE(cfg, nullptr);
  std::fclose(cfg);
  const std::string tool = env_dir + "/bin/gpupool-env-tool";
  FILE* f = std::fopen(tool.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("#!/bin/sh\necho \"tool $GPUPOOL_ENV_DIR $VIRTUAL_ENV\"\n", f);
  std::fclose(f);
  ASSERT_EQ(::chmod(tool.c_str(), 0755), 0);
  LaunchSpec spec = TestSpec(187, {"gpupool-env-tool"});
  spec.env_dir = env_dir;
  Start(spec);
  JobEvent e = Finish(187);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
  EXPECT_EQ(ReadWholeFile(JobFile(187, kStdoutFile)), "tool " + env_dir + " " + env_dir + "\n");

  spec.id.job = 188;
  spec.env_dir = dir_.path() + "/no-such-env";
  ASSERT_TRUE(launcher_->Launch(spec).ok());
  e = Finish(188);
  EXPECT_EQ(e.kind, Kind::kFailed);
  EXPECT_NE(e.reason.find("environment directory '" + spec.env_dir + "' does not exist"),
            std::string::npos)
      << e.reason;
}

TEST_F(LauncherTest, MissingWorkdirFailsAndTheCommandNeverRuns) {
  const std::string marker = dir_.path() + "/ran";
  LaunchSpec spec = TestSpec(191, {"touch", marker});
  spec.workdir = "/no/such/dir";
  ASSERT_TRUE(launcher_->Launch(spec).ok());
  JobEvent e = Finish(191);
  EXPECT_EQ(e.kind, Kind::kFailed);
  EXPECT_EQ(e.reason, "working directory '/no/such/dir' does not exist");
  EXPECT_NE(::access(marker.c_str(), F_OK), 0);
}

TEST_F(LauncherTest, RunsAsTheSubmittingUserWithPrivateLogs) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  struct passwd* pw = ::getpwnam("nobody");
  if (pw == nullptr) GTEST_SKIP() << "no user 'nobody' on this host";
  LaunchSpec spec = TestSpec(201, {"sh", "-c", "id -u; id -g; echo $HOME $USER"});
  spec.user = "nobody";
  spec.uid = pw->pw_uid;
  spec.gid = pw->pw_gid;
  Start(spec);
  JobEvent e = Finish(201);
  EXPECT_EQ(e.exit_code, 0) << ReadWholeFile(JobFile(201, kStderrFile));
  EXPECT_EQ(ReadWholeFile(JobFile(201, kStdoutFile)), std::to_string(pw->pw_uid) + "\n" +
                                                          std::to_string(pw->pw_gid) + "\n" +
                                                          pw->pw_dir + " nobody\n");
  for (const char* f : {kStdoutFile, kStderrFile}) {
    struct stat st;
    ASSERT_EQ(::stat(JobFile(201, f).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, pw->pw_uid);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  // The job's spec may hold secrets in its environment: root only.
  struct stat st;
  ASSERT_EQ(::stat(JobFile(201, kSpecFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// Under the daemons' umask 077, a state directory the launcher makes would be 0700 and
// its jobs could not reach their host file; it is made 0711 (traversable, not listable).
TEST_F(LauncherTest, AJobOfAnotherUserReadsItsHostFileInAStateDirTheLauncherMade) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  struct passwd* pw = ::getpwnam("nobody");
  if (pw == nullptr) GTEST_SKIP() << "no user 'nobody' on this host";
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
  const std::string state = dir_.path() + "/new-state";
  const mode_t before = ::umask(077);
  std::unique_ptr<Launcher> launcher = NewProcessLauncher(TestOptions(state));
  LaunchSpec spec = TestSpec(221, {"sh", "-c", "cat \"$GPUPOOL_HOSTFILE\""});
  spec.user = "nobody";
  spec.uid = pw->pw_uid;
  spec.gid = pw->pw_gid;
  spec.hostfile = "10.0.0.1 slots=2\n";
  spec.pool_env["GPUPOOL_HOSTFILE"] = JobDir(state, TaskRun(221)) + "/" + kHostFile;
  Status st = launcher->Launch(spec);
  ::umask(before);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::optional<JobEvent> started = WaitForEvent(*launcher, 221, 10'000);
  ASSERT_TRUE(started.has_value());
  std::optional<JobEvent> e =
      started->kind == Kind::kStarted ? WaitForEvent(*launcher, 221, 10'000) : started;
  ASSERT_TRUE(e.has_value());
  const std::string dir = JobDir(state, TaskRun(221));
  EXPECT_EQ(e->exit_code, 0) << ReadWholeFile(dir + "/" + kStderrFile);
  EXPECT_EQ(ReadWholeFile(dir + "/" + kStdoutFile), "10.0.0.1 slots=2\n");
  struct stat sd;
  ASSERT_EQ(::stat(state.c_str(), &sd), 0);
  EXPECT_EQ(sd.st_mode & 0777, 0711u);
  launcher.reset();
  testing::KillLeftoverJobs(state);
}

TEST_F(LauncherTest, UserWithoutAccessToWorkdirFails) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  struct passwd* pw = ::getpwnam("nobody");
  if (pw == nullptr) GTEST_SKIP() << "no user 'nobody' on this host";
  const std::string secret = dir_.path() + "/private";
  ASSERT_EQ(::mkdir(secret.c_str(), 0700), 0);
  LaunchSpec spec = TestSpec(211, {"true"});
  spec.user = "nobody";
  spec.uid = pw->pw_uid;
  spec.gid = pw->pw_gid;
  spec.workdir = secret;
  ASSERT_TRUE(launcher_->Launch(spec).ok());
  JobEvent e = Finish(211);
  EXPECT_EQ(e.kind, Kind::kFailed);
  EXPECT_EQ(e.reason, "working directory '" + secret +
                          "' is not accessible to user 'nobody' (uid " +
                          std::to_string(pw->pw_uid) + ")");
}

TEST_F(LauncherTest, BadRequestsAreErrorsNotEvents) {
  EXPECT_EQ(launcher_->Launch(TestSpec(0, {"true"})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(launcher_->Launch(TestSpec(221, {})).code(), StatusCode::kInvalidArgument);
  LaunchSpec bad_env = TestSpec(222, {"true"});
  bad_env.env["A=B"] = "x";
  EXPECT_EQ(launcher_->Launch(bad_env).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(launcher_->Cancel(TaskRun(999)).code(), StatusCode::kNotFound);

  Start(TestSpec(223, {"sleep", "100"}));
  EXPECT_EQ(launcher_->Launch(TestSpec(223, {"true"})).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(launcher_->Forget(TaskRun(223)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(launcher_->Running(), std::vector<RunId>{TaskRun(223)});
  ASSERT_TRUE(launcher_->Cancel(TaskRun(223)).ok());
  EXPECT_TRUE(Finish(223).cancelled);
  EXPECT_TRUE(launcher_->Poll().empty());
}

TEST_F(LauncherTest, MissingShimBinaryIsAnError) {
  LauncherOptions o = TestOptions(dir_.path());
  o.shim_command = {"/no/such/gpupool"};
  auto launcher = NewProcessLauncher(o);
  Status st = launcher->Launch(TestSpec(231, {"true"}));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("/no/such/gpupool"), std::string::npos) << st.message();
  EXPECT_TRUE(launcher->Poll().empty());
}

TEST_F(LauncherTest, DeniedDeviceNodeCannotBeOpened) {
  if (::geteuid() != 0 || ::access("/sys/fs/cgroup/devices/devices.deny", W_OK) != 0) {
    GTEST_SKIP() << "needs root and the cgroup v1 devices controller at /sys/fs/cgroup/devices";
  }
  // Stand-ins for two GPUs' device nodes: /dev/full's numbers (denied) and /dev/zero's.
  struct stat full_st;
  struct stat zero_st;
  ASSERT_EQ(::stat("/dev/full", &full_st), 0);
  ASSERT_EQ(::stat("/dev/zero", &zero_st), 0);
  const std::string denied = dir_.path() + "/gpu0";
  const std::string allowed = dir_.path() + "/gpu1";
  ASSERT_EQ(::mknod(denied.c_str(), S_IFCHR | 0666, full_st.st_rdev), 0);
  ASSERT_EQ(::mknod(allowed.c_str(), S_IFCHR | 0666, zero_st.st_rdev), 0);
  const std::string script = "if (: < " + denied + "); then echo denied:opened; else echo " +
                             "denied:refused; fi; if (: < " + allowed +
                             "); then echo allowed:opened; else echo allowed:refused; fi";
  LaunchSpec spec = TestSpec(281, {"sh", "-c", script});
  spec.denied_device_nodes = {denied};
  spec.cpu_milli = 500;
  spec.memory_bytes = 256ull << 20;
  Status st = launcher_->Launch(spec);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::optional<JobEvent> started = WaitForEvent(*launcher_, 281, 5000);
  ASSERT_TRUE(started.has_value());
  EXPECT_NE(started->isolation.find("devices denied 1"), std::string::npos) << started->isolation;
  JobEvent e = Finish(281);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(ReadWholeFile(JobFile(281, kStdoutFile)), "denied:refused\nallowed:opened\n")
      << ReadWholeFile(JobFile(281, kStderrFile));
  EXPECT_NE(ReadWholeFile(JobFile(281, kStderrFile)).find("Operation not permitted"),
            std::string::npos);
  // The job's cgroups are gone once it ended.
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(281)));
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->cgroup_dirs.size(), 3u);  // devices, cpu, memory
  for (const std::string& d : rec->cgroup_dirs) EXPECT_NE(::access(d.c_str(), F_OK), 0) << d;
}

TEST_F(LauncherTest, MemoryLimitKillIsExplained) {
  if (::geteuid() != 0 || ::access("/sys/fs/cgroup/memory/memory.limit_in_bytes", W_OK) != 0) {
    GTEST_SKIP() << "needs root and the cgroup v1 memory controller at /sys/fs/cgroup/memory";
  }
  // tail buffers /dev/zero's endless first line until the limit stops it.
  LaunchSpec spec = TestSpec(285, {"tail", "/dev/zero"});
  spec.memory_bytes = 32ull << 20;
  spec.time_limit_s = 20;
  Start(spec);
  JobEvent e = Finish(285, 20'000);
  EXPECT_EQ(e.kind, Kind::kExited);
  EXPECT_EQ(e.signal, SIGKILL);
  EXPECT_FALSE(e.timed_out);
  EXPECT_NE(e.reason.find("OOM killer: the memory limit of 33554432 bytes was reached"),
            std::string::npos)
      << e.reason;
  EXPECT_EQ(e.kill_cause, protocol::KillCause::kOomKernel);
  EXPECT_EQ(e.kill_detail,
            "killed by the kernel's OOM killer: the memory limit of 33554432 bytes was reached");
}

TEST_F(LauncherTest, IsolationSkippedIsNotedNotFatal) {
  LauncherOptions o = TestOptions(dir_.path());
  o.cgroup_root = dir_.path() + "/not-a-cgroup-fs";
  launcher_ = NewProcessLauncher(o);
  LaunchSpec spec = TestSpec(291, {"true"});
  spec.denied_device_nodes = {"/dev/full"};
  Start(spec);
  JobEvent e = Finish(291);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_NE(e.isolation.find("skipped"), std::string::npos) << e.isolation;
}

// Regression: when a GPU's device node was missing, the job's device rules denied nothing
// and it still ran, so on hosts that create /dev/nvidiaN lazily other GPUs were reachable.
// Isolation now fails closed: no deny rule, no launch, and the reason says what to do.
TEST_F(LauncherTest, MissingDeviceNodeFailsClosed) {
  const std::string marker = dir_.path() + "/ran";
  LaunchSpec spec = TestSpec(293, {"touch", marker});
  spec.denied_device_nodes = {dir_.path() + "/nvidia-missing0"};
  spec.require_device_isolation = true;
  Status st = launcher_->Launch(spec);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::optional<JobEvent> e = WaitForEvent(*launcher_, 293, 10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind, Kind::kFailed);
  EXPECT_NE(e->reason.find("GPU isolation could not be set up"), std::string::npos) << e->reason;
  EXPECT_NE(e->reason.find("--allow-unisolated-devices"), std::string::npos) << e->reason;
  EXPECT_NE(::access(marker.c_str(), F_OK), 0) << "the command ran";
}

// The admin's opt-out (the agent leaves require_device_isolation unset): the job runs and
// the isolation note says what could not be denied.
TEST_F(LauncherTest, MissingDeviceNodeRunsWhenNotRequired) {
  LaunchSpec spec = TestSpec(294, {"true"});
  spec.denied_device_nodes = {dir_.path() + "/nvidia-missing0"};
  Start(spec);
  JobEvent e = Finish(294);
  EXPECT_EQ(e.exit_code, 0);
}

}  // namespace
}  // namespace gpupool::agent
