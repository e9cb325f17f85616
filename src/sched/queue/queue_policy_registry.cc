#include "sched/queue/queue_policy_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace gpupool::sched {

const std::string& FairShareGroupOf(const QueuedJob& job, FairShareGroup group) {
  return group == FairShareGroup::kProject ? job.project : job.user;
}

Status QueuePolicyRegistry::Register(std::string name, std::string description,
                                     QueuePolicyFactory factory) {
  if (name.empty()) return Status::InvalidArgument("queue policy name is empty");
  if (!factory) {
    return Status::InvalidArgument(fmt::format("queue policy '{}' has no factory", name));
  }
  if (slots_.count(name) != 0) {
    return Status::AlreadyExists(
        fmt::format("queue policy '{}' is registered twice; pick another name", name));
  }
  Slot slot{{name, std::move(description)}, std::move(factory), slots_.size()};
  slots_.emplace(std::move(name), std::move(slot));
  return Status::Ok();
}

Result<std::unique_ptr<QueuePolicy>> QueuePolicyRegistry::Create(
    std::string_view name, const QueuePolicyConfig& config) const {
  auto it = slots_.find(name);
  if (it == slots_.end()) {
    std::string known;
    for (const Entry& e : List()) known += (known.empty() ? "" : ", ") + e.name;
    return Status::NotFound(
        fmt::format("unknown queue policy '{}'; known policies: {}", name, known));
  }
  for (const auto& [group, weight] : config.fair_weights) {
    if (!(weight > 0) || !std::isfinite(weight)) {
      return Status::InvalidArgument(fmt::format(
          "fair-share weight of '{}' is {}; weights must be positive numbers", group, weight));
    }
  }
  std::unique_ptr<QueuePolicy> policy = it->second.factory(config);
  if (!policy) {
    return Status::Internal(fmt::format("queue policy '{}' factory returned null", name));
  }
  return policy;
}

bool QueuePolicyRegistry::Contains(std::string_view name) const {
  return slots_.find(name) != slots_.end();
}

std::vector<QueuePolicyRegistry::Entry> QueuePolicyRegistry::List() const {
  std::vector<const Slot*> v;
  for (const auto& [k, s] : slots_) v.push_back(&s);
  std::sort(v.begin(), v.end(), [](const Slot* a, const Slot* b) { return a->order < b->order; });
  std::vector<Entry> out;
  for (const Slot* s : v) out.push_back(s->entry);
  return out;
}

const QueuePolicyRegistry& BuiltinQueuePolicies() {
  static const QueuePolicyRegistry* registry = [] {
    auto* r = new QueuePolicyRegistry();
    // Registration of distinct literal names cannot fail; a failure is a programming
    // error caught by the registry tests.
    (void)r->Register("fifo", "first come, first served (by submission time)",
                      [](const QueuePolicyConfig&) { return MakeFifoQueuePolicy(); });
    (void)r->Register("priority", "higher priority first, then first come, first served",
                      [](const QueuePolicyConfig&) { return MakePriorityQueuePolicy(); });
    (void)r->Register("sjf",
                      "shortest job first on the runtime estimate (else the time limit); "
                      "jobs without either go last, first come, first served",
                      [](const QueuePolicyConfig&) { return MakeShortestJobFirstQueuePolicy(); });
    (void)r->Register("fair",
                      "fair share between users or projects: dominant resource fairness on "
                      "GPU, CPU and memory, with optional weights",
                      [](const QueuePolicyConfig& c) { return MakeFairShareQueuePolicy(c); });
    return r;
  }();
  return *registry;
}

}  // namespace gpupool::sched
