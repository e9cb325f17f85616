#include "agent/output_file.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpupool::agent {
namespace {

// `call` (returning a descriptor or -errno), with the user's file-system ids and groups
// when the shim is root.
template <typename Call>
int WithIds(const OutputUser& who, Call call) {
  const bool as_user = ::geteuid() == 0 && who.uid != 0;
  if (!as_user) return call();
  const int saved_n = ::getgroups(0, nullptr);
  std::vector<gid_t> saved(static_cast<size_t>(saved_n > 0 ? saved_n : 0));
  if (saved_n > 0 && ::getgroups(saved_n, saved.data()) < 0) return -errno;
  if (::setgroups(who.groups.size(), who.groups.data()) != 0) return -errno;
  ::setfsgid(who.gid);
  ::setfsuid(who.uid);
  int fd = -EPERM;
  // setfsuid reports no error: the ids are checked by asking again.
  if (static_cast<uid_t>(::setfsuid(who.uid)) == who.uid &&
      static_cast<gid_t>(::setfsgid(who.gid)) == who.gid) {
    fd = call();
  }
  ::setfsuid(0);
  ::setfsgid(0);
  (void)::setgroups(saved.size(), saved.data());
  return fd;
}

// The open itself: the descriptor or -errno.
int OpenWithIds(const std::string& path, const OutputUser& who) {
  constexpr int kFlags =
      O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  return WithIds(who, [&] {
    const int fd = ::open(path.c_str(), kFlags, 0644);
    return fd >= 0 ? fd : -errno;
  });
}

// Why an open that failed with `err` failed, where what is at `path` says it better than
// the error (the kernel's protected_symlinks/fifos/regular answer EACCES for a link, FIFO
// or file another user planted in a sticky directory such as /tmp).
std::string WhyNotOpened(const std::string& path, const OutputUser& who, int err) {
  struct stat st {};
  const bool seen = WithIds(who, [&] { return ::lstat(path.c_str(), &st) == 0 ? 0 : -errno; }) == 0;
  const std::string owner =
      seen && st.st_uid != who.uid ? ", owned by uid " + std::to_string(st.st_uid) : "";
  if (seen && S_ISLNK(st.st_mode)) {
    return "it is a symbolic link" + owner + ", which gpupool does not follow";
  }
  if (seen && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
    return "it is a FIFO or socket" + owner;
  if (seen && !S_ISREG(st.st_mode)) return "it is not a regular file" + owner;
  if (seen && err == EACCES && !owner.empty()) {
    return "it exists" + owner + " (" + std::strerror(err) + ")";
  }
  if (err == ELOOP) return "it is a symbolic link, which gpupool does not follow";
  if (err == ENXIO) return "it is a FIFO or socket";
  return std::strerror(err);
}

}  // namespace

Result<int> OpenOutputFile(const std::string& path, const OutputUser& who, bool keep) {
  const std::string as = "user '" + who.user + "' (uid " + std::to_string(who.uid) + ")";
  if (path.empty() || path[0] != '/') {
    return Status::FailedPrecondition("output file '" + path + "' is not an absolute path");
  }
  if (path == "/dev/null") {
    const int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      return Status::Unavailable("cannot open /dev/null: " + std::string(std::strerror(errno)));
    return fd;
  }
  const int fd = OpenWithIds(path, who);
  if (fd < 0) {
    const std::string why = WhyNotOpened(path, who, -fd);
    const bool planted = why.rfind("it is", 0) == 0 || why.rfind("it exists", 0) == 0;
    return Status::FailedPrecondition(
        "cannot create the output file '" + path + "' as " + as + ": " + why +
        (planted ? "; remove it or choose another -o/-e"
                 : "; check -o/-e and that the user may write the directory"));
  }
  struct stat st {};
  std::string refuse;
  // NOLINTNEXTLINE(bugprone-branch-clone): fstat and ftruncate/fcntl (below) both say errno
  if (::fstat(fd, &st) != 0) {
    refuse = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    refuse = "it is not a regular file";
  } else if (st.st_uid != who.uid) {
    refuse = "it belongs to uid " + std::to_string(st.st_uid) + ", not to the job's user";
  } else if (st.st_nlink > 1) {
    refuse = "it has " + std::to_string(st.st_nlink) + " hard links";
  } else if ((!keep && ::ftruncate(fd, 0) != 0) || ::fcntl(fd, F_SETFL, O_WRONLY | O_APPEND) != 0) {
    refuse = std::strerror(errno);
  }
  if (!refuse.empty()) {
    ::close(fd);
    return Status::FailedPrecondition("refusing the output file '" + path + "' for " + as + ": " +
                                      refuse + "; remove it or choose another -o/-e");
  }
  return fd;
}

}  // namespace gpupool::agent
