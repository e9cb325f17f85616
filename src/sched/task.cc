#include "sched/task.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

namespace gpupool::sched {

Status ValidateTask(const Task& t) {
  auto bad = [&t](std::string_view field, std::string_view why) {
    return Status::InvalidArgument(fmt::format("task '{}': field {} {}", t.name, field, why));
  };
  if (t.cpu_milli < 0) return bad("cpu_milli", "is negative; give a value >= 0");
  if (t.memory_mib < 0) return bad("memory_mib", "is negative; give a value >= 0");
  if (t.num_gpu < 0) return bad("num_gpu", "is negative; give a value >= 0");
  if (t.gpu_milli < 0 || t.gpu_milli > 1000) {
    return bad("gpu_milli", "is outside 0..1000 (thousandths of one GPU)");
  }
  if (t.num_gpu == 0 && t.gpu_milli != 0) {
    return bad("gpu_milli", "is set although num_gpu is 0; set num_gpu or clear gpu_milli");
  }
  if (t.num_gpu > 0 && t.gpu_milli == 0) {
    return bad("gpu_milli", "is 0 although num_gpu > 0; give the share per GPU (1..1000)");
  }
  if (t.num_gpu > 1 && t.gpu_milli < 1000) {
    return bad("gpu_milli", "is fractional with num_gpu > 1; fractional shares need num_gpu 1");
  }
  if (t.min_capability < 0) return bad("min_capability", "is negative");
  if (t.owner < 0) return bad("owner", "is negative; give 0 (no owner) or an owner id > 0");
  if (t.gpu_memory_mib < 0) return bad("gpu_memory_mib", "is negative; give a value >= 0");
  if (!std::is_sorted(t.nodelist.begin(), t.nodelist.end()))
    return bad("nodelist", "is not sorted");
  if (!std::is_sorted(t.exclude.begin(), t.exclude.end())) return bad("exclude", "is not sorted");
  return Status::Ok();
}

bool Task::NodeChosen(const std::string& node) const {
  if (!nodelist.empty() && !std::binary_search(nodelist.begin(), nodelist.end(), node)) {
    return false;
  }
  return !std::binary_search(exclude.begin(), exclude.end(), node);
}

TaskShape ShapeOf(const Task& t) {
  return {t.cpu_milli,
          t.memory_mib,
          t.num_gpu,
          t.gpu_milli,
          t.gpu_models,
          t.min_capability,
          t.allowed_nodes,
          t.nodelist,
          t.exclude,
          t.IsFractional() ? t.owner : 0,
          t.IsFractional() ? t.gpu_memory_mib : 0};
}

size_t HashShape(const TaskShape& s) {
  size_t h = std::hash<int64_t>{}(s.cpu_milli);
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  mix(std::hash<int64_t>{}(s.memory_mib));
  mix(std::hash<int32_t>{}(s.num_gpu));
  mix(std::hash<int32_t>{}(s.gpu_milli));
  mix(std::hash<int32_t>{}(s.min_capability));
  mix(std::hash<int64_t>{}(s.owner));
  mix(std::hash<int64_t>{}(s.gpu_memory_mib));
  for (const auto& m : s.gpu_models) mix(std::hash<std::string>{}(m));
  for (const auto& n : s.allowed_nodes) mix(std::hash<std::string>{}(n));
  // Only when set, so that every other shape hashes as before; the size keeps a nodelist
  // {a} apart from an exclude {a}.
  if (!s.nodelist.empty() || !s.exclude.empty()) {
    mix(s.nodelist.size());
    for (const auto& n : s.nodelist) mix(std::hash<std::string>{}(n));
    for (const auto& n : s.exclude) mix(std::hash<std::string>{}(n));
  }
  return h;
}

}  // namespace gpupool::sched
