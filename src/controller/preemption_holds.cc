#include "controller/preemption_holds.h"

#include <algorithm>

#include "sched/queue/gang_placement.h"

namespace gpupool::controller {
namespace {

// Allocates `piece` at `at` as a placeholder of `h`; false when it does not fit.
bool Take(sched::ClusterState& cluster, const sched::Task& piece, const sched::Placement& at,
          sched::HeldResources* h) {
  if (!cluster.Allocate(piece, at).ok()) return false;
  h->tasks.push_back(piece);
  h->placements.push_back(at);
  return true;
}

// Holds what of `task`'s planned placement `at` is free now.
void HoldTask(sched::ClusterState& cluster, const sched::Task& task, const sched::Placement& at,
              sched::HeldResources* h) {
  const sched::NodeState& node = cluster.node(at.node);
  sched::Task piece;
  piece.name = "held for job " + h->for_job;
  piece.cpu_milli = std::min(task.cpu_milli, node.cpu_free_milli);
  piece.memory_mib = std::min(task.memory_mib, node.memory_free_mib);
  if (piece.cpu_milli > 0 || piece.memory_mib > 0) Take(cluster, piece, {at.node, {}}, h);
  for (int32_t g : at.gpus) {
    if (g < 0 || g >= cluster.node(at.node).num_gpus()) continue;
    const int32_t free = cluster.node(at.node).gpu_free_milli[static_cast<size_t>(g)];
    sched::Task gpu = piece;
    gpu.cpu_milli = 0;
    gpu.memory_mib = 0;
    gpu.num_gpu = 1;
    gpu.gpu_milli = std::min(free, task.gpu_milli);
    gpu.owner = task.owner;
    if (gpu.gpu_milli <= 0 || Take(cluster, gpu, {at.node, {g}}, h)) continue;
    // A whole-only device (a MIG instance) is taken whole.
    gpu.gpu_milli = free;
    gpu.owner = 0;
    Take(cluster, gpu, {at.node, {g}}, h);
  }
}

}  // namespace

bool PassHolds::Holds(int64_t id) const {
  return std::find(preemptor.begin(), preemptor.end(), id) != preemptor.end();
}

PassHolds AllocateHolds(SchedInput& in, const PreemptorHolds& holds) {
  PassHolds out;
  if (holds.empty()) return out;
  for (size_t i = 0; i < in.pending.size(); ++i) {
    auto it = holds.find(in.pending_source[i]->id);
    if (it == holds.end()) continue;
    const sched::QueuedJob& q = *in.pending[i];
    std::optional<std::vector<sched::Placement>> planned = in.ToPlacements(it->second.placement);
    if (!planned || planned->size() != q.tasks.size()) continue;  // a node or GPU is gone
    sched::HeldResources& h = out.held.emplace_back();
    h.for_job = q.id;
    h.planned = std::move(*planned);
    h.ready_s = it->second.grace_end_us / 1'000'000;
    h.expires_s = it->second.ExpiresUs() / 1'000'000;
    for (size_t t = 0; t < q.tasks.size(); ++t) HoldTask(in.cluster, q.tasks[t], h.planned[t], &h);
    out.pending.push_back(i);
    out.preemptor.push_back(it->first);
  }
  return out;
}

Status GiveHoldsToPreemptors(sched::ClusterState& trial, const SchedInput& in,
                             const PassHolds& holds,
                             const std::vector<std::optional<std::string>>& reasons) {
  for (size_t i = 0; i < holds.held.size(); ++i) {
    if (!reasons[holds.pending[i]]) continue;  // it started: nothing is held
    const sched::HeldResources& h = holds.held[i];
    const sched::QueuedJob& q = *in.pending[holds.pending[i]];
    GP_RETURN_IF_ERROR(sched::ReleaseGang(trial, h.tasks, h.placements));
    GP_ASSIGN_OR_RETURN(bool placed, sched::AllocateGang(trial, q.tasks, h.planned));
    if (placed) continue;
    GP_ASSIGN_OR_RETURN(bool back, sched::AllocateGang(trial, h.tasks, h.placements));
    if (!back) return Status::Internal("the GPUs held for job " + h.for_job + " were taken");
  }
  return Status::Ok();
}

}  // namespace gpupool::controller
