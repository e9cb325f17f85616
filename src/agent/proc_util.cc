#include "agent/proc_util.h"

#include <dirent.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <set>

#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::agent {

Result<uint64_t> ProcessStartTicks(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  Result<std::string> text = ReadFileToString(path, 1u << 16);
  if (!text.ok()) return Status::NotFound("process " + std::to_string(pid) + " does not exist");
  std::optional<ProcStat> st = ParseProcStat(pid, *text);
  if (!st) return Status::Internal("cannot parse '" + path + "'");
  return st->start_ticks;
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

std::optional<ProcStat> ParseProcStat(pid_t pid, std::string_view text) {
  // The command name (field 2) may contain spaces and parentheses; fields after the last
  // ')' are plain: state (3), ppid (4), pgrp (5), ..., starttime (22).
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::vector<std::string> fields = Split(Trim(text.substr(close + 1)), ' ');
  if (fields.size() < 20 || fields[0].size() != 1) return std::nullopt;
  std::optional<uint64_t> ppid = ParseUint64(fields[1]);
  std::optional<uint64_t> pgid = ParseUint64(fields[2]);
  std::optional<uint64_t> ticks = ParseUint64(fields[19]);
  if (!ppid || !pgid || !ticks) return std::nullopt;
  ProcStat st;
  st.pid = pid;
  st.ppid = static_cast<pid_t>(*ppid);
  st.pgid = static_cast<pid_t>(*pgid);
  st.state = fields[0][0];
  st.start_ticks = *ticks;
  return st;
}

std::vector<ProcStat> Descendants(pid_t root, const std::string& proc_root) {
  std::multimap<pid_t, ProcStat> by_parent;
  DIR* dir = ::opendir(proc_root.c_str());
  if (dir == nullptr) return {};
  while (const struct dirent* e = ::readdir(dir)) {
    std::optional<uint64_t> pid = ParseUint64(e->d_name);
    if (!pid || *pid == 0 || *pid > INT32_MAX) continue;
    Result<std::string> text = ReadFileToString(proc_root + "/" + e->d_name + "/stat", 1u << 16);
    if (!text.ok()) continue;  // ended while we looked
    std::optional<ProcStat> st = ParseProcStat(static_cast<pid_t>(*pid), *text);
    if (st && st->state != 'Z') by_parent.emplace(st->ppid, *st);
  }
  ::closedir(dir);
  std::vector<ProcStat> out;
  std::vector<pid_t> parents = {root};
  std::set<pid_t> seen = {root};  // a made-up table may hold a loop
  for (size_t i = 0; i < parents.size(); ++i) {
    auto [first, last] = by_parent.equal_range(parents[i]);
    for (auto it = first; it != last; ++it) {
      if (!seen.insert(it->second.pid).second) continue;
      out.push_back(it->second);
      parents.push_back(it->second.pid);
    }
  }
  return out;
}

int SignalDescendants(int sig, pid_t skip_group) {
  int sent = 0;
  for (const ProcStat& p : Descendants(::getpid())) {
    if (skip_group != 0 && p.pgid == skip_group) continue;
    const int fd = OpenVerifiedPidFd(p.pid, p.start_ticks);
    if (fd == -1) continue;  // gone since, or the pid is another process's now
    if (SignalProcess(fd, p.pid, sig)) ++sent;
    if (fd >= 0) ::close(fd);
  }
  return sent;
}

namespace {

// The target of /proc/<pid>/ns/pid ("pid:[4026531836]"); empty when unreadable.
std::string PidNamespace(const std::string& proc_root, pid_t pid) {
  char buf[64];
  const std::string link = proc_root + "/" + std::to_string(pid) + "/ns/pid";
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Whether the process is its namespace's init: NSpid's last field (its pid there) is 1.
bool IsNamespaceInit(const std::string& proc_root, pid_t pid) {
  Result<std::string> status =
      ReadFileToString(proc_root + "/" + std::to_string(pid) + "/status", 1u << 16);
  if (!status.ok()) return false;
  for (const std::string& line : Split(*status, '\n')) {
    if (!StartsWith(line, "NSpid:")) continue;
    // Tab separated, the outermost namespace's pid first.
    const std::string_view pids = Trim(std::string_view(line).substr(6));
    const size_t last = pids.find_last_of(" \t");
    return (last == std::string_view::npos ? pids : pids.substr(last + 1)) == "1";
  }
  return false;
}

}  // namespace

std::vector<ProcStat> OtherNamespaceDescendants(pid_t root, bool skip_init,
                                                const std::string& proc_root) {
  const std::string own = PidNamespace(proc_root, root);
  std::vector<ProcStat> out;
  if (own.empty()) return out;
  for (const ProcStat& p : Descendants(root, proc_root)) {
    const std::string ns = PidNamespace(proc_root, p.pid);
    if (ns.empty() || ns == own) continue;
    if (skip_init && IsNamespaceInit(proc_root, p.pid)) continue;
    out.push_back(p);
  }
  return out;
}

int SignalContainerProcesses(int sig, bool skip_init) {
  int sent = 0;
  for (const ProcStat& p : OtherNamespaceDescendants(::getpid(), skip_init)) {
    const int fd = OpenVerifiedPidFd(p.pid, p.start_ticks);
    if (fd == -1) continue;  // gone since, or the pid is another process's now
    if (SignalProcess(fd, p.pid, sig)) ++sent;
    if (fd >= 0) ::close(fd);
  }
  return sent;
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev != nullptr) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

}  // namespace gpupool::agent
