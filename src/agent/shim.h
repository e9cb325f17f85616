// The per-job supervisor: `gpupool agent-shim --job-dir DIR [--ready-fd N] [--stdio-fd N]`.
//
// Started by the Launcher in its own session, it reads DIR/spec.json, records itself in
// DIR/shim.json, starts the job (job_process.h) under its cgroups (cgroup.h), reports
// "started ..." or "failed ..." on the ready descriptor, then supervises: SIGTERM or
// SIGINT to the shim cancels the job (TERM to its process group, KILL after grace_s),
// the time limit does the same with timed_out set. When the job's main process ends,
// the rest of its process group and cgroup are killed, DIR/status.json is written
// atomically (tried again while the write fails, e.g. on a full disk), and the shim
// exits 0 (non-zero only when DIR vanished before the status could be recorded).
#pragma once

#include <string>

#include "agent/nvml_memory.h"
#include "common/status.h"

namespace gpupool::agent {

struct ShimArgs {
  std::string job_dir;
  int ready_fd = -1;  // -1 = nobody waits for the start report
  // An interactive job (LaunchSpec::stdio_relayed): its stdin, stdout and stderr are
  // descriptors stdio_fd, stdio_fd + 1 and stdio_fd + 2; -1 = none.
  int stdio_fd = -1;
  // Sets NVML's per-cgroup memory limit of a share capped through NVML
  // (LaunchSpec::nvml_library); null in the slim static shim, which cannot load NVML
  // (nvml_memory.h): such a share then fails closed.
  NvmlMemoryLimitFn nvml_limit = nullptr;
};

// Parses the arguments after the program (or subcommand) name in argv[0].
Result<ShimArgs> ParseShimArgs(int argc, char** argv);

// The shim's whole life; returns its exit code. Expects to be the only thread.
// `nvml_limit`: ShimArgs::nvml_limit (the dynamic entry points pass ApplyNvmlMemoryLimit).
int RunShim(const ShimArgs& args);
int RunShim(int argc, char** argv, NvmlMemoryLimitFn nvml_limit = nullptr);

}  // namespace gpupool::agent
