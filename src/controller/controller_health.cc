// Controller: GPU health (issue 29, gpu/health_policy.h, docs/health.md). The Xids the
// agents report in their telemetry move each GPU's health by the policy's table; a GPU
// out of service takes no new work (the scheduler counts it as fully used), the jobs
// on a failed GPU end (or requeue), and a reboot-class Xid drains the whole node.
#include <spdlog/spdlog.h>

#include "controller/controller.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"

namespace gpupool::controller {

using jobs::Job;

Status Controller::ObserveGpuErrors(const std::string& node,
                                    const std::vector<protocol::GpuTelemetry>& samples) {
  std::vector<Change> failed;  // the jobs on GPUs that failed
  std::string drain_reason;    // a reboot-class Xid: the whole node
  {
    MutexLock lock(mu_);
    auto n = nodes_.find(node);
    if (n == nodes_.end()) return Status::NotFound("node " + node + " is not registered");
    NodeEntry& e = n->second;
    const int64_t now = clock_->NowMicros();
    for (const protocol::GpuTelemetry& s : samples) {  // oldest first
      if (!s.xid_count || !s.xid_errors || *s.xid_errors <= 0) continue;
      // Only the node's own GPUs: a node cannot report on another's.
      const bool ours = std::any_of(e.info.gpus.begin(), e.info.gpus.end(),
                                    [&](const gpu::GpuInfo& g) { return g.uuid == s.uuid; });
      if (!ours) continue;
      int64_t& seen = e.xid_count_seen[s.uuid];  // counts restart with the agent
      const int64_t fresh = *s.xid_count - seen;
      seen = *s.xid_count;
      if (fresh <= 0) continue;
      gpu::GpuHealth& health = e.gpu_health[s.uuid];
      const gpu::XidOutcome o =
          gpu::OnXid(health, static_cast<int>(*s.xid_errors), fresh, now, health_policy_);
      if (o.changed && o.next.state != health.state) {
        spdlog::warn("node {} GPU {} ({}): {} -> {}: {}", node, s.index, s.uuid,
                     gpu::GpuHealthStateName(health.state), gpu::GpuHealthStateName(o.next.state),
                     o.next.reason);
        capacity_changed_ = true;
      }
      health = o.next;
      const std::string why = "Xid " + std::to_string(*s.xid_errors) + ": " + o.rule.what;
      if (o.end_jobs) {
        for (int64_t id : occupying_) {
          if (internal::OnNode(active_.at(id), node)) {
            failed.push_back({id, lifecycle::GpuFailed{node, s.uuid, why}, {}});
          }
        }
      }
      if (o.cordon_node && !e.draining) drain_reason = "health: GPU " + s.uuid + " " + why;
    }
    if (capacity_changed_) WakeScheduler();
  }
  GP_ASSIGN_OR_RETURN(std::vector<Result<Job>> answers,
                      Commit(std::move(failed), OnConflict::kRetry));
  LogRefusals("GPU health", answers);
  if (!drain_reason.empty()) GP_RETURN_IF_ERROR(SetDrain(node, true, drain_reason).status());
  return Status::Ok();
}

}  // namespace gpupool::controller
