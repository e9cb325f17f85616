#include "sched/queue/gang_placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <tuple>
#include <utility>

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

// The GPU shares of one gang each get a GPU of their own (docs/sharing.md, "Gangs of
// shares"): its tasks are the ranks of one distributed job, and NCCL refuses two ranks
// of a communicator on one device ("Duplicate GPU detected"). Once a share of the gang
// is placed, what is left of its GPU is held by a stand-in task for the rest of the
// placement, so the policy sees that GPU full for the gang's later shares and no policy
// needs to know about gangs. The holds go through Allocate and Release, so every cache
// keyed by node version or synced from the journal (placement_policy.h) sees them, and
// they are released before PlaceGang returns: shares of other jobs still pack onto the
// GPU. A MIG instance is taken whole by a share; the other instances of its physical GPU
// (NodeState::physical_gpus) are held, as NCCL takes them for the same device (they
// share its PCI bus id). Shares with Task::pack_shares (a gang held for mpirun) are not
// held apart.
class SiblingHolds {
 public:
  explicit SiblingHolds(const std::vector<Task>& tasks) : active_(CountApart(tasks) > 1) {}

  // The tasks of `tasks` that each need a GPU of their own: the shares not packed
  // (Task::pack_shares: a gang held for mpirun, whose ranks on a node are one launch).
  static int64_t CountApart(const std::vector<Task>& tasks) {
    return std::count_if(tasks.begin(), tasks.end(), Apart);
  }
  static bool Apart(const Task& t) { return t.IsFractional() && !t.pack_shares; }

  // Holds the rest of the physical GPU that share `t` took at `p`: of the device, and of
  // the other instances of its GPU when it is a MIG instance.
  Status Hold(ClusterState& cluster, const Task& t, const Placement& p) {
    if (!active_ || !Apart(t) || p.gpus.size() != 1) return Status::Ok();
    const int32_t g = p.gpus.front();
    GP_RETURN_IF_ERROR(HoldDevice(cluster, t, p.node, g));
    const std::vector<int32_t>& physical = cluster.node(p.node).physical_gpus;
    for (size_t h = 0; h < physical.size(); ++h) {
      if (static_cast<int32_t>(h) != g && physical[h] == physical[static_cast<size_t>(g)]) {
        GP_RETURN_IF_ERROR(HoldDevice(cluster, t, p.node, static_cast<int32_t>(h)));
      }
    }
    return Status::Ok();
  }

  // Releases every hold, newest first; the first failure is returned, the rest still run.
  Status ReleaseAll(ClusterState& cluster) {
    Status first;
    for (size_t k = holds_.size(); k-- > 0;) {
      Status s = cluster.Release(holds_[k].first, holds_[k].second);
      if (!s.ok() && first.ok()) first = s;
    }
    holds_.clear();
    return first;
  }

  bool any() const { return !holds_.empty(); }

 private:
  // Holds what is free of GPU g of node `node`.
  Status HoldDevice(ClusterState& cluster, const Task& t, int32_t node, int32_t g) {
    const int32_t free = cluster.node(node).gpu_free_milli[static_cast<size_t>(g)];
    if (free <= 0) return Status::Ok();
    Task hold;
    hold.name = "the rest of a GPU a task of the same gang shares";
    hold.job_id = t.job_id;
    hold.num_gpu = 1;
    hold.gpu_milli = free;  // no owner: it may stand on a single-owner GPU the task owns
    Placement at{node, {g}};
    GP_RETURN_IF_ERROR(cluster.Allocate(hold, at));
    holds_.emplace_back(std::move(hold), std::move(at));
    return Status::Ok();
  }

  bool active_;  // the gang has two shares or more
  std::vector<std::pair<Task, Placement>> holds_;
};

// How many physical GPUs of node n share `t` could ever use (ClusterState::UsableGpus,
// with the MIG instances of one GPU counted once).
int32_t PhysicalGpusFor(const ClusterState& cluster, int32_t n, const Task& t) {
  const NodeState& node = cluster.node(n);
  if (node.physical_gpus.empty() || node.whole_only_gpus == 0) return cluster.UsableGpus(n, t);
  std::vector<int32_t> seen;
  const int64_t need = cluster.GpuMemoryNeedMib(n, t);
  for (int32_t g = 0; g < node.num_gpus(); ++g) {
    const bool instance = (node.whole_only_gpus >> g & 1) != 0;
    const int64_t memory = node.device_memory_mib.empty()
                               ? node.gpu_memory_mib
                               : node.device_memory_mib[static_cast<size_t>(g)];
    if (instance && memory < need) continue;
    seen.push_back(node.physical_gpus[static_cast<size_t>(g)]);
  }
  std::sort(seen.begin(), seen.end());
  return static_cast<int32_t>(std::unique(seen.begin(), seen.end()) - seen.begin());
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
  left.reserve(static_cast<size_t>(cluster.num_nodes()));
  for (int32_t n = 0; n < cluster.num_nodes(); ++n) left.push_back(&cluster.node(n));
  if (left.empty()) return "there are no nodes";
  if (!t.PicksNodes()) return WhyNoneOfCouldHost(cluster, t, std::move(left));
  std::erase_if(left, [&](const NodeState* n) { return !t.NodeChosen(n->name); });
  if (left.empty()) return NoChosenNode(cluster, t);
  std::vector<std::string> names;
  names.reserve(left.size());
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
  SiblingHolds holds(tasks);
  // Undoes the holds and the first `count` placements of `order`.
  auto undo = [&](size_t count) {
    Status held = holds.ReleaseAll(cluster);
    Status placed = Rollback(cluster, tasks, order, out.placements, count);
    return held.ok() ? placed : held;
  };
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    PlacementDecision d = policy.Place(cluster, tasks[i]);
    if (!d.placed) {
      const bool held = holds.any();
      GP_RETURN_IF_ERROR(undo(k));
      out.placements.clear();
      out.reason = tasks.size() == 1 ? d.reason
                                     : fmt::format("task {} of {} ('{}'): {}", i + 1, tasks.size(),
                                                   tasks[i].name, d.reason);
      if (held && SiblingHolds::Apart(tasks[i])) {
        out.reason += " (the GPU shares of one job each take a GPU of their own)";
      }
      return out;
    }
    Status s = cluster.Allocate(tasks[i], d.placement);
    if (!s.ok()) {
      GP_RETURN_IF_ERROR(undo(k));
      return Status::Internal(
          fmt::format("placement policy '{}' proposed a placement the "
                      "cluster refused: {}",
                      policy.name(), s.message()));
    }
    out.placements[i] = std::move(d.placement);
    if (Status h = holds.Hold(cluster, tasks[i], out.placements[i]); !h.ok()) {
      GP_RETURN_IF_ERROR(undo(k + 1));
      return Status::Internal("gang placement could not hold a share's GPU: " + h.message());
    }
  }
  GP_RETURN_IF_ERROR(holds.ReleaseAll(cluster));
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
        // Task indices count from 0, as GPUPOOL_TASK_INDEX and `--task N` do.
        *reason = fmt::format("no node could ever host {}: {}",
                              tasks.size() == 1 ? std::string("it")
                                                : fmt::format("task {} of its {}", i, tasks.size()),
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
  if (const int64_t shares = SiblingHolds::CountApart(tasks); shares > 1) {
    // Each share needs a physical GPU of its own (SiblingHolds); a node offers at most
    // the ones the most accommodating of the shares could use there.
    int64_t gpus = 0;
    for (int32_t n = 0; n < cluster.num_nodes(); ++n) {
      int32_t most = 0;
      for (const Task& t : tasks) {
        if (SiblingHolds::Apart(t) && cluster.CouldEverHost(n, t)) {
          most = std::max(most, PhysicalGpusFor(cluster, n, t));
        }
      }
      gpus += most;
    }
    if (gpus < shares) {
      if (reason != nullptr) {
        *reason = fmt::format(
            "its {} tasks with a GPU share each need a GPU of their own (NCCL runs one rank "
            "per GPU); the nodes that could host them have {} GPU{} in all",
            shares, gpus, gpus == 1 ? "" : "s");
      }
      return true;
    }
  }
  return false;
}

}  // namespace gpupool::sched
