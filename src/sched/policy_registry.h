// PlacementPolicyRegistry: placement policies keyed by name, created on demand.
//
// Names are unique (Register refuses duplicates); an alias maps a second name to a
// registered one (`default` -> our best). `BuiltinPlacementPolicies()` returns a
// registry with every policy of this module registered. Registering is not
// thread-safe; creating from a registry that is no longer changed is.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/placement_policy.h"

namespace gpupool::sched {

using PlacementPolicyFactory =
    std::function<std::unique_ptr<PlacementPolicy>(const PolicyConfig& config)>;

class PlacementPolicyRegistry {
 public:
  struct Entry {
    std::string name;
    std::string description;  // one line, for `gpupool sim policies`
    std::string alias_of;     // non-empty for aliases
  };

  Status Register(std::string name, std::string description, PlacementPolicyFactory factory);
  Status RegisterAlias(std::string alias, std::string target);

  Result<std::unique_ptr<PlacementPolicy>> Create(std::string_view name,
                                                  const PolicyConfig& config = {}) const;
  bool Contains(std::string_view name) const;
  // Registration order, aliases last.
  std::vector<Entry> List() const;

 private:
  struct Slot {
    Entry entry;
    PlacementPolicyFactory factory;
    size_t order = 0;
  };
  std::map<std::string, Slot, std::less<>> slots_;
};

// The process-wide registry with all built-in placement policies (immutable after
// first use; safe to share between threads).
const PlacementPolicyRegistry& BuiltinPlacementPolicies();

}  // namespace gpupool::sched
