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

std::string Cpus(int64_t milli) {
  return milli % 1000 == 0 ? fmt::format("{} CPU{}", milli / 1000, milli == 1000 ? "" : "s")
                           : fmt::format("{:.3g} CPUs", static_cast<double>(milli) / 1000);
}

std::string Capability(int32_t c) { return fmt::format("{}.{}", c / 10, c % 10); }

// Up to 8 names, then how many more.
std::string SomeNames(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kShown) out += fmt::format(" and {} more", names.size() - kShown);
  return out;
}

// Why --nodelist / --exclude leave `t` no node of `cluster` (which has some).
std::string NoChosenNode(const ClusterState& cluster, const Task& t) {
  std::vector<std::string> known;
  for (const NodeState& n : cluster.nodes()) known.push_back(n.name);
  std::sort(known.begin(), known.end());
  if (t.nodelist.empty()) {
    return fmt::format("--exclude leaves no node: it names every node of the pool ({})",
                       SomeNames(known));
  }
  const bool any_known = std::any_of(t.nodelist.begin(), t.nodelist.end(), [&](const auto& n) {
    return std::binary_search(known.begin(), known.end(), n);
  });
  if (any_known) return "--exclude leaves none of the nodes of its --nodelist";
  return fmt::format(
      "--nodelist {}: no such node in this pool; its nodes are {} (`gpupool nodes` lists them)",
      SomeNames(t.nodelist), SomeNames(known));
}

// WhyNoNodeCouldHost on the nodes `left` (not empty).
std::string WhyNoneOfCouldHost(const ClusterState& cluster, const Task& t,
                               std::vector<const NodeState*> left) {
  const std::string with = t.num_gpu > 0 ? " with the GPUs" : "";
  if (t.num_gpu > 0) {
    int32_t most = 0;
    std::erase_if(left, [&](const NodeState* n) {
      most = std::max(most, n->num_gpus());
      return n->num_gpus() < t.num_gpu;
    });
    if (left.empty()) {
      return fmt::format("it asks for {} GPU{} on one node; the most any node has is {}", t.num_gpu,
                         t.num_gpu == 1 ? "" : "s", most);
    }
    std::erase_if(left, [&](const NodeState* n) {
      return cluster.UsableGpus(static_cast<int32_t>(n - cluster.nodes().data()), t) < t.num_gpu;
    });
    if (left.empty()) {
      return t.IsFractional()
                 ? "its share needs more GPU memory than any MIG instance has, and no node "
                   "with the GPUs has one outside MIG mode"
                 : fmt::format(
                       "it asks for {} whole GPU{} on one node; MIG instances take "
                       "shares only",
                       t.num_gpu, t.num_gpu == 1 ? "" : "s");
    }
    if (!t.gpu_models.empty()) {
      std::vector<std::string> seen;
      std::erase_if(left, [&](const NodeState* n) {
        if (std::find(seen.begin(), seen.end(), n->gpu_model) == seen.end()) {
          seen.push_back(n->gpu_model);
        }
        return std::find(t.gpu_models.begin(), t.gpu_models.end(), n->gpu_model) ==
               t.gpu_models.end();
      });
      if (left.empty()) {
        return fmt::format("GPU model {}: the nodes with {} GPU{} have {}",
                           fmt::join(t.gpu_models, "|"), t.num_gpu, t.num_gpu == 1 ? "" : "s",
                           fmt::join(seen, ", "));
      }
    }
    if (t.min_capability > 0) {
      int32_t best = 0;
      std::erase_if(left, [&](const NodeState* n) {
        best = std::max(best, n->gpu_capability);
        return n->gpu_capability < t.min_capability;
      });
      if (left.empty()) {
        return fmt::format(
            "compute capability {} or newer (--min-capability): the newest of the "
            "nodes that could otherwise host it is {}",
            Capability(t.min_capability), best == 0 ? "unknown" : Capability(best));
      }
    }
    if (!t.allowed_nodes.empty()) {
      std::erase_if(left, [&](const NodeState* n) {
        return !std::binary_search(t.allowed_nodes.begin(), t.allowed_nodes.end(), n->name);
      });
      if (left.empty()) {
        return fmt::format(
            "its environment runs only on {}, none of which has the GPUs it asks for",
            fmt::join(t.allowed_nodes, ", "));
      }
    }
  }
  int64_t most_cpu = 0;
  std::erase_if(left, [&](const NodeState* n) {
    most_cpu = std::max(most_cpu, n->cpu_capacity_milli);
    return n->cpu_capacity_milli < t.cpu_milli;
  });
  if (left.empty()) {
    return fmt::format("it asks for {} (--cpus); the most any node{} has is {}", Cpus(t.cpu_milli),
                       with, Cpus(most_cpu));
  }
  int64_t most_mem = 0;
  std::erase_if(left, [&](const NodeState* n) {
    most_mem = std::max(most_mem, n->memory_capacity_mib);
    return n->memory_capacity_mib < t.memory_mib;
  });
  if (left.empty()) {
    return fmt::format("it asks for {} MiB of memory (--mem); the most any node{} has is {} MiB",
                       t.memory_mib, with, most_mem);
  }
  return "";  // some node could
}

// Why no node of `cluster` could host `t` even idle: the nodes are narrowed one
// constraint at a time (its --nodelist / --exclude, GPU count, model, capability,
// environment, CPU, memory), and the first constraint that leaves none is named with the
// best any remaining node has.
std::string WhyNoNodeCouldHost(const ClusterState& cluster, const Task& t) {
  std::vector<const NodeState*> left;
  for (int32_t n = 0; n < cluster.num_nodes(); ++n) left.push_back(&cluster.node(n));
  if (left.empty()) return "there are no nodes";
  if (!t.PicksNodes()) return WhyNoneOfCouldHost(cluster, t, std::move(left));
  std::erase_if(left, [&](const NodeState* n) { return !t.NodeChosen(n->name); });
  if (left.empty()) return NoChosenNode(cluster, t);
  std::vector<std::string> names;
  for (const NodeState* n : left) names.push_back(n->name);
  std::string why = WhyNoneOfCouldHost(cluster, t, std::move(left));
  if (!why.empty())
    why += " (of the nodes its --nodelist / --exclude leave: " + SomeNames(names) + ")";
  return why;
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

Result<bool> AllocateGang(ClusterState& cluster, const std::vector<Task>& tasks,
                          const std::vector<Placement>& placements) {
  if (tasks.size() != placements.size()) return false;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (cluster.Allocate(tasks[i], placements[i]).ok()) continue;
    for (size_t k = i; k-- > 0;) GP_RETURN_IF_ERROR(cluster.Release(tasks[k], placements[k]));
    return false;
  }
  return true;
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

bool IsClosed(std::span<const int32_t> closed, const Placement& placement) {
  return std::binary_search(closed.begin(), closed.end(), placement.node);
}

Status ReleaseGangOutside(ClusterState& cluster, const std::vector<Task>& tasks,
                          const std::vector<Placement>& placements,
                          std::span<const int32_t> closed) {
  if (closed.empty() || placements.size() != tasks.size()) {
    return ReleaseGang(cluster, tasks, placements);
  }
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (!IsClosed(closed, placements[i]))
      GP_RETURN_IF_ERROR(cluster.Release(tasks[i], placements[i]));
  }
  return Status::Ok();
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
        *reason = fmt::format("no node could ever host task {}: {}", i + 1,
                              WhyNoNodeCouldHost(cluster, t));
      }
      return true;
    }
  }
  // Tasks of one job choose the same nodes: their capacity bounds the gang.
  if (!tasks.empty() && tasks.front().PicksNodes()) {
    Resources chosen;
    for (const NodeState& n : cluster.nodes()) {
      if (!tasks.front().NodeChosen(n.name)) continue;
      chosen += n.Capacity();
    }
    if (!chosen.Contains(total)) {
      if (reason != nullptr) {
        *reason = fmt::format(
            "the job asks for {} in total, more than the nodes its --nodelist / --exclude "
            "leave have ({})",
            total.ToString(), chosen.ToString());
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
