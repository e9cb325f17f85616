#include "agent/stray_runs.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "agent/job_files.h"
#include "agent/proc_util.h"
#include "common/file_lock.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// The wait status of child `pid` once it ended, or -1 when it had not within `ms` (it is
// killed then, so that a test that fails does not hang).
int WaitChild(pid_t pid, int ms) {
  const int fd = OpenVerifiedPidFd(pid, 0);
  if (fd >= 0) {
    struct pollfd p = {fd, POLLIN, 0};
    (void)::poll(&p, 1, ms);
    ::close(fd);
  }
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == pid) return status;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

// A fake cgroup root (v1: a hierarchy per controller) and /proc, in a temp dir.
class StrayRunsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-strays-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    scan_.cgroup_root = base_ + "/cgroup";
    scan_.proc_root = base_ + "/proc";
    scan_.agent_dir = base_ + "/b/agent";
    scan_.node_name = "n1";
    fs::create_directories(scan_.agent_dir);
    Write(scan_.agent_dir + "/node-name", "n1\n");
  }
  void TearDown() override { fs::remove_all(base_); }

  // A leaf in `hierarchy` ("" for v2's root) whose shim (pid `shim`) runs
  // `job_dir`'s run, holding process `pid` (0: none).
  std::string Leaf(const std::string& hierarchy, const std::string& leaf, int shim,
                   const std::string& job_dir, int pid = 0) {
    const std::string dir =
        scan_.cgroup_root + (hierarchy.empty() ? "" : "/" + hierarchy) + "/gpupool/" + leaf;
    Write(dir + "/cgroup.procs", pid > 0 ? std::to_string(pid) + "\n" : "");
    if (pid > 0) Write(ProcFile(pid, "stat"), std::to_string(pid) + " (sleep) S 1 1");
    if (!job_dir.empty()) {
      const std::string argv[] = {"/usr/bin/gpupool-agent-shim", "--job-dir", job_dir, "--ready-fd",
                                  "3"};
      std::string cmdline;
      for (const std::string& a : argv) cmdline += a + '\0';
      Write(ProcFile(shim, "cmdline"), cmdline);
    }
    return dir;
  }
  std::string ProcFile(int pid, const std::string& name) const {
    return scan_.proc_root + "/" + std::to_string(pid) + "/" + name;
  }
  // Another agent's state directory, recording `node` (empty: none).
  std::string OtherAgent(const std::string& name, const std::string& node) {
    const std::string dir = base_ + "/" + name + "/agent";
    fs::create_directories(dir);
    Write(dir + "/agent.lock", "");
    if (!node.empty()) Write(dir + "/node-name", node + "\n");
    return dir;
  }

  std::string base_;
  StrayScan scan_;
};

TEST_F(StrayRunsTest, APreviousAgentsRunOfThisNodeIsAStray) {
  const std::string a = OtherAgent("a", "n1");
  const std::string devices = Leaf("devices", "job-7-0.1-100", 100, a + "/jobs/7/0.1", 101);
  const std::string cpu = Leaf("cpu", "job-7-0.1-100", 100, a + "/jobs/7/0.1", 101);
  std::vector<std::string> unknown;
  const std::vector<StrayRun> strays = FindStrayRuns(scan_, &unknown);
  ASSERT_EQ(strays.size(), 1u);
  EXPECT_EQ(strays[0].job, 7);
  EXPECT_EQ(strays[0].run, "0.1");
  EXPECT_EQ(strays[0].shim_pid, 100);
  EXPECT_EQ(strays[0].job_dir, a + "/jobs/7/0.1");
  EXPECT_EQ(strays[0].dirs, (std::vector<std::string>{cpu, devices}));  // one run, both leaves
  EXPECT_NE(strays[0].why.find("state directory " + a + " not this one's"), std::string::npos)
      << strays[0].why;
  EXPECT_TRUE(unknown.empty());
}

TEST_F(StrayRunsTest, APreviousAgentOfThisPoolSharesOneOfItsControllers) {
  scan_.controllers = "http://c1:8421,http://c2:8421";
  const std::string a = OtherAgent("a", "n1");
  RecordController(a, "http://c2:8421,http://c3:8421");
  Leaf("", "job-7-0.1-100", 100, a + "/jobs/7/0.1", 101);
  ASSERT_EQ(FindStrayRuns(scan_, nullptr).size(), 1u);
  RecordController(a, "http://c3:8421");
  EXPECT_TRUE(FindStrayRuns(scan_, nullptr).empty());
}

TEST_F(StrayRunsTest, AWipedStateDirectorysRunIsAStray) {
  // Its state directory is gone: no agent can adopt the run again.
  Leaf("", "job-8-0.2-200", 200, base_ + "/gone/agent/jobs/8/0.2", 201);
  // The same directory as this agent's, wiped and made again: the run is not in it.
  Leaf("", "job-9-1.1-300", 300, scan_.agent_dir + "/jobs/9/1.1", 301);
  const std::vector<StrayRun> strays = FindStrayRuns(scan_, nullptr);
  ASSERT_EQ(strays.size(), 2u);
  EXPECT_EQ(strays[0].job, 8);
  EXPECT_NE(strays[0].why.find("is gone"), std::string::npos) << strays[0].why;
  EXPECT_EQ(strays[1].job, 9);
  EXPECT_EQ(strays[1].run, "1.1");
  EXPECT_NE(strays[1].why.find("does not supervise"), std::string::npos) << strays[1].why;
}

TEST_F(StrayRunsTest, RunsThisAgentOrAnotherLiveOneOwnsAreLeftAlone) {
  // Re-adopted from this agent's own state directory.
  Leaf("", "job-1-0.1-100", 100, scan_.agent_dir + "/jobs/1/0.1", 101);
  scan_.running = {RunId{1, 0, 1, 0}};
  // An older agent's leaf (job-KEY-ATTEMPT-INSTANCE), re-adopted: its spec names the run.
  const std::string legacy = scan_.agent_dir + "/jobs/1000-2";
  Leaf("", "job-1000-2-150", 150, legacy, 151);
  ShimConfig config;
  config.spec.id = RunId{11, 0, 2, 0};
  config.spec.user = "tester";
  config.spec.argv = {"true"};
  ASSERT_TRUE(ShimConfigFromJson(ShimConfigToJson(config), "spec").ok())
      << ShimConfigFromJson(ShimConfigToJson(config), "spec").status().ToString();
  Write(legacy + "/" + kSpecFile, ShimConfigToJson(config));
  scan_.running.push_back(config.spec.id);
  // Another node's agent on this host (tests run several), not running now.
  Leaf("", "job-2-0.1-200", 200, OtherAgent("other", "n2") + "/jobs/2/0.1", 201);
  // An agent of this node's name that still runs (holds its lock): a clone the controller
  // refuses, whose runs are not this one's to stop.
  const std::string live = OtherAgent("live", "n1");
  Result<FileLock> held = FileLock::TryLock(live + "/agent.lock");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  Leaf("", "job-3-0.1-300", 300, live + "/jobs/3/0.1", 301);
  // Another pool's agent of a node of this name (two pools on one host).
  scan_.controllers = "unix:/ours.sock";
  const std::string other_pool = OtherAgent("pool2", "n1");
  Write(other_pool + "/controller", "unix:/theirs.sock\n");
  Leaf("", "job-6-0.1-600", 600, other_pool + "/jobs/6/0.1", 601);
  // A state directory that never recorded a node: not known to be this node's.
  Leaf("", "job-4-0.1-400", 400, OtherAgent("new", "") + "/jobs/4/0.1", 401);
  // The pid in the leaf's name is no shim now (reused): nothing names the owner.
  const std::string reused = Leaf("", "job-5-0.1-500", 500, "", 501);
  Write(ProcFile(500, "cmdline"), std::string("sleep\0"
                                              "100\0",
                                              10));
  // Not job leaves at all.
  fs::create_directories(scan_.cgroup_root + "/gpupool/user.slice");
  fs::create_directories(scan_.cgroup_root + "/gpupool/job-x-0.1-700");
  std::vector<std::string> unknown;
  EXPECT_TRUE(FindStrayRuns(scan_, &unknown).empty());
  EXPECT_EQ(unknown, std::vector<std::string>{reused});
}

TEST_F(StrayRunsTest, NoCgroupRootFindsNothing) {
  Leaf("", "job-8-0.2-200", 200, base_ + "/gone/agent/jobs/8/0.2", 201);
  scan_.cgroup_root.clear();  // a non-root agent: its jobs have no cgroups
  EXPECT_TRUE(FindStrayRuns(scan_, nullptr).empty());
}

// Stopping one: SIGTERM to its processes (real ones here, listed in the fake leaf), then
// SIGKILL to one that ignores it, and its shim killed when it does not end by itself.
TEST_F(StrayRunsTest, StopTermsThenKillsTheRunAndItsShim) {
  const pid_t polite = ::fork();
  if (polite == 0) {
    ::pause();
    ::_exit(0);
  }
  const pid_t stubborn = ::fork();
  if (stubborn == 0) {
    ::signal(SIGTERM, SIG_IGN);
    while (true) ::pause();
  }
  // A "shim" that does not end when its job does.
  const pid_t shim = ::fork();
  if (shim == 0) {
    ::execl("/bin/sh", "sh", "-c", "while :; do sleep 0.05; done", "/x/gpupool-agent-shim",
            "--job-dir", "/gone/agent/jobs/7/0.1", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  StrayRun run;
  run.job = 7;
  run.run = "0.1";
  run.shim_pid = shim;
  run.job_dir = "/gone/agent/jobs/7/0.1";
  const std::string leaf = scan_.cgroup_root + "/gpupool/job-7-0.1-" + std::to_string(shim);
  Write(leaf + "/cgroup.procs", std::to_string(polite) + "\n" + std::to_string(stubborn) + "\n");
  run.dirs = {leaf};
  // The shim's command line is in place before the stop looks for it.
  for (int i = 0; i < 200; ++i) {
    std::ifstream f("/proc/" + std::to_string(shim) + "/cmdline");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (text.find("--job-dir") != std::string::npos) break;
    ::usleep(10'000);
  }
  // A fake leaf keeps its cgroup.procs file, so it cannot be removed: that is the error.
  const Status st = StopStrayRun(run, "/proc", /*grace_ms=*/300, /*timeout_ms=*/0);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(leaf), std::string::npos) << st.ToString();
  // Each has ended by the time the stop returns.
  int status = WaitChild(polite, 0);
  EXPECT_TRUE(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  status = WaitChild(stubborn, 0);
  EXPECT_TRUE(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  // The shim's end: the kill was sent, its exit may take a moment to be seen.
  status = WaitChild(shim, 5000);
  EXPECT_TRUE(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

}  // namespace
}  // namespace gpupool::agent
