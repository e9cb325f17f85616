// Running jobs under a changed MIG layout (layout_holds.h): the Controller's part, which
// finds them when a node registers or the pool loads and holds their GPUs in each pass.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "controller/controller.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"
#include "controller/layout_holds.h"
#include "controller/sched_input.h"

namespace gpupool::controller {

using jobs::Job;
using internal::Occupies;

std::map<std::string, std::vector<int64_t>> internal::LayoutHeld(
    const LayoutHolds& holds, const std::string& node, const std::map<int64_t, Job>& active) {
  if (holds.empty()) return {};
  return holds.OnNode(node, [&](int64_t id, int attempt) {
    auto it = active.find(id);
    return it != active.end() && Occupies(it->second) && it->second.attempt == attempt;
  });
}

void internal::ReserveLayoutHolds(const LayoutHolds& holds, const std::string& name,
                                  const std::map<int64_t, Job>& active, SchedNode* node) {
  for (const auto& [uuid, ids] : LayoutHeld(holds, name, active)) {
    std::vector<std::string> jobs;
    for (int64_t id : ids) jobs.push_back(lifecycle::UserJobId(active.at(id)));
    node->out_of_service_gpus.push_back({uuid, LayoutHeldWhy(jobs)});
  }
}

void Controller::UpdateLayoutHolds(const std::string& node) {
  const NodeInfoOf info_of = [this](const std::string& n) -> const gpu::NodeInfo* {
    mu_.AssertHeld();
    auto it = nodes_.find(n);
    return it == nodes_.end() ? nullptr : &it->second.info;
  };
  layout_holds_.Prune([this](int64_t id, int attempt) {
    mu_.AssertHeld();
    auto it = active_.find(id);
    return it != active_.end() && Occupies(it->second) && it->second.attempt == attempt;
  });
  for (int64_t id : index_.OnNode(node)) {
    const Job& job = active_.at(id);
    if (!Occupies(job) || !layout_holds_.Update(job, info_of)) continue;
    spdlog::warn(
        "node {}: job {} runs on devices the node no longer offers (its MIG layout changed "
        "under it); the GPUs that host them take no new work until it ends",
        node, lifecycle::UserJobId(job));
  }
}

}  // namespace gpupool::controller
