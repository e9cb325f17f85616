#include "agent/node_lease.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
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

std::string FormatNodeLease(const NodeLease& lease) {
  return std::to_string(lease.deadline_us) + " " + std::to_string(lease.written_us) + "\n";
}

std::optional<NodeLease> ParseNodeLease(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  const size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::optional<int64_t> deadline = ParseCount(text.substr(0, space));
  const std::optional<int64_t> written = ParseCount(text.substr(space + 1));
  if (!deadline || !written) return std::nullopt;
  return NodeLease{*deadline, *written};
}

Status WriteNodeLease(const std::string& path, const NodeLease& lease) {
  return WriteFileDurably(path, FormatNodeLease(lease), 0600, /*sync=*/false);
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

LeaseVerdict JudgeLease(const NodeLease& held, int64_t now_us,
                        const std::optional<NodeLease>& read) {
  if (now_us < held.deadline_us) return LeaseVerdict::kHolds;
  if (!read) return LeaseVerdict::kUnknown;
  // Renewed before the held lease ran out, and running past now. A renewal written after
  // it had run out comes too late: the controller may have requeued the job meanwhile.
  if (read->deadline_us > now_us && read->written_us <= held.deadline_us) {
    return LeaseVerdict::kRenewed;
  }
  return LeaseVerdict::kFence;
}

}  // namespace gpupool::agent
