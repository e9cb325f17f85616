#include "common/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool {

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // the lock goes with the descriptor
}

FileLock::FileLock(FileLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

Result<FileLock> FileLock::TryLock(const std::string& path) {
  // Held read-only (flock needs no write access): a descriptor open for writing would keep
  // the file system from being remounted read-only, as the disk watch's tests do and an
  // operator may; the pid is written through a descriptor of its own, closed at once.
  // O_NONBLOCK: a FIFO (or a device) put in the lock file's place would otherwise block
  // the open, and so the daemon's start, for ever; it is refused below.
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  if (fd < 0) {
    return Status::Unavailable("cannot open the lock file '" + path + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Unavailable("the lock file '" + path +
                               "' is not a regular file: remove it (the daemon creates it)");
  }
  int rc;
  while ((rc = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    if (err != EWOULDBLOCK) {
      return Status::Unavailable("cannot lock '" + path + "': " + std::strerror(err));
    }
    const int64_t pid = LockFileHolder(path);
    return Status::FailedPrecondition(pid > 0 ? "pid " + std::to_string(pid) : "another process");
  }
  // The holder's pid, for the message of whoever comes second; the lock is what counts.
  const std::string pid = std::to_string(::getpid()) + "\n";
  const int out = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (out >= 0) {
    // Not fatal if it fails: the lock is held, only a second daemon's message is vaguer.
    (void)!::write(out, pid.data(), pid.size());
    ::close(out);
  }
  return FileLock(fd, path);
}

int64_t LockFileHolder(const std::string& path) {
  Result<std::string> text = ReadFileToString(path, 64);
  if (!text.ok()) return 0;
  const std::string t(Trim(*text));
  if (t.empty() || t.size() > 18 || t.find_first_not_of("0123456789") != std::string::npos) {
    return 0;
  }
  return std::stoll(t);
}

}  // namespace gpupool
