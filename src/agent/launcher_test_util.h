// Helpers for the launcher tests: a scratch state directory, specs, and waiting for
// events from a real Launcher running real shims.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/launcher.h"

namespace gpupool::agent::testing {

// A fresh directory under /tmp, removed (recursively) on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

LauncherOptions TestOptions(const std::string& state_dir);
LaunchSpec TestSpec(int64_t job_id, std::vector<std::string> argv);

// Waits for the next event of `job_id` (other events are kept in `*others` if given).
std::optional<JobEvent> WaitForEvent(Launcher& launcher, int64_t job_id, int timeout_ms,
                                     std::vector<JobEvent>* others = nullptr);

std::string ReadWholeFile(const std::string& path);
// Polls until `path` contains `needle` or `timeout_ms` passes.
bool WaitForFileContaining(const std::string& path, const std::string& needle, int timeout_ms);
bool ProcessAlive(int pid);

// Kills every shim (and its job and cgroups) still running under `state_dir`, so a
// failed test leaves nothing behind.
void KillLeftoverJobs(const std::string& state_dir);

}  // namespace gpupool::agent::testing
