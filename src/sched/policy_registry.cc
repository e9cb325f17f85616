#include "sched/policy_registry.h"

#include <fmt/format.h>

#include <algorithm>

namespace gpupool::sched {

Status PlacementPolicyRegistry::Register(std::string name, std::string description,
                                         PlacementPolicyFactory factory) {
  if (name.empty()) return Status::InvalidArgument("placement policy name is empty");
  if (!factory) {
    return Status::InvalidArgument(fmt::format("placement policy '{}' has no factory", name));
  }
  if (slots_.count(name) != 0) {
    return Status::AlreadyExists(
        fmt::format("placement policy '{}' is registered twice; pick another name", name));
  }
  Slot slot{{name, std::move(description), ""}, std::move(factory), slots_.size()};
  slots_.emplace(std::move(name), std::move(slot));
  return Status::Ok();
}

Status PlacementPolicyRegistry::RegisterAlias(std::string alias, std::string target) {
  auto it = slots_.find(target);
  if (it == slots_.end()) {
    return Status::NotFound(
        fmt::format("alias '{}' points to unknown placement policy '{}'", alias, target));
  }
  if (!it->second.entry.alias_of.empty()) {
    return Status::InvalidArgument(
        fmt::format("alias '{}' points to another alias '{}'", alias, target));
  }
  if (slots_.count(alias) != 0) {
    return Status::AlreadyExists(
        fmt::format("placement policy '{}' is registered twice; pick another name", alias));
  }
  Slot slot{{alias, "alias of " + target + ": " + it->second.entry.description, target},
            it->second.factory,
            slots_.size() + 1000000};
  slots_.emplace(std::move(alias), std::move(slot));
  return Status::Ok();
}

Result<std::unique_ptr<PlacementPolicy>> PlacementPolicyRegistry::Create(
    std::string_view name, const PolicyConfig& config) const {
  auto it = slots_.find(name);
  if (it == slots_.end()) {
    std::string known;
    for (const auto& e : List()) known += (known.empty() ? "" : ", ") + e.name;
    return Status::NotFound(
        fmt::format("unknown placement policy '{}'; known policies: {}", name, known));
  }
  auto policy = it->second.factory(config);
  if (!policy) {
    return Status::Internal(fmt::format("placement policy '{}' factory returned null", name));
  }
  return policy;
}

bool PlacementPolicyRegistry::Contains(std::string_view name) const {
  return slots_.find(name) != slots_.end();
}

std::vector<PlacementPolicyRegistry::Entry> PlacementPolicyRegistry::List() const {
  std::vector<const Slot*> v;
  for (const auto& [k, s] : slots_) v.push_back(&s);
  std::sort(v.begin(), v.end(), [](const Slot* a, const Slot* b) { return a->order < b->order; });
  std::vector<Entry> out;
  for (const Slot* s : v) out.push_back(s->entry);
  return out;
}

}  // namespace gpupool::sched
