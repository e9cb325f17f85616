// IdleLauncher: a Launcher for the agent loop's tests that runs nothing. With `accept`
// it records what it was asked to launch; Adopt reports `adopt` (runs still running from
// before a restart). Test-only.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "agent/launcher.h"

namespace gpupool::agent::test_util {

class IdleLauncher final : public agent::Launcher {
 public:
  using agent::Launcher::Launch;
  Status Launch(const agent::LaunchSpec& spec, const agent::JobStdio&) override {
    std::lock_guard lock(mu);
    if (!accept) return Status::Unavailable("not in this test");
    launched.push_back(spec);
    cv.notify_all();
    return Status::Ok();
  }
  std::mutex mu;
  std::condition_variable cv;  // a launch was recorded
  bool accept = false;
  std::vector<agent::LaunchSpec> launched;
  Status Cancel(const RunId&) override { return Status::NotFound("none"); }
  std::vector<std::pair<RunId, StopRequest>> stops;  // what Stop was asked
  Status Stop(const RunId& id, const StopRequest& stop) override {
    std::lock_guard lock(mu);
    stops.emplace_back(id, stop);
    return Status::Ok();
  }
  std::vector<agent::JobEvent> Poll() override { return {}; }
  // Nothing ever ends here: a wait for events lasts its timeout (at most 20 ms, so that the
  // agent's reporter sees Stop soon), on the launcher's condition variable.
  std::vector<agent::JobEvent> Wait(int timeout_ms) override {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::milliseconds(std::min(timeout_ms, 20)));
    return {};
  }
  // What Adopt reports: runs still running from before a restart (none by default).
  std::vector<agent::JobEvent> adopt;
  Result<std::vector<agent::JobEvent>> Adopt() override { return adopt; }
  Status Forget(const RunId&) override { return Status::Ok(); }
  std::vector<RunId> Running() const override {
    std::vector<RunId> ids;
    for (const agent::JobEvent& e : adopt) ids.push_back(e.id);
    return ids;
  }
};

}  // namespace gpupool::agent::test_util
