#include "sched/queue/gang_placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <tuple>

namespace gpupool::sched {
namespace {

// Undoes the first `count` placements of `order`, newest first. Release of a placement
// we just allocated cannot fail unless ClusterState is broken, so the first failure is
// returned but the rest are still released.
Status Rollback(ClusterState& cluster, const std::vector<Task>& tasks,
                const std::vector<size_t>& order, const std::vector<Placement>& placements,
                size_t count) {
  Status first;
  for (size_t k = count; k-- > 0;) {
    const size_t i = order[k];
    Status s = cluster.Release(tasks[i], placements[i]);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

}  // namespace

Result<GangPlacement> PlaceGang(ClusterState& cluster, const std::vector<Task>& tasks,
                                PlacementPolicy& policy) {
  GangPlacement out;
  if (tasks.empty()) {
    out.placed = true;
    return out;
  }
  Resources total;
  for (const Task& t : tasks) total += t.Total();
  if (!cluster.TotalFree().Contains(total)) {
    out.reason = "the cluster has less free capacity than the job asks for in total";
    return out;
  }
  std::vector<size_t> order(tasks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Task& x = tasks[a];
    const Task& y = tasks[b];
    return std::tuple(x.TotalGpuMilli(), x.cpu_milli, x.memory_mib) >
           std::tuple(y.TotalGpuMilli(), y.cpu_milli, y.memory_mib);
  });
  out.placements.resize(tasks.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    PlacementDecision d = policy.Place(cluster, tasks[i]);
    if (!d.placed) {
      GP_RETURN_IF_ERROR(Rollback(cluster, tasks, order, out.placements, k));
      out.placements.clear();
      out.reason = tasks.size() == 1 ? d.reason
                                     : fmt::format("task {} of {} ('{}'): {}", i + 1, tasks.size(),
                                                   tasks[i].name, d.reason);
      return out;
    }
    Status s = cluster.Allocate(tasks[i], d.placement);
    if (!s.ok()) {
      GP_RETURN_IF_ERROR(Rollback(cluster, tasks, order, out.placements, k));
      return Status::Internal(
          fmt::format("placement policy '{}' proposed a placement the "
                      "cluster refused: {}",
                      policy.name(), s.message()));
    }
    out.placements[i] = std::move(d.placement);
  }
  out.placed = true;
  return out;
}

Status ReleaseGang(ClusterState& cluster, const std::vector<Task>& tasks,
                   const std::vector<Placement>& placements) {
  if (placements.size() != tasks.size()) {
    return Status::InvalidArgument(
        fmt::format("gang release: {} placements for {} tasks", placements.size(), tasks.size()));
  }
  std::vector<size_t> order(tasks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  return Rollback(cluster, tasks, order, placements, tasks.size());
}

bool GangObviouslyUnplaceable(const ClusterState& cluster, const std::vector<Task>& tasks,
                              std::string* reason) {
  Resources total;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    total += t.Total();
    bool any = false;
    for (int32_t n = 0; n < cluster.num_nodes() && !any; ++n) any = cluster.CouldEverHost(n, t);
    if (!any) {
      if (reason != nullptr) {
        *reason = fmt::format(
            "no node could ever host task {} ({} GPUs x {} thousandths{}, {})", i + 1, t.num_gpu,
            t.gpu_milli,
            t.gpu_models.empty() ? "" : fmt::format(" of model {}", fmt::join(t.gpu_models, "|")),
            Resources{t.cpu_milli, t.memory_mib, 0}.ToString());
      }
      return true;
    }
  }
  if (!cluster.TotalCapacity().Contains(total)) {
    if (reason != nullptr) {
      *reason = fmt::format("the job asks for {} in total, more than the cluster's {}",
                            total.ToString(), cluster.TotalCapacity().ToString());
    }
    return true;
  }
  return false;
}

}  // namespace gpupool::sched
