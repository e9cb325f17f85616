#include "agent/job_mounts.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/proc_util.h"

namespace gpupool::agent {
namespace {

std::string Errno(int err) { return std::strerror(err); }

// Why a step failed, with what an admin can do about it.
std::string Why(const char* what, int err) {
  std::string s = std::string(what) + ": " + Errno(err);
  if (err == EPERM) s += " (needs root with CAP_SYS_ADMIN)";
  return s;
}

}  // namespace

std::string DevShmMountOptions(uint64_t memory_bytes) {
  std::string opts = "mode=1777";
  if (memory_bytes > 0) opts += ",size=" + std::to_string(memory_bytes);
  return opts;
}

MountNamespaceSwitch::~MountNamespaceSwitch() { (void)Return(); }

Status MountNamespaceSwitch::Return() {
  if (home_fd_ < 0) return Status::Ok();
  const int rc = ::setns(home_fd_, CLONE_NEWNS);
  const int err = errno;
  ::close(home_fd_);
  home_fd_ = -1;
  if (cwd_fd_ >= 0) {
    (void)!::fchdir(cwd_fd_);
    ::close(cwd_fd_);
    cwd_fd_ = -1;
  }
  if (rc != 0) {
    return Status::Internal("cannot go back to the host's mount namespace: " + Errno(err));
  }
  return Status::Ok();
}

Result<std::unique_ptr<MountNamespaceSwitch>> EnterPrivateDevShm(const std::string& dir,
                                                                 uint64_t memory_bytes) {
  const std::string opts = DevShmMountOptions(memory_bytes);
  const int home = ::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (home < 0) {
    return Status::Unavailable(Why("cannot open /proc/self/ns/mnt", errno));
  }
  if (::unshare(CLONE_NEWNS) != 0) {
    const int err = errno;
    ::close(home);
    return Status::Unavailable(Why("cannot make a mount namespace", err));
  }
  auto back = std::make_unique<MountNamespaceSwitch>(home, ::open(".", O_RDONLY | O_CLOEXEC));
  // Nothing the job mounts, and not its /dev/shm, reaches the host; the host's later
  // mounts (a new file system) still reach the job.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
    const int err = errno;
    (void)back->Return();
    return Status::Unavailable(Why("cannot make the job's mounts a slave of the host's", err));
  }
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
    const int err = errno;
    (void)back->Return();
    return Status::Unavailable(Why(("cannot mount a tmpfs on " + dir).c_str(), err));
  }
  return back;
}

Result<std::unique_ptr<MountNamespaceSwitch>> EnterMountNamespaceOf(pid_t pid,
                                                                    uint64_t start_ticks) {
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/mnt";
  const int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) return Status::NotFound(Why(("cannot open " + path).c_str(), errno));
  // Checked after the open: the descriptor holds the namespace of the process checked.
  Result<uint64_t> ticks = ProcessStartTicks(pid);
  if (!ticks.ok() || *ticks != start_ticks) {
    ::close(ns);
    return Status::NotFound("process " + std::to_string(pid) + " has ended");
  }
  const int home = ::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (home < 0) {
    const int err = errno;
    ::close(ns);
    return Status::Unavailable(Why("cannot open /proc/self/ns/mnt", err));
  }
  const int cwd = ::open(".", O_RDONLY | O_CLOEXEC);
  const int rc = ::setns(ns, CLONE_NEWNS);
  const int err = errno;
  ::close(ns);
  if (rc != 0) {
    ::close(home);
    if (cwd >= 0) ::close(cwd);
    return Status::Unavailable(Why(("cannot enter the mount namespace of " + path).c_str(), err));
  }
  return std::make_unique<MountNamespaceSwitch>(home, cwd);
}

bool SameMountNamespace(pid_t pid) {
  struct stat mine;
  struct stat theirs;
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/mnt";
  if (::stat("/proc/self/ns/mnt", &mine) != 0 || ::stat(path.c_str(), &theirs) != 0) {
    return false;
  }
  return mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
}

Status ProbePrivateDevShm() {
  if (::geteuid() != 0) return Status::PermissionDenied("the agent does not run as root");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::Unavailable(Why("cannot create a pipe", errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::Unavailable(Why("cannot fork", err));
  }
  if (pid == 0) {  // system calls only: the agent has threads
    int failed[2] = {0, 0};
    if (::unshare(CLONE_NEWNS) != 0) {
      failed[0] = 1;
    } else if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
      failed[0] = 2;
    } else if (::mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=1m") !=
               0) {
      failed[0] = 3;
    }
    failed[1] = errno;
    if (failed[0] != 0) (void)!::write(fds[1], failed, sizeof failed);
    ::_exit(0);
  }
  ::close(fds[1]);
  int failed[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(fds[0], failed, sizeof failed);
  } while (n < 0 && errno == EINTR);
  ::close(fds[0]);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof failed)) return Status::Ok();
  static const char* const kSteps[] = {"", "cannot make a mount namespace",
                                       "cannot make a mount namespace a slave of the host's",
                                       "cannot mount a tmpfs on /dev/shm"};
  return Status::Unavailable(Why(kSteps[failed[0] & 3], failed[1]));
}

}  // namespace gpupool::agent
