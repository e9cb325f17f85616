// A process job's own /dev/shm (job_mounts.h) through the real shim: bounded by the job's
// memory limit, charged to its memory cgroup, gone with the job, entered by an exec
// session; shared, and said so, where the mount cannot be made.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "agent/job_files.h"
#include "agent/job_mounts.h"
#include "agent/launcher.h"
#include "agent/launcher_test_fixture.h"
#include "agent/launcher_test_util.h"
#include "common/strings.h"

namespace gpupool::agent {
namespace {

using testing::LauncherTest;
using testing::ReadWholeFile;
using testing::TaskRun;
using testing::TestOptions;
using testing::TestSpec;
using testing::WaitForEvent;
using testing::WaitForFileContaining;
using Kind = JobEvent::Kind;

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// A name in /dev/shm no other test run uses.
std::string ShmName(const char* what) {
  return "/dev/shm/gpupool-test-" + std::string(what) + "-" + std::to_string(::getpid());
}

void SkipWithoutMountNamespaces() {
  if (Status st = ProbePrivateDevShm(); !st.ok()) {
    GTEST_SKIP() << "no private /dev/shm here: " << st.message();
  }
}

TEST_F(LauncherTest, AJobsDevShmIsItsOwnBoundedByItsMemoryAndGoneWithIt) {
  SkipWithoutMountNamespaces();
  const std::string file = ShmName("bounded");
  const std::string script =
      "echo $GPUPOOL_DEV_SHM; dd if=/dev/zero of=" + file +
      " bs=1M count=64 2>/dev/null; stat -c %s " + file +
      "; df -B1 --output=size /dev/shm | tail -n 1 | tr -d ' '; stat -c %a /dev/shm";
  LaunchSpec spec = TestSpec(901, {"sh", "-c", script});
  spec.memory_bytes = 16ull << 20;
  Start(spec);
  JobEvent e = Finish(901);
  EXPECT_EQ(e.exit_code, 0) << ReadWholeFile(JobFile(901, kStderrFile));
  EXPECT_NE(e.isolation.find("/dev/shm private (tmpfs mode=1777,size=16777216)"), std::string::npos)
      << e.isolation;
  const std::vector<std::string> out = Split(ReadWholeFile(JobFile(901, kStdoutFile)), '\n');
  ASSERT_GE(out.size(), 4u) << ReadWholeFile(JobFile(901, kStderrFile));
  EXPECT_EQ(out[0], "private");
  EXPECT_LE(std::stoull(out[1]), 16ull << 20);  // the file could not outgrow the limit
  EXPECT_EQ(out[2], std::to_string(16ull << 20));
  EXPECT_EQ(out[3], "1777");
  EXPECT_FALSE(Exists(file)) << "the job's file is on the host's /dev/shm";
}

// The tmpfs's pages are the job's: its memory cgroup is charged for them.
TEST_F(LauncherTest, AJobsDevShmIsChargedToItsMemoryCgroup) {
  SkipWithoutMountNamespaces();
  const std::string file = ShmName("charged");
  const std::string marker = dir_.path() + "/written";
  LaunchSpec spec = TestSpec(902, {"sh", "-c",
                                   "dd if=/dev/zero of=" + file +
                                       " bs=1M count=24 2>/dev/null; "
                                       "echo done > " +
                                       marker + "; exec sleep 60"});
  spec.memory_bytes = 256ull << 20;
  Start(spec);
  ASSERT_TRUE(WaitForFileContaining(marker, "done", 10'000));
  EXPECT_FALSE(Exists(file)) << "the job's file is on the host's /dev/shm";
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(902)));
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  std::string stat;
  for (const std::string& d : rec->cgroup_dirs) {
    if (Exists(d + "/memory.stat")) stat = ReadWholeFile(d + "/memory.stat");
  }
  if (stat.empty()) {
    ASSERT_TRUE(launcher_->Cancel(TaskRun(902)).ok());
    Finish(902);
    GTEST_SKIP() << "the job has no memory cgroup here (" << rec->isolation << ")";
  }
  uint64_t shmem = 0;
  for (const std::string& line : Split(stat, '\n')) {
    if (line.starts_with("shmem ")) shmem = std::stoull(line.substr(6));
  }
  EXPECT_GE(shmem, 24ull << 20) << stat;
  ASSERT_TRUE(launcher_->Cancel(TaskRun(902)).ok());
  Finish(902);
}

// gpupool exec enters its task's mount namespace: it sees the task's /dev/shm.
TEST_F(LauncherTest, AnExecSessionSeesItsTasksDevShm) {
  SkipWithoutMountNamespaces();
  const std::string file = ShmName("exec");
  const std::string marker = dir_.path() + "/written";
  LaunchSpec task = TestSpec(
      903,
      {"sh", "-c", "echo from-the-task > " + file + "; echo done > " + marker + "; exec sleep 60"});
  Start(task);
  ASSERT_TRUE(WaitForFileContaining(marker, "done", 10'000));
  EXPECT_FALSE(Exists(file)) << "the task's file is on the host's /dev/shm";
  Result<ShimRecord> rec = ReadShimRecord(JobDir(dir_.path(), TaskRun(903)));
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  LaunchSpec exec = task;
  exec.id = RunId::ExecIn(TaskId{903, 0, 1}, 1);
  exec.argv = {"sh", "-c", "cat " + file + "; echo $GPUPOOL_DEV_SHM"};
  exec.join_cgroups = rec->cgroup_dirs;
  exec.join_job_pid = rec->job_pid;
  exec.join_job_start_ticks = rec->job_start_ticks;
  ASSERT_TRUE(launcher_->Launch(exec).ok());
  std::optional<JobEvent> started = WaitForEvent(*launcher_, exec.id, 5000);
  ASSERT_TRUE(started.has_value());
  ASSERT_EQ(started->kind, Kind::kStarted) << started->reason;
  std::optional<JobEvent> ended = WaitForEvent(*launcher_, exec.id, 10'000);
  ASSERT_TRUE(ended.has_value());
  const std::string exec_dir = JobDir(dir_.path(), exec.id);
  EXPECT_EQ(ended->exit_code, 0) << ReadWholeFile(exec_dir + "/" + kStderrFile);
  EXPECT_EQ(ReadWholeFile(exec_dir + "/" + kStdoutFile), "from-the-task\nprivate\n");
  ASSERT_TRUE(launcher_->Cancel(TaskRun(903)).ok());
  Finish(903);
  EXPECT_FALSE(Exists(file));
}

// Where the mount cannot be made (here: a shim without CAP_SYS_ADMIN, as under a
// container runtime that withholds it), the job runs on the host's /dev/shm as before,
// and its environment and isolation note say so.
TEST(LauncherDevShmTest, WithoutMountsTheJobRunsAndIsToldDevShmIsShared) {
  if (::geteuid() != 0 || !Exists("/usr/bin/setpriv")) {
    GTEST_SKIP() << "needs root and setpriv to take CAP_SYS_ADMIN from the shim";
  }
  testing::ScratchDir dir;
  LauncherOptions o = TestOptions(dir.path());
  o.shim_command = {"/usr/bin/setpriv", "--bounding-set=-sys_admin", "--", GPUPOOL_TEST_SHIM};
  std::unique_ptr<Launcher> launcher = NewProcessLauncher(o);
  ASSERT_TRUE(launcher->Launch(TestSpec(904, {"sh", "-c", "echo $GPUPOOL_DEV_SHM"})).ok());
  std::optional<JobEvent> started = WaitForEvent(*launcher, 904, 5000);
  ASSERT_TRUE(started.has_value());
  ASSERT_EQ(started->kind, Kind::kStarted) << started->reason;
  std::optional<JobEvent> e = WaitForEvent(*launcher, 904, 10'000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0);
  const std::string run = JobDir(dir.path(), TaskRun(904));
  EXPECT_EQ(ReadWholeFile(run + "/" + kStdoutFile), "shared\n");
  EXPECT_NE(e->isolation.find("/dev/shm shared with other jobs: cannot make a mount namespace: "
                              "Operation not permitted (needs root with CAP_SYS_ADMIN)"),
            std::string::npos)
      << e->isolation;
  testing::KillLeftoverJobs(dir.path());
}

// The admin's opt-out (--shared-dev-shm): the host's /dev/shm, and the job is told.
TEST_F(LauncherTest, AnAdminsOptOutSharesDevShmAndSaysSo) {
  LauncherOptions o = TestOptions(dir_.path());
  o.shared_dev_shm = true;
  launcher_ = NewProcessLauncher(o);
  Start(TestSpec(905, {"sh", "-c", "echo $GPUPOOL_DEV_SHM"}));
  JobEvent e = Finish(905);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(ReadWholeFile(JobFile(905, kStdoutFile)), "shared\n");
  EXPECT_NE(e.isolation.find("/dev/shm shared: the agent runs with --shared-dev-shm"),
            std::string::npos)
      << e.isolation;
}

}  // namespace
}  // namespace gpupool::agent
