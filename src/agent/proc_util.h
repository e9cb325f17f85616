// Small Linux process helpers shared by the shim and the launcher: process identity
// that survives pid reuse (start time in clock ticks since boot, plus the boot id), and
// pidfds for race-free liveness checks and signalling. Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::agent {

// Field 22 of /proc/<pid>/stat. NotFound when the process does not exist.
Result<uint64_t> ProcessStartTicks(pid_t pid);

// /proc/sys/kernel/random/boot_id, or "" when unreadable.
std::string BootId();

// A pidfd for `pid` that refers to the process that has `start_ticks` (0 = any), or -1
// when no such process exists (it ended, or the pid now names another process).
// Falls back to -2 when the kernel lacks pidfd_open and the process does exist.
int OpenVerifiedPidFd(pid_t pid, uint64_t start_ticks);

// Whether the process behind a pidfd has ended (it may be a zombie).
bool PidFdExited(int pidfd);

// Sends a signal through a pidfd (falls back to kill(pid) when pidfd < 0).
bool SignalProcess(int pidfd, pid_t pid, int sig);

// A process as /proc/<pid>/stat describes it.
struct ProcStat {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  char state = '?';  // R, S, D, T, Z, ...
  uint64_t start_ticks = 0;
};

// Parses the text of /proc/<pid>/stat; nullopt when it is not one.
std::optional<ProcStat> ParseProcStat(pid_t pid, std::string_view text);

// The living (not zombie) descendants of `root` in the process table under `proc_root`,
// parents before their children. A process that left its parent stays a descendant of
// the nearest subreaper above it (PR_SET_CHILD_SUBREAPER): of the job's supervisor, for
// every process a job started, whatever sessions or double forks it went through.
std::vector<ProcStat> Descendants(pid_t root, const std::string& proc_root = "/proc");

// Sends `sig` to each living descendant of this process not in process group
// `skip_group` (0: none), through a pidfd opened on the process seen in the walk, so a
// pid reused since is never hit. Signal 0 only counts them. Returns how many it reached.
int SignalDescendants(int sig, pid_t skip_group);

// The living descendants of `root` (under `proc_root`) in another pid namespace than
// root's own: a container's processes, which podman's conmon holds below the job's
// supervisor (their subreaper). With `skip_init`, not the namespace's init (pid 1 in it,
// /proc/<pid>/status NSpid), which passes a signal on to the main process itself.
std::vector<ProcStat> OtherNamespaceDescendants(pid_t root, bool skip_init,
                                                const std::string& proc_root = "/proc");

// Sends `sig` to each of OtherNamespaceDescendants(getpid(), skip_init), through pidfds
// as SignalDescendants. Returns how many it reached.
int SignalContainerProcesses(int sig, bool skip_init);

// "SIGTERM" style name for messages; "signal N" when unknown.
std::string SignalName(int sig);

}  // namespace gpupool::agent
