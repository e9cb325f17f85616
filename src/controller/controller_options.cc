// The checks of ControllerOptions that need no store (controller_options.h).
#include "controller/controller_options.h"

#include <memory>

#include "controller/job_scheduler.h"
#include "gpu/health_policy.h"
#include "sched/policy_registry.h"
#include "sched/queue/queue_policy_registry.h"
#include "sched/queue/scheduling_pass.h"

namespace gpupool::controller {

Status ValidateControllerOptions(const ControllerOptions& o) {
  if (Result<sched::StartRule> rule = sched::ParseStartRule(o.start_rule); !rule.ok()) {
    return Status::InvalidArgument(rule.status().WithContext("--start-rule").message());
  }
  if (!sched::BuiltinQueuePolicies().Contains(o.queue_policy)) {
    return Status::InvalidArgument(sched::BuiltinQueuePolicies()
                                       .Create(o.queue_policy)
                                       .status()
                                       .WithContext("--queue")
                                       .message());
  }
  if (!sched::BuiltinPlacementPolicies().Contains(o.placement_policy)) {
    return Status::InvalidArgument(sched::BuiltinPlacementPolicies()
                                       .Create(o.placement_policy)
                                       .status()
                                       .WithContext("--policy")
                                       .message());
  }
  if (Result<std::unique_ptr<JobScheduler>> s =
          JobScheduler::Create(o.placement_policy, o.queue_policy, o.start_rule, o.mps_sharing,
                               o.max_starts_per_pass, o.fair_by);
      !s.ok()) {
    return Status::InvalidArgument(s.status().WithContext("scheduler configuration").message());
  }
  if (Result<gpu::HealthPolicy> h = gpu::HealthPolicy::Create(o.health_xid, ""); !h.ok()) {
    return Status::InvalidArgument(h.status().WithContext("--health-xid").message());
  }
  if (Result<gpu::HealthPolicy> h = gpu::HealthPolicy::Create("", o.health_threshold); !h.ok()) {
    return Status::InvalidArgument(h.status().WithContext("--health-threshold").message());
  }
  if (!(o.health_breaker_fraction > 0 && o.health_breaker_fraction <= 1)) {
    return Status::InvalidArgument(
        "--health-breaker: a fraction of the pool's nodes in (0, 1], e.g. 0.1");
  }
  return Status::Ok();
}

}  // namespace gpupool::controller
