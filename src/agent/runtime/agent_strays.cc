// AgentLoop's sweep of stray runs (agent/stray_runs.h): before the node first registers,
// the runs a previous agent of this node left under the cgroup root, which this agent's
// state directory does not know, are stopped. Their GPUs would otherwise be reported
// free (the controller records such jobs lost and places others on them) while their
// processes run on, unseen by the pool.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "agent/runtime/agent_loop.h"
#include "agent/stray_runs.h"

namespace gpupool::agent {

Status AgentLoop::StopStrays() {
  if (strays_stopped_) return Status::Ok();
  // Which pool this state directory's runs are of, for a later agent's sweep.
  if (!options_.server_for_jobs.empty()) {
    RecordController(options_.state_dir, options_.server_for_jobs);
  }
  if (options_.cgroup_root.empty()) {
    strays_stopped_ = true;
    return Status::Ok();
  }
  StrayScan scan;
  scan.cgroup_root = options_.cgroup_root;
  scan.proc_root = options_.proc_root;
  scan.agent_dir = options_.state_dir;
  scan.node_name = options_.node_name;
  scan.running = launcher_->Running();  // after Adopt: the runs this agent owns
  scan.controllers = options_.server_for_jobs;
  std::vector<std::string> unknown;
  const std::vector<StrayRun> strays = FindStrayRuns(scan, &unknown);
  for (const std::string& dir : unknown) {
    spdlog::warn(
        "agent: node {}: job cgroup {} has processes but no job supervisor that names its "
        "owner; left alone (remove it by hand if no agent of this host runs it)",
        options_.node_name, dir);
  }
  const int grace_ms = static_cast<int>(std::max<int64_t>(options_.cancel_grace_s, 0) * 1000);
  std::string failed;
  for (const StrayRun& s : strays) {
    spdlog::warn("agent: node {}: stopping job {}'s run {} left by a previous agent ({})",
                 options_.node_name, s.job, s.run, s.why);
    // An emptied cgroup goes within milliseconds; the wait is for processes the kernel
    // holds (uninterruptible sleep), at most the grace, within 1 to 10 s.
    Status st = StopStrayRun(s, options_.proc_root, grace_ms, std::clamp(grace_ms, 1000, 10'000));
    if (!st.ok()) {
      failed +=
          (failed.empty() ? "" : "; ") + ("job " + std::to_string(s.job) + ": ") + st.message();
      continue;
    }
    spdlog::warn("agent: node {}: stopped job {}'s run {} left by a previous agent ({})",
                 options_.node_name, s.job, s.run, s.why);
  }
  if (!failed.empty()) {
    // Registering now would report their GPUs free while they may still run.
    return Status::Unavailable("node " + options_.node_name +
                               " does not register until the runs a previous agent left "
                               "are stopped: " +
                               failed);
  }
  strays_stopped_ = true;
  return Status::Ok();
}

}  // namespace gpupool::agent
