#include "agent/mps.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/file_util.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

// The stand-in built by the tests (tests/fakelib/mps): NVIDIA's command line and
// environment, and a log of every start, command and stop per daemon folder.
const std::string kStandIn =
    std::string(GPUPOOL_BINARY_DIR) + "/tests/fakelib/mps/nvidia-cuda-mps-control";

// Half a GPU with 1 GiB of its memory.
const MpsLimits kHalf{50, 1024};

class MpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-mps-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    state_ = tmpl;
  }
  void TearDown() override {
    // Whatever a failed test left running stops with its folder.
    MpsDaemons(Options()).StopUnused();
    fs::remove_all(state_);
  }
  MpsOptions Options(std::vector<std::string> extra_env = {}) const {
    MpsOptions o;
    o.control = kStandIn;
    o.state_dir = state_;
    o.timeout_ms = 10'000;
    o.base_env = {"PATH=/usr/bin:/bin"};
    o.base_env.insert(o.base_env.end(), extra_env.begin(), extra_env.end());
    return o;
  }
  std::string Log(const std::string& gpu) const {
    Result<std::string> text = ReadFileToString(state_ + "/mps/" + gpu + "/log/control.log");
    return text.ok() ? *text : "";
  }
  static size_t Count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  std::string state_;
};

TEST_F(MpsTest, OneDaemonPerGpuQuitAfterItsLastClient) {
  MpsDaemons mps(Options());
  const RunId a1{1, 0, 1, 0}, a2{2, 0, 1, 0}, b1{3, 0, 1, 0};
  Result<std::string> pipe = mps.Acquire("GPU-a", a1, 4321, 4322, kHalf);
  ASSERT_TRUE(pipe.ok()) << pipe.status().ToString();
  EXPECT_EQ(*pipe, state_ + "/mps/GPU-a/pipe");
  ASSERT_TRUE(mps.Acquire("GPU-a", a2, 4321, 4322, kHalf).ok());
  ASSERT_TRUE(mps.Acquire("GPU-b", b1, 4321, 4322, kHalf).ok());
  // Each daemon serves its GPU alone, started once however many clients it has.
  EXPECT_EQ(Count(Log("GPU-a"), "start "), 1u) << Log("GPU-a");
  EXPECT_NE(Log("GPU-a").find("CUDA_VISIBLE_DEVICES=GPU-a "), std::string::npos);
  EXPECT_NE(Log("GPU-b").find("CUDA_VISIBLE_DEVICES=GPU-b "), std::string::npos);
  // Only the share's user may reach the daemon.
  struct stat st;
  ASSERT_EQ(::stat(pipe->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  if (::geteuid() == 0) {
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_gid, 4322u);
  }
  EXPECT_EQ((std::map<std::string, size_t>{{"GPU-a", 2}, {"GPU-b", 1}}), mps.Clients());

  ASSERT_TRUE(mps.Release(a1).ok());
  EXPECT_EQ(Count(Log("GPU-a"), "command quit"), 0u);
  ASSERT_TRUE(mps.Release(a1).ok());  // again: nothing happens
  EXPECT_TRUE(fs::exists(state_ + "/mps/GPU-a"));
  const std::string before = Log("GPU-a");
  ASSERT_TRUE(mps.Release(a2).ok());
  EXPECT_NE(before.find("start "), std::string::npos);
  EXPECT_FALSE(fs::exists(state_ + "/mps/GPU-a"));  // quit, folder removed
  EXPECT_TRUE(fs::exists(state_ + "/mps/GPU-b"));
  EXPECT_EQ((std::map<std::string, size_t>{{"GPU-b", 1}}), mps.Clients());
}

// The agent runs with umask 077 (so new folders are 0700); the share's user must still
// reach its pipe folder by path: STATE/mps and the GPU's folder are traversable by all
// and listable by none. Checked as that user when the test runs as root.
TEST_F(MpsTest, TheSharesUserCanReachItsPipeFolderUnderAStrictUmask) {
  const mode_t old_umask = ::umask(077);
  MpsDaemons mps(Options());
  Result<std::string> pipe = mps.Acquire("GPU-u", {1, 0, 1, 0}, 65534, 65534, kHalf);
  ::umask(old_umask);
  ASSERT_TRUE(pipe.ok()) << pipe.status().ToString();
  for (const std::string& d : {state_ + "/mps", state_ + "/mps/GPU-u"}) {
    struct stat st;
    ASSERT_EQ(::stat(d.c_str(), &st), 0) << d;
    EXPECT_EQ(st.st_mode & 07777, 0711u) << d;
  }
  if (::geteuid() != 0) return;
  ::chmod(state_.c_str(), 0711);  // mkdtemp's 0700 is the test's, not the agent's
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const bool reached = ::setgid(65534) == 0 && ::setuid(65534) == 0 &&
                         ::access(pipe->c_str(), R_OK | W_OK | X_OK) == 0;
    ::_exit(reached ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "nobody cannot reach " << *pipe;
}

// The log of a stopped daemon is removed with its folder: the stop is seen through a
// second daemon folder that keeps its log (the quit is recorded before the folder goes).
TEST_F(MpsTest, QuitIsSentBeforeTheFolderGoes) {
  MpsDaemons mps(Options());
  const RunId r{1, 0, 1, 0};
  ASSERT_TRUE(mps.Acquire("GPU-q", r, ::getuid(), ::getgid(), kHalf).ok());
  const std::string log = state_ + "/mps/GPU-q/log/control.log";
  const std::string copy = state_ + "/kept.log";
  ASSERT_TRUE(fs::exists(log));
  fs::create_hard_link(log, copy);
  ASSERT_TRUE(mps.Release(r).ok());
  Result<std::string> text = ReadFileToString(copy);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("command quit"), std::string::npos) << *text;
  EXPECT_NE(text->find("stopped pid="), std::string::npos) << *text;
}

// An agent that restarts finds the daemons it started (they run in their own session),
// counts its adopted runs again and stops only the daemons nobody needs.
TEST_F(MpsTest, ARestartedAgentKeepsTheDaemonsItNeedsAndStopsTheRest) {
  {
    MpsDaemons first(Options());
    ASSERT_TRUE(first.Acquire("GPU-a", {1, 0, 1, 0}, ::getuid(), ::getgid(), kHalf).ok());
    ASSERT_TRUE(first.Acquire("GPU-b", {2, 0, 1, 0}, ::getuid(), ::getgid(), kHalf).ok());
  }  // the agent goes away; its daemons do not
  MpsDaemons second(Options());
  ASSERT_TRUE(second.Acquire("GPU-a", {1, 0, 1, 0}, ::getuid(), ::getgid(), kHalf).ok());
  EXPECT_EQ(Count(Log("GPU-a"), "start "), 1u) << "started twice: " << Log("GPU-a");
  // The new agent does not know what its predecessor set: it sets the ceiling again.
  EXPECT_EQ(Count(Log("GPU-a"), "command set_default_active_thread_percentage 50\n"), 2u)
      << Log("GPU-a");
  const std::string b_log = state_ + "/b.log";
  fs::create_hard_link(state_ + "/mps/GPU-b/log/control.log", b_log);
  EXPECT_TRUE(second.StopUnused().empty());
  EXPECT_TRUE(fs::exists(state_ + "/mps/GPU-a"));
  EXPECT_FALSE(fs::exists(state_ + "/mps/GPU-b"));
  Result<std::string> text = ReadFileToString(b_log);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("command quit"), std::string::npos) << *text;
}

// An agent restarted without MPS (s1b_mps_restart_as_none): the daemons its predecessor
// left are found with the control program recorded in their folders; the one of an
// adopted client is quit when that client ends, the others at once, and none is started.
TEST_F(MpsTest, AnAgentNoLongerInMpsModeQuitsItsPredecessorsDaemons) {
  EXPECT_EQ(LeftoverMpsControl(state_, "/usr/bin/true"), "");  // nothing left
  const RunId a{1, 0, 1, 0}, b{2, 0, 1, 0};
  {
    MpsDaemons first(Options());
    ASSERT_TRUE(first.Acquire("GPU-a", a, ::getuid(), ::getgid(), kHalf).ok());
    ASSERT_TRUE(first.Acquire("GPU-b", b, ::getuid(), ::getgid(), kHalf).ok());
  }  // the agent goes away; its daemons do not
  MpsOptions o = Options();
  o.control = LeftoverMpsControl(state_, "");
  EXPECT_EQ(o.control, kStandIn);
  o.adopt_only = true;
  MpsDaemons second(o);
  ASSERT_TRUE(second.Acquire("GPU-a", a, ::getuid(), ::getgid(), kHalf).ok());  // adopted
  const std::string a_log = state_ + "/a.log", b_log = state_ + "/b.log";
  fs::create_hard_link(state_ + "/mps/GPU-a/log/control.log", a_log);
  fs::create_hard_link(state_ + "/mps/GPU-b/log/control.log", b_log);
  EXPECT_TRUE(second.StopUnused().empty());
  EXPECT_FALSE(fs::exists(state_ + "/mps/GPU-b"));
  EXPECT_NE(ReadFileToString(b_log).value_or("").find("command quit"), std::string::npos);
  // It starts no daemon, for a new run nor for one whose daemon is gone.
  Result<std::string> pipe = second.Acquire("GPU-c", b, ::getuid(), ::getgid(), kHalf);
  EXPECT_EQ(pipe.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(fs::exists(state_ + "/mps/GPU-c"));
  // The adopted client ends: its daemon is quit, and nothing is left.
  ASSERT_TRUE(fs::exists(state_ + "/mps/GPU-a"));
  ASSERT_TRUE(second.Release(a).ok());
  EXPECT_FALSE(fs::exists(state_ + "/mps/GPU-a"));
  EXPECT_NE(ReadFileToString(a_log).value_or("").find("command quit"), std::string::npos);
  EXPECT_EQ(LeftoverMpsControl(state_, "/usr/bin/true"), "");
}

// A daemon that died (or a folder left by a crash) is started afresh, not trusted.
TEST_F(MpsTest, ADeadDaemonsFolderIsStartedAfresh) {
  fs::create_directories(state_ + "/mps/GPU-d/pipe");
  ASSERT_TRUE(WriteFileAtomically(state_ + "/mps/GPU-d/pipe/control.pid", "999999\n").ok());
  MpsDaemons mps(Options());
  ASSERT_TRUE(mps.Acquire("GPU-d", {1, 0, 1, 0}, ::getuid(), ::getgid(), kHalf).ok());
  EXPECT_EQ(Count(Log("GPU-d"), "start "), 1u);
}

TEST_F(MpsTest, AStartThatFailsSaysWhyAndHoldsNothing) {
  MpsDaemons mps(Options({"FAKE_MPS_REFUSE_START=1"}));
  Result<std::string> pipe = mps.Acquire("GPU-x", {1, 0, 1, 0}, ::getuid(), ::getgid(), kHalf);
  ASSERT_FALSE(pipe.ok());
  EXPECT_EQ(pipe.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(pipe.status().message().find("did not start"), std::string::npos);
  EXPECT_NE(pipe.status().message().find("refused start"), std::string::npos)
      << pipe.status().message();
  EXPECT_TRUE(mps.Clients().empty());
}

// The red team: the log folder is the share's user's, and the agent read control.log's
// last line into a failed start's reason (which the job's user sees) as root, following
// a link the user put there: a root-only file's last line would reach the user.
TEST_F(MpsTest, AFailedStartNeverReadsALogTheUserSwappedForALink) {
  const std::string secret = state_ + "/secret";
  ASSERT_TRUE(WriteFileAtomically(secret, "root:the-hash-of-roots-password\n").ok());
  ::chmod(secret.c_str(), 0600);
  MpsDaemons mps(Options({"FAKE_MPS_REFUSE_START=1", "FAKE_MPS_LOG_LINK=" + secret}));
  Result<std::string> pipe = mps.Acquire("GPU-l", {1, 0, 1, 0}, ::getuid(), ::getgid(), kHalf);
  ASSERT_FALSE(pipe.ok());
  EXPECT_NE(pipe.status().message().find("did not start"), std::string::npos);
  EXPECT_EQ(pipe.status().message().find("the-hash"), std::string::npos) << pipe.status().message();
}

TEST_F(MpsTest, GpuIdsThatCannotNameAFolderAreRefused) {
  MpsDaemons mps(Options());
  for (const char* bad : {"", "..", "../etc", "GPU/a", "-rf", "GPU a"}) {
    Result<std::string> pipe = mps.Acquire(bad, {1, 0, 1, 0}, 0, 0, kHalf);
    ASSERT_FALSE(pipe.ok()) << bad;
    EXPECT_EQ(pipe.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(fs::exists(state_ + "/mps"));
}

// A second user's share on a running daemon (the admin allowed several users): the
// folders become root's and open to all, and the owner file says so.
TEST_F(MpsTest, ASecondUserMakesTheFoldersShared) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the folders to other users";
  MpsDaemons mps(Options());
  ASSERT_TRUE(mps.Acquire("GPU-s", {1, 0, 1, 0}, 2001, 2001, kHalf).ok());
  ASSERT_TRUE(mps.Acquire("GPU-s", {2, 0, 1, 0}, 2002, 2002, kHalf).ok());
  Result<std::string> owner = ReadFileToString(state_ + "/mps/GPU-s/owner");
  ASSERT_TRUE(owner.ok());
  EXPECT_EQ(*owner, "shared\n");
  struct stat st;
  ASSERT_EQ(::stat((state_ + "/mps/GPU-s/pipe").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  EXPECT_EQ(st.st_uid, 0u);
}

TEST(MpsLimitsTest, ThreadsRoundUpAndMemoryIsInWholeMebibytes) {
  EXPECT_EQ(MpsLimitsFor(500, uint64_t{10} << 30), (MpsLimits{50, 10240}));
  EXPECT_EQ(MpsLimitsFor(1, 0), (MpsLimits{1, 0}));
  EXPECT_EQ(MpsLimitsFor(991, 1000), (MpsLimits{100, 1}));
  EXPECT_EQ(MpsLimitsFor(250, (uint64_t{3} << 20) + 5), (MpsLimits{25, 3}));
}

// A client's own variables can only lower the daemon's limits, and they are the job's to
// drop: the daemon holds new clients to the largest share among its clients, raised
// before a larger share starts and lowered when it ends.
TEST_F(MpsTest, TheDaemonHoldsNewClientsToTheLargestShareOfItsClients) {
  MpsDaemons mps(Options());
  const RunId a{1, 0, 1, 0}, b{2, 0, 1, 0}, c{3, 0, 1, 0};
  ASSERT_TRUE(mps.Acquire("GPU-c", a, ::getuid(), ::getgid(), {25, 2048}).ok());
  std::string log = Log("GPU-c");
  EXPECT_NE(log.find("command set_default_active_thread_percentage 25\n"), std::string::npos)
      << log;
  EXPECT_NE(log.find("command set_default_device_pinned_mem_limit 0 2048M\n"), std::string::npos)
      << log;
  ASSERT_TRUE(mps.Acquire("GPU-c", b, ::getuid(), ::getgid(), {50, 4096}).ok());
  log = Log("GPU-c");
  EXPECT_NE(log.find("command set_default_active_thread_percentage 50\n"), std::string::npos)
      << log;
  EXPECT_NE(log.find("command set_default_device_pinned_mem_limit 0 4096M\n"), std::string::npos)
      << log;
  // A smaller share under the ceiling changes nothing.
  ASSERT_TRUE(mps.Acquire("GPU-c", c, ::getuid(), ::getgid(), {10, 1024}).ok());
  EXPECT_EQ(Count(Log("GPU-c"), "command set_"), Count(log, "command set_")) << Log("GPU-c");
  // The largest share ends: new clients are held to the largest left.
  ASSERT_TRUE(mps.Release(b).ok());
  log = Log("GPU-c");
  EXPECT_EQ(Count(log, "command set_default_active_thread_percentage 25\n"), 2u) << log;
  EXPECT_EQ(Count(log, "command set_default_device_pinned_mem_limit 0 2048M\n"), 2u) << log;
  ASSERT_TRUE(mps.Release(a).ok());
  log = Log("GPU-c");
  EXPECT_NE(log.find("command set_default_active_thread_percentage 10\n"), std::string::npos);
  EXPECT_NE(log.find("command set_default_device_pinned_mem_limit 0 1024M\n"), std::string::npos);
  EXPECT_EQ(Count(log, "invalid "), 0u) << log;
}

// The defaults reach only servers started later: a running server (one user's, serving
// that user's clients) gets the ceiling by its pid.
TEST_F(MpsTest, RunningServersAreGivenTheCeilingToo) {
  MpsDaemons mps(Options());
  ASSERT_TRUE(mps.Acquire("GPU-r", {1, 0, 1, 0}, ::getuid(), ::getgid(), kHalf).ok());
  ASSERT_TRUE(WriteFileAtomically(state_ + "/mps/GPU-r/pipe/servers", "4242\n4343\n").ok());
  ASSERT_TRUE(mps.Acquire("GPU-r", {2, 0, 1, 0}, ::getuid(), ::getgid(), {60, 3072}).ok());
  const std::string log = Log("GPU-r");
  for (const char* line : {"command set_default_active_thread_percentage 60\n",
                           "command set_default_device_pinned_mem_limit 0 3072M\n",
                           "command set_active_thread_percentage 4242 60\n",
                           "command set_device_pinned_mem_limit 4242 0 3072M\n",
                           "command set_active_thread_percentage 4343 60\n",
                           "command set_device_pinned_mem_limit 4343 0 3072M\n"}) {
    EXPECT_NE(log.find(line), std::string::npos) << line << " not in\n" << log;
  }
  EXPECT_EQ(Count(log, "invalid "), 0u) << log;
}

// A share whose memory size is not known caps no memory: the memory ceiling is left alone.
TEST_F(MpsTest, AShareOfUnknownMemorySetsOnlyTheThreadCeiling) {
  MpsDaemons mps(Options());
  ASSERT_TRUE(mps.Acquire("GPU-m", {1, 0, 1, 0}, ::getuid(), ::getgid(), {30, 0}).ok());
  const std::string log = Log("GPU-m");
  EXPECT_NE(log.find("command set_default_active_thread_percentage 30\n"), std::string::npos);
  EXPECT_EQ(log.find("pinned_mem_limit"), std::string::npos) << log;
}

// A daemon that refuses the limits does not get the client: the share fails with why,
// rather than run held only by variables it may drop, and the idle daemon is quit.
TEST_F(MpsTest, ADaemonThatRefusesTheCeilingFailsTheShare) {
  MpsDaemons mps(Options({"FAKE_MPS_REFUSE_LIMITS=1"}));
  Result<std::string> pipe = mps.Acquire("GPU-n", {1, 0, 1, 0}, ::getuid(), ::getgid(), kHalf);
  ASSERT_FALSE(pipe.ok());
  EXPECT_EQ(pipe.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(pipe.status().message().find("did not take the share's limits"), std::string::npos)
      << pipe.status().message();
  EXPECT_TRUE(mps.Clients().empty());
  EXPECT_FALSE(fs::exists(state_ + "/mps/GPU-n"));
}

TEST_F(MpsTest, AConfiguredControlMustBeAnExecutable) {
  EXPECT_EQ(FindMpsControl(kStandIn), kStandIn);
  const std::string plain = state_ + "/nvidia-cuda-mps-control";
  ASSERT_TRUE(WriteFileAtomically(plain, "#!/bin/sh\n").ok());
  ::chmod(plain.c_str(), 0644);
  EXPECT_EQ(FindMpsControl(plain), "");
  EXPECT_EQ(FindMpsControl(state_), "");
  EXPECT_EQ(FindMpsControl("/no/such/nvidia-cuda-mps-control"), "");
}

}  // namespace
}  // namespace gpupool::agent
