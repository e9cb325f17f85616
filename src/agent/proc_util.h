// Small Linux process helpers shared by the shim and the launcher: process identity
// that survives pid reuse (start time in clock ticks since boot, plus the boot id), and
// pidfds for race-free liveness checks and signalling. Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

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

// "SIGTERM" style name for messages; "signal N" when unknown.
std::string SignalName(int sig);

}  // namespace gpupool::agent
