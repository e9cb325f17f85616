#include "agent/proc_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

// A /proc/<pid>/stat line: "(comm)" may hold spaces and parentheses.
std::string StatLine(pid_t pid, const std::string& comm, char state, pid_t ppid, pid_t pgid,
                     uint64_t start) {
  std::string line = std::to_string(pid) + " (" + comm + ") " + state + " " + std::to_string(ppid) +
                     " " + std::to_string(pgid);
  for (int field = 6; field <= 21; ++field) line += " 0";
  return line + " " + std::to_string(start) + " 0 0\n";
}

TEST(ProcStatTest, ParsesTheFieldsAfterTheCommandName) {
  std::optional<ProcStat> st = ParseProcStat(7, StatLine(7, "a) b (c", 'S', 3, 5, 1234));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->pid, 7);
  EXPECT_EQ(st->ppid, 3);
  EXPECT_EQ(st->pgid, 5);
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->start_ticks, 1234u);
  EXPECT_FALSE(ParseProcStat(7, "7 (x) S 3").has_value());
  EXPECT_FALSE(ParseProcStat(7, "no parenthesis").has_value());
}

class DescendantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-proc-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  void Add(pid_t pid, pid_t ppid, char state = 'S') {
    fs::create_directories(root_ + "/" + std::to_string(pid));
    std::ofstream(root_ + "/" + std::to_string(pid) + "/stat")
        << StatLine(pid, "sh", state, ppid, pid, 100 + pid);
  }
  std::vector<pid_t> Pids(pid_t of) {
    std::vector<pid_t> out;
    for (const ProcStat& p : Descendants(of, root_)) out.push_back(p.pid);
    return out;
  }
  std::string root_;
};

// Children, grandchildren and orphans reparented to the subreaper; not its parent, not a
// sibling, not zombies; parents come before their children.
TEST_F(DescendantsTest, FollowsEveryGenerationBelowTheRoot) {
  Add(1, 0);
  Add(10, 1);   // the supervisor
  Add(11, 10);  // the job
  Add(12, 11);  // its child
  Add(13, 10);  // an orphan in a session of its own, reparented to the supervisor
  Add(14, 13);  // ... and its child
  Add(15, 10, 'Z');
  Add(20, 1);  // another supervisor's
  Add(21, 20);
  fs::create_directories(root_ + "/self");  // not a pid
  std::vector<pid_t> got = Pids(10);
  EXPECT_EQ(got.size(), 4u);
  for (pid_t p : {11, 12, 13, 14}) {
    EXPECT_NE(std::find(got.begin(), got.end(), p), got.end()) << p;
  }
  const auto at = [&](pid_t p) { return std::find(got.begin(), got.end(), p) - got.begin(); };
  EXPECT_LT(at(11), at(12));
  EXPECT_LT(at(13), at(14));
  EXPECT_EQ(Pids(21), std::vector<pid_t>{});
}

TEST_F(DescendantsTest, AMadeUpLoopEnds) {
  Add(30, 31);
  Add(31, 30);
  std::vector<pid_t> got = Pids(30);
  EXPECT_EQ(got, std::vector<pid_t>{31});
}

// A container job: the supervisor (10) runs podman (11), whose conmon (12) it holds as
// their subreaper; conmon's container (init 13, main 14, what main started 15) is in a
// pid namespace of its own. Those are the container's processes, but for its init with
// skip_init; the supervisor's, podman's and conmon's namespace is not the container's.
TEST_F(DescendantsTest, OtherNamespaceDescendantsAreAContainersProcesses) {
  const auto add = [&](pid_t pid, pid_t ppid, const char* ns, const char* nspid) {
    Add(pid, ppid);
    fs::create_directories(root_ + "/" + std::to_string(pid) + "/ns");
    fs::create_symlink(ns, root_ + "/" + std::to_string(pid) + "/ns/pid");
    std::ofstream(root_ + "/" + std::to_string(pid) + "/status")
        << "Name:\tsh\nNSpid:\t" << nspid << "\nPPid:\t" << ppid << "\n";
  };
  add(10, 1, "pid:[1000]", "10");
  add(11, 10, "pid:[1000]", "11");
  add(12, 10, "pid:[1000]", "12");
  add(13, 12, "pid:[2000]", "13\t1");
  add(14, 13, "pid:[2000]", "14\t2");
  add(15, 14, "pid:[2000]", "15\t3");
  add(20, 1, "pid:[3000]", "20\t1");  // another container's, not below the supervisor
  const auto pids = [&](bool skip_init) {
    std::vector<pid_t> out;
    for (const ProcStat& p : OtherNamespaceDescendants(10, skip_init, root_)) out.push_back(p.pid);
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(pids(true), (std::vector<pid_t>{14, 15}));
  EXPECT_EQ(pids(false), (std::vector<pid_t>{13, 14, 15}));
}

// The real table: a grandchild in a session of its own is found and signalled; the
// process group that is skipped is not.
TEST(SignalDescendantsTest, ReachesAGrandchildInASessionOfItsOwn) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setpgid(0, 0);
    if (::fork() == 0) {
      ::setsid();
      (void)::write(ready[1], "x", 1);
      ::pause();
      ::_exit(0);
    }
    ::pause();
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ::close(ready[1]);
  EXPECT_EQ(SignalDescendants(0, 0), 2);
  EXPECT_EQ(SignalDescendants(0, child), 1);  // the grandchild left the child's group
  EXPECT_EQ(SignalDescendants(SIGKILL, child), 1);
  // The grandchild ends; its parent does not reap it, and a zombie is not counted.
  for (int i = 0; i < 200 && SignalDescendants(0, child) != 0; ++i) ::usleep(10'000);
  EXPECT_EQ(SignalDescendants(0, child), 0);
  ::kill(child, SIGKILL);
  int status;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
}

}  // namespace
}  // namespace gpupool::agent
