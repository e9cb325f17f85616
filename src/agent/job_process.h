// Starting a job's command from the shim: a child that shares the shim's memory until it
// execs (clone with CLONE_VM | CLONE_VFORK, as posix_spawn does), in it a new session and
// process group, the job's cgroups, its log files, the user switch, the working
// directory and exec with exactly the job's environment. Exec failure is detected
// through a close-on-exec pipe, so "command not found" and "no such working directory"
// become reasons, not exit codes. Used by the single-threaded shim only.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "agent/cgroup.h"
#include "common/status.h"

namespace gpupool::agent {

struct JobProcessPlan {
  std::vector<std::string> argv;
  std::vector<std::string> env;         // "K=V"
  std::vector<std::string> candidates;  // executable paths to try for argv[0], in order
  std::string workdir;
  std::string user;  // for messages
  bool switch_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  bool controlling_tty = false;  // stdin is a terminal: make it the job's (TIOCSCTTY)
  const JobCgroup* cgroup = nullptr;
  bool require_cgroup = false;  // no launch unless the job joins `cgroup` (device isolation)
};

// Where argv0 is looked for: itself when it contains '/', else each PATH entry (an
// empty entry means the working directory, as in a shell).
std::vector<std::string> CommandCandidates(const std::string& argv0, const std::string& path);

// Starts the command. Returns its pid once exec succeeded; otherwise the child
// has been reaped and the error's message is the reason, naming what failed.
Result<pid_t> StartJobProcess(const JobProcessPlan& plan);

}  // namespace gpupool::agent
