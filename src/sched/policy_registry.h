// PlacementPolicyRegistry: placement policies keyed by name, created on demand
// (Registry<PlacementPolicy>, registry.h: names are unique, aliases map a second name to
// a registered one, `default` -> our best). `BuiltinPlacementPolicies()` returns a
// registry with every policy of this module registered. Registering is not
// thread-safe; creating from a registry that is no longer changed is.
#pragma once

#include "common/status.h"
#include "sched/placement_policy.h"
#include "sched/registry.h"

namespace gpupool::sched {

template <>
struct RegistryTraits<PlacementPolicy>
    : RegistryNaming<PolicyConfig, "placement policy", "known policies"> {};

using PlacementPolicyRegistry = Registry<PlacementPolicy>;
using PlacementPolicyFactory = PlacementPolicyRegistry::Factory;

// The process-wide registry with all built-in placement policies (immutable after
// first use; safe to share between threads).
const PlacementPolicyRegistry& BuiltinPlacementPolicies();

}  // namespace gpupool::sched
