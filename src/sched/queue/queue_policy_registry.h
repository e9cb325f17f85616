// QueuePolicyRegistry: queue policies keyed by name, created on demand. Names are
// unique (Register refuses duplicates). BuiltinQueuePolicies() holds fifo, priority,
// sjf and fair. Registering is not thread-safe; creating from a registry that no longer
// changes is.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/queue/queue_policy.h"

namespace gpupool::sched {

using QueuePolicyFactory =
    std::function<std::unique_ptr<QueuePolicy>(const QueuePolicyConfig& config)>;

class QueuePolicyRegistry {
 public:
  struct Entry {
    std::string name;
    std::string description;  // one line, for listings
  };

  Status Register(std::string name, std::string description, QueuePolicyFactory factory);
  // Fails with the known names when `name` is unknown, or on an invalid config.
  Result<std::unique_ptr<QueuePolicy>> Create(std::string_view name,
                                              const QueuePolicyConfig& config = {}) const;
  bool Contains(std::string_view name) const;
  std::vector<Entry> List() const;  // registration order

 private:
  struct Slot {
    Entry entry;
    QueuePolicyFactory factory;
    size_t order = 0;
  };
  std::map<std::string, Slot, std::less<>> slots_;
};

// The process-wide registry with the built-in queue policies (immutable after first
// use; safe to share between threads).
const QueuePolicyRegistry& BuiltinQueuePolicies();

// Factories of the built-in policies, for registries of one's own.
std::unique_ptr<QueuePolicy> MakeFifoQueuePolicy();
std::unique_ptr<QueuePolicy> MakePriorityQueuePolicy();
std::unique_ptr<QueuePolicy> MakeShortestJobFirstQueuePolicy();
std::unique_ptr<QueuePolicy> MakeFairShareQueuePolicy(const QueuePolicyConfig& config);

}  // namespace gpupool::sched
