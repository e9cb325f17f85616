#include "agent/job_mounts.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace gpupool::agent {
namespace {

// Runs `body` in a child process (it may change its mount namespace or its user) and
// returns what it wrote to the descriptor it is given.
template <typename F>
std::string InChild(F body) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const std::string out = body();
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

ino_t MountNamespace() {
  struct stat st;
  return ::stat("/proc/self/ns/mnt", &st) == 0 ? st.st_ino : 0;
}

std::string Drop(std::string s) { return s; }

TEST(DevShmMountOptionsTest, ModeAlwaysSizeOnlyForAMemoryLimit) {
  EXPECT_EQ(DevShmMountOptions(0), "mode=1777");
  EXPECT_EQ(DevShmMountOptions(64ull << 20), "mode=1777,size=67108864");
}

// The failure path: a caller that may not make mount namespaces (not root) is told why,
// and stays where it was.
TEST(PrivateDevShmTest, WithoutRootItIsRefusedAndSaidAndNothingChanges) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  char tmpl[] = "/tmp/gp-devshm-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  ::chmod(tmpl, 0777);
  const std::string dir = tmpl;
  const std::string out = InChild([&] {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return Drop("setuid failed");
    const ino_t before = MountNamespace();
    Result<std::unique_ptr<MountNamespaceSwitch>> r = EnterPrivateDevShm(dir, 1 << 20);
    if (r.ok()) return Drop("entered");
    if (MountNamespace() != before) return Drop("moved");
    return r.status().message() + "|" + ProbePrivateDevShm().message();
  });
  EXPECT_EQ(out,
            "cannot make a mount namespace: Operation not permitted (needs root with "
            "CAP_SYS_ADMIN)|the agent does not run as root");
  std::filesystem::remove_all(dir);
}

// A fresh tmpfs: 1777, bounded by its size, seen only inside, gone with the namespace;
// Return() brings the caller back to the host's namespace and working directory.
TEST(PrivateDevShmTest, ATmpfsOfItsOwnBoundedAndUnseenOutside) {
  if (Status st = ProbePrivateDevShm(); !st.ok()) GTEST_SKIP() << st.message();
  char tmpl[] = "/tmp/gp-devshm-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string out = InChild([&]() -> std::string {
    const ino_t host = MountNamespace();
    char cwd_before[4096];
    if (::getcwd(cwd_before, sizeof cwd_before) == nullptr) return "getcwd";
    Result<std::unique_ptr<MountNamespaceSwitch>> r = EnterPrivateDevShm(dir, 1 << 20);
    if (!r.ok()) return r.status().message();
    if (MountNamespace() == host) return "not moved";
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || (st.st_mode & 07777) != 01777) return "mode";
    const int fd = ::open((dir + "/x").c_str(), O_WRONLY | O_CREAT, 0600);
    static char block[64 << 10];
    size_t written = 0;
    while (written < (4u << 20)) {
      const ssize_t n = ::write(fd, block, sizeof block);
      if (n <= 0) break;
      written += static_cast<size_t>(n);
    }
    const int err = errno;
    ::close(fd);
    if (written > (1u << 20) || err != ENOSPC) return "wrote " + std::to_string(written);
    if (Status back = (*r)->Return(); !back.ok()) return back.message();
    char cwd_after[4096];
    if (::getcwd(cwd_after, sizeof cwd_after) == nullptr) return "getcwd after";
    if (MountNamespace() != host) return "not back";
    if (std::string(cwd_before) != cwd_after) return "cwd " + std::string(cwd_after);
    return ::access((dir + "/x").c_str(), F_OK) == 0 ? "seen outside" : "ok";
  });
  EXPECT_EQ(out, "ok");
  EXPECT_NE(::access((dir + "/x").c_str(), F_OK), 0);
  std::filesystem::remove_all(dir);
}

TEST(PrivateDevShmTest, AnEndedProcesssNamespaceIsNotEntered) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  Result<std::unique_ptr<MountNamespaceSwitch>> r = EnterMountNamespaceOf(pid, 1);
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(SameMountNamespace(pid));
  // A live process whose start does not match (a reused pid): refused too.
  r = EnterMountNamespaceOf(::getpid(), 1);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has ended"), std::string::npos) << r.status().message();
  EXPECT_TRUE(SameMountNamespace(::getpid()));
}

}  // namespace
}  // namespace gpupool::agent
