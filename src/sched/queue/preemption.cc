#include "sched/queue/preemption.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "sched/queue/gang_placement.h"

namespace gpupool::sched {
namespace {

const std::string& GroupOf(const QueuedJob& job, const PreemptionOptions& options) {
  return options.by_project ? job.project : job.user;
}

int64_t GpuMilli(const QueuedJob& job) { return job.Total().gpu_milli; }

// Newest first: the latest start, then the larger id.
bool Newer(const RunningJob& a, const RunningJob& b) {
  if (a.start_s != b.start_s) return a.start_s > b.start_s;
  return a.job->id > b.job->id;
}

Status ReleaseRun(ClusterState& cluster, const RunningJob& r) {
  return ReleaseGang(cluster, r.job->tasks, r.placements);
}

Status AllocateRun(ClusterState& cluster, const RunningJob& r) {
  for (size_t k = 0; k < r.job->tasks.size(); ++k) {
    GP_RETURN_IF_ERROR(cluster.Allocate(r.job->tasks[k], r.placements[k]));
  }
  return Status::Ok();
}

// Whether the gang places on `cluster`; the placement is undone (a trial).
Result<std::optional<std::vector<Placement>>> TryPlace(ClusterState& cluster,
                                                       const std::vector<Task>& tasks,
                                                       PlacementPolicy& policy) {
  GP_ASSIGN_OR_RETURN(GangPlacement g, PlaceGang(cluster, tasks, policy));
  if (!g.placed) return std::optional<std::vector<Placement>>();
  GP_RETURN_IF_ERROR(ReleaseGang(cluster, tasks, g.placements));
  return std::optional<std::vector<Placement>>(std::move(g.placements));
}

double WeightOf(const std::map<std::string, double, std::less<>>& weights, std::string_view g) {
  auto it = weights.find(g);
  return it == weights.end() ? 1.0 : it->second;
}

// Weighted max-min shares (water-filling): the groups whose demand is below their
// weighted part of what is left get their demand, smallest demand per weight first; the
// rest is split in proportion to the weights of the groups still unserved.
std::map<std::string, int64_t> WaterFill(
    const std::map<std::string, int64_t>& demand, int64_t capacity,
    const std::map<std::string, double, std::less<>>& weights) {
  std::vector<std::tuple<double, int64_t, std::string, double>> by_demand;  // (d / w, d, g, w)
  double weight_left = 0;
  for (const auto& [g, d] : demand) {
    const double w = WeightOf(weights, g);
    by_demand.emplace_back(static_cast<double>(d) / w, d, g, w);
    weight_left += w;
  }
  std::sort(by_demand.begin(), by_demand.end());
  std::map<std::string, int64_t> out;
  int64_t left = capacity;
  for (size_t k = 0; k < by_demand.size(); ++k) {
    const auto& [per_weight, d, g, w] = by_demand[k];
    // The last group's part is all that is left (no rounding of w / weight_left).
    const int64_t part = k + 1 == by_demand.size()
                             ? left
                             : static_cast<int64_t>(static_cast<double>(left) * w / weight_left);
    const int64_t share = std::min(d, part);
    out[g] = share;
    left -= share;
    weight_left -= w;
  }
  return out;
}

}  // namespace

double GroupWeight(const PreemptionOptions& options, std::string_view group) {
  return WeightOf(options.weights, group);
}

int64_t GroupUse::FairShare() const {
  return active_groups == 0 ? capacity_gpu_milli
                            : capacity_gpu_milli / static_cast<int64_t>(active_groups);
}

int64_t GroupUse::ShareOf(const std::string& group) const {
  if (share_milli.empty()) return FairShare();
  auto it = share_milli.find(group);
  return it == share_milli.end() ? FairShare() : it->second;
}

GroupUse UseOf(const std::vector<PreemptibleRun>& running,
               const std::vector<const QueuedJob*>& pending, int64_t capacity_gpu_milli,
               const PreemptionOptions& options, const ClusterState* cluster) {
  GroupUse use;
  use.capacity_gpu_milli = capacity_gpu_milli;
  std::set<std::string> active;
  for (const PreemptibleRun& r : running) {
    const std::string& g = GroupOf(*r.run->job, options);
    use.gpu_milli[g] +=
        cluster != nullptr ? ChargedUse(*cluster, *r.run).gpu_milli : GpuMilli(*r.run->job);
    active.insert(g);
  }
  std::map<std::string, int64_t> demand = use.gpu_milli;
  for (const QueuedJob* p : pending) {
    active.insert(GroupOf(*p, options));
    demand[GroupOf(*p, options)] += GpuMilli(*p);
  }
  use.active_groups = active.size();
  if (options.shares_by_demand && !demand.empty()) {
    use.share_milli = WaterFill(demand, capacity_gpu_milli, options.weights);
  } else if (!options.weights.empty() && !active.empty()) {
    // In proportion to the weights: as water-filling with every demand unbounded.
    std::map<std::string, int64_t> unbounded;
    for (const std::string& g : active) unbounded[g] = capacity_gpu_milli;
    use.share_milli = WaterFill(unbounded, capacity_gpu_milli, options.weights);
  }
  return use;
}

std::vector<size_t> PreemptionCandidates(const QueuedJob& waiting,
                                         const std::vector<PreemptibleRun>& running,
                                         const GroupUse& use, int64_t now_s,
                                         const PreemptionOptions& options) {
  std::vector<size_t> out;
  const std::string& mine = GroupOf(waiting, options);
  auto used = [&use](const std::string& g) {
    auto it = use.gpu_milli.find(g);
    return it == use.gpu_milli.end() ? int64_t{0} : it->second;
  };
  const bool starving =
      options.starving_after_s > 0 && now_s - waiting.submit_s >= options.starving_after_s;
  const bool under_share = starving || used(mine) + GpuMilli(waiting) <= use.ShareOf(mine);
  for (size_t i = 0; i < running.size(); ++i) {
    const PreemptibleRun& r = running[i];
    if (!r.preemptible || now_s - r.run->start_s < options.min_runtime_s) continue;
    const QueuedJob& victim = *r.run->job;
    const bool lower_priority = victim.priority < waiting.priority &&
                                (!options.priority_within_user || victim.user == waiting.user);
    const std::string& theirs = GroupOf(victim, options);
    const bool over_share = theirs != mine && used(theirs) > use.ShareOf(theirs);
    if (lower_priority || (under_share && over_share)) out.push_back(i);
  }
  return out;
}

Result<std::optional<Victims>> ChooseVictims(const ClusterState& cluster, const QueuedJob& waiting,
                                             const std::vector<PreemptibleRun>& running,
                                             const std::vector<size_t>& candidates,
                                             PlacementPolicy& policy) {
  std::vector<size_t> order = candidates;
  std::sort(order.begin(), order.end(),
            [&running](size_t a, size_t b) { return Newer(*running[a].run, *running[b].run); });
  ClusterState trial = cluster;
  const int64_t need = GpuMilli(waiting);
  std::optional<std::vector<Placement>> placed;
  // A gang that fits as things are needs no victim: what keeps it waiting is the queue's
  // order or a reservation, which preemption does not override.
  if (trial.TotalFree().gpu_milli >= need) {
    GP_ASSIGN_OR_RETURN(placed, TryPlace(trial, waiting.tasks, policy));
    if (placed) return std::optional<Victims>();
  }
  std::vector<size_t> chosen;
  for (size_t i : order) {
    GP_RETURN_IF_ERROR(ReleaseRun(trial, *running[i].run));
    chosen.push_back(i);
    if (trial.TotalFree().gpu_milli < need) continue;  // cannot fit yet: no trial placement
    GP_ASSIGN_OR_RETURN(placed, TryPlace(trial, waiting.tasks, policy));
    if (placed) break;
  }
  if (!placed) return std::optional<Victims>();
  // Put back every victim the gang can do without, oldest first (the newest work is the
  // cheapest to lose, so it is the last to be spared). At least one stays (without any,
  // the gang did not fit), and `placed` always holds the placement on the current state
  // (a put-back that fails is undone).
  for (size_t k = chosen.size(); k-- > 0;) {
    const RunningJob& r = *running[chosen[k]].run;
    GP_RETURN_IF_ERROR(AllocateRun(trial, r));
    GP_ASSIGN_OR_RETURN(std::optional<std::vector<Placement>> still,
                        TryPlace(trial, waiting.tasks, policy));
    if (still) {
      placed = std::move(still);
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      GP_RETURN_IF_ERROR(ReleaseRun(trial, r));
    }
  }
  Victims v;
  v.running = std::move(chosen);
  v.placements = std::move(*placed);
  return std::optional<Victims>(std::move(v));
}

}  // namespace gpupool::sched
