// FileLock: an exclusive flock(2) on a lock file, held for as long as the object lives.
// Daemons take one on their state directory so that a second daemon on the same files
// refuses to start (the socket alone is no guard: it can be removed while its server
// runs). The kernel drops the lock with the process, so a daemon killed with SIGKILL
// leaves nothing to clean up: the next start takes the lock again. The descriptor is
// close-on-exec: jobs and helpers the daemon starts never hold the lock.
//
// Not thread-safe; move-only. Two FileLocks on one file conflict even within one process.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace gpupool {

class FileLock {
 public:
  FileLock() = default;
  ~FileLock();
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  // Takes the lock on `path` (created 0600 when absent) without waiting, and writes this
  // process's pid into the file. Errors: FailedPrecondition when another holds it (the
  // message is the holder: "pid N", or "another process" when the file names none),
  // Unavailable when the file cannot be opened or locked (the errno's words), or is not
  // a regular file (a FIFO put there would otherwise hang the caller).
  static Result<FileLock> TryLock(const std::string& path);

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  FileLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// The pid a lock file names (what its holder wrote), 0 when it names none.
int64_t LockFileHolder(const std::string& path);

}  // namespace gpupool
