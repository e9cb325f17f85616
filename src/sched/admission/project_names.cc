#include "sched/admission/project_names.h"

#include "common/confusables.h"

namespace gpupool::sched {

ProjectNames ProjectNames::Of(const Limits& limits) {
  ProjectNames out;
  out.AddAll(limits);
  return out;
}

void ProjectNames::Add(const std::string& name) {
  if (!names_.insert(name).second) return;
  by_skeleton_[ConfusableSkeleton(name)].insert(name);
}

void ProjectNames::AddAll(const Limits& limits) {
  for (const auto& [name, entry] : limits.projects) Add(name);
}

bool ProjectNames::HasLookAlikeOf(std::string_view name) const {
  auto it = by_skeleton_.find(ConfusableSkeleton(name));
  if (it == by_skeleton_.end()) return false;
  const std::set<std::string>& alike = it->second;
  return alike.size() > 1 || !alike.contains(std::string(name));
}

}  // namespace gpupool::sched
