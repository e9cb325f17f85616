// Running helper commands (podman, ...) without a shell: one implementation for every
// module that needs to start one, capture its output or wait for it with a time limit.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool {

// Starts argv (no shell; argv[0] searched in PATH) with its standard input from
// /dev/null, default handling of the usual signals and an empty signal mask (whatever
// the caller blocks), its output on `out_fd`/`err_fd` (< 0: the caller's). The caller
// reaps it. Unavailable when it cannot be started.
Result<pid_t> SpawnCommand(const std::vector<std::string>& argv, int out_fd = -1, int err_fd = -1);

struct CommandResult {
  int wait_status = 0;     // as from waitpid
  bool timed_out = false;  // killed with SIGKILL after timeout_ms
  std::string out;         // standard output (first 16 MiB)
  std::string err;         // standard error (first 16 MiB)
  bool Succeeded() const;  // exited with status 0 and did not time out
  // "NAME SUB failed: <last line of stderr, or of stdout>" or "... did not finish
  // within N ms and was killed".
  std::string Failure(const std::vector<std::string>& argv, int timeout_ms) const;
};

// Runs argv as SpawnCommand does, capturing both streams, and waits up to timeout_ms
// (then kills it). An error only when it cannot be started; a failing command is a
// CommandResult the caller judges.
Result<CommandResult> RunCommandCapture(const std::vector<std::string>& argv, int timeout_ms);

}  // namespace gpupool
