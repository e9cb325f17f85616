#include "agent/node_lease.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "agent/job_files.h"

namespace gpupool::agent {
namespace {

// A non-negative decimal integer of at most 18 digits (no sign, no overflow).
std::optional<int64_t> ParseCount(std::string_view s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

int64_t BootMicros() {
  struct timespec ts;
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

namespace {

// The line's check value: a read that mixes two writes (the in-place rewrite below is not
// atomic for a concurrent reader) fails it, and is read as no lease for that check.
int64_t Check(const NodeLease& lease) {
  return static_cast<int64_t>(
      (static_cast<uint64_t>(lease.deadline_us) * 31 + static_cast<uint64_t>(lease.written_us)) %
      1'000'000'007);
}

}  // namespace

std::string FormatNodeLease(const NodeLease& lease) {
  // One width for every lease, so that a renewal can overwrite the file in place.
  char line[64];
  std::snprintf(line, sizeof line, "%017lld %017lld %010lld\n",
                static_cast<long long>(lease.deadline_us), static_cast<long long>(lease.written_us),
                static_cast<long long>(Check(lease)));
  return line;
}

std::optional<NodeLease> ParseNodeLease(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  const size_t first = text.find(' ');
  if (first == std::string_view::npos) return std::nullopt;
  const size_t second = text.find(' ', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  const std::optional<int64_t> deadline = ParseCount(text.substr(0, first));
  const std::optional<int64_t> written = ParseCount(text.substr(first + 1, second - first - 1));
  const std::optional<int64_t> check = ParseCount(text.substr(second + 1));
  if (!deadline || !written || !check) return std::nullopt;
  const NodeLease lease{*deadline, *written};
  if (*check != Check(lease)) return std::nullopt;
  return lease;
}

Status WriteNodeLease(const std::string& path, const NodeLease& lease) {
  const std::string line = FormatNodeLease(lease);
  Status whole = WriteFileDurably(path, line, 0600, /*sync=*/false);
  if (whole.ok()) return whole;
  // A new file cannot be made (a full disk, ENOSPC or EDQUOT): overwrite the one there in
  // place, which needs no new inode or block, lest a full disk stop the node's jobs.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return whole;
  struct stat st {};
  const bool same =
      ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == static_cast<off_t>(line.size());
  const ssize_t n = same ? ::pwrite(fd, line.data(), line.size(), 0) : -1;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) return whole;
  return Status::Ok();
}

Result<NodeLease> ReadNodeLease(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("no node lease at '" + path + "'");
    return Status::Unavailable("cannot open the node lease '" + path +
                               "': " + std::strerror(errno));
  }
  char buf[64];
  size_t len = 0;
  while (len < sizeof buf) {
    const ssize_t n = ::read(fd, buf + len, sizeof buf - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status::Unavailable("cannot read the node lease '" + path +
                                 "': " + std::strerror(err));
    }
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  ::close(fd);
  std::optional<NodeLease> lease = ParseNodeLease(std::string_view(buf, len));
  if (!lease) {
    return Status::InvalidArgument("the node lease '" + path +
                                   "' is not one line \"DEADLINE WRITTEN\" of boot-clock "
                                   "microseconds; the agent rewrites it at its next poll");
  }
  return *lease;
}

LeaseVerdict JudgeLease(const NodeLease& held, int64_t now_us, const std::optional<NodeLease>& read,
                        int64_t warn_us) {
  if (now_us < held.deadline_us - std::max<int64_t>(warn_us, 0)) return LeaseVerdict::kHolds;
  if (!read) return LeaseVerdict::kUnknown;
  if (now_us < held.deadline_us) {
    // The warning's stage: any lease that runs out later was renewed since.
    return read->deadline_us > held.deadline_us ? LeaseVerdict::kRenewed : LeaseVerdict::kWarn;
  }
  // Renewed before the held lease ran out, and running past now. A renewal written after
  // it had run out comes too late: the controller may have requeued the job meanwhile.
  if (read->deadline_us > now_us && read->written_us <= held.deadline_us) {
    return LeaseVerdict::kRenewed;
  }
  return LeaseVerdict::kFence;
}

}  // namespace gpupool::agent
