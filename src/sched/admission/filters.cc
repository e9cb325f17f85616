#include "sched/admission/filters.h"

#include <algorithm>

namespace gpupool::sched {

void DrainFilter::BeginPass(const PassContext& ctx) {
  draining_.assign(ctx.draining.begin(), ctx.draining.end());
  std::sort(draining_.begin(), draining_.end());
  why_.clear();
  for (size_t i = 0; i < ctx.draining.size() && i < ctx.draining_why.size(); ++i) {
    if (!ctx.draining_why[i].empty()) why_.emplace_back(ctx.draining[i], ctx.draining_why[i]);
  }
  std::sort(why_.begin(), why_.end());
  // A drained node where something still runs is "draining", as `gpupool nodes` says.
  busy_.clear();
  for (const RunningJob& run : ctx.running) {
    for (const Placement& p : run.placements) busy_.push_back(p.node);
  }
  std::sort(busy_.begin(), busy_.end());
}

void DrainFilter::PrepareCluster(ClusterState& cluster) const {
  for (int32_t i : draining_) {
    if (i < 0 || i >= cluster.num_nodes()) continue;
    Task rest;
    rest.name = "drained";
    rest.cpu_milli = cluster.node(i).cpu_free_milli;
    rest.memory_mib = cluster.node(i).memory_free_mib;
    if (rest.cpu_milli > 0 || rest.memory_mib > 0) (void)cluster.Allocate(rest, {i, {}});
    for (int32_t g = 0; g < cluster.node(i).num_gpus(); ++g) {
      const int32_t free = cluster.node(i).gpu_free_milli[static_cast<size_t>(g)];
      if (free <= 0) continue;
      Task share;
      share.name = "drained";
      share.num_gpu = 1;
      share.gpu_milli = free;
      (void)cluster.Allocate(share, {i, {g}});
    }
  }
}

bool DrainFilter::Filter(const ClusterState&, const Task&, int32_t node,
                         std::string* reason) const {
  if (!std::binary_search(draining_.begin(), draining_.end(), node)) return true;
  if (reason == nullptr) return false;
  const auto why = std::lower_bound(why_.begin(), why_.end(), node,
                                    [](const auto& w, int32_t n) { return w.first < n; });
  if (why != why_.end() && why->first == node) {
    *reason = why->second;
  } else {
    *reason = std::binary_search(busy_.begin(), busy_.end(), node) ? "draining" : "drained";
  }
  return false;
}

void EnvCompatFilter::BeginPass(const PassContext& ctx) {
  lookup_ = ctx.environments;
  seen_.clear();
}

bool EnvCompatFilter::PreFilter(const QueuedJob& job, PreFilterResult* result) {
  const std::string& env = job.admission.environment;
  if (env.empty() || !lookup_ ||
      std::none_of(job.tasks.begin(), job.tasks.end(),
                   [](const Task& t) { return t.NeedsGpu(); })) {
    return false;
  }
  auto it = seen_.find(env);
  if (it == seen_.end()) it = seen_.emplace(env, lookup_(env)).first;
  result->never = it->second.none;
  if (result->never.empty()) result->only_nodes = it->second.nodes;
  return !result->never.empty() || !result->only_nodes.empty();
}

bool EnvCompatFilter::Filter(const ClusterState& state, const Task& task, int32_t node,
                             std::string* reason) const {
  if (!task.NeedsGpu() || task.allowed_nodes.empty() ||
      std::binary_search(task.allowed_nodes.begin(), task.allowed_nodes.end(),
                         state.node(node).name)) {
    return true;
  }
  if (reason != nullptr) *reason = "cannot run its environment";
  return false;
}

void EnforceMemoryFilter::BeginPass(const PassContext& ctx) {
  enforced_.assign(ctx.memory_enforced_nodes.begin(), ctx.memory_enforced_nodes.end());
  std::sort(enforced_.begin(), enforced_.end());
}

bool EnforceMemoryFilter::PreFilter(const QueuedJob& job, PreFilterResult* result) {
  if (std::none_of(job.tasks.begin(), job.tasks.end(),
                   [](const Task& t) { return t.enforce_memory && t.IsFractional(); })) {
    return false;
  }
  if (enforced_.empty()) {
    result->never =
        "--enforce memory: no node holds a GPU share to its memory on every one of its GPUs "
        "(each GPU's enforcement is in `gpupool nodes`; mps, mig or dmem is needed on all of "
        "a node's GPUs: a node with a GPU of enforcement none takes no such share), or submit "
        "without it";
    return true;
  }
  result->only_nodes = enforced_;
  return true;
}

bool EnforceMemoryFilter::Filter(const ClusterState& state, const Task& task, int32_t node,
                                 std::string* reason) const {
  if (!task.enforce_memory || !task.IsFractional() ||
      std::binary_search(enforced_.begin(), enforced_.end(), state.node(node).name)) {
    return true;
  }
  if (reason != nullptr) *reason = "GPU memory not enforced";
  return false;
}

}  // namespace gpupool::sched
