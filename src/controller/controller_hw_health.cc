// Controller: the hardware health fields of GPU telemetry (issue 29, docs/health.md,
// "Hardware health thresholds"): retired pages, row remapping, HW slowdown and uncorrected
// ECC errors (AMD: RAS counts and bad pages) move each GPU's health by the policy's
// threshold rows (gpu::OnReadings). A GPU they cordon takes no new work; its jobs go on.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "controller/controller.h"
#include "controller/controller_internal.h"

namespace gpupool::controller {

Status Controller::ObserveHardwareHealth(const std::string& node,
                                         const std::vector<protocol::GpuTelemetry>& samples) {
  bool changed = false;
  {
    MutexLock lock(mu_);
    auto n = nodes_.find(node);
    if (n == nodes_.end()) return Status::NotFound("node " + node + " is not registered");
    NodeEntry& e = n->second;
    const int64_t now = clock_->NowMicros();
    for (const protocol::GpuTelemetry& s : samples) {  // oldest first
      const std::map<std::string, int64_t> readings = gpu::HealthReadings(s.hw, s.ecc_uncorrected);
      if (readings.empty()) continue;
      // Only the node's own GPUs: a node cannot report on another's.
      const bool ours = std::any_of(e.info.gpus.begin(), e.info.gpus.end(),
                                    [&](const gpu::GpuInfo& g) { return g.uuid == s.uuid; });
      if (!ours) continue;
      gpu::GpuHealth& health = e.gpu_health[s.uuid];
      gpu::XidOutcome o = gpu::OnReadings(health, readings, now, health_policy_);
      if (!o.changed) continue;
      if (gpu::TakesWork(health.state) && !gpu::TakesWork(o.next.state) &&
          !BreakerAllows(node, now)) {
        HoldBack(node, s.uuid, &o);  // suspect; its levels count as acted on
      }
      if (o.next.state != health.state) {
        spdlog::warn("node {} GPU {} ({}): {} -> {}: {}", node, s.index, s.uuid,
                     gpu::GpuHealthStateName(health.state), gpu::GpuHealthStateName(o.next.state),
                     o.next.reason);
        capacity_changed_ = true;
      }
      health = o.next;
      changed = true;
    }
    if (capacity_changed_) WakeScheduler();
  }
  if (changed) GP_RETURN_IF_ERROR(StoreGpuHealth(node));
  return Status::Ok();
}

}  // namespace gpupool::controller
