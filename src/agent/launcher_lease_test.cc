// The node lease through the real launcher and shim (node_lease.h, docs/health.md "A node
// cut off from the controller"): a task whose spec names the lease file is killed once the
// lease there has run out unrenewed, and only then; the test plays the agent, writing the
// file on the boot clock.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <chrono>
#include <csignal>

#include "agent/job_files.h"
#include "agent/launcher_test_fixture.h"
#include "agent/node_lease.h"

namespace gpupool::agent {
namespace {

using testing::LauncherTest;
using testing::ReadWholeFile;
using testing::TaskRun;
using testing::TestSpec;
using testing::WaitForEvent;

constexpr int64_t kSecond = 1'000'000;

// Tells when a process opens a file of a directory (inotify's IN_OPEN): the shim's read of
// the lease, which nothing else announces.
class OpenWatch {
 public:
  explicit OpenWatch(const std::string& dir)
      : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)),
        watch_(fd_ < 0 ? -1 : ::inotify_add_watch(fd_, dir.c_str(), IN_OPEN)) {}
  ~OpenWatch() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return watch_ >= 0; }
  // Waits until `name` in the directory is opened (after this watch was set).
  bool WaitForOpen(const std::string& name, int timeout_ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < until) {
      alignas(inotify_event) char buf[4096];
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      for (ssize_t at = 0; at < n;) {
        const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
        if (ev->len > 0 && name == ev->name) return true;
        at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      }
      if (n > 0) continue;
      struct pollfd p = {fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    }
    return false;
  }

 private:
  int fd_;
  int watch_;
};

class LauncherLeaseTest : public LauncherTest {
 protected:
  std::string LeaseFile() const { return dir_.path() + "/" + kNodeLeaseFile; }
  // A lease running out `in_us` from now (negative: already run out), written now.
  void WriteLease(int64_t in_us) {
    const int64_t now = BootMicros();
    ASSERT_TRUE(WriteNodeLease(LeaseFile(), {now + in_us, now}).ok());
  }
  LaunchSpec LeasedSpec(int64_t id, std::vector<std::string> argv) {
    LaunchSpec spec = TestSpec(id, std::move(argv));
    spec.lease_file = LeaseFile();
    spec.grace_s = 100;              // a fence does not wait for the grace
    spec.node_name = "pool-node-7";  // not the host's name: the pool's, as the agent says
    return spec;
  }
  static void ExpectFenced(const JobEvent& e) {
    EXPECT_EQ(e.kind, JobEvent::Kind::kExited);
    EXPECT_EQ(e.signal, SIGKILL);
    EXPECT_FALSE(e.cancelled);
    EXPECT_FALSE(e.timed_out);
    EXPECT_EQ(e.kill_cause, protocol::KillCause::kNodeLease);
    EXPECT_EQ(e.kill_detail.rfind("node lease ran out: node pool-node-7 has not reached", 0), 0u)
        << e.kill_detail;
    EXPECT_NE(e.kill_detail.find("may be started again elsewhere; stopped here"), std::string::npos)
        << e.kill_detail;
    EXPECT_LT(e.kill_detail.size(), 200u) << e.kill_detail;
    EXPECT_EQ(e.reason, e.kill_detail + " (ended by SIGKILL)");
  }
};

// The agent has not reached the controller since before the job started: killed at once.
TEST_F(LauncherLeaseTest, AJobWhoseLeaseHasRunOutIsKilledAtOnce) {
  WriteLease(-kSecond);
  const auto t0 = std::chrono::steady_clock::now();
  Start(LeasedSpec(401, {"sh", "-c", "trap '' TERM; exec sleep 30"}));
  JobEvent e = Finish(401, 10'000);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ExpectFenced(e);
  EXPECT_NE(ReadWholeFile(JobFile(401, kShimLogFile)).find("node lease ran out"),
            std::string::npos);
}

// The agent renews the lease before each deadline, and before each warning: the job
// outlives several of them and ends by itself, never told to stop.
TEST_F(LauncherLeaseTest, ALeaseRenewedInTimeLetsTheJobRunToItsEnd) {
  WriteLease(2 * kSecond);
  LaunchSpec spec = LeasedSpec(402, {"sh", "-c", "trap 'exit 3' TERM; sleep 2.5 & wait"});
  spec.lease_grace_s = 1;
  Start(spec);
  std::optional<JobEvent> e;
  const auto t0 = std::chrono::steady_clock::now();
  // Renewed every 0.3 s, as an agent's polls renew it; the wait for the end paces it.
  while (!e && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    WriteLease(2 * kSecond);
    e = WaitForEvent(*launcher_, 402, 300);
  }
  ASSERT_TRUE(e.has_value());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(e->kind, JobEvent::Kind::kExited);
  EXPECT_EQ(e->exit_code, 0) << e->reason;
  EXPECT_EQ(e->kill_cause, protocol::KillCause::kNone);
}

// A renewal written only after the old lease had run out (an agent back from a partition
// after the controller declared the node lost) does not save the job: the controller may
// already have started it elsewhere.
TEST_F(LauncherLeaseTest, ARenewalWrittenAfterTheLeaseRanOutDoesNotSaveTheJob) {
  const int64_t now = BootMicros();
  const int64_t deadline = now + kSecond;
  ASSERT_TRUE(WriteNodeLease(LeaseFile(), {deadline, now}).ok());
  OpenWatch watch(dir_.path());
  ASSERT_TRUE(watch.ok());
  Start(LeasedSpec(403, {"sh", "-c", "trap '' TERM; exec sleep 30"}));
  ASSERT_TRUE(watch.WaitForOpen(kNodeLeaseFile, 5000)) << "the shim never read its lease";
  // The file the shim finds at the deadline: a long lease, written after the old one ran
  // out (as the boot clock says; the test writes it early so that the shim finds it).
  ASSERT_TRUE(WriteNodeLease(LeaseFile(), {now + 60 * kSecond, deadline + 1}).ok());
  const auto t0 = std::chrono::steady_clock::now();
  JobEvent e = Finish(403, 10'000);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ExpectFenced(e);
}

// With a grace, the job is told (SIGTERM, a preemptible job's deadline file first) that
// long before the lease runs out: it can checkpoint and end by itself, and its end is the
// lease's (kill cause node_lease) whatever its exit status.
TEST_F(LauncherLeaseTest, TheJobIsToldItsGraceBeforeTheLeaseRunsOut) {
  const int64_t now = BootMicros();
  ASSERT_TRUE(WriteNodeLease(LeaseFile(), {now + 3 * kSecond, now}).ok());
  const std::string told_file = dir_.path() + "/told";
  LaunchSpec spec = LeasedSpec(407, {"sh", "-c",
                                     "trap 'cat \"$GPUPOOL_PREEMPT_DEADLINE_FILE\" > " + told_file +
                                         "; exit 0' TERM; "
                                         "sleep 30 & wait"});
  spec.preemptible = true;
  spec.lease_grace_s = 2;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t wall0 = static_cast<int64_t>(::time(nullptr));
  Start(spec);
  JobEvent e = Finish(407, 10'000);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(900));   // told at D - 2 s, not before
  EXPECT_LT(took, std::chrono::milliseconds(2900));  // and not killed at D
  EXPECT_EQ(e.kind, JobEvent::Kind::kExited);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
  EXPECT_FALSE(e.cancelled);
  EXPECT_EQ(e.kill_cause, protocol::KillCause::kNodeLease);
  EXPECT_EQ(e.kill_detail.rfind("node lease running out in 2 s: node pool-node-7 has", 0), 0u)
      << e.kill_detail;
  EXPECT_NE(e.kill_detail.find("may be started again elsewhere; stopped here"), std::string::npos)
      << e.kill_detail;
  // The deadline the job read on the signal: when its grace ends, in epoch seconds.
  const std::string told = ReadWholeFile(told_file);
  ASSERT_FALSE(told.empty());
  const int64_t deadline = std::stoll(told);
  EXPECT_GE(deadline, wall0 + 2);
  EXPECT_LE(deadline, wall0 + 5);
}

// A job that ignores the warning is killed when the lease runs out, not before.
TEST_F(LauncherLeaseTest, AJobThatIgnoresTheWarningIsKilledWhenTheLeaseRunsOut) {
  const int64_t now = BootMicros();
  ASSERT_TRUE(WriteNodeLease(LeaseFile(), {now + 3 * kSecond, now}).ok());
  LaunchSpec spec = LeasedSpec(408, {"sh", "-c", "trap '' TERM; exec sleep 30"});
  spec.lease_grace_s = 2;
  const auto t0 = std::chrono::steady_clock::now();
  Start(spec);
  JobEvent e = Finish(408, 10'000);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(2900));
  EXPECT_LT(took, std::chrono::seconds(6));
  EXPECT_EQ(e.signal, SIGKILL);
  EXPECT_EQ(e.kill_cause, protocol::KillCause::kNodeLease);
  EXPECT_EQ(e.kill_detail.rfind("node lease running out in 2 s: node pool-node-7 has", 0), 0u)
      << e.kill_detail;
  const std::string log = ReadWholeFile(JobFile(408, kShimLogFile));
  EXPECT_NE(log.find("node stop: SIGTERM to process group"), std::string::npos) << log;
}

// No lease file (an agent that has none, or lost it): nothing is fenced, and the shim
// says so once.
TEST_F(LauncherLeaseTest, WithoutALeaseFileTheJobRunsToItsEndAndTheShimSaysSo) {
  Start(LeasedSpec(404, {"sleep", "1"}));
  JobEvent e = Finish(404, 10'000);
  EXPECT_EQ(e.kind, JobEvent::Kind::kExited);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
  EXPECT_EQ(e.kill_cause, protocol::KillCause::kNone);
  const std::string log = ReadWholeFile(JobFile(404, kShimLogFile));
  EXPECT_NE(log.find("no node lease at '" + LeaseFile() + "'"), std::string::npos) << log;
  EXPECT_NE(log.find("not fenced"), std::string::npos) << log;
}

// A lease that could not be read at first is read again at the next check, at most 5 s
// later however long the job's other timers are: the job is fenced once it finds one that
// has run out.
TEST_F(LauncherLeaseTest, ALeaseThatAppearsLaterIsReadAtTheNextCheck) {
  Start(LeasedSpec(406, {"sh", "-c", "trap '' TERM; exec sleep 30"}));
  ASSERT_TRUE(testing::WaitForFileContaining(JobFile(406, kShimLogFile), "not fenced", 5000));
  WriteLease(-kSecond);
  const auto t0 = std::chrono::steady_clock::now();
  JobEvent e = Finish(406, 15'000);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(7));
  ExpectFenced(e);
}

// A task whose spec names no lease file (a job the controller does not requeue, an exec
// session) is never fenced, however stale the node's lease.
TEST_F(LauncherLeaseTest, AJobWithoutTheLeaseFileIsNeverFenced) {
  WriteLease(-kSecond);
  LaunchSpec spec = LeasedSpec(405, {"sleep", "1"});
  spec.lease_file.clear();
  Start(spec);
  JobEvent e = Finish(405, 10'000);
  EXPECT_EQ(e.kind, JobEvent::Kind::kExited);
  EXPECT_EQ(e.exit_code, 0) << e.reason;
  EXPECT_EQ(e.kill_cause, protocol::KillCause::kNone);
}

}  // namespace
}  // namespace gpupool::agent
