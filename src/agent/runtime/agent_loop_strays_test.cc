// The agent loop's sweep of stray runs (agent_strays.cc, agent/stray_runs.h) against an
// in-process controller and a fake cgroup tree and /proc: the node registers only once
// the runs a previous agent of its node left are gone.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/launcher_test_util.h"
#include "agent/proc_util.h"
#include "agent/runtime/agent_loop.h"
#include "protocol/fake_controller_link.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(AgentLoopStraysTest, TheNodeRegistersOnlyOnceAPreviousAgentsRunIsGone) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string state = dir.path() + "/b", root = dir.path() + "/cgroup",
                    proc = dir.path() + "/proc", old = dir.path() + "/a/agent";
  Write(old + "/node-name", "n1\n");  // the previous agent of n1, no longer running
  // Its run: the shim (a real child of ours, so that the stop's SIGKILL hits no one
  // else) and its job's process, as the fake /proc shows them. The fake leaf keeps its
  // cgroup.procs file, so it cannot be removed until the test removes it.
  const pid_t shim = ::fork();
  if (shim == 0) {
    ::pause();
    ::_exit(0);
  }
  const std::string leaf = root + "/cpu/gpupool/job-7-0.1-" + std::to_string(shim);
  Write(leaf + "/cgroup.procs", "");
  std::string cmdline;
  for (const char* a : {"gpupool-agent-shim", "--job-dir", "X/jobs/7/0.1", "--ready-fd", "3"}) {
    cmdline += std::string(a) + '\0';
  }
  Write(proc + "/" + std::to_string(shim) + "/cmdline", cmdline.replace(cmdline.find('X'), 1, old));

  fs::create_directories(state);
  std::unique_ptr<Launcher> launcher = NewProcessLauncher(testing::TestOptions(state));
  auto link = std::make_shared<protocol::FakeControllerLink>();
  AgentLoopOptions ao;
  ao.node_name = "n1";
  ao.state_dir = state;
  ao.fake_node = true;
  ao.telemetry_interval_s = 0;
  ao.cancel_grace_s = 0;  // the removal is then tried for a second
  ao.poll_wait_ms = 50;
  ao.cgroup_root = root;
  ao.proc_root = proc;
  AgentLoop loop(ao, link, launcher.get());
  std::thread thread([&] { EXPECT_TRUE(loop.Run().ok()); });

  // The stop kills the shim, but the leaf stays: no registration while it does.
  const int fd = OpenVerifiedPidFd(shim, 0);
  struct pollfd p = {fd, POLLIN, 0};
  const bool stopped = ::poll(&p, 1, 10'000) == 1;
  ::close(fd);
  EXPECT_TRUE(stopped) << "the stray's shim was not stopped";
  EXPECT_TRUE(link->recorded().registrations.empty());
  fs::remove_all(root + "/cpu");  // gone: the next try registers
  fs::remove_all(proc);
  EXPECT_TRUE(link->WaitFor([](const auto& r) { return !r.registrations.empty(); }));
  loop.Stop();
  thread.join();
  // Reaped only now: until then its pid cannot name another process the loop could kill.
  if (!stopped) ::kill(shim, SIGKILL);
  int status = 0;
  EXPECT_EQ(::waitpid(shim, &status, 0), shim);
  EXPECT_TRUE(stopped && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

}  // namespace
}  // namespace gpupool::agent
