// Running helper commands (podman, ...) without a shell: one implementation for every
// module that needs to start one, capture its output or wait for it with a time limit.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpupool {

// How SpawnCommand sets up the child before exec (posix_spawn: no copy of the caller's
// page tables). Standard input is /dev/null unless in_fd says otherwise; the usual signals
// (SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE) get their default handling.
struct SpawnOptions {
  int in_fd = -1;            // standard input; < 0: /dev/null. Not with run_as.
  int out_fd = -1;           // standard output; < 0: the caller's
  int err_fd = -1;           // standard error; < 0: the caller's
  bool null_output = false;  // both to /dev/null (out_fd/err_fd ignored)
  bool new_session = false;  // setsid: the caller's group and terminal signals miss it
  bool search_path = true;   // argv[0] searched in PATH (false: taken as a path)
  std::vector<int> blocked;  // signals blocked across exec (default: none)
  int pass_fd = -1;          // a descriptor the child keeps, as pass_fd_as
  int pass_fd_as = -1;
  // More descriptors the child keeps: (fd, as) pairs, applied after pass_fd and in order,
  // so no `fd` may equal an earlier `as`. Not with run_as.
  std::vector<std::pair<int, int>> more_fds;
  int close_from = -1;  // >= 0: every descriptor from this one up is closed
  // The child's whole environment ("KEY=VALUE" each); unset: the caller's. Not with run_as
  // (which sets its own).
  std::optional<std::vector<std::string>> env;
  // Run as this user instead of the caller's (needs root). posix_spawn cannot switch
  // users, so the child is forked and only makes raw system calls (dup2, setgroups,
  // setresgid, setresuid, execve) before exec; argv[0] must then be a path (search_path
  // is ignored), every descriptor from 3 up is closed, and the environment is only
  // PATH and LC_ALL=C (the user could read the caller's from /proc).
  struct RunAs {
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;  // supplementary groups; empty: none
  };
  std::optional<RunAs> run_as;
};

// Starts argv (no shell) as `options` say. The caller reaps it. Unavailable when it
// cannot be started.
Result<pid_t> SpawnCommand(const std::vector<std::string>& argv, const SpawnOptions& options);

// The common case: output on `out_fd`/`err_fd` (< 0: the caller's), argv[0] from PATH,
// an empty signal mask (whatever the caller blocks).
Result<pid_t> SpawnCommand(const std::vector<std::string>& argv, int out_fd = -1, int err_fd = -1);

struct CommandResult {
  int wait_status = 0;     // as from waitpid
  bool timed_out = false;  // killed with SIGKILL after timeout_ms
  bool cancelled = false;  // killed with SIGKILL because `cancelled()` said so
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

// The same with `options` for the child (its out_fd/err_fd/null_output are replaced by
// the capture pipes), also killed as soon as `cancelled` (polled every 50 ms; may be
// empty) returns true, e.g. when the server is shutting down.
Result<CommandResult> RunCommandCapture(const std::vector<std::string>& argv, int timeout_ms,
                                        const SpawnOptions& options,
                                        const std::function<bool()>& cancelled);

}  // namespace gpupool
