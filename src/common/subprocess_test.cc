#include "common/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <vector>

namespace gpupool {
namespace {

TEST(SubprocessTest, CapturesBothStreamsAndTheExitStatus) {
  auto r = RunCommandCapture({"sh", "-c", "echo out; echo err >&2; exit 3"}, 10'000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  ASSERT_TRUE(WIFEXITED(r->wait_status));
  EXPECT_EQ(WEXITSTATUS(r->wait_status), 3);
  EXPECT_FALSE(r->Succeeded());
  EXPECT_EQ(r->Failure({"sh", "-c"}, 10'000), "sh -c failed: err");
}

// The options the agent starts a job's supervisor with: own session, signals blocked
// across exec, one descriptor passed, every later one closed, output to /dev/null.
TEST(SubprocessTest, SpawnOptionsReachTheChild) {
  int pipefd[2];
  ASSERT_EQ(::pipe2(pipefd, O_CLOEXEC), 0);
  const int stray = ::dup2(pipefd[1], 40);  // inherited (no close-on-exec) unless closed
  ASSERT_EQ(stray, 40);
  SpawnOptions o;
  o.null_output = true;
  o.new_session = true;
  o.search_path = false;
  o.blocked = {SIGTERM};
  o.pass_fd = pipefd[1];
  o.pass_fd_as = 5;
  o.close_from = 6;
  auto pid =
      SpawnCommand({"/bin/sh", "-c",
                    "read -r _ _ _ _ _ sid _ < /proc/self/stat; echo \"sid=$sid pid=$$\" >&5; "
                    "[ -e /proc/$$/fd/40 ] && echo stray >&5; echo noise"},
                   o);
  ::close(pipefd[1]);
  ::close(stray);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  EXPECT_NE(got.find("sid=" + std::to_string(*pid) + " pid=" + std::to_string(*pid)),
            std::string::npos)
      << got;
  EXPECT_EQ(got.find("stray"), std::string::npos) << got;
  EXPECT_EQ(got.find("noise"), std::string::npos) << got;  // stdout went to /dev/null

  // The mask, seen by a program that leaves it alone (a shell resets its own).
  auto status_text = [](const std::vector<int>& blocked) {
    SpawnOptions so;
    so.blocked = blocked;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return std::string();
    so.out_fd = fds[1];
    auto p = SpawnCommand({"cat", "/proc/self/status"}, so);
    ::close(fds[1]);
    std::string text;
    char b[4096];
    for (ssize_t n; (n = ::read(fds[0], b, sizeof b)) > 0;) text.append(b, static_cast<size_t>(n));
    ::close(fds[0]);
    int st = 0;
    if (p.ok()) ::waitpid(*p, &st, 0);
    return text;
  };
  auto blocked_mask = [](const std::string& text) {
    const size_t at = text.find("SigBlk:");
    return at == std::string::npos ? ~0ULL : std::stoull(text.substr(at + 7), nullptr, 16);
  };
  EXPECT_NE(blocked_mask(status_text({SIGTERM})) & (1ULL << (SIGTERM - 1)), 0U);
  EXPECT_EQ(blocked_mask(status_text({})), 0U);

  // search_path is still false: a bare name is not looked up in PATH.
  auto bare = SpawnCommand({"sh", "-c", "true"}, o);
  if (bare.ok()) ::waitpid(*bare, &status, 0);
  EXPECT_FALSE(bare.ok());
}

// A command fed on standard input, in an environment of its own (how the agent talks to
// nvidia-cuda-mps-control: commands on stdin, the daemon's folders in the environment).
TEST(SubprocessTest, InputAndEnvironmentReachTheChild) {
  int in[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::write(in[1], "quit\n", 5), 5);
  ::close(in[1]);
  SpawnOptions o;
  o.in_fd = in[0];
  o.env = std::vector<std::string>{"PATH=/usr/bin:/bin", "ONLY_THIS=1"};
  auto r = RunCommandCapture({"sh", "-c", "read line; echo \"$line ${ONLY_THIS} ${HOME:-nohome}\""},
                             10'000, o, {});
  ::close(in[0]);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->out, "quit 1 nohome\n");
  SpawnOptions as;
  as.env = std::vector<std::string>{};
  as.run_as = SpawnOptions::RunAs{};
  EXPECT_EQ(SpawnCommand({"/bin/true"}, as).status().code(), StatusCode::kInvalidArgument);
}

TEST(SubprocessTest, SucceedsAndReadsNoInput) {
  auto r = RunCommandCapture({"cat"}, 10'000);  // stdin is /dev/null: ends at once
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->Succeeded());
  EXPECT_EQ(r->out, "");
}

TEST(SubprocessTest, KillsACommandPastItsTimeLimit) {
  auto r = RunCommandCapture({"sleep", "30"}, 200);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->Succeeded());
  EXPECT_TRUE(WIFSIGNALED(r->wait_status) && WTERMSIG(r->wait_status) == SIGKILL);
  EXPECT_EQ(r->Failure({"sleep", "30"}, 200),
            "sleep 30 did not finish within 200 ms and was killed");
}

TEST(SubprocessTest, MissingCommandOrEmptyArgvIsAnError) {
  auto missing = RunCommandCapture({"/no/such/tool"}, 1000);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/no/such/tool"), std::string::npos);
  EXPECT_EQ(RunCommandCapture({}, 1000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(SpawnCommand({}).ok());
}

TEST(SubprocessTest, CancelledCommandIsKilledPromptly) {
  const auto start = std::chrono::steady_clock::now();
  int polls = 0;
  auto r = RunCommandCapture({"sleep", "30"}, 20'000, SpawnOptions{}, [&] { return ++polls > 3; });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->cancelled);
  EXPECT_FALSE(r->Succeeded());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(r->Failure({"sleep", "30"}, 20'000).find("was stopped"), std::string::npos);
}

TEST(SubprocessTest, RunAsSwitchesUserGroupsAndClosesDescriptors) {
  if (::geteuid() != 0) GTEST_SKIP() << "switching users needs root";
  const int leaked = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC: must still not reach it
  ASSERT_GE(leaked, 3);
  SpawnOptions o;
  o.run_as = SpawnOptions::RunAs{65534, 65534, {65533}};
  auto r = RunCommandCapture({"/bin/sh", "-c", "id -u; id -g; id -G; ls /proc/self/fd | wc -l"},
                             10'000, o, {});
  ::close(leaked);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->Succeeded()) << r->err;
  // 0, 1, 2 and the descriptor ls opens for /proc/self/fd.
  EXPECT_EQ(r->out, "65534\n65534\n65534 65533\n4\n");
  EXPECT_FALSE(SpawnCommand({"sh"}, o).ok());  // a path is required
}

// The daemons block SIGINT and SIGTERM in every thread (one thread takes them with
// sigwait): a child, a job's supervisor and its job among them, starts from an empty
// mask whichever way it is started, so SIGTERM still ends it (a child that kept the mask
// would sleep its 5 s out and exit 0).
TEST(SubprocessTest, AChildDoesNotInheritTheCallersBlockedSignals) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigset_t old;
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &set, &old), 0);
  std::vector<SpawnOptions> ways(1);  // posix_spawn
  if (::geteuid() == 0) {             // fork, switch user, exec
    ways.emplace_back().run_as = SpawnOptions::RunAs{65534, 65534, {}};
  }
  std::vector<int> statuses;
  for (const SpawnOptions& o : ways) {
    Result<pid_t> pid = SpawnCommand({"/bin/sleep", "5"}, o);
    if (!pid.ok()) {
      ADD_FAILURE() << pid.status().ToString();
      continue;
    }
    EXPECT_EQ(::kill(*pid, SIGTERM), 0);
    int status = 0;
    EXPECT_EQ(::waitpid(*pid, &status, 0), *pid);
    statuses.push_back(status);
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_EQ(statuses.size(), ways.size());
  for (int status : statuses) {
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "wait status " << status;
  }
}

}  // namespace
}  // namespace gpupool
