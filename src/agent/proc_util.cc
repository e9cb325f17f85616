#include "agent/proc_util.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::agent {

Result<uint64_t> ProcessStartTicks(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  Result<std::string> text = ReadFileToString(path, 1u << 16);
  if (!text.ok()) return Status::NotFound("process " + std::to_string(pid) + " does not exist");
  // The command name (field 2) may contain spaces and parentheses; fields after the
  // last ')' are plain.
  const size_t close = text->rfind(')');
  if (close == std::string::npos) return Status::Internal("cannot parse '" + path + "'");
  std::vector<std::string> fields = Split(Trim(std::string_view(*text).substr(close + 1)), ' ');
  // fields[0] is field 3 (state), so field 22 is fields[19].
  if (fields.size() < 20) return Status::Internal("cannot parse '" + path + "'");
  std::optional<uint64_t> ticks = ParseUint64(fields[19]);
  if (!ticks) return Status::Internal("cannot parse the start time in '" + path + "'");
  return *ticks;
}

std::string BootId() {
  Result<std::string> id = ReadFileToString("/proc/sys/kernel/random/boot_id", 4096);
  return id.ok() ? std::string(Trim(*id)) : std::string();
}

int OpenVerifiedPidFd(pid_t pid, uint64_t start_ticks) {
  if (pid <= 0) return -1;
  long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0 && errno != ENOSYS) return -1;
  // Checked after opening, so the pidfd cannot name a process that reused the pid.
  if (start_ticks != 0) {
    Result<uint64_t> ticks = ProcessStartTicks(pid);
    if (!ticks.ok() || *ticks != start_ticks) {
      if (fd >= 0) ::close(static_cast<int>(fd));
      return -1;
    }
  } else if (fd < 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
    return -1;
  }
  return fd >= 0 ? static_cast<int>(fd) : -2;
}

bool PidFdExited(int pidfd) {
  struct pollfd p = {pidfd, POLLIN, 0};
  int n = ::poll(&p, 1, 0);
  return n > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

bool SignalProcess(int pidfd, pid_t pid, int sig) {
  if (pidfd >= 0) return ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0;
  return ::kill(pid, sig) == 0;
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev != nullptr) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

}  // namespace gpupool::agent
