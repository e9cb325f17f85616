// The project names a pool lists already, by confusable skeleton (common/confusables.h):
// what a new name must not print like. A value type; not thread-safe (the controller
// keeps one under its lock).
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "sched/admission/limits.h"

namespace gpupool::sched {

class ProjectNames {
 public:
  ProjectNames() = default;
  // The names of the project entries of `limits`.
  static ProjectNames Of(const Limits& limits);

  // Idempotent. Names are never taken out: a name a pool listed may still be in its
  // usage and history.
  void Add(const std::string& name);
  void AddAll(const Limits& limits);  // the project entries' names

  // Whether a name other than `name` has its skeleton: one that prints like it.
  bool HasLookAlikeOf(std::string_view name) const;

  size_t size() const { return names_.size(); }

 private:
  std::set<std::string, std::less<>> names_;
  // Skeleton -> the names of that skeleton (usually one).
  std::map<std::string, std::set<std::string>, std::less<>> by_skeleton_;
};

}  // namespace gpupool::sched
