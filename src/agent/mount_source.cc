#include "agent/mount_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gpupool::agent {
namespace {

// What an open found: a descriptor, or an errno.
struct Walked {
  int fd = -1;
  int err = 0;
};

// Opens `path` with the calling thread's ids, then checks access on what it opened. The
// kernel resolves the path, symbolic links included, with those ids: what the caller may
// not reach it does not open. Whatever the path names later, the descriptor stays the
// object checked.
Walked OpenAsCaller(const std::string& path, bool write) {
  Walked w;
  const int fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) {
    w.err = errno;
    return w;
  }
  struct stat st;
  int mode = R_OK | (write ? W_OK : 0);
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) mode |= X_OK;
  // The descriptor's magic link names exactly the object opened: no path is resolved
  // again. access() checks with the real ids, which are the user's here.
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  if (::access(self.c_str(), mode) != 0) {
    w.err = errno;
    ::close(fd);
    return w;
  }
  w.fd = fd;
  return w;
}

// The child's answer: its errno, and with errno 0 the descriptor.
bool SendWalked(int sock, const Walked& w) {
  std::string msg(sizeof(int), '\0');
  std::memcpy(msg.data(), &w.err, sizeof(int));
  struct iovec iov = {msg.data(), msg.size()};
  struct msghdr mh {};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (w.fd >= 0) {
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &w.fd, sizeof(int));
  }
  return ::sendmsg(sock, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size());
}

// Reads the child's answer; false when there was none (it died before it answered).
bool ReceiveWalked(int sock, Walked* w) {
  char buf[sizeof(int)];
  struct iovec iov = {buf, sizeof buf};
  struct msghdr mh {};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < static_cast<ssize_t>(sizeof(int))) return false;
  std::memcpy(&w->err, buf, sizeof(int));
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      std::memcpy(&w->fd, CMSG_DATA(c), sizeof(int));
    }
  }
  if (w->err == 0 && w->fd < 0) w->err = EIO;
  if (w->err != 0 && w->fd >= 0) {
    ::close(w->fd);
    w->fd = -1;
  }
  return true;
}

// The walk in a child that has become the user; its descriptor comes back over a socket.
Result<Walked> WalkAsUser(const std::string& path, const MountUser& who, bool write) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return Status::Unavailable("cannot make a socket pair: " + std::string(std::strerror(errno)));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    return Status::Unavailable("cannot fork: " + std::string(std::strerror(err)));
  }
  if (pid == 0) {
    ::close(sv[0]);
    if (::setgroups(who.groups.size(), who.groups.data()) != 0 ||
        ::setresgid(who.gid, who.gid, who.gid) != 0 ||
        ::setresuid(who.uid, who.uid, who.uid) != 0) {
      ::_exit(1);
    }
    ::_exit(SendWalked(sv[1], OpenAsCaller(path, write)) ? 0 : 1);
  }
  ::close(sv[1]);
  Walked w;
  const bool answered = ReceiveWalked(sv[0], &w);
  ::close(sv[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!answered) {
    return Status::Unavailable("cannot switch to user '" + who.user + "' (uid " +
                               std::to_string(who.uid) + ") to open '" + path + "'");
  }
  return w;
}

}  // namespace

Result<int> OpenMountSource(const std::string& path, const MountUser& who, bool write) {
  const std::string user = "user '" + who.user + "' (uid " + std::to_string(who.uid) + ")";
  if (path.empty() || path[0] != '/') {
    return Status::FailedPrecondition("'" + path + "' is not an absolute path");
  }
  Walked w;
  if (::geteuid() == 0 && who.uid != 0) {
    GP_ASSIGN_OR_RETURN(w, WalkAsUser(path, who, write));
  } else {
    w = OpenAsCaller(path, write);  // already as the user (or root, who may read anything)
  }
  if (w.err == 0) return w.fd;
  if (w.err == ENOENT || w.err == ENOTDIR) {
    return Status::FailedPrecondition("'" + path + "' does not exist (or is not reachable by " +
                                      user + ")");
  }
  if (w.err == EACCES || w.err == EPERM) {
    return Status::FailedPrecondition(
        "'" + path + "' is not " + (write ? "readable and writable" : "readable") + " by " + user +
        "; the container may only mount what its user can " + (write ? "write" : "read"));
  }
  return Status::FailedPrecondition("cannot open '" + path + "' as " + user + ": " +
                                    std::strerror(w.err));
}

Result<std::string> StagedMounts::Add(int fd) {
  if (next_ == 0) {
    if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::Unavailable("cannot create '" + dir_ + "': " + std::strerror(errno));
    }
    struct stat st;
    if (::lstat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
      return Status::Unavailable("'" + dir_ + "' is not a directory of this process's user");
    }
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return Status::Unavailable("cannot stat a mount source: " + std::string(std::strerror(errno)));
  }
  const std::string target = dir_ + "/" + std::to_string(next_++);
  // The mount point must be of the source's kind: a directory, or a file for the rest.
  if (S_ISDIR(st.st_mode)) {
    if (::mkdir(target.c_str(), 0700) != 0) {
      return Status::Unavailable("cannot create '" + target + "': " + std::strerror(errno));
    }
  } else {
    const int t =
        ::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (t < 0) {
      return Status::Unavailable("cannot create '" + target + "': " + std::strerror(errno));
    }
    ::close(t);
  }
  const std::string source = "/proc/self/fd/" + std::to_string(fd);
  if (::mount(source.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    const int err = errno;
    if (S_ISDIR(st.st_mode)) {
      ::rmdir(target.c_str());
    } else {
      ::unlink(target.c_str());
    }
    return Status::Unavailable("cannot bind-mount a mount source onto '" + target +
                               "': " + std::strerror(err));
  }
  return target;
}

Status StagedMounts::Clear() {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return Status::Ok();
    return Status::Unavailable("cannot list '" + dir_ + "': " + std::strerror(errno));
  }
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  Status result = Status::Ok();
  for (const std::string& name : names) {
    const std::string path = dir_ + "/" + name;
    // Lazily: a container that still holds it keeps its own copy of the mount.
    while (::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) {
    }
    // Only the empty mount point goes; a path still mounted fails with EBUSY.
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;
    const int rc = S_ISDIR(st.st_mode) ? ::rmdir(path.c_str()) : ::unlink(path.c_str());
    if (rc != 0 && errno != ENOENT && result.ok()) {
      result = Status::Unavailable("cannot remove the staged mount '" + path +
                                   "': " + std::strerror(errno));
    }
  }
  if (::rmdir(dir_.c_str()) != 0 && errno != ENOENT && result.ok()) {
    result = Status::Unavailable("cannot remove '" + dir_ + "': " + std::strerror(errno));
  }
  next_ = 0;
  return result;
}

}  // namespace gpupool::agent
