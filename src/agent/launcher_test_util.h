// Helpers for the launcher tests: a scratch state directory, specs, and waiting for
// events from a real Launcher running real shims.
#pragma once

#include <functional>
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
// Task 0, attempt `attempt` of job `job_id`: what most tests launch.
inline RunId TaskRun(int64_t job_id, int attempt = 1) { return RunId{job_id, 0, attempt, 0}; }
// A spec of TaskRun(job_id).
LaunchSpec TestSpec(int64_t job_id, std::vector<std::string> argv);

// Waits for the next event of `id` (other events are kept in `*others` if given).
std::optional<JobEvent> WaitForEvent(Launcher& launcher, const RunId& id, int timeout_ms,
                                     std::vector<JobEvent>* others = nullptr);
inline std::optional<JobEvent> WaitForEvent(Launcher& launcher, int64_t job_id, int timeout_ms,
                                            std::vector<JobEvent>* others = nullptr) {
  return WaitForEvent(launcher, TaskRun(job_id), timeout_ms, others);
}

std::string ReadWholeFile(const std::string& path);
// The agent tests' one polling wait: checks `done` every `interval_ms` (real time) until
// it holds or `timeout_ms` passes; returns whether it held. Only for state that nothing
// announces: a file another process writes (no inotify watch can be set before its
// directory exists), a container's state as `podman ps` reports it. Wait on an event
// instead wherever there is one: a launcher's Wait (WaitForEvent), a pidfd (WaitForExit),
// a fake's condition variable, a ManualClock's waiters.
bool PollUntil(const std::function<bool()>& done, int timeout_ms, int interval_ms = 10);
// Until `path` contains `needle` or `timeout_ms` passes (PollUntil).
bool WaitForFileContaining(const std::string& path, const std::string& needle, int timeout_ms);
bool ProcessAlive(int pid);
// Waits (real time, up to `timeout_ms`) for process `pid` to end, on a pidfd: true once it
// has ended (a zombie counts) or when there is no such process.
bool WaitForExit(int pid, int timeout_ms);

// Kills every shim (and its job and cgroups) still running under `state_dir`, so a
// failed test leaves nothing behind.
void KillLeftoverJobs(const std::string& state_dir);

// Starts the test shim on `job_dir` (its spec.json written by the caller) as an agent
// would, without a Launcher, and waits for its start report: for runs an earlier agent
// started (a directory of the previous layout). Returns the shim's pid (a child of this
// process).
Result<int> StartShimIn(const std::string& job_dir);

}  // namespace gpupool::agent::testing
