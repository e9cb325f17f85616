// QueuePolicyRegistry: queue policies keyed by name, created on demand
// (Registry<QueuePolicy>, registry.h: names are unique; Create checks the fair-share
// weights). BuiltinQueuePolicies() holds fifo, priority, sjf and fair. Registering is
// not thread-safe; creating from a registry that no longer changes is.
#pragma once

#include <memory>
#include <string_view>

#include "common/status.h"
#include "sched/queue/queue_policy.h"
#include "sched/registry.h"

namespace gpupool::sched {

template <>
struct RegistryTraits<QueuePolicy>
    : RegistryNaming<QueuePolicyConfig, "queue policy", "known policies"> {
  // Fair-share weights must be positive, finite numbers.
  static Status CheckConfig(const QueuePolicyConfig& config);
};

using QueuePolicyRegistry = Registry<QueuePolicy>;
using QueuePolicyFactory = QueuePolicyRegistry::Factory;

// The process-wide registry with the built-in queue policies (immutable after first
// use; safe to share between threads).
const QueuePolicyRegistry& BuiltinQueuePolicies();

// Factories of the built-in policies, for registries of one's own.
std::unique_ptr<QueuePolicy> MakeFifoQueuePolicy();
std::unique_ptr<QueuePolicy> MakePriorityQueuePolicy(const QueuePolicyConfig& config = {});
std::unique_ptr<QueuePolicy> MakeShortestJobFirstQueuePolicy();
std::unique_ptr<QueuePolicy> MakeFairShareQueuePolicy(const QueuePolicyConfig& config);

}  // namespace gpupool::sched
